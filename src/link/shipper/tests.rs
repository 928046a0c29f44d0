//! Unit tests of the shipper: backoff, batch reading, the cursor and the health status.

use super::send::{backoff_cap, full_jitter, read_batch};
use super::*;
use crate::ledger::Ledger;
use crate::store::Store;
use serde_json::{json, Value};

#[test]
fn backoff_doubles_from_half_a_second_to_thirty() {
    let caps: Vec<u64> = (1..=9).map(|f| backoff_cap(f).as_millis() as u64).collect();
    assert_eq!(
        caps,
        vec![500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
    );
    assert_eq!(backoff_cap(u32::MAX), BACKOFF_MAX);
    for f in 1..20 {
        assert!(full_jitter(f) <= backoff_cap(f));
    }
}

#[test]
fn batches_pass_over_other_tenants_and_keep_records_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ledger = Ledger::open(&store).unwrap();
    for tenant in ["t1", "t2", "t1", "t1"] {
        let record = json!({"tenant_id": tenant, "b": [1, 2], "a": "x"});
        ledger.append(tenant, "K", record).unwrap();
    }
    let b = read_batch(&store, &ledger, "t1", 1, 3).unwrap();
    assert_eq!((b.last_seq, b.skipped), (3, 1));
    let seqs: Vec<u64> = b.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 3]);
    let stored = ledger.read_from(1, 1).unwrap().remove(0);
    let sent: Value = serde_json::to_value(&b.entries[0]).unwrap();
    assert_eq!(sent["record"], stored.record);
    assert_eq!(sent["hash"], stored.hash.as_str());
    assert!(sent.get("prev_hash").is_none());
    let rest = read_batch(&store, &ledger, "t1", 4, 10).unwrap();
    assert_eq!((rest.last_seq, rest.skipped, rest.entries.len()), (4, 0, 1));
    let none = read_batch(&store, &ledger, "t1", 5, 10).unwrap();
    assert_eq!((none.last_seq, none.entries.len()), (0, 0));
}

#[tokio::test]
async fn the_cursor_survives_a_reopen_and_the_health_shows_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(Cursor::load(&store).unwrap(), Cursor::default());
        let c = Cursor {
            shipped_seq: 7,
            skipped: 1,
        };
        c.save(&store).await.unwrap();
    }
    let store = crate::store::reopen_for_tests(dir.path());
    let status = ShipStatus::load(&store).unwrap();
    assert_eq!(status.cursor().shipped_seq, 7);
    let h = status.health(10);
    assert_eq!(h["backlog"], 3);
    assert_eq!(h["shipped_seq"], 7);
    assert_eq!(h["skipped"], 1);
    assert!(h["last_error"].is_null());
    status.failed("boom".into());
    assert_eq!(status.health(10)["last_error"], "boom");
    status.shipped(Cursor {
        shipped_seq: 10,
        skipped: 1,
    });
    let h = status.health(10);
    assert_eq!(h["backlog"], 0);
    assert!(h["last_error"].is_null());
    assert!(h["last_shipped_at"].is_string());
}
