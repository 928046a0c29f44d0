//! Forward-proxy test harness (tests/proxy_http.rs, tests/proxy_mcp.rs).
//!
//! * [`ProxyApp`]: toolgate `up` in-process with its proxy listener, every listener on
//!   127.0.0.1:0, the local CA in the temp dir, the proxy-test pack, an `execute` key of tenant
//!   `t1`; helpers for proxied reqwest clients, holds (wait on `HoldBook::created`, approve or
//!   deny on the control plane) and the ledger.
//! * [`TestCa`]: a CA generated at run time with rcgen, and server certificates it signs.
//! * [`mcp_python`]: the Python virtual environment with the official MCP SDK (`mcp==2.3.0`),
//!   installed once per target dir; [`McpServer`] and [`mcp_call`] run tests/mcp/server.py and
//!   tests/mcp/client.py in it.

use super::{config, TestApp, ADMIN_TOKEN};
use reqwest::StatusCode;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use toolgate::app::{self, Role};
use toolgate::config::Config;
use toolgate::state::AppState;

/// The agent whose `[agents.*]` defaults in the proxy-test pack cover every test tool.
pub const AGENT: &str = "mcp-agent";

/// The MCP SDK the end-to-end tests install (pinned).
pub const MCP_REQUIREMENT: &str = "mcp==2.3.0";

/// Upper bound for anything a test waits on; reaching it fails the test instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Path of the proxy-test pack.
pub fn proxy_pack() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proxy-pack")
}

/// Awaits `fut`, failing the test with `what` after [`PATIENCE`].
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// A running toolgate with its proxy listener, plus an execute key of tenant `t1`.
pub struct ProxyApp {
    /// The app (admin + control plane + proxy) and its temp dir.
    pub app: TestApp,
    /// The proxy listener.
    pub proxy: SocketAddr,
    /// An `execute` key of tenant `t1`.
    pub key: String,
    /// toolgate's local CA certificate (`<ca_dir>/ca.pem`): what intercepting clients trust.
    pub ca_pem: PathBuf,
}

impl ProxyApp {
    /// Starts toolgate on the proxy-test pack; `upstream_ca` is the extra root it trusts.
    pub async fn start(upstream_ca: Option<&Path>) -> ProxyApp {
        Self::start_with(
            |_| {},
            |c| c.upstream_ca = upstream_ca.map(Path::to_path_buf),
        )
        .await
    }

