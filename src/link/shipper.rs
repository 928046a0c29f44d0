//! Ledger shipping, sidecar side (DESIGN.md "Evidence"; docs/ledger.md "Shipping"): the durable
//! outbox is the local hash-chained ledger plus a cursor. Entries with seq > cursor are
//! unshipped; the cursor only moves after the control plane answered 2xx to a shipment holding
//! them, and is flushed then. Delivery is at least once; the control plane stores each event
//! once (`control_plane::sync::events`, dedupe by `event_id`).
//!
//! The task (spawned by `app::build` for `serve` with a control plane configured):
//!
//! 1. reads up to `ship_batch_size` entries after the cursor (and at most [`MAX_BODY_BYTES`] of
//!    JSON) on a blocking thread;
//! 2. POSTs them to `/{tenant}/service/sync/events`, keeping [`IN_FLIGHT`] shipments on their
//!    way (the next batch is read and sent while the previous one is being stored);
//! 3. takes the answers in order; on 2xx stores and flushes the cursor (`Meta` key
//!    [`CURSOR_KEY`]); when caught up it sleeps on
//!    [`Ledger::appended`](crate::ledger::Ledger::appended) and the shutdown watch, never on a
//!    timer;
//! 4. on failure records `last_error` and backs off: retryable failures (unreachable, 5xx, 429)
//!    with full jitter, uniformly in `[0, min(30 s, 0.5 s · 2^(failures-1))]`; other answers
//!    (4xx) log an error and wait the maximum (30 s) — nothing is skipped. A 413 halves the batch
//!    (down to one entry) and retries at once; it doubles back after each success. After any
//!    failure the shipments still on their way are dropped and shipping resumes at the cursor
//!    (the control plane counts what it already had as duplicates).
//!
//! Entries of a tenant other than the link's cannot be stored by this control plane (it would
//! refuse the whole shipment): they are not sent, the cursor passes them, and they are counted in
//! `skipped` (stored with the cursor, shown on /v1/health) and logged.

use crate::control_plane::sync::events::ShipmentAck;
use crate::ids;
use crate::ledger::Ledger;
use crate::link::{CpClient, LinkError};
use crate::state::AppState;
use crate::store::{Store, StoreError, TreeName};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `Meta` key of the cursor ([`Cursor`] as JSON).
pub const CURSOR_KEY: &[u8] = b"link/shipped_seq";
/// Control-plane path of shipments.
pub const SHIP_PATH: &str = "/sync/events";
/// A shipment stops growing past this many bytes of entry JSON (it always holds one entry).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Shipments on their way at once (the next one is read and sent while one is answered).
pub const IN_FLIGHT: usize = 3;
/// First retry delay bound.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Largest retry delay (and the wait after a non-retryable answer).
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The durable cursor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Every entry with seq ≤ this was shipped (or skipped).
    pub shipped_seq: u64,
    /// Entries passed without shipping because they belong to another tenant.
    pub skipped: u64,
}

impl Cursor {
    /// The stored cursor (zero when none).
    ///
    /// Errors: [`StoreError`] when storage fails or the value does not decode.
    pub fn load(store: &Store) -> Result<Cursor, StoreError> {
        Ok(store
            .tree(TreeName::Meta)
            .get(CURSOR_KEY)?
            .unwrap_or_default())
    }

    /// Writes and flushes the cursor.
    async fn save(&self, store: &Store) -> Result<(), StoreError> {
        store.tree(TreeName::Meta).put(CURSOR_KEY, self)?;
        store.flush().await
    }
}

/// The shipper's shared status (in `Core::shipping`; read by GET /v1/health).
#[derive(Debug, Default)]
pub struct ShipStatus(Mutex<StatusInner>);

#[derive(Debug, Default)]
struct StatusInner {
    cursor: Cursor,
    last_error: Option<String>,
    last_shipped_at: Option<String>,
}

impl ShipStatus {
    /// The status at start-up: the stored cursor, no error yet.
    ///
    /// Errors: [`StoreError`] reading the cursor.
    pub fn load(store: &Store) -> Result<ShipStatus, StoreError> {
        let status = ShipStatus::default();
        status.lock().cursor = Cursor::load(store)?;
        Ok(status)
    }

    /// The current cursor.
    pub fn cursor(&self) -> Cursor {
        self.lock().cursor
    }

