//! The forward proxy's part of the pack (docs/policy.md, "Forward proxy"): the `[proxy]`
//! table of pack.toml (`ProxyConfig`, validated with errors that name the field) and the
//! `routes/*.toml` files (`proxy/routes.rs`), compiled into a [`ProxyPolicy`] that the proxy
//! consults for authentication defaults, which CONNECT tunnels to inspect, MCP server
//! aliases, LLM provider names and REST routes.
//!
//! Host names are compared case-insensitively and without a trailing dot (`API.Stripe.com.`
//! is `api.stripe.com`); host patterns use the pack's glob dialect (`*` matches any run of
//! characters, dots included).

mod routes;

pub use routes::RouteMatch;
pub(crate) use routes::{percent_decode, request_segments};

use super::glob;
use super::pack::non_empty;
use super::PolicyError;
use hyper::Method;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Upper bound of `[proxy] max_recorded_result_bytes`: 1 MiB.
pub const MAX_RECORDED_RESULT_BYTES: u64 = 1024 * 1024;

/// The LLM provider hosts every pack knows; `[proxy.llm_providers]` may override them.
const DEFAULT_LLM_PROVIDERS: [(&str, &str); 2] = [
    ("api.openai.com", "openai"),
    ("api.anthropic.com", "anthropic"),
];

/// `[proxy]` as written in pack.toml. Every key is optional; the defaults are those of
/// [`ProxyPolicy::default`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProxyConfig {
    /// Requests without `Proxy-Authorization` are refused (true, the default) or attributed
    /// to the default identity (false).
    #[serde(default = "yes")]
    pub require_auth: bool,
    /// Agent of unauthenticated requests; required when `require_auth = false`.
    #[serde(default)]
    pub default_agent: Option<String>,
    /// Tenant of unauthenticated requests; required when `require_auth = false`.
    #[serde(default)]
    pub default_tenant: Option<String>,
    /// Host globs whose CONNECT tunnels are TLS-terminated and inspected; default `["*"]`.
    #[serde(default = "every_host")]
    pub intercept: Vec<String>,
    /// Host globs tunnelled untouched; checked before `intercept`; default empty.
    #[serde(default)]
    pub pass_through: Vec<String>,
    /// MCP `tools/list` results drop the tools the policy would block; default false.
    #[serde(default)]
    pub filter_tools_list: bool,
    /// Cap on the tool result recorded in TOOL_CALL_POST events, bytes; 1..=1048576, default 4096.
    #[serde(default = "default_recorded")]
    pub max_recorded_result_bytes: u64,
    /// `"host"` or `"host:port"` → the MCP server's settings.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// Host glob → provider name, merged over [`DEFAULT_LLM_PROVIDERS`].
    #[serde(default)]
    pub llm_providers: BTreeMap<String, String>,
}

/// `[proxy.mcp_servers."<host[:port]>"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpServerConfig {
    /// Tool names from this server become `<alias>.<name>`.
    pub alias: String,
}

fn yes() -> bool {
    true
}

fn every_host() -> Vec<String> {
    vec!["*".into()]
}

fn default_recorded() -> u64 {
    4096
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            require_auth: true,
            default_agent: None,
            default_tenant: None,
            intercept: every_host(),
            pass_through: Vec::new(),
            filter_tools_list: false,
            max_recorded_result_bytes: default_recorded(),
            mcp_servers: BTreeMap::new(),
            llm_providers: BTreeMap::new(),
        }
    }
}

impl ProxyConfig {
    /// Checks the values serde accepted; errors name the field, e.g.
    /// `proxy.default_agent: required when proxy.require_auth = false`.
    pub fn validate(&self) -> Result<(), String> {
        self.compile().map(drop)
    }

