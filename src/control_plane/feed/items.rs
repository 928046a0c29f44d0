//! Turning ledger events, receipts and holds into feed items, and collecting a window.

use super::*;
/// Adds the tenant's item (if any) for ledger entry `entry`, and its token usage to `spend`.
pub(super) fn ledger_item(
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
pub(super) fn receipt_item(r: &ReceiptEntry, since: DateTime<Utc>) -> Option<Item> {
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
pub(super) fn hold_items(h: &HoldRecord, since: DateTime<Utc>, items: &mut Vec<Item>) {
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
pub(super) fn collect(
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
