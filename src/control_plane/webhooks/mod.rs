//! Outbound webhooks of the control plane (SPEC.md, "Events": the test webhook trigger and
//! approval callbacks): each tenant may configure one URL; toolgate POSTs signed JSON to it when
//! a hold is created or resolved (`hold.created`, `hold.resolved`) and on demand
//! (`webhook.test`). Payload shapes, headers and verification: docs/control-plane.md.
//!
//! * Settings live in the `Settings` tree at `pair_key(tenant_id, "webhook")`: the URL, the
//!   signing secret (stored because it signs every delivery; never logged, returned only by the
//!   PUT that creates it) and when it was configured.
//! * Deliveries are durable: [`Webhooks::enqueue`] writes the delivery to the `Deliveries` tree
//!   (at `seq_key(seq)`) and the dispatcher flushes before the first attempt. A delivery is
//!   retried with exponential backoff and jitter ([`INITIAL_BACKOFF`] doubling up to
//!   [`MAX_BACKOFF`]) until a 2xx answer or [`MAX_ATTEMPTS`] attempts, after which it is dropped
//!   with an error log and counted ([`Webhooks::dropped`]). A restart resumes every delivery
//!   still stored. Each attempt reads the tenant's current URL and secret; a delivery whose
//!   webhook was deleted is dropped.
//! * Deliveries run concurrently (at most [`MAX_IN_FLIGHT`]); receivers must not rely on their
//!   order (each payload has `created_at`; `hold.resolved` carries the whole final hold).
//! * The dispatcher and the hold relay ([`start`]) stop when the app's shutdown watch flips.

use crate::ids;
use crate::store::{pair_key, seq_key, Store, StoreError, Tree, TreeName};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

mod dispatch;
pub mod sign;

pub use dispatch::start;

/// Timeout of one delivery attempt (connect, send, answer headers).
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts per delivery before it is dropped.
pub const MAX_ATTEMPTS: u32 = 10;
/// Delay before the first retry; doubles with every failed attempt (before jitter).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest delay between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Deliveries attempted at the same time.
pub const MAX_IN_FLIGHT: usize = 16;
/// Longest webhook URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// A tenant's webhook. `secret` signs deliveries; it never appears in logs (see the `Debug`
/// impl) and is returned only when it is created.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
pub struct WebhookSettings {
    /// http(s) URL deliveries are POSTed to.
    pub url: String,
    /// `whsec_<43 base64url chars>`: the HMAC key.
    pub secret: String,
    /// When the URL (and secret) were set.
    pub configured_at: DateTime<Utc>,
}

impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("configured_at", &self.configured_at)
            .finish()
    }
}

/// A delivery waiting for (re)delivery, as stored in the `Deliveries` tree.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Delivery {
    /// Key in the tree.
    pub seq: u64,
    /// `whd_<uuid v7>`; the `X-Toolgate-Delivery` header and the payload's `delivery_id`.
    pub delivery_id: String,
    /// Tenant whose webhook receives it.
    pub tenant_id: String,
    /// `hold.created`, `hold.resolved`, …
    pub event_type: String,
    /// The exact JSON body sent on every attempt.
    pub body: String,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// Failed attempts so far.
    pub attempts: u32,
    /// Unix millis of the next attempt.
    pub next_attempt_ms: i64,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
}

/// What one attempt gave.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Outcome {
    /// True for a 2xx answer.
    pub delivered: bool,
    /// The receiver's status, or `None` when no answer arrived.
    pub status_code: Option<u16>,
    /// Time from sending to the answer's headers (or the failure), milliseconds.
    pub latency_ms: f64,
    /// Why it failed (`HTTP 500`, a connection error, a timeout); `None` when delivered.
    pub error: Option<String>,
}

/// Webhook settings, the delivery queue and its HTTP client. One per process (`Core::webhooks`).
pub struct Webhooks {
    store: Store,
    settings: Tree,
    deliveries: Tree,
    http: reqwest::Client,
    next_seq: AtomicU64,
    queue_tx: mpsc::UnboundedSender<(i64, u64)>,
    queue_rx: Mutex<Option<mpsc::UnboundedReceiver<(i64, u64)>>>,
    delivered: AtomicU64,
    dropped: AtomicU64,
}

