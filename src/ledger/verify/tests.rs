//! Unit tests of `ledger::verify` (real sled store in a tempdir).

use super::*;
use crate::ledger::canon::ZERO_HASH;
use crate::ledger::receipt::{ReceiptEntry, Segment};
use crate::ledger::{Ledger, LedgerEntry, ReceiptBody, ReceiptKind, ReceiptLog};
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use serde_json::{json, Value};
use std::sync::Arc;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    receipts: Arc<ReceiptLog>,
    ledger: Ledger,
}

fn body(i: usize) -> ReceiptBody {
    ReceiptBody {
        kind: ReceiptKind::Decision,
        tenant_id: "t1".into(),
        subject_id: format!("dec_{i}"),
        request_hash: "ab".repeat(32),
        decision: Decision::Allow,
        authorization_decision: AuthorizationDecision::Allow,
        decision_reason_code: ReasonCode::PolicyAllow,
        policy_version: "v1".into(),
    }
}

/// Receipts issued one after the other: an idle log signs a checkpoint at every seq.
async fn fixture(receipts: usize, events: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    for i in 0..receipts {
        log.issue(body(i)).await.unwrap();
    }
    let ledger = Ledger::open(&store).unwrap();
    let entries = (0..events)
        .map(|i| ("TOOL_CALL_PRE".to_string(), json!({"i": i})))
        .collect();
    ledger.append_batch("t1", entries).unwrap();
    Fixture {
        _dir: dir,
        store,
        receipts: Arc::new(log),
        ledger,
    }
}

