//! [`Repoll`]: a connection future polled again in place when it wakes its own task during a
//! poll, instead of that wake going through the tokio scheduler.
//!
//! Why: the proxy reads a request's whole body before it decides (`intercept.rs`). hyper's
//! server connection delivers that body to the service through a channel polled in the same
//! task, so every request with a body wakes its own task while the task is being polled. tokio
//! treats a task woken during its poll as a yield: it is queued at the back of the worker's run
//! queue and an idle worker is unparked to help. With nothing else to run, that worker finds no
//! work and parks again: two futex calls and a context switch on the other core for every
//! request (measured: 2.2–2.6 futex calls per request at one connection through a bare hyper
//! proxy that reads the body, none without the read; BENCHMARKS.md). [`Repoll`] notices the
//! self-wake and polls the connection again at once, which is what the scheduler would have
//! done a moment later, minus the detour.
//!
//! Invariants:
//! * A wake from anywhere else (another task, another thread, a timer) is passed to the task's
//!   own waker as usual; a wake that races with the end of a poll is passed on too (at worst a
//!   spurious poll, never a lost wake-up).
//! * Fairness: at most [`MAX_REPOLLS`] extra polls per task poll, and none once the task's tokio
//!   coop budget is spent; after that the wake goes to the scheduler like any other.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// Extra polls of the inner future within one poll of the task (hyper's own dispatcher loop
/// gives a connection 16 rounds per poll before it yields).
pub(crate) const MAX_REPOLLS: usize = 16;

/// What the inner future's waker does: remember a wake during a poll, pass any other to the
/// task.
struct WakeState {
    /// True while [`Repoll::poll`] is polling the inner future.
    polling: AtomicBool,
    /// Set by every wake; cleared before each inner poll.
    woken: AtomicBool,
    /// The task's waker, from the latest outer poll.
    task: Mutex<Option<Waker>>,
}

impl WakeState {
    fn wake_task(&self) {
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = task.as_ref() {
            w.wake_by_ref();
        }
    }
}

impl Wake for WakeState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Ordering (SeqCst on both sides): either this load sees the poll still running, and
        // the poll's re-check of `woken` sees this wake, or the poll has ended and the task
        // is woken here. Both may happen; neither may be missed.
        self.woken.store(true, SeqCst);
        if !self.polling.load(SeqCst) {
            self.wake_task();
        }
    }
}

/// `F` polled with a waker that turns its wakes during a poll into another poll in place
/// (module docs). Output and cancellation are `F`'s own; dropping a `Repoll` drops `F`.
pub(crate) struct Repoll<F> {
    inner: Pin<Box<F>>,
    state: Arc<WakeState>,
    waker: Waker,
}

impl<F: Future> Repoll<F> {
    /// Wraps `inner` (boxed once, so the wrapper is `Unpin`).
    pub(crate) fn new(inner: F) -> Repoll<F> {
        let state = Arc::new(WakeState {
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            task: Mutex::new(None),
        });
        Repoll {
            inner: Box::pin(inner),
            waker: Waker::from(state.clone()),
            state,
        }
    }

    /// The wrapped future (for calls such as hyper's `graceful_shutdown`).
    pub(crate) fn inner(&mut self) -> Pin<&mut F> {
        self.inner.as_mut()
    }

    fn remember(&self, task: &Waker) {
        let mut slot = self
            .state
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !slot.as_ref().is_some_and(|w| w.will_wake(task)) {
            *slot = Some(task.clone());
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.remember(cx.waker());
        let state = &this.state;
        state.polling.store(true, SeqCst);
        let mut inner_cx = Context::from_waker(&this.waker);
        let mut polls = 0;
        let out = loop {
            state.woken.store(false, SeqCst);
            if let Poll::Ready(v) = this.inner.as_mut().poll(&mut inner_cx) {
                break Poll::Ready(v);
            }
            polls += 1;
            let again = state.woken.load(SeqCst)
                && polls <= MAX_REPOLLS
                && tokio::task::coop::has_budget_remaining();
            if !again {
                break Poll::Pending;
            }
        };
        state.polling.store(false, SeqCst);
        if out.is_pending() && state.woken.load(SeqCst) {
            // Woken during the last poll (out of repolls or budget) or just after it: let the
            // scheduler poll the task again.
            cx.waker().wake_by_ref();
        }
        out
    }
}

#[cfg(test)]
#[path = "repoll_tests.rs"]
mod tests;
