//! The forward proxy (DESIGN.md, "proxy/"): agents set `HTTPS_PROXY`/`HTTP_PROXY` to this
//! listener; every tool call they make is classified, checked by the same `evaluate` as
//! POST /v1/enforce, and the verdict is applied to the real request before anything leaves the
//! host.
//!
//! One file per phase of a connection:
//!
//! | file | owns |
//! |---|---|
//! | `listener.rs` | accept loop, HTTP/1.1 server per connection, limits, drain on shutdown |
//! | `connect.rs` | CONNECT: authenticate, then a pass-through tunnel or TLS interception |
//! | `identity.rs` | who calls: `Proxy-Authorization`, `X-Toolgate-*` headers, pack defaults |
//! | `intercept.rs` | one intercepted request: read, classify, dispatch |
//! | `calls.rs` | tool calls → `EnforcementRequest` → decision; holds; session call tracking |
//! | `apply.rs` | verdicts applied: forward, rewrite, refuse (MCP `isError`, REST 403) |
//! | `upstream.rs` | the upstream client (system roots + `--upstream-ca`), header hygiene |
//! | `record.rs` | TOOL_CALL_PRE/POST/BLOCK and LLM_INVOCATION events; response capture |
//! | `recorder.rs` | the event queue and its thread: events are built and reach the ledger in batches |
//! | `repoll.rs` | a connection's wakes of itself (the body read) polled in place, not through tokio |
//! | `mcp_sessions.rs` | MCP session GET/DELETE of server-issued sessions pass untouched |
//! | `tools_list.rs` | `tools/list` answers filtered to what the policy would not block |
//! | `classify/` | what a request is (MCP, REST route, LLM, host-level): pure functions |
//!
//! Limits: request heads over `proxy_max_header_bytes` answer 431; bodies over
//! `proxy_max_body_bytes` answer 413 (a body that cannot be inspected is not forwarded);
//! idle connections close after `proxy_idle_timeout_seconds`; upstream response headers must
//! arrive within `proxy_request_timeout_seconds` (504); at most `max_held_requests` calls are held
//! for approval at once (503 beyond). Everything not understood fails closed.

pub mod classify;

mod apply;
mod calls;
mod connect;
mod identity;
mod intercept;
mod listener;
mod mcp_sessions;
mod record;
mod recorder;
mod repoll;
mod tools_list;
mod upstream;

pub use listener::bind;
pub use recorder::Recorder;

use crate::state::AppState;
use crate::tls::{LeafCache, LocalCa, TlsError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The local CA or the upstream trust store could not be loaded.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The event recorder's thread could not be started.
    #[error("cannot start the proxy event recorder thread: {0}")]
    Recorder(std::io::Error),
}

/// Most leaf certificates kept (one per intercepted host).
const LEAF_CACHE_CAPACITY: usize = 1024;

/// State shared by every proxy connection.
pub(crate) struct Proxy {
    core: AppState,
    leafs: LeafCache,
    upstream: upstream::Upstream,
    held: Arc<Semaphore>,
    sessions: calls::SessionCalls,
    mcp_sessions: mcp_sessions::McpSessions,
    recorder: Arc<recorder::Recorder>,
}

impl Proxy {
    /// Loads (or creates at first start) the local CA and builds the upstream client.
    fn new(core: AppState) -> Result<Proxy, ProxyError> {
        let cfg = &core.config;
        // LocalCa logs the path of a CA it creates (agents must trust it).
        let (ca, _created) = LocalCa::load_or_init(&cfg.ca_dir)?;
        let upstream = upstream::Upstream::new(
            cfg.upstream_ca.as_deref(),
            Duration::from_secs(cfg.proxy_request_timeout_seconds),
        )?;
        let ledger_of = core.clone();
        let recorder = recorder::Recorder::start(Box::new(move |entries| {
            ledger_of.ledger.append_entries(entries)
        }))
        .map_err(ProxyError::Recorder)?;
        Ok(Proxy {
            recorder: Arc::new(recorder),
            leafs: LeafCache::new(ca, LEAF_CACHE_CAPACITY),
            upstream,
            held: Arc::new(Semaphore::new(cfg.max_held_requests)),
            sessions: calls::SessionCalls::default(),
            mcp_sessions: mcp_sessions::McpSessions::default(),
            core,
        })
    }
}

/// Where an intercepted request goes: scheme, host and port of the upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `http` or `https`.
    pub https: bool,
    /// Host name or IP literal (IPv6 without brackets), lower-cased.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Target {
    /// `host` or `host:port` as it goes into an absolute URI (brackets around IPv6).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// From an authority (`host:port`, `[v6]:port`, or `host` with the scheme's default port).
    pub fn parse(authority: &http::uri::Authority, https: bool) -> Option<Target> {
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return None;
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        Some(Target {
            https,
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}
