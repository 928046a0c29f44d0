//! The proxy's event recorder: TOOL_CALL_PRE/POST/BLOCK and LLM_INVOCATION events leave the
//! request path through a queue and reach the ledger in batches.
//!
//! A call's events used to be encoded, hashed and inserted into sled on the request path, one
//! insert each. Now [`Recorder::record`] only pushes the event onto a queue (one short lock);
//! the recorder task drains the whole queue at once and appends it with one
//! `Ledger::append_entries` (the ledger stores a batch as few sled inserts), so under load many
//! calls share one append. Durability is unchanged: proxy events were never flushed one by one
//! (sled flushes on its interval); a crash loses what was queued or not yet flushed, as before.
//!
//! The task lingers up to [`LINGER`] (or until [`BATCH`] events are queued) before it writes,
//! so even one agent's calls share inserts; that delay is far inside sled's own flush interval.
//!
//! Invariants:
//! * Order: one writer at a time (the `writing` lock spans take-and-append), so events reach
//!   the ledger in the order they were queued, across the task and inline writes.
//! * Bounded memory: at [`MAX_QUEUED`] queued events the caller writes the queue itself
//!   (backpressure instead of loss or unbounded growth).
//! * Shutdown: [`Recorder::close`] (called by the listener after every connection has ended)
//!   writes what is queued and stops the task; an event recorded after that is written inline.

use crate::ledger::{Event, LedgerError, NewEntry};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Queued events at which `record` writes the queue on the caller's thread.
pub const MAX_QUEUED: usize = 16 * 1024;

/// How long the task lets events gather after the first one of a queue before it writes
/// them, so that a few calls at a time (one agent) still share a sled insert. Bounded by
/// [`BATCH`]: a queue that reaches it is written at once.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// Queued events that end the linger early.
pub const BATCH: usize = 64;

/// Where batches go: `Ledger::append_entries` of the process's ledger.
pub type Sink = Box<dyn Fn(Vec<NewEntry>) -> Result<u64, LedgerError> + Send + Sync>;

struct Shared {
    sink: Sink,
    queue: Mutex<Vec<Event>>,
    /// Held while a batch is taken from the queue and appended (keeps the ledger in queue order).
    writing: Mutex<()>,
    wake: Notify,
    closed: AtomicBool,
}

/// Handle on the queue and its task (one per proxy).
pub struct Recorder {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Recorder {
    /// Starts the recorder task on the current tokio runtime; batches go to `sink`.
    pub fn start(sink: Sink) -> Recorder {
        let shared = Arc::new(Shared {
            sink,
            queue: Mutex::new(Vec::new()),
            writing: Mutex::new(()),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
        });
        let task = tokio::spawn(run(shared.clone()));
        Recorder {
            shared,
            task: Mutex::new(Some(task)),
        }
    }

    /// Queues one event for the ledger. Never fails: a failed append is logged by the writer
    /// (the call itself was decided and receipted already).
    pub fn record(&self, event: Event) {
        let s = &self.shared;
        let (was_empty, queued) = {
            let mut q = lock(&s.queue);
            q.push(event);
            (q.len() == 1, q.len())
        };
        if queued >= MAX_QUEUED || s.closed.load(Ordering::Acquire) {
            s.write_queued();
        } else if was_empty || queued == BATCH {
            // The task takes the whole queue, so only the first event of a queue wakes it (to
            // start the linger) and the BATCH-th (to end it).
            s.wake.notify_one();
        }
    }

    /// Writes everything queued and stops the task; waits for it.
    pub async fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        let task = lock(&self.task).take();
        if let Some(task) = task {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "proxy event recorder task failed");
            }
        }
        // Anything queued between the task's last write and `closed` being seen.
        self.shared.write_queued();
    }
}

impl Drop for Recorder {
    /// Stops the task when the proxy goes away without `close` (a failed bind).
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

async fn run(shared: Arc<Shared>) {
    loop {
        shared.wake.notified().await;
        if !shared.closed.load(Ordering::Acquire) && lock(&shared.queue).len() < BATCH {
            // Linger; `close` or the BATCH-th event ends it early.
            let _ = tokio::time::timeout(LINGER, shared.wake.notified()).await;
        }
        shared.write_queued();
        if shared.closed.load(Ordering::Acquire) {
            break;
        }
    }
}

impl Shared {
    /// Takes the queue and appends it in one `append_entries`; a failure is logged.
    fn write_queued(&self) {
        let _writing = lock(&self.writing);
        let batch = std::mem::take(&mut *lock(&self.queue));
        if batch.is_empty() {
            return;
        }
        let n = batch.len();
        let entries = batch.into_iter().filter_map(|event| {
            let kind = event.event_type;
            match NewEntry::event(event) {
                Ok(entry) => Some(entry),
                Err(e) => {
                    tracing::error!(error = %e, event_type = kind.as_str(), "proxy event does not encode; not recorded");
                    None
                }
            }
        });
        if let Err(e) = (self.sink)(entries.collect()) {
            tracing::error!(error = %e, events = n, "proxy events not recorded");
        }
    }
}

/// A lock that survives a panic elsewhere (the queue is a plain list; no invariant spans it).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{EventType, Ledger};
    use crate::store::Store;
    use crate::vocab::EnforcementMode;

    fn event(i: usize) -> Event {
        Event {
            event_id: format!("evt_{i}"),
            tenant_id: if i % 2 == 0 { "t1" } else { "t2" }.into(),
            session_id: "s".into(),
            user_id: "u".into(),
            agent_id: Some("a".into()),
            source_type: EventType::ToolCallPre.source_type(),
            event_type: EventType::ToolCallPre,
            tool_name: Some("x.y".into()),
            approved_scope: vec![],
            session_tool_calls: vec![],
            enforcement_mode: EnforcementMode::Block,
            content: i.to_string(),
            occurred_at: "2026-11-22T00:00:00.000Z".into(),
            metadata: None,
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn every_event_reaches_the_ledger_in_order_and_a_full_queue_is_written_inline() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Arc::new(Ledger::open(&store).unwrap());
        let batches = Arc::new(Mutex::new(Vec::new()));
        let (sink, seen) = (ledger.clone(), batches.clone());
        let rec = Recorder::start(Box::new(move |e: Vec<NewEntry>| {
            lock(&seen).push(e.len());
            sink.append_entries(e)
        }));
        // One thread and no await in the loop: the task cannot run, so the queue fills up and
        // the MAX_QUEUED-th record writes it on the caller's thread.
        let n = MAX_QUEUED + 500;
        for i in 0..n {
            rec.record(event(i));
        }
        assert_eq!(
            *lock(&batches),
            vec![MAX_QUEUED],
            "the full queue was written inline"
        );
        rec.close().await;
        rec.record(event(n)); // after close: written inline
        assert_eq!(*lock(&batches), vec![MAX_QUEUED, 500, 1]);
        let all = ledger.read_from(1, n + 10).unwrap();
        assert_eq!(all.len(), n + 1);
        for (i, e) in all.iter().enumerate() {
            assert_eq!(e.record["content"], i.to_string(), "seq {}", e.seq);
            assert_eq!(e.tenant_id, if i % 2 == 0 { "t1" } else { "t2" });
            assert_eq!(e.kind, "TOOL_CALL_PRE");
        }
    }
}