    /// The compiled policy, without routes.
    fn compile(&self) -> Result<ProxyPolicy, String> {
        let default_identity = self.default_identity()?;
        let intercept = host_globs("proxy.intercept", &self.intercept)?;
        let pass_through = host_globs("proxy.pass_through", &self.pass_through)?;
        let max = self.max_recorded_result_bytes;
        if !(1..=MAX_RECORDED_RESULT_BYTES).contains(&max) {
            return Err(format!(
                "proxy.max_recorded_result_bytes: must be 1..={MAX_RECORDED_RESULT_BYTES}, got {max}"
            ));
        }
        let mut mcp_servers = Vec::new();
        for (key, server) in &self.mcp_servers {
            mcp_servers.push(McpServer::compile(key, server)?);
        }
        let mut llm_providers = ProxyPolicy::default().llm_providers;
        for (pattern, provider) in &self.llm_providers {
            let field = format!("proxy.llm_providers.\"{pattern}\"");
            let pattern = host_glob(&field, pattern)?;
            non_empty(&field, provider)?;
            llm_providers.insert(pattern, provider.clone());
        }
        Ok(ProxyPolicy {
            require_auth: self.require_auth,
            default_identity,
            intercept,
            pass_through,
            filter_tools_list: self.filter_tools_list,
            max_recorded_result_bytes: usize::try_from(max).unwrap_or(usize::MAX),
            mcp_servers,
            llm_providers,
            routes: Vec::new(),
        })
    }

    /// (tenant, agent) when `require_auth = false`; both are then required and non-empty.
    /// When auth is required they are ignored, but must not be blank if given.
    fn default_identity(&self) -> Result<Option<(String, String)>, String> {
        let fields = [
            ("proxy.default_tenant", &self.default_tenant),
            ("proxy.default_agent", &self.default_agent),
        ];
        for (field, value) in fields {
            match value {
                Some(v) => non_empty(field, v)?,
                None if !self.require_auth => {
                    return Err(format!("{field}: required when proxy.require_auth = false"))
                }
                None => {}
            }
        }
        Ok(match (&self.default_tenant, &self.default_agent) {
            (Some(t), Some(a)) if !self.require_auth => Some((t.clone(), a.clone())),
            _ => None,
        })
    }
}

/// Checks a host glob (non-empty, no whitespace, no `/`, no port) and lowercases it.
fn host_glob(field: &str, pattern: &str) -> Result<String, String> {
    non_empty(field, pattern)?;
    if pattern.contains(|c: char| c.is_whitespace() || c == '/') {
        return Err(format!("{field}: `{pattern}` is not a host pattern"));
    }
    if !pattern.starts_with('[') && pattern.contains(':') {
        return Err(format!(
            "{field}: `{pattern}`: give the host without a port"
        ));
    }
    Ok(normalize_host(pattern))
}

fn host_globs(field: &str, patterns: &[String]) -> Result<Vec<String>, String> {
    patterns
        .iter()
        .enumerate()
        .map(|(i, p)| host_glob(&format!("{field}[{i}]"), p))
        .collect()
}

/// A host as the proxy compares it: ASCII-lowercased, without trailing dots.
pub fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// True for names made of letters, digits, `_`, `-` and `.` (ids, aliases).
pub(crate) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
}

/// One `[proxy.mcp_servers]` entry, compiled.
#[derive(Debug, Clone, PartialEq)]
struct McpServer {
    /// Lowercased host glob.
    host: String,
    /// None: any port.
    port: Option<u16>,
    alias: String,
}

impl McpServer {
    fn compile(key: &str, config: &McpServerConfig) -> Result<McpServer, String> {
        let field = format!("proxy.mcp_servers.\"{key}\"");
        let (host, port) = match key.rsplit_once(':') {
            Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                let port = p
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("{field}: port must be 1..=65535"))?;
                (h, Some(port))
            }
            _ => (key, None),
        };
        let host = host_glob(&field, host)?;
        if !is_name(&config.alias) {
            return Err(format!(
                "{field}.alias: must be letters, digits, `_`, `-` or `.` (non-empty)"
            ));
        }
        Ok(McpServer {
            host,
            port,
            alias: config.alias.clone(),
        })
    }
}

/// The compiled proxy section of a pack: `[proxy]` plus every route of `routes/*.toml`.
/// `Default` is what a pack without `[proxy]` and without routes gets: authentication
/// required, every host intercepted, no tools/list filtering, 4096 recorded result bytes, no
/// MCP aliases, the built-in LLM providers (`api.openai.com` → `openai`, `api.anthropic.com`
/// → `anthropic`) and no routes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyPolicy {
    require_auth: bool,
    default_identity: Option<(String, String)>,
    intercept: Vec<String>,
    pass_through: Vec<String>,
    filter_tools_list: bool,
    max_recorded_result_bytes: usize,
    mcp_servers: Vec<McpServer>,
    llm_providers: BTreeMap<String, String>,
    routes: Vec<routes::Route>,
}

