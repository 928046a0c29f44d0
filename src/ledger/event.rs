//! The behavioural event of SPEC.md ("Event (element of a batch)"): the typed model, validation
//! with the exact 400 reasons, metadata key normalization (camelCase → snake_case) and the
//! derived, retry-stable `event_id`.

use super::canon::CanonHasher;
use super::IngestError;
use crate::ids;
use crate::vocab::EnforcementMode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Generates a closed wire-string enum with `as_str`, `ALL` and a [`Closed`] impl.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $($(#[$vmeta])* #[serde(rename = $text)] $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The wire string.
            pub fn as_str(self) -> &'static str { match self { $($name::$variant => $text),+ } }
        }

        impl Closed for $name {
            const VALUES: &'static [Self] = $name::ALL;
            fn text(self) -> &'static str { self.as_str() }
        }
    };
}

wire_enum!(
    /// `source_type` of an event (SPEC.md, Event).
    SourceType {
        /// A tool call through an SDK; goes with the `TOOL_CALL_*` event types.
        AgentToolCall => "agent_tool_call",
        /// A model completion in an agent; goes with `LLM_INVOCATION`.
        AgentLlmInvocation => "agent_llm_invocation",
    }
);

wire_enum!(
    /// `event_type` of an event (SPEC.md, Event and "Events"); the ledger entry's `kind`.
    EventType {
        /// Sent before a tool runs, after the policy check passed.
        ToolCallPre => "TOOL_CALL_PRE",
        /// Sent after the tool returned.
        ToolCallPost => "TOOL_CALL_POST",
        /// Sent when enforcement refused the call.
        ToolCallBlock => "TOOL_CALL_BLOCK",
        /// A model completion.
        LlmInvocation => "LLM_INVOCATION",
    }
);

impl EventType {
    /// The only `source_type` this event type goes with.
    pub fn source_type(self) -> SourceType {
        match self {
            EventType::LlmInvocation => SourceType::AgentLlmInvocation,
            _ => SourceType::AgentToolCall,
        }
    }
}

/// One validated, normalized event as stored in the ledger (`record` of a ledger entry).
///
/// Unknown top-level fields of the submitted event are not stored. `occurred_at` keeps the
/// submitted text (validated as ISO 8601). `metadata` keys are snake_case (see
/// `normalize_metadata`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The submitted id, or the derived `evt_<32 hex>` (see [`Event::derived_id`]).
    pub event_id: String,
    /// Tenant; all events of a batch share it.
    pub tenant_id: String,
    /// Session correlation id.
    pub session_id: String,
    /// User who initiated the action.
    pub user_id: String,
    /// Agent, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Kind of source.
    pub source_type: SourceType,
    /// Kind of event.
    pub event_type: EventType,
    /// Tool, when applicable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Tool names intended for the session.
    pub approved_scope: Vec<String>,
    /// Tool names already called in the session, in order.
    pub session_tool_calls: Vec<String>,
    /// Enforcement mode of the session.
    pub enforcement_mode: EnforcementMode,
    /// JSON-serialized arguments (PRE) or result (POST).
    pub content: String,
    /// When it happened, ISO 8601 as submitted.
    pub occurred_at: String,
    /// Free key-value pairs with snake_case keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Event {
    /// Validates element `index` of a batch into an [`Event`] (deriving `event_id` when absent).
    ///
    /// Errors: [`IngestError::InvalidEvent`] with the first problem: `missing <field>`,
    /// `<field> must be a string` / `an array of strings` / `an object`, `<field> must be one
    /// of: …`, `occurred_at is not an ISO 8601 timestamp`, or a source/event type mismatch.
    pub fn from_json(index: usize, value: &Value) -> Result<Event, IngestError> {
        parse(value).map_err(|reason| IngestError::InvalidEvent { index, reason })
    }

    /// The derived id: `evt_` + the first 32 hex digits of SHA-256 over the canonical fields
    /// `toolgate/event-id/v1` and the canonical JSON of this event with `event_id` removed
    /// (every other stored field, metadata already normalized). Equal events give equal ids, so
    /// retries of id-less events are caught as replays.
    pub fn derived_id(&self) -> Result<String, serde_json::Error> {
        let mut value = serde_json::to_value(self)?;
        if let Value::Object(map) = &mut value {
            map.remove("event_id");
        }
        let mut h = CanonHasher::new("toolgate/event-id/v1");
        h.json(&value);
        let digest = h.finish();
        Ok(format!("evt_{}", hex::encode(&digest[..16])))
    }
}

