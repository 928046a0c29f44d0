//! HoldBook: STEP_UP holds — create, poll, resolve exactly once (approve, deny, timeout), expire;
//! persistence in sled; waking waiters (SPEC.md, "States and transitions", "Hold").
//!
//! Invariants:
//! * A hold is written and flushed before its STEP_UP decision is returned, and its resolution is
//!   written and flushed before the resolver is acknowledged; a restart reloads pending holds and
//!   re-arms their timers (an already-passed expiry resolves as `timeout` at once).
//! * Resolution is one transition under the hold's lock: the second resolver gets
//!   [`HoldError::AlreadyResolved`] (409).
//! * Waiters (long-poll, held proxied calls) wake through a `watch` channel, never by polling storage.

use crate::ids;
use crate::ledger::{Receipt, ReceiptBody, ReceiptKind, ReceiptLog};
use crate::store::{Store, Tree, TreeName};
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use chrono::{DateTime, Utc};
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio::sync::{watch, Mutex};

mod record;
pub use record::{ApprovalView, HoldRecord, HoldView, NewHold};

pub use errors::HoldError;
mod errors;

/// Who resolved a hold and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Resolution {
    /// A person approved: the call may run.
    Approve {
        /// Approver identity.
        approver: String,
        /// Optional reason.
        reason: Option<String>,
    },
    /// A person denied: refusal.
    Deny {
        /// Approver identity.
        approver: String,
        /// Optional reason.
        reason: Option<String>,
    },
    /// The hold's lifetime passed.
    Timeout,
}

struct Pending {
    lock: Mutex<()>,
    resolved_tx: watch::Sender<bool>,
}

/// Every hold of this process.
pub struct HoldBook {
    store: Store,
    tree: Tree,
    receipts: Arc<ReceiptLog>,
    pending: DashMap<String, Arc<Pending>>,
    max_pending: usize,
    shutdown: watch::Receiver<bool>,
    created: watch::Sender<u64>,
    events: tokio::sync::broadcast::Sender<HoldEvent>,
}

/// A change of a hold, for subscribers (the control-plane relay, webhooks).
#[derive(Debug, Clone)]
pub enum HoldEvent {
    /// A hold was stored (pending).
    Created(HoldRecord),
    /// A hold was resolved (approve, deny or timeout).
    Resolved(HoldRecord),
}

/// Hold events buffered per slow subscriber before it starts missing some (it is told so by
/// `RecvError::Lagged` and should re-read the pending holds).
const EVENT_BUFFER: usize = 1024;

impl HoldBook {
    /// Opens the book; call [`HoldBook::restore`] once the runtime runs to re-arm timers.
    pub fn new(
        store: &Store,
        receipts: Arc<ReceiptLog>,
        max_pending: usize,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        HoldBook {
            store: store.clone(),
            tree: store.tree(TreeName::Holds),
            receipts,
            pending: DashMap::new(),
            max_pending,
            shutdown,
            created: watch::channel(0).0,
            events: tokio::sync::broadcast::channel(EVENT_BUFFER).0,
        }
    }

