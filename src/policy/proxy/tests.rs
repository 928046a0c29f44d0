//! Unit tests of the proxy section: `[proxy]` schema and defaults, route files, matching,
//! and the pack digest covering `routes/`.

use super::*;
use crate::policy::pack::PackFile;
use crate::policy::test_support::{pack_dir, MINIMAL_PACK};
use crate::policy::PolicySnapshot;

fn compile(extra: &str) -> Result<ProxyPolicy, String> {
    let text = format!("{MINIMAL_PACK}{extra}");
    let pack: PackFile = toml::from_str(&text).map_err(|e| e.message().to_string())?;
    pack.validate()?;
    pack.proxy.compile()
}

/// A pack directory with `routes` as (file name, text) under routes/.
fn routed(pack: &str, routes: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = pack_dir(pack, &[]);
    std::fs::create_dir_all(dir.path().join("routes")).unwrap();
    for (name, text) in routes {
        std::fs::write(dir.path().join("routes").join(name), text).unwrap();
    }
    dir
}

fn route(id: &str, host: &str, method: &str, path: &str, tool: &str) -> String {
    format!(
        "[[route]]\nid = \"{id}\"\nhost = \"{host}\"\nmethod = \"{method}\"\npath = \"{path}\"\ntool = \"{tool}\"\n"
    )
}

#[test]
fn defaults_apply_without_a_proxy_table() {
    let default = ProxyPolicy::default();
    assert_eq!(ProxyConfig::default().compile().unwrap(), default);
    assert_eq!(compile("").unwrap(), default);
    let snap = PolicySnapshot::load(pack_dir(MINIMAL_PACK, &[]).path()).unwrap();
    let p = snap.proxy();
    assert_eq!(p, &default);
    assert!(p.require_auth());
    assert_eq!(p.default_identity(), None);
    assert!(p.intercepts("anything.example") && p.intercepts("10.0.0.1"));
    assert!(!p.filter_tools_list());
    assert_eq!(p.max_recorded_result_bytes(), 4096);
    assert_eq!(p.mcp_alias("mcp.example", 443), None);
    assert_eq!(p.llm_provider("API.OpenAI.com"), Some("openai"));
    assert_eq!(p.llm_provider("api.anthropic.com."), Some("anthropic"));
    assert_eq!(p.llm_provider("example.com"), None);
    assert_eq!(
        p.route("api.stripe.com", &Method::POST, "/v1/transfers"),
        None
    );
    assert_eq!(p.route_count(), 0);
}

#[test]
fn a_full_proxy_table_compiles() {
    let p = compile(
        "[proxy]\nrequire_auth = false\ndefault_agent = \"local-agent\"\ndefault_tenant = \"default\"\n\
         intercept = [\"*.example.com\", \"api.openai.com\"]\npass_through = [\"safe.example.com\"]\n\
         filter_tools_list = true\nmax_recorded_result_bytes = 1048576\n\
         [proxy.mcp_servers.\"mcp.internal.example:8443\"]\nalias = \"crm\"\n\
         [proxy.mcp_servers.\"mcp.internal.example\"]\nalias = \"crm-any\"\n\
         [proxy.mcp_servers.\"*.tools.example\"]\nalias = \"tools\"\n\
         [proxy.llm_providers]\n\"api.openai.com\" = \"azure\"\n\"*.llm.example\" = \"vllm\"\n",
    )
    .unwrap();
    assert!(!p.require_auth());
    assert_eq!(p.default_identity(), Some(("default", "local-agent")));
    let intercepts = [
        ("a.example.com", true),
        ("A.EXAMPLE.COM.", true),
        ("safe.example.com", false),
        ("api.openai.com", true),
        ("example.org", false),
    ];
    for (host, want) in intercepts {
        assert_eq!(p.intercepts(host), want, "{host}");
    }
    assert!(p.filter_tools_list());
    assert_eq!(p.max_recorded_result_bytes(), 1 << 20);
    assert_eq!(p.mcp_alias("MCP.internal.example", 8443), Some("crm"));
    assert_eq!(p.mcp_alias("mcp.internal.example", 443), Some("crm-any"));
    assert_eq!(p.mcp_alias("a.tools.example", 1), Some("tools"));
    assert_eq!(p.mcp_alias("tools.example", 1), None);
    assert_eq!(p.llm_provider("api.openai.com"), Some("azure"));
    assert_eq!(p.llm_provider("gpu1.llm.example"), Some("vllm"));
    assert_eq!(p.llm_provider("api.anthropic.com"), Some("anthropic"));
}

