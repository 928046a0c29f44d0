//! The forward proxy over plain HTTP and HTTPS, against upstreams started here (axum on
//! 127.0.0.1:0, plain or TLS with a test CA): proxy authentication (407), REST routes (ALLOW,
//! MODIFY with the body and Content-Length rewritten, BLOCK, STEP_UP approved / denied / timed
//! out), host-level inspection of absolute-form requests, LLM calls, scope from the pack's agent
//! defaults, streaming (chunked and SSE responses pass through unbuffered), CONNECT pass-through
//! versus interception (which certificate the client sees), bad input (garbage request line,
//! oversized head, oversized body, a client that disconnects while held) and the ledger events.

mod common;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use common::proxy::{events, ledger_of, within, ProxyApp, ServerCert, TestCa, AGENT};
use hyper::body::Frame;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

// ------------------------------------------------------------------------------------------
// Upstreams

/// One request an upstream received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

#[derive(Default)]
struct UpState {
    seen: Mutex<Vec<Seen>>,
    /// Holds back the second part of /chunked and /sse until the test fires it.
    gate: Mutex<Option<oneshot::Receiver<()>>>,
}

/// An upstream HTTP server (plain or TLS) that records every request it receives.
struct Upstream {
    addr: SocketAddr,
    state: Arc<UpState>,
    scheme: &'static str,
    host: &'static str,
}

impl Upstream {
    /// Plain HTTP on 127.0.0.1:0.
    async fn plain() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(UpState::default());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Upstream {
            addr,
            state,
            scheme: "http",
            host: "127.0.0.1",
        }
    }

    /// HTTPS with `cert` on 127.0.0.1:0, addressed as `localhost`.
    async fn tls(cert: &ServerCert) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(UpState::default());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        let tls = TlsListener {
            tcp: listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server_tls(cert))),
        };
        tokio::spawn(async move { axum::serve(tls, app).await.unwrap() });
        Upstream {
            addr,
            state,
            scheme: "https",
            host: "localhost",
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}://{}:{}{path}", self.scheme, self.host, self.addr.port())
    }

    fn authority(&self) -> String {
        format!("{}:{}", self.host, self.addr.port())
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// How many requests for paths starting with `prefix` arrived.
    fn count(&self, prefix: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.path.starts_with(prefix))
            .count()
    }

    /// Arms the gate of /chunked and /sse; the returned sender releases the second part.
    fn gate(&self) -> oneshot::Sender<()> {
        let (tx, rx) = oneshot::channel();
        *self.state.gate.lock().unwrap() = Some(rx);
        tx
    }
}

/// Records the request, then answers by path.
async fn handle(State(st): State<Arc<UpState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let path = parts.uri.path().to_string();
    st.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: path.clone(),
        headers: parts.headers.clone(),
        body: body.to_vec(),
    });
    let gate = || st.gate.lock().unwrap().take();
    match path.as_str() {
        "/chunked" => streamed("text/plain", "first chunk\n", "second chunk\n", gate()),
        "/sse" => streamed(
            "text/event-stream",
            "event: tick\ndata: one\n\n",
            "event: tick\ndata: two\n\n",
            gate(),
        ),
        "/v1/chat/completions" => axum::Json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        }))
        .into_response(),
        p if p.starts_with("/crm/") => axum::Json(json!({
            "received": serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
        }))
        .into_response(),
        _ => format!("upstream {} {path}", parts.method).into_response(),
    }
}

/// A response whose body sends `first`, then `second` once `gate` fires (or is dropped).
fn streamed(
    content_type: &'static str,
    first: &'static str,
    second: &'static str,
    gate: Option<oneshot::Receiver<()>>,
) -> Response {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let _ = tx.send(Bytes::from_static(first.as_bytes())).await;
        if let Some(g) = gate {
            let _ = g.await;
        }
        let _ = tx.send(Bytes::from_static(second.as_bytes())).await;
    });
    Response::builder()
        .header("content-type", content_type)
        .header("cache-control", "no-cache")
        .body(Body::new(ChannelBody(rx)))
        .unwrap()
}

