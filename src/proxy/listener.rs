//! The proxy listener: accept loop, one HTTP/1.1 server connection per client (with upgrades,
//! for CONNECT), request-head and idle limits, and the drain on shutdown.
//!
//! Every connection (plain, tunnelled or intercepted) holds a clone of one `mpsc::Sender`; the
//! drain stops accepting, asks each connection to finish its in-flight request, and waits until
//! every clone is dropped (bounded by `shutdown_grace_seconds` in `app`).

use super::recorder::Recorder;
use super::repoll::Repoll;
use super::{connect, intercept, Proxy, ProxyError, Target};
use crate::api::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::response::IntoResponse;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// What a connection task carries so the drain can find it.
#[derive(Clone)]
pub(crate) struct ConnGuard {
    /// Dropped when the connection ends.
    _alive: mpsc::Sender<()>,
    /// Flips to true when the process stops.
    pub shutdown: watch::Receiver<bool>,
}

/// Binds the proxy listener on `core.config.proxy_listen` and starts accepting. Returns the bound
/// address, the accept task (it ends after shutdown once every connection has finished and the
/// event recorder is closed; the caller bounds the wait) and the event recorder, which the
/// caller closes itself when that wait runs out, before the final flush.
///
/// Errors: [`ProxyError::Tls`] when the local CA cannot be loaded or created, or the upstream
/// trust store is unusable; [`ProxyError::Bind`] when the address cannot be bound.
pub async fn bind(
    core: AppState,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, JoinHandle<()>, Arc<Recorder>), ProxyError> {
    let addr = core.config.proxy_listen;
    let proxy = Arc::new(Proxy::new(core)?);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| ProxyError::Bind { addr, source })?;
    let recorder = proxy.recorder.clone();
    let task = tokio::spawn(accept_loop(proxy, listener, shutdown));
    Ok((local, task, recorder))
}

async fn accept_loop(proxy: Arc<Proxy>, listener: TcpListener, shutdown: watch::Receiver<bool>) {
    let (alive, mut all_done) = mpsc::channel::<()>(1);
    let mut stop = std::pin::pin!(stopped(shutdown.clone()));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.as_mut() => break,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let _ = stream.set_nodelay(true);
                let guard = ConnGuard {
                    _alive: alive.clone(),
                    shutdown: shutdown.clone(),
                };
                tokio::spawn(serve_client(proxy.clone(), stream, guard));
            }
            Err(e) => {
                tracing::warn!(error = %e, "proxy accept failed");
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    drop(alive);
    let _ = all_done.recv().await;
    // Every connection has ended: no more events but what is queued.
    proxy.recorder.close().await;
}

/// Serves one client connection: HTTP/1.1 with upgrades (CONNECT), the head size and idle limits.
async fn serve_client(proxy: Arc<Proxy>, stream: tokio::net::TcpStream, guard: ConnGuard) {
    let cfg = &proxy.core.config;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .max_buf_size(cfg.proxy_max_header_bytes)
        .header_read_timeout(Duration::from_secs(cfg.proxy_idle_timeout_seconds));
    let svc_proxy = proxy.clone();
    let svc_guard = guard.clone();
    let service = service_fn(move |req| {
        let proxy = svc_proxy.clone();
        let guard = svc_guard.clone();
        async move { Ok::<_, Infallible>(route(proxy, req, guard).await) }
    });
    // Repoll: reading the request body wakes this task during its own poll (repoll.rs).
    let mut conn = Repoll::new(
        builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades(),
    );
    tokio::select! {
        r = &mut conn => log_conn_end(r),
        _ = stopped(guard.shutdown.clone()) => {
            conn.inner().graceful_shutdown();
            log_conn_end(conn.await);
        }
    }
}

/// Resolves once the process is stopping.
pub(crate) async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

fn log_conn_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "proxy connection ended with an error");
    }
}

/// Dispatches a request received on the listener: CONNECT, an absolute-form `http://` request,
/// or a refusal for anything else.
async fn route(proxy: Arc<Proxy>, req: Request<Incoming>, guard: ConnGuard) -> Response<Body> {
    if req.method() == Method::CONNECT {
        return connect::handle(proxy, req, guard).await;
    }
    let target = req
        .uri()
        .authority()
        .filter(|_| req.uri().scheme() == Some(&http::uri::Scheme::HTTP))
        .and_then(|a| Target::parse(a, false));
    let Some(target) = target else {
        return ApiError::BadRequest(
            "toolgate's proxy listener takes absolute-form http:// requests and CONNECT; \
             set HTTP_PROXY/HTTPS_PROXY to it (the /v1 API is on the admin listener)"
                .into(),
        )
        .into_response();
    };
    let identity = match super::identity::authenticate(&proxy, req.headers()) {
        Ok(i) => i,
        Err(e) => return e.into_response(),
    };
    intercept::handle(proxy, req, target, identity).await
}
