//! `verify` of the event ledger: segments, tampering, holes, stray keys, the old layout.

use super::*;

fn ledger_values(f: &Fixture) -> Vec<(u64, Value)> {
    crate::ledger::chain::stored_values(&f.store)
}

impl Fixture {
    /// Edits the stored ledger entry `seq` inside its segment.
    fn edit_event(&self, seq: u64, edit: impl FnOnce(&mut Value)) {
        let (key, _) = ledger_values(self)
            .into_iter()
            .find(|(_, v)| {
                v["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|e| e["seq"] == seq)
            })
            .expect("a segment holds the entry");
        self.edit(TreeName::Ledger, key, |v| {
            let entries = v["entries"].as_array_mut().unwrap();
            let e = entries.iter_mut().find(|e| e["seq"] == seq).unwrap();
            edit(e);
        });
    }
}

/// An entry chained after `prev` (a forgery made without any key: only the chain catches it).
fn forged_event(seq: u64, prev_hash: &str) -> LedgerEntry {
    let mut e = LedgerEntry {
        seq,
        tenant_id: "t1".into(),
        kind: "TOOL_CALL_PRE".into(),
        record: json!({"forged": true}),
        recorded_at: "2026-11-21T10:00:00.000Z".into(),
        prev_hash: prev_hash.to_string(),
        hash: String::new(),
    };
    e.hash = e.compute_hash();
    e
}

#[tokio::test]
async fn events_are_stored_in_segments_and_verify() {
    let f = fixture(0, 130).await;
    let keys: Vec<u64> = ledger_values(&f).iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, vec![64, 128, 130]);
    let r = f.verify();
    assert!(r.ok(), "{r}");
    assert_eq!((r.events.entries, r.events.last_seq), (130, 130));
}

#[tokio::test]
async fn tampered_and_corrupt_events_are_detected() {
    // Segments: seqs 1..=64 at key 64, 65..=67 at key 67.
    let f = fixture(0, 67).await;
    f.edit_event(2, |e| e["record"]["i"] = json!(99));
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
        .put_raw(&seq_key(67), b"{\"entries\": [{not json")
        .unwrap();
    let r = f.verify();
    assert_eq!(first(&r.events).0, 2);
    assert_eq!(r.events.problems, 2, "{r}");
    let f = fixture(0, 67).await;
    f.store
        .tree(TreeName::Ledger)
        .put_raw(&seq_key(67), b"{not json")
        .unwrap();
    let (at, what) = first(&f.verify().events);
    assert_eq!(at, 67);
    assert!(what.starts_with("entry does not decode"), "{what}");
    // A compressed segment whose block is damaged.
    let f = fixture(0, 67).await;
    let tree = f.store.tree(TreeName::Ledger);
    let mut bytes = tree.get_raw(&seq_key(64)).unwrap().unwrap();
    let n = bytes.len();
    bytes.truncate(n - 20);
    tree.put_raw(&seq_key(64), &bytes).unwrap();
    let (at, what) = first(&f.verify().events);
    assert_eq!(at, 64);
    assert!(
        what.starts_with("segment does not decode: compressed segment"),
        "{what}"
    );
}

/// The entries of a stored segment.
fn entries(v: &Value) -> Vec<Value> {
    v["entries"].as_array().unwrap().clone()
}

#[tokio::test]
async fn edits_inside_segments_are_detected() {
    type Edit = Box<dyn Fn(&Fixture)>;
    let cases: Vec<(Edit, u64, &str)> = vec![
        (
            Box::new(|f| f.edit_event(40, |e| e["seq"] = json!(7))),
            40,
            "stored under seq 40 but says seq 7",
        ),
        (
            Box::new(|f| f.edit_event(1, |e| e["prev_hash"] = json!("1".repeat(64)))),
            1,
            "prev_hash of the first entry is not 64 zeros",
        ),
        (
            Box::new(|f| f.edit_event(66, |e| e["prev_hash"] = json!("1".repeat(64)))),
            66,
            "prev_hash does not match the hash of seq 65",
        ),
        (
            // The whole segment 1..=64 is re-chained after entry 10's record was edited: every
            // hash matches its entry, but segment 65.. no longer links to it.
            Box::new(|f| {
                f.edit(TreeName::Ledger, 64, |v| {
                    let mut prev = ZERO_HASH.to_string();
                    let mut chain: Vec<LedgerEntry> = entries(v)
                        .into_iter()
                        .map(|e| serde_json::from_value(e).unwrap())
                        .collect();
                    chain[9].record = json!({"i": "edited"});
                    for e in &mut chain {
                        e.prev_hash = prev;
                        e.hash = e.compute_hash();
                        prev = e.hash.clone();
                    }
                    v["entries"] = serde_json::to_value(chain).unwrap();
                })
            }),
            65,
            "prev_hash does not match the hash of seq 64",
        ),
        (
            // An entry taken out of the middle of a segment.
            Box::new(|f| {
                f.edit(TreeName::Ledger, 64, |v| {
                    v["entries"].as_array_mut().unwrap().remove(30);
                })
            }),
            31,
            "stored under seq 31 but says seq 32",
        ),
        (
            // The last entry taken out of a segment (a crash cannot do that).
            Box::new(|f| {
                f.edit(TreeName::Ledger, 64, |v| {
                    v["entries"].as_array_mut().unwrap().pop();
                })
            }),
            64,
            "segment stored under seq 64 ends at seq 63",
        ),
        (
            // A forged entry appended to a segment, after its key.
            Box::new(|f| {
                f.edit(TreeName::Ledger, 67, |v| {
                    let last: LedgerEntry =
                        serde_json::from_value(entries(v).pop().unwrap()).unwrap();
                    let forged = forged_event(68, &last.hash);
                    v["entries"]
                        .as_array_mut()
                        .unwrap()
                        .push(serde_json::to_value(forged).unwrap());
                })
            }),
            67,
            "1 entries after seq 67 are stored under seq 67",
        ),
        (
            Box::new(|f| f.edit(TreeName::Ledger, 67, |v| v["entries"] = json!([]))),
            67,
            "segment has no entries",
        ),
    ];
    for (edit, seq, expected) in cases {
        let f = fixture(0, 67).await;
        assert!(f.verify().ok());
        edit(&f);
        let r = f.verify();
        assert!(!r.ok(), "{expected}: {r}");
        let (at, what) = first(&r.events);
        assert_eq!((at, what.as_str()), (seq, expected), "{r}");
    }
}

