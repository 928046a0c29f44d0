//! Wiring only: opens storage, loads the policy, builds [`Core`], binds every listener of the
//! requested role and returns the bound addresses ([`Bound`]). `main` and the integration tests
//! both start toolgate through [`build`].

use crate::auth::{KeyStore, RateLimits, RevokedFile, RevokedSet};
use crate::config::Config;
use crate::explain::{Explainer, Organization};
use crate::holds::HoldBook;
use crate::ledger::{IngestConfig, Ingestor, Ledger, ReceiptLog};
use crate::policy::{PolicyHandle, PolicySnapshot};
use crate::sessions::SessionUsage;
use crate::state::{AppState, Core};
use crate::store::Store;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod secrets;

/// Which listeners a process runs (DESIGN.md, "The three roles, one binary").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Proxy, admin and control plane on one core (the embedded default).
    Up,
    /// The sidecar: proxy and admin listeners.
    Serve,
    /// The control plane alone.
    ControlPlane,
}

/// Why the process could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Bad configuration or policy pack: exit code 64.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Anything else (storage locked, address in use): exit code 1.
    #[error("{0}")]
    Runtime(String),
}

impl BuildError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            BuildError::Config(_) => 64,
            BuildError::Runtime(_) => 1,
        }
    }
}

/// The process signals toolgate handles: SIGTERM and SIGINT stop, SIGHUP reloads the policy.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; call inside the runtime, before [`build`].
    ///
    /// Errors: `Runtime` when the OS refuses a handler.
    pub fn install() -> Result<Signals, BuildError> {
        use tokio::signal::unix::{signal, SignalKind};
        let sig = |k| signal(k).map_err(|e| BuildError::Runtime(format!("signal handler: {e}")));
        Ok(Signals {
            term: sig(SignalKind::terminate())?,
            int: sig(SignalKind::interrupt())?,
            hup: sig(SignalKind::hangup())?,
        })
    }
}

/// A running toolgate: bound addresses plus the means to stop it.
pub struct Bound {
    /// Admin listener ({base_url}), when the role runs it.
    pub admin_addr: Option<SocketAddr>,
    /// Control-plane listener ({control_plane_url}), when the role runs it.
    pub control_plane_addr: Option<SocketAddr>,
    /// Forward proxy listener (`proxy_url`), when the role runs it.
    pub proxy_addr: Option<SocketAddr>,
    /// The shared state (tests read it; keep clones short-lived so shutdown can release storage).
    pub core: AppState,
    shutdown_tx: watch::Sender<bool>,
    servers: Vec<JoinHandle<()>>,
    /// The proxy's event recorder, closed at shutdown before the final flush.
    proxy_events: Option<Arc<crate::proxy::Recorder>>,
}

/// Longest wait at shutdown for the proxy's queued events and unsigned receipts to be written.
pub const SETTLE_SECONDS: u64 = 5;

