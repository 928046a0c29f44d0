//! The load test's baseline: a bare hyper 1 JSON server in front of nothing — it parses the JSON
//! body of POST /v1/enforce and answers a JSON decision, with no auth, policy or evidence.
//! `bench/load.sh` runs it beside toolgate in the same run, so ratios are comparable.
//!
//! Two response shapes:
//! * default: a short decision (about 330 bytes of JSON), the baseline the performance targets
//!   were first stated against;
//! * `BARE_FULL_RESPONSE=1`: a decision of the same structure and size as toolgate's under load
//!   (receipt with hashes, signature and an 8-digest checkpoint path, decision_evidence, score
//!   components, policy pack; about 2.6 KB), built per request from the parsed body, so the
//!   ratio compares the work behind the response rather than its size.
//!
//! Usage: `cargo run --release --example bare_baseline` — prints `listening on 127.0.0.1:PORT`.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::OnceLock;

/// Whether `BARE_FULL_RESPONSE` asks for the full-size decision (read once).
fn full_response() -> bool {
    static FULL: OnceLock<bool> = OnceLock::new();
    *FULL.get_or_init(|| std::env::var("BARE_FULL_RESPONSE").is_ok_and(|v| v == "1"))
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let decision = if full_response() {
        full_decision(&parsed)
    } else {
        short_decision(&parsed)
    };
    let bytes = serde_json::to_vec(&decision).unwrap_or_default();
    let resp = Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap_or_default();
    Ok(resp)
}

/// The default, short decision.
fn short_decision(parsed: &Value) -> Value {
    json!({
        "decision": "ALLOW",
        "decision_envelope_version": "2026-11-01",
        "authorization_decision": "ALLOW",
        "reason": "No policy objected to this call.",
        "decision_reason_code": "policy_allow",
        "risk_score": 10.0,
        "latency_ms": 0.01,
        "enforcement_trace_id": parsed["enforcement_trace_id"],
        "matched_rule_ids": [],
        "matched_control_ids": [],
        "policy_references": [],
        "tool_name": parsed["tool_name"],
    })
}

/// A decision shaped like toolgate's: same fields, same nesting, hex strings of the same length.
fn full_decision(parsed: &Value) -> Value {
    let hex = |c: char| c.to_string().repeat(64);
    let path: Vec<String> = "0123abcd".chars().map(hex).collect();
    let component = |name: &str, value: f64| json!({"name": name, "value": value});
    json!({
        "decision": "ALLOW",
        "decision_envelope_version": "2026-11-01",
        "authorization_decision": "ALLOW",
        "reason": "No policy objected to this call.",
        "decision_reason_code": "policy_allow",
        "risk_score": 15.0,
        "latency_ms": 0.0123,
        "enforcement_trace_id": "trace_01a1ffad45a07757a800228a479aa790",
        "receipt": {
            "receipt_id": "rcpt_01a1ffad45a07757a80022894ff2fea2",
            "seq": 123_456,
            "issued_at": "2026-11-21T19:55:08.064Z",
            "kind": "decision",
            "tenant_id": parsed["tenant_id"],
            "subject_id": "dec_01a1ffad45a07757a800228816aea7a7",
            "request_hash": hex('9'),
            "decision": "ALLOW",
            "authorization_decision": "ALLOW",
            "decision_reason_code": "policy_allow",
            "policy_version": "2026.11.0+4f2f3555ad37",
            "prev_hash": hex('e'),
            "hash": hex('f'),
            "signature": format!("{}==", "A".repeat(86)),
            "signing_key_id": "3dca81d3a1b75db7",
            "checkpoint_seq": 123_464,
            "checkpoint_hash": hex('c'),
            "checkpoint_path": path,
        },
        "decision_evidence": {
            "action_classification": "routine",
            "enforcement_mode": parsed["enforcement_mode"],
            "evaluation_errors": [],
            "findings": [],
            "metadata": parsed.get("metadata"),
            "raw_authorization_decision": "ALLOW",
            "request_hash": hex('9'),
            "severity": "low",
        },
        "score_components": [component("tool_sensitivity", 5.0), component("environment", 10.0)],
        "top_contributors": [component("environment", 10.0), component("tool_sensitivity", 5.0)],
        "matched_rule_ids": [],
        "matched_control_ids": [],
        "policy_references": [],
        "policy_version": "2026.11.0+4f2f3555ad37",
        "policy_pack": {"name": "default", "version": "2026.11.0", "digest": hex('4')},
    })
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            let service = hyper::service::service_fn(handle);
            let _ = Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
