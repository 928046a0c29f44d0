//! Reading the sources backwards (ledger, receipts) and the token usage of ledger events.

use super::*;
/// Visits stored entries from `head` backwards (newest first) until the chunk that reaches
/// before `since` has been visited, or [`SCAN_LIMIT`] entries. `read(from, n)` returns up to `n`
/// entries with seq ≥ `from`; entries above the chunk (holes in the sequence) are skipped.
pub(super) fn scan_back<T>(
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

pub(super) fn receipts_back(
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
pub(super) fn count(meta: &Map<String, Value>, key: &str) -> Option<u64> {
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
pub(super) fn event_fields(entry: &LedgerEntry) -> Map<String, Value> {
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