impl Default for ProxyPolicy {
    fn default() -> Self {
        ProxyPolicy {
            require_auth: true,
            default_identity: None,
            intercept: every_host(),
            pass_through: Vec::new(),
            filter_tools_list: false,
            max_recorded_result_bytes: 4096,
            mcp_servers: Vec::new(),
            llm_providers: DEFAULT_LLM_PROVIDERS
                .iter()
                .map(|(h, p)| (h.to_string(), p.to_string()))
                .collect(),
            routes: Vec::new(),
        }
    }
}

impl ProxyPolicy {
    /// Compiles `[proxy]` (`config`, from the file `pack_path`) and the route files
    /// (path as shown in messages, text), in the order given (the loader sorts them by path).
    /// Errors: [`PolicyError::Invalid`] naming the file and the field, e.g.
    /// `policy/routes/a.toml: route[1] (merge): path: ...` or a duplicate route id.
    pub(crate) fn build(
        config: &ProxyConfig,
        pack_path: &str,
        route_files: &[(String, String)],
    ) -> Result<ProxyPolicy, PolicyError> {
        let mut policy = config.compile().map_err(|message| PolicyError::Invalid {
            path: pack_path.to_string(),
            message,
        })?;
        policy.routes = routes::build(route_files)?;
        Ok(policy)
    }

    /// `[proxy] require_auth` (default true): requests without `Proxy-Authorization` are
    /// refused. When false they are attributed to [`Self::default_identity`].
    pub fn require_auth(&self) -> bool {
        self.require_auth
    }

    /// `(tenant_id, agent_id)` for requests without `Proxy-Authorization`, from
    /// `default_tenant` / `default_agent`; Some exactly when `require_auth` is false.
    pub fn default_identity(&self) -> Option<(&str, &str)> {
        self.default_identity
            .as_ref()
            .map(|(t, a)| (t.as_str(), a.as_str()))
    }

    /// Whether a CONNECT to `host` (no port) is TLS-terminated and inspected: false when a
    /// `pass_through` glob matches (tunnel untouched), else true when an `intercept` glob
    /// matches (default `["*"]`: every host), else false.
    pub fn intercepts(&self, host: &str) -> bool {
        let host = normalize_host(host);
        !glob::any_matches(&self.pass_through, &host) && glob::any_matches(&self.intercept, &host)
    }

    /// `[proxy] filter_tools_list` (default false): MCP `tools/list` results drop the tools
    /// the policy would block.
    pub fn filter_tools_list(&self) -> bool {
        self.filter_tools_list
    }

    /// `[proxy] max_recorded_result_bytes` (default 4096, at most 1048576): how many bytes of
    /// a tool result a TOOL_CALL_POST event records.
    pub fn max_recorded_result_bytes(&self) -> usize {
        self.max_recorded_result_bytes
    }

    /// The alias of the MCP server at `host:port`, from `[proxy.mcp_servers]`. A key with a
    /// port beats one without; among equals the longest pattern wins.
    pub fn mcp_alias(&self, host: &str, port: u16) -> Option<&str> {
        let host = normalize_host(host);
        self.mcp_servers
            .iter()
            .filter(|s| s.port.is_none_or(|p| p == port) && glob::matches(&s.host, &host))
            .max_by_key(|s| (s.port.is_some(), s.host.len()))
            .map(|s| s.alias.as_str())
    }

    /// The LLM provider name of `host` (built-in defaults merged with
    /// `[proxy.llm_providers]`; the longest matching pattern wins), or None.
    pub fn llm_provider(&self, host: &str) -> Option<&str> {
        glob::longest_match(&self.llm_providers, &normalize_host(host)).map(|(_, p)| p.as_str())
    }

    /// The first route (files sorted by name, routes in file order) whose host glob, method
    /// and path pattern match, with its path captures (percent-decoded). `path` may carry a
    /// query, which is ignored. Paths are normalized first (docs/policy.md, "Routes"):
    /// percent-decoded segments, empty and `.` segments dropped, `..` resolved.
    pub fn route(&self, host: &str, method: &Method, path: &str) -> Option<RouteMatch<'_>> {
        let host = normalize_host(host);
        let segments = routes::request_segments(path);
        self.routes
            .iter()
            .find_map(|r| r.matches(&host, method, &segments))
    }

    /// Number of routes (for `policy check` style summaries).
    pub fn route_count(&self) -> usize {
        self.routes.len()
    }
}

#[cfg(test)]
mod tests;
