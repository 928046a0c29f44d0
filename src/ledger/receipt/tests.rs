//! Unit tests of `ledger::receipt` (real sled store in a tempdir).

use super::*;
use crate::ledger::canon::ZERO_HASH;
use crate::ledger::signing::{parse_public_pem, PRIVATE_KEY_FILE, PUBLIC_KEY_FILE};
use ed25519_dalek::{Signature, Verifier};
use std::os::unix::fs::PermissionsExt;
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

#[test]
fn receipts_chain_and_are_signed_by_the_published_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    let a = log.issue(body("a")).unwrap();
    let b = log.issue(body("b")).unwrap();
    assert_eq!((a.seq, b.seq, log.len()), (1, 2, 2));
    assert_eq!(a.prev_hash, ZERO_HASH);
    assert_eq!(b.prev_hash, a.hash);
    assert!(a.receipt_id.starts_with("rcpt_"));
    let key = parse_public_pem(&log.public_key_pem()).unwrap();
    for r in [&a, &b] {
        assert_eq!(r.hash, r.compute_hash());
        let sig = Signature::from_slice(&B64.decode(&r.signature).unwrap()).unwrap();
        assert!(key.verify(&hex::decode(&r.hash).unwrap(), &sig).is_ok());
        assert_eq!(r.signing_key_id, signing::key_id(&key));
    }
    let stored: Receipt = store
        .tree(TreeName::Receipts)
        .get(&seq_key(2))
        .unwrap()
        .unwrap();
    assert_eq!(stored, b);
}

#[test]
fn the_receipt_json_flattens_the_body() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let r = ReceiptLog::open(&store, dir.path())
        .unwrap()
        .issue(body("x"))
        .unwrap();
    let v = serde_json::to_value(&r).unwrap();
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
    ] {
        assert!(v.get(field).is_some(), "{field} missing in {v}");
    }
    assert_eq!(v["decision_reason_code"], "policy_allow");
}

#[test]
fn key_and_chain_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (first_id, last) = {
        let store = Store::open(dir.path()).unwrap();
        let log = ReceiptLog::open(&store, dir.path()).unwrap();
        log.issue(body("a")).unwrap();
        let last = log.issue(body("b")).unwrap();
        store.flush_blocking().unwrap();
        (log.key_id().to_string(), last)
    };
    let mode = std::fs::metadata(dir.path().join(PRIVATE_KEY_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let store = crate::ledger::test_support::reopen(dir.path());
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    assert_eq!(log.key_id(), first_id);
    assert_eq!(log.len(), 2);
    let next = log.issue(body("c")).unwrap();
    assert_eq!((next.seq, next.prev_hash.as_str()), (3, last.hash.as_str()));
    let published = std::fs::read_to_string(dir.path().join(PUBLIC_KEY_FILE)).unwrap();
    assert_eq!(published, log.public_key_pem());
}

#[test]
fn concurrent_issues_make_a_gap_free_valid_chain() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..60 {
                    log.issue(body(&format!("{t}-{i}"))).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(log.len(), 240);
    let report = crate::ledger::verify::verify(&store, &log.public_key_pem()).unwrap();
    assert!(report.ok(), "{report}");
    assert_eq!(
        (report.receipts.entries, report.receipts.last_seq),
        (240, 240)
    );
    assert!(report.receipts.lost_in_crash.is_empty());
}

#[test]
fn a_tail_hole_found_at_open_is_recorded_as_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    for s in ["a", "b", "c"] {
        log.issue(body(s)).unwrap();
    }
    // Simulate the crash: receipt 2 never reached disk, receipt 3 did.
    store.tree(TreeName::Receipts).remove(&seq_key(2)).unwrap();
    let reopened = ReceiptLog::open(&store, dir.path()).unwrap();
    assert_eq!(reopened.issue(body("d")).unwrap().seq, 4);
    let mut key = LOST_PREFIX.to_vec();
    key.extend_from_slice(&seq_key(2));
    assert!(store.tree(TreeName::Meta).contains(&key).unwrap());
    let report = crate::ledger::verify::verify(&store, &log.public_key_pem()).unwrap();
    assert!(report.ok(), "{report}");
    assert_eq!(report.receipts.lost_in_crash, vec![2]);
}

#[test]
#[ignore = "measurement: cargo test --release --lib ledger -- --ignored --nocapture"]
fn measure_issue_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let n = 100_000u64;
    let start = std::time::Instant::now();
    for i in 0..n {
        log.issue(body(&i.to_string())).unwrap();
    }
    let one = start.elapsed();
    let start = std::time::Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..n / 2 {
                    log.issue(body(&i.to_string())).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let two = start.elapsed();
    println!(
        "issue(): 1 thread {:.0}/s ({:.1} µs each); 2 threads {:.0}/s",
        n as f64 / one.as_secs_f64(),
        one.as_secs_f64() * 1e6 / n as f64,
        n as f64 / two.as_secs_f64()
    );
}

#[test]
fn the_hash_covers_every_field_and_the_chain_position() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let r = ReceiptLog::open(&store, dir.path())
        .unwrap()
        .issue(body("x"))
        .unwrap();
    let edits: [fn(&mut Receipt); 13] = [
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
        |r| r.signature = "changed".into(),
    ];
    for (i, edit) in edits.iter().enumerate() {
        let mut changed = r.clone();
        edit(&mut changed);
        let covered = i < 12; // the signature is over the hash, not part of it
        assert_eq!(changed.compute_hash() != r.hash, covered, "edit {i}");
    }
}
