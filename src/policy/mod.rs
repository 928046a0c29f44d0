//! The policy engine: pack loading and versioning, CEL rules, built-in controls, risk, and
//! `PolicySnapshot::decide` (DESIGN.md, "Policy pack" and "Decision algorithm"; the pack
//! format is documented in docs/policy.md).
//!
//! A [`PolicySnapshot`] is an immutable, validated, compiled pack; [`PolicyHandle`] swaps
//! snapshots atomically on reload. [`testing`] backs `toolgate policy check` and
//! `toolgate policy test`.

mod cel_env;
mod cel_vars;
mod controls;
mod decide;
mod glob;
pub mod history;
mod lint;
mod loader;
mod mode;
mod pack;
mod prefilter;
pub mod proxy;
pub mod request;
mod risk;
mod rules;
pub mod testing;
pub mod verdict;

#[cfg(test)]
mod test_support;

pub use pack::AgentDefaults;
pub use proxy::ProxyPolicy;
pub use request::EnforcementRequest;
pub use verdict::{DecideContext, Finding, PolicyVersion, ScoreComponent, Verdict};

use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Errors of pack loading, checking and testing. A pack that fails to load is refused as a
/// whole; the caller keeps its previous snapshot.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A pack file could not be read (including a missing `pack.toml`).
    #[error("cannot read {path}: {message}")]
    Io {
        /// File or directory.
        path: String,
        /// OS reason.
        message: String,
    },
    /// A pack or test file is not valid TOML or does not fit the schema (unknown keys, wrong
    /// types, out-of-range values, duplicate rule ids, ...).
    #[error("{path}: {message}")]
    Invalid {
        /// File.
        path: String,
        /// What is wrong, naming the line and/or field.
        message: String,
    },
    /// A rule's CEL condition does not compile, or a literal `matches` regex is invalid.
    #[error("{path}: rule `{rule}`: {message}")]
    Cel {
        /// Rule file.
        path: String,
        /// Rule id.
        rule: String,
        /// The compiler's message, on one line.
        message: String,
    },
}

/// An immutable, validated policy pack with every rule compiled, the CEL root context built
/// and the DLP detectors compiled. Shared between threads behind an `Arc`.
#[derive(Debug)]
pub struct PolicySnapshot {
    version: PolicyVersion,
    controls: controls::Controls,
    rules: rules::Rules,
    risk: risk::RiskModel,
    default_timeout: u64,
    agents: BTreeMap<String, AgentDefaults>,
    proxy: ProxyPolicy,
    files: Arc<Vec<(String, Vec<u8>)>>,
}

impl PolicySnapshot {
    /// Loads `dir/pack.toml`, `dir/rules/*.toml` and `dir/routes/*.toml` (sorted by path),
    /// validates everything (unknown keys are errors), compiles the CEL rules, DLP detectors
    /// and routes, and computes the version digest (see docs/policy.md, "Versioning").
    ///
    /// Errors: [`PolicyError::Io`] for unreadable files or a missing pack.toml,
    /// [`PolicyError::Invalid`] for schema and value problems, [`PolicyError::Cel`] for rule
    /// conditions that do not compile.
    pub fn load(dir: &Path) -> Result<PolicySnapshot, PolicyError> {
        loader::load(dir)
    }

    /// Name, version and digest of this pack.
    pub fn version(&self) -> &PolicyVersion {
        &self.version
    }

    /// Decides one request: pure, synchronous, never panics. The algorithm is documented in
    /// `src/policy/decide.rs` and docs/policy.md ("How a decision is made"). CEL evaluation
    /// errors are reported in `Verdict::evaluation_errors`, not returned.
    pub fn decide(&self, req: &EnforcementRequest, ctx: &DecideContext) -> Verdict {
        decide::decide(self, req, ctx)
    }

    /// `[holds] default_step_up_timeout_seconds` (default 300): the hold lifetime of a
    /// STEP_UP whose deciding finding names none, in seconds.
    pub fn default_step_up_timeout_seconds(&self) -> u64 {
        self.default_timeout
    }

    /// Every file of this pack that its digest covers, as (relative path, bytes), sorted: the
    /// policy bundle a control plane serves to its sidecars (who rebuild the same digest).
    pub fn files(&self) -> &[(String, Vec<u8>)] {
        &self.files
    }

    /// `[agents.<agent_id>]`: the defaults the forward proxy fills in for this agent's calls,
    /// or None when the pack does not name the agent.
    pub fn agent_defaults(&self, agent_id: &str) -> Option<&AgentDefaults> {
        self.agents.get(agent_id)
    }

    /// The forward proxy's settings and REST routes (`[proxy]` and `routes/*.toml`;
    /// docs/policy.md, "Forward proxy"); the defaults when the pack has neither.
    pub fn proxy(&self) -> &ProxyPolicy {
        &self.proxy
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

    /// Swaps in a snapshot loaded elsewhere (a policy bundle from the control plane).
    pub fn replace(&self, snapshot: PolicySnapshot) {
        self.current.store(Arc::new(snapshot));
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

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::{pack_dir, MINIMAL_PACK};

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn snapshots_are_shareable_and_reload_keeps_the_previous_one_on_error() {
        assert_send_sync::<PolicySnapshot>();
        let good = pack_dir(MINIMAL_PACK, &[]);
        let handle = PolicyHandle::new(PolicySnapshot::load(good.path()).unwrap());
        let before = handle.current().version().clone();
        let bad = pack_dir("name = \"p\"\n", &[]);
        assert!(handle.reload(bad.path()).is_err());
        assert_eq!(handle.current().version(), &before);
        let next = pack_dir(MINIMAL_PACK, &[("r.toml", "# changed\n")]);
        let v = handle.reload(next.path()).unwrap();
        assert_ne!(v.digest, before.digest);
        assert_eq!(handle.current().version(), &v);
    }

    #[test]
    fn accessors_read_the_pack() {
        let dir = pack_dir(
            &format!(
                "{MINIMAL_PACK}[holds]\ndefault_step_up_timeout_seconds = 120\n\
                 [agents.support-bot]\napproved_scope = [\"crm.*\"]\nenforcement_mode = \"observe\"\n\
                 purpose = \"support\"\n"
            ),
            &[],
        );
        let snap = PolicySnapshot::load(dir.path()).unwrap();
        assert_eq!(snap.default_step_up_timeout_seconds(), 120);
        let agent = snap.agent_defaults("support-bot").unwrap();
        assert_eq!(agent.approved_scope, ["crm.*"]);
        assert_eq!(
            agent.enforcement_mode,
            crate::vocab::EnforcementMode::Observe
        );
        assert_eq!(agent.purpose.as_deref(), Some("support"));
        assert!(snap.agent_defaults("other").is_none());
        assert_eq!(snap.version().name, "test");
    }
}
