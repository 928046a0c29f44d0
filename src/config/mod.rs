//! Configuration: every setting, its default, and how it is layered (DESIGN.md, "CLI contract").
//!
//! Precedence: command-line flag > environment `TOOLGATE_<NAME>` > config file (`--config FILE`,
//! TOML, the same names in snake_case) > default. A bad value is a [`ConfigError`] naming the
//! field; the binary prints it on one line and exits with code 64.
//!
//! | field | flag | env | default |
//! |---|---|---|---|
//! | data_dir | --data-dir | TOOLGATE_DATA_DIR | `./toolgate-data` |
//! | policy_dir | --policy | TOOLGATE_POLICY | `./policy` |
//! | admin_listen | --admin-listen | TOOLGATE_ADMIN_LISTEN | `127.0.0.1:8181` |
//! | proxy_listen | --proxy-listen | TOOLGATE_PROXY_LISTEN | `127.0.0.1:8180` |
//! | control_plane_listen | --control-plane-listen | TOOLGATE_CONTROL_PLANE_LISTEN | `127.0.0.1:8182` |
//! | ready_file | --ready-file | TOOLGATE_READY_FILE | none |
//! | admin_token | — | TOOLGATE_ADMIN_TOKEN | generated into `<data-dir>/admin-token` |
//! | event_ingest_token | — | TOOLGATE_EVENT_INGEST_TOKEN | none (events use an execute key) |
//! | revoked_keys_file | — | TOOLGATE_REVOKED_KEYS_FILE | none |
//! | rate_limit_per_second | — | TOOLGATE_RATE_LIMIT_PER_SECOND | 200 per key (0 = off) |
//! | rate_limit_burst | — | TOOLGATE_RATE_LIMIT_BURST | 400 |
//! | max_body_bytes | — | TOOLGATE_MAX_BODY_BYTES | 1048576 |
//! | replay_protection | — | TOOLGATE_REPLAY_PROTECTION | true |
//! | replay_window_seconds | — | TOOLGATE_REPLAY_WINDOW_SECONDS | 300 |
//! | max_pending_holds | — | TOOLGATE_MAX_PENDING_HOLDS | 10000 |
//! | endpoint_id / fleet_id | --endpoint-id / --fleet-id | TOOLGATE_ENDPOINT_ID / TOOLGATE_FLEET_ID | none |
//! | organization_name | — | TOOLGATE_ORGANIZATION_NAME | none |
//! | dashboard_url | — | TOOLGATE_DASHBOARD_URL | none (explanations' request_url stays "") |
//! | shutdown_grace_seconds | — | TOOLGATE_SHUTDOWN_GRACE_SECONDS | 10 |
//! | ca_dir | --ca-dir | TOOLGATE_CA_DIR | `./certs` (the proxy's local CA; created at first start) |
//! | upstream_ca | --upstream-ca | TOOLGATE_UPSTREAM_CA | none (extra PEM roots for upstream TLS) |
//! | proxy_max_header_bytes | — | TOOLGATE_PROXY_MAX_HEADER_BYTES | 65536 |
//! | proxy_max_body_bytes | — | TOOLGATE_PROXY_MAX_BODY_BYTES | 4194304 (larger request bodies: 413) |
//! | proxy_idle_timeout_seconds | — | TOOLGATE_PROXY_IDLE_TIMEOUT_SECONDS | 90 |
//! | proxy_request_timeout_seconds | — | TOOLGATE_PROXY_REQUEST_TIMEOUT_SECONDS | 120 (upstream response headers) |
//! | max_held_requests | — | TOOLGATE_MAX_HELD_REQUESTS | 1024 (concurrent proxied calls held for approval) |
//! | control_plane_url | --control-plane | TOOLGATE_CONTROL_PLANE | none (`serve` reports to this control plane when set) |
//! | tenant_id | --tenant | TOOLGATE_TENANT | none (required with control_plane_url) |
//! | control_plane_token | — | TOOLGATE_CONTROL_PLANE_TOKEN | none (an organization key with read+write; required with control_plane_url) |
//! | checkin_interval_seconds | — | TOOLGATE_CHECKIN_INTERVAL_SECONDS | 30 |
//! | sync_interval_seconds | — | TOOLGATE_SYNC_INTERVAL_SECONDS | 5 (policy bundle / key snapshot polls, with ETag) |
//! | ship_batch_size | — | TOOLGATE_SHIP_BATCH_SIZE | 2000 (ledger entries per shipment) |
//! | stale_after_seconds | — | TOOLGATE_STALE_AFTER_SECONDS | 90 (control plane: an endpoint silent this long is stale) |
//!
//! The three tokens are secrets and are read from the environment only, never from the file.

