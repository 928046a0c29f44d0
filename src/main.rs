//! The `toolgate` binary: parses the CLI (DESIGN.md, "CLI contract"), then runs a role or a tool.
//!
//! * `toolgate up | serve | control-plane [flags]` — run the embedded default, the sidecar, or the
//!   control plane until SIGTERM/SIGINT (exit 0); bad configuration exits 64 with one line.
//! * `toolgate policy check|test [--policy DIR]` — validate the pack / run its tests (exit 1 on
//!   failures, 64 when the pack does not load).
//! * `toolgate ledger verify [--data-dir DIR]` — check the receipt and event chains offline.
//! * `toolgate ca init [--dir certs] [--force]` — create the proxy's local CA (key mode 0600).
//! * `toolgate keys|holds|endpoints …` — the operator CLI against the control plane's admin API
//!   (`toolgate::cli`): tables, or `--json`; exit 1 when refused or unreachable, 64 no token.

use clap::{Args, Parser, Subcommand};

/// jemalloc instead of glibc malloc: on the /v1/enforce load test it raised throughput by about a
/// fifth at the same idle RSS (BENCHMARKS.md); glibc's allocator showed up in ~15% of samples.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
use std::path::PathBuf;
use std::process::ExitCode;
use toolgate::app::{self, Role};
use toolgate::config::{Config, Flags};

#[derive(Parser)]
#[command(
    name = "toolgate",
    version,
    about = "Runtime policy enforcement sidecar for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Forward proxy, admin API and control plane in one process on loopback: the embedded default.
    Up(RunArgs),
    /// The sidecar: the forward proxy and the admin API ({base_url}).
    Serve(RunArgs),
    /// The control plane alone ({control_plane_url}).
    ControlPlane(RunArgs),
    /// Policy pack tools.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Evidence tools.
    #[command(subcommand)]
    Ledger(LedgerCmd),
    /// The forward proxy's local certificate authority.
    #[command(subcommand)]
    Ca(CaCmd),
    /// API keys on the control plane (admin token).
    #[command(subcommand)]
    Keys(toolgate::cli::KeysCmd),
    /// STEP_UP holds waiting for approval on the control plane (admin token).
    #[command(subcommand)]
    Holds(toolgate::cli::HoldsCmd),
    /// Endpoints registered with the control plane (admin token).
    #[command(subcommand)]
    Endpoints(toolgate::cli::EndpointsCmd),
}