    /// Starts toolgate after `edit_pack` rewrote the copied pack.toml and `tweak` the config.
    pub async fn start_with(
        edit_pack: impl FnOnce(&mut String),
        tweak: impl FnOnce(&mut Config),
    ) -> ProxyApp {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), &proxy_pack());
        let pack_toml = cfg.policy_dir.join("pack.toml");
        let mut text = std::fs::read_to_string(&pack_toml).unwrap();
        edit_pack(&mut text);
        std::fs::write(&pack_toml, text).unwrap();
        cfg.proxy_listen = "127.0.0.1:0".parse().unwrap();
        cfg.ca_dir = dir.path().join("ca");
        tweak(&mut cfg);
        let ca_pem = cfg.ca_dir.join("ca.pem");
        let bound = app::build(cfg, Role::Up).await.expect("app starts");
        let proxy = bound.proxy_addr.expect("the proxy listener is bound");
        let app = TestApp {
            admin: format!("http://{}", bound.admin_addr.unwrap()),
            cp: format!("http://{}", bound.control_plane_addr.unwrap()),
            bound: Some(bound),
            client: reqwest::Client::builder()
                .use_preconfigured_tls(tls_config(&[]))
                .no_proxy()
                .build()
                .unwrap(),
            dir,
        };
        let key = app.exec_key().await;
        assert!(ca_pem.exists(), "the local CA is created at first start");
        ProxyApp {
            app,
            proxy,
            key,
            ca_pem,
        }
    }

    /// The shared state of the running app.
    pub fn core(&self) -> &AppState {
        &self.app.bound.as_ref().unwrap().core
    }

    /// `http://<agent>:<key>@127.0.0.1:<port>`: the proxy URL an agent is configured with.
    pub fn proxy_url(&self, agent: &str) -> String {
        format!("http://{agent}:{}@{}", self.key, self.proxy)
    }

    /// A reqwest client that goes through the proxy as `agent` (None: no credentials) and
    /// trusts exactly the PEM roots in `roots` for https.
    pub fn client(&self, agent: Option<(&str, &str)>, roots: &[&Path]) -> reqwest::Client {
        let mut proxy = reqwest::Proxy::all(format!("http://{}", self.proxy)).unwrap();
        if let Some((user, pass)) = agent {
            proxy = proxy.basic_auth(user, pass);
        }
        reqwest::Client::builder()
            .proxy(proxy)
            .use_preconfigured_tls(tls_config(roots))
            .build()
            .unwrap()
    }

    /// A client that goes through the proxy as [`AGENT`] with the test key.
    pub fn agent_client(&self, roots: &[&Path]) -> reqwest::Client {
        self.client(Some((AGENT, &self.key)), roots)
    }

    /// A receiver that changes whenever a hold is created (subscribe before the call).
    pub fn holds_created(&self) -> watch::Receiver<u64> {
        self.core().holds.created()
    }

    /// Waits until a pending hold of tenant t1 for `tool` exists (woken by `created`, never by
    /// polling on a timer) and returns its approval item.
    pub async fn wait_hold(&self, created: &mut watch::Receiver<u64>, tool: &str) -> Value {
        within(&format!("a hold for {tool}"), async {
            loop {
                created.changed().await.expect("hold book alive");
                if let Some(item) = self.pending(tool).await.into_iter().next() {
                    return item;
                }
            }
        })
        .await
    }

    /// The pending approvals of tenant t1 for `tool`.
    pub async fn pending(&self, tool: &str) -> Vec<Value> {
        let resp = self
            .app
            .cp_get("/t1/service/approvals?status=pending", ADMIN_TOKEN)
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let list: Value = resp.json().await.unwrap();
        list["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["tool_name"] == tool)
            .cloned()
            .collect()
    }

    /// Approves (`approve`) or denies (`deny`) hold `token` on the control plane; returns the
    /// status.
    pub async fn resolve(&self, token: &str, action: &str) -> StatusCode {
        let body = json!({"approver": "approver@example.com", "reason": format!("test {action}")});
        self.app
            .cp_post(
                &format!("/t1/service/approvals/{token}/{action}"),
                ADMIN_TOKEN,
                &body,
            )
            .await
            .status()
    }

    /// Stops the app, then reads every ledger entry `(kind, record)`, in order. The proxy's
    /// events are appended by its recorder task off the request path; stopping drains the
    /// connections and closes the recorder, so every event of the test's calls is in. Panics
    /// unless both chains (events and receipts) verify as `toolgate ledger verify` checks them.
    pub async fn stop_and_read_ledger(self) -> Vec<(String, Value)> {
        let core = self.core().clone();
        self.stop().await;
        // Every test that reads the proxy's events also checks that the chains verify (the
        // recorder writes events' canonical JSON itself; `ledger verify` recomputes it).
        let report = toolgate::ledger::verify::verify(&core.store, &core.receipts.public_key_pem())
            .expect("the ledger can be read for verification");
        assert!(report.ok(), "ledger verify after stop: {report:?}");
        ledger_of(&core)
    }

    /// Stops the app (drain, flush).
    pub async fn stop(self) {
        self.app.stop().await;
    }
}

/// Every ledger entry `(kind, record)` of `core`, in order.
pub fn ledger_of(core: &AppState) -> Vec<(String, Value)> {
    core.ledger
        .read_from(1, 100_000)
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.record))
        .collect()
}