mod validate;

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A configuration value that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {field}: {message}")]
pub struct ConfigError {
    /// The field (snake_case name).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    fn new(field: &str, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// Values given on the command line (clap fills these; `None` = not given).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// --data-dir
    pub data_dir: Option<PathBuf>,
    /// --policy
    pub policy_dir: Option<PathBuf>,
    /// --admin-listen
    pub admin_listen: Option<String>,
    /// --proxy-listen
    pub proxy_listen: Option<String>,
    /// --control-plane-listen
    pub control_plane_listen: Option<String>,
    /// --config
    pub config_file: Option<PathBuf>,
    /// --ready-file
    pub ready_file: Option<PathBuf>,
    /// --ca-dir
    pub ca_dir: Option<PathBuf>,
    /// --upstream-ca
    pub upstream_ca: Option<PathBuf>,
    /// --control-plane
    pub control_plane_url: Option<String>,
    /// --tenant
    pub tenant_id: Option<String>,
    /// --endpoint-id
    pub endpoint_id: Option<String>,
    /// --fleet-id
    pub fleet_id: Option<String>,
}

/// The config file's shape: every field optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    policy_dir: Option<PathBuf>,
    admin_listen: Option<String>,
    proxy_listen: Option<String>,
    control_plane_listen: Option<String>,
    ready_file: Option<PathBuf>,
    revoked_keys_file: Option<PathBuf>,
    rate_limit_per_second: Option<u32>,
    rate_limit_burst: Option<u32>,
    max_body_bytes: Option<usize>,
    replay_protection: Option<bool>,
    replay_window_seconds: Option<u64>,
    max_pending_holds: Option<usize>,
    endpoint_id: Option<String>,
    fleet_id: Option<String>,
    organization_name: Option<String>,
    dashboard_url: Option<String>,
    shutdown_grace_seconds: Option<u64>,
    ca_dir: Option<PathBuf>,
    upstream_ca: Option<PathBuf>,
    proxy_max_header_bytes: Option<usize>,
    proxy_max_body_bytes: Option<usize>,
    proxy_idle_timeout_seconds: Option<u64>,
    proxy_request_timeout_seconds: Option<u64>,
    max_held_requests: Option<usize>,
    control_plane_url: Option<String>,
    tenant_id: Option<String>,
    checkin_interval_seconds: Option<u64>,
    sync_interval_seconds: Option<u64>,
    ship_batch_size: Option<usize>,
    stale_after_seconds: Option<u64>,
}

