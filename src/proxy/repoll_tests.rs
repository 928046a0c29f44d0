//! Tests of [`Repoll`]: self-wakes become polls in place, bounded; other wakes reach the task.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;

/// A task waker that counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

impl CountingWaker {
    fn count(&self) -> usize {
        self.0.load(SeqCst)
    }
}

/// Wakes itself and stays pending for its first `self_wakes` polls, then is ready with the
/// number of polls it took.
struct SelfWaking {
    self_wakes: usize,
    polls: usize,
}

impl Future for SelfWaking {
    type Output = usize;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        self.polls += 1;
        if self.polls > self.self_wakes {
            return Poll::Ready(self.polls);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F, task: &Arc<CountingWaker>) -> Poll<F::Output> {
    let waker = Waker::from(task.clone());
    Pin::new(f).poll(&mut Context::from_waker(&waker))
}

#[test]
fn self_wakes_are_polled_in_place_without_waking_the_task() {
    let task = Arc::new(CountingWaker::default());
    let mut f = Repoll::new(SelfWaking {
        self_wakes: 5,
        polls: 0,
    });
    assert_eq!(poll_once(&mut f, &task), Poll::Ready(6));
    assert_eq!(task.count(), 0, "no wake went to the scheduler");
}

#[test]
fn a_future_that_keeps_waking_itself_yields_to_the_scheduler() {
    let task = Arc::new(CountingWaker::default());
    let mut f = Repoll::new(SelfWaking {
        self_wakes: usize::MAX,
        polls: 0,
    });
    assert!(poll_once(&mut f, &task).is_pending());
    assert_eq!(f.inner.polls, MAX_REPOLLS + 1, "one poll plus the repolls");
    assert_eq!(task.count(), 1, "the last self-wake goes to the scheduler");
    // The next poll of the task starts a fresh round.
    assert!(poll_once(&mut f, &task).is_pending());
    assert_eq!(f.inner.polls, 2 * (MAX_REPOLLS + 1));
    assert_eq!(task.count(), 2);
}

/// Pending until its flag is set; keeps the latest waker so a test can wake it later.
struct Parked {
    ready: Arc<AtomicBool>,
    waker: Arc<Mutex<Option<Waker>>>,
}

impl Future for Parked {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.ready.load(SeqCst) {
            return Poll::Ready(());
        }
        *self.waker.lock().unwrap() = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[test]
fn a_wake_after_the_poll_reaches_the_task_and_the_next_poll_sees_it() {
    let task = Arc::new(CountingWaker::default());
    let (ready, waker) = (Arc::new(AtomicBool::new(false)), Arc::default());
    let mut f = Repoll::new(Parked {
        ready: ready.clone(),
        waker: Arc::clone(&waker),
    });
    assert!(poll_once(&mut f, &task).is_pending());
    assert_eq!(task.count(), 0);
    ready.store(true, SeqCst);
    let inner_waker = waker
        .lock()
        .unwrap()
        .take()
        .expect("the inner future kept a waker");
    std::thread::spawn(move || inner_waker.wake())
        .join()
        .unwrap();
    assert_eq!(task.count(), 1, "a wake from another thread is passed on");
    assert_eq!(poll_once(&mut f, &task), Poll::Ready(()));
}

/// On its first poll, has another thread wake it (and waits until it has), then stays pending;
/// ready on the next poll.
struct WokenFromElsewhereDuringPoll {
    polls: usize,
}

impl Future for WokenFromElsewhereDuringPoll {
    type Output = usize;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        self.polls += 1;
        if self.polls > 1 {
            return Poll::Ready(self.polls);
        }
        let (done_tx, done_rx) = mpsc::channel();
        let waker = cx.waker().clone();
        std::thread::spawn(move || {
            waker.wake();
            let _ = done_tx.send(());
        });
        done_rx.recv().unwrap();
        Poll::Pending
    }
}

#[test]
fn a_wake_from_another_thread_during_the_poll_is_not_lost() {
    let task = Arc::new(CountingWaker::default());
    let mut f = Repoll::new(WokenFromElsewhereDuringPoll { polls: 0 });
    assert_eq!(poll_once(&mut f, &task), Poll::Ready(2));
    assert_eq!(task.count(), 0);
}

#[test]
fn the_task_waker_is_replaced_when_the_task_moves() {
    let (first, second) = (
        Arc::new(CountingWaker::default()),
        Arc::new(CountingWaker::default()),
    );
    let (ready, waker) = (Arc::new(AtomicBool::new(false)), Arc::default());
    let mut f = Repoll::new(Parked {
        ready,
        waker: Arc::clone(&waker),
    });
    assert!(poll_once(&mut f, &first).is_pending());
    assert!(poll_once(&mut f, &second).is_pending());
    waker.lock().unwrap().take().unwrap().wake();
    assert_eq!((first.count(), second.count()), (0, 1));
}

#[tokio::test]
async fn no_repolls_once_the_coop_budget_is_spent() {
    // Spend the task's budget (128 units in tokio) without yielding: the next self-wake goes
    // to the scheduler at once.
    let task = Arc::new(CountingWaker::default());
    let mut f = Repoll::new(SelfWaking {
        self_wakes: 3,
        polls: 0,
    });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut spent = 0;
    while tokio::task::coop::has_budget_remaining() {
        tx.send(()).unwrap();
        rx.recv().await.unwrap();
        spent += 1;
        assert!(spent < 10_000, "the budget never ran out");
    }
    assert!(poll_once(&mut f, &task).is_pending());
    assert_eq!(f.inner.polls, 1);
    assert_eq!(task.count(), 1);
}
