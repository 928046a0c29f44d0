//! Unit tests of `ledger::receipt` (real sled store in a tempdir).

use super::signer::MAX_BATCH;
use super::*;
use crate::ledger::canon::ZERO_HASH;
use crate::ledger::signing::parse_public_pem;
use crate::ledger::verify::verify;
use checkpoint::CheckpointRecord;
use ed25519_dalek::VerifyingKey;
use std::future::Future;
use std::sync::Arc;

pub(crate) fn body(subject: &str) -> ReceiptBody {
    ReceiptBody {
        kind: ReceiptKind::Decision,
        tenant_id: "t1".into(),
        subject_id: subject.into(),
        request_hash: crate::ids::sha256_hex(subject.as_bytes()),
        decision: Decision::Allow,
        authorization_decision: AuthorizationDecision::Allow,
        decision_reason_code: ReasonCode::PolicyAllow,
        policy_version: "default@2026.11.0".into(),
    }
}

fn public(log: &ReceiptLog) -> VerifyingKey {
    parse_public_pem(&log.public_key_pem()).unwrap()
}

fn segments(store: &Store) -> Vec<Segment> {
    let rows = store.tree(TreeName::Receipts).scan::<Segment>(b"").unwrap();
    rows.into_iter().map(|(_, s)| s).collect()
}

fn stored_checkpoints(store: &Store) -> Vec<CheckpointRecord> {
    segments(store).into_iter().map(|s| s.checkpoint).collect()
}

/// Issues `n` receipts from tasks spawned at once, returned in seq order.
pub(super) async fn issue_together(log: &Arc<ReceiptLog>, n: usize) -> Vec<Receipt> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let log = log.clone();
            tokio::spawn(async move { log.issue(body(&i.to_string())).await.unwrap() })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out.sort_by_key(|r| r.entry.seq);
    out
}

#[tokio::test]
async fn receipts_chain_and_an_idle_log_signs_each_one_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    let a = log.issue(body("a")).await.unwrap();
    let b = log.issue(body("b")).await.unwrap();
    assert_eq!((a.entry.seq, b.entry.seq, log.len()), (1, 2, 2));
    assert_eq!(a.entry.prev_hash, ZERO_HASH);
    assert_eq!(b.entry.prev_hash, a.entry.hash);
    assert!(a.entry.receipt_id.starts_with("rcpt_"));
    let key = public(&log);
    for r in [&a, &b] {
        assert_eq!(r.entry.hash, r.entry.compute_hash());
        assert_eq!(
            (r.checkpoint_seq, r.checkpoint_path.len()),
            (r.entry.seq, 0)
        );
        assert_eq!(r.checkpoint_hash, r.entry.hash);
        assert_eq!(r.signing_key_id, signing::key_id(&key));
        r.verify(&key).unwrap();
    }
    let stored: Segment = store
        .tree(TreeName::Receipts)
        .get(&seq_key(2))
        .unwrap()
        .unwrap();
    assert_eq!(stored.receipts, vec![b.entry.clone()]);
    assert_eq!(stored.checkpoint.signature, b.signature);
    let checkpoints = stored_checkpoints(&store);
    assert_eq!(checkpoints.len(), 2);
    assert!(checkpoints.iter().all(|c| c.problem(&key).is_none()));
}

#[tokio::test]
async fn receipts_issued_together_share_one_checkpoint_signature() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let all = issue_together(&log, 10).await;
    let key = public(&log);
    for r in &all {
        r.verify(&key).unwrap();
        assert_eq!(r.checkpoint_seq, 10, "one checkpoint covers the batch");
        assert_eq!(r.checkpoint_path.len() as u64, 10 - r.entry.seq);
    }
    // The path of receipt n is the content digests of n + 1 ..= 10.
    let digests: Vec<String> = all.iter().map(|r| r.entry.content_digest()).collect();
    assert_eq!(*all[6].checkpoint_path, digests[7..]);
    let stored = segments(&store);
    assert_eq!(stored.len(), 1, "one insert for the batch");
    let entries: Vec<ReceiptEntry> = all.iter().map(|r| r.entry.clone()).collect();
    assert_eq!(stored[0].receipts, entries);
    let report = verify(&store, &log.public_key_pem()).unwrap();
    assert!(report.ok() && report.receipts.checkpoints == 1, "{report}");
}