/// The whole validation, in SPEC.md field order; returns the reason text of the first problem.
fn parse(value: &Value) -> Result<Event, String> {
    let obj = value.as_object().ok_or("event must be a JSON object")?;
    let mut event = Event {
        event_id: String::new(),
        tenant_id: id_string(obj, "tenant_id")?,
        session_id: string(obj, "session_id")?,
        user_id: string(obj, "user_id")?,
        source_type: one_of(obj, "source_type")?,
        event_type: one_of(obj, "event_type")?,
        approved_scope: string_list(obj, "approved_scope")?,
        session_tool_calls: string_list(obj, "session_tool_calls")?,
        enforcement_mode: one_of(obj, "enforcement_mode")?,
        content: string(obj, "content")?,
        occurred_at: timestamp(obj, "occurred_at")?,
        agent_id: optional_string(obj, "agent_id")?,
        tool_name: optional_string(obj, "tool_name")?,
        metadata: optional_object(obj, "metadata")?.map(normalize_metadata),
    };
    check_type_pairing(&event)?;
    event.event_id = match obj.get("event_id") {
        None | Some(Value::Null) => event.derived_id().map_err(|e| e.to_string())?,
        Some(_) => id_string(obj, "event_id")?,
    };
    Ok(event)
}

/// A required field; JSON `null` counts as missing.
fn required<'a>(obj: &'a Map<String, Value>, field: &str) -> Result<&'a Value, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Err(format!("missing {field}")),
        Some(v) => Ok(v),
    }
}

fn string(obj: &Map<String, Value>, field: &str) -> Result<String, String> {
    required(obj, field)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{field} must be a string"))
}

/// An identifier used in storage keys: a non-empty string without control characters.
fn id_string(obj: &Map<String, Value>, field: &str) -> Result<String, String> {
    let s = string(obj, field)?;
    if s.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(s)
}

fn string_list(obj: &Map<String, Value>, field: &str) -> Result<Vec<String>, String> {
    let err = || format!("{field} must be an array of strings");
    let items = required(obj, field)?.as_array().ok_or_else(err)?;
    items
        .iter()
        .map(|v| v.as_str().map(str::to_string).ok_or_else(err))
        .collect()
}

/// A closed vocabulary of wire strings.
trait Closed: Copy + 'static {
    /// Every value, in the order error texts list them.
    const VALUES: &'static [Self];
    /// The wire string.
    fn text(self) -> &'static str;
}

impl Closed for EnforcementMode {
    const VALUES: &'static [Self] = EnforcementMode::ALL;
    fn text(self) -> &'static str {
        self.as_str()
    }
}

/// A closed-vocabulary string: `<field> must be one of: a, b, c` otherwise.
fn one_of<T: Closed>(obj: &Map<String, Value>, field: &str) -> Result<T, String> {
    let s = string(obj, field)?;
    T::VALUES
        .iter()
        .copied()
        .find(|v| v.text() == s)
        .ok_or_else(|| {
            let allowed: Vec<&str> = T::VALUES.iter().map(|v| v.text()).collect();
            format!("{field} must be one of: {}", allowed.join(", "))
        })
}

/// RFC 3339 (any offset), or a date-time without offset taken as UTC (Python's `isoformat()`).
fn timestamp(obj: &Map<String, Value>, field: &str) -> Result<String, String> {
    let s = string(obj, field)?;
    let naive = || chrono::NaiveDateTime::parse_from_str(&s, "%Y-%m-%dT%H:%M:%S%.f").is_ok();
    if ids::parse_rfc3339(&s).is_ok() || naive() {
        Ok(s)
    } else {
        Err(format!("{field} is not an ISO 8601 timestamp"))
    }
}

fn optional_string(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => string(obj, field).map(Some),
    }
}

fn optional_object(
    obj: &Map<String, Value>,
    field: &str,
) -> Result<Option<Map<String, Value>>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m.clone())),
        Some(_) => Err(format!("{field} must be an object")),
    }
}

/// SPEC.md "Events": agent_tool_call goes with TOOL_CALL_*, agent_llm_invocation with
/// LLM_INVOCATION.
fn check_type_pairing(event: &Event) -> Result<(), String> {
    let expected = event.event_type.source_type();
    if expected == event.source_type {
        return Ok(());
    }
    Err(format!(
        "event_type {} does not go with source_type {} (agent_tool_call goes with \
         TOOL_CALL_PRE, TOOL_CALL_POST and TOOL_CALL_BLOCK; agent_llm_invocation with \
         LLM_INVOCATION)",
        event.event_type.as_str(),
        event.source_type.as_str()
    ))
}

/// Rewrites the top-level metadata keys to snake_case (`promptTokens` → `prompt_tokens`,
/// `modelName` → `model_name`, `HTTPStatus` → `http_status`). When two keys map to the same
/// name, the key that was already snake_case wins. Nested values are left as they are.
pub fn normalize_metadata(map: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    let mut renamed = Vec::new();
    for (key, value) in map {
        let snake = camel_to_snake(&key);
        if snake == key {
            out.insert(key, value);
        } else {
            renamed.push((snake, value));
        }
    }
    for (snake, value) in renamed {
        out.entry(snake).or_insert(value);
    }
    out
}

/// `camelCase` / `PascalCase` / `ALLCapsWord` → `snake_case`; other text is lower-cased.
fn camel_to_snake(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let mut out = String::with_capacity(key.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = prev.is_lowercase() || prev.is_ascii_digit();
            if boundary || (prev.is_uppercase() && next_lower) {
                out.push('_');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

mod canonical;

#[cfg(test)]
mod tests;
