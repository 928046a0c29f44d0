//! The policy engine: pack loading and versioning, CEL rules, built-in controls, risk, and
//! `PolicySnapshot::decide` (DESIGN.md, "Policy pack" and "Decision algorithm").

pub mod request;
pub mod verdict;

pub use request::EnforcementRequest;
pub use verdict::{DecideContext, Finding, PolicyVersion, ScoreComponent, Verdict};

use arc_swap::ArcSwap;
use std::path::Path;
use std::sync::Arc;

/// Errors of pack loading, checking and testing.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A pack file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// File or directory.
        path: String,
        /// OS reason.
        message: String,
    },
    /// A pack file is not valid TOML or does not fit the schema.
    #[error("{path}: {message}")]
    Invalid {
        /// File.
        path: String,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// An immutable, validated policy pack. STUB: replaced by the policy engine.
#[derive(Debug)]
pub struct PolicySnapshot {
    version: PolicyVersion,
}

impl PolicySnapshot {
    /// Loads and validates the pack in `dir`.
    pub fn load(dir: &Path) -> Result<PolicySnapshot, PolicyError> {
        let _ = dir;
        Ok(PolicySnapshot {
            version: PolicyVersion {
                name: "stub".into(),
                version: "0".into(),
                digest: "0".repeat(64),
            },
        })
    }

    /// Name, version and digest of this pack.
    pub fn version(&self) -> &PolicyVersion {
        &self.version
    }

    /// Decides one request. Pure.
    pub fn decide(&self, req: &EnforcementRequest, ctx: &DecideContext) -> Verdict {
        let _ = (req, ctx);
        todo!("policy engine")
    }
}

/// The current snapshot, swapped atomically on reload; decisions in flight keep the one they
/// started with.
pub struct PolicyHandle {
    current: ArcSwap<PolicySnapshot>,
}

impl PolicyHandle {
    /// Wraps an initial snapshot.
    pub fn new(snapshot: PolicySnapshot) -> Self {
        PolicyHandle {
            current: ArcSwap::from_pointee(snapshot),
        }
    }

    /// The snapshot to decide with.
    pub fn current(&self) -> Arc<PolicySnapshot> {
        self.current.load_full()
    }

    /// Loads `dir`; on success swaps it in and returns its version, on failure keeps the
    /// previous snapshot and returns the error.
    pub fn reload(&self, dir: &Path) -> Result<PolicyVersion, PolicyError> {
        let next = PolicySnapshot::load(dir)?;
        let version = next.version().clone();
        self.current.store(Arc::new(next));
        Ok(version)
    }
}
