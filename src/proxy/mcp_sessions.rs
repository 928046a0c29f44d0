//! MCP sessions the proxy has seen servers issue. Streamable HTTP uses `GET <endpoint>` (the
//! server's event stream) and `DELETE <endpoint>` (end of session) with the `Mcp-Session-Id`
//! header; these carry no tool call. They pass untouched only for a (host, port, path,
//! session id) that the server itself returned in an `Mcp-Session-Id` response header, so an
//! agent cannot dodge the host-level check of an arbitrary GET by adding the header. Bounded:
//! the least recently used sessions are forgotten (a forgotten session's GET is then checked
//! as `http.request`).

use super::identity::MCP_SESSION_HEADER;
use super::Target;
use http::request::Parts;
use http::{HeaderMap, Method};

/// Sessions remembered.
const CAPACITY: usize = 10_000;

/// The set of server-issued MCP sessions.
pub struct McpSessions {
    seen: quick_cache::sync::Cache<String, ()>,
}

impl Default for McpSessions {
    fn default() -> Self {
        McpSessions {
            seen: quick_cache::sync::Cache::new(CAPACITY),
        }
    }
}

fn key(target: &Target, path: &str, session: &str) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{}\u{1f}{path}\u{1f}{session}",
        target.https, target.host, target.port
    )
}

impl McpSessions {
    /// Remembers the session id an MCP server returned for `path` on `target`.
    pub fn learn(&self, target: &Target, path: &str, response_headers: &HeaderMap) {
        let sid = response_headers
            .get(MCP_SESSION_HEADER)
            .and_then(|v| v.to_str().ok());
        if let Some(sid) = sid.filter(|s| !s.is_empty()) {
            self.seen.insert(key(target, path, sid), ());
        }
    }

    /// True for a GET or DELETE without a query, on a path and session the server issued.
    pub fn is_session_request(&self, parts: &Parts, target: &Target) -> bool {
        if !(parts.method == Method::GET || parts.method == Method::DELETE)
            || parts.uri.query().is_some()
        {
            return false;
        }
        let sid = parts
            .headers
            .get(MCP_SESSION_HEADER)
            .and_then(|v| v.to_str().ok());
        match sid {
            Some(sid) => self.seen.get(&key(target, parts.uri.path(), sid)).is_some(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: Method, uri: &str, sid: Option<&str>) -> Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        if let Some(s) = sid {
            b = b.header(MCP_SESSION_HEADER, s);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_server_issued_sessions_on_their_own_path_pass() {
        let sessions = McpSessions::default();
        let t = Target {
            https: true,
            host: "mcp.example".into(),
            port: 443,
        };
        let mut h = HeaderMap::new();
        h.insert(MCP_SESSION_HEADER, "abc".parse().unwrap());
        sessions.learn(&t, "/mcp", &h);
        assert!(sessions.is_session_request(&parts(Method::GET, "/mcp", Some("abc")), &t));
        assert!(sessions.is_session_request(&parts(Method::DELETE, "/mcp", Some("abc")), &t));
        for p in [
            parts(Method::GET, "/mcp", Some("forged")),
            parts(Method::GET, "/other", Some("abc")),
            parts(Method::GET, "/mcp?leak=1", Some("abc")),
            parts(Method::POST, "/mcp", Some("abc")),
            parts(Method::GET, "/mcp", None),
        ] {
            assert!(
                !sessions.is_session_request(&p, &t),
                "{} {}",
                p.method,
                p.uri
            );
        }
        let other = Target { port: 8443, ..t };
        assert!(!sessions.is_session_request(&parts(Method::GET, "/mcp", Some("abc")), &other));
    }
}