/// The resolved configuration (see the module table for defaults).
#[derive(Debug, Clone)]
pub struct Config {
    /// Data directory (sled database, signing key, admin token).
    pub data_dir: PathBuf,
    /// Policy pack directory.
    pub policy_dir: PathBuf,
    /// Admin listener ({base_url}).
    pub admin_listen: SocketAddr,
    /// Forward proxy listener.
    pub proxy_listen: SocketAddr,
    /// Control-plane listener ({control_plane_url}).
    pub control_plane_listen: SocketAddr,
    /// Where to write the ready file once every listener is bound.
    pub ready_file: Option<PathBuf>,
    /// Control-plane admin bearer token (env only).
    pub admin_token: Option<String>,
    /// Dedicated event-ingest token (env only).
    pub event_ingest_token: Option<String>,
    /// Revocation file.
    pub revoked_keys_file: Option<PathBuf>,
    /// Sustained requests per second per key; 0 turns rate limits off.
    pub rate_limit_per_second: u32,
    /// Burst size per key.
    pub rate_limit_burst: u32,
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Drop event replays inside the window.
    pub replay_protection: bool,
    /// Replay window, seconds.
    pub replay_window_seconds: u64,
    /// Cap on pending holds; more STEP_UPs answer 503.
    pub max_pending_holds: usize,
    /// This sidecar's endpoint id (scope checks, attribution).
    pub endpoint_id: Option<String>,
    /// This sidecar's fleet id.
    pub fleet_id: Option<String>,
    /// Organization name used in explanations.
    pub organization_name: Option<String>,
    /// Dashboard base URL (fills explanations' request_url).
    pub dashboard_url: Option<String>,
    /// Bounded drain time on shutdown, seconds.
    pub shutdown_grace_seconds: u64,
    /// Directory of the proxy's local CA (`ca.pem`, `ca-key.pem`).
    pub ca_dir: PathBuf,
    /// Extra PEM root certificates trusted for upstream TLS, besides the system roots.
    pub upstream_ca: Option<PathBuf>,
    /// Largest request head (request line + headers) the proxy reads, bytes.
    pub proxy_max_header_bytes: usize,
    /// Largest request body the proxy inspects, bytes; larger bodies are refused with 413.
    pub proxy_max_body_bytes: usize,
    /// A proxy connection with no request in flight is closed after this many seconds.
    pub proxy_idle_timeout_seconds: u64,
    /// Longest wait for an upstream's response headers, seconds (504 after).
    pub proxy_request_timeout_seconds: u64,
    /// Cap on proxied calls held open for approval at once; more answer 503.
    pub max_held_requests: usize,
    /// The control plane this sidecar reports to (`serve --control-plane URL`).
    pub control_plane_url: Option<String>,
    /// The sidecar's tenant (required with `control_plane_url`).
    pub tenant_id: Option<String>,
    /// Credential the sidecar presents to the control plane (env only).
    pub control_plane_token: Option<String>,
    /// Seconds between check-ins.
    pub checkin_interval_seconds: u64,
    /// Seconds between policy bundle and key snapshot polls.
    pub sync_interval_seconds: u64,
    /// Ledger entries per shipment to the control plane.
    pub ship_batch_size: usize,
    /// Control plane: an endpoint without a check-in for this long is reported stale.
    pub stale_after_seconds: u64,
}

type Env = dyn Fn(&str) -> Option<String>;

impl Config {
    /// Layers flags, the process environment, the config file and defaults.
    pub fn load(flags: &Flags) -> Result<Config, ConfigError> {
        Self::load_with(flags, &|k| std::env::var(k).ok())
    }