/// A response body fed by a channel: each message is one data frame, sent as it arrives.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}

/// TLS on a TCP listener for `axum::serve` (failed handshakes are skipped).
struct TlsListener {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_tls(cert: &ServerCert) -> rustls::ServerConfig {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert.cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(&cert.key).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg
}

// ------------------------------------------------------------------------------------------
// Raw proxy connections

fn basic(user: &str, pass: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    format!("Basic {token}")
}

/// Reads a response head (up to the blank line) or until EOF / a reset; returns what arrived.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    within("a response head", async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// CONNECTs through the proxy to `authority`, then does a TLS handshake for `host` trusting
/// `roots`. Returns the DER of the certificate the client was served, or the TLS error.
async fn tls_through_connect(
    tg: &ProxyApp,
    authority: &str,
    host: &str,
    roots: &[&Path],
) -> Result<Vec<u8>, String> {
    let mut tcp = TcpStream::connect(tg.proxy).await.unwrap();
    let connect = format!(
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: {}\r\n\r\n",
        basic(AGENT, &tg.key)
    );
    tcp.write_all(connect.as_bytes()).await.unwrap();
    let head = read_head(&mut tcp).await;
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "CONNECT answered {head:?}"
    );
    let connector = tokio_rustls::TlsConnector::from(Arc::new(common::proxy::tls_config(roots)));
    let name = ServerName::try_from(host.to_string()).unwrap();
    let tls = within("the TLS handshake", connector.connect(name, tcp))
        .await
        .map_err(|e| e.to_string())?;
    let (_, session) = tls.get_ref();
    Ok(session.peer_certificates().unwrap()[0].to_vec())
}

/// Asserts a refusal: 403 with the JSON fields of a proxied BLOCK; returns the body.
async fn assert_blocked(resp: reqwest::Response, reason_code: &str) -> Value {
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let body: Value = resp.json().await.unwrap();
    assert!(body["detail"].is_string(), "detail in {body}");
    assert_eq!(body["decision"], "BLOCK", "{body}");
    assert_eq!(body["decision_reason_code"], reason_code, "{body}");
    body
}

fn assert_violation_id(body: &Value) -> String {
    let id = body["violation_id"].as_str().unwrap_or_default();
    assert!(
        id.starts_with("vio_") && id.len() == 36,
        "violation_id in {body}"
    );
    id.to_string()
}

