//! The webhook background tasks: the dispatcher (attempts due deliveries, reschedules failures
//! with backoff, resumes stored deliveries at start) and the hold relay (turns the HoldBook's
//! events into `hold.created` / `hold.resolved` deliveries).

use super::{backoff, unix_ms, Delivery, Webhooks, MAX_ATTEMPTS, MAX_IN_FLIGHT};
use crate::holds::HoldEvent;
use crate::ids;
use crate::state::AppState;
use crate::store::seq_key;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

/// Starts the dispatcher and the hold relay of `core.webhooks`; both stop when `shutdown`
/// becomes true (join the returned tasks to know they released storage). Subscribes to the
/// HoldBook before it returns, so no hold event that follows is missed. A second call starts
/// nothing (the queue has one consumer).
pub fn start(core: &AppState, shutdown: watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let hooks = core.webhooks.clone();
    let Some(queue) = hooks
        .queue_rx
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    else {
        return Vec::new();
    };
    let events = core.holds.subscribe();
    vec![
        tokio::spawn(relay_holds(hooks.clone(), events, shutdown.clone())),
        tokio::spawn(dispatch(hooks, queue, shutdown)),
    ]
}

/// Enqueues a delivery for every hold event, until shutdown.
async fn relay_holds(
    hooks: Arc<Webhooks>,
    mut events: broadcast::Receiver<HoldEvent>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let event = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            e = events.recv() => e,
        };
        let (tenant, kind, data) = match event {
            Ok(HoldEvent::Created(rec)) => (
                rec.call.tenant_id.clone(),
                "hold.created",
                serde_json::to_value(rec.approval()),
            ),
            Ok(HoldEvent::Resolved(rec)) => (
                rec.call.tenant_id.clone(),
                "hold.resolved",
                serde_json::to_value(rec.view()),
            ),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "webhook relay fell behind the hold events; their callbacks are not sent"
                );
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        match data {
            Ok(data) => {
                hooks.enqueue(&tenant, kind, data);
            }
            Err(e) => tracing::error!(error = %e, kind, "hold callback does not encode"),
        }
    }
}

/// Due deliveries by `(unix millis due, seq)`.
type Schedule = BTreeSet<(i64, u64)>;

/// The dispatcher loop: stored deliveries first, then new ones from `queue`; at most
/// [`MAX_IN_FLIGHT`] attempts at a time. Attempts still running at shutdown are aborted (their
/// deliveries stay stored and resume at the next start).
async fn dispatch(
    hooks: Arc<Webhooks>,
    mut queue: mpsc::UnboundedReceiver<(i64, u64)>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut schedule = resume(&hooks);
    let mut running: JoinSet<Option<(i64, u64)>> = JoinSet::new();
    loop {
        let wait = next_wait(&schedule, running.len());
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => break,
            queued = queue.recv() => match queued {
                Some(item) => { schedule.insert(item); }
                None => break,
            },
            done = running.join_next(), if !running.is_empty() => {
                if let Some(Ok(Some(again))) = done {
                    schedule.insert(again);
                }
            }
            _ = sleep_for(wait) => {
                let now = unix_ms(ids::now());
                while running.len() < MAX_IN_FLIGHT {
                    let Some(&(due, seq)) = schedule.first() else { break };
                    if due > now {
                        break;
                    }
                    schedule.remove(&(due, seq));
                    running.spawn(attempt(hooks.clone(), seq));
                }
            }
        }
    }
    running.shutdown().await;
}

