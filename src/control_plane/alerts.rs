//! `GET /<tenant_id>/service/alerts` (SPEC.md, "Control-plane calls"): alerts computed on every
//! read from stored data (nothing is stored, so an alert disappears once its cause does).
//! Shapes: docs/control-plane.md. Admin bearer or an organization key with `read`.
//!
//! `{"alerts": [{alert_id, kind, severity, subject, message, detected_at, details}]}`, most
//! severe first, then newest `detected_at`. `alert_id` is stable across reads: the first 16 hex
//! of SHA-256 over kind, subject and the start of the alert's window.
//!
//! | kind | cause | severity |
//! |---|---|---|
//! | `block_burst` | ≥ [`BLOCK_BURST_THRESHOLD`] TOOL_CALL_BLOCK events of one agent within [`BLOCK_BURST_WINDOW_MINUTES`] minutes, in the last [`LOOKBACK_HOURS`] hours | high |
//! | `key_expiring` | a key (not revoked) expires within [`KEY_EXPIRY_ALERT_DAYS`] days | high within [`KEY_EXPIRY_URGENT_DAYS`] days, else medium |
//! | `key_rotation_due` | a key (not revoked) reports `rotation_required` and is not `key_expiring`: with the shipped constants, an expired key still in place | high |
//! | `endpoint_stale` | an endpoint silent for `stale_after_seconds` | medium |
//! | `hold_timeout` | a hold that timed out with no approver, in the last [`LOOKBACK_HOURS`] hours | medium |
//! | `replay_storm` | ≥ [`REPLAY_STORM_THRESHOLD`] replayed or duplicate events dropped within [`REPLAY_STORM_WINDOW_MINUTES`] minutes, in the last 24 hours; kept in memory only, so a restart forgets them | high |
//!
//! Bursts and storms are cut greedily: a window opens at the first event not yet in a burst and
//! spans the following window length; it is an alert when it holds the threshold. The ledger is
//! read backwards from its end, at most [`super::feed::SCAN_LIMIT`] entries.

use super::endpoints::EndpointRecord;
use super::feed::{event_time, ledger_back};
use crate::api::ApiError;
use crate::auth::{KeyInfo, Operator, Permission};
use crate::ids;
use crate::state::{AppState, Core};
use axum::extract::{Path, State};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// TOOL_CALL_BLOCK events of one agent that make a `block_burst`.
pub const BLOCK_BURST_THRESHOLD: u64 = 5;
/// Width of a `block_burst` window, minutes.
pub const BLOCK_BURST_WINDOW_MINUTES: i64 = 10;
/// How far back `block_burst` and `hold_timeout` look, hours.
pub const LOOKBACK_HOURS: i64 = 24;
/// A key expiring within this many days is `key_expiring`.
pub const KEY_EXPIRY_ALERT_DAYS: i64 = 14;
/// A key expiring within this many days is a `high` `key_expiring`.
pub const KEY_EXPIRY_URGENT_DAYS: i64 = 3;
/// Dropped replays of one tenant that make a `replay_storm`.
pub const REPLAY_STORM_THRESHOLD: u64 = 50;
/// Width of a `replay_storm` window, minutes.
pub const REPLAY_STORM_WINDOW_MINUTES: i64 = 5;

/// How bad an alert is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth a look.
    Low,
    /// Needs attention.
    Medium,
    /// Needs attention now.
    High,
    /// Reserved for the worst cases.
    Critical,
}

/// One alert.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Alert {
    /// `alr_` + 16 hex: stable for the same kind, subject and window.
    pub alert_id: String,
    /// See the module table.
    pub kind: &'static str,
    /// low | medium | high | critical.
    pub severity: Severity,
    /// What it is about: agent_id, key_id, endpoint_id, hold token or tenant_id.
    pub subject: String,
    /// One sentence.
    pub message: String,
    /// RFC 3339: when the condition was met.
    pub detected_at: String,
    /// Kind-specific facts (docs/control-plane.md).
    pub details: Value,
    #[serde(skip)]
    detected: DateTime<Utc>,
}

impl Alert {
    fn new(
        kind: &'static str,
        severity: Severity,
        subject: &str,
        window_start: DateTime<Utc>,
        detected: DateTime<Utc>,
        message: String,
        details: Value,
    ) -> Alert {
        let id_text = format!("{kind}\u{1f}{subject}\u{1f}{}", ids::rfc3339(window_start));
        Alert {
            alert_id: format!("alr_{}", &ids::sha256_hex(id_text.as_bytes())[..16]),
            kind,
            severity,
            subject: subject.to_string(),
            message,
            detected_at: ids::rfc3339(detected),
            details,
            detected,
        }
    }
}