#[tokio::test]
async fn a_batch_is_at_most_max_batch_receipts() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let n = MAX_BATCH + 6;
    let all = issue_together(&log, n).await;
    let key = public(&log);
    let mut seqs: Vec<u64> = all.iter().map(|r| r.checkpoint_seq).collect();
    seqs.dedup();
    assert_eq!(seqs, vec![MAX_BATCH as u64, n as u64]);
    for r in &all {
        assert!(r.checkpoint_path.len() < MAX_BATCH);
        r.verify(&key).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_issues_make_a_gap_free_fully_signed_chain() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..60 {
                    out.push(log.issue(body(&format!("{t}-{i}"))).await.unwrap());
                }
                out
            })
        })
        .collect();
    let key = public(&log);
    for t in tasks {
        for r in t.await.unwrap() {
            r.verify(&key).unwrap();
        }
    }
    assert_eq!(log.len(), 240);
    let report = verify(&store, &log.public_key_pem()).unwrap();
    assert!(report.ok(), "{report}");
    assert_eq!(
        (report.receipts.entries, report.receipts.last_seq),
        (240, 240)
    );
    assert!(report.receipts.lost_in_crash.is_empty());
}

#[tokio::test]
async fn a_cancelled_issue_leaves_its_receipt_stored_and_covered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    // Poll once (it appends and waits for the signer, which cannot run in between on this
    // single-threaded runtime), then drop it.
    let mut gone = Box::pin(log.issue(body("a")));
    let first_poll =
        std::future::poll_fn(|cx| std::task::Poll::Ready(gone.as_mut().poll(cx))).await;
    assert!(first_poll.is_pending());
    drop(gone);
    let next = log.issue(body("b")).await.unwrap();
    assert_eq!(next.entry.seq, 2);
    let report = verify(&store, &log.public_key_pem()).unwrap();
    assert!(report.ok(), "{report}");
    assert_eq!(report.receipts.entries, 2);
}

#[test]
fn opening_outside_a_tokio_runtime_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let err = ReceiptLog::open(&store, dir.path()).err().unwrap();
    assert!(err.to_string().contains("needs a tokio runtime"), "{err}");
}

#[tokio::test]
async fn the_hash_covers_every_field_and_the_chain_position() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let r = ReceiptLog::open(&store, dir.path())
        .unwrap()
        .issue(body("x"))
        .await
        .unwrap();
    let edits: [fn(&mut ReceiptEntry); 12] = [
        |r| r.receipt_id = "rcpt_other".into(),
        |r| r.seq = 2,
        |r| r.issued_at = "2020-01-01T00:00:00.000Z".into(),
        |r| r.prev_hash = "1".repeat(64),
        |r| r.body.kind = ReceiptKind::HoldResolution,
        |r| r.body.tenant_id = "t2".into(),
        |r| r.body.subject_id = "y".into(),
        |r| r.body.request_hash = "0".repeat(64),
        |r| r.body.decision = Decision::Block,
        |r| r.body.authorization_decision = AuthorizationDecision::Deny,
        |r| r.body.decision_reason_code = ReasonCode::ScopeViolation,
        |r| r.body.policy_version = "v2".into(),
    ];
    for (i, edit) in edits.iter().enumerate() {
        let mut changed = r.entry.clone();
        edit(&mut changed);
        assert_ne!(changed.compute_hash(), r.entry.hash, "edit {i}");
    }
}

