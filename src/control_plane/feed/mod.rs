//! `GET /<tenant_id>/service/governance/feed` (SPEC.md, "Control-plane calls"): what happened
//! in a tenant recently, newest first, paged, with token spend per provider and model.
//! Shapes: docs/control-plane.md.
//!
//! Query: `limit` (1..=500, default 50), `cursor` (the previous page's `next_cursor`),
//! `since_hours` (1..=168, default 24). Answer: `{"items": [...], "next_cursor": string|null,
//! "token_spend": [...]}`. Admin bearer or an organization key with `read`.
//!
//! Items, each `{id, at, type, ...}`, from three sources (all filtered to the tenant):
//! * decision receipts → `decision` (ALLOW, STEP_UP) or `violation` (BLOCK, `source:
//!   "decision"`);
//! * ledger events → `violation` (TOOL_CALL_BLOCK, `source: "event"`), `tool_call`
//!   (TOOL_CALL_PRE), `llm_invocation` (LLM_INVOCATION); TOOL_CALL_POST is not listed;
//! * holds → `hold_created`, `hold_resolved`.
//!
//! Order: `at` descending, then `id` descending. The cursor is opaque (base64url of the last
//! item's `at` in unix millis and its `id`); the next page holds the items strictly after it in
//! that order, so items that arrive meanwhile (newer) never shift a page. `token_spend` covers
//! the whole window, whatever the page. The ledger and the receipts are read backwards from
//! their ends, at most [`SCAN_LIMIT`] entries each.

mod items;
mod sources;
#[cfg(test)]
mod tests;

use items::*;
use sources::*;
pub use sources::{event_time, ledger_back, usage_of};

use crate::api::ApiError;
use crate::auth::{Operator, Permission};
use crate::holds::HoldRecord;
use crate::ids;
use crate::ledger::{LedgerEntry, LedgerError, ReceiptEntry, ReceiptKind};
use crate::state::{AppState, Core};
use crate::vocab::Decision;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Most ledger entries (and, separately, receipts) one feed or alerts request reads.
pub const SCAN_LIMIT: u64 = 100_000;
/// Entries read per storage call while scanning backwards.
const SCAN_CHUNK: u64 = 1_000;
/// Default and largest page size.
pub const DEFAULT_LIMIT: usize = 50;
/// Largest page size.
pub const MAX_LIMIT: usize = 500;
/// Default look-back, hours.
pub const DEFAULT_SINCE_HOURS: i64 = 24;
/// Longest look-back, hours (7 days).
pub const MAX_SINCE_HOURS: i64 = 168;

/// Query of the feed. Numbers are taken as text so that a bad value is a 422 naming the field.
#[derive(Debug, Default, Deserialize)]
pub struct FeedQuery {
    /// Page size, 1..=500.
    pub limit: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Look-back in hours, 1..=168.
    pub since_hours: Option<String>,
}

/// One line of `token_spend`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TokenSpend {
    /// `provider` of the LLM_INVOCATION metadata (`unknown` when absent).
    pub provider: String,
    /// `model`, else `model_name` (`unknown` when absent).
    pub model: String,
    /// LLM_INVOCATION events.
    pub calls: u64,
    /// Sum of `input_tokens` (else `prompt_tokens`).
    pub input_tokens: u64,
    /// Sum of `output_tokens` (else `completion_tokens`).
    pub output_tokens: u64,
    /// Sum of `total_tokens` (else input + output).
    pub total_tokens: u64,
}

/// A feed item and its sort key.
struct Item {
    at_ms: i64,
    id: String,
    value: Value,
}

impl Item {
    fn new(at: DateTime<Utc>, id: String, kind: &str, mut fields: Map<String, Value>) -> Item {
        fields.insert("id".into(), id.clone().into());
        fields.insert("at".into(), ids::rfc3339(at).into());
        fields.insert("type".into(), kind.into());
        Item {
            at_ms: at.timestamp_millis(),
            id,
            value: Value::Object(fields),
        }
    }

    fn key(&self) -> (i64, &str) {
        (self.at_ms, &self.id)
    }
}

fn encode_cursor(item: &Item) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}|{}", item.at_ms, item.id))
}

fn decode_cursor(cursor: &str) -> Result<(i64, String), ApiError> {
    let bad = || ApiError::Unprocessable("cursor: not a cursor of this feed".into());
    let bytes = URL_SAFE_NO_PAD.decode(cursor.trim()).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (at, id) = text.split_once('|').ok_or_else(bad)?;
    Ok((at.parse().map_err(|_| bad())?, id.to_string()))
}

fn number(field: &str, value: Option<&str>, default: i64, max: i64) -> Result<i64, ApiError> {
    let Some(v) = value else { return Ok(default) };
    match v.trim().parse::<i64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::Unprocessable(format!(
            "{field} must be an integer from 1 to {max}"
        ))),
    }
}

/// The validated query.
struct Page {
    limit: usize,
    /// `(at unix millis, id)` of the last item of the previous page.
    cursor: Option<(i64, String)>,
    since: DateTime<Utc>,
}

fn parse_query(
    q: Result<Query<FeedQuery>, QueryRejection>,
    now: DateTime<Utc>,
) -> Result<Page, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::Unprocessable(format!("query: {}", e.body_text())))?;
    let limit = number(
        "limit",
        q.limit.as_deref(),
        DEFAULT_LIMIT as i64,
        MAX_LIMIT as i64,
    )?;
    let hours = number(
        "since_hours",
        q.since_hours.as_deref(),
        DEFAULT_SINCE_HOURS,
        MAX_SINCE_HOURS,
    )?;
    let cursor = q.cursor.as_deref().map(decode_cursor).transpose()?;
    Ok(Page {
        limit: limit as usize,
        cursor,
        since: now - Duration::hours(hours),
    })
}

/// Handler of GET /governance/feed.
pub async fn feed(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    q: Result<Query<FeedQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    let Page {
        limit,
        cursor,
        since,
    } = parse_query(q, ids::now())?;
    let (items, spend) = tokio::task::spawn_blocking(move || collect(&core, &tenant_id, since))
        .await
        .map_err(|e| ApiError::Internal(format!("feed task failed: {e}")))??;
    let after = |item: &Item| match &cursor {
        Some((at, id)) => item.key() < (*at, id.as_str()),
        None => true,
    };
    let mut page: Vec<&Item> = items.iter().filter(|i| after(i)).take(limit + 1).collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let next_cursor = if more {
        page.last().map(|i| encode_cursor(i))
    } else {
        None
    };
    let values: Vec<&Value> = page.iter().map(|i| &i.value).collect();
    Ok(Json(json!({
        "items": values,
        "next_cursor": next_cursor,
        "token_spend": spend,
    })))
}
