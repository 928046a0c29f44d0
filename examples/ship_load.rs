//! Ledger shipping throughput (`bench/ship.sh`, BENCHMARKS.md "Ledger shipping"): how fast a
//! `toolgate serve` drains a backlog of N ledger entries into a `toolgate control-plane`.
//!
//! 1. Fill: a child process (this binary, `--fill DIR`) opens `DIR/data` and appends N events
//!    to the ledger in batches of 1,000 (the normalized events POST /v1/events/batch stores,
//!    about 0.9 KB per ledger entry), then flushes. A child, so the database lock is released
//!    by the OS before the sidecar opens the same dir.
//! 2. Starts `toolgate control-plane` (every listener on 127.0.0.1:0) and creates an
//!    organization key with read and write through the admin bearer.
//! 3. Starts `toolgate serve --control-plane URL --tenant bench --endpoint-id bench-ep` on the
//!    filled dir and times from the spawn until the control plane reports all N entries stored
//!    (`GET /bench/service/sync/events?endpoint_id=bench-ep`, polled every 20 ms) and the
//!    sidecar's /v1/health shows `shipping.backlog == 0` (its cursor only moves on answers,
//!    which the control plane sends after its flush).
//!
//! Output, one line on stdout (cpu = user+system seconds of each process over the drain):
//!
//! ```text
//! result events=500000 secs=10.60 events_per_s=47160 batch=2000 sidecar_cpu_s=3.2 cp_cpu_s=15.7
//! ```

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolgate::ledger::{Event, Ledger};
use toolgate::store::Store;

type Error = Box<dyn std::error::Error + Send + Sync>;

const ADMIN: &str = "bench-admin-token-0123456789";
const TENANT: &str = "bench";
const ENDPOINT: &str = "bench-ep";

#[derive(clap::Parser)]
#[command(about = "Times a sidecar shipping N ledger entries to a control plane")]
struct Args {
    /// Ledger entries to ship.
    #[arg(long, default_value_t = 500_000)]
    events: u64,
    /// The toolgate binary (a release build).
    #[arg(long, default_value = "target/release/toolgate")]
    bin: PathBuf,
    /// The policy pack both processes load.
    #[arg(long, default_value = "policy")]
    policy: PathBuf,
    /// TOOLGATE_SHIP_BATCH_SIZE for the sidecar (default: the setting's default, 2000).
    #[arg(long)]
    batch: Option<usize>,
    /// Keep the work dir and print its path.
    #[arg(long)]
    keep: bool,
    /// Internal: fill DIR's ledger with --events entries and exit.
    #[arg(long, hide = true)]
    fill: Option<PathBuf>,
}