/// The JSON body of a delivery: `{"type", "delivery_id", "tenant_id", "created_at", "data"}`.
pub fn envelope(
    event_type: &str,
    delivery_id: &str,
    tenant_id: &str,
    created_at: DateTime<Utc>,
    data: Value,
) -> String {
    json!({
        "type": event_type,
        "delivery_id": delivery_id,
        "tenant_id": tenant_id,
        "created_at": ids::rfc3339(created_at),
        "data": data,
    })
    .to_string()
}

/// Checks a webhook URL: absolute http or https with a host, at most [`MAX_URL_BYTES`].
///
/// Errors: the 422 text naming `url`.
pub fn validate_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_URL_BYTES {
        return Err(format!("url is longer than {MAX_URL_BYTES} bytes"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("url is not a valid URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("url must be an http or https URL".into());
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("url must name a host".into());
    }
    Ok(())
}

fn unix_ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

impl Webhooks {
    /// Opens the settings and delivery trees and builds the HTTP client (system roots plus
    /// `upstream_ca`, no redirects, [`DELIVERY_TIMEOUT`]).
    ///
    /// Errors: the TLS trust store or the client could not be built (text names the cause).
    pub fn new(store: &Store, upstream_ca: Option<&std::path::Path>) -> Result<Webhooks, String> {
        let tls = crate::tls::upstream_client_config(upstream_ca).map_err(|e| e.to_string())?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(DELIVERY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("toolgate-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())?;
        let deliveries = store.tree(TreeName::Deliveries);
        let last = deliveries
            .last::<Value>()
            .map_err(|e| e.to_string())?
            .and_then(|(k, _)| <[u8; 8]>::try_from(k.as_slice()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0);
        let (queue_tx, queue_rx) = mpsc::unbounded_channel();
        Ok(Webhooks {
            store: store.clone(),
            settings: store.tree(TreeName::Settings),
            deliveries,
            http,
            next_seq: AtomicU64::new(last + 1),
            queue_tx,
            queue_rx: Mutex::new(Some(queue_rx)),
            delivered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    /// The tenant's webhook, if configured.
    ///
    /// Errors: storage failures.
    pub fn settings(&self, tenant_id: &str) -> Result<Option<WebhookSettings>, StoreError> {
        self.settings.get(&pair_key(tenant_id, "webhook"))
    }

    /// Sets the tenant's webhook URL with a fresh secret (replacing any previous one) and
    /// flushes. The URL must have passed [`validate_url`].
    ///
    /// Errors: storage failures.
    pub async fn configure(
        &self,
        tenant_id: &str,
        url: &str,
        now: DateTime<Utc>,
    ) -> Result<WebhookSettings, StoreError> {
        let settings = WebhookSettings {
            url: url.to_string(),
            secret: ids::secret_token("whsec", 32),
            configured_at: now,
        };
        self.settings
            .put(&pair_key(tenant_id, "webhook"), &settings)?;
        self.store.flush().await?;
        Ok(settings)
    }

    /// Removes the tenant's webhook and flushes; the removed settings, if any. Deliveries still
    /// queued for it are dropped at their next attempt.
    ///
    /// Errors: storage failures.
    pub async fn remove(&self, tenant_id: &str) -> Result<Option<WebhookSettings>, StoreError> {
        let key = pair_key(tenant_id, "webhook");
        let current = self.settings.get::<WebhookSettings>(&key)?;
        if current.is_some() {
            self.settings.remove(&key)?;
            self.store.flush().await?;
        }
        Ok(current)
    }

    /// Queues `payload` for the tenant's webhook as event `event_type` (`hold.created`,
    /// `hold.resolved`, …): the body is [`envelope`] with `payload` as `data`. Does nothing
    /// (returns `None`) when the tenant has no webhook. Returns the delivery id.
    ///
    /// The delivery is written to the `Deliveries` tree before this returns and flushed before
    /// its first attempt. A storage failure is logged and counted as a drop.
    pub fn enqueue(&self, tenant_id: &str, event_type: &str, payload: Value) -> Option<String> {
        match self.settings(tenant_id) {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => {
                tracing::error!(error = %e, tenant_id, event_type, "webhook delivery not queued");
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        let now = ids::now();
        let delivery_id = ids::new_id("whd");
        let delivery = Delivery {
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
            body: envelope(event_type, &delivery_id, tenant_id, now, payload),
            delivery_id,
            tenant_id: tenant_id.to_string(),
            event_type: event_type.to_string(),
            created_at: now,
            attempts: 0,
            next_attempt_ms: unix_ms(now),
            last_error: None,
        };
        if let Err(e) = self.deliveries.put(&seq_key(delivery.seq), &delivery) {
            tracing::error!(error = %e, tenant_id, event_type, "webhook delivery not queued");
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // The dispatcher may have stopped (shutdown): the stored delivery resumes at restart.
        let _ = self.queue_tx.send((delivery.next_attempt_ms, delivery.seq));
        Some(delivery.delivery_id)
    }

    /// POSTs `body` once to `settings.url` with the signature, event and delivery headers.
    pub async fn send(
        &self,
        settings: &WebhookSettings,
        delivery_id: &str,
        event_type: &str,
        body: &str,
    ) -> Outcome {
        let t = ids::now().timestamp();
        let started = Instant::now();
        let sent = self
            .http
            .post(&settings.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                sign::SIGNATURE_HEADER,
                sign::header_value(&settings.secret, t, body.as_bytes()),
            )
            .header(sign::EVENT_HEADER, event_type)
            .header(sign::DELIVERY_HEADER, delivery_id)
            .body(body.to_string())
            .send()
            .await;
        let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        match sent {
            Ok(resp) => {
                let status = resp.status();
                Outcome {
                    delivered: status.is_success(),
                    status_code: Some(status.as_u16()),
                    latency_ms,
                    error: (!status.is_success()).then(|| format!("HTTP {}", status.as_u16())),
                }
            }
            Err(e) => Outcome {
                delivered: false,
                status_code: None,
                latency_ms,
                // Without the URL: it may carry a token of the receiver.
                error: Some(e.without_url().to_string()),
            },
        }
    }

    /// Sends a `webhook.test` delivery once, now, without queueing or retrying. `None` when the
    /// tenant has no webhook. Returns the delivery id and the outcome.
    ///
    /// Errors: storage failures.
    pub async fn test(&self, tenant_id: &str) -> Result<Option<(String, Outcome)>, StoreError> {
        let Some(settings) = self.settings(tenant_id)? else {
            return Ok(None);
        };
        let delivery_id = ids::new_id("whd");
        let data = json!({
            "message": "toolgate webhook test: this endpoint receives approval callbacks",
            "url": settings.url,
        });
        let body = envelope("webhook.test", &delivery_id, tenant_id, ids::now(), data);
        let outcome = self
            .send(&settings, &delivery_id, "webhook.test", &body)
            .await;
        Ok(Some((delivery_id, outcome)))
    }

    /// Deliveries answered 2xx since start.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Deliveries dropped since start (attempts exhausted, webhook removed, storage failures).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Deliveries stored and not yet delivered or dropped.
    pub fn pending(&self) -> usize {
        self.deliveries.len()
    }
}

/// Delay after `failures` failed attempts (≥ 1): [`INITIAL_BACKOFF`] doubled `failures - 1`
/// times, times a random factor in [0.8, 1.2), at most [`MAX_BACKOFF`].
pub fn backoff(failures: u32) -> Duration {
    use rand::Rng;
    let doublings = failures.saturating_sub(1).min(20);
    let base = INITIAL_BACKOFF.saturating_mul(1u32 << doublings);
    let jitter = rand::thread_rng().gen_range(0.8..1.2);
    base.mul_f64(jitter).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests;
