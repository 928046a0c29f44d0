//! Unit tests of `ledger::ingest` (real sled store in a tempdir).

use super::*;
use crate::store::TreeName;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    ledger: Ledger,
    ingestor: Ingestor,
    now: Arc<AtomicU64>,
}

fn fixture(config: IngestConfig) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let now = Arc::new(AtomicU64::new(1_000_000));
    let clock_now = now.clone();
    let clock: Clock = Arc::new(move || clock_now.load(Ordering::SeqCst));
    Fixture {
        ledger: Ledger::open(&store).unwrap(),
        ingestor: Ingestor::with_clock(&store, config, clock),
        store,
        now,
        _dir: dir,
    }
}

fn small_window() -> IngestConfig {
    IngestConfig {
        replay_protection: true,
        replay_window: Duration::from_secs(10),
    }
}

fn event(id: Option<&str>, tenant: &str) -> Value {
    let mut e = json!({
        "tenant_id": tenant, "session_id": "s1", "user_id": "u1",
        "source_type": "agent_tool_call", "event_type": "TOOL_CALL_POST",
        "approved_scope": ["crm.lookup"], "session_tool_calls": ["crm.lookup"],
        "enforcement_mode": "observe", "content": "{\"ok\":true}",
        "occurred_at": "2026-11-21T10:00:00Z"
    });
    if let Some(id) = id {
        e["event_id"] = json!(id);
    }
    e
}

fn body(events: &[Value]) -> Vec<u8> {
    serde_json::to_vec(events).unwrap()
}

impl Fixture {
    async fn send(&self, body: &[u8], caller: Option<&str>) -> Result<BatchAck, IngestError> {
        self.ingestor.ingest(&self.ledger, body, caller).await
    }
    async fn counts(&self, events: &[Value]) -> (String, Option<String>) {
        let ack = self.send(&body(events), Some("t1")).await.unwrap();
        assert_eq!(ack.status, "accepted");
        (ack.queued, ack.replay_dropped)
    }
}

fn counts(q: &str, d: &str) -> (String, Option<String>) {
    (q.to_string(), Some(d.to_string()))
}

#[tokio::test]
async fn bad_bodies_are_rejected_with_their_texts() {
    let f = fixture(IngestConfig::default());
    let mut missing_tenant = event(Some("c"), "t1");
    missing_tenant.as_object_mut().unwrap().remove("tenant_id");
    let too_many: Vec<Value> = (0..101)
        .map(|i| event(Some(&i.to_string()), "t1"))
        .collect();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"[".to_vec(), "malformed JSON body: "),
        (
            b"\"x\"".to_vec(),
            "expected a JSON array of events or an object with an events array",
        ),
        (
            b"{}".to_vec(),
            "expected a JSON array of events or an object with an events array",
        ),
        (
            b"{\"events\": 5}".to_vec(),
            "expected a JSON array of events or an object with an events array",
        ),
        (
            b"null".to_vec(),
            "expected a JSON array of events or an object with an events array",
        ),
        (
            body(&too_many),
            "too many events: 101; at most 100 per batch",
        ),
        (
            body(&[
                event(Some("a"), "t1"),
                event(Some("b"), "t1"),
                missing_tenant,
            ]),
            "invalid event at index 2: missing tenant_id",
        ),
        (
            body(&[event(Some("a"), "t1"), event(Some("b"), "t2")]),
            "all events in a batch must belong to one tenant",
        ),
    ];
    for (input, expected) in cases {
        let err = f.send(&input, Some("t1")).await.unwrap_err();
        assert!(!matches!(
            err,
            IngestError::Forbidden(_) | IngestError::Ledger(_)
        ));
        assert!(err.to_string().starts_with(expected), "{err} vs {expected}");
    }
    assert_eq!(f.ledger.len(), 0);
}

#[tokio::test]
async fn the_tenant_must_be_the_callers_unless_the_ingest_token_was_used() {
    let f = fixture(IngestConfig::default());
    let b = body(&[event(Some("a"), "t2")]);
    match f.send(&b, Some("t1")).await {
        Err(IngestError::Forbidden(m)) => {
            assert_eq!(
                m,
                "events belong to tenant t2 but the API key is for tenant t1"
            )
        }
        other => panic!("expected Forbidden, got {other:?}"),
    }
    assert_eq!(f.send(&b, None).await.unwrap().queued, "1");
}

#[tokio::test]
async fn arrays_and_events_objects_are_both_accepted_and_stored() {
    let f = fixture(IngestConfig::default());
    let mut llm = event(Some("b"), "t1");
    llm["source_type"] = json!("agent_llm_invocation");
    llm["event_type"] = json!("LLM_INVOCATION");
    llm["metadata"] = json!({"promptTokens": 12, "modelName": "m1", "provider": "p"});
    assert_eq!(f.counts(&[event(Some("a"), "t1")]).await, counts("1", "0"));
    let wrapped = serde_json::to_vec(&json!({"events": [llm]})).unwrap();
    let ack = f.send(&wrapped, Some("t1")).await.unwrap();
    assert_eq!(
        serde_json::to_value(&ack).unwrap(),
        json!({"status": "accepted", "queued": "1", "replay_dropped": "0"})
    );
    let entries = f.ledger.read_from(1, 10).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        (entries[1].kind.as_str(), entries[1].tenant_id.as_str()),
        ("LLM_INVOCATION", "t1")
    );
    assert_eq!(entries[1].record["event_id"], "b");
    assert_eq!(
        entries[1].record["metadata"],
        json!({"prompt_tokens": 12, "model_name": "m1", "provider": "p"})
    );
}