/// The ledger records of `kind` whose `tool_name` is `tool`.
pub fn events<'a>(ledger: &'a [(String, Value)], kind: &str, tool: &str) -> Vec<&'a Value> {
    ledger
        .iter()
        .filter(|(k, r)| k == kind && r["tool_name"] == tool)
        .map(|(_, r)| r)
        .collect()
}

/// A rustls client config (ring) trusting exactly the certificates in the PEM files `roots`.
pub fn tls_config(roots: &[&Path]) -> rustls::ClientConfig {
    let mut store = rustls::RootCertStore::empty();
    for path in roots {
        for cert in CertificateDer::pem_file_iter(path).unwrap() {
            store.add(cert.unwrap()).unwrap();
        }
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth()
}

/// A certificate authority generated at run time.
pub struct TestCa {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

/// A server certificate and its key, written to PEM files.
pub struct ServerCert {
    /// Certificate chain (leaf, then the CA), PEM file.
    pub cert: PathBuf,
    /// Private key, PEM file (PKCS#8).
    pub key: PathBuf,
    /// The leaf certificate, DER.
    pub der: Vec<u8>,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            cert_pem: cert.pem(),
            cert,
            key,
        }
    }

    /// Writes the CA certificate to `dir/<file>` and returns the path.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, &self.cert_pem).unwrap();
        path
    }

    /// A server certificate for `names` (DNS names or IP addresses) signed by this CA, written
    /// to `dir/<stem>.pem` and `dir/<stem>-key.pem`.
    pub fn server_cert(&self, dir: &Path, stem: &str, names: &[&str]) -> ServerCert {
        let sans: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let cert_path = dir.join(format!("{stem}.pem"));
        let key_path = dir.join(format!("{stem}-key.pem"));
        std::fs::write(&cert_path, format!("{}{}", cert.pem(), self.cert_pem)).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        ServerCert {
            cert: cert_path,
            key: key_path,
            der: cert.der().to_vec(),
        }
    }
}

// ------------------------------------------------------------------------------------------
// The MCP SDK's Python environment and the tests/mcp/ programs.

/// `bin/python` of the virtual environment with [`MCP_REQUIREMENT`], installed on first use:
/// `python3 -m venv` + `pip install` into a fresh `mcp-venv.build-*` dir beside the target, then
/// renamed into place as `mcp-venv` with a marker naming the requirement. The rename is atomic,
/// so concurrent test processes never see a half-built environment (the loser of a race
/// discards its copy). Panics with pip's output when the install fails.
pub fn mcp_python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(install_venv) {
        Ok(p) => p.clone(),
        Err(e) => panic!("cannot install the MCP SDK venv: {e}"),
    }
}

const VENV_MARKER: &str = "toolgate-requirement.txt";

fn venv_ready(venv: &Path) -> bool {
    std::fs::read_to_string(venv.join(VENV_MARKER)).is_ok_and(|m| m.trim() == MCP_REQUIREMENT)
}

fn install_venv() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = root.join("mcp-venv");
    let python = venv.join("bin/python");
    if venv_ready(&venv) {
        return Ok(python);
    }
    std::fs::create_dir_all(root).map_err(|e| e.to_string())?;
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let build = root.join(format!("mcp-venv.build-{nonce}"));
    run(Command::new("python3").arg("-m").arg("venv").arg(&build))?;
    run(Command::new(build.join("bin/python")).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-input",
        MCP_REQUIREMENT,
    ]))?;
    std::fs::write(build.join(VENV_MARKER), MCP_REQUIREMENT).map_err(|e| e.to_string())?;
    if venv.exists() && !venv_ready(&venv) {
        // A stale environment (another pin, or an interrupted old layout): move it aside.
        let stale = root.join(format!("mcp-venv.stale-{nonce}"));
        if std::fs::rename(&venv, &stale).is_ok() {
            let _ = std::fs::remove_dir_all(&stale);
        }
    }
    if std::fs::rename(&build, &venv).is_err() {
        // Another process installed it first.
        let _ = std::fs::remove_dir_all(&build);
        if !venv_ready(&venv) {
            return Err(format!("{} exists but is not ready", venv.display()));
        }
    }
    Ok(python)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn mcp_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(name)
}

