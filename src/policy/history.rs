//! [`ToolCallHistory`], the type of `EnforcementRequest.session_tool_calls` (SPEC.md,
//! "EnforcementRequest"): tool names already called in the session, which can keep its own JSON
//! text so that hashing a request does not serialize a long history again on every call.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cell::Cell;
use std::ops::Deref;

/// Tool names already called in a session, oldest first. Serializes as a plain JSON array of
/// strings and reads from one.
///
/// Read from a request body it is a plain list. Started with [`ToolCallHistory::kept`] and grown
/// with [`ToolCallHistory::push_bounded`] (the forward proxy's per-session record,
/// `proxy::calls::SessionCalls`) it also keeps its `serde_json` text, which
/// [`write_json_with_kept_history`] writes instead of serializing up to 256 names again. The
/// bytes written are the same either way; equality compares the names only.
#[derive(Debug, Clone, Default)]
pub struct ToolCallHistory {
    names: Vec<String>,
    /// `serde_json::to_string(&names)`, when kept.
    json: Option<String>,
}

impl ToolCallHistory {
    /// An empty history that keeps its JSON text as it grows.
    pub fn kept() -> ToolCallHistory {
        ToolCallHistory {
            names: Vec::new(),
            json: Some("[]".to_string()),
        }
    }

    /// Appends `name`, first dropping the oldest names so that at most `cap` remain. The kept
    /// JSON text (if any) is edited in place: one name escaped, no full re-serialization.
    pub fn push_bounded(&mut self, name: String, cap: usize) {
        while !self.names.is_empty() && self.names.len() >= cap.max(1) {
            let oldest = self.names.remove(0);
            let rest = !self.names.is_empty();
            self.edit_json(|json| {
                let cut = quoted(&oldest)?.len() + usize::from(rest);
                json.replace_range(1..1 + cut, "");
                Some(())
            });
        }
        let first = self.names.is_empty();
        self.edit_json(|json| {
            let q = quoted(&name)?;
            json.pop(); // the closing ']'
            if !first {
                json.push(',');
            }
            json.push_str(&q);
            json.push(']');
            Some(())
        });
        self.names.push(name);
    }

    /// The kept JSON text, if this history keeps one.
    pub fn kept_json(&self) -> Option<&str> {
        self.json.as_deref()
    }

    /// Runs `edit` on the kept text; a failed edit (it cannot fail for a `&str`, but a wrong
    /// text must never be hashed) stops keeping it.
    fn edit_json(&mut self, edit: impl FnOnce(&mut String) -> Option<()>) {
        if let Some(json) = self.json.as_mut() {
            if edit(json).is_none() {
                self.json = None;
            }
        }
    }
}

/// `s` as a JSON string literal (quotes and escapes), as serde_json writes it.
fn quoted(s: &str) -> Option<String> {
    serde_json::to_string(s).ok()
}

impl From<Vec<String>> for ToolCallHistory {
    fn from(names: Vec<String>) -> Self {
        ToolCallHistory { names, json: None }
    }
}

impl Deref for ToolCallHistory {
    type Target = [String];
    fn deref(&self) -> &[String] {
        &self.names
    }
}

impl PartialEq for ToolCallHistory {
    fn eq(&self, other: &Self) -> bool {
        self.names == other.names
    }
}

thread_local! {
    /// Set while [`write_json_with_kept_history`] serializes: a history with kept text writes
    /// `[]`, which is then replaced by the kept text.
    static ELIDE_KEPT: Cell<bool> = const { Cell::new(false) };
}

impl Serialize for ToolCallHistory {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.json.is_some() && ELIDE_KEPT.with(Cell::get) {
            return serializer.collect_seq(std::iter::empty::<&String>());
        }
        serializer.collect_seq(&self.names)
    }
}

impl<'de> Deserialize<'de> for ToolCallHistory {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(deserializer).map(ToolCallHistory::from)
    }
}

/// Clears [`ELIDE_KEPT`] however serialization ends.
struct ElideGuard;

impl Drop for ElideGuard {
    fn drop(&mut self) {
        ELIDE_KEPT.with(|e| e.set(false));
    }
}

/// Appends `value`'s JSON to `out`, byte for byte what `serde_json::to_writer` writes, taking
/// the text of `history` from its kept JSON. `value` must serialize `history` as its field
/// `field`, and no field before it may contain an object (only strings and lists of strings):
/// the first `"<field>":[]` written is then that field, since a quote inside a string is always
/// escaped. `EnforcementRequest::write_json` is the one caller.
///
/// Errors: what `serde_json` reports for `value`.
pub(crate) fn write_json_with_kept_history<T: Serialize>(
    value: &T,
    field: &str,
    history: &ToolCallHistory,
    out: &mut Vec<u8>,
) -> serde_json::Result<()> {
    let Some(kept) = history
        .kept_json()
        .filter(|_| history.len() >= KEPT_TEXT_MIN_NAMES)
    else {
        return serde_json::to_writer(out, value);
    };
    let start = out.len();
    {
        ELIDE_KEPT.with(|e| e.set(true));
        let _guard = ElideGuard;
        serde_json::to_writer(&mut *out, value)?;
    }
    match elided_list_at(&out[start..], field) {
        Some(at) => {
            // `[]` at `start + at`: put the kept text in its place.
            let tail = out.split_off(start + at + 2);
            out.truncate(start + at);
            out.extend_from_slice(kept.as_bytes());
            out.extend_from_slice(&tail);
            Ok(())
        }
        None => {
            // Not reachable for EnforcementRequest; never hash an elided list (the guard has
            // turned the elision off again, so this writes the names).
            out.truncate(start);
            serde_json::to_writer(out, value)
        }
    }
}

/// Shorter histories are serialized as usual: copying the kept text only pays off once the
/// list is longer than the elision and the splice cost (`benches/proxy_call.rs`).
pub(crate) const KEPT_TEXT_MIN_NAMES: usize = 16;

/// Offset of the `[]` in the first `"<field>":[]` of `json`.
fn elided_list_at(json: &[u8], field: &str) -> Option<usize> {
    let name = field.as_bytes();
    let len = name.len() + 5; // "name":[]
    json.windows(len)
        .position(|w| {
            w[0] == b'"' && &w[1..=name.len()] == name && &w[name.len() + 1..] == b"\":[]"
        })
        .map(|i| i + len - 2)
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
