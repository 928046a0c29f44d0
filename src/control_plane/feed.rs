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

/// Visits stored entries from `head` backwards (newest first) until the chunk that reaches
/// before `since` has been visited, or [`SCAN_LIMIT`] entries. `read(from, n)` returns up to `n`
/// entries with seq ≥ `from`; entries above the chunk (holes in the sequence) are skipped.
fn scan_back<T>(
    head: u64,
    since: DateTime<Utc>,
    read: impl Fn(u64, usize) -> Result<Vec<T>, LedgerError>,
    seq_and_time: impl Fn(&T) -> (u64, Option<DateTime<Utc>>),
    mut visit: impl FnMut(&T),
) -> Result<(), LedgerError> {
    let floor = head.saturating_sub(SCAN_LIMIT).max(1);
    let mut end = head;
    while end >= floor && end > 0 {
        let start = end.saturating_sub(SCAN_CHUNK - 1).max(floor);
        let rows = read(
            start,
            usize::try_from(end - start + 1).unwrap_or(usize::MAX),
        )?;
        let mut reached_past = false;
        for row in rows.iter().rev() {
            let (seq, at) = seq_and_time(row);
            if seq > end {
                continue;
            }
            reached_past |= at.is_some_and(|t| t < since);
            visit(row);
        }
        if reached_past || start == floor {
            break;
        }
        end = start - 1;
    }
    Ok(())
}

/// Ledger entries recorded at or after `since` (plus some just before), newest first, at most
/// [`SCAN_LIMIT`].
///
/// Errors: storage failures.
pub fn ledger_back(
    core: &Core,
    since: DateTime<Utc>,
    visit: impl FnMut(&LedgerEntry),
) -> Result<(), LedgerError> {
    scan_back(
        core.ledger.len(),
        since,
        |from, n| core.ledger.read_from(from, n),
        |e| (e.seq, ids::parse_rfc3339(&e.recorded_at).ok()),
        visit,
    )
}

fn receipts_back(
    core: &Core,
    since: DateTime<Utc>,
    visit: impl FnMut(&ReceiptEntry),
) -> Result<(), LedgerError> {
    scan_back(
        core.receipts.len(),
        since,
        |from, n| core.receipts.read_from(from, n),
        |r| (r.seq, ids::parse_rfc3339(&r.issued_at).ok()),
        visit,
    )
}

/// When an ingested event happened: its `occurred_at` (RFC 3339, or without offset as UTC),
/// never later than when it was recorded; `recorded_at` when `occurred_at` does not parse.
pub fn event_time(entry: &LedgerEntry) -> Option<DateTime<Utc>> {
    let recorded = ids::parse_rfc3339(&entry.recorded_at).ok()?;
    let occurred = entry
        .record
        .get("occurred_at")
        .and_then(Value::as_str)
        .and_then(|s| {
            ids::parse_rfc3339(s).ok().or_else(|| {
                chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                    .ok()
                    .map(|n| n.and_utc())
            })
        });
    Some(occurred.map_or(recorded, |o| o.min(recorded)))
}