/// Opens everything and binds the role's listeners. Every listener is bound before it returns,
/// and the ready file (if configured) is written last.
pub async fn build(config: Config, role: Role) -> Result<Bound, BuildError> {
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let revoked_file = match &config.revoked_keys_file {
        Some(path) => Some(RevokedFile::load(path).map_err(BuildError::Config)?),
        None => None,
    };
    let revoked = revoked_file
        .as_ref()
        .map(RevokedFile::set)
        .unwrap_or_default();
    let core = Arc::new(open_core(config, revoked, shutdown_rx.clone())?);
    // Before `restore`, so the callbacks of holds that time out at once are not missed.
    let webhook_tasks = match role {
        Role::Up | Role::ControlPlane => {
            crate::control_plane::webhooks::start(&core, shutdown_rx.clone())
        }
        Role::Serve => Vec::new(),
    };
    let restored = core
        .holds
        .restore()
        .map_err(|e| BuildError::Runtime(e.to_string()))?;
    if restored > 0 {
        tracing::info!(pending = restored, "re-armed pending holds from storage");
    }
    spawn_background(&core, revoked_file, shutdown_rx.clone());
    let mut servers = webhook_tasks;
    if role != Role::ControlPlane {
        // Joined with the listeners at shutdown, so storage is released when `shutdown` returns.
        servers.extend(crate::link::shipper::spawn(&core, shutdown_rx.clone()));
        let link = crate::link::spawn(&core, &shutdown_rx)
            .map_err(|e| BuildError::Config(format!("control_plane: {e}")))?;
        servers.extend(link);
    }
    let admin_addr = match role {
        Role::Up | Role::Serve => Some(
            serve(
                &mut servers,
                core.config.admin_listen,
                crate::api::router(core.clone()),
                &shutdown_rx,
            )
            .await?,
        ),
        Role::ControlPlane => None,
    };
    let control_plane_addr = match role {
        Role::Up | Role::ControlPlane => Some(
            serve(
                &mut servers,
                core.config.control_plane_listen,
                crate::control_plane::router(core.clone()),
                &shutdown_rx,
            )
            .await?,
        ),
        Role::Serve => None,
    };
    let mut proxy_events = None;
    let proxy_addr = match role {
        Role::Up | Role::Serve => {
            let (addr, task, events) = crate::proxy::bind(core.clone(), shutdown_rx.clone())
                .await
                .map_err(|e| match e {
                    crate::proxy::ProxyError::Tls(t) => {
                        BuildError::Config(format!("ca_dir/upstream_ca: {t}"))
                    }
                    other => BuildError::Runtime(other.to_string()),
                })?;
            servers.push(task);
            proxy_events = Some(events);
            Some(addr)
        }
        Role::ControlPlane => None,
    };
    let bound = Bound {
        admin_addr,
        control_plane_addr,
        proxy_addr,
        core,
        shutdown_tx,
        servers,
        proxy_events,
    };
    bound.announce()?;
    Ok(bound)
}

fn open_core(
    mut config: Config,
    revoked: RevokedSet,
    shutdown: watch::Receiver<bool>,
) -> Result<Core, BuildError> {
    let rt = |e: &dyn std::fmt::Display| BuildError::Runtime(e.to_string());
    secrets::ensure_data_dir(&config.data_dir).map_err(|e| rt(&e))?;
    let policy_ready = crate::link::bundle::startup_policy(&mut config).map_err(|e| rt(&e))?;
    let snapshot = PolicySnapshot::load(&config.policy_dir)
        .map_err(|e| BuildError::Config(format!("policy: {e}")))?;
    let store = Store::open(&config.data_dir).map_err(|e| rt(&e))?;
    let receipts = Arc::new(ReceiptLog::open(&store, &config.data_dir).map_err(|e| rt(&e))?);
    let org = Organization {
        name: config.organization_name.clone(),
        dashboard_url: config.dashboard_url.clone(),
    };
    let explainer = Explainer::load(&config.policy_dir.join("explanations"), org, &store)
        .map_err(|e| BuildError::Config(format!("policy: {e}")))?;
    let ingest = IngestConfig {
        replay_protection: config.replay_protection,
        replay_window: Duration::from_secs(config.replay_window_seconds),
    };
    Ok(Core {
        admin_token: secrets::admin_token(&config).map_err(|e| rt(&e))?,
        keys: KeyStore::open(&store, revoked).map_err(|e| rt(&e))?,
        limits: RateLimits::new(config.rate_limit_per_second, config.rate_limit_burst),
        holds: Arc::new(HoldBook::new(
            &store,
            receipts.clone(),
            config.max_pending_holds,
            shutdown,
        )),
        ledger: Ledger::open(&store).map_err(|e| rt(&e))?,
        ingestor: Ingestor::new(&store, ingest),
        policy: PolicyHandle::new(snapshot),
        sessions: SessionUsage::default(),
        receipts,
        explainer,
        relay: crate::control_plane::sync::relay::Relay::new(&store),
        endpoints: crate::control_plane::endpoints::Endpoints::new(&store),
        webhooks: Arc::new(
            crate::control_plane::webhooks::Webhooks::new(&store, config.upstream_ca.as_deref())
                .map_err(|e| BuildError::Config(format!("upstream_ca: {e}")))?,
        ),
        shipping: match &config.control_plane_url {
            Some(_) => Some(Arc::new(
                crate::link::shipper::ShipStatus::load(&store).map_err(|e| rt(&e))?,
            )),
            None => None,
        },
        policy_ready: std::sync::atomic::AtomicBool::new(policy_ready),
        activity: Default::default(),
        link: config
            .control_plane_url
            .as_ref()
            .map(|_| Default::default()),
        store,
        config,
    })
}

