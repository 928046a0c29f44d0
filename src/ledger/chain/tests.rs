//! Unit tests of `ledger::chain` (real sled store in a tempdir).

use super::segment::SEGMENT_MAX_BYTES;
use super::*;
use crate::ledger::canon::ZERO_HASH;
use crate::store::codec::{compress, stored_json};
use serde_json::json;

#[test]
fn entries_chain_and_resume_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        assert_eq!(ledger.append_batch("t", vec![]).unwrap(), 0);
        let last = ledger
            .append_batch(
                "t",
                vec![("A".into(), json!({"n": 1})), ("B".into(), json!({"n": 2}))],
            )
            .unwrap();
        assert_eq!(last, 2);
        store.flush_blocking().unwrap();
    }
    let store = crate::ledger::test_support::reopen(dir.path());
    let ledger = Ledger::open(&store).unwrap();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger.append("t", "C", json!({"n": 3})).unwrap(), 3);
    let all = ledger.read_from(1, 10).unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(all[0].prev_hash, ZERO_HASH);
    for pair in all.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
    }
    for e in &all {
        assert_eq!(e.hash, e.compute_hash());
    }
    assert_eq!(ledger.read_from(3, 10).unwrap().len(), 1);
    assert_eq!(ledger.read_from(1, 2).unwrap().len(), 2);
}

#[tokio::test]
async fn appends_notify_watchers_with_the_last_seq() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    let mut rx = ledger.appended();
    assert_eq!(*rx.borrow_and_update(), 0);
    ledger.append_batch("t", vec![]).unwrap();
    assert!(!rx.has_changed().unwrap(), "an empty batch does not notify");
    ledger.append("t", "K", json!({})).unwrap();
    ledger
        .append_batch("t", vec![("K".into(), json!({})), ("K".into(), json!({}))])
        .unwrap();
    rx.changed().await.unwrap();
    assert_eq!(*rx.borrow_and_update(), 3);
    let reopened = Ledger::open(&store).unwrap();
    assert_eq!(*reopened.appended().borrow(), 3);
}

/// A known answer (computed outside Rust from docs/ledger.md, "Canonical encodings"):
/// stored hashes must never change.
#[test]
fn the_hash_is_the_documented_one() {
    let e = LedgerEntry {
        seq: 7,
        tenant_id: "t".into(),
        kind: "K".into(),
        record: json!({"b": "x", "a": 1}),
        recorded_at: "2026-11-21T10:00:00.000Z".into(),
        prev_hash: ZERO_HASH.into(),
        hash: String::new(),
    };
    assert_eq!(
        e.compute_hash(),
        "e565165086a76b28a6197f3b9790678541a5ef7e54b58971eaef7a361a9c7fdc"
    );
}

#[test]
fn the_hash_covers_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    ledger.append("t", "K", json!({"a": 1})).unwrap();
    let e = ledger.read_from(1, 1).unwrap().remove(0);
    let edits: [fn(&mut LedgerEntry); 6] = [
        |e| e.seq = 2,
        |e| e.tenant_id = "u".into(),
        |e| e.kind = "L".into(),
        |e| e.record = json!({"a": 2}),
        |e| e.recorded_at = "2020-01-01T00:00:00.000Z".into(),
        |e| e.prev_hash = "1".repeat(64),
    ];
    for edit in edits {
        let mut changed = e.clone();
        edit(&mut changed);
        assert_ne!(changed.compute_hash(), e.hash);
    }
}

/// `(key seq, entry seqs)` of every stored value.
fn layout(store: &Store) -> Vec<(u64, Vec<u64>)> {
    stored_values(store)
        .into_iter()
        .map(|(k, v)| {
            let seqs = v["entries"].as_array().unwrap().iter();
            let seqs = seqs.map(|e| e["seq"].as_u64().unwrap()).collect();
            (k, seqs)
        })
        .collect()
}

/// The JSON text stored at `seq`'s key.
fn stored_text(store: &Store, seq: u64) -> String {
    let raw = store.tree(TreeName::Ledger).get_raw(&seq_key(seq)).unwrap();
    String::from_utf8(stored_json(&raw.unwrap()).unwrap().into_owned()).unwrap()
}