    /// `{"backlog", "shipped_seq", "skipped", "last_error", "last_shipped_at"}` for a ledger of
    /// `ledger_len` entries; `backlog` = entries not yet shipped.
    pub fn health(&self, ledger_len: u64) -> Value {
        let s = self.lock();
        json!({
            "backlog": ledger_len.saturating_sub(s.cursor.shipped_seq),
            "shipped_seq": s.cursor.shipped_seq,
            "skipped": s.cursor.skipped,
            "last_error": s.last_error,
            "last_shipped_at": s.last_shipped_at,
        })
    }

    fn shipped(&self, cursor: Cursor) {
        let mut s = self.lock();
        s.cursor = cursor;
        s.last_error = None;
        s.last_shipped_at = Some(ids::rfc3339(ids::now()));
    }

    fn failed(&self, error: String) {
        self.lock().last_error = Some(error);
    }

    fn lock(&self) -> MutexGuard<'_, StatusInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Starts the shipper when the link is configured (`Core::shipping` is set and the client can
/// be built). The task ends soon after `shutdown` turns true; join it before releasing storage.
pub fn spawn(core: &AppState, shutdown: watch::Receiver<bool>) -> Option<JoinHandle<()>> {
    let status = core.shipping.clone()?;
    let endpoint = core.config.endpoint_id.clone()?;
    let client = match CpClient::new(&core.config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "ledger shipping disabled: no control-plane client");
            status.failed(e.to_string());
            return None;
        }
    };
    let shipper = Shipper {
        core: core.clone(),
        status,
        client,
        endpoint: endpoint.into(),
    };
    Some(tokio::spawn(shipper.run(shutdown)))
}

/// A ledger entry as the shipper reads and sends it: the record stays the stored JSON text.
/// The stored `prev_hash` is neither read nor sent: the control plane has no use for it (it
/// keeps `hash` as `source_hash`).
#[derive(Debug, Serialize, Deserialize)]
struct RawEntry {
    seq: u64,
    tenant_id: String,
    kind: String,
    record: Box<RawValue>,
    recorded_at: String,
    hash: String,
}

impl RawEntry {
    /// Its JSON size, near enough to keep a shipment under [`MAX_BODY_BYTES`].
    fn size(&self) -> usize {
        let strings = self.tenant_id.len() + self.kind.len() + self.recorded_at.len();
        self.record.get().len() + strings + self.hash.len() + 100
    }
}

/// Entries read for one shipment.
#[derive(Default)]
struct Batch {
    /// The entries to send (the link's tenant only).
    entries: Vec<RawEntry>,
    /// Last seq this batch covers (sent or skipped); 0 when nothing was read.
    last_seq: u64,
    /// Entries of other tenants passed over.
    skipped: u64,
}

/// The body of a shipment as sent (see `control_plane::sync::events::Shipment`).
#[derive(Serialize)]
struct Outgoing<'a> {
    endpoint_id: &'a str,
    entries: &'a [RawEntry],
}

/// A shipment on its way; its answer moves the cursor to `last_seq`.
struct Pending {
    last_seq: u64,
    skipped: u64,
    entries: usize,
    answer: JoinHandle<Result<Option<ShipmentAck>, LinkError>>,
}

/// What to do after a failure.
enum Step {
    /// A retryable failure: back off with full jitter.
    Retry,
    /// A failure retrying soon will not fix: wait [`BACKOFF_MAX`].
    Wait,
    /// 413: halve the batch and retry at once.
    Shrink,
}

struct Shipper {
    core: AppState,
    status: Arc<ShipStatus>,
    client: CpClient,
    endpoint: Arc<str>,
}

