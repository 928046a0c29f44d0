//! The send loop: reads batches after the cursor, keeps shipments on their way, moves the
//! cursor as answers arrive and backs off on failure.

use super::{Cursor, ShipStatus, BACKOFF_BASE, BACKOFF_MAX, IN_FLIGHT, MAX_BODY_BYTES, SHIP_PATH};
use crate::control_plane::sync::events::ShipmentAck;
use crate::ledger::Ledger;
use crate::link::{CpClient, LinkError};
use crate::state::AppState;
use crate::store::Store;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A ledger entry as the shipper reads and sends it: the record stays the stored JSON text.
/// The stored `prev_hash` is neither read nor sent: the control plane has no use for it (it
/// keeps `hash` as `source_hash`).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct RawEntry {
    pub(super) seq: u64,
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
pub(super) struct Batch {
    /// The entries to send (the link's tenant only).
    pub(super) entries: Vec<RawEntry>,
    /// Last seq this batch covers (sent or skipped); 0 when nothing was read.
    pub(super) last_seq: u64,
    /// Entries of other tenants passed over.
    pub(super) skipped: u64,
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

pub(super) struct Shipper {
    pub(super) core: AppState,
    pub(super) status: Arc<ShipStatus>,
    pub(super) client: CpClient,
    pub(super) endpoint: Arc<str>,
}

impl Shipper {
    /// Keeps up to [`IN_FLIGHT`] shipments on their way and moves the cursor as their answers
    /// arrive, in order. Returns when `stop` turns true.
    pub(super) async fn run(self, mut stop: watch::Receiver<bool>) {
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
pub(super) fn read_batch(
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
pub(super) fn full_jitter(failures: u32) -> Duration {
    let cap = backoff_cap(failures);
    let millis = rand::thread_rng().gen_range(0..=cap.as_millis() as u64);
    Duration::from_millis(millis)
}

/// `min(BACKOFF_MAX, BACKOFF_BASE · 2^(failures-1))`.
pub(super) fn backoff_cap(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_BASE
        .saturating_mul(1u32 << doublings)
        .min(BACKOFF_MAX)
}

/// Resolves once shutdown was requested (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
