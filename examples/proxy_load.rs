//! A closed-loop load generator for the forward-proxy benchmark (`bench/proxy.sh`).
//!
//! Each of `-c` connections sends `POST <url>` with a small JSON body (or `--method GET`), waits for the whole
//! response, and sends the next one on the same keep-alive connection (HTTP/1.1). wrk does the
//! same for plain HTTP, but it cannot open a CONNECT tunnel, so this tool measures every case
//! that involves TLS, and can measure the plain ones too so that a single connection's latency
//! is taken the same way everywhere:
//!
//! | `--url`    | `--proxy` | what one connection does |
//! |------------|-----------|--------------------------|
//! | `http://`  | none      | TCP to the upstream, origin-form requests |
//! | `http://`  | given     | TCP to the proxy, absolute-form requests (`POST http://host:port/tool`) |
//! | `https://` | none      | TLS to the upstream |
//! | `https://` | given     | `CONNECT host:port` through the proxy once, then TLS inside the tunnel (a plain tunnel for squid or tinyproxy; toolgate terminates it with a leaf of its CA) |
//!
//! `--proxy-auth agent:KEY` adds `Proxy-Authorization: Basic …` to every plain request and to
//! the CONNECT. `--ca FILE` is the PEM root the TLS client trusts: the upstream's CA for direct
//! calls and plain tunnels, toolgate's CA (`<ca-dir>/ca.pem`) for intercepted ones.
//!
//! Output, one line on stdout (`us` = microseconds, `rps` = completed 2xx requests per second):
//!
//! ```text
//! result label=toolgate-https mode=https-connect conns=1 secs=5.00 requests=41012 errors=0 rps=8202.4 p50_us=118 p90_us=131 p99_us=190 max_us=2410
//! ```
//!
//! `--hold N` instead opens N connections that each send one request (meant to be held for
//! approval by a `step_up` rule), `--hold-rate` of them per second (default: all at once),
//! prints `holding N` once every request is written, keeps them open for `--hold-secs` and then
//! prints how many got an answer. With `--hold-idle` the connections send nothing.

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(clap::Parser, Clone)]
#[command(about = "Closed-loop HTTP/1.1 keep-alive load through a forward proxy (or direct)")]
struct Args {
    /// Target: http://host:port/path or https://host:port/path.
    #[arg(long)]
    url: Uri,
    /// Forward proxy, http://host:port. Without it (or with --direct) requests go straight to
    /// the upstream.
    #[arg(long, conflicts_with = "direct")]
    proxy: Option<Uri>,
    /// Go straight to the upstream (the default when --proxy is absent; spelled out in scripts).
    #[arg(long)]
    direct: bool,
    /// `agent_id:KEY` for Proxy-Authorization (Basic).
    #[arg(long)]
    proxy_auth: Option<String>,
    /// PEM file of the CA the TLS client trusts.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Concurrent connections.
    #[arg(short = 'c', long, default_value_t = 1)]
    connections: usize,
    /// Measured seconds.
    #[arg(short = 'd', long, default_value_t = 5.0)]
    duration: f64,
    /// Unmeasured seconds first (connections, TLS handshakes, caches).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Request method: POST (with --body) or GET (no body).
    #[arg(long, default_value = "POST")]
    method: Method,
    /// Request body (JSON).
    #[arg(
        long,
        default_value = r#"{"customer_id":"C-1042","note":"call back tomorrow","fields":["name","plan"]}"#
    )]
    body: String,
    /// Name printed in the result line.
    #[arg(long, default_value = "run")]
    label: String,
    /// Hold mode: open N connections with one (held) request each.
    #[arg(long)]
    hold: Option<usize>,
    /// Hold mode: how long to keep the connections open.
    #[arg(long, default_value_t = 60.0)]
    hold_secs: f64,
    /// Hold mode: only open the connections (CONNECT and TLS for https://), send nothing: the
    /// cost of an idle connection, to set against a held request's.
    #[arg(long)]
    hold_idle: bool,
    /// Hold mode: held requests started per second (0: all at once).
    #[arg(long, default_value_t = 0.0)]
    hold_rate: f64,
}

/// What every connection needs, resolved once.
struct Plan {
    https: bool,
    /// host:port of the upstream.
    authority: String,
    host: String,
    /// Where the TCP connection goes: the proxy, or the upstream.
    connect_to: String,
    via_proxy: bool,
    /// The request-target: absolute-form for plain HTTP through a proxy, else origin-form.
    target: Uri,
    proxy_auth: Option<String>,
    tls: Option<tokio_rustls::TlsConnector>,
    method: Method,
    body: Bytes,
}

