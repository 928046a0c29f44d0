//! The admin HTTP API ({base_url}, SPEC.md "Endpoints"): one file per resource.

pub mod error;
pub mod json;

pub use error::ApiError;
pub use json::{ApiJson, JsonBytes};