fn python_command(script: &str) -> Command {
    let mut cmd = Command::new(mcp_python());
    cmd.arg(mcp_script(script))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("all_proxy")
        .env_remove("SSL_CERT_FILE");
    cmd
}

/// tests/mcp/server.py running in the venv; killed on drop.
pub struct McpServer {
    child: Child,
    _stdin: ChildStdin,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    /// Where it appends the tools/call requests it receives.
    pub record: PathBuf,
    stderr: PathBuf,
}

impl McpServer {
    /// Starts the server with its files in `dir` (`<name>.record.jsonl`, `<name>.stderr`),
    /// serving TLS with `cert` when given; returns once it printed `LISTENING <port>`.
    pub async fn start(dir: &Path, name: &str, cert: Option<&ServerCert>) -> McpServer {
        let record = dir.join(format!("{name}.record.jsonl"));
        let stderr = dir.join(format!("{name}.stderr"));
        let mut cmd = python_command("server.py");
        cmd.arg("--record").arg(&record);
        if let Some(c) = cert {
            cmd.arg("--certfile")
                .arg(&c.cert)
                .arg("--keyfile")
                .arg(&c.key);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("python starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            for _ in lines {} // drain until the server exits
        });
        let line = within("the MCP server's LISTENING line", rx)
            .await
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "server.py exited before listening:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            });
        let port = line
            .strip_prefix("LISTENING ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from server.py: {line:?}"));
        McpServer {
            child,
            _stdin: stdin,
            port,
            record,
            stderr,
        }
    }

    /// `http://127.0.0.1:<port>/mcp`.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// `https://localhost:<port>/mcp`.
    pub fn https_url(&self) -> String {
        format!("https://localhost:{}/mcp", self.port)
    }

    /// The tools/call requests the server received, in order: `{"name", "arguments"}`.
    pub fn received(&self) -> Vec<Value> {
        match std::fs::read_to_string(&self.record) {
            Ok(text) => text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The received calls of `tool`.
    pub fn received_calls(&self, tool: &str) -> Vec<Value> {
        self.received()
            .into_iter()
            .filter(|c| c["name"] == tool)
            .collect()
    }

    /// What the server wrote to stderr so far (for failure messages).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One tool call by tests/mcp/client.py.
#[derive(Clone, Debug, Default)]
pub struct McpCall {
    /// The MCP endpoint.
    pub url: String,
    /// Proxy URL (with credentials), if any.
    pub proxy: Option<String>,
    /// PEM file of the CA the client trusts for https.
    pub ca: Option<PathBuf>,
    /// Tool name.
    pub tool: String,
    /// Tool arguments (a JSON object).
    pub args: Value,
    /// Extra request headers `Name: value`.
    pub headers: Vec<String>,
}

/// Runs the client: `Ok({"isError", "text"})` when it printed its result line, `Err(stderr)`
/// when it failed (transport or protocol error).
pub async fn mcp_call(call: McpCall) -> Result<Value, String> {
    let mut cmd = python_command("client.py");
    cmd.arg("--url")
        .arg(&call.url)
        .arg("--tool")
        .arg(&call.tool)
        .arg("--args")
        .arg(call.args.to_string());
    if let Some(p) = &call.proxy {
        cmd.arg("--proxy").arg(p);
    }
    if let Some(ca) = &call.ca {
        cmd.arg("--ca").arg(ca);
    }
    for h in &call.headers {
        cmd.arg("--header").arg(h);
    }
    let out = within(
        &format!("client.py calling {}", call.tool),
        tokio::task::spawn_blocking(move || cmd.stdin(Stdio::null()).output()),
    )
    .await
    .unwrap()
    .expect("python runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("client.py exited with {}:\n{stderr}", out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .map_err(|e| format!("client.py printed {stdout:?} ({e}); stderr:\n{stderr}"))
}