/// A non-negative count from metadata: an integer, a float, or a decimal string.
fn count(meta: &Map<String, Value>, key: &str) -> Option<u64> {
    match meta.get(key)? {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f.round() as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The token usage of an LLM_INVOCATION's (snake_case) metadata.
pub fn usage_of(meta: &Map<String, Value>) -> TokenSpend {
    let text = |k: &str| {
        meta.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let input = count(meta, "input_tokens").or_else(|| count(meta, "prompt_tokens"));
    let output = count(meta, "output_tokens").or_else(|| count(meta, "completion_tokens"));
    let total = count(meta, "total_tokens")
        .unwrap_or_else(|| input.unwrap_or(0).saturating_add(output.unwrap_or(0)));
    TokenSpend {
        provider: text("provider").unwrap_or("unknown").to_string(),
        model: text("model")
            .or_else(|| text("model_name"))
            .unwrap_or("unknown")
            .to_string(),
        calls: 1,
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        total_tokens: total,
    }
}

/// The common fields of an event item.
fn event_fields(entry: &LedgerEntry) -> Map<String, Value> {
    let mut m = Map::new();
    for k in [
        "event_id",
        "agent_id",
        "tool_name",
        "session_id",
        "user_id",
        "occurred_at",
    ] {
        m.insert(
            k.into(),
            entry.record.get(k).cloned().unwrap_or(Value::Null),
        );
    }
    m.insert("ledger_seq".into(), entry.seq.into());
    m.insert("recorded_at".into(), entry.recorded_at.clone().into());
    m
}

/// Adds the tenant's item (if any) for ledger entry `entry`, and its token usage to `spend`.
fn ledger_item(
    entry: &LedgerEntry,
    since: DateTime<Utc>,
    items: &mut Vec<Item>,
    spend: &mut BTreeMap<(String, String), TokenSpend>,
) {
    let Some(at) = event_time(entry).filter(|t| *t >= since) else {
        return;
    };
    let empty = Map::new();
    let meta = entry
        .record
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut fields = event_fields(entry);
    let kind = match entry.kind.as_str() {
        "TOOL_CALL_BLOCK" => {
            fields.insert("source".into(), "event".into());
            for k in ["decision_reason_code", "reason", "violation_id"] {
                fields.insert(k.into(), meta.get(k).cloned().unwrap_or(Value::Null));
            }
            fields.insert("metadata".into(), Value::Object(meta.clone()));
            "violation"
        }
        "TOOL_CALL_PRE" => {
            fields.insert("metadata".into(), Value::Object(meta.clone()));
            "tool_call"
        }
        "LLM_INVOCATION" => {
            let u = usage_of(meta);
            fields.insert("provider".into(), u.provider.clone().into());
            fields.insert("model".into(), u.model.clone().into());
            fields.insert("input_tokens".into(), u.input_tokens.into());
            fields.insert("output_tokens".into(), u.output_tokens.into());
            fields.insert("total_tokens".into(), u.total_tokens.into());
            let line = spend
                .entry((u.provider.clone(), u.model.clone()))
                .or_default();
            line.provider = u.provider;
            line.model = u.model;
            line.calls += 1;
            line.input_tokens = line.input_tokens.saturating_add(u.input_tokens);
            line.output_tokens = line.output_tokens.saturating_add(u.output_tokens);
            line.total_tokens = line.total_tokens.saturating_add(u.total_tokens);
            "llm_invocation"
        }
        _ => return,
    };
    items.push(Item::new(at, format!("ledger:{}", entry.seq), kind, fields));
}

/// The item of a decision receipt (`decision`, or `violation` for BLOCK).
fn receipt_item(r: &ReceiptEntry, since: DateTime<Utc>) -> Option<Item> {
    if r.body.kind != ReceiptKind::Decision {
        return None;
    }
    let at = ids::parse_rfc3339(&r.issued_at)
        .ok()
        .filter(|t| *t >= since)?;
    let b = &r.body;
    let mut f = Map::new();
    f.insert("source".into(), "decision".into());
    f.insert("decision".into(), b.decision.as_str().into());
    f.insert(
        "authorization_decision".into(),
        b.authorization_decision.as_str().into(),
    );
    f.insert(
        "decision_reason_code".into(),
        b.decision_reason_code.as_str().into(),
    );
    f.insert("subject_id".into(), b.subject_id.clone().into());
    f.insert("policy_version".into(), b.policy_version.clone().into());
    f.insert("receipt_id".into(), r.receipt_id.clone().into());
    f.insert("receipt_seq".into(), r.seq.into());
    let kind = if b.decision == Decision::Block {
        f.insert("violation_id".into(), b.subject_id.clone().into());
        "violation"
    } else {
        "decision"
    };
    Some(Item::new(at, format!("receipt:{}", r.receipt_id), kind, f))
}

/// The `hold_created` and `hold_resolved` items of a hold, within the window.
fn hold_items(h: &HoldRecord, since: DateTime<Utc>, items: &mut Vec<Item>) {
    let base = |f: &mut Map<String, Value>| {
        f.insert("hold_token".into(), h.call.token.clone().into());
        f.insert("agent_id".into(), h.call.agent_id.clone().into());
        f.insert("tool_name".into(), h.call.tool_name.clone().into());
        f.insert("session_id".into(), h.call.session_id.clone().into());
    };
    if h.call.created_at >= since {
        let mut f = Map::new();
        base(&mut f);
        f.insert("user_id".into(), h.call.user_id.clone().into());
        f.insert("risk_score".into(), json!(h.call.risk_score));
        f.insert("reason".into(), h.call.decision_reason.clone().into());
        f.insert(
            "decision_reason_code".into(),
            h.call.decision_reason_code.as_str().into(),
        );
        f.insert("expires_at".into(), ids::rfc3339(h.expires_at).into());
        f.insert(
            "step_up_timeout_seconds".into(),
            h.call.step_up_timeout_seconds.into(),
        );
        let id = format!("hold_created:{}", h.initial_receipt.entry.receipt_id);
        items.push(Item::new(h.call.created_at, id, "hold_created", f));
    }
    if let Some(at) = h.resolved_at.filter(|t| *t >= since) {
        let mut f = Map::new();
        base(&mut f);
        f.insert("resolution".into(), json!(h.resolution));
        f.insert("resolved_by".into(), json!(h.resolved_by));
        f.insert("reason".into(), json!(h.reason));
        let terminal = h.terminal_receipt.as_ref();
        let rid = terminal.map_or(h.call.token.as_str(), |r| r.entry.receipt_id.as_str());
        items.push(Item::new(
            at,
            format!("hold_resolved:{rid}"),
            "hold_resolved",
            f,
        ));
    }
}

/// Every item of the window, newest first, and the token spend, largest first.
fn collect(
    core: &Core,
    tenant_id: &str,
    since: DateTime<Utc>,
) -> Result<(Vec<Item>, Vec<TokenSpend>), ApiError> {
    let mut items = Vec::new();
    let mut spend = BTreeMap::new();
    ledger_back(core, since, |e| {
        if e.tenant_id == tenant_id {
            ledger_item(e, since, &mut items, &mut spend);
        }
    })?;
    receipts_back(core, since, |r| {
        if r.body.tenant_id == tenant_id {
            items.extend(receipt_item(r, since));
        }
    })?;
    for h in core.holds.recent_for(tenant_id, since)? {
        hold_items(&h, since, &mut items);
    }
    items.sort_by(|a, b| b.key().cmp(&a.key()));
    let mut spend: Vec<TokenSpend> = spend.into_values().collect();
    spend.sort_by(|a, b| {
        b.total_tokens
            .cmp(&a.total_tokens)
            .then_with(|| a.provider.cmp(&b.provider))
            .then_with(|| a.model.cmp(&b.model))
    });
    Ok((items, spend))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn usage_reads_the_proxy_and_the_sdk_spellings() {
        let proxy = usage_of(&meta(json!({"provider": "openai", "model": "gpt-4.1",
            "input_tokens": 10, "output_tokens": 5, "total_tokens": 15})));
        assert_eq!(
            (
                proxy.provider.as_str(),
                proxy.model.as_str(),
                proxy.total_tokens
            ),
            ("openai", "gpt-4.1", 15)
        );
        let sdk = usage_of(&meta(
            json!({"provider": "anthropic", "model_name": "claude",
            "prompt_tokens": "7", "completion_tokens": 3.0}),
        ));
        assert_eq!(
            (
                sdk.model.as_str(),
                sdk.input_tokens,
                sdk.output_tokens,
                sdk.total_tokens
            ),
            ("claude", 7, 3, 10)
        );
        let none = usage_of(&Map::new());
        assert_eq!(
            (
                none.provider.as_str(),
                none.model.as_str(),
                none.total_tokens
            ),
            ("unknown", "unknown", 0)
        );
        assert_eq!(usage_of(&meta(json!({"input_tokens": -4}))).input_tokens, 0);
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_422() {
        let item = Item::new(ids::now(), "ledger:42".into(), "tool_call", Map::new());
        let (at, id) = decode_cursor(&encode_cursor(&item)).unwrap();
        assert_eq!((at, id.as_str()), (item.at_ms, "ledger:42"));
        for bad in ["", "!!", "bm9waXBl", &URL_SAFE_NO_PAD.encode("x|y")] {
            assert!(
                matches!(decode_cursor(bad), Err(ApiError::Unprocessable(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn query_numbers_are_range_checked() {
        assert_eq!(number("limit", None, 50, 500).unwrap(), 50);
        assert_eq!(number("limit", Some("500"), 50, 500).unwrap(), 500);
        for bad in ["0", "501", "-1", "ten", "1.5"] {
            match number("limit", Some(bad), 50, 500) {
                Err(ApiError::Unprocessable(m)) => assert!(m.starts_with("limit"), "{m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn scanning_backwards_stops_after_the_window_and_skips_holes() {
        let now = ids::now();
        // Entry n is n minutes old for n in 1..=5000 (seq = 5001 - n).
        let at = |seq: u64| now - Duration::minutes(5001 - seq as i64);
        let read = |from: u64, n: usize| -> Result<Vec<u64>, LedgerError> {
            Ok((from..=5000).take(n).filter(|s| *s != 4990).collect())
        };
        let mut seen = Vec::new();
        let since = now - Duration::minutes(1500);
        scan_back(5000, since, read, |s| (*s, Some(at(*s))), |s| seen.push(*s)).unwrap();
        assert_eq!(seen.first(), Some(&5000));
        assert!(!seen.contains(&4990));
        assert!(
            seen.windows(2).all(|w| w[0] > w[1]),
            "newest first, no repeats"
        );
        assert!(
            seen.iter().any(|s| at(*s) < since),
            "the chunk that reaches past is read"
        );
        assert!(seen.len() < 3000, "and nothing older: {}", seen.len());
    }
}
