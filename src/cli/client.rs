//! The operator CLI's HTTP client: `{control_plane}/{tenant}/service/...` with the admin token as
//! a bearer credential, JSON in and out, errors as [`CliError`].

use super::{CliError, ConnArgs, DEFAULT_ADMIN_TOKEN_FILE};
use reqwest::header::HeaderValue;
use reqwest::{Method, RequestBuilder, Url};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Whole-request timeout of a CLI call.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Connect timeout of a CLI call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client bound to one control plane, tenant and admin token.
pub struct Client {
    http: reqwest::Client,
    base: Url,
    tenant: String,
    token: HeaderValue,
}

impl Client {
    /// Finds the admin token and builds the HTTP client.
    ///
    /// Errors: [`CliError::NoToken`] when no token is found, [`CliError::Other`] when TLS cannot
    /// be set up for an https control plane.
    pub fn new(conn: &ConnArgs) -> Result<Client, CliError> {
        let token = admin_token(conn.admin_token_file.as_deref())?;
        let tls = match crate::tls::upstream_client_config(None) {
            Ok(tls) => tls,
            // Plain http needs no roots; a machine without a system store still talks to it.
            Err(_) if conn.control_plane.scheme() == "http" => no_roots()?,
            Err(e) => return Err(CliError::Other(format!("TLS setup failed: {e}"))),
        };
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("toolgate-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            http,
            base: conn.control_plane.clone(),
            tenant: conn.tenant.clone(),
            token,
        })
    }

    /// `{base}/{tenant}/service/{segments…}`, each segment percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty()
                .push(&self.tenant)
                .push("service")
                .extend(segments);
        }
        url
    }

    /// GET with query pairs; the JSON answer.
    pub async fn get(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<Value, CliError> {
        let mut url = self.url(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        self.send(self.http.request(Method::GET, url)).await
    }

    /// POST a JSON body; the JSON answer.
    pub async fn post(&self, segments: &[&str], body: &Value) -> Result<Value, CliError> {
        let req = self.http.post(self.url(segments)).json(body);
        self.send(req).await
    }

    /// DELETE; the JSON answer.
    pub async fn delete(&self, segments: &[&str]) -> Result<Value, CliError> {
        self.send(self.http.delete(self.url(segments))).await
    }

    async fn send(&self, req: RequestBuilder) -> Result<Value, CliError> {
        let resp = req
            .header(reqwest::header::AUTHORIZATION, self.token.clone())
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        if !status.is_success() {
            return Err(CliError::Status {
                status,
                detail: detail(&bytes, status),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            CliError::Other(format!(
                "unexpected answer from the control plane at {} ({status}): {e}",
                self.base
            ))
        })
    }

    fn transport(&self, e: reqwest::Error) -> CliError {
        CliError::Unreachable {
            url: self.base.as_str().trim_end_matches('/').to_string(),
            reason: root_cause(&e),
        }
    }
}

/// The token: `--admin-token-file`, else `TOOLGATE_ADMIN_TOKEN`, else the default file.
fn admin_token(file: Option<&Path>) -> Result<HeaderValue, CliError> {
    let env = std::env::var("TOOLGATE_ADMIN_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let token = match (file, env) {
        (None, Some(t)) => t,
        (file, _) => {
            let path = file.unwrap_or(Path::new(DEFAULT_ADMIN_TOKEN_FILE));
            match std::fs::read_to_string(path).map(|t| t.trim().to_string()) {
                Ok(t) if !t.is_empty() => t,
                other => {
                    let why = match other {
                        Err(e) => e.to_string(),
                        Ok(_) => "the file is empty".to_string(),
                    };
                    return Err(CliError::NoToken(format!(
                        "no admin token: set TOOLGATE_ADMIN_TOKEN or pass --admin-token-file \
                         (cannot use {}: {why})",
                        path.display()
                    )));
                }
            }
        }
    };
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        CliError::NoToken("the admin token has characters an HTTP header cannot carry".into())
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// A TLS config without roots (for plain-http control planes on hosts without a system store).
fn no_roots() -> Result<rustls::ClientConfig, CliError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CliError::Other(format!("TLS setup failed: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

/// The `detail` of a `{"detail": ...}` body, else the body (cut short), else the status text.
fn detail(body: &[u8], status: reqwest::StatusCode) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        match v.get("detail") {
            Some(Value::String(s)) => return s.clone(),
            Some(other) => return other.to_string(),
            None => {}
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return status.canonical_reason().unwrap_or("no detail").to_string();
    }
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The innermost cause of a transport error ("Connection refused (os error 111)"), with
/// "timed out" for timeouts.
fn root_cause(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "the request timed out".into();
    }
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_prefers_the_detail_field_then_the_body_then_the_reason() {
        let s = reqwest::StatusCode::CONFLICT;
        assert_eq!(
            detail(br#"{"detail":"already resolved"}"#, s),
            "already resolved"
        );
        assert_eq!(detail(b"  plain text\n", s), "plain text");
        assert_eq!(detail(b"", s), "Conflict");
        assert!(detail("x".repeat(500).as_bytes(), s).ends_with('…'));
    }
}
