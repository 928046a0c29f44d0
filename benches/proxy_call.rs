//! Criterion benchmark of the forward proxy's per-call work besides I/O and the policy check
//! (which `benches/decide.rs` covers): the request hash and validation of an
//! EnforcementRequest that carries the proxy's whole session history (256 names, the proxy's
//! window; the hash both of a plain list, as POST /v1/enforce reads it, and of the proxy's
//! history that keeps its JSON text), and the recorder's append of 64 proxy events (a full batch) to a sled ledger in a
//! temp dir: encoding, chaining and the insert. BENCHMARKS.md, "Forward proxy". The append
//! benchmark grows its ledger to about 1 GB over a run; the temp dir is removed at the end.
//!
//! Run: `cargo bench --bench proxy_call -- --warm-up-time 1 --measurement-time 4`.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::{json, Map, Value};
use toolgate::ledger::{Event, EventType, Ledger, NewEntry};
use toolgate::policy::history::ToolCallHistory;
use toolgate::policy::EnforcementRequest;
use toolgate::store::Store;
use toolgate::vocab::EnforcementMode;

/// Calls the proxy remembers per session (`proxy::calls`).
const HISTORY: usize = 256;
/// Events the recorder writes at once under load (`proxy::recorder::BATCH`).
const BATCH: usize = 64;

/// The request the proxy builds for a REST call late in a long session.
fn request(history: usize) -> EnforcementRequest {
    let calls: Vec<String> = (0..history)
        .map(|i| format!("crm.tool_{}", i % 7))
        .collect();
    let body = json!({
        "agent_id": "bench-agent", "tenant_id": "acme", "tool_name": "bench.echo",
        "session_id": "sess-1", "user_id": "user-1", "approved_scope": ["*"],
        "session_tool_calls": calls, "enforcement_mode": "block",
        "tool_args": {"customer_id": "C-1042"}, "endpoint_id": "ep-1",
        "metadata": {"source": "proxy", "intercepted_as": "rest", "host": "127.0.0.1",
                     "method": "POST", "path": "/tool", "route_id": "bench"},
    });
    match serde_json::from_value(body) {
        Ok(req) => req,
        Err(e) => panic!("bench request does not parse: {e}"),
    }
}

fn bench_request(c: &mut Criterion) {
    let mut group = c.benchmark_group("proxy_request");
    for history in [1, HISTORY] {
        let req = request(history);
        if let Err(e) = req.validate() {
            panic!("bench request is invalid: {e}");
        }
        group.bench_function(format!("request_hash/{history}"), |b| {
            b.iter(|| toolgate::api::enforce::request_hash(black_box(&req)))
        });
        group.bench_function(format!("validate/{history}"), |b| {
            b.iter(|| black_box(&req).validate())
        });
        // The same request as the proxy builds it: the history keeps its JSON text.
        let mut kept = req.clone();
        let mut history_list = ToolCallHistory::kept();
        for name in req.session_tool_calls.iter() {
            history_list.push_bounded(name.clone(), HISTORY);
        }
        kept.session_tool_calls = std::sync::Arc::new(history_list);
        group.bench_function(format!("request_hash_kept_history/{history}"), |b| {
            b.iter(|| toolgate::api::enforce::request_hash(black_box(&kept)))
        });
    }
    group.finish();
}

/// A TOOL_CALL_PRE (even `i`) or TOOL_CALL_POST (odd `i`) as the proxy records them.
fn event(i: usize) -> Event {
    let (event_type, content) = if i % 2 == 0 {
        (
            EventType::ToolCallPre,
            r#"{"customer_id":"C-1042"}"#.to_string(),
        )
    } else {
        (
            EventType::ToolCallPost,
            r#"{"tool":"bench.echo","ok":true,"echo":{"customer_id":"C-1042"}}"#.to_string(),
        )
    };
    let mut metadata = Map::new();
    for (k, v) in [
        ("source", "proxy"),
        ("intercepted_as", "rest"),
        ("host", "127.0.0.1"),
        ("method", "POST"),
        ("path", "/tool"),
        ("route_id", "bench"),
        ("decision", "ALLOW"),
        ("authorization_decision", "ALLOW"),
        ("decision_reason_code", "ALLOW_IN_SCOPE"),
        (
            "enforcement_trace_id",
            "trc_4f1c2a9e0b7d4c55a3e1f2b6c8d90e17",
        ),
        ("receipt_id", "rcpt_9a8b7c6d5e4f30211f2e3d4c5b6a7980"),
    ] {
        metadata.insert(k.into(), Value::from(v));
    }
    metadata.insert("session_tool_calls_len".into(), HISTORY.into());
    if i % 2 == 1 {
        metadata.insert("status".into(), 200.into());
        metadata.insert("result_bytes".into(), 64.into());
    }
    Event {
        event_id: format!("evt_{i:032x}"),
        tenant_id: "acme".into(),
        session_id: "sess-1".into(),
        user_id: "user-1".into(),
        agent_id: Some("bench-agent".into()),
        source_type: event_type.source_type(),
        event_type,
        tool_name: Some("bench.echo".into()),
        approved_scope: vec!["*".into()],
        session_tool_calls: (0..16).map(|j| format!("crm.tool_{}", j % 7)).collect(),
        enforcement_mode: EnforcementMode::Block,
        content,
        occurred_at: "2026-11-22T03:04:05.123456Z".into(),
        metadata: Some(metadata),
    }
}

/// What the recorder hands the ledger for one queued event.
fn entry(event: Event) -> NewEntry {
    match NewEntry::event(event) {
        Ok(e) => e,
        Err(e) => panic!("bench event does not encode: {e}"),
    }
}

fn bench_events(c: &mut Criterion) {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("no temp dir: {e}"),
    };
    let store = match Store::open(dir.path()) {
        Ok(s) => s,
        Err(e) => panic!("the bench store does not open: {e}"),
    };
    let ledger = match Ledger::open(&store) {
        Ok(l) => l,
        Err(e) => panic!("the bench ledger does not open: {e}"),
    };
    let mut group = c.benchmark_group("proxy_events");
    group.throughput(criterion::Throughput::Elements(BATCH as u64));
    group.bench_function(format!("append/{BATCH}"), |b| {
        b.iter_batched(
            || (0..BATCH).map(event).collect::<Vec<_>>(),
            |events| {
                let entries = events.into_iter().map(entry).collect();
                ledger.append_entries(entries)
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_request, bench_events);
criterion_main!(benches);
