//! The upstream side: a pooled HTTP/1.1 + h2 client whose TLS trusts the system roots plus
//! `--upstream-ca`, the request timeout, and header hygiene in both directions.

use super::Target;
use crate::api::ApiError;
use crate::tls::{upstream_client_config, TlsError};
use axum::body::Body;
use http::header::{self, HeaderMap, HeaderName};
use http::request::Parts;
use http::{Response, Uri, Version};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::path::Path;
use std::time::Duration;

/// The upstream client (one per proxy; connections are pooled per host).
pub struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, Body>,
    timeout: Duration,
}

impl Upstream {
    /// Builds the client. `timeout` bounds the wait for response headers.
    ///
    /// Errors: [`TlsError`] when the trust store cannot be built.
    pub fn new(extra_roots: Option<&Path>, timeout: Duration) -> Result<Upstream, TlsError> {
        let mut tls = upstream_client_config(extra_roots)?;
        // hyper-rustls sets ALPN itself from enable_http1/enable_http2 and refuses a preset one.
        tls.alpn_protocols.clear();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Upstream { client, timeout })
    }

    /// Sends the request to `target` (path and query from `parts.uri`) and returns the response
    /// with its body streaming. Errors: 502 when the upstream cannot be reached or fails, 504
    /// when no response headers arrive in time.
    pub async fn send(
        &self,
        mut parts: Parts,
        body: Body,
        target: &Target,
    ) -> Result<Response<Body>, ApiError> {
        let agent_version = parts.version;
        parts.uri = upstream_uri(&parts.uri, target)?;
        parts.version = Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        let req = http::Request::from_parts(parts, body);
        let sent = tokio::time::timeout(self.timeout, self.client.request(req)).await;
        let resp = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let detail = format!(
                    "upstream {} failed: {}",
                    target.authority(),
                    error_chain(&e)
                );
                return Err(ApiError::BadGateway(detail));
            }
            Err(_) => {
                return Err(ApiError::GatewayTimeout(format!(
                    "upstream {} sent no response within {} s",
                    target.authority(),
                    self.timeout.as_secs()
                )))
            }
        };
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        parts.version = agent_version;
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

/// `scheme://authority/path?query` of the upstream request.
fn upstream_uri(uri: &Uri, target: &Target) -> Result<Uri, ApiError> {
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let scheme = if target.https { "https" } else { "http" };
    format!("{scheme}://{}{path}", target.authority())
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("invalid request target {path}")))
}

/// The error and its sources, `: `-joined (hyper's top-level message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1: `Connection` and what it names, `Keep-Alive`,
/// `Proxy-*`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`) and toolgate's own
/// `X-Toolgate-*` context headers. The body framing is set again by hyper.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    for name in ["keep-alive", "proxy-connection"] {
        headers.remove(name);
    }
    let ours: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("x-toolgate-"))
        .cloned()
        .collect();
    for name in ours {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_toolgate_headers_are_removed() {
        let mut h = HeaderMap::new();
        h.insert("connection", "close, x-secret".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("proxy-authorization", "Basic x".parse().unwrap());
        h.insert("x-toolgate-session-id", "s".parse().unwrap());
        h.insert("content-type", "application/json".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("content-type"));
    }

    #[test]
    fn upstream_uri_keeps_path_and_query_and_default_ports() {
        let t = Target {
            https: true,
            host: "api.example.com".into(),
            port: 443,
        };
        let uri: Uri = "/v1/x?a=1".parse().unwrap();
        assert_eq!(
            upstream_uri(&uri, &t).unwrap().to_string(),
            "https://api.example.com/v1/x?a=1"
        );
        let t = Target {
            https: false,
            host: "::1".into(),
            port: 8080,
        };
        let uri: Uri = "http://[::1]:8080/p".parse().unwrap();
        assert_eq!(
            upstream_uri(&uri, &t).unwrap().to_string(),
            "http://[::1]:8080/p"
        );
    }
}