// ------------------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn requests_without_valid_proxy_credentials_get_407_with_a_basic_challenge() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let anonymous = tg.client(None, &[]);
    let wrong_key = tg.client(Some((AGENT, "tgk.key_0.not-a-real-secret")), &[]);
    for client in [anonymous, wrong_key] {
        let resp = client.get(up.url("/hello")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::PROXY_AUTHENTICATION_REQUIRED);
        assert_eq!(
            resp.headers()["proxy-authenticate"],
            r#"Basic realm="toolgate""#
        );
        let body: Value = resp.json().await.unwrap();
        assert!(body["detail"].is_string(), "{body}");
    }
    // A CONNECT without credentials is challenged before any tunnel opens.
    let mut tcp = TcpStream::connect(tg.proxy).await.unwrap();
    let authority = up.addr.to_string();
    tcp.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 407"), "{head:?}");
    assert!(
        head.to_ascii_lowercase()
            .contains("proxy-authenticate: basic realm=\"toolgate\""),
        "{head:?}"
    );
    assert_eq!(up.seen().len(), 0, "nothing reached the upstream");
    // The same request with the key goes through.
    let ok = tg
        .agent_client(&[])
        .get(up.url("/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.text().await.unwrap(), "upstream GET /hello");
    tg.stop().await;
}

#[tokio::test]
async fn an_allowed_rest_call_is_forwarded_untouched_without_proxy_headers() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let body = r#"{"text": "Customer asked for a callback on Monday.", "priority": 2}"#;
    let sent_at = chrono::Utc::now();
    let resp = tg
        .agent_client(&[])
        .post(up.url("/crm/customers/C-1042/notes"))
        .header("content-type", "application/json")
        .header("x-toolgate-session-id", "sess-rest-1")
        .header("x-toolgate-user-id", "dana")
        .header("x-custom", "kept")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let answer: Value = resp.json().await.unwrap();
    let answered_at = chrono::Utc::now();
    assert_eq!(answer["received"]["priority"], 2);
    let seen = up.seen();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("POST", "/crm/customers/C-1042/notes")
    );
    assert_eq!(
        s.body,
        body.as_bytes(),
        "ALLOW forwards the body byte for byte"
    );
    assert_eq!(s.headers["x-custom"], "kept");
    for stripped in [
        "proxy-authorization",
        "x-toolgate-session-id",
        "x-toolgate-user-id",
    ] {
        assert!(
            !s.headers.contains_key(stripped),
            "{stripped} was forwarded"
        );
    }
    let core = tg.core().clone();
    tg.stop().await;
    let ledger = ledger_of(&core);
    let pre = events(&ledger, "TOOL_CALL_PRE", "crm.note");
    assert_eq!(pre.len(), 1, "{ledger:?}");
    assert_eq!(pre[0]["session_id"], "sess-rest-1");
    assert_eq!(pre[0]["user_id"], "dana");
    assert_eq!(pre[0]["agent_id"], AGENT);
    assert_eq!(pre[0]["tenant_id"], "t1");
    assert!(
        pre[0]["content"].as_str().unwrap().contains("C-1042"),
        "the route's capture is in the arguments: {}",
        pre[0]
    );
    let post = events(&ledger, "TOOL_CALL_POST", "crm.note");
    assert_eq!(post.len(), 1, "{ledger:?}");
    // occurred_at is when the event happened on the call's path (millisecond text), not when
    // the recorder thread built the event after its linger: the PRE before the answer.
    let at = |e: &Value| {
        let text = e["occurred_at"].as_str().unwrap();
        chrono::DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    };
    use chrono::SubsecRound;
    let (pre_at, post_at) = (at(pre[0]), at(post[0]));
    assert!(sent_at.trunc_subsecs(3) <= pre_at, "{sent_at} {pre_at}");
    assert!(
        pre_at <= answered_at,
        "PRE at {pre_at}, answer at {answered_at}"
    );
    assert!(pre_at <= post_at, "PRE at {pre_at}, POST at {post_at}");
}

#[tokio::test]
async fn a_modified_rest_call_reaches_the_upstream_with_a_redacted_body_and_its_new_length() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let body =
        json!({"to": "dana@example.com", "text": "Forward this to bob@example.org please", "n": 1});
    let resp = tg
        .agent_client(&[])
        .post(up.url("/crm/customers/C-7/notes"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let seen = up.seen();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    let got: Value = serde_json::from_slice(&s.body).expect("the rewritten body is JSON");
    assert_eq!(got["text"], "Forward this to [REDACTED:email] please");
    assert_eq!(got["to"], "dana@example.com", "`to` is exempt from DLP");
    assert_eq!(got["n"], 1);
    assert!(!String::from_utf8_lossy(&s.body).contains("bob@example.org"));
    let length: usize = s.headers["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        length,
        s.body.len(),
        "Content-Length matches the rewritten body"
    );
    tg.stop().await;
}

#[tokio::test]
async fn a_blocked_route_and_a_blocked_host_level_call_never_reach_the_upstream() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let client = tg.agent_client(&[]);
    let resp = client
        .delete(up.url("/admin/users/7"))
        .send()
        .await
        .unwrap();
    let body = assert_blocked(resp, "rule_block").await;
    let route_vio = assert_violation_id(&body);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("admin API is refused"),
        "the rule's description is the reason: {body}"
    );
    // Plain-HTTP absolute-form requests outside any route are inspected as http.request.
    let resp = client
        .get(up.url("/forbidden/secrets"))
        .send()
        .await
        .unwrap();
    let body = assert_blocked(resp, "rule_block").await;
    assert_violation_id(&body);
    let ok = client.get(up.url("/allowed")).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(up.count("/admin"), 0);
    assert_eq!(up.count("/forbidden"), 0);
    assert_eq!(up.count("/allowed"), 1, "the allowed call arrived");
    let ledger = tg.stop_and_read_ledger().await;
    let blocked = events(&ledger, "TOOL_CALL_BLOCK", "admin.delete");
    assert_eq!(blocked.len(), 1, "{ledger:?}");
    assert!(
        blocked[0].to_string().contains(&route_vio),
        "the block event carries the violation id: {}",
        blocked[0]
    );
    assert_eq!(events(&ledger, "TOOL_CALL_BLOCK", "http.request").len(), 1);
    assert!(events(&ledger, "TOOL_CALL_PRE", "admin.delete").is_empty());
}