fn records(n: usize, size: usize) -> Vec<(String, Value)> {
    (0..n)
        .map(|i| ("K".to_string(), json!({"i": i, "pad": "x".repeat(size)})))
        .collect()
}

#[test]
fn one_append_is_stored_as_segments_of_at_most_64_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    assert_eq!(ledger.append_batch("t", records(130, 10)).unwrap(), 130);
    ledger.append("t", "K", json!({})).unwrap();
    let want: Vec<(u64, Vec<u64>)> = vec![
        (64, (1..=64).collect()),
        (128, (65..=128).collect()),
        (130, vec![129, 130]),
        (131, vec![131]),
    ];
    assert_eq!(layout(&store), want);
    // Exactly what serde_json writes for the segment as a whole.
    #[derive(Serialize)]
    struct Whole {
        entries: Vec<LedgerEntry>,
    }
    let entries = ledger.read_from(129, 2).unwrap();
    let expected = serde_json::to_vec(&Whole { entries }).unwrap();
    assert_eq!(
        stored_text(&store, 130),
        String::from_utf8(expected).unwrap()
    );
}

#[test]
fn entries_are_stored_exactly_as_serde_json_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    let record = json!({
        "s": "quote \" backslash \\ newline \n control \u{1} é 😀 </script>",
        "z": 1.5, "a": -3, "big": u64::MAX, "neg": i64::MIN, "tiny": 1e-7,
        "nested": {"y": [null, true, false, {"b": 2, "a": 1}], "x": {}},
        "é": "key order is by bytes", "B": "upper before lower"
    });
    ledger
        .append("te\"nant", "K\u{7}ind", record.clone())
        .unwrap();
    let entry = ledger.read_from(1, 1).unwrap().remove(0);
    assert_eq!(entry.record, record);
    assert_eq!(entry.hash, entry.compute_hash());
    let serde = format!(
        "{{\"entries\":[{}]}}",
        serde_json::to_string(&entry).unwrap()
    );
    assert_eq!(stored_text(&store, 1), serde);
}

#[test]
fn large_entries_close_a_segment_early() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    // ~40 KB each: two fit under SEGMENT_MAX_BYTES, three do not; one of 200 KB alone.
    let mut entries = records(5, 40_000);
    entries.insert(2, ("K".into(), json!({"pad": "y".repeat(200_000)})));
    ledger.append_batch("t", entries).unwrap();
    let seqs: Vec<Vec<u64>> = layout(&store).into_iter().map(|(_, s)| s).collect();
    assert_eq!(seqs, vec![vec![1, 2], vec![3], vec![4, 5], vec![6]]);
    for (seq, _) in stored_values(&store) {
        let len = stored_text(&store, seq).len();
        assert!(len <= SEGMENT_MAX_BYTES || seq == 3, "{len}");
    }
    assert_eq!(ledger.read_from(1, 10).unwrap().len(), 6);
}

#[test]
fn reads_start_inside_segments_and_stop_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    ledger.append_batch("t", records(100, 1)).unwrap(); // keys 64, 100
    for i in 0..3 {
        ledger.append("t", "K", json!({"i": 100 + i})).unwrap(); // keys 101..=103
    }
    let seqs = |from, limit| -> Vec<u64> {
        let rows = ledger.read_from(from, limit).unwrap();
        rows.iter().map(|e| e.seq).collect()
    };
    let cases: [(u64, usize, std::ops::RangeInclusive<u64>); 9] = [
        (0, 5, 1..=5),
        (1, 200, 1..=103),
        (2, 64, 2..=65),
        (10, 3, 10..=12),
        (63, 4, 63..=66),
        (64, 1, 64..=64),
        (65, 100, 65..=103),
        (99, 3, 99..=101),
        (103, 5, 103..=103),
    ];
    for (from, limit, want) in cases {
        assert_eq!(
            seqs(from, limit),
            want.collect::<Vec<_>>(),
            "{from} {limit}"
        );
    }
    assert!(seqs(104, 10).is_empty());
    assert!(seqs(1, 0).is_empty());
    // A projection without a seq is placed by the layout.
    #[derive(Deserialize)]
    struct KindOnly {
        record: Value,
    }
    let rows: Vec<KindOnly> = ledger.read_from_as(62, 4).unwrap();
    let is: Vec<u64> = rows
        .iter()
        .map(|r| r.record["i"].as_u64().unwrap())
        .collect();
    assert_eq!(is, vec![61, 62, 63, 64]);
}

