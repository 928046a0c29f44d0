//! REST routes (`routes/*.toml`, `[[route]]` tables; docs/policy.md, "Forward proxy"):
//! parsing, validation, compilation of path patterns, and matching a request against them.
//!
//! Path patterns are `/`-separated segments: a literal (compared exactly, case-sensitive,
//! after percent-decoding on both sides), `*` (any one segment), `{name}` (any one segment,
//! captured into `tool_args[name]`), and a final `**` (any rest, including nothing).
//!
//! Request paths are normalized before matching, the way most servers do, so that an agent
//! cannot dodge a route by spelling a path differently: the query and fragment are cut off,
//! each segment is percent-decoded (`%2F` stays inside its segment), empty segments and `.`
//! are dropped and `..` removes the previous segment. `/v1//transfers/./x/` is
//! `/v1/transfers/x`.

use super::{host_glob, is_name};
use crate::policy::glob;
use crate::policy::PolicyError;
use hyper::Method;
use serde::Deserialize;
use std::collections::HashMap;

/// One `routes/*.toml` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    #[serde(default)]
    route: Vec<RouteDef>,
}

/// One `[[route]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteDef {
    /// Unique across the pack; letters, digits, `_`, `-`, `.`.
    id: String,
    /// Host glob, no port; case-insensitive.
    host: String,
    /// HTTP method (`POST`, any case) or `*`.
    method: String,
    /// Path pattern (module docs).
    path: String,
    /// The tool name the policy sees.
    tool: String,
    /// Free text for people.
    #[serde(default)]
    #[allow(dead_code)] // documentation only
    description: Option<String>,
}

/// One path-pattern segment.
#[derive(Debug, Clone, PartialEq)]
enum Segment {
    /// Matches this (decoded) text exactly.
    Literal(String),
    /// `*`: any one segment.
    Any,
    /// `{name}`: any one segment, captured.
    Capture(String),
}

/// A validated, compiled route.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Route {
    id: String,
    /// Lowercased host glob.
    host: String,
    /// None: any method.
    method: Option<Method>,
    segments: Vec<Segment>,
    /// The pattern ends in `/**`.
    rest: bool,
    tool: String,
}

/// A route that matched a request.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteMatch<'p> {
    /// The route's `id`.
    pub route_id: &'p str,
    /// The route's `tool`: the tool_name the policy sees.
    pub tool: &'p str,
    /// `{name}` captures in pattern order: (name, percent-decoded segment).
    pub captures: Vec<(&'p str, String)>,
}

/// Parses and compiles the route files (path as shown in messages, text) in the order given.
pub(crate) fn build(files: &[(String, String)]) -> Result<Vec<Route>, PolicyError> {
    let mut routes = Vec::new();
    let mut seen: HashMap<String, String> = HashMap::new();
    for (path, text) in files {
        let file: RouteFile = crate::policy::loader::parse_toml(path, text)?;
        for (i, def) in file.route.into_iter().enumerate() {
            let invalid = |message: String| PolicyError::Invalid {
                path: path.clone(),
                message: format!("route[{i}] ({}): {message}", def.id),
            };
            let route = compile(&def).map_err(invalid)?;
            if let Some(first) = seen.insert(def.id.clone(), path.clone()) {
                return Err(invalid(format!(
                    "duplicate route id, first defined in {first}"
                )));
            }
            routes.push(route);
        }
    }
    Ok(routes)
}

/// Validates one definition; errors name the field.
fn compile(def: &RouteDef) -> Result<Route, String> {
    if !is_name(&def.id) {
        return Err("id: must be letters, digits, `_`, `-` or `.` (non-empty)".into());
    }
    let host = host_glob("host", &def.host)?;
    let method = match def.method.trim() {
        "*" => None,
        m => Some(
            Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                .map_err(|_| format!("method: `{}` is not an HTTP method or `*`", def.method))?,
        ),
    };
    let (segments, rest) = compile_path(&def.path).map_err(|e| format!("path: {e}"))?;
    if def.tool.trim().is_empty() || def.tool.contains(char::is_whitespace) {
        return Err("tool: must be a non-empty tool name without spaces".into());
    }
    Ok(Route {
        id: def.id.clone(),
        host,
        method,
        segments,
        rest,
        tool: def.tool.clone(),
    })
}

/// Compiles a path pattern into segments and whether it ends in `/**`.
fn compile_path(path: &str) -> Result<(Vec<Segment>, bool), String> {
    let Some(body) = path.strip_prefix('/') else {
        return Err(format!("`{path}` must start with `/`"));
    };
    if path.contains(['?', '#']) {
        return Err(format!("`{path}`: no query or fragment allowed"));
    }
    let raw: Vec<&str> = body.split('/').filter(|s| !s.is_empty()).collect();
    let mut segments = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for (i, seg) in raw.iter().enumerate() {
        let last = i + 1 == raw.len();
        segments.push(match *seg {
            "**" if last => return Ok((segments, true)),
            "**" => return Err("`**` is only allowed as the last segment".into()),
            "*" => Segment::Any,
            "." | ".." => return Err(format!("segment `{seg}` is not allowed")),
            s if s.starts_with('{') && s.ends_with('}') => {
                let name = &s[1..s.len() - 1];
                let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid {
                    return Err(format!("capture `{s}`: name must be an identifier"));
                }
                if names.contains(&name) {
                    return Err(format!("capture `{s}` appears twice"));
                }
                names.push(name);
                Segment::Capture(name.to_string())
            }
            s if s.contains(['{', '}', '*']) => {
                return Err(format!(
                    "segment `{s}`: `{{name}}`, `*` and `**` must be whole segments"
                ))
            }
            s => Segment::Literal(percent_decode(s, false)),
        });
    }
    Ok((segments, false))
}

impl Route {
    /// The match of this route for a normalized host and path, or None.
    pub(crate) fn matches(
        &self,
        host: &str,
        method: &Method,
        path: &[String],
    ) -> Option<RouteMatch<'_>> {
        if let Some(m) = &self.method {
            if !m.as_str().eq_ignore_ascii_case(method.as_str()) {
                return None;
            }
        }
        let fits = if self.rest {
            path.len() >= self.segments.len()
        } else {
            path.len() == self.segments.len()
        };
        if !fits || !glob::matches(&self.host, host) {
            return None;
        }
        let mut captures = Vec::new();
        for (pattern, seg) in self.segments.iter().zip(path) {
            match pattern {
                Segment::Literal(text) if text != seg => return None,
                Segment::Capture(name) => captures.push((name.as_str(), seg.clone())),
                _ => {}
            }
        }
        Some(RouteMatch {
            route_id: &self.id,
            tool: &self.tool,
            captures,
        })
    }
}

/// A request path as routes see it: segments after cutting the query/fragment,
/// percent-decoding, and dropping empty and `.` segments and resolving `..`.
pub(crate) fn request_segments(path: &str) -> Vec<String> {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let mut out: Vec<String> = Vec::new();
    for raw in path.split('/') {
        let seg = percent_decode(raw, false);
        match seg.as_str() {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            _ => out.push(seg),
        }
    }
    out
}

/// Percent-decodes `text` (`%XX` → byte; a `%` not followed by two hex digits stays as is),
/// and `+` → space when `plus_is_space` (query strings). Invalid UTF-8 becomes U+FFFD.
pub(crate) fn percent_decode(text: &str, plus_is_space: bool) -> String {
    if !(text.contains('%') || plus_is_space && text.contains('+')) {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits are at most 0xFF.
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
            (b'+', _, _) if plus_is_space => out.push(b' '),
            (b, _, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
