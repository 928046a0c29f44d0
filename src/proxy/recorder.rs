//! The proxy's event recorder: TOOL_CALL_PRE/POST/BLOCK and LLM_INVOCATION events leave the
//! request path through a queue and reach the ledger in batches, written on the recorder's own
//! thread.
//!
//! [`Recorder::record_with`] only pushes a closure onto a queue (one short lock). The closure
//! *builds* the call's events later, on the recorder thread: serializing the arguments or the
//! result into `content`, the event id, the timestamp text and the metadata copies are no
//! longer on the path of the call, which only moves the values it already owns into the
//! closure. The thread drains the whole queue at once, builds the events, and appends them with
//! one `Ledger::append_entries` (the ledger stores a batch as few sled inserts), so under load
//! many calls share one append. Durability is unchanged: proxy events were never flushed one
//! by one (sled flushes on its interval); a crash loses what was queued or not yet flushed.
//!
//! Why a thread and not a tokio task: the append is synchronous sled work (encoding, hashing,
//! compression, inserts; a few hundred µs per batch, longer when sled stalls). On a tokio
//! worker it held up every connection queued on that worker; on its own thread the runtime's
//! workers only ever forward calls.
//!
//! The thread lingers up to [`LINGER`] (or until [`BATCH`] items are queued) before it writes,
//! so even one agent's calls share inserts; that delay is far inside sled's own flush interval.
//!
//! Invariants:
//! * Order: one writer at a time (the `writing` lock spans take-and-append), so events reach
//!   the ledger in the order they were queued, across the thread and inline writes; the events
//!   one closure builds stay together, in the order it pushes them.
//! * Bounded memory: at [`MAX_QUEUED`] queued items the caller writes the queue itself
//!   (backpressure instead of loss or unbounded growth).
//! * Isolation: a closure that panics loses its own events (logged), never the batch or the
//!   thread.
//! * Shutdown: [`Recorder::close`] (called by the listener after every connection has ended)
//!   writes what is queued and stops the thread; an item queued after that is written inline.
//!   Dropping the [`Recorder`] without `close` also lets the thread write what is queued and end.

use crate::ledger::{Event, LedgerError, NewEntry};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Queued items at which `record_with` writes the queue on the caller's thread.
pub const MAX_QUEUED: usize = 16 * 1024;

/// How long the thread lets items gather after the first one of a queue before it writes
/// them, so that a few calls at a time (one agent) still share a sled insert. Bounded by
/// [`BATCH`]: a queue that reaches it is written at once.
pub const LINGER: Duration = Duration::from_millis(5);

/// Queued items that end the linger early.
pub const BATCH: usize = 64;

/// The recorder thread's name (as `ps -T` and panics show it).
pub const THREAD_NAME: &str = "toolgate-recorder";

/// Where batches go: `Ledger::append_entries` of the process's ledger.
pub type Sink = Box<dyn Fn(Vec<NewEntry>) -> Result<u64, LedgerError> + Send + Sync>;

/// One queued item: builds zero or more events, pushing them in order.
type Build = Box<dyn FnOnce(&mut Vec<Event>) + Send>;

#[derive(Default)]
struct Queue {
    items: Vec<Build>,
    closed: bool,
}

struct Shared {
    sink: Sink,
    queue: Mutex<Queue>,
    /// Held while a batch is taken from the queue and appended (keeps the ledger in queue order).
    writing: Mutex<()>,
    /// Signalled by the first item of a queue, the BATCH-th, and `close`.
    wake: Condvar,
}