    /// Every hold created or resolved from now on (see [`HoldEvent`]).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<HoldEvent> {
        self.events.subscribe()
    }

    /// A receiver of the number of holds created by this process so far: it changes the moment a
    /// new hold is stored, so approvers (the control-plane relay, tests) learn of it at once.
    pub fn created(&self) -> watch::Receiver<u64> {
        self.created.subscribe()
    }

    /// Reloads pending holds from storage and arms their timers. Returns how many were pending.
    pub fn restore(self: &Arc<Self>) -> Result<usize, HoldError> {
        let mut count = 0;
        for (_, rec) in self.tree.scan::<HoldRecord>(b"")? {
            if !rec.resolved {
                self.arm(&rec.call.token, rec.expires_at);
                count += 1;
            }
        }
        Ok(count)
    }

    /// Errors: `TooManyPending` (503) when the cap on pending holds is reached. The enforce path
    /// asks before it issues a STEP_UP receipt; [`HoldBook::create`] checks again.
    pub fn ensure_capacity(&self) -> Result<(), HoldError> {
        if self.pending.len() >= self.max_pending {
            return Err(HoldError::TooManyPending(self.max_pending));
        }
        Ok(())
    }

    /// Creates, persists and flushes a pending hold, and arms its timer.
    ///
    /// Errors: `TooManyPending` at the cap (503); `Store` on storage failure.
    pub async fn create(
        self: &Arc<Self>,
        new: NewHold,
        initial_receipt: Receipt,
    ) -> Result<HoldRecord, HoldError> {
        self.ensure_capacity()?;
        let rec = HoldRecord::pending(new, initial_receipt);
        self.tree.put(rec.call.token.as_bytes(), &rec)?;
        self.store.flush().await?;
        self.arm(&rec.call.token, rec.expires_at);
        self.created.send_modify(|n| *n += 1);
        let _ = self.events.send(HoldEvent::Created(rec.clone()));
        Ok(rec)
    }

    /// The stored hold. Errors: `NotFound`.
    pub fn get(&self, token: &str) -> Result<HoldRecord, HoldError> {
        self.tree.get(token.as_bytes())?.ok_or(HoldError::NotFound)
    }

    /// Pending holds of `tenant_id`, soonest expiry first.
    pub fn pending_for(&self, tenant_id: &str) -> Result<Vec<HoldRecord>, HoldError> {
        let mut out = Vec::new();
        for entry in self.pending.iter() {
            if let Ok(rec) = self.get(entry.key()) {
                if rec.call.tenant_id == tenant_id && !rec.resolved {
                    out.push(rec);
                }
            }
        }
        out.sort_by(|a, b| {
            a.expires_at
                .cmp(&b.expires_at)
                .then(a.call.token.cmp(&b.call.token))
        });
        Ok(out)
    }

    /// Number of pending holds.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Holds of `tenant_id` created or resolved at or after `since`, pending or not, newest
    /// creation first (the control plane's alerts and governance feed). Walks the `Holds` tree.
    ///
    /// Errors: `Store` (including a record that does not decode).
    pub fn recent_for(
        &self,
        tenant_id: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<HoldRecord>, HoldError> {
        let mut out: Vec<HoldRecord> = self
            .tree
            .scan::<HoldRecord>(b"")?
            .into_iter()
            .map(|(_, rec)| rec)
            .filter(|rec| {
                rec.call.tenant_id == tenant_id
                    && (rec.call.created_at >= since
                        || rec.resolved_at.is_some_and(|at| at >= since))
            })
            .collect();
        out.sort_by_key(|rec| std::cmp::Reverse(rec.call.created_at));
        Ok(out)
    }

    /// Resolves a hold exactly once: issues the terminal receipt, persists, flushes, wakes waiters.
    ///
    /// `tenant_id` must be the hold's tenant (`NotFound` otherwise, so tokens of other tenants are
    /// not confirmed). Errors: `NotFound`, `AlreadyResolved` (409), `Store`, `Ledger`.
    pub async fn resolve(
        &self,
        token: &str,
        tenant_id: Option<&str>,
        how: Resolution,
    ) -> Result<HoldRecord, HoldError> {
        let rec = self.get(token)?;
        if tenant_id.is_some_and(|t| t != rec.call.tenant_id) {
            return Err(HoldError::NotFound);
        }
        let Some(p) = self.pending.get(token).map(|p| p.clone()) else {
            return Err(already(&rec));
        };
        let _guard = p.lock.lock().await;
        let mut rec = self.get(token)?;
        if rec.resolved {
            return Err(already(&rec));
        }
        let terminal = self.receipts.issue(terminal_body(&rec, &how)).await?;
        rec.resolve(how, terminal, ids::now());
        self.tree.put(token.as_bytes(), &rec)?;
        self.store.flush().await?;
        self.pending.remove(token);
        p.resolved_tx.send_replace(true);
        let _ = self.events.send(HoldEvent::Resolved(rec.clone()));
        Ok(rec)
    }

    /// Waits until the hold resolves, `max_wait` passes or the process shuts down, then returns
    /// its current state. A hold already resolved returns at once. Errors: `NotFound`.
    pub async fn wait(
        &self,
        token: &str,
        max_wait: std::time::Duration,
    ) -> Result<HoldRecord, HoldError> {
        let rx = self.pending.get(token).map(|p| p.resolved_tx.subscribe());
        if let Some(mut rx) = rx {
            let mut shutdown = self.shutdown.clone();
            tokio::select! {
                _ = tokio::time::timeout(max_wait, rx.wait_for(|done| *done)) => {}
                _ = shutdown.wait_for(|stop| *stop) => {}
            }
        }
        self.get(token)
    }

    fn arm(self: &Arc<Self>, token: &str, expires_at: DateTime<Utc>) {
        let (resolved_tx, _) = watch::channel(false);
        self.pending.insert(
            token.to_string(),
            Arc::new(Pending {
                lock: Mutex::new(()),
                resolved_tx,
            }),
        );
        let book = Arc::downgrade(self);
        let token = token.to_string();
        let mut shutdown = self.shutdown.clone();
        let delay = (expires_at - ids::now()).to_std().unwrap_or_default();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.changed() => return,
            }
            let Some(book) = book.upgrade() else { return };
            match book.resolve(&token, None, Resolution::Timeout).await {
                Ok(_) | Err(HoldError::AlreadyResolved { .. }) => {}
                Err(e) => tracing::error!(error = %e, "hold timeout could not be recorded"),
            }
        });
    }
}

fn already(rec: &HoldRecord) -> HoldError {
    HoldError::AlreadyResolved {
        resolution: rec
            .resolution
            .map(|d| d.as_str())
            .unwrap_or("resolved")
            .to_string(),
    }
}

fn terminal_body(rec: &HoldRecord, how: &Resolution) -> ReceiptBody {
    let (decision, auth, code) = match how {
        Resolution::Approve { .. } => (
            Decision::Allow,
            AuthorizationDecision::Allow,
            ReasonCode::HoldApproved,
        ),
        Resolution::Deny { .. } => (
            Decision::Block,
            AuthorizationDecision::Deny,
            ReasonCode::HoldDenied,
        ),
        Resolution::Timeout => (
            Decision::Block,
            AuthorizationDecision::Deny,
            ReasonCode::HoldTimeout,
        ),
    };
    ReceiptBody {
        kind: ReceiptKind::HoldResolution,
        tenant_id: rec.call.tenant_id.clone(),
        subject_id: rec.call.token.clone(),
        request_hash: rec.call.request_hash.clone(),
        decision,
        authorization_decision: auth,
        decision_reason_code: code,
        policy_version: rec.call.policy_version.clone(),
    }
}

/// Arguments shown to approvers: the DLP-redacted ones when the policy produced them.
pub fn approver_args(
    original: Option<&Map<String, Value>>,
    redacted: Option<&Map<String, Value>>,
) -> Option<Map<String, Value>> {
    redacted.or(original).cloned()
}

#[cfg(test)]
mod tests;