impl Plan {
    fn new(a: &Args) -> Result<Plan, Error> {
        let https = match a.url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("--url must be http:// or https://".into()),
        };
        let auth = a.url.authority().ok_or("--url needs host:port")?;
        let port = auth.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host = auth
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let authority = format!("{}:{port}", auth.host());
        let via_proxy = a.proxy.is_some() && !a.direct;
        let connect_to = match (&a.proxy, via_proxy) {
            (Some(p), true) => {
                let pa = p.authority().ok_or("--proxy needs host:port")?;
                format!("{}:{}", pa.host(), pa.port_u16().unwrap_or(80))
            }
            _ => authority.clone(),
        };
        let path = a.url.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let target: Uri = if via_proxy && !https {
            format!("http://{authority}{path}").parse()?
        } else {
            path.parse()?
        };
        let proxy_auth = a.proxy_auth.as_ref().map(|c| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(c)
            )
        });
        let tls = if https {
            let mut roots = rustls::RootCertStore::empty();
            let ca = a.ca.as_ref().ok_or("https:// needs --ca")?;
            for cert in CertificateDer::pem_file_iter(ca)? {
                roots.add(cert?)?;
            }
            let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
        } else {
            None
        };
        Ok(Plan {
            https,
            authority,
            host,
            connect_to,
            via_proxy,
            target,
            proxy_auth,
            tls,
            body: if a.method == Method::GET || a.method == Method::HEAD {
                Bytes::new()
            } else {
                Bytes::from(a.body.clone())
            },
            method: a.method.clone(),
        })
    }

    fn mode(&self) -> &'static str {
        match (self.https, self.via_proxy) {
            (false, false) => "http-direct",
            (false, true) => "http-proxy",
            (true, false) => "https-direct",
            (true, true) => "https-connect",
        }
    }

    /// A connection ready for requests: TCP (+ CONNECT) (+ TLS) + an HTTP/1.1 handshake.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Error> {
        let mut tcp = TcpStream::connect(&self.connect_to).await?;
        tcp.set_nodelay(true)?;
        if !self.https {
            return handshake(tcp).await;
        }
        if self.via_proxy {
            self.open_tunnel(&mut tcp).await?;
        }
        let name = ServerName::try_from(self.host.clone())?;
        let tls = self
            .tls
            .as_ref()
            .ok_or("no TLS config")?
            .connect(name, tcp)
            .await?;
        handshake(tls).await
    }

    /// Sends `CONNECT authority` and reads the proxy's answer head; only a 2xx opens the tunnel.
    /// The TLS client speaks first, so nothing follows the head until then.
    async fn open_tunnel(&self, tcp: &mut TcpStream) -> Result<(), Error> {
        let mut head = format!("CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n", a = self.authority);
        if let Some(auth) = &self.proxy_auth {
            head.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
        }
        head.push_str("\r\n");
        tcp.write_all(head.as_bytes()).await?;
        let mut buf = Vec::with_capacity(512);
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if tcp.read(&mut byte).await? == 0 {
                return Err("proxy closed the connection during CONNECT".into());
            }
            buf.push(byte[0]);
            if buf.len() > 16 * 1024 {
                return Err("CONNECT answer head too long".into());
            }
        }
        let text = String::from_utf8_lossy(&buf);
        let status = text.split_whitespace().nth(1).unwrap_or("");
        if !status.starts_with('2') {
            return Err(format!("CONNECT refused: {}", text.lines().next().unwrap_or("")).into());
        }
        Ok(())
    }

    fn request(&self) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(self.target.clone())
            .header(hyper::header::HOST, &self.authority);
        if !self.body.is_empty() {
            b = b.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        if self.via_proxy && !self.https {
            if let Some(auth) = &self.proxy_auth {
                b = b.header(hyper::header::PROXY_AUTHORIZATION, auth);
            }
        }
        b.body(Full::new(self.body.clone())).expect("valid request")
    }
}

async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>, Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// What one request gave.
struct Outcome {
    /// A 2xx answer with its body read.
    ok: bool,
    /// The server closes the connection after this answer (`Connection: close`, as tinyproxy
    /// does to every client): the next request needs a new connection.
    closes: bool,
}

/// One request on `sender`, its answer read to the end.
async fn one(
    plan: &Plan,
    sender: &mut SendRequest<Full<Bytes>>,
    first_error: &AtomicU64,
) -> Result<Outcome, Error> {
    sender.ready().await?;
    let resp = sender.send_request(plan.request()).await?;
    let status = resp.status();
    let closes = resp
        .headers()
        .get_all(hyper::header::CONNECTION)
        .iter()
        .any(|v| {
            v.to_str()
                .is_ok_and(|v| v.to_ascii_lowercase().contains("close"))
        });
    let body = resp.into_body().collect().await?.to_bytes();
    if !status.is_success() && first_error.fetch_add(1, Ordering::Relaxed) == 0 {
        eprintln!(
            "proxy_load: first non-2xx answer: {status} {}",
            String::from_utf8_lossy(&body[..body.len().min(400)])
        );
    }
    Ok(Outcome {
        ok: status.is_success(),
        closes,
    })
}

