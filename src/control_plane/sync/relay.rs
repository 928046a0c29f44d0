//! Holds relayed by remote sidecars, so approvers on the control plane see and resolve them:
//!
//! * `POST /{tenant_id}/service/sync/holds` `{"endpoint_id", "holds": [HoldRecord…]}` →
//!   `{"stored": n}`: the sidecar reports each hold when it is created and again when it
//!   resolves locally (timeout, or an approval on the sidecar). `write`.
//! * `GET /{tenant_id}/service/sync/holds/resolutions?endpoint_id=E&wait_seconds=N` →
//!   `{"resolutions": [{"hold_token", "decision": "approve"|"deny", "approver", "reason"}]}`:
//!   decisions made on the control plane that endpoint E has not acknowledged. Long-poll: with
//!   nothing to report it waits up to `wait_seconds` (0..=30, default 0) for a decision. `read`.
//! * `POST /{tenant_id}/service/sync/holds/ack` `{"endpoint_id", "hold_tokens": [...]}` →
//!   `{"acked": n}` once the sidecar has applied them. `write`.
//!
//! The approvals calls (`GET /approvals`, `POST /approvals/<token>/approve|deny`) serve relayed
//! holds next to the process's own ([`Relay::pending`], [`Relay::decide`]); a relayed hold is
//! decided once (409 after). Stored in the `Relayed` tree under the hold token.

use crate::api::ApiError;
use crate::holds::HoldRecord;
use crate::ids;
use crate::store::{Store, Tree, TreeName};
use crate::vocab::Decision;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Mutex};

/// A decision made on the control plane about a relayed hold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RelayDecision {
    /// Approve (true) or deny.
    pub approve: bool,
    /// Who decided.
    pub approver: String,
    /// Why, if given.
    pub reason: Option<String>,
    /// When.
    pub decided_at: DateTime<Utc>,
}

/// A hold as the control plane knows it from its sidecar.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RelayedHold {
    /// The sidecar that holds the call.
    pub endpoint_id: String,
    /// The sidecar's record (its latest report).
    pub hold: HoldRecord,
    /// The control plane's decision, once made.
    pub decision: Option<RelayDecision>,
    /// True once the sidecar has applied the decision.
    pub acked: bool,
}

/// One decision for a sidecar to apply.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RelayResolution {
    /// The hold.
    pub hold_token: String,
    /// `approve` or `deny`.
    pub decision: String,
    /// Who decided.
    pub approver: String,
    /// Why, if given.
    pub reason: Option<String>,
}

/// The relayed holds of this control plane.
pub struct Relay {
    store: Store,
    tree: Tree,
    lock: Mutex<()>,
    changed: watch::Sender<u64>,
}

impl Relay {
    /// Opens the `Relayed` tree.
    pub fn new(store: &Store) -> Relay {
        Relay {
            store: store.clone(),
            tree: store.tree(TreeName::Relayed),
            lock: Mutex::new(()),
            changed: watch::channel(0).0,
        }
    }

    /// Stores the sidecar's reports. Records of another tenant are refused (422). Returns the
    /// changes worth a callback: holds seen for the first time (`hold.created`) and holds whose
    /// report turned resolved (`hold.resolved`).
    pub async fn report(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        holds: Vec<HoldRecord>,
    ) -> Result<Vec<(&'static str, HoldRecord)>, ApiError> {
        if let Some(h) = holds.iter().find(|h| h.call.tenant_id != tenant_id) {
            return Err(ApiError::Unprocessable(format!(
                "holds: hold {} belongs to another tenant",
                h.call.token
            )));
        }
        let _guard = self.lock.lock().await;
        let mut changes = Vec::new();
        for hold in holds {
            let key = hold.call.token.clone();
            let prior: Option<RelayedHold> = self.tree.get(key.as_bytes())?;
            match &prior {
                None if !hold.resolved => changes.push(("hold.created", hold.clone())),
                Some(p) if hold.resolved && !p.hold.resolved => {
                    changes.push(("hold.resolved", hold.clone()))
                }
                None => changes.push(("hold.resolved", hold.clone())),
                Some(_) => {}
            }
            let next = match prior {
                Some(p) if p.endpoint_id != endpoint_id => {
                    return Err(ApiError::Conflict(format!(
                        "hold {key} was relayed by another endpoint"
                    )))
                }
                Some(p) => RelayedHold { hold, ..p },
                None => RelayedHold {
                    endpoint_id: endpoint_id.to_string(),
                    hold,
                    decision: None,
                    acked: false,
                },
            };
            self.tree.put(key.as_bytes(), &next)?;
        }
        self.store.flush().await?;
        Ok(changes)
    }

