//! The sidecar's link to a remote control plane (`toolgate serve --control-plane URL --tenant T
//! --endpoint-id E`): registration and check-ins, policy bundle and key snapshot sync, durable
//! event shipping, and the relay of pending holds and their resolutions.

pub mod client;

pub use client::{CpClient, LinkError};
