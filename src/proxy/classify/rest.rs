//! REST calls matched by a route (`routes/*.toml`): their tool arguments, which come from
//! three places, and writing modified arguments back to where they came from.
//!
//! `tool_args` = the query parameters, then the top-level keys of a JSON object body, then
//! the path captures; a later source wins a key (path over body over query). A key given by
//! more than one source is a *conflict*: only the winning value is checked by the policy,
//! while the others still reach the upstream, so the caller should refuse such a call (see
//! [`RestCall::conflicts`]).
//!
//! Query parameters are percent-decoded (`+` is a space) and stay strings; a key given more
//! than once becomes an array of its values in order; a key without `=` has the value `""`.
//! Bodies that are not a JSON object (arrays, form-encoded or binary bodies) add nothing.

use super::{RequestView, ToolCall};
use crate::policy::proxy::{percent_decode, RouteMatch};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Where a REST tool argument came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgSource {
    /// A `{name}` capture of the route's path pattern.
    Path,
    /// A top-level key of the JSON object body.
    Body,
    /// A query parameter.
    Query,
}

/// A request matched by a route.
#[derive(Debug, Clone, PartialEq)]
pub struct RestCall {
    /// The route's `id`.
    pub route_id: String,
    /// The route's `tool` and the merged arguments.
    pub call: ToolCall,
    sources: BTreeMap<String, ArgSource>,
    /// The query parameters as parsed, to see which ones a verdict changed.
    query: Map<String, Value>,
    conflicts: Vec<String>,
}

impl RestCall {
    /// Where argument `key` came from (None for a key that is not an argument).
    pub fn source(&self, key: &str) -> Option<ArgSource> {
        self.sources.get(key).copied()
    }

    /// Argument keys that more than one source gave (sorted). Only the winning value was put
    /// in `tool_args`; the others are unchecked, so the caller should refuse the call.
    pub fn conflicts(&self) -> &[String] {
        &self.conflicts
    }
}

/// The REST call of `req`, which matched `route`.
pub(super) fn call(route: &RouteMatch, req: &RequestView) -> RestCall {
    let query = req.query.map(parse_query).unwrap_or_default();
    let mut args = Map::new();
    let mut sources = BTreeMap::new();
    let mut conflicts = Vec::new();
    let mut add = |key: &str, value: Value, source: ArgSource| {
        if sources.insert(key.to_string(), source).is_some() {
            conflicts.push(key.to_string());
        }
        args.insert(key.to_string(), value);
    };
    for (key, value) in &query {
        add(key, value.clone(), ArgSource::Query);
    }
    if let Some(Value::Object(body)) = req.body {
        for (key, value) in body {
            add(key, value.clone(), ArgSource::Body);
        }
    }
    for (name, value) in &route.captures {
        add(name, Value::from(value.as_str()), ArgSource::Path);
    }
    conflicts.sort();
    conflicts.dedup();
    RestCall {
        route_id: route.route_id.to_string(),
        call: ToolCall {
            tool_name: route.tool.to_string(),
            tool_args: args,
        },
        sources,
        query,
        conflicts,
    }
}

/// Parses a raw query string into decoded parameters (module docs).
pub(super) fn parse_query(query: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key, true);
        let value = Value::from(percent_decode(value, true));
        match out.get_mut(&key) {
            Some(Value::Array(values)) => values.push(value),
            Some(first) => *first = Value::Array(vec![first.take(), value]),
            None => {
                out.insert(key, value);
            }
        }
    }
    out
}

/// Writes `args` (the verdict's modified arguments) back into the request: a changed
/// body-sourced key replaces the value in the JSON object `body`; changed query-sourced keys
/// are re-encoded into a new query string, which is returned (None when no query parameter
/// changed). Path captures are not rewritten (the URL path stays as sent), and keys that
/// are missing from `args` or did not come from the request are ignored.
///
/// In the new query, unchanged parameters keep their original bytes and order; a changed
/// key is written at its first position (one `key=value` per element of an array value,
/// strings percent-encoded, numbers and booleans as text, null as `""`, objects as JSON
/// text) and its later repetitions are dropped.
pub fn rewrite_rest(
    mut body: Option<&mut Value>,
    query: Option<&str>,
    rest: &RestCall,
    args: &Map<String, Value>,
) -> Option<String> {
    let mut changed_query: BTreeMap<&str, &Value> = BTreeMap::new();
    for (key, source) in &rest.sources {
        let Some(new) = args.get(key) else { continue };
        match source {
            ArgSource::Body => {
                let obj = body.as_deref_mut().and_then(Value::as_object_mut);
                if let Some(obj) = obj.filter(|o| o.get(key) != Some(new)) {
                    obj.insert(key.clone(), new.clone());
                }
            }
            ArgSource::Query if rest.query.get(key) != Some(new) => {
                changed_query.insert(key.as_str(), new);
            }
            ArgSource::Query | ArgSource::Path => {}
        }
    }
    if changed_query.is_empty() {
        return None;
    }
    Some(rebuild_query(query?, &changed_query))
}

/// `query` with the parameters named in `changed` replaced (see [`rewrite_rest`]).
fn rebuild_query(query: &str, changed: &BTreeMap<&str, &Value>) -> String {
    let mut pairs: Vec<String> = Vec::new();
    let mut written: Vec<String> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let raw_key = pair.split_once('=').map_or(pair, |(k, _)| k);
        let key = percent_decode(raw_key, true);
        let Some(value) = changed.get(key.as_str()) else {
            pairs.push(pair.to_string());
            continue;
        };
        if written.contains(&key) {
            continue;
        }
        let values: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            single => vec![single],
        };
        for v in values {
            pairs.push(format!("{raw_key}={}", encode(&scalar_text(v))));
        }
        written.push(key);
    }
    pairs.join("&")
}

/// The text of one query value.
fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => v.to_string(),
    }
}

/// Percent-encodes everything but the unreserved characters (RFC 3986).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