/// One closed-loop connection until `end`; latencies (µs) of the 2xx answers completed in
/// [start, end]. When the server closed the connection after an answer, the new connection's
/// set-up (TCP, CONNECT, TLS) is part of the next request's latency: that is what a client pays
/// per request there; the same when it closed the connection silently and the request failed on
/// the dead connection (it is retried once on a new one, not counted as an error). A connection
/// set up at the start or after an error is not timed.
async fn worker(
    plan: Arc<Plan>,
    start: Instant,
    end: Instant,
    errors: Arc<AtomicU64>,
    first: Arc<AtomicU64>,
) -> Vec<u32> {
    let mut lat = Vec::with_capacity(1 << 16);
    let mut sender: Option<SendRequest<Full<Bytes>>> = None;
    let mut reconnect_at: Option<Instant> = None;
    // Answers received on the current connection.
    let mut served = 0u64;
    while Instant::now() < end {
        let s = match sender.as_mut() {
            Some(s) => s,
            None => match plan.connect().await {
                Ok(s) => {
                    served = 0;
                    sender.insert(s)
                }
                Err(e) => {
                    reconnect_at = None;
                    if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("proxy_load: connect: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let t0 = reconnect_at.take().unwrap_or_else(Instant::now);
        match one(&plan, s, &first).await {
            Ok(out) => {
                served += 1;
                let t1 = Instant::now();
                if t0 >= start && t1 <= end {
                    if out.ok {
                        lat.push(u32::try_from((t1 - t0).as_micros()).unwrap_or(u32::MAX));
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if out.closes {
                    sender = None;
                    reconnect_at = Some(Instant::now());
                }
            }
            Err(e) => {
                sender = None;
                if served > 0 {
                    // The server closed a kept-alive connection without saying so (tinyproxy
                    // does this after every answer): retry once on a new connection, timed
                    // from this attempt, as HTTP clients do.
                    reconnect_at = Some(t0);
                    served = 0;
                    continue;
                }
                if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                    eprintln!("proxy_load: request: {e}");
                }
            }
        }
    }
    lat
}

fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

async fn load(args: Args, plan: Arc<Plan>) -> Result<(), Error> {
    let errors = Arc::new(AtomicU64::new(0));
    let first = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + Duration::from_secs_f64(args.warmup);
    let end = start + Duration::from_secs_f64(args.duration);
    let tasks: Vec<_> = (0..args.connections)
        .map(|_| {
            tokio::spawn(worker(
                plan.clone(),
                start,
                end,
                errors.clone(),
                first.clone(),
            ))
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await?);
    }
    all.sort_unstable();
    let secs = args.duration;
    println!(
        "result label={} mode={} conns={} secs={secs:.2} requests={} errors={} rps={:.1} p50_us={} p90_us={} p99_us={} max_us={}",
        args.label,
        plan.mode(),
        args.connections,
        all.len(),
        errors.load(Ordering::Relaxed),
        all.len() as f64 / secs,
        percentile(&all, 0.50),
        percentile(&all, 0.90),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or(0),
    );
    Ok(())
}

/// Opens `n` connections with one request each, keeps them open, reports answers.
async fn hold(args: Args, plan: Arc<Plan>, n: usize) -> Result<(), Error> {
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(n.max(1));
    let gate = Arc::new(tokio::sync::Semaphore::new(32));
    let (idle, hold_secs) = (args.hold_idle, args.hold_secs + 1.0);
    let pace = (args.hold_rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.hold_rate));
    for i in 0..n {
        if let (Some(p), true) = (pace, i > 0) {
            tokio::time::sleep(p).await;
        }
        let (plan, answered, failed, tx, gate) = (
            plan.clone(),
            answered.clone(),
            failed.clone(),
            tx.clone(),
            gate.clone(),
        );
        tokio::spawn(async move {
            let permit = gate.acquire_owned().await;
            let mut sender = match plan.connect().await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("proxy_load: hold connect: {e}");
                    failed.fetch_add(1, Ordering::Relaxed);
                    let _ = tx.send(()).await;
                    return;
                }
            };
            drop(permit);
            if idle {
                let _ = tx.send(()).await;
                tokio::time::sleep(Duration::from_secs_f64(hold_secs)).await;
                drop(sender);
                return;
            }
            if sender.ready().await.is_err() {
                failed.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send(()).await;
                return;
            }
            let fut = sender.send_request(plan.request());
            // The request is written by the connection task; count it as sent now and keep
            // the sender (and so the connection) alive until the answer or the end.
            let _ = tx.send(()).await;
            match fut.await {
                Ok(resp) => {
                    if answered.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("proxy_load: a held request was answered: {}", resp.status());
                    }
                }
                Err(_) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            drop(sender);
        });
    }
    drop(tx);
    for _ in 0..n {
        if rx.recv().await.is_none() {
            break;
        }
    }
    println!("holding {n} failed={}", failed.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs_f64(args.hold_secs)).await;
    println!(
        "hold done answered={} failed={}",
        answered.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    Ok(())
}

fn main() -> Result<(), Error> {
    let args = <Args as clap::Parser>::parse();
    let plan = Arc::new(Plan::new(&args)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match args.hold {
            Some(n) => hold(args, plan, n).await,
            None => load(args, plan).await,
        }
    })
}