/// A cut window: events `[first, last]`, the one that reached the threshold, and the total.
#[derive(Debug, Clone, PartialEq)]
pub struct Burst {
    /// Index of the first point.
    pub first: usize,
    /// Index of the last point.
    pub last: usize,
    /// Index of the point at which the running total reached the threshold.
    pub crossed: usize,
    /// Sum of the counts.
    pub total: u64,
}

/// Greedy windows over time-sorted `(unix millis, count)` points: from the first point not yet
/// in a burst, take every point within `window_ms`; a burst when the counts reach `threshold`.
pub fn bursts(points: &[(i64, u64)], window_ms: i64, threshold: u64) -> Vec<Burst> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < points.len() {
        let mut total = 0u64;
        let mut crossed = None;
        let mut j = i;
        while j < points.len() && points[j].0 - points[i].0 <= window_ms {
            total = total.saturating_add(points[j].1);
            if crossed.is_none() && total >= threshold {
                crossed = Some(j);
            }
            j += 1;
        }
        match crossed {
            Some(crossed) => {
                out.push(Burst {
                    first: i,
                    last: j - 1,
                    crossed,
                    total,
                });
                i = j;
            }
            None => i += 1,
        }
    }
    out
}

fn at_ms(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// `block_burst` alerts from the ledger.
fn block_bursts(core: &Core, tenant_id: &str, now: DateTime<Utc>) -> Result<Vec<Alert>, ApiError> {
    let since = now - Duration::hours(LOOKBACK_HOURS);
    // agent_id → (time, tool) of its blocks.
    let mut blocks: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    ledger_back(core, since, |e| {
        if e.tenant_id != tenant_id || e.kind != "TOOL_CALL_BLOCK" {
            return;
        }
        let Some(at) = event_time(e).filter(|t| *t >= since) else {
            return;
        };
        let field = |k: &str| e.record.get(k).and_then(Value::as_str).map(String::from);
        let agent = field("agent_id").unwrap_or_else(|| "unknown".into());
        let tool = field("tool_name").unwrap_or_default();
        blocks
            .entry(agent)
            .or_default()
            .push((at.timestamp_millis(), tool));
    })?;
    let mut out = Vec::new();
    for (agent, mut events) in blocks {
        events.sort();
        let points: Vec<(i64, u64)> = events.iter().map(|(t, _)| (*t, 1)).collect();
        let window = BLOCK_BURST_WINDOW_MINUTES * 60_000;
        for b in bursts(&points, window, BLOCK_BURST_THRESHOLD) {
            let tools: BTreeSet<&str> = events[b.first..=b.last]
                .iter()
                .map(|(_, t)| t.as_str())
                .filter(|t| !t.is_empty())
                .collect();
            let (first, last) = (at_ms(points[b.first].0), at_ms(points[b.last].0));
            out.push(Alert::new(
                "block_burst",
                Severity::High,
                &agent,
                first,
                at_ms(points[b.crossed].0),
                format!(
                    "agent `{agent}` was blocked {} times within {BLOCK_BURST_WINDOW_MINUTES} minutes",
                    b.total
                ),
                json!({
                    "agent_id": agent,
                    "blocks": b.total,
                    "window_minutes": BLOCK_BURST_WINDOW_MINUTES,
                    "first_at": ids::rfc3339(first),
                    "last_at": ids::rfc3339(last),
                    "tools": tools.into_iter().take(20).collect::<Vec<_>>(),
                }),
            ));
        }
    }
    Ok(out)
}

/// `key_expiring` and `key_rotation_due` alerts.
fn key_alerts(keys: &[KeyInfo], now: DateTime<Utc>) -> Vec<Alert> {
    let mut out = Vec::new();
    for k in keys.iter().filter(|k| !k.revoked) {
        let Ok(expires) = ids::parse_rfc3339(&k.expires_at) else {
            continue;
        };
        let created = ids::parse_rfc3339(&k.created_at).unwrap_or(expires);
        let left = expires - now;
        let details = json!({
            "key_id": k.key_id,
            "name": k.name,
            "scope_level": k.scope_level,
            "expires_at": k.expires_at,
            "expired": k.expired,
            "days_left": (left.num_seconds() as f64 / 86_400.0 * 10.0).round() / 10.0,
        });
        if !k.expired && left <= Duration::days(KEY_EXPIRY_ALERT_DAYS) {
            let severity = if left <= Duration::days(KEY_EXPIRY_URGENT_DAYS) {
                Severity::High
            } else {
                Severity::Medium
            };
            let entered = (expires - Duration::days(KEY_EXPIRY_ALERT_DAYS)).max(created);
            out.push(Alert::new(
                "key_expiring",
                severity,
                &k.key_id,
                entered,
                entered,
                format!(
                    "API key `{}` expires on {}; create a replacement and revoke it",
                    k.key_id, k.expires_at
                ),
                details,
            ));
        } else if k.rotation_required {
            let since = if k.expired {
                expires
            } else {
                let warn = Duration::days(crate::auth::keys::ROTATION_WARNING_DAYS);
                (expires - warn).max(created)
            };
            out.push(Alert::new(
                "key_rotation_due",
                Severity::High,
                &k.key_id,
                since,
                since,
                format!(
                    "API key `{}` needs rotation{}; create a replacement and revoke it",
                    k.key_id,
                    if k.expired { " (it has expired)" } else { "" }
                ),
                details,
            ));
        }
    }
    out
}

/// `endpoint_stale` alerts.
fn stale_endpoints(eps: &[EndpointRecord], now: DateTime<Utc>, stale_after: u64) -> Vec<Alert> {
    eps.iter()
        .filter(|e| e.is_stale(now, stale_after))
        .map(|e| {
            let seen = e.last_seen();
            let secs = i64::try_from(stale_after).unwrap_or(i64::MAX / 2_000);
            Alert::new(
                "endpoint_stale",
                Severity::Medium,
                &e.endpoint_id,
                seen,
                seen + Duration::seconds(secs),
                format!(
                    "endpoint `{}` has not checked in for {} seconds",
                    e.endpoint_id,
                    e.seconds_silent(now)
                ),
                json!({
                    "endpoint_id": e.endpoint_id,
                    "hostname": e.hostname,
                    "last_checkin_at": e.last_checkin_at.map(ids::rfc3339),
                    "seconds_since_checkin": e.seconds_silent(now),
                    "stale_after_seconds": stale_after,
                }),
            )
        })
        .collect()
}

/// `hold_timeout` alerts.
fn hold_timeouts(core: &Core, tenant_id: &str, now: DateTime<Utc>) -> Result<Vec<Alert>, ApiError> {
    let since = now - Duration::hours(LOOKBACK_HOURS);
    let mut out = Vec::new();
    for h in core.holds.recent_for(tenant_id, since)? {
        let Some(at) = h.resolved_at.filter(|t| *t >= since) else {
            continue;
        };
        if h.resolved_by.as_deref() != Some("timeout") {
            continue;
        }
        out.push(Alert::new(
            "hold_timeout",
            Severity::Medium,
            &h.call.token,
            at,
            at,
            format!(
                "a held `{}` call of agent `{}` timed out after {} seconds with no approver answering",
                h.call.tool_name, h.call.agent_id, h.call.step_up_timeout_seconds
            ),
            json!({
                "hold_token": h.call.token,
                "agent_id": h.call.agent_id,
                "tool_name": h.call.tool_name,
                "session_id": h.call.session_id,
                "created_at": ids::rfc3339(h.call.created_at),
                "resolved_at": ids::rfc3339(at),
                "step_up_timeout_seconds": h.call.step_up_timeout_seconds,
            }),
        ));
    }
    Ok(out)
}

/// `replay_storm` alerts from the ingestor's in-memory drop counts.
fn replay_storms(drops: &[(u64, u64)], tenant_id: &str) -> Vec<Alert> {
    let points: Vec<(i64, u64)> = drops
        .iter()
        .map(|(t, n)| (i64::try_from(*t).unwrap_or(i64::MAX), *n))
        .collect();
    let window = REPLAY_STORM_WINDOW_MINUTES * 60_000;
    bursts(&points, window, REPLAY_STORM_THRESHOLD)
        .into_iter()
        .map(|b| {
            let (first, last) = (at_ms(points[b.first].0), at_ms(points[b.last].0));
            Alert::new(
                "replay_storm",
                Severity::High,
                tenant_id,
                first,
                at_ms(points[b.crossed].0),
                format!(
                    "{} replayed or duplicate events were dropped within {REPLAY_STORM_WINDOW_MINUTES} minutes",
                    b.total
                ),
                json!({
                    "dropped": b.total,
                    "window_minutes": REPLAY_STORM_WINDOW_MINUTES,
                    "first_at": ids::rfc3339(first),
                    "last_at": ids::rfc3339(last),
                }),
            )
        })
        .collect()
}

/// Every alert of `tenant_id` at `now`, most severe first, then newest.
///
/// Errors: storage failures (500).
pub fn compute(core: &Core, tenant_id: &str, now: DateTime<Utc>) -> Result<Vec<Alert>, ApiError> {
    let mut alerts = block_bursts(core, tenant_id, now)?;
    alerts.extend(key_alerts(&core.keys.list(tenant_id, now), now));
    let eps = core.endpoints.list(tenant_id)?;
    alerts.extend(stale_endpoints(&eps, now, core.config.stale_after_seconds));
    alerts.extend(hold_timeouts(core, tenant_id, now)?);
    alerts.extend(replay_storms(
        &core.ingestor.replay_drops(tenant_id),
        tenant_id,
    ));
    alerts.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(b.detected.cmp(&a.detected))
            .then_with(|| a.alert_id.cmp(&b.alert_id))
    });
    Ok(alerts)
}