#[test]
fn invalid_proxy_tables_name_the_field() {
    let cases = [
        (
            "[proxy]\nrequire_auth = false\ndefault_tenant = \"t\"",
            "proxy.default_agent: required",
        ),
        (
            "[proxy]\nrequire_auth = false\ndefault_agent = \"a\"",
            "proxy.default_tenant: required",
        ),
        (
            "[proxy]\nrequire_auth = false\ndefault_agent = \" \"\ndefault_tenant = \"t\"",
            "proxy.default_agent: must not be empty",
        ),
        (
            "[proxy]\ndefault_agent = \"\"",
            "proxy.default_agent: must not be empty",
        ),
        ("[proxy]\nintercept = [\"\"]", "proxy.intercept[0]"),
        (
            "[proxy]\npass_through = [\"a.com\", \"b.com:443\"]",
            "proxy.pass_through[1]",
        ),
        ("[proxy]\nintercept = [\"a b\"]", "proxy.intercept[0]"),
        (
            "[proxy]\nmax_recorded_result_bytes = 0",
            "proxy.max_recorded_result_bytes",
        ),
        (
            "[proxy]\nmax_recorded_result_bytes = 1048577",
            "proxy.max_recorded_result_bytes",
        ),
        (
            "[proxy.mcp_servers.\"h:99999\"]\nalias = \"x\"",
            "proxy.mcp_servers.\"h:99999\": port",
        ),
        (
            "[proxy.mcp_servers.\"h\"]\nalias = \"a b\"",
            "proxy.mcp_servers.\"h\".alias",
        ),
        (
            "[proxy.mcp_servers.\"h\"]\nalias = \"\"",
            "proxy.mcp_servers.\"h\".alias",
        ),
        (
            "[proxy.mcp_servers.\"h\"]\nname = \"x\"",
            "unknown field `name`",
        ),
        (
            "[proxy.llm_providers]\n\"x.com\" = \"\"",
            "proxy.llm_providers.\"x.com\"",
        ),
        ("[proxy]\nrequire_auth = \"no\"", "invalid type"),
        ("[proxy]\nintercepts = []", "unknown field `intercepts`"),
    ];
    for (extra, needle) in cases {
        let err = compile(extra).unwrap_err();
        assert!(err.contains(needle), "{extra}: {err}");
    }
}

#[test]
fn proxy_errors_name_pack_toml_when_loading() {
    let dir = pack_dir(
        &format!("{MINIMAL_PACK}[proxy]\nrequire_auth = false\n"),
        &[],
    );
    let err = PolicySnapshot::load(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("pack.toml: proxy.default_tenant: required"),
        "{err}"
    );
}

const GITHUB: &str = "api.github.com";

fn sample_routes() -> tempfile::TempDir {
    let a = [
        route(
            "merge",
            GITHUB,
            "PUT",
            "/repos/{owner}/{repo}/pulls/{number}/merge",
            "git.merge",
        ),
        route(
            "gh-any-issue",
            GITHUB,
            "*",
            "/repos/*/*/issues/{number}",
            "github.issue",
        ),
        route(
            "transfer",
            "*.stripe.com",
            "post",
            "/v1/transfers/**",
            "payments.transfer",
        ),
        route("first", "example.com", "GET", "/x/{id}", "first.tool"),
    ]
    .concat();
    let b = [
        route("second", "example.com", "GET", "/x/{id}", "second.tool"),
        route("root", "example.com", "GET", "/", "root.tool"),
    ]
    .concat();
    // `b.toml` is created first on purpose: order comes from the file names.
    routed(MINIMAL_PACK, &[("b.toml", &b), ("a.toml", &a)])
}

#[test]
fn routes_match_by_host_method_and_path() {
    let dir = sample_routes();
    let snap = PolicySnapshot::load(dir.path()).unwrap();
    let p = snap.proxy();
    assert_eq!(p.route_count(), 6);
    type Case<'a> = (
        &'a str,
        Method,
        &'a str,
        Option<(&'a str, &'a [(&'a str, &'a str)])>,
    );
    let cases: Vec<Case> = vec![
        (
            GITHUB,
            Method::PUT,
            "/repos/acme/app/pulls/7/merge",
            Some((
                "merge",
                &[("owner", "acme"), ("repo", "app"), ("number", "7")],
            )),
        ),
        (
            "API.GitHub.com.",
            Method::PUT,
            "/repos/a/b/pulls/1/merge?x=1",
            Some(("merge", &[("owner", "a"), ("repo", "b"), ("number", "1")])),
        ),
        (GITHUB, Method::POST, "/repos/a/b/pulls/1/merge", None),
        (GITHUB, Method::PUT, "/repos/a/b/pulls/1/merge/extra", None),
        // Spelling tricks are normalized away; captures are decoded.
        (
            GITHUB,
            Method::PUT,
            "//repos/a%2Fz/b/./pulls/x/../1/m%65rge/",
            Some(("merge", &[("owner", "a/z"), ("repo", "b"), ("number", "1")])),
        ),
        (
            GITHUB,
            Method::DELETE,
            "/repos/a/b/issues/3",
            Some(("gh-any-issue", &[("number", "3")])),
        ),
        (
            "api.stripe.com",
            Method::POST,
            "/v1/transfers",
            Some(("transfer", &[])),
        ),
        (
            "api.stripe.com",
            Method::POST,
            "/v1/transfers/tr_1/reversals",
            Some(("transfer", &[])),
        ),
        ("stripe.com", Method::POST, "/v1/transfers", None),
        ("api.stripe.com", Method::GET, "/v1/transfers", None),
        (
            "example.com",
            Method::GET,
            "/x/9",
            Some(("first", &[("id", "9")])),
        ),
        ("example.com", Method::GET, "/", Some(("root", &[]))),
        ("example.com", Method::GET, "", Some(("root", &[]))),
    ];
    for (host, method, path, want) in cases {
        let got = p.route(host, &method, path);
        let got = got.as_ref().map(|m| {
            (
                m.route_id,
                m.captures
                    .iter()
                    .map(|(k, v)| (*k, v.as_str()))
                    .collect::<Vec<_>>(),
            )
        });
        let want = want.map(|(id, caps)| (id, caps.to_vec()));
        assert_eq!(got, want, "{method} {host}{path}");
    }
    let m = p.route("example.com", &Method::GET, "/x/1").unwrap();
    assert_eq!(m.tool, "first.tool");
}