#[tokio::test]
async fn a_plain_http_call_is_recorded_with_its_own_url() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let resp = tg
        .agent_client(&[])
        .get(up.url("/allowed?page=2"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let ledger = tg.stop_and_read_ledger().await;
    let pre = events(&ledger, "TOOL_CALL_PRE", "http.request");
    assert_eq!(pre.len(), 1, "{ledger:?}");
    let args: Value = serde_json::from_str(pre[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        json!({
            "host": "127.0.0.1",
            "method": "GET",
            "path": "/allowed",
            "query": "page=2",
            "url": up.url("/allowed?page=2"),
        }),
        "the arguments policies see name the request as sent (http://, not https://)"
    );
}

#[tokio::test]
async fn events_carry_the_last_16_calls_and_name_stored_receipts_after_a_stop() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let client = tg.agent_client(&[]);
    let mut tools = Vec::new();
    for i in 0..20 {
        let req = if i % 3 == 0 {
            tools.push("crm.note");
            client
                .post(up.url("/crm/customers/C-1042/notes"))
                .header("content-type", "application/json")
                .body(r#"{"text": "call back"}"#)
        } else {
            tools.push("http.request");
            client.get(up.url(&format!("/allowed?call={i}")))
        };
        let resp = req
            .header("x-toolgate-session-id", "sess-history")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    // Stop at once: the last receipts are still in the signer's linger and the last events in
    // the recorder's queue; shutdown must write both before its final flush.
    let core = tg.core().clone();
    tg.stop().await;
    let ledger = ledger_of(&core);
    let pre: Vec<&Value> = ledger
        .iter()
        .filter(|(k, r)| k == "TOOL_CALL_PRE" && r["session_id"] == "sess-history")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(pre.len(), tools.len(), "{ledger:?}");
    let receipts: std::collections::HashSet<String> = core
        .receipts
        .read_from(1, 10_000)
        .unwrap()
        .into_iter()
        .map(|r| r.receipt_id)
        .collect();
    for (i, e) in pre.iter().enumerate() {
        assert_eq!(e["tool_name"], tools[i], "{e}");
        assert_eq!(e["metadata"]["session_tool_calls_len"], i, "{e}");
        let expected = &tools[i.saturating_sub(16)..i];
        assert_eq!(e["session_tool_calls"], json!(expected), "call {i}: {e}");
        let receipt = e["metadata"]["receipt_id"].as_str().unwrap();
        assert!(
            receipts.contains(receipt),
            "call {i}: {receipt} is not stored"
        );
    }
}

#[tokio::test]
async fn the_agent_defaults_of_the_pack_set_the_scope() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let narrow = tg.client(Some(("narrow-agent", &tg.key)), &[]);
    let resp = narrow
        .post(up.url("/crm/customers/C-1/notes"))
        .json(&json!({"text": "hi"}))
        .send()
        .await
        .unwrap();
    assert_blocked(resp, "scope_violation").await;
    assert_eq!(up.seen().len(), 0);
    tg.stop().await;
}

#[tokio::test]
async fn a_held_rest_call_is_forwarded_after_approval_and_refused_after_denial_or_timeout() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let client = tg.agent_client(&[]);
    let mut created = tg.holds_created();

    let send = |id: &str| {
        client
            .post(up.url(&format!("/v1/transfers/{id}")))
            .json(&json!({"amount": 2500, "to_account": "DE89 3704 0044 0532 0130 00"}))
            .send()
    };
    let held = tokio::spawn(send("tr-approved"));
    let item = tg.wait_hold(&mut created, "payments.transfer").await;
    assert_eq!(item["tool_args"]["transfer_id"], "tr-approved", "{item}");
    assert_eq!(
        up.count("/v1/transfers"),
        0,
        "nothing is forwarded while held"
    );
    let token = item["hold_token"].as_str().unwrap();
    assert_eq!(tg.resolve(token, "approve").await, StatusCode::OK);
    let resp = within("the approved call", held).await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.text().await.unwrap(),
        "upstream POST /v1/transfers/tr-approved"
    );
    assert_eq!(up.count("/v1/transfers"), 1);

    let held = tokio::spawn(send("tr-denied"));
    let item = tg.wait_hold(&mut created, "payments.transfer").await;
    let token = item["hold_token"].as_str().unwrap();
    assert_eq!(tg.resolve(token, "deny").await, StatusCode::OK);
    let resp = within("the denied call", held).await.unwrap().unwrap();
    let body = assert_blocked(resp, "hold_denied").await;
    assert!(
        body["detail"].as_str().unwrap().contains("denied"),
        "{body}"
    );
    assert_eq!(
        up.count("/v1/transfers"),
        1,
        "the denied call never arrived"
    );

    // A hold nobody answers times out (the rule gives it one second) and is refused.
    let resp = within(
        "the timed-out call",
        client
            .post(up.url("/v1/refunds"))
            .json(&json!({"amount": 10}))
            .send(),
    )
    .await
    .unwrap();
    assert_blocked(resp, "hold_timeout").await;
    assert_eq!(up.count("/v1/refunds"), 0);
    tg.stop().await;
}

