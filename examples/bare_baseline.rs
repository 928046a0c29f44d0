//! The load test's baseline: a bare hyper 1 JSON server of the same shape as POST /v1/enforce
//! (parse a JSON body, answer a JSON decision of similar size), with no auth, policy or evidence.
//! `bench/load.sh` runs it beside toolgate in the same run, so ratios are comparable.
//!
//! Usage: `cargo run --release --example bare_baseline` — prints `listening on 127.0.0.1:PORT`.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use serde_json::{json, Value};
use std::convert::Infallible;

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let decision = json!({
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
    });
    let bytes = serde_json::to_vec(&decision).unwrap_or_default();
    let resp = Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap_or_default();
    Ok(resp)
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
