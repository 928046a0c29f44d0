//! The sidecar's HTTP client for its control plane: `{control_plane_url}/<tenant>/service/...`
//! with the sidecar's credential as a bearer token, JSON in and out, ETag-aware GETs.

use crate::config::Config;
use reqwest::header::{ETAG, IF_NONE_MATCH};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// Why a control-plane call failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No connection, timeout, or a broken response: retry later.
    #[error("control plane unreachable: {0}")]
    Unreachable(String),
    /// The control plane answered with an error status (`detail` from its `{"detail"}` body).
    #[error("control plane answered {status}: {detail}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The error's detail (or the raw body, cut short).
        detail: String,
    },
    /// The answer was not the expected JSON.
    #[error("unexpected answer from the control plane: {0}")]
    Decode(String),
    /// The link is not configured (no `--control-plane`), or the TLS trust store failed.
    #[error("{0}")]
    Setup(String),
}

impl LinkError {
    /// True for failures worth retrying (unreachable, 5xx, 429).
    pub fn retryable(&self) -> bool {
        match self {
            LinkError::Unreachable(_) => true,
            LinkError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// Per-request timeout of control-plane calls (long-polls pass their own).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A client bound to one control plane and tenant. Cheap to clone.
#[derive(Clone)]
pub struct CpClient {
    http: reqwest::Client,
    base: Arc<str>,
    tenant: Arc<str>,
    token: Arc<str>,
}

impl CpClient {
    /// From the link settings (`control_plane_url`, `tenant_id`, `control_plane_token`); TLS
    /// trusts the system roots plus `upstream_ca`.
    ///
    /// Errors: [`LinkError::Setup`] when the link is not configured or TLS cannot be set up.
    pub fn new(cfg: &Config) -> Result<CpClient, LinkError> {
        let (Some(base), Some(tenant), Some(token)) = (
            cfg.control_plane_url.as_deref(),
            cfg.tenant_id.as_deref(),
            cfg.control_plane_token.as_deref(),
        ) else {
            return Err(LinkError::Setup(
                "the control-plane link is not configured".into(),
            ));
        };
        let tls = crate::tls::upstream_client_config(cfg.upstream_ca.as_deref())
            .map_err(|e| LinkError::Setup(e.to_string()))?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| LinkError::Setup(e.to_string()))?;
        Ok(CpClient {
            http,
            base: base.trim_end_matches('/').into(),
            tenant: tenant.into(),
            token: token.into(),
        })
    }

    /// The tenant this client acts for.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// `{base}/{tenant}/service{path}` (`path` starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}/{}/service{path}", self.base, self.tenant)
    }

    /// POSTs `body` as JSON and decodes the JSON answer.
    pub async fn post_json<T: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<R, LinkError> {
        let req = self
            .http
            .post(self.url(path))
            .bearer_auth(&*self.token)
            .json(body);
        decode(send(req).await?).await
    }

    /// GETs JSON; `timeout` overrides the default (long-polls).
    pub async fn get_json<R: DeserializeOwned>(
        &self,
        path: &str,
        timeout: Option<Duration>,
    ) -> Result<R, LinkError> {
        let mut req = self.http.get(self.url(path)).bearer_auth(&*self.token);
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        decode(send(req).await?).await
    }

    /// GETs JSON with `If-None-Match: etag`. `Ok(None)`: unchanged (304); otherwise the body and
    /// its `ETag`.
    pub async fn get_if_changed<R: DeserializeOwned>(
        &self,
        path: &str,
        etag: Option<&str>,
    ) -> Result<Option<(R, Option<String>)>, LinkError> {
        let mut req = self.http.get(self.url(path)).bearer_auth(&*self.token);
        if let Some(tag) = etag {
            req = req.header(IF_NONE_MATCH, tag);
        }
        let resp = send(req).await?;
        if resp.status() == StatusCode::NOT_MODIFIED {
            return Ok(None);
        }
        let tag = resp
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        Ok(Some((decode(resp).await?, tag)))
    }
}

async fn send(req: reqwest::RequestBuilder) -> Result<reqwest::Response, LinkError> {
    let resp = req
        .send()
        .await
        .map_err(|e| LinkError::Unreachable(e.to_string()))?;
    let status = resp.status();
    if status.is_success() || status == StatusCode::NOT_MODIFIED {
        return Ok(resp);
    }
    let text = resp.text().await.unwrap_or_default();
    let detail = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("detail").and_then(|d| d.as_str()).map(String::from))
        .unwrap_or_else(|| text.chars().take(200).collect());
    Err(LinkError::Status {
        status: status.as_u16(),
        detail,
    })
}

async fn decode<R: DeserializeOwned>(resp: reqwest::Response) -> Result<R, LinkError> {
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| LinkError::Unreachable(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| LinkError::Decode(e.to_string()))
}