#[test]
fn open_resumes_from_a_segment_or_an_old_single_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    ledger.append_batch("t", records(70, 1)).unwrap();
    let last = ledger.read_from(70, 1).unwrap().remove(0);
    drop(ledger);
    let ledger = Ledger::open(&store).unwrap();
    assert_eq!(ledger.len(), 70);
    ledger.append("t", "K", json!({})).unwrap();
    assert_eq!(ledger.read_from(71, 1).unwrap()[0].prev_hash, last.hash);
    // The old layout: a bare entry after the segments.
    let mut old = ledger.read_from(71, 1).unwrap().remove(0);
    old.seq = 72;
    old.prev_hash = old.hash.clone();
    old.hash = old.compute_hash();
    store
        .tree(TreeName::Ledger)
        .put(&seq_key(72), &old)
        .unwrap();
    let ledger = Ledger::open(&store).unwrap();
    assert_eq!(ledger.len(), 72);
    ledger.append("t", "K", json!({})).unwrap();
    let tail = ledger.read_from(70, 10).unwrap();
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![70, 71, 72, 73]
    );
    assert_eq!(tail[3].prev_hash, old.hash);
}

#[test]
fn segments_are_stored_compressed_and_uncompressed_ones_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    // Proxy-like records: the same field names and much the same values in every entry.
    let records: Vec<(String, Value)> = (0..64)
        .map(|i| {
            let r = json!({"event_type": "TOOL_CALL_PRE", "tool_name": "crm.lookup", "i": i,
                "metadata": {"host": "127.0.0.1", "method": "POST", "path": "/tool"}});
            ("EVENT".to_string(), r)
        })
        .collect();
    ledger.append_batch("t", records).unwrap();
    let tree = store.tree(TreeName::Ledger);
    let raw = tree.get_raw(&seq_key(64)).unwrap().unwrap();
    assert!(raw.starts_with(b"\0LZ4"), "{:?}", &raw[..8]);
    let json = stored_text(&store, 64);
    assert!(
        raw.len() * 4 < json.len(),
        "{} of {}",
        raw.len(),
        json.len()
    );
    // A segment written before compression (its JSON as is) reads, resumes and chains on.
    tree.put_raw(&seq_key(64), json.as_bytes()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    assert_eq!(ledger.len(), 64);
    ledger.append("t", "K", json!({"after": true})).unwrap();
    let tail = ledger.read_from(63, 5).unwrap();
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![63, 64, 65]
    );
    assert_eq!(tail[2].prev_hash, tail[1].hash);
    assert!(tail.iter().all(|e| e.hash == e.compute_hash()));
}

#[test]
fn corrupt_compressed_segments_are_errors_not_crashes() {
    let mut huge = b"\0LZ4".to_vec();
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    let mut short = compress(br#"{"entries":[{"seq":1}]}"#);
    short[4] += 1; // claims one byte more than the block holds
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", b"\0LZ4\x01".to_vec()),
        ("claims", huge),
        (
            "does not decompress",
            b"\0LZ4\x10\0\0\0\xff\xff\xff".to_vec(),
        ),
        ("shorter than its length", short),
    ];
    for (want, bytes) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        ledger.append_batch("t", records(3, 1)).unwrap();
        drop(ledger);
        store
            .tree(TreeName::Ledger)
            .put_raw(&seq_key(3), &bytes)
            .unwrap();
        let err = stored_json(&bytes).unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
        let Err(e) = Ledger::open(&store) else {
            panic!("{want}: a corrupt last segment must not open")
        };
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
}