#[tokio::test]
async fn holes_are_crash_losses_in_the_tail_and_problems_elsewhere() {
    // Segments of 64 up to key 1216, then 1217..=1224: seqs 1..=200 are outside the tail.
    let n = TAIL_WINDOW as usize + 200;
    let f = fixture(0, n).await;
    let tree = f.store.tree(TreeName::Ledger);
    assert!(tree.remove(&seq_key(64)).unwrap());
    assert!(tree.remove(&seq_key(1216)).unwrap());
    let r = f.verify();
    assert_eq!(r.events.lost_in_crash, (1153..=1216).collect::<Vec<u64>>());
    assert_eq!(first(&r.events), (1, "entry is missing".to_string()));
    assert_eq!(
        r.events.problems, 64,
        "the entry after a hole is not blamed for its link: {r}"
    );
    assert_eq!(r.events.entries, n as u64 - 128);
    assert!(r.to_string().contains("lost in a crash"), "{r}");
}

#[tokio::test]
async fn entries_at_foreign_keys_are_reported() {
    let f = fixture(0, 2).await;
    f.store
        .tree(TreeName::Ledger)
        .put_raw(b"stray", b"{}")
        .unwrap();
    let r = f.verify();
    assert_eq!(first(&r.events).0, 0);
    assert!(first(&r.events)
        .1
        .contains("1 entries are not at sequence keys"));
    assert_eq!(
        f.ledger.read_from(1, 10).unwrap().len(),
        2,
        "reads pass it over"
    );
}

#[tokio::test]
async fn an_old_layout_ledger_followed_by_segments_reads_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let tree = store.tree(TreeName::Ledger);
    // Written as before segments: one bare entry per key.
    let mut prev = ZERO_HASH.to_string();
    for seq in 1..=5u64 {
        let mut e = forged_event(seq, &prev);
        e.record = json!({"old": seq});
        e.hash = e.compute_hash();
        prev = e.hash.clone();
        tree.put(&seq_key(seq), &e).unwrap();
    }
    let ledger = Ledger::open(&store).unwrap();
    assert_eq!(ledger.len(), 5, "the head resumes from an old entry");
    let new = (0..70)
        .map(|i| ("K".to_string(), json!({"new": i})))
        .collect();
    assert_eq!(ledger.append_batch("t1", new).unwrap(), 75);
    assert_eq!(tree.len(), 5 + 2, "five entries, then two segments");
    let all = ledger.read_from(1, usize::MAX).unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=75).collect::<Vec<_>>()
    );
    assert_eq!(
        all[5].prev_hash, all[4].hash,
        "the first segment links to the old chain"
    );
    assert_eq!(ledger.read_from(4, 3).unwrap()[2].seq, 6);
    let pem = ReceiptLog::open(&store, dir.path())
        .unwrap()
        .public_key_pem();
    let r = verify(&store, &pem).unwrap();
    assert!(r.ok(), "{r}");
    assert_eq!((r.events.entries, r.events.last_seq), (75, 75));
    assert_eq!(Ledger::open(&store).unwrap().len(), 75);
    // An edited old entry is still caught.
    let mut e: LedgerEntry = tree.get(&seq_key(3)).unwrap().unwrap();
    e.record = json!({"old": "edited"});
    tree.put(&seq_key(3), &e).unwrap();
    let r = verify(&store, &pem).unwrap();
    assert_eq!(
        first(&r.events),
        (3, "hash does not match the contents".to_string())
    );
}