impl Fixture {
    fn verify(&self) -> VerifyReport {
        verify(&self.store, &self.receipts.public_key_pem()).unwrap()
    }
    /// Edits the JSON value at `seq_key(seq)` of `tree` (a segment in `Receipts`).
    fn edit(&self, tree: TreeName, seq: u64, edit: impl FnOnce(&mut Value)) {
        use crate::store::codec::{compress, stored_json};
        let t = self.store.tree(tree);
        let stored = t.get_raw(&seq_key(seq)).unwrap().unwrap();
        let json = stored_json(&stored).unwrap();
        let mut v: Value = serde_json::from_slice(&json).unwrap();
        edit(&mut v);
        // Written back in the form it was found in (compressed segments stay compressed).
        let mut bytes = serde_json::to_vec(&v).unwrap();
        if matches!(json, std::borrow::Cow::Owned(_)) {
            bytes = compress(&bytes);
        }
        t.put_raw(&seq_key(seq), &bytes).unwrap();
    }
    /// A receipt chained after `last` (a forgery made without the key).
    fn forge_after(last: &ReceiptEntry) -> ReceiptEntry {
        let mut next = ReceiptEntry {
            receipt_id: "rcpt_forged".into(),
            seq: last.seq + 1,
            issued_at: "2026-11-21T10:00:00.000Z".into(),
            body: body(99),
            prev_hash: last.hash.clone(),
            hash: String::new(),
        };
        next.hash = next.compute_hash();
        next
    }
    /// Issues `batches` groups of `size` receipts at once (each group shares a segment).
    async fn issue_groups(&self, batches: usize, size: usize) {
        for _ in 0..batches {
            let tasks: Vec<_> = (0..size)
                .map(|i| {
                    let log = self.receipts.clone();
                    tokio::spawn(async move { log.issue(body(i)).await.unwrap() })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        }
    }
}

fn first(c: &ChainReport) -> (u64, String) {
    let p = c.first_problem.clone().expect("a problem");
    (p.seq, p.what)
}

#[tokio::test]
async fn intact_chains_verify() {
    let f = fixture(5, 4).await;
    let r = f.verify();
    assert!(r.ok(), "{r}");
    assert_eq!(
        (r.receipts.entries, r.events.entries, r.events.last_seq),
        (5, 4, 4)
    );
    assert_eq!(r.receipts.checkpoints, 5);
    let text = r.to_string();
    assert!(text.ends_with("\nOK") && text.contains(&r.key_id), "{text}");
    assert_eq!(f.ledger.len(), 4);
    let empty = fixture(0, 0).await.verify();
    assert!(empty.ok() && empty.receipts.entries == 0);
}

#[tokio::test]
async fn tampered_receipts_and_checkpoints_are_detected() {
    type Edit = fn(&mut Value);
    let cases: Vec<(u64, Edit, &str)> = vec![
        (
            3,
            |v| v["receipts"][0]["decision"] = json!("BLOCK"),
            "hash does not match the contents",
        ),
        (
            4,
            |v| v["receipts"][0]["seq"] = json!(7),
            "stored under seq 4 but says seq 7",
        ),
        (
            1,
            |v| v["receipts"][0]["prev_hash"] = json!("1".repeat(64)),
            "prev_hash of the first entry is not 64 zeros",
        ),
        (
            2,
            |v| v["checkpoint"]["signature"] = json!(format!("{}==", "A".repeat(86))),
            "checkpoint: signature does not verify",
        ),
        (
            2,
            |v| v["checkpoint"]["signing_key_id"] = json!("0000000000000000"),
            "checkpoint: signed by key 0000000000000000",
        ),
        (
            3,
            |v| v["checkpoint"]["hash"] = json!("2".repeat(64)),
            "checkpoint: hash does not match the receipt's hash",
        ),
        (
            5,
            |v| v["checkpoint"] = Value::Null,
            "segment does not decode",
        ),
    ];
    for (seq, edit, expected) in cases {
        let f = fixture(5, 0).await;
        f.edit(TreeName::Receipts, seq, edit);
        let r = f.verify();
        assert!(!r.ok());
        let (at, what) = first(&r.receipts);
        assert_eq!(at, seq, "{what}");
        assert!(what.starts_with(expected), "{what} vs {expected}");
        assert!(
            r.to_string()
                .contains(&format!("FAILED: receipts seq {seq}: ")),
            "{r}"
        );
    }
}

#[tokio::test]
async fn a_rehashed_receipt_fails_its_checkpoint_and_the_next_link() {
    let f = fixture(3, 0).await;
    f.edit(TreeName::Receipts, 2, |v| {
        let r = &mut v["receipts"][0];
        r["decision"] = json!("BLOCK");
        let mut e: ReceiptEntry = serde_json::from_value(r.clone()).unwrap();
        e.hash = e.compute_hash();
        *r = serde_json::to_value(e).unwrap();
    });
    let r = f.verify();
    assert_eq!(
        first(&r.receipts),
        (
            2,
            "checkpoint: hash does not match the receipt's hash".to_string()
        )
    );
    assert_eq!(r.receipts.problems, 2, "seq 3 no longer links: {r}");
}

#[tokio::test]
async fn receipts_outside_a_valid_checkpoint_are_detected() {
    // Appended to a signed segment, after its checkpoint.
    let f = fixture(3, 0).await;
    f.edit(TreeName::Receipts, 3, |v| {
        let last: ReceiptEntry = serde_json::from_value(v["receipts"][0].clone()).unwrap();
        let forged = Fixture::forge_after(&last);
        v["receipts"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::to_value(forged).unwrap());
    });
    let (at, what) = first(&f.verify().receipts);
    assert_eq!(at, 3);
    assert!(
        what.contains("last receipt is seq 4, outside the checkpoint"),
        "{what}"
    );
    // A new segment whose checkpoint was not made with the key.
    let f = fixture(3, 0).await;
    let tree = f.store.tree(TreeName::Receipts);
    let mut seg: Segment = tree.get(&seq_key(3)).unwrap().unwrap();
    let forged = Fixture::forge_after(&seg.receipts[0]);
    seg.checkpoint.seq = 4;
    seg.checkpoint.hash = forged.hash.clone();
    seg.receipts = vec![forged];
    tree.put(&seq_key(4), &seg).unwrap();
    let r = f.verify();
    assert_eq!(r.receipts.entries, 4);
    assert_eq!(
        first(&r.receipts),
        (4, "checkpoint: signature does not verify".to_string())
    );
}

#[tokio::test]
async fn group_signed_segments_verify_and_holes_are_classified() {
    let f = fixture(0, 0).await;
    f.issue_groups(17, 64).await; // 1088 receipts, more than TAIL_WINDOW
    let r = f.verify();
    assert!(r.ok(), "{r}");
    assert_eq!((r.receipts.entries, r.receipts.last_seq), (1088, 1088));
    assert!(r.receipts.checkpoints < 1088, "{r}");
    let tree = f.store.tree(TreeName::Receipts);
    let segments: Vec<(Vec<u8>, Segment)> = tree.scan(b"").unwrap();
    let key = |i: usize| segments[i].0.clone();
    let seqs = |i: usize| -> Vec<u64> { segments[i].1.receipts.iter().map(|e| e.seq).collect() };
    // A segment lost in the tail is a crash loss; one lost before it is a broken chain.
    let (early, late) = (seqs(0), seqs(segments.len() - 2));
    tree.remove(&key(segments.len() - 2)).unwrap();
    let r = f.verify();
    assert!(r.ok(), "{r}");
    assert_eq!(r.receipts.lost_in_crash, late);
    tree.remove(&key(0)).unwrap();
    let r = f.verify();
    assert_eq!(first(&r.receipts), (1, "entry is missing".to_string()));
    assert_eq!(r.receipts.problems as usize, early.len());
}

#[tokio::test]
async fn another_public_key_fails_every_checkpoint() {
    let f = fixture(2, 0).await;
    let other = tempfile::tempdir().unwrap();
    let other_store = Store::open(other.path()).unwrap();
    let other_pem = ReceiptLog::open(&other_store, other.path())
        .unwrap()
        .public_key_pem();
    let r = verify(&f.store, &other_pem).unwrap();
    assert_eq!(r.receipts.problems, 2);
    assert!(first(&r.receipts)
        .1
        .starts_with("checkpoint: signed by key"));
    assert!(matches!(
        verify(&f.store, "garbage"),
        Err(LedgerError::Key(_))
    ));
}

/// The ledger's stored values, `(key seq, value)` in key order.
mod events;