/// Handler of GET /alerts.
pub async fn list(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    let alerts = tokio::task::spawn_blocking(move || compute(&core, &tenant_id, ids::now()))
        .await
        .map_err(|e| ApiError::Internal(format!("alerts task failed: {e}")))??;
    Ok(Json(json!({ "alerts": alerts })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ScopeLevel;

    #[test]
    fn bursts_are_cut_greedily_and_need_the_threshold() {
        let ones = |ts: &[i64]| ts.iter().map(|t| (*t, 1)).collect::<Vec<_>>();
        // Four in the window: nothing.
        assert!(bursts(&ones(&[0, 1, 2, 3, 100]), 10, 5).is_empty());
        // Five within 10: one burst, crossing at the fifth.
        let b = bursts(&ones(&[0, 2, 4, 6, 8, 10, 11]), 10, 5);
        assert_eq!(
            b,
            vec![Burst {
                first: 0,
                last: 5,
                crossed: 4,
                total: 6
            }]
        );
        // Two separate bursts.
        let pts = ones(&[0, 1, 2, 3, 4, 50, 51, 52, 53, 54]);
        assert_eq!(bursts(&pts, 10, 5).len(), 2);
        // Weighted points (replay drop buckets).
        let b = bursts(&[(0, 30), (1_000, 30)], 300_000, 50);
        assert_eq!((b[0].crossed, b[0].total), (1, 60));
        assert!(bursts(&[(0, 30), (400_000, 30)], 300_000, 50).is_empty());
    }

    fn key(id: &str, expires_in: Duration, revoked: bool, now: DateTime<Utc>) -> KeyInfo {
        let expires = now + expires_in;
        KeyInfo {
            key_id: id.into(),
            tenant_id: "t".into(),
            name: None,
            scope_level: ScopeLevel::Organization,
            scope_target_id: None,
            permissions: vec![],
            created_at: ids::rfc3339(now - Duration::days(80)),
            expires_at: ids::rfc3339(expires),
            revoked,
            expired: expires <= now,
            rotation_required: expires - Duration::days(14) <= now,
        }
    }

    #[test]
    fn keys_alert_when_expiring_or_expired_unless_revoked() {
        let now = ids::now();
        let keys = vec![
            key("fresh", Duration::days(60), false, now),
            key("soon", Duration::days(10), false, now),
            key("urgent", Duration::days(1), false, now),
            key("expired", Duration::days(-2), false, now),
            key("revoked", Duration::days(1), true, now),
        ];
        let alerts = key_alerts(&keys, now);
        let got: Vec<(&str, &str, Severity)> = alerts
            .iter()
            .map(|a| (a.kind, a.subject.as_str(), a.severity))
            .collect();
        assert_eq!(
            got,
            vec![
                ("key_expiring", "soon", Severity::Medium),
                ("key_expiring", "urgent", Severity::High),
                ("key_rotation_due", "expired", Severity::High),
            ]
        );
        let again = key_alerts(&keys, now + Duration::seconds(30));
        assert_eq!(alerts[0].alert_id, again[0].alert_id, "ids are stable");
    }
}