/// Handle on the queue and its thread (one per proxy).
pub struct Recorder {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Recorder {
    /// Starts the recorder thread; batches go to `sink`.
    ///
    /// Errors: the OS refusing a thread (`std::io::Error`); the proxy cannot start without it.
    pub fn start(sink: Sink) -> std::io::Result<Recorder> {
        let shared = Arc::new(Shared {
            sink,
            queue: Mutex::new(Queue::default()),
            writing: Mutex::new(()),
            wake: Condvar::new(),
        });
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || run(&for_thread))?;
        Ok(Recorder {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `build`, which pushes a call's events when the thread writes the batch. Never
    /// fails: a failed append is logged by the writer (the call itself was decided and receipted
    /// already). `build` runs once, on the recorder thread (or inline, see [`MAX_QUEUED`]).
    pub fn record_with(&self, build: impl FnOnce(&mut Vec<Event>) + Send + 'static) {
        let s = &self.shared;
        let (wake, inline) = {
            let mut q = lock(&s.queue);
            q.items.push(Box::new(build));
            let n = q.items.len();
            (n == 1 || n == BATCH, n >= MAX_QUEUED || q.closed)
        };
        if inline {
            s.write_queued();
        } else if wake {
            // Only the first item of a queue wakes the thread (to start the linger) and the
            // BATCH-th (to end it): the thread takes the whole queue.
            s.wake.notify_one();
        }
    }

    /// Queues one ready event.
    pub fn record(&self, event: Event) {
        self.record_with(move |out| out.push(event));
    }

    /// Writes everything queued and stops the thread; waits for it (on the blocking pool, so
    /// no runtime worker blocks).
    pub async fn close(&self) {
        self.shared.close();
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            match tokio::task::spawn_blocking(move || thread.join()).await {
                Ok(Ok(())) => {}
                _ => tracing::error!("proxy event recorder thread failed"),
            }
        }
        // Anything queued between the thread's last write and `closed` being seen.
        self.shared.write_queued();
    }

    /// Items queued and not yet taken by a writer (tests watch backpressure with it).
    #[cfg(test)]
    fn queued(&self) -> usize {
        lock(&self.shared.queue).items.len()
    }
}

impl Drop for Recorder {
    /// Lets the thread write what is queued and end when the proxy goes away without `close`
    /// (a failed bind).
    fn drop(&mut self) {
        self.shared.close();
    }
}

/// The thread: wait for a first item, linger, write, until closed.
fn run(shared: &Shared) {
    loop {
        let closed = {
            let mut q = lock(&shared.queue);
            while q.items.is_empty() && !q.closed {
                q = wait(&shared.wake, q);
            }
            let deadline = Instant::now() + LINGER;
            while !q.closed && q.items.len() < BATCH {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                q = shared
                    .wake
                    .wait_timeout(q, left)
                    .map(|(q, _)| q)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            q.closed
        };
        shared.write_queued();
        if closed {
            return;
        }
    }
}

impl Shared {
    fn close(&self) {
        lock(&self.queue).closed = true;
        self.wake.notify_one();
    }

    /// Takes the queue, builds its events and appends them in one `append_entries`; a failure
    /// is logged.
    fn write_queued(&self) {
        let _writing = lock(&self.writing);
        let batch = std::mem::take(&mut lock(&self.queue).items);
        if batch.is_empty() {
            return;
        }
        let mut events = Vec::with_capacity(batch.len() + batch.len() / 2);
        for build in batch {
            let before = events.len();
            if catch_unwind(AssertUnwindSafe(|| build(&mut events))).is_err() {
                events.truncate(before);
                tracing::error!(
                    "building a proxy event panicked; that call's events were not recorded"
                );
            }
        }
        let n = events.len();
        if n == 0 {
            return;
        }
        let entries = events.into_iter().filter_map(|event| {
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

fn wait<'a>(cv: &Condvar, g: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
    cv.wait(g).unwrap_or_else(|e| e.into_inner())
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

    /// A sink into `ledger` that notes each batch's size and the thread that wrote it, and
    /// holds its first batch until `release` is sent.
    fn gated_sink(
        ledger: Arc<Ledger>,
        seen: Arc<Mutex<Vec<(usize, String)>>>,
        entered: std::sync::mpsc::Sender<()>,
        release: std::sync::mpsc::Receiver<()>,
    ) -> Sink {
        let release = Mutex::new(Some(release));
        Box::new(move |e: Vec<NewEntry>| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            lock(&seen).push((e.len(), name));
            if let Some(r) = lock(&release).take() {
                let _ = entered.send(());
                let _ = r.recv();
            }
            ledger.append_entries(e)
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_are_written_on_the_recorder_thread_in_order_and_a_full_queue_pushes_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Arc::new(Ledger::open(&store).unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        let sink = gated_sink(ledger.clone(), seen.clone(), entered_tx, release_rx);
        let rec = Arc::new(Recorder::start(sink).unwrap());
        let n = MAX_QUEUED + 500;
        // The thread takes event 0 and is held in the sink; the caller's MAX_QUEUED-th next
        // record must then write inline, after the held batch (it waits for the writer lock).
        rec.record(event(0));
        entered.recv().unwrap();
        let producer = {
            let rec = rec.clone();
            std::thread::spawn(move || (1..n).for_each(|i| rec.record(event(i))))
        };
        while rec.queued() < MAX_QUEUED {
            std::thread::yield_now();
        }
        assert_eq!(
            rec.queued(),
            MAX_QUEUED,
            "the queue never grows past MAX_QUEUED"
        );
        release.send(()).unwrap();
        producer.join().unwrap();
        rec.close().await;
        rec.record(event(n)); // after close: written inline
        let batches = lock(&seen).clone();
        assert_eq!(
            batches[0],
            (1, THREAD_NAME.to_string()),
            "held batch: {batches:?}"
        );
        assert_eq!(
            batches[1].0, MAX_QUEUED,
            "the full queue in one batch: {batches:?}"
        );
        assert!(batches.iter().all(|(len, _)| *len <= MAX_QUEUED));
        assert_eq!(batches.iter().map(|b| b.0).sum::<usize>(), n + 1);
        let all = ledger.read_from(1, n + 10).unwrap();
        assert_eq!(all.len(), n + 1);
        for (i, e) in all.iter().enumerate() {
            assert_eq!(e.record["content"], i.to_string(), "seq {}", e.seq);
            assert_eq!(e.tenant_id, if i % 2 == 0 { "t1" } else { "t2" });
            assert_eq!(e.kind, "TOOL_CALL_PRE");
        }
    }

    #[tokio::test]
    async fn a_builder_that_panics_loses_only_its_own_events() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Arc::new(Ledger::open(&store).unwrap());
        let sink = ledger.clone();
        let rec =
            Recorder::start(Box::new(move |e: Vec<NewEntry>| sink.append_entries(e))).unwrap();
        rec.record(event(0));
        rec.record_with(|out| {
            out.push(event(100));
            panic!("a bug in an event builder");
        });
        rec.record_with(|out| {
            out.push(event(1));
            out.push(event(2));
        });
        rec.close().await;
        let contents: Vec<_> = ledger
            .read_from(1, 10)
            .unwrap()
            .iter()
            .map(|e| e.record["content"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(contents, ["0", "1", "2"]);
    }
}