    /// [`Config::load`] with an injectable environment (tests).
    pub fn load_with(flags: &Flags, env: &Env) -> Result<Config, ConfigError> {
        let config_path = flags
            .config_file
            .clone()
            .or_else(|| env("TOOLGATE_CONFIG").map(PathBuf::from));
        let file = match &config_path {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        let cfg = Config {
            data_dir: pick(
                flags.data_dir.clone(),
                env,
                "data_dir",
                file.data_dir,
                "./toolgate-data".into(),
            )?,
            policy_dir: pick(
                flags.policy_dir.clone(),
                env,
                "policy",
                file.policy_dir,
                "./policy".into(),
            )?,
            admin_listen: addr(
                flags.admin_listen.clone(),
                env,
                "admin_listen",
                file.admin_listen,
                "127.0.0.1:8181",
            )?,
            proxy_listen: addr(
                flags.proxy_listen.clone(),
                env,
                "proxy_listen",
                file.proxy_listen,
                "127.0.0.1:8180",
            )?,
            control_plane_listen: addr(
                flags.control_plane_listen.clone(),
                env,
                "control_plane_listen",
                file.control_plane_listen,
                "127.0.0.1:8182",
            )?,
            ready_file: opt(flags.ready_file.clone(), env, "ready_file", file.ready_file)?,
            admin_token: env("TOOLGATE_ADMIN_TOKEN").filter(|t| !t.is_empty()),
            event_ingest_token: env("TOOLGATE_EVENT_INGEST_TOKEN").filter(|t| !t.is_empty()),
            revoked_keys_file: opt(None, env, "revoked_keys_file", file.revoked_keys_file)?,
            rate_limit_per_second: pick(
                None,
                env,
                "rate_limit_per_second",
                file.rate_limit_per_second,
                200,
            )?,
            rate_limit_burst: pick(None, env, "rate_limit_burst", file.rate_limit_burst, 400)?,
            max_body_bytes: pick(
                None,
                env,
                "max_body_bytes",
                file.max_body_bytes,
                1024 * 1024,
            )?,
            replay_protection: pick(None, env, "replay_protection", file.replay_protection, true)?,
            replay_window_seconds: pick(
                None,
                env,
                "replay_window_seconds",
                file.replay_window_seconds,
                300,
            )?,
            max_pending_holds: pick(
                None,
                env,
                "max_pending_holds",
                file.max_pending_holds,
                10_000,
            )?,
            endpoint_id: opt(
                flags.endpoint_id.clone(),
                env,
                "endpoint_id",
                file.endpoint_id,
            )?,
            fleet_id: opt(flags.fleet_id.clone(), env, "fleet_id", file.fleet_id)?,
            organization_name: opt(None, env, "organization_name", file.organization_name)?,
            dashboard_url: opt(None, env, "dashboard_url", file.dashboard_url)?,
            shutdown_grace_seconds: pick(
                None,
                env,
                "shutdown_grace_seconds",
                file.shutdown_grace_seconds,
                10,
            )?,
            ca_dir: pick(
                flags.ca_dir.clone(),
                env,
                "ca_dir",
                file.ca_dir,
                "./certs".into(),
            )?,
            upstream_ca: opt(
                flags.upstream_ca.clone(),
                env,
                "upstream_ca",
                file.upstream_ca,
            )?,
            proxy_max_header_bytes: pick(
                None,
                env,
                "proxy_max_header_bytes",
                file.proxy_max_header_bytes,
                64 * 1024,
            )?,
            proxy_max_body_bytes: pick(
                None,
                env,
                "proxy_max_body_bytes",
                file.proxy_max_body_bytes,
                4 * 1024 * 1024,
            )?,
            proxy_idle_timeout_seconds: pick(
                None,
                env,
                "proxy_idle_timeout_seconds",
                file.proxy_idle_timeout_seconds,
                90,
            )?,
            proxy_request_timeout_seconds: pick(
                None,
                env,
                "proxy_request_timeout_seconds",
                file.proxy_request_timeout_seconds,
                120,
            )?,
            max_held_requests: pick(None, env, "max_held_requests", file.max_held_requests, 1024)?,
            control_plane_url: opt(
                flags.control_plane_url.clone(),
                env,
                "control_plane",
                file.control_plane_url,
            )?,
            tenant_id: opt(flags.tenant_id.clone(), env, "tenant", file.tenant_id)?,
            control_plane_token: env("TOOLGATE_CONTROL_PLANE_TOKEN").filter(|t| !t.is_empty()),
            checkin_interval_seconds: pick(
                None,
                env,
                "checkin_interval_seconds",
                file.checkin_interval_seconds,
                30,
            )?,
            sync_interval_seconds: pick(
                None,
                env,
                "sync_interval_seconds",
                file.sync_interval_seconds,
                5,
            )?,
            ship_batch_size: pick(None, env, "ship_batch_size", file.ship_batch_size, 2000)?,
            stale_after_seconds: pick(
                None,
                env,
                "stale_after_seconds",
                file.stale_after_seconds,
                90,
            )?,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("config", format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text)
        .map_err(|e| ConfigError::new("config", format!("{}: {}", path.display(), e.message())))
}

/// flag > env `TOOLGATE_<FIELD>` > file > default.
fn pick<T: FromStr>(
    flag: Option<T>,
    env: &Env,
    field: &str,
    file: Option<T>,
    default: T,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    Ok(opt(flag, env, field, file)?.unwrap_or(default))
}

fn opt<T: FromStr>(
    flag: Option<T>,
    env: &Env,
    field: &str,
    file: Option<T>,
) -> Result<Option<T>, ConfigError>
where
    T::Err: std::fmt::Display,
{
    if flag.is_some() {
        return Ok(flag);
    }
    let key = format!("TOOLGATE_{}", field.to_ascii_uppercase());
    match env(&key).filter(|v| !v.is_empty()) {
        Some(raw) => raw
            .parse::<T>()
            .map(Some)
            .map_err(|e| ConfigError::new(field, format!("`{raw}` from {key}: {e}"))),
        None => Ok(file),
    }
}

fn addr(
    flag: Option<String>,
    env: &Env,
    field: &str,
    file: Option<String>,
    default: &str,
) -> Result<SocketAddr, ConfigError> {
    let raw = pick(flag, env, field, file, default.to_string())?;
    raw.parse().map_err(|_| {
        ConfigError::new(
            field,
            format!("`{raw}` is not a socket address like 127.0.0.1:8181"),
        )
    })
}

#[cfg(test)]
mod tests;