impl Shipper {
    /// Keeps up to [`IN_FLIGHT`] shipments on their way and moves the cursor as their answers
    /// arrive, in order. Returns when `stop` turns true.
    async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut appended = self.core.ledger.appended();
        let batch_size = self.core.config.ship_batch_size.max(1);
        let (mut limit, mut failures) = (batch_size, 0u32);
        let mut queue: VecDeque<Pending> = VecDeque::new();
        let mut next_seq = self.status.cursor().shipped_seq + 1;
        tracing::info!(endpoint_id = %self.endpoint, "ledger shipping started");
        loop {
            let step = tokio::select! {
                step = self.cycle(&mut queue, &mut next_seq, limit, &mut appended) => step,
                _ = stopped(&mut stop) => None,
            };
            let Some(step) = step else {
                queue.iter().for_each(|p| p.answer.abort());
                return;
            };
            let Err(step) = step else {
                // After a 413 the batch grows back gradually.
                (failures, limit) = (0, (limit * 2).min(batch_size));
                continue;
            };
            queue.drain(..).for_each(|p| p.answer.abort());
            next_seq = self.status.cursor().shipped_seq + 1;
            let delay = match step {
                Step::Shrink => {
                    limit = (limit / 2).max(1);
                    continue;
                }
                Step::Retry => {
                    failures = failures.saturating_add(1);
                    full_jitter(failures)
                }
                Step::Wait => BACKOFF_MAX,
            };
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stopped(&mut stop) => return,
            }
        }
    }

    /// Tops the pipeline up, then takes the oldest answer (or, with nothing to ship, waits for
    /// an append). `Some(Ok)`: progress or an append; `Some(Err)`: a failure.
    async fn cycle(
        &self,
        queue: &mut VecDeque<Pending>,
        next_seq: &mut u64,
        limit: usize,
        appended: &mut watch::Receiver<u64>,
    ) -> Option<Result<(), Step>> {
        while queue.len() < IN_FLIGHT {
            let batch = match self.read(*next_seq, limit).await {
                Ok(b) => b,
                Err(e) => return Some(Err(self.fail(format!("reading the ledger: {e}")))),
            };
            if batch.last_seq == 0 {
                break;
            }
            *next_seq = batch.last_seq + 1;
            queue.push_back(self.send(batch));
        }
        let Some(front) = queue.front_mut() else {
            let shipped = self.status.cursor().shipped_seq;
            let _ = appended.wait_for(|&last| last > shipped).await;
            return Some(Ok(()));
        };
        let answer = (&mut front.answer).await;
        let done = queue.pop_front()?;
        let answer = answer.unwrap_or_else(|e| Err(LinkError::Unreachable(e.to_string())));
        Some(match answer {
            Ok(ack) => self.advance(&done, ack).await,
            Err(e) => Err(self.refused(e, done.entries)),
        })
    }

    /// Sends `batch` on its own task (nothing to send: an immediate empty answer).
    fn send(&self, batch: Batch) -> Pending {
        let (last_seq, skipped, entries) = (batch.last_seq, batch.skipped, batch.entries.len());
        let client = self.client.clone();
        let endpoint = self.endpoint.clone();
        let answer = tokio::spawn(async move {
            if batch.entries.is_empty() {
                return Ok(None);
            }
            let body = Outgoing {
                endpoint_id: &endpoint,
                entries: &batch.entries,
            };
            client.post_json(SHIP_PATH, &body).await.map(Some)
        });
        Pending {
            last_seq,
            skipped,
            entries,
            answer,
        }
    }

    /// Moves the cursor past `done` and flushes it.
    async fn advance(&self, done: &Pending, ack: Option<ShipmentAck>) -> Result<(), Step> {
        let cursor = self.status.cursor();
        let moved = Cursor {
            shipped_seq: done.last_seq,
            skipped: cursor.skipped + done.skipped,
        };
        if done.skipped > 0 {
            tracing::warn!(
                skipped = done.skipped, through_seq = done.last_seq, tenant_id = %self.client.tenant(),
                "ledger entries of other tenants are not shipped to this control plane"
            );
        }
        if let Err(e) = moved.save(&self.core.store).await {
            // The control plane has the entries; an unsaved cursor only means a re-shipment.
            return Err(self.fail(format!("saving the shipping cursor: {e}")));
        }
        if let Some(ack) = ack {
            tracing::debug!(
                accepted = ack.accepted,
                duplicates = ack.duplicates,
                through_seq = done.last_seq,
                "ledger entries shipped"
            );
        }
        self.status.shipped(moved);
        Ok(())
    }

    /// A failed shipment: what to do next.
    fn refused(&self, e: LinkError, sent: usize) -> Step {
        self.status.failed(e.to_string());
        if matches!(e, LinkError::Status { status: 413, .. }) && sent > 1 {
            tracing::warn!(entries = sent, error = %e, "shipment too large; halving the batch");
            return Step::Shrink;
        }
        if e.retryable() {
            tracing::warn!(error = %e, "ledger shipment failed; retrying with backoff");
            return Step::Retry;
        }
        self.fail(format!("shipment refused: {e}"))
    }

    /// Records a failure that retrying soon will not fix: logged as an error, waits the most.
    fn fail(&self, error: String) -> Step {
        tracing::error!(error = %error, "ledger shipping");
        self.status.failed(error);
        Step::Wait
    }

    /// Up to `limit` entries from `from`, on a blocking thread.
    async fn read(&self, from: u64, limit: usize) -> Result<Batch, String> {
        let core = self.core.clone();
        let tenant = self.client.tenant().to_string();
        tokio::task::spawn_blocking(move || {
            read_batch(&core.store, &core.ledger, &tenant, from, limit)
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

/// Reads entries from `from` until `limit` entries, [`MAX_BODY_BYTES`] of JSON or the end.
///
/// Flushes first (free when nothing is pending), so only entries durable here are shipped:
/// the proxy's events are appended without a flush, and one lost in a crash here must not
/// already be at the control plane while its seq is reused.
fn read_batch(
    store: &Store,
    ledger: &Ledger,
    tenant: &str,
    from: u64,
    limit: usize,
) -> Result<Batch, String> {
    store.flush_blocking().map_err(|e| e.to_string())?;
    let rows: Vec<RawEntry> = ledger
        .read_from_as(from, limit)
        .map_err(|e| e.to_string())?;
    let mut batch = Batch::default();
    let mut bytes = 0usize;
    for entry in rows {
        if entry.tenant_id != tenant {
            batch.skipped += 1;
            batch.last_seq = entry.seq;
            continue;
        }
        let size = entry.size();
        if !batch.entries.is_empty() && bytes + size > MAX_BODY_BYTES {
            break;
        }
        bytes += size;
        batch.last_seq = entry.seq;
        batch.entries.push(entry);
    }
    Ok(batch)
}

/// Full jitter: uniform in `[0, min(BACKOFF_MAX, BACKOFF_BASE · 2^(failures-1))]`.
fn full_jitter(failures: u32) -> Duration {
    let cap = backoff_cap(failures);
    let millis = rand::thread_rng().gen_range(0..=cap.as_millis() as u64);
    Duration::from_millis(millis)
}

/// `min(BACKOFF_MAX, BACKOFF_BASE · 2^(failures-1))`.
fn backoff_cap(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_BASE
        .saturating_mul(1u32 << doublings)
        .min(BACKOFF_MAX)
}

/// Resolves once shutdown was requested (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_to_thirty() {
        let caps: Vec<u64> = (1..=9).map(|f| backoff_cap(f).as_millis() as u64).collect();
        assert_eq!(
            caps,
            vec![500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        assert_eq!(backoff_cap(u32::MAX), BACKOFF_MAX);
        for f in 1..20 {
            assert!(full_jitter(f) <= backoff_cap(f));
        }
    }

    #[test]
    fn batches_pass_over_other_tenants_and_keep_records_as_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        for tenant in ["t1", "t2", "t1", "t1"] {
            let record = json!({"tenant_id": tenant, "b": [1, 2], "a": "x"});
            ledger.append(tenant, "K", record).unwrap();
        }
        let b = read_batch(&store, &ledger, "t1", 1, 3).unwrap();
        assert_eq!((b.last_seq, b.skipped), (3, 1));
        let seqs: Vec<u64> = b.entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 3]);
        let stored = ledger.read_from(1, 1).unwrap().remove(0);
        let sent: Value = serde_json::to_value(&b.entries[0]).unwrap();
        assert_eq!(sent["record"], stored.record);
        assert_eq!(sent["hash"], stored.hash.as_str());
        assert!(sent.get("prev_hash").is_none());
        let rest = read_batch(&store, &ledger, "t1", 4, 10).unwrap();
        assert_eq!((rest.last_seq, rest.skipped, rest.entries.len()), (4, 0, 1));
        let none = read_batch(&store, &ledger, "t1", 5, 10).unwrap();
        assert_eq!((none.last_seq, none.entries.len()), (0, 0));
    }

    #[tokio::test]
    async fn the_cursor_survives_a_reopen_and_the_health_shows_the_backlog() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            assert_eq!(Cursor::load(&store).unwrap(), Cursor::default());
            let c = Cursor {
                shipped_seq: 7,
                skipped: 1,
            };
            c.save(&store).await.unwrap();
        }
        let store = crate::store::reopen_for_tests(dir.path());
        let status = ShipStatus::load(&store).unwrap();
        assert_eq!(status.cursor().shipped_seq, 7);
        let h = status.health(10);
        assert_eq!(h["backlog"], 3);
        assert_eq!(h["shipped_seq"], 7);
        assert_eq!(h["skipped"], 1);
        assert!(h["last_error"].is_null());
        status.failed("boom".into());
        assert_eq!(status.health(10)["last_error"], "boom");
        status.shipped(Cursor {
            shipped_seq: 10,
            skipped: 1,
        });
        let h = status.health(10);
        assert_eq!(h["backlog"], 0);
        assert!(h["last_error"].is_null());
        assert!(h["last_shipped_at"].is_string());
    }
}