#[tokio::test]
async fn a_chunked_response_is_streamed_not_buffered() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let release = up.gate();
    let mut resp = within(
        "the response head",
        tg.agent_client(&[]).get(up.url("/chunked")).send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // The upstream sends its second chunk only after we have read the first one.
    let mut got = Vec::new();
    while got.len() < "first chunk\n".len() {
        let chunk = within("the first chunk", resp.chunk()).await.unwrap();
        got.extend_from_slice(&chunk.expect("body continues"));
    }
    assert_eq!(got, b"first chunk\n");
    release.send(()).unwrap();
    while let Some(chunk) = within("the rest", resp.chunk()).await.unwrap() {
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, b"first chunk\nsecond chunk\n");
    tg.stop().await;
}

#[tokio::test]
async fn an_sse_response_is_streamed_event_by_event() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let release = up.gate();
    let mut resp = within(
        "the response head",
        tg.agent_client(&[])
            .get(up.url("/sse"))
            .header("accept", "text/event-stream")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let first = "event: tick\ndata: one\n\n";
    let mut got = Vec::new();
    while got.len() < first.len() {
        let chunk = within("the first event", resp.chunk()).await.unwrap();
        got.extend_from_slice(&chunk.expect("stream continues"));
    }
    assert_eq!(String::from_utf8_lossy(&got), first);
    release.send(()).unwrap();
    while let Some(chunk) = within("the second event", resp.chunk()).await.unwrap() {
        got.extend_from_slice(&chunk);
    }
    assert_eq!(
        String::from_utf8_lossy(&got),
        format!("{first}event: tick\ndata: two\n\n")
    );
    tg.stop().await;
}