#[tokio::test]
async fn a_single_receipt_verifies_on_its_own_and_edits_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let all = issue_together(&log, 3).await;
    let key = public(&log);
    let r = &all[0];
    assert_eq!(r.checkpoint_path.len(), 2);
    r.verify(&key).unwrap();
    type Edit = (fn(&mut Receipt), &'static str);
    let edits: [Edit; 6] = [
        (
            |r| r.entry.body.decision = Decision::Block,
            "hash does not match",
        ),
        (
            |r| r.checkpoint_path = vec![r.checkpoint_path[0].clone(), "0".repeat(64)].into(),
            "does not lead to",
        ),
        (
            |r| r.checkpoint_path = r.checkpoint_path[1..].to_vec().into(),
            "checkpoint_seq does not match",
        ),
        (|r| r.checkpoint_hash = "0".repeat(64), "does not lead to"),
        (
            |r| r.signature = format!("{}==", "A".repeat(86)),
            "signature does not verify",
        ),
        (|r| r.signing_key_id = "0".repeat(16), "signed by key 0000"),
    ];
    for (edit, expected) in edits {
        let mut changed = r.clone();
        edit(&mut changed);
        let err = changed.verify(&key).unwrap_err();
        assert!(err.contains(expected), "{err} vs {expected}");
    }
    let json = serde_json::to_value(r).unwrap();
    for field in [
        "receipt_id",
        "seq",
        "issued_at",
        "kind",
        "decision",
        "prev_hash",
        "hash",
        "signature",
        "signing_key_id",
        "checkpoint_seq",
        "checkpoint_hash",
        "checkpoint_path",
    ] {
        assert!(json.get(field).is_some(), "{field} missing in {json}");
    }
    assert_eq!(json["decision_reason_code"], "policy_allow");
    let back: Receipt = serde_json::from_value(json).unwrap();
    assert_eq!(&back, r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: cargo test --release --lib ledger -- --ignored --nocapture"]
async fn measure_issue_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let n = 50_000usize;
    let start = std::time::Instant::now();
    for i in 0..n {
        log.issue(body(&i.to_string())).await.unwrap();
    }
    let one = start.elapsed();
    let start = std::time::Instant::now();
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let log = log.clone();
            tokio::spawn(async move {
                for i in 0..n / 32 {
                    log.issue(body(&i.to_string())).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let many = start.elapsed();
    let checkpoints = stored_checkpoints(&store).len();
    println!(
        "issue(): sequential {:.0}/s ({:.1} µs each); 32 tasks {:.0}/s; {checkpoints} checkpoints for {} receipts",
        n as f64 / one.as_secs_f64(),
        one.as_secs_f64() * 1e6 / n as f64,
        n as f64 / many.as_secs_f64(),
        2 * n
    );
}

#[tokio::test(start_paused = true)]
async fn receipts_nobody_waits_for_share_a_signature_and_an_awaited_one_is_signed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    let first = log.chain(body("a"), false).unwrap();
    // The signer runs now and lingers instead of signing "a" alone.
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert!(
        segments(&store).is_empty(),
        "signed before the linger ended"
    );
    let _second = log.chain(body("b"), false).unwrap();
    let _third = log.chain(body("c"), false).unwrap();
    let signed = first.signed().await.unwrap();
    assert_eq!(signed.entry.seq, 1);
    assert_eq!(signed.checkpoint_seq, 3, "one checkpoint covers all three");
    assert_eq!(stored_checkpoints(&store).len(), 1);
    // An awaited receipt ends a linger at once: with time paused, waiting for it must not need
    // the clock to advance.
    let _lingering = log.chain(body("d"), false).unwrap();
    tokio::task::yield_now().await;
    let before = tokio::time::Instant::now();
    let awaited = log.chain(body("e"), true).unwrap().signed().await.unwrap();
    assert_eq!(awaited.checkpoint_seq, 5);
    assert!(
        before.elapsed() < super::signer::LINGER,
        "{:?}",
        before.elapsed()
    );
    assert!(verify(&store, &log.public_key_pem()).unwrap().ok());
}

#[tokio::test(start_paused = true)]
async fn settle_stores_every_chained_receipt_without_waiting_out_the_linger() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    for i in 0..3 {
        drop(log.chain(body(&i.to_string()), false).unwrap());
    }
    tokio::task::yield_now().await;
    let before = tokio::time::Instant::now();
    log.settle().await;
    assert!(
        before.elapsed() < super::signer::LINGER,
        "{:?}",
        before.elapsed()
    );
    let stored: Vec<u64> = log
        .read_from(1, 10)
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(stored, vec![1, 2, 3]);
    log.settle().await; // nothing queued: returns at once
}