    /// Relayed holds of `tenant_id` still waiting for a person: pending at the sidecar, not yet
    /// decided here, not expired. Soonest expiry first.
    pub fn pending(&self, tenant_id: &str) -> Result<Vec<RelayedHold>, ApiError> {
        let now = ids::now();
        let mut out: Vec<RelayedHold> = self
            .tree
            .scan::<RelayedHold>(b"")?
            .into_iter()
            .map(|(_, r)| r)
            .filter(|r| r.hold.call.tenant_id == tenant_id)
            .filter(|r| !r.hold.resolved && r.decision.is_none() && r.hold.expires_at > now)
            .collect();
        out.sort_by_key(|r| r.hold.expires_at);
        Ok(out)
    }

    /// Decides a relayed hold once. `Ok(None)`: no such relayed hold in this tenant (the caller
    /// answers 404). Errors: 409 when it was already decided here or resolved at the sidecar.
    /// The returned record shows the decision as its resolution (the sidecar issues the
    /// terminal receipt when it applies it).
    pub async fn decide(
        &self,
        tenant_id: &str,
        token: &str,
        decision: RelayDecision,
    ) -> Result<Option<HoldRecord>, ApiError> {
        let _guard = self.lock.lock().await;
        let Some(mut r) = self.tree.get::<RelayedHold>(token.as_bytes())? else {
            return Ok(None);
        };
        if r.hold.call.tenant_id != tenant_id {
            return Ok(None);
        }
        if r.decision.is_some() || r.hold.resolved {
            return Err(ApiError::Conflict("hold already resolved".into()));
        }
        r.decision = Some(decision.clone());
        self.tree.put(token.as_bytes(), &r)?;
        self.store.flush().await?;
        self.changed.send_modify(|n| *n += 1);
        let mut view = r.hold;
        view.resolved = true;
        view.resolution = Some(if decision.approve {
            Decision::Allow
        } else {
            Decision::Block
        });
        view.resolved_by = Some(decision.approver);
        view.resolved_at = Some(decision.decided_at);
        view.reason = decision.reason;
        Ok(Some(view))
    }

    /// Decisions endpoint `endpoint_id` of `tenant_id` has not acknowledged yet.
    pub fn resolutions(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
    ) -> Result<Vec<RelayResolution>, ApiError> {
        Ok(self
            .tree
            .scan::<RelayedHold>(b"")?
            .into_iter()
            .map(|(_, r)| r)
            .filter(|r| r.hold.call.tenant_id == tenant_id && r.endpoint_id == endpoint_id)
            .filter(|r| !r.acked && !r.hold.resolved)
            .filter_map(|r| {
                let d = r.decision?;
                Some(RelayResolution {
                    hold_token: r.hold.call.token,
                    decision: if d.approve { "approve" } else { "deny" }.into(),
                    approver: d.approver,
                    reason: d.reason,
                })
            })
            .collect())
    }

    /// Marks decisions as applied by the sidecar. Returns how many were marked.
    pub async fn ack(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        tokens: &[String],
    ) -> Result<usize, ApiError> {
        let _guard = self.lock.lock().await;
        let mut count = 0;
        for token in tokens {
            let Some(mut r) = self.tree.get::<RelayedHold>(token.as_bytes())? else {
                continue;
            };
            if r.hold.call.tenant_id == tenant_id && r.endpoint_id == endpoint_id && !r.acked {
                r.acked = true;
                self.tree.put(token.as_bytes(), &r)?;
                count += 1;
            }
        }
        self.store.flush().await?;
        Ok(count)
    }

    /// Changes whenever a decision is made here (long-polls wait on it).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}