#[tokio::test]
async fn llm_calls_are_classified_checked_and_recorded() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let client = tg.agent_client(&[]);
    let chat = |model: &str| {
        client
            .post(up.url("/v1/chat/completions"))
            .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let resp = chat("blocked-model").await.unwrap();
    assert_blocked(resp, "rule_block").await;
    assert_eq!(up.count("/v1/chat"), 0);
    let resp = chat("gpt-4o-mini").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "hello");
    assert_eq!(up.count("/v1/chat"), 1);
    let core = tg.core().clone();
    tg.stop().await;
    let ledger = ledger_of(&core);
    let llm: Vec<_> = ledger
        .iter()
        .filter(|(k, _)| k == "LLM_INVOCATION")
        .collect();
    assert_eq!(llm.len(), 1, "{ledger:?}");
    assert!(llm[0].1.to_string().contains("gpt-4o-mini"), "{:?}", llm[0]);
}

#[tokio::test]
async fn connect_to_a_pass_through_host_is_tunnelled_with_the_upstreams_own_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("upstream test CA");
    let ca_pem = ca.write(dir.path(), "upstream-ca.pem");
    let cert = ca.server_cert(dir.path(), "upstream", &["localhost", "127.0.0.1"]);
    let up = Upstream::tls(&cert).await;
    // No upstream_ca for toolgate: a tunnel does not need it.
    let tg = ProxyApp::start_with(
        |pack| *pack = pack.replace("pass_through = []", r#"pass_through = ["localhost"]"#),
        |_| {},
    )
    .await;
    let served = tls_through_connect(&tg, &up.authority(), "localhost", &[&ca_pem])
        .await
        .expect("the client completes TLS with the upstream itself");
    assert_eq!(
        served, cert.der,
        "the client sees the upstream's own certificate"
    );
    let err = tls_through_connect(&tg, &up.authority(), "localhost", &[&tg.ca_pem])
        .await
        .expect_err("toolgate's CA does not vouch for a tunnelled host");
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    let resp = tg
        .agent_client(&[&ca_pem])
        .post(up.url("/crm/customers/C-1/notes"))
        .json(&json!({"text": "write to bob@example.org"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let seen = up.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        String::from_utf8_lossy(&seen[0].body).contains("bob@example.org"),
        "a tunnel is not inspected"
    );
    let ledger = tg.stop_and_read_ledger().await;
    assert!(events(&ledger, "TOOL_CALL_PRE", "crm.note").is_empty());
}

#[tokio::test]
async fn connect_to_an_intercepted_host_presents_toolgates_leaf_and_inspects_the_requests() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("upstream test CA");
    let ca_pem = ca.write(dir.path(), "upstream-ca.pem");
    let cert = ca.server_cert(dir.path(), "upstream", &["localhost", "127.0.0.1"]);
    let up = Upstream::tls(&cert).await;
    let tg = ProxyApp::start(Some(&ca_pem)).await;

    let served = tls_through_connect(&tg, &up.authority(), "localhost", &[&tg.ca_pem])
        .await
        .expect("toolgate's CA vouches for its leaf");
    assert_ne!(served, cert.der, "the client is served toolgate's leaf");
    let err = tls_through_connect(&tg, &up.authority(), "localhost", &[&ca_pem])
        .await
        .expect_err("the upstream's CA does not vouch for toolgate's leaf");
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    let client = tg.agent_client(&[&tg.ca_pem]);
    let resp = client
        .post(up.url("/crm/customers/C-1/notes"))
        .json(&json!({"text": "write to bob@example.org"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let seen = up.seen();
    assert_eq!(seen.len(), 1, "the request went upstream over TLS");
    let got: Value = serde_json::from_slice(&seen[0].body).unwrap();
    assert_eq!(got["text"], "write to [REDACTED:email]");
    let resp = client.get(up.url("/forbidden/x")).send().await.unwrap();
    assert_blocked(resp, "rule_block").await;
    assert_eq!(up.count("/forbidden"), 0);
    tg.stop().await;

    // Without the test CA among its roots, toolgate refuses to talk to the upstream.
    let tg = ProxyApp::start(None).await;
    let before = up.seen().len();
    let resp = tg
        .agent_client(&[&tg.ca_pem])
        .get(up.url("/hello"))
        .send()
        .await
        .unwrap();
    assert!(
        resp.status().is_server_error(),
        "an untrusted upstream is a gateway error, got {}",
        resp.status()
    );
    assert_eq!(up.seen().len(), before);
    tg.stop().await;
}

#[tokio::test]
async fn a_garbage_request_line_gets_400_and_the_proxy_keeps_serving() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    for garbage in [
        &b"THIS IS NOT HTTP AT ALL\r\n\r\n"[..],
        b"GET\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",
    ] {
        let mut tcp = TcpStream::connect(tg.proxy).await.unwrap();
        tcp.write_all(garbage).await.unwrap();
        let head = read_head(&mut tcp).await;
        assert!(
            head.starts_with("HTTP/1.1 400"),
            "{:?} answered {head:?}",
            String::from_utf8_lossy(garbage)
        );
    }
    let ok = tg
        .agent_client(&[])
        .get(up.url("/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(up.seen().len(), 1);
    tg.stop().await;
}

#[tokio::test]
async fn an_oversized_request_head_gets_431_or_is_closed() {
    let tg = ProxyApp::start_with(|_| {}, |c| c.proxy_max_header_bytes = 8192).await;
    let up = Upstream::plain().await;
    let mut tcp = TcpStream::connect(tg.proxy).await.unwrap();
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nProxy-Authorization: {}\r\nX-Big: {}\r\n\r\n",
        up.url("/hello"),
        up.addr,
        basic(AGENT, &tg.key),
        "a".repeat(64 * 1024)
    );
    let _ = tcp.write_all(request.as_bytes()).await; // the proxy may close mid-write
    let head = read_head(&mut tcp).await;
    assert!(
        head.is_empty() || head.starts_with("HTTP/1.1 431"),
        "oversized head answered {head:?}"
    );
    // A head under the limit still works, on a new connection.
    let ok = tg
        .agent_client(&[])
        .get(up.url("/hello"))
        .header("x-big", "a".repeat(1024))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(up.seen().len(), 1, "only the small request arrived");
    tg.stop().await;
}

#[tokio::test]
async fn an_oversized_request_body_gets_413() {
    let tg = ProxyApp::start_with(|_| {}, |c| c.proxy_max_body_bytes = 4096).await;
    let up = Upstream::plain().await;
    let resp = tg
        .agent_client(&[])
        .post(up.url("/crm/customers/C-1/notes"))
        .json(&json!({"text": "x".repeat(16 * 1024)}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(up.seen().len(), 0);
    tg.stop().await;
}

#[tokio::test]
async fn a_client_that_disconnects_while_held_never_reaches_the_upstream() {
    let tg = ProxyApp::start(None).await;
    let up = Upstream::plain().await;
    let mut created = tg.holds_created();
    let body = r#"{"amount": 900, "to_account": "GB33BUKB20201555555555"}"#;
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nProxy-Authorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        up.url("/v1/transfers/tr-gone"),
        up.addr,
        basic(AGENT, &tg.key),
        body.len()
    );
    let mut tcp = TcpStream::connect(tg.proxy).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let item = tg.wait_hold(&mut created, "payments.transfer").await;
    drop(tcp);
    let token = item["hold_token"].as_str().unwrap();
    let status = tg.resolve(token, "approve").await;
    assert!(
        status == StatusCode::OK || status == StatusCode::CONFLICT,
        "approving an abandoned hold answers {status}"
    );
    // The proxy still serves, and once it has drained nothing was sent for the abandoned call.
    let ok = tg
        .agent_client(&[])
        .get(up.url("/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    tg.stop().await;
    assert_eq!(up.count("/v1/transfers"), 0, "{:?}", up.seen());
    assert_eq!(up.count("/hello"), 1);
}
