//! POST /v1/events/batch (SPEC.md, "POST /v1/events/batch", "Events", "Limits", "Batch
//! acknowledgement"): parse and validate a batch, enforce one tenant, drop in-request
//! duplicates and short-window replays, append the rest to the ledger and flush before the
//! acknowledgement (accepted means durable).
//!
//! Concurrency and crashes: one ingest lock covers "is this event_id new?" and the ledger
//! append; accepted ids are then *in flight* until the flush returns, and only after a
//! successful flush are their replay marks written. So two concurrent requests never both
//! accept one event_id, a failed or abandoned request leaves no mark (its retry is accepted),
//! and a crash can at worst lose marks (a retry then appends a duplicate the shipper dedupes by
//! event_id) — it never loses an acknowledged event.

use super::event::Event;
use super::replay::ReplayBook;
use super::{IngestError, Ledger, LedgerError};
use crate::store::{pair_key, Store};
use drops::DropLog;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// At most this many events per batch (SPEC.md, "Limits").
pub const MAX_EVENTS_PER_BATCH: usize = 100;
/// Replay marks examined for pruning per request.
const PRUNE_BUDGET: usize = 256;

/// A clock in unix milliseconds (injectable for tests).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Ingest settings.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Drop events whose event_id was accepted within `replay_window` (default on).
    pub replay_protection: bool,
    /// Replay window (default 300 s).
    pub replay_window: Duration,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            replay_protection: true,
            replay_window: Duration::from_secs(300),
        }
    }
}

/// The 202 body (SPEC.md, "Batch acknowledgement").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BatchAck {
    /// `accepted`.
    pub status: String,
    /// Number of events appended, as a decimal string.
    pub queued: String,
    /// Number of events dropped as in-request duplicates or replays, as a decimal string;
    /// absent for an empty batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_dropped: Option<String>,
}

impl BatchAck {
    fn accepted(queued: usize, dropped: Option<usize>) -> BatchAck {
        BatchAck {
            status: "accepted".to_string(),
            queued: queued.to_string(),
            replay_dropped: dropped.map(|d| d.to_string()),
        }
    }
}

/// Validates batches and appends them to the [`Ledger`]. One per process.
pub struct Ingestor {
    store: Store,
    config: IngestConfig,
    clock: Clock,
    replay: ReplayBook,
    state: Mutex<IngestState>,
    drops: DropLog,
}

/// What the ingest lock guards besides the check-then-append sequence.
#[derive(Default)]
struct IngestState {
    /// Where the next pruning slice starts in the Replay tree.
    prune_cursor: Vec<u8>,
    /// Replay keys appended but not yet flushed and marked.
    in_flight: HashSet<Vec<u8>>,
}

