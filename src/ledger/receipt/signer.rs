//! The receipt chain's head and its signer task: group-commit checkpoint signing.
//!
//! [`Signer::append`] puts a receipt on the chain under one short lock (seq, chain hash, head)
//! and queues it as *unsigned* with a one-shot waiter. The signer task (one per log, on the
//! tokio runtime that opened it) takes the queued receipts (at most [`MAX_BATCH`]), signs one
//! checkpoint over the last of them, stores checkpoint and receipts as one [`Segment`] value
//! (one sled insert per batch), and hands each waiter its stored receipt and the checkpoint.
//! When a caller waits for a queued receipt (POST /v1/enforce, holds) there is no timed linger:
//! the task only yields once to the runtime before taking a batch, so requests that are already
//! runnable append first. An idle log therefore signs and stores such a receipt at once; under
//! load, receipts that arrive while a batch is being signed and stored share the next signature
//! and insert. Receipts nobody waits for (the forward proxy's ALLOW and BLOCK, which act on the
//! chained receipt) let the task linger up to [`LINGER`] first, so that one agent's calls share
//! a signature and an insert too instead of waking the task for each.
//!
//! [`Segment`]: super::Segment
//!
//! Lifecycle: the task holds the state weakly and ends when the [`Signer`] is dropped. If it
//! ends for any other reason (its runtime shut down, a panic), the state is marked stopped:
//! queued waiters and later appends get an error instead of waiting forever.

use super::checkpoint::{statement, Checkpoint, CheckpointRecord, SegmentRef};
use super::{chain_hash, ReceiptBody, ReceiptEntry};
use crate::ledger::canon::ChainHead;
use crate::ledger::LedgerError;
use crate::store::{seq_key, Tree};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signer as _, SigningKey};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use tokio::sync::{oneshot, watch, Notify};

/// Most receipts one checkpoint signature covers (bounds `checkpoint_path` at `MAX_BATCH - 1`
/// digests, about 4.3 KB of JSON, and a segment at about 32 KB).
pub(crate) const MAX_BATCH: usize = 64;

/// How long the task lets receipts that nobody waits for gather before it signs them.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// A receipt before it has a place in the chain.
pub(crate) struct Draft {
    /// `rcpt_<uuid v7>`.
    pub(crate) receipt_id: String,
    /// RFC 3339 issue time.
    pub(crate) issued_at: String,
    /// Attested facts.
    pub(crate) body: ReceiptBody,
    /// Hex content digest of the three above.
    pub(crate) digest: String,
}

/// What a waiting receipt receives: its stored entry and the checkpoint covering it, or why its
/// segment could not be stored.
pub(crate) type Delivery = Result<(Arc<Checkpoint>, ReceiptEntry), String>;

/// Resolves with the [`Delivery`] of an appended receipt.
pub(crate) type Covered = oneshot::Receiver<Delivery>;

/// A receipt on the chain that no checkpoint covers yet.
struct Unsigned {
    entry: ReceiptEntry,
    digest: String,
    waiter: oneshot::Sender<Delivery>,
}

struct State {
    head: ChainHead,
    unsigned: Vec<Unsigned>,
    /// True when a queued receipt has a caller waiting for its signature.
    awaited: bool,
    stopped: bool,
}

struct Shared {
    state: Mutex<State>,
    key: SigningKey,
    key_id: String,
    receipts: Tree,
    /// The last seq the task has dealt with (stored, or failed to store); `settle` waits on it.
    done: watch::Sender<u64>,
}

/// Handle on the chain head and the signer task. Dropping it ends the task.
pub(crate) struct Signer {
    shared: Arc<Shared>,
    wake: Arc<Notify>,
}

/// The error of a receipt whose signer has stopped.
pub(crate) fn stopped() -> LedgerError {
    LedgerError::Key("the receipt signer has stopped".to_string())
}

impl Signer {
    /// Starts the signer task on the current tokio runtime with the chain resumed at `head`;
    /// segments go to `receipts` (the `Receipts` tree).
    ///
    /// Errors: [`LedgerError::Key`] when there is no current tokio runtime.
    pub(crate) fn start(
        head: ChainHead,
        key: SigningKey,
        key_id: String,
        receipts: Tree,
    ) -> Result<Signer, LedgerError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            LedgerError::Key("the receipt signer needs a tokio runtime".to_string())
        })?;
        let head_seq = head.seq;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                head,
                unsigned: Vec::new(),
                awaited: false,
                stopped: false,
            }),
            key,
            key_id,
            receipts,
            done: watch::Sender::new(head_seq),
        });
        let wake = Arc::new(Notify::new());
        runtime.spawn(run(Arc::downgrade(&shared), wake.clone()));
        Ok(Signer { shared, wake })
    }

    /// Appends `draft` to the chain and queues it for signing. Returns the receiver of its
    /// [`Delivery`]. `awaited`: the caller waits for the signature (the task signs at once);
    /// otherwise the task may linger up to [`LINGER`] for more receipts to share it.
    ///
    /// Errors: [`LedgerError::Key`] when the signer task has stopped.
    pub(crate) fn append(&self, draft: Draft, awaited: bool) -> Result<Covered, LedgerError> {
        let (waiter, covered) = oneshot::channel();
        let mut state = self.shared.lock();
        if state.stopped {
            return Err(stopped());
        }
        let seq = state.head.seq + 1;
        let hash = chain_hash(&draft.digest, seq, &state.head.hash);
        let prev_hash = std::mem::replace(&mut state.head.hash, hash.clone());
        state.head.seq = seq;
        let was_idle = state.unsigned.is_empty();
        // The first awaited receipt of a lingering queue ends the linger.
        let hurry = awaited && !state.awaited;
        state.awaited |= awaited;
        let entry = ReceiptEntry {
            receipt_id: draft.receipt_id,
            seq,
            issued_at: draft.issued_at,
            body: draft.body,
            prev_hash,
            hash,
        };
        state.unsigned.push(Unsigned {
            entry,
            digest: draft.digest,
            waiter,
        });
        drop(state);
        if was_idle || hurry {
            // The task drains the queue until it is empty, so only the first receipt of a
            // queue needs to wake it (and the first awaited one, to end a linger).
            self.wake.notify_one();
        }
        Ok(covered)
    }

    /// The last assigned sequence number (0 for an empty chain).
    pub(crate) fn head_seq(&self) -> u64 {
        self.shared.lock().head.seq
    }

    /// Ends any linger and waits until every receipt chained so far has been signed and stored
    /// (or its insert failed), so that a final flush covers the receipts nobody waited for.
    /// Returns at once when the task has stopped. Callers bound the wait.
    pub(crate) async fn settle(&self) {
        let (target, stopped) = {
            let mut state = self.shared.lock();
            state.awaited |= !state.unsigned.is_empty();
            (state.head.seq, state.stopped)
        };
        if stopped {
            return;
        }
        let mut done = self.shared.done.subscribe();
        self.wake.notify_one();
        let _ = done.wait_for(|seq| *seq >= target).await;
    }
}

