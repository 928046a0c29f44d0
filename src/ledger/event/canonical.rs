//! The canonical JSON of an [`Event`] written straight from the struct: the bytes
//! `canonical_json(&serde_json::to_value(event))` gives (object keys in byte order, no
//! whitespace, serde_json's string and number forms), without building the `Value` tree first.
//! The forward proxy's recorder encodes every event this way; encoding through a `Value` cost
//! about as much as chaining and storing the event.
//!
//! `metadata` is written as serde_json writes a `Map`: in key order, at every depth, because
//! serde_json's `Map` is a `BTreeMap` (its `preserve_order` feature is off in this build; a
//! dependency that turned it on would make the test below fail, not the ledger silently).
//!
//! Invariant (tests in `event/tests.rs`): for every event, [`Event::write_canonical`] writes
//! exactly what canonicalizing its serde encoding gives, so `ledger verify` (which
//! re-canonicalizes the stored record) finds the hash it was chained with.

use super::{Event, EventType, SourceType};
use crate::vocab::EnforcementMode;
use serde::Serialize;
use serde_json::{Map, Value};

impl Event {
    /// Appends the canonical JSON of this event to `out` (see the module docs).
    ///
    /// Errors: only what serde_json reports for a value it cannot write (none for an `Event`:
    /// every key is a string and every number finite).
    pub fn write_canonical(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        serde_json::to_writer(out, &Sorted::of(self))
    }
}

/// The fields of [`Event`] declared in the byte order of their names, as serde writes them;
/// optional fields are left out when absent, as `Event`'s own encoding does.
#[derive(Serialize)]
struct Sorted<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_id: Option<&'a str>,
    approved_scope: &'a [String],
    content: &'a str,
    enforcement_mode: EnforcementMode,
    event_id: &'a str,
    event_type: EventType,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a Map<String, Value>>,
    occurred_at: &'a str,
    session_id: &'a str,
    session_tool_calls: &'a [String],
    source_type: SourceType,
    tenant_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<&'a str>,
    user_id: &'a str,
}

impl<'a> Sorted<'a> {
    fn of(e: &'a Event) -> Sorted<'a> {
        Sorted {
            agent_id: e.agent_id.as_deref(),
            approved_scope: &e.approved_scope,
            content: &e.content,
            enforcement_mode: e.enforcement_mode,
            event_id: &e.event_id,
            event_type: e.event_type,
            metadata: e.metadata.as_ref(),
            occurred_at: &e.occurred_at,
            session_id: &e.session_id,
            session_tool_calls: &e.session_tool_calls,
            source_type: e.source_type,
            tenant_id: &e.tenant_id,
            tool_name: e.tool_name.as_deref(),
            user_id: &e.user_id,
        }
    }
}
