//! toolgate: a runtime policy enforcement sidecar for AI agents. Every tool call is checked
//! against a local policy snapshot and comes back ALLOW, MODIFY, STEP_UP or BLOCK, with evidence.
//!
//! See `../shared/SPEC.md` for the API contract and `DESIGN.md` for the architecture.
#![warn(missing_docs)]

pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
pub mod config;
pub mod control_plane;
pub mod explain;
pub mod holds;
pub mod ids;
pub mod ledger;
pub mod link;
pub mod policy;
pub mod proxy;
pub mod sessions;
pub mod state;
pub mod store;
pub mod tls;
pub mod vocab;