fn spawn_background(
    core: &AppState,
    revoked_file: Option<RevokedFile>,
    shutdown: watch::Receiver<bool>,
) {
    if let Some(file) = revoked_file {
        tokio::spawn(file.watch(shutdown.clone()));
    }
    let weak = Arc::downgrade(core);
    let mut stop = shutdown;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! { _ = tick.tick() => {}, _ = stop.changed() => return }
            let Some(core) = weak.upgrade() else { return };
            core.limits.prune();
        }
    });
}

async fn serve(
    servers: &mut Vec<JoinHandle<()>>,
    addr: SocketAddr,
    router: axum::Router,
    shutdown: &watch::Receiver<bool>,
) -> Result<SocketAddr, BuildError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| BuildError::Runtime(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| BuildError::Runtime(e.to_string()))?;
    let mut stop = shutdown.clone();
    servers.push(tokio::spawn(async move {
        let signal = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(signal)
            .await
        {
            tracing::error!(error = %e, "listener failed");
        }
    }));
    Ok(local)
}

impl Bound {
    /// `{"admin_url": …, "control_plane_url": …, "proxy_url": …}` for the listeners this role runs.
    pub fn ready_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        if let Some(a) = self.admin_addr {
            m.insert("admin_url".into(), format!("http://{a}").into());
        }
        if let Some(a) = self.control_plane_addr {
            m.insert("control_plane_url".into(), format!("http://{a}").into());
        }
        if let Some(a) = self.proxy_addr {
            m.insert("proxy_url".into(), format!("http://{a}").into());
        }
        serde_json::Value::Object(m)
    }

    fn announce(&self) -> Result<(), BuildError> {
        let ready = self.ready_json();
        if let Some(path) = &self.core.config.ready_file {
            secrets::write_atomically(path, ready.to_string().as_bytes()).map_err(|e| {
                BuildError::Runtime(format!("cannot write ready file {}: {e}", path.display()))
            })?;
        }
        tracing::info!(addresses = %ready, "toolgate ready");
        Ok(())
    }

    /// Stops accepting, drains in-flight requests (bounded by `shutdown_grace_seconds`), writes
    /// the proxy's queued events and the receipts nobody waited for (bounded by
    /// [`SETTLE_SECONDS`]), flushes storage. Returns once the listeners are closed.
    pub async fn shutdown(self) {
        let grace = Duration::from_secs(self.core.config.shutdown_grace_seconds);
        self.shutdown_tx.send_replace(true);
        let drain = futures_join_all(self.servers);
        if tokio::time::timeout(grace, drain).await.is_err() {
            tracing::warn!("shutdown grace passed with requests still in flight");
        }
        let settle = async {
            if let Some(events) = &self.proxy_events {
                events.close().await;
            }
            self.core.receipts.settle().await;
        };
        let settle_for = Duration::from_secs(SETTLE_SECONDS);
        if tokio::time::timeout(settle_for, settle).await.is_err() {
            tracing::error!("receipts or proxy events were still being written at the final flush");
        }
        if let Err(e) = self.core.store.flush().await {
            tracing::error!(error = %e, "final flush failed");
        }
        tracing::info!("toolgate stopped");
    }

    /// Runs until SIGTERM or SIGINT, then [`Bound::shutdown`]. SIGHUP reloads the policy pack
    /// (a pack that fails to load is refused and the previous one stays). The handlers were
    /// installed by [`Signals::install`] before [`build`], so no signal sent after the ready
    /// file appears can hit the default action.
    pub async fn run_until_signal(self, mut signals: Signals) {
        loop {
            tokio::select! {
                _ = signals.term.recv() => break,
                _ = signals.int.recv() => break,
                _ = signals.hup.recv() => self.reload_policy(),
            }
        }
        self.shutdown().await;
    }

    /// Reloads the policy pack from the configured directory.
    pub fn reload_policy(&self) {
        match self.core.policy.reload(&self.core.config.policy_dir) {
            Ok(v) => tracing::info!(policy_version = %v.label(), "policy reloaded"),
            Err(e) => {
                tracing::error!(error = %e, "policy reload refused; keeping the previous pack")
            }
        }
    }
}

async fn futures_join_all(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}