impl Drop for Signer {
    fn drop(&mut self) {
        // The task holds the state weakly; waking it lets it see that the log is gone.
        self.wake.notify_one();
    }
}

impl Shared {
    /// The state lock; recovered when poisoned (every field is assigned in single steps after
    /// the values are computed, so a panic cannot leave it half-updated).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Signs one checkpoint over up to [`MAX_BATCH`] queued receipts, stores them as one
    /// segment and delivers them. Returns false when nothing was queued.
    fn sign_batch(&self) -> bool {
        let mut batch: Vec<Unsigned> = {
            let mut state = self.lock();
            let take = state.unsigned.len().min(MAX_BATCH);
            if take == state.unsigned.len() {
                state.awaited = false;
            }
            state.unsigned.drain(..take).collect()
        };
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return false;
        };
        let (first_seq, head) = (first.entry.seq, &last.entry);
        let signature = B64.encode(self.key.sign(&statement(head.seq, &head.hash)).to_bytes());
        let record = CheckpointRecord {
            seq: head.seq,
            hash: head.hash.clone(),
            signature,
            signing_key_id: self.key_id.clone(),
        };
        let stored = self.store(&record, &batch);
        if stored.is_err() {
            // Fail closed: receipts nobody waits for (the proxy's) were acted on when chained;
            // refuse every later receipt rather than let calls go on without stored evidence.
            let mut state = self.lock();
            state.stopped = true;
            for u in state.unsigned.drain(..) {
                let _ = u.waiter.send(Err(
                    "the receipt signer stopped after a failed insert".into()
                ));
            }
        }
        let digests = batch.iter_mut().map(|u| std::mem::take(&mut u.digest));
        let checkpoint = Arc::new(Checkpoint {
            seq: record.seq,
            hash: record.hash,
            signature: record.signature,
            first_seq,
            digests: digests.collect::<Vec<_>>().into(),
        });
        for u in batch {
            let delivery = match &stored {
                Ok(()) => Ok((checkpoint.clone(), u.entry)),
                Err(e) => Err(e.clone()),
            };
            // A waiter whose issue() was dropped is gone; its receipt is stored and covered.
            let _ = u.waiter.send(delivery);
        }
        self.done.send_replace(record.seq);
        true
    }

    /// Inserts the segment of `batch` under `seq_key(record.seq)`, LZ4-compressed (not flushed).
    fn store(&self, record: &CheckpointRecord, batch: &[Unsigned]) -> Result<(), String> {
        let segment = SegmentRef {
            checkpoint: record,
            receipts: batch.iter().map(|u| &u.entry).collect(),
        };
        self.receipts
            .put_compressed(&seq_key(record.seq), &segment)
            .map_err(|e| {
                tracing::error!(seq = record.seq, error = %e, "receipt segment insert failed; the chain has a hole here");
                format!("receipt segment was not stored: {e}")
            })
    }
}

/// Marks the state stopped when the task ends while the log still exists, failing every queued
/// and later receipt instead of leaving it waiting.
struct StopOnExit(Weak<Shared>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            let mut state = shared.lock();
            state.stopped = true;
            state.unsigned.clear();
            // Wake `settle` callers: nothing more will be stored.
            shared.done.send_replace(u64::MAX);
        }
    }
}

/// The signer task: wait for a queue, linger up to [`LINGER`] when nobody waits for a queued
/// receipt, yield once so runnable requests append first, sign batches until the queue is
/// empty, repeat. Ends when the log is dropped.
async fn run(shared: Weak<Shared>, wake: Arc<Notify>) {
    let _stop = StopOnExit(shared.clone());
    loop {
        wake.notified().await;
        let awaited = shared.upgrade().map(|log| log.lock().awaited);
        if awaited == Some(false) {
            // Only receipts nobody waits for (the forward proxy's): let more share the
            // signature; an awaited append or the log's drop ends the wait early.
            let _ = tokio::time::timeout(LINGER, wake.notified()).await;
        }
        loop {
            tokio::task::yield_now().await;
            let Some(log) = shared.upgrade() else {
                return;
            };
            if !log.sign_batch() {
                break;
            }
        }
    }
}