impl Ingestor {
    /// An ingestor over `store` using the system clock.
    pub fn new(store: &Store, config: IngestConfig) -> Ingestor {
        let clock: Clock =
            Arc::new(|| u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0));
        Ingestor::with_clock(store, config, clock)
    }

    /// An ingestor with an injected clock (unix millis).
    pub fn with_clock(store: &Store, config: IngestConfig, clock: Clock) -> Ingestor {
        Ingestor {
            store: store.clone(),
            replay: ReplayBook::new(store, config.replay_window),
            config,
            clock,
            state: Mutex::new(IngestState::default()),
            drops: DropLog::default(),
        }
    }

    /// Ingests one raw JSON body for `caller_tenant` (the API key's tenant, or `None` when the
    /// ingest token authenticated the request: any single tenant is then allowed).
    ///
    /// Errors, in the order checked: [`IngestError::Malformed`], [`IngestError::Shape`],
    /// [`IngestError::TooMany`], [`IngestError::InvalidEvent`] (the first one),
    /// [`IngestError::MixedTenants`], [`IngestError::Forbidden`], [`IngestError::Ledger`].
    pub async fn ingest(
        &self,
        ledger: &Ledger,
        body: &[u8],
        caller_tenant: Option<&str>,
    ) -> Result<BatchAck, IngestError> {
        let events = parse_batch(body)?;
        let received = events.len();
        let Some(tenant) = batch_tenant(&events, caller_tenant)? else {
            return Ok(BatchAck::accepted(0, None));
        };
        let admitted = self.admit(ledger, &tenant, dedupe(events))?;
        let queued = admitted.keys.len();
        if queued > 0 {
            self.store.flush().await.map_err(LedgerError::from)?;
        }
        admitted.settle(true);
        let dropped = received - queued;
        self.drops.record(&tenant, dropped as u64, (self.clock)());
        Ok(BatchAck::accepted(queued, Some(dropped)))
    }

    /// Events of `tenant_id` dropped as replays or in-request duplicates over the last 24 hours,
    /// as `(unix millis of the second, count)` buckets, oldest first. Kept in memory only
    /// (bounded; see `ingest/drops.rs`): a restart forgets them.
    pub fn replay_drops(&self, tenant_id: &str) -> Vec<(u64, u64)> {
        self.drops.recent(tenant_id, (self.clock)())
    }

    /// Under the ingest lock: prune a slice of marks, drop replays, append the rest and put
    /// their keys in flight.
    fn admit(
        &self,
        ledger: &Ledger,
        tenant: &str,
        events: Vec<Event>,
    ) -> Result<Admitted<'_>, IngestError> {
        let now = (self.clock)();
        let mut state = self.lock();
        self.replay
            .prune(&mut state.prune_cursor, now, PRUNE_BUDGET);
        let mut keys = Vec::new();
        let mut entries = Vec::new();
        for event in events {
            let key = pair_key(tenant, &event.event_id);
            if self.config.replay_protection
                && (state.in_flight.contains(&key) || self.replay.is_recent(&key, now)?)
            {
                continue;
            }
            let record = serde_json::to_value(&event).map_err(LedgerError::from)?;
            entries.push((event.event_type.as_str().to_string(), record));
            keys.push(key);
        }
        ledger.append_batch(tenant, entries)?;
        if self.config.replay_protection {
            state.in_flight.extend(keys.iter().cloned());
        }
        Ok(Admitted {
            ingestor: self,
            keys,
            now,
            settled: false,
        })
    }

    /// The ingest lock; recovered when poisoned (its state is a cursor and a set that stay
    /// valid whatever step panicked).
    fn lock(&self) -> MutexGuard<'_, IngestState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Events appended but not yet marked. Settling after a durable flush writes their marks;
/// dropping it unsettled (flush error, cancelled request) only takes them out of flight.
struct Admitted<'a> {
    ingestor: &'a Ingestor,
    keys: Vec<Vec<u8>>,
    now: u64,
    settled: bool,
}

impl Admitted<'_> {
    /// Writes the marks when `durable`, and takes the keys out of flight.
    fn settle(mut self, durable: bool) {
        self.finish(durable);
    }

    fn finish(&mut self, durable: bool) {
        if self.settled {
            return;
        }
        self.settled = true;
        let ingestor = self.ingestor;
        if !ingestor.config.replay_protection {
            return;
        }
        let mut state = ingestor.lock();
        if durable {
            if let Err(e) = ingestor.replay.mark(&self.keys, self.now) {
                tracing::error!(error = %e, "replay marks not written; a retry may be ingested twice");
            }
        }
        for key in &self.keys {
            state.in_flight.remove(key);
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.finish(false);
    }
}

/// Body → events: an array, or an object with an `events` array; at most 100; all valid.
fn parse_batch(body: &[u8]) -> Result<Vec<Event>, IngestError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| IngestError::Malformed(e.to_string()))?;
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut map) => match map.remove("events") {
            Some(Value::Array(items)) => items,
            _ => {
                return Err(IngestError::Shape(
                    "an object without an events array".into(),
                ))
            }
        },
        other => return Err(IngestError::Shape(format!("a JSON {}", json_kind(&other)))),
    };
    if items.len() > MAX_EVENTS_PER_BATCH {
        return Err(IngestError::TooMany(items.len()));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| Event::from_json(i, v))
        .collect()
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The batch's single tenant (`None` for an empty batch), checked against the caller's.
fn batch_tenant(events: &[Event], caller: Option<&str>) -> Result<Option<String>, IngestError> {
    let Some(first) = events.first() else {
        return Ok(None);
    };
    let tenant = &first.tenant_id;
    if events.iter().any(|e| &e.tenant_id != tenant) {
        return Err(IngestError::MixedTenants);
    }
    match caller {
        Some(caller) if caller != tenant => Err(IngestError::Forbidden(format!(
            "events belong to tenant {tenant} but the API key is for tenant {caller}"
        ))),
        _ => Ok(Some(tenant.clone())),
    }
}

/// Keeps the first event of each event_id, in order.
fn dedupe(events: Vec<Event>) -> Vec<Event> {
    let mut seen = HashSet::new();
    events
        .into_iter()
        .filter(|e| seen.insert(e.event_id.clone()))
        .collect()
}

mod drops;

#[cfg(test)]
mod tests;