fn main() -> Result<(), Error> {
    let args = <Args as clap::Parser>::parse();
    if let Some(dir) = &args.fill {
        return fill(dir, args.events);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

/// One realistic normalized event (~600 bytes of record).
fn event(i: u64) -> Result<Value, Error> {
    let args = json!({"to": format!("customer-{i}@example.com"), "subject": "Your order",
        "body": "Hello, your order has shipped and will arrive within three business days. Reply to this e-mail with any question."});
    let event = Event::from_json(
        0,
        &json!({
            "event_id": format!("evt-bench-{i:08}"),
            "tenant_id": TENANT, "session_id": format!("sess-{}", i / 50), "user_id": "user-17",
            "agent_id": "support-bot", "source_type": "agent_tool_call", "event_type": "TOOL_CALL_PRE",
            "tool_name": "email.send", "approved_scope": ["crm.lookup", "email.send"],
            "session_tool_calls": ["crm.lookup"], "enforcement_mode": "block",
            "content": args.to_string(), "occurred_at": "2026-11-21T10:00:00.000Z",
            "metadata": {"modelName": "gpt-4o", "promptTokens": 812, "completionTokens": 64}
        }),
    )?;
    Ok(serde_json::to_value(event)?)
}

fn fill(dir: &Path, n: u64) -> Result<(), Error> {
    let store = Store::open(&dir.join("data"))?;
    let ledger = Ledger::open(&store)?;
    let mut i = 0;
    while i < n {
        let chunk = (n - i).min(1000);
        let entries = (i..i + chunk)
            .map(|k| Ok(("TOOL_CALL_PRE".to_string(), event(k)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        ledger.append_batch(TENANT, entries)?;
        i += chunk;
    }
    store.flush_blocking()?;
    Ok(())
}

/// A toolgate child process and its ready file.
struct Proc {
    child: Child,
    ready: Value,
}

impl Proc {
    fn start(
        args: &Args,
        role: &str,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Proc, Error> {
        let ready_file = dir.join("ready.json");
        let _ = std::fs::remove_file(&ready_file);
        let mut cmd = Command::new(&args.bin);
        cmd.arg(role)
            .args([
                "--admin-listen",
                "127.0.0.1:0",
                "--control-plane-listen",
                "127.0.0.1:0",
            ])
            .args(["--proxy-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--policy")
            .arg(&args.policy)
            .arg("--ca-dir")
            .arg(dir.join("certs"))
            .arg("--ready-file")
            .arg(&ready_file)
            .args(extra)
            .env("TOOLGATE_ADMIN_TOKEN", ADMIN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let log = dir.join(format!("{role}.log"));
        std::thread::spawn(move || {
            let mut out = std::fs::File::create(log).ok();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = out.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let ready = loop {
            if let Ok(text) = std::fs::read_to_string(&ready_file) {
                if let Ok(v) = serde_json::from_str::<Value>(&text) {
                    break v;
                }
            }
            if let Some(status) = child.try_wait()? {
                return Err(format!("{role} exited with {status}; see {}", dir.display()).into());
            }
            if Instant::now() > deadline {
                return Err(format!("{role} did not become ready").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        Ok(Proc { child, ready })
    }

    fn url(&self, key: &str) -> String {
        self.ready[key].as_str().unwrap_or_default().to_string()
    }

    /// user+system CPU seconds so far (from /proc).
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / 100.0
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let work = tempfile::tempdir()?;
    let (cp_dir, sc_dir) = (work.path().join("cp"), work.path().join("sc"));
    std::fs::create_dir_all(&cp_dir)?;
    std::fs::create_dir_all(&sc_dir)?;
    let started = Instant::now();
    let status = Command::new(std::env::current_exe()?)
        .args(["--events", &args.events.to_string(), "--fill"])
        .arg(&sc_dir)
        .status()?;
    if !status.success() {
        return Err("fill failed".into());
    }
    eprintln!(
        "filled {} entries in {:.1} s",
        args.events,
        started.elapsed().as_secs_f64()
    );

    let cp = Proc::start(&args, "control-plane", &cp_dir, &[], &[])?;
    let cp_url = cp.url("control_plane_url");
    let http = reqwest::Client::new();
    let key: Value = http
        .post(format!("{cp_url}/{TENANT}/service/api-keys"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "bench-sidecar", "scope_level": "organization", "permissions": ["read", "write"]}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let token = key["key"].as_str().ok_or("no key")?.to_string();
    let batch = args.batch.map(|b| b.to_string());
    let mut env = vec![("TOOLGATE_CONTROL_PLANE_TOKEN", token.as_str())];
    if let Some(b) = &batch {
        env.push(("TOOLGATE_SHIP_BATCH_SIZE", b.as_str()));
    }
    let cp_cpu0 = cp.cpu_seconds();
    let link = [
        "--control-plane",
        &cp_url,
        "--tenant",
        TENANT,
        "--endpoint-id",
        ENDPOINT,
    ];
    let t0 = Instant::now();
    let sc = Proc::start(&args, "serve", &sc_dir, &link, &env)?;
    let stats_url = format!("{cp_url}/{TENANT}/service/sync/events?endpoint_id={ENDPOINT}");
    let health_url = format!("{}/v1/health", sc.url("admin_url"));
    let deadline = t0 + Duration::from_secs(600);
    loop {
        // Done when the control plane counts all N and the sidecar's backlog is empty: the
        // sidecar only moves its cursor on answers, which come after the control plane's flush.
        let stats: Value = http
            .get(&stats_url)
            .bearer_auth(ADMIN)
            .send()
            .await?
            .json()
            .await?;
        let health: Value = http.get(&health_url).send().await?.json().await?;
        let shipping = &health["shipping"];
        if stats["accepted"].as_u64() == Some(args.events) && shipping["backlog"] == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("not drained in time: {stats} {shipping}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let (sc_cpu, cp_cpu) = (sc.cpu_seconds(), cp.cpu_seconds() - cp_cpu0);
    println!(
        "result events={} secs={secs:.2} events_per_s={:.0} batch={} sidecar_cpu_s={sc_cpu:.1} cp_cpu_s={cp_cpu:.1}",
        args.events,
        args.events as f64 / secs,
        batch.as_deref().unwrap_or("2000"),
    );
    drop(sc);
    drop(cp);
    if args.keep {
        eprintln!("work dir kept: {}", work.keep().display());
    }
    Ok(())
}
