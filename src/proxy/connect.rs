//! CONNECT: authenticate the tunnel, then either tunnel it untouched (hosts the pack marks
//! `pass_through`) or terminate TLS with a leaf for the requested host and serve the decrypted
//! requests (HTTP/1.1 or h2, by ALPN) through the same interception as plain `http://`.

use super::identity::{self, Identity};
use super::listener::ConnGuard;
use super::repoll::Repoll;
use super::{intercept, Proxy, Target};
use crate::api::ApiError;
use axum::body::Body;
use axum::response::IntoResponse;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// Longest wait for a pass-through tunnel's TCP connection to the upstream.
const TUNNEL_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Handles a CONNECT request: 200 once the tunnel is set up, then the tunnel runs in its own
/// task. Errors: 400 without a `host:port` target, 407/403 for credentials, 502/504 when a
/// pass-through upstream cannot be reached, 502 when no leaf can be minted for the host.
pub async fn handle(
    proxy: Arc<Proxy>,
    mut req: Request<Incoming>,
    guard: ConnGuard,
) -> Response<Body> {
    let Some(target) = req.uri().authority().and_then(|a| Target::parse(a, true)) else {
        return ApiError::BadRequest("CONNECT needs a host:port target".into()).into_response();
    };
    let identity = match identity::authenticate(&proxy, req.headers()) {
        Ok(i) => i,
        Err(e) => return e.into_response(),
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let intercepts = proxy.core.policy.current().proxy().intercepts(&target.host);
    if intercepts {
        start_interception(proxy, on_upgrade, target, identity, guard)
    } else {
        start_tunnel(on_upgrade, target, guard).await
    }
}

async fn start_tunnel(on_upgrade: OnUpgrade, target: Target, guard: ConnGuard) -> Response<Body> {
    let addr = (target.host.clone(), target.port);
    let upstream = match tokio::time::timeout(TUNNEL_CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return ApiError::BadGateway(format!("cannot connect to {}: {e}", target.authority()))
                .into_response()
        }
        Err(_) => {
            return ApiError::GatewayTimeout(format!(
                "connecting to {} timed out",
                target.authority()
            ))
            .into_response()
        }
    };
    let _ = upstream.set_nodelay(true);
    tracing::debug!(host = %target.host, port = target.port, "pass-through tunnel");
    tokio::spawn(async move {
        let _guard = guard;
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let mut client = TokioIo::new(upgraded);
        let mut upstream = upstream;
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    });
    empty(StatusCode::OK)
}

fn start_interception(
    proxy: Arc<Proxy>,
    on_upgrade: OnUpgrade,
    target: Target,
    identity: Identity,
    guard: ConnGuard,
) -> Response<Body> {
    let tls = match proxy.leafs.server_config(&target.host) {
        Ok(c) => c,
        Err(e) => {
            return ApiError::BadGateway(format!("cannot intercept {}: {e}", target.host))
                .into_response()
        }
    };
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        match acceptor.accept(TokioIo::new(upgraded)).await {
            Ok(stream) => serve_decrypted(proxy, stream, target, identity, guard).await,
            Err(e) => {
                tracing::debug!(host = %target.host, error = %e, "client TLS handshake failed (does the agent trust the toolgate CA?)")
            }
        }
    });
    empty(StatusCode::OK)
}

/// Serves the requests inside an intercepted tunnel (HTTP/1.1 or h2 per ALPN).
async fn serve_decrypted(
    proxy: Arc<Proxy>,
    stream: tokio_rustls::server::TlsStream<TokioIo<Upgraded>>,
    target: Target,
    identity: Identity,
    guard: ConnGuard,
) {
    let cfg = &proxy.core.config;
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .max_buf_size(cfg.proxy_max_header_bytes)
        .header_read_timeout(Duration::from_secs(cfg.proxy_idle_timeout_seconds));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(cfg.proxy_max_header_bytes).unwrap_or(u32::MAX));
    let svc_proxy = proxy.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let (proxy, target, identity) = (svc_proxy.clone(), target.clone(), identity.clone());
        async move { Ok::<_, Infallible>(inner(proxy, req, target, identity).await) }
    });
    // Repoll: reading the request body wakes this task during its own poll (repoll.rs).
    let mut conn = Repoll::new(builder.serve_connection(TokioIo::new(stream), service));
    let result = tokio::select! {
        r = &mut conn => r,
        _ = super::listener::stopped(guard.shutdown.clone()) => {
            conn.inner().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "intercepted connection ended with an error");
    }
}

/// A request inside the tunnel: the key is re-checked (revocation, expiry, rate limit) for every
/// request, since a tunnel can outlive its key.
async fn inner(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
    target: Target,
    identity: Identity,
) -> Response<Body> {
    if let Err(e) = identity::recheck(&proxy, &identity) {
        return e.into_response();
    }
    intercept::handle(proxy, req, target, identity).await
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}
