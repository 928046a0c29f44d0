//! Unit tests of what `ledger::receipt` keeps on disk: resuming after a reopen or a crash loss,
//! reading stored receipts back, and the compressed segment form (real sled store in a tempdir).

use super::signer::MAX_BATCH;
use super::tests::{body, issue_together};
use super::*;
use crate::ledger::signing::{PRIVATE_KEY_FILE, PUBLIC_KEY_FILE};
use crate::ledger::verify::verify;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

#[tokio::test]
async fn key_and_chain_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (first_id, last) = {
        let store = Store::open(dir.path()).unwrap();
        let log = ReceiptLog::open(&store, dir.path()).unwrap();
        log.issue(body("a")).await.unwrap();
        let last = log.issue(body("b")).await.unwrap();
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
    let next = log.issue(body("c")).await.unwrap();
    assert_eq!(next.entry.seq, 3);
    assert_eq!(next.entry.prev_hash, last.entry.hash);
    let published = std::fs::read_to_string(dir.path().join(PUBLIC_KEY_FILE)).unwrap();
    assert_eq!(published, log.public_key_pem());
}

#[tokio::test]
async fn a_segment_lost_at_the_head_is_resumed_from_the_last_stored_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    log.issue(body("a")).await.unwrap();
    let b = log.issue(body("b")).await.unwrap();
    log.issue(body("c")).await.unwrap();
    // Simulate the crash: the last segment never reached disk.
    store.tree(TreeName::Receipts).remove(&seq_key(3)).unwrap();
    drop(log);
    let reopened = ReceiptLog::open(&store, dir.path()).unwrap();
    assert_eq!(reopened.len(), 2);
    let d = reopened.issue(body("d")).await.unwrap();
    assert_eq!((d.entry.seq, &d.entry.prev_hash), (3, &b.entry.hash));
    let report = verify(&store, &reopened.public_key_pem()).unwrap();
    assert!(
        report.ok() && report.receipts.lost_in_crash.is_empty(),
        "{report}"
    );
}

#[tokio::test]
async fn a_tail_hole_found_at_open_is_recorded_as_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = ReceiptLog::open(&store, dir.path()).unwrap();
    for s in ["a", "b", "c"] {
        log.issue(body(s)).await.unwrap();
    }
    // Simulate the crash: the segment of receipt 2 never reached disk, that of 3 did.
    store.tree(TreeName::Receipts).remove(&seq_key(2)).unwrap();
    drop(log);
    let reopened = ReceiptLog::open(&store, dir.path()).unwrap();
    assert_eq!(reopened.issue(body("d")).await.unwrap().entry.seq, 4);
    let mut key = LOST_PREFIX.to_vec();
    key.extend_from_slice(&seq_key(2));
    assert!(store.tree(TreeName::Meta).contains(&key).unwrap());
    let report = verify(&store, &reopened.public_key_pem()).unwrap();
    assert!(report.ok(), "{report}");
    assert_eq!(report.receipts.lost_in_crash, vec![2]);
}

#[tokio::test]
async fn read_from_returns_stored_receipts_in_order_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    log.issue(body("first")).await.unwrap();
    issue_together(&log, 6).await;
    log.issue(body("last")).await.unwrap();
    let seqs = |from, limit| -> Vec<u64> {
        let rows = log.read_from(from, limit).unwrap();
        rows.iter().map(|r| r.seq).collect()
    };
    assert_eq!(seqs(1, 100), (1..=8).collect::<Vec<_>>());
    assert_eq!(seqs(3, 2), vec![3, 4], "starts inside a segment");
    assert_eq!(seqs(8, 10), vec![8]);
    assert!(seqs(9, 10).is_empty());
    assert_eq!(log.read_from(1, 1).unwrap()[0].body.subject_id, "first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_are_stored_compressed_and_uncompressed_ones_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let tree = store.tree(TreeName::Receipts);
    {
        // A segment stored as plain JSON, as every version before compression wrote it.
        let log = ReceiptLog::open(&store, dir.path()).unwrap();
        log.issue(body("old")).await.unwrap();
        let seg: Segment = tree.get(&seq_key(1)).unwrap().unwrap();
        tree.put(&seq_key(1), &seg).unwrap();
        assert!(tree
            .get_raw(&seq_key(1))
            .unwrap()
            .unwrap()
            .starts_with(b"{"));
    }
    // Reopened: the head resumes from the plain segment and new segments are compressed.
    let log = Arc::new(ReceiptLog::open(&store, dir.path()).unwrap());
    let all = issue_together(&log, 3 * MAX_BATCH).await;
    assert_eq!(all[0].entry.seq, 2);
    let (mut stored, mut json) = (0, 0);
    for (key, seg) in tree.range_from::<Segment>(&seq_key(2), usize::MAX).unwrap() {
        let raw = tree.get_raw(&key).unwrap().unwrap();
        assert!(raw.starts_with(crate::store::codec::LZ4_MAGIC));
        stored += raw.len();
        json += serde_json::to_vec(&seg).unwrap().len();
    }
    assert!(
        stored * 3 < json * 2,
        "{stored} bytes stored for {json} of JSON"
    );
    let read = log.read_from(1, 1000).unwrap();
    assert_eq!(read.len(), 3 * MAX_BATCH + 1);
    assert_eq!(read[1].prev_hash, read[0].hash, "the chain continues");
    let report = verify(&store, &log.public_key_pem()).unwrap();
    assert!(report.ok(), "{report}");
    drop(log);
    let reopened = ReceiptLog::open(&store, dir.path()).unwrap();
    assert_eq!(
        reopened.len(),
        3 * MAX_BATCH as u64 + 1,
        "resumes after a compressed segment"
    );
}