#[derive(Subcommand)]
enum CaCmd {
    /// Create the local CA (`ca.pem`, and `ca-key.pem` with mode 0600) that signs the leaf
    /// certificates of intercepted hosts. Agents must trust `ca.pem`.
    Init {
        /// Directory for the CA files.
        #[arg(long, env = "TOOLGATE_CA_DIR", default_value = "./certs")]
        dir: PathBuf,
        /// Replace an existing CA (agents must then trust the new certificate).
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// Load and validate the pack; warn about CEL rules that use optional fields without has().
    Check(PolicyArgs),
    /// Run the pack's tests (policy/tests/*.toml), like `opa test`.
    Test(PolicyArgs),
}

#[derive(Subcommand)]
enum LedgerCmd {
    /// Verify the hash chains and receipt signatures in a data dir (offline; stop toolgate first).
    Verify {
        /// Data directory.
        #[arg(long, env = "TOOLGATE_DATA_DIR", default_value = "./toolgate-data")]
        data_dir: PathBuf,
    },
}

#[derive(Args)]
struct PolicyArgs {
    /// Policy pack directory.
    #[arg(long = "policy", env = "TOOLGATE_POLICY", default_value = "./policy")]
    policy: PathBuf,
}

#[derive(Args)]
struct RunArgs {
    /// Data directory (default ./toolgate-data).
    #[arg(long, env = "TOOLGATE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Policy pack directory (default ./policy).
    #[arg(long = "policy", env = "TOOLGATE_POLICY")]
    policy: Option<PathBuf>,
    /// Admin listener (default 127.0.0.1:8181; port 0 = ephemeral).
    #[arg(long, env = "TOOLGATE_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Forward proxy listener (default 127.0.0.1:8180; `serve` and `up`).
    #[arg(long, env = "TOOLGATE_PROXY_LISTEN")]
    proxy_listen: Option<String>,
    /// Directory of the proxy's local CA (default ./certs; created at first start).
    #[arg(long, env = "TOOLGATE_CA_DIR")]
    ca_dir: Option<PathBuf>,
    /// Extra PEM root certificates to trust for upstream TLS, besides the system roots.
    #[arg(long, env = "TOOLGATE_UPSTREAM_CA")]
    upstream_ca: Option<PathBuf>,
    /// `serve`: the control plane to report to (check-ins, policy and key sync, event shipping,
    /// approvals); needs --tenant, --endpoint-id and TOOLGATE_CONTROL_PLANE_TOKEN.
    #[arg(long = "control-plane", env = "TOOLGATE_CONTROL_PLANE")]
    control_plane: Option<String>,
    /// The tenant this sidecar belongs to.
    #[arg(long = "tenant", env = "TOOLGATE_TENANT")]
    tenant: Option<String>,
    /// This host's endpoint id.
    #[arg(long, env = "TOOLGATE_ENDPOINT_ID")]
    endpoint_id: Option<String>,
    /// This host's fleet id.
    #[arg(long, env = "TOOLGATE_FLEET_ID")]
    fleet_id: Option<String>,
    /// Control-plane listener (default 127.0.0.1:8182).
    #[arg(long, env = "TOOLGATE_CONTROL_PLANE_LISTEN")]
    control_plane_listen: Option<String>,
    /// TOML config file.
    #[arg(long, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Write the bound addresses here as JSON once every listener is bound.
    #[arg(long, env = "TOOLGATE_READY_FILE")]
    ready_file: Option<PathBuf>,
}

impl RunArgs {
    fn flags(self) -> Flags {
        Flags {
            data_dir: self.data_dir,
            policy_dir: self.policy,
            admin_listen: self.admin_listen,
            proxy_listen: self.proxy_listen,
            control_plane_listen: self.control_plane_listen,
            config_file: self.config,
            ready_file: self.ready_file,
            ca_dir: self.ca_dir,
            upstream_ca: self.upstream_ca,
            control_plane_url: self.control_plane,
            tenant_id: self.tenant,
            endpoint_id: self.endpoint_id,
            fleet_id: self.fleet_id,
        }
    }
}

fn main() -> ExitCode {
    init_logging();
    match Cli::parse().cmd {
        Cmd::Up(a) => run(a, Role::Up),
        Cmd::Serve(a) => run(a, Role::Serve),
        Cmd::ControlPlane(a) => run(a, Role::ControlPlane),
        Cmd::Policy(PolicyCmd::Check(a)) => report(toolgate::policy::testing::check(&a.policy)),
        Cmd::Policy(PolicyCmd::Test(a)) => report(toolgate::policy::testing::run_tests(&a.policy)),
        Cmd::Ledger(LedgerCmd::Verify { data_dir }) => verify_ledger(&data_dir),
        Cmd::Ca(CaCmd::Init { dir, force }) => ca_init(&dir, force),
        Cmd::Keys(c) => operator(toolgate::cli::Command::Keys(c)),
        Cmd::Holds(c) => operator(toolgate::cli::Command::Holds(c)),
        Cmd::Endpoints(c) => operator(toolgate::cli::Command::Endpoints(c)),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

fn run(args: RunArgs, role: Role) -> ExitCode {
    let config = match Config::load(&args.flags()) {
        Ok(c) => c,
        Err(e) => return fail(64, &e.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(1, &format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(async move {
        let signals = match app::Signals::install() {
            Ok(s) => s,
            Err(e) => return fail(e.exit_code(), &e.to_string()),
        };
        match app::build(config, role).await {
            Ok(bound) => {
                bound.run_until_signal(signals).await;
                ExitCode::SUCCESS
            }
            Err(e) => fail(e.exit_code(), &e.to_string()),
        }
    })
}

/// An operator command (`keys`, `holds`, `endpoints`) on a current-thread runtime.
fn operator(cmd: toolgate::cli::Command) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(1, &format!("cannot start the runtime: {e}")),
    };
    match runtime.block_on(toolgate::cli::run(cmd)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e.exit_code(), &e.to_string()),
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("toolgate: {message}");
    ExitCode::from(code)
}

fn report<R: std::fmt::Display + Okay, E: std::fmt::Display>(result: Result<R, E>) -> ExitCode {
    match result {
        Ok(r) => {
            println!("{r}");
            if r.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => fail(64, &e.to_string()),
    }
}

fn ca_init(dir: &std::path::Path, force: bool) -> ExitCode {
    match toolgate::tls::LocalCa::init(dir, force) {
        Ok(ca) => {
            println!(
                "created the toolgate local CA: {}\ntrust it in agents, e.g. SSL_CERT_FILE / REQUESTS_CA_BUNDLE / NODE_EXTRA_CA_CERTS={}",
                ca.cert_path().display(),
                ca.cert_path().display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &e.to_string()),
    }
}

fn verify_ledger(data_dir: &std::path::Path) -> ExitCode {
    let store = match toolgate::store::Store::open(data_dir) {
        Ok(s) => s,
        Err(e) => return fail(1, &e.to_string()),
    };
    let pem = match std::fs::read_to_string(data_dir.join("receipt-signing.pub")) {
        Ok(p) => p,
        Err(e) => {
            return fail(
                1,
                &format!(
                    "cannot read {}/receipt-signing.pub: {e}",
                    data_dir.display()
                ),
            )
        }
    };
    report(toolgate::ledger::verify::verify(&store, &pem))
}

/// Reports that say whether they passed.
trait Okay {
    fn is_ok(&self) -> bool;
}

impl Okay for toolgate::policy::testing::CheckReport {
    fn is_ok(&self) -> bool {
        self.ok()
    }
}

impl Okay for toolgate::policy::testing::TestReport {
    fn is_ok(&self) -> bool {
        self.ok()
    }
}

impl Okay for toolgate::ledger::verify::VerifyReport {
    fn is_ok(&self) -> bool {
        self.ok()
    }
}