#[test]
fn bad_route_files_are_refused_naming_file_and_field() {
    let ok = route("a", "h", "GET", "/", "t");
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (
            vec![("a.toml", ok.clone()), ("b.toml", ok.clone())],
            "b.toml: route[0] (a): duplicate route id, first defined in",
        ),
        (
            vec![("a.toml", format!("{ok}{ok}"))],
            "a.toml: route[1] (a): duplicate route id",
        ),
        (
            vec![("a.toml", route("a b", "h", "GET", "/", "t"))],
            "route[0] (a b): id",
        ),
        (
            vec![("a.toml", route("a", "", "GET", "/", "t"))],
            "route[0] (a): host: must not be empty",
        ),
        (
            vec![("a.toml", route("a", "h:443", "GET", "/", "t"))],
            "host: `h:443`: give the host without a port",
        ),
        (
            vec![("a.toml", route("a", "h", "GE T", "/", "t"))],
            "method: `GE T`",
        ),
        (
            vec![("a.toml", route("a", "h", "GET", "x", "t"))],
            "path: `x` must start with `/`",
        ),
        (
            vec![("a.toml", route("a", "h", "GET", "/**/x", "t"))],
            "path: `**` is only allowed as the last segment",
        ),
        (
            vec![("a.toml", route("a", "h", "GET", "/{a}/{a}", "t"))],
            "path: capture `{a}` appears twice",
        ),
        (
            vec![("a.toml", route("a", "h", "GET", "/{1x}", "t"))],
            "path: capture `{1x}`",
        ),
        (
            vec![("a.toml", route("a", "h", "GET", "/v{n}", "t"))],
            "path: segment `v{n}`",
        ),
        (
            vec![("a.toml", route("a", "h", "GET", "/a?b=1", "t"))],
            "no query",
        ),
        (
            vec![("a.toml", route("a", "h", "GET", "/a/../b", "t"))],
            "segment `..`",
        ),
        (
            vec![("a.toml", route("a", "h", "GET", "/", ""))],
            "route[0] (a): tool",
        ),
        (
            vec![("a.toml", format!("{ok}colour = 1\n"))],
            "a.toml: line 7: unknown field `colour`",
        ),
        (
            vec![("a.toml", "[[route]]\nid = \"x\"\n".into())],
            "a.toml: line 1: missing field",
        ),
    ];
    for (files, needle) in cases {
        let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
        let dir = routed(MINIMAL_PACK, &files);
        let err = PolicySnapshot::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn the_digest_covers_route_files() {
    let route_a = route("a", "h", "GET", "/", "t");
    let digest = |files: &[(&str, &str)]| {
        let dir = routed(MINIMAL_PACK, files);
        PolicySnapshot::load(dir.path())
            .unwrap()
            .version()
            .digest
            .clone()
    };
    let base = digest(&[("a.toml", &route_a)]);
    assert_eq!(base, digest(&[("a.toml", &route_a)]));
    let changed = route("a", "h", "GET", "/x", "t");
    assert_ne!(base, digest(&[("a.toml", &changed)]));
    assert_ne!(base, digest(&[("b.toml", &route_a)]));
    assert_ne!(base, digest(&[]));
    // Non-TOML files under routes/ are not part of the pack.
    assert_eq!(base, digest(&[("a.toml", &route_a), ("notes.md", "x")]));
}

#[test]
fn percent_decoding() {
    let cases = [
        ("plain", false, "plain"),
        ("a%20b", false, "a b"),
        ("a+b", false, "a+b"),
        ("a+b", true, "a b"),
        ("100%", false, "100%"),
        ("%zz%4", false, "%zz%4"),
        ("%E2%9C%93", false, "\u{2713}"),
        ("%FF", false, "\u{FFFD}"),
    ];
    for (text, plus, want) in cases {
        assert_eq!(routes::percent_decode(text, plus), want, "{text}");
    }
}