/// How long until the first due delivery; `None` (wait for something else) when nothing is
/// scheduled or the in-flight cap is reached.
fn next_wait(schedule: &Schedule, running: usize) -> Option<Duration> {
    if running >= MAX_IN_FLIGHT {
        return None;
    }
    let &(due, _) = schedule.first()?;
    let ms = due.saturating_sub(unix_ms(ids::now())).max(0);
    Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Every stored delivery, scheduled at its next attempt. Undecodable ones are removed.
pub(super) fn resume(hooks: &Webhooks) -> Schedule {
    let mut schedule = Schedule::new();
    let rows = match hooks.deliveries.scan::<serde_json::Value>(b"") {
        Ok(rows) => rows,
        Err(e) => {
            tracing::error!(error = %e, "stored webhook deliveries cannot be read");
            return schedule;
        }
    };
    for (key, value) in rows {
        match serde_json::from_value::<Delivery>(value) {
            Ok(d) => {
                schedule.insert((d.next_attempt_ms, d.seq));
            }
            Err(e) => {
                tracing::error!(error = %e, "dropping a stored webhook delivery that does not decode");
                let _ = hooks.deliveries.remove(&key);
                hooks.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    if !schedule.is_empty() {
        tracing::info!(
            pending = schedule.len(),
            "resuming stored webhook deliveries"
        );
    }
    schedule
}

/// One attempt of delivery `seq`. Returns when to try again, or `None` when it is finished
/// (delivered, dropped, or gone).
async fn attempt(hooks: Arc<Webhooks>, seq: u64) -> Option<(i64, u64)> {
    let key = seq_key(seq);
    let mut d = match hooks.deliveries.get::<Delivery>(&key) {
        Ok(Some(d)) => d,
        Ok(None) => return None,
        Err(e) => {
            tracing::error!(error = %e, seq, "webhook delivery cannot be read; retrying later");
            return Some((unix_ms(ids::now()) + 60_000, seq));
        }
    };
    if d.attempts == 0 {
        // Durable before the first attempt.
        if let Err(e) = hooks.store.flush().await {
            tracing::error!(error = %e, "webhook delivery not flushed before its first attempt");
        }
    }
    let settings = match hooks.settings(&d.tenant_id) {
        Ok(Some(s)) => s,
        Ok(None) => {
            tracing::info!(tenant_id = %d.tenant_id, delivery_id = %d.delivery_id, "webhook removed; delivery dropped");
            finish(&hooks, &key, false);
            return None;
        }
        Err(e) => {
            tracing::error!(error = %e, "webhook settings cannot be read; retrying later");
            return Some((unix_ms(ids::now()) + 60_000, seq));
        }
    };
    let outcome = hooks
        .send(&settings, &d.delivery_id, &d.event_type, &d.body)
        .await;
    if outcome.delivered {
        finish(&hooks, &key, true);
        return None;
    }
    d.attempts += 1;
    d.last_error = outcome.error;
    if d.attempts >= MAX_ATTEMPTS {
        tracing::error!(
            tenant_id = %d.tenant_id, delivery_id = %d.delivery_id, event_type = %d.event_type,
            attempts = d.attempts, last_error = d.last_error.as_deref().unwrap_or(""),
            "webhook delivery dropped after its last attempt"
        );
        finish(&hooks, &key, false);
        return None;
    }
    let delay = backoff(d.attempts);
    d.next_attempt_ms = unix_ms(ids::now()) + i64::try_from(delay.as_millis()).unwrap_or(0);
    tracing::warn!(
        tenant_id = %d.tenant_id, delivery_id = %d.delivery_id, attempts = d.attempts,
        retry_in_ms = delay.as_millis() as u64, error = d.last_error.as_deref().unwrap_or(""),
        "webhook delivery failed; will retry"
    );
    if let Err(e) = hooks.deliveries.put(&key, &d) {
        tracing::error!(error = %e, "webhook retry state not stored");
    }
    Some((d.next_attempt_ms, seq))
}

/// Removes a finished delivery and counts it.
fn finish(hooks: &Webhooks, key: &[u8], delivered: bool) {
    if let Err(e) = hooks.deliveries.remove(key) {
        tracing::error!(error = %e, "finished webhook delivery not removed; it may be sent again");
    }
    let counter = if delivered {
        &hooks.delivered
    } else {
        &hooks.dropped
    };
    counter.fetch_add(1, Ordering::Relaxed);
}
