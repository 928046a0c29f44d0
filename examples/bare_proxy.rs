//! The forward-proxy benchmark's floor: a bare hyper 1 forward proxy with nothing in it — no
//! authentication, classification, policy or events. It takes absolute-form `http://` requests
//! on HTTP/1.1 keep-alive connections and forwards them through hyper-util's pooled legacy
//! client (the client toolgate's proxy uses), streaming the response back.
//!
//! `bench/proxy.sh` runs it beside toolgate, so the added latency of toolgate's own work is the
//! difference between the two rows of the same run (what hyper and two more loopback hops cost
//! on this machine is the bare row's).
//!
//! Usage: `cargo run --release --example bare_proxy` — prints `listening on 127.0.0.1:PORT`.

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use tokio::net::TcpListener;

type Upstream = Client<HttpConnector, Incoming>;

/// Forwards one request; 400 for anything but an absolute-form `http://` request, 502 when the
/// upstream fails.
async fn forward(
    client: Upstream,
    req: Request<Incoming>,
) -> Result<Response<http_body_util::Either<Incoming, String>>, Infallible> {
    use http_body_util::Either;
    if req.uri().scheme_str() != Some("http") {
        let mut r = Response::new(Either::Right("absolute-form http:// only\n".to_string()));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return Ok(r);
    }
    let (mut parts, body) = req.into_parts();
    parts.headers.remove("proxy-authorization");
    parts.headers.remove("proxy-connection");
    match client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => Ok(resp.map(Either::Left)),
        Err(e) => {
            let mut r = Response::new(Either::Right(format!("upstream failed: {e}\n")));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            Ok(r)
        }
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?);
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new()).build(http);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| forward(client.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