#[tokio::test]
async fn empty_batches_have_no_replay_dropped() {
    let f = fixture(IngestConfig::default());
    for b in [&b"[]"[..], &b"{\"events\": []}"[..]] {
        let ack = f.send(b, Some("t1")).await.unwrap();
        assert_eq!(
            serde_json::to_value(&ack).unwrap(),
            json!({"status": "accepted", "queued": "0"})
        );
    }
}

#[tokio::test]
async fn duplicates_in_one_request_are_dropped_and_counted() {
    let f = fixture(IngestConfig {
        replay_protection: false,
        ..IngestConfig::default()
    });
    let batch = [
        event(Some("a"), "t1"),
        event(Some("a"), "t1"),
        event(Some("b"), "t1"),
        event(Some("a"), "t1"),
    ];
    assert_eq!(f.counts(&batch).await, counts("2", "2"));
    let batch = [event(None, "t1"), event(None, "t1")];
    assert_eq!(
        f.counts(&batch).await,
        counts("1", "1"),
        "derived ids dedupe too"
    );
}

#[tokio::test]
async fn replays_inside_the_window_are_dropped_and_later_accepted_again() {
    let f = fixture(small_window());
    let batch = [event(Some("a"), "t1"), event(None, "t1")];
    assert_eq!(f.counts(&batch).await, counts("2", "0"));
    f.now.fetch_add(9_999, Ordering::SeqCst);
    let retry = [
        event(Some("a"), "t1"),
        event(None, "t1"),
        event(Some("c"), "t1"),
    ];
    assert_eq!(f.counts(&retry).await, counts("1", "2"));
    f.now.fetch_add(1, Ordering::SeqCst);
    assert_eq!(f.counts(&batch).await, counts("2", "0"), "window passed");
    let mark: u64 = f
        .store
        .tree(TreeName::Replay)
        .get(&pair_key("t1", "a"))
        .unwrap()
        .unwrap();
    assert_eq!(mark, 1_010_000, "first-seen time updated");
    assert_eq!(f.ledger.len(), 5);
}

#[tokio::test]
async fn replay_ids_are_per_tenant_and_protection_can_be_off() {
    let f = fixture(small_window());
    assert_eq!(f.counts(&[event(Some("a"), "t1")]).await, counts("1", "0"));
    let other = f
        .send(&body(&[event(Some("a"), "t2")]), None)
        .await
        .unwrap();
    assert_eq!(other.queued, "1");
    let off = fixture(IngestConfig {
        replay_protection: false,
        ..small_window()
    });
    assert_eq!(
        off.counts(&[event(Some("a"), "t1")]).await,
        counts("1", "0")
    );
    assert_eq!(
        off.counts(&[event(Some("a"), "t1")]).await,
        counts("1", "0")
    );
}

#[tokio::test]
async fn an_event_in_flight_is_a_replay_and_an_abandoned_one_is_not() {
    let f = fixture(small_window());
    let e = Event::from_json(0, &event(Some("a"), "t1")).unwrap();
    let admitted = f.ingestor.admit(&f.ledger, "t1", vec![e.clone()]).unwrap();
    assert_eq!(f.counts(&[event(Some("a"), "t1")]).await, counts("0", "1"));
    drop(admitted); // the first request was cancelled before its flush returned
    assert_eq!(f.counts(&[event(Some("a"), "t1")]).await, counts("1", "0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_accept_an_event_id_once() {
    let f = Arc::new(fixture(small_window()));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let f = f.clone();
            tokio::spawn(async move {
                f.send(&body(&[event(Some("same"), "t1")]), None)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut queued = 0;
    for t in tasks {
        queued += t.await.unwrap().queued.parse::<u32>().unwrap();
    }
    assert_eq!(queued, 1);
    assert_eq!(f.ledger.len(), 1);
}

#[tokio::test]
async fn old_marks_are_pruned_as_requests_arrive() {
    let f = fixture(small_window());
    let replay = f.store.tree(TreeName::Replay);
    for i in 0..300 {
        replay
            .put(&pair_key("t0", &format!("{i:03}")), &1u64)
            .unwrap();
    }
    f.counts(&[event(Some("a"), "t1")]).await;
    assert_eq!(replay.len(), 300 - PRUNE_BUDGET + 1);
    f.counts(&[event(Some("b"), "t1")]).await;
    assert_eq!(replay.len(), 2, "only the two fresh marks remain");
}

#[tokio::test]
async fn accepted_events_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let ledger = Ledger::open(&store).unwrap();
        let ingestor = Ingestor::new(&store, IngestConfig::default());
        let b = body(&[event(Some("a"), "t1"), event(Some("b"), "t1")]);
        assert_eq!(
            ingestor
                .ingest(&ledger, &b, Some("t1"))
                .await
                .unwrap()
                .queued,
            "2"
        );
    }
    let store = crate::ledger::test_support::reopen(dir.path());
    assert_eq!(Ledger::open(&store).unwrap().len(), 2);
}

#[tokio::test]
async fn replay_drops_are_remembered_per_tenant() {
    let f = fixture(small_window());
    let batch = [event(Some("a"), "t1"), event(Some("a"), "t1")];
    assert_eq!(f.counts(&batch).await, counts("1", "1"));
    f.now.fetch_add(1_500, Ordering::SeqCst);
    assert_eq!(f.counts(&batch).await, counts("0", "2"));
    assert_eq!(
        f.ingestor.replay_drops("t1"),
        vec![(1_000_000, 1), (1_001_000, 2)]
    );
    assert!(f.ingestor.replay_drops("t2").is_empty());
}
