//! Unit tests of `ledger::verify` (real sled store in a tempdir).

use super::*;
use crate::ledger::{Ledger, ReceiptBody, ReceiptKind, ReceiptLog};
use crate::vocab::{AuthorizationDecision, Decision, ReasonCode};
use serde_json::{json, Value};

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    receipts: ReceiptLog,
    ledger: Ledger,
}

fn fixture(receipts: usize, events: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    for i in 0..receipts {
        log.issue(ReceiptBody {
            kind: ReceiptKind::Decision,
            tenant_id: "t1".into(),
            subject_id: format!("dec_{i}"),
            request_hash: "ab".repeat(32),
            decision: Decision::Allow,
            authorization_decision: AuthorizationDecision::Allow,
            decision_reason_code: ReasonCode::PolicyAllow,
            policy_version: "v1".into(),
        })
        .unwrap();
    }
    let ledger = Ledger::open(&store).unwrap();
    let entries = (0..events)
        .map(|i| ("TOOL_CALL_PRE".to_string(), json!({"i": i})))
        .collect();
    ledger.append_batch("t1", entries).unwrap();
    Fixture {
        _dir: dir,
        store,
        receipts: log,
        ledger,
    }
}

impl Fixture {
    fn verify(&self) -> VerifyReport {
        verify(&self.store, &self.receipts.public_key_pem()).unwrap()
    }
    fn edit(&self, tree: TreeName, seq: u64, edit: impl FnOnce(&mut Value)) {
        let t = self.store.tree(tree);
        let mut v: Value =
            serde_json::from_slice(&t.get_raw(&seq_key(seq)).unwrap().unwrap()).unwrap();
        edit(&mut v);
        t.put_raw(&seq_key(seq), &serde_json::to_vec(&v).unwrap())
            .unwrap();
    }
}

fn first(c: &ChainReport) -> (u64, String) {
    let p = c.first_problem.clone().expect("a problem");
    (p.seq, p.what)
}

#[test]
fn intact_chains_verify() {
    let f = fixture(5, 4);
    let r = f.verify();
    assert!(r.ok(), "{r}");
    assert_eq!(
        (r.receipts.entries, r.events.entries, r.events.last_seq),
        (5, 4, 4)
    );
    let text = r.to_string();
    assert!(text.ends_with("\nOK") && text.contains(&r.key_id), "{text}");
    assert_eq!(f.ledger.len(), 4);
    let empty = fixture(0, 0).verify();
    assert!(empty.ok() && empty.receipts.entries == 0);
}

#[test]
fn tampered_receipts_are_detected() {
    type Edit = fn(&mut Value);
    let cases: Vec<(u64, Edit, &str)> = vec![
        (
            3,
            |v| v["decision"] = json!("BLOCK"),
            "hash does not match the contents",
        ),
        (
            2,
            |v| v["signature"] = json!("AAAA"),
            "signature does not verify",
        ),
        (
            4,
            |v| v["seq"] = json!(7),
            "stored under seq 4 but says seq 7",
        ),
        (
            1,
            |v| v["prev_hash"] = json!("1".repeat(64)),
            "prev_hash of the first entry is not 64 zeros",
        ),
        (
            2,
            |v| v["signing_key_id"] = json!("0000000000000000"),
            "signed by key 0000000000000000",
        ),
    ];
    for (seq, edit, expected) in cases {
        let f = fixture(5, 0);
        f.edit(TreeName::Receipts, seq, edit);
        let r = f.verify();
        assert!(!r.ok());
        let (at, what) = first(&r.receipts);
        assert_eq!(at, seq);
        assert!(what.starts_with(expected), "{what} vs {expected}");
        assert!(
            r.to_string()
                .contains(&format!("FAILED: receipts seq {seq}: ")),
            "{r}"
        );
    }
}

#[test]
fn a_rehashed_receipt_still_fails_its_signature_and_the_next_link() {
    let f = fixture(3, 0);
    f.edit(TreeName::Receipts, 2, |v| {
        v["decision"] = json!("BLOCK");
        let mut r: Receipt = serde_json::from_value(v.clone()).unwrap();
        r.hash = r.compute_hash();
        *v = serde_json::to_value(r).unwrap();
    });
    let r = f.verify();
    assert_eq!(
        first(&r.receipts),
        (2, "signature does not verify".to_string())
    );
    assert_eq!(r.receipts.problems, 2, "seq 3 no longer links");
}

#[test]
fn another_public_key_fails_every_receipt() {
    let f = fixture(2, 0);
    let other = tempfile::tempdir().unwrap();
    let other_store = Store::open(other.path()).unwrap();
    let other_pem = ReceiptLog::open(&other_store, other.path())
        .unwrap()
        .public_key_pem();
    let r = verify(&f.store, &other_pem).unwrap();
    assert_eq!(r.receipts.problems, 2);
    assert!(matches!(
        verify(&f.store, "garbage"),
        Err(LedgerError::Key(_))
    ));
}

#[test]
fn tampered_and_corrupt_events_are_detected() {
    let f = fixture(0, 3);
    f.edit(TreeName::Ledger, 2, |v| v["record"]["i"] = json!(99));
    let r = f.verify();
    assert_eq!(
        first(&r.events),
        (2, "hash does not match the contents".to_string())
    );
    assert!(
        r.to_string()
            .ends_with("FAILED: events seq 2: hash does not match the contents (1 problem(s))"),
        "{r}"
    );
    f.store
        .tree(TreeName::Ledger)
        .put_raw(&seq_key(3), b"{not json")
        .unwrap();
    let (at, what) = first(&f.verify().events);
    assert_eq!(at, 2);
    assert_eq!(f.verify().events.problems, 2, "{what}");
}

#[test]
fn holes_are_crash_losses_in_the_tail_and_problems_elsewhere() {
    let n = TAIL_WINDOW as usize + 10;
    let f = fixture(0, n);
    let tree = f.store.tree(TreeName::Ledger);
    tree.remove(&seq_key(5)).unwrap();
    tree.remove(&seq_key(n as u64 - 1)).unwrap();
    let r = f.verify();
    assert_eq!(r.events.lost_in_crash, vec![n as u64 - 1]);
    assert_eq!(first(&r.events), (5, "entry is missing".to_string()));
    assert_eq!(
        r.events.problems, 1,
        "the entry after a hole is not blamed for its link"
    );
    assert!(r.to_string().contains("lost in a crash"), "{r}");
}

#[test]
fn entries_at_foreign_keys_are_reported() {
    let f = fixture(0, 2);
    f.store
        .tree(TreeName::Ledger)
        .put_raw(b"stray", b"{}")
        .unwrap();
    let r = f.verify();
    assert_eq!(first(&r.events).0, 0);
    assert!(first(&r.events)
        .1
        .contains("1 entries are not at sequence keys"));
}
