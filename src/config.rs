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
//! | endpoint_id / fleet_id | — | TOOLGATE_ENDPOINT_ID / TOOLGATE_FLEET_ID | none |
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
//!
//! The two tokens are secrets and are read from the environment only, never from the file.

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
            endpoint_id: opt(None, env, "endpoint_id", file.endpoint_id)?,
            fleet_id: opt(None, env, "fleet_id", file.fleet_id)?,
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
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_body_bytes < 1024 {
            return Err(ConfigError::new("max_body_bytes", "must be at least 1024"));
        }
        if self.replay_protection && self.replay_window_seconds == 0 {
            return Err(ConfigError::new(
                "replay_window_seconds",
                "must be positive while replay_protection is on",
            ));
        }
        if self.proxy_max_header_bytes < 8192 {
            return Err(ConfigError::new(
                "proxy_max_header_bytes",
                "must be at least 8192",
            ));
        }
        if self.proxy_max_body_bytes < 1024 {
            return Err(ConfigError::new(
                "proxy_max_body_bytes",
                "must be at least 1024",
            ));
        }
        for (field, v) in [
            (
                "proxy_idle_timeout_seconds",
                self.proxy_idle_timeout_seconds,
            ),
            (
                "proxy_request_timeout_seconds",
                self.proxy_request_timeout_seconds,
            ),
            ("max_held_requests", self.max_held_requests as u64),
        ] {
            if v == 0 {
                return Err(ConfigError::new(field, "must be positive"));
            }
        }
        if self.max_pending_holds == 0 {
            return Err(ConfigError::new("max_pending_holds", "must be positive"));
        }
        if let Some(url) = &self.dashboard_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(
                    "dashboard_url",
                    format!("`{url}` is not an http(s) URL"),
                ));
            }
        }
        Ok(())
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
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_apply_when_nothing_is_given() {
        let c = Config::load_with(&Flags::default(), &env_of(&[])).unwrap();
        assert_eq!(c.admin_listen.to_string(), "127.0.0.1:8181");
        assert_eq!(c.data_dir, PathBuf::from("./toolgate-data"));
        assert!(c.replay_protection && c.admin_token.is_none());
    }

    #[test]
    fn flag_beats_env_beats_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.toml");
        std::fs::write(
            &file,
            "admin_listen = \"127.0.0.1:1\"\nrate_limit_per_second = 7\nfleet_id = \"f-file\"\n",
        )
        .unwrap();
        let flags = Flags {
            config_file: Some(file),
            admin_listen: Some("127.0.0.1:3".into()),
            ..Flags::default()
        };
        let env = env_of(&[
            ("TOOLGATE_ADMIN_LISTEN", "127.0.0.1:2"),
            ("TOOLGATE_FLEET_ID", "f-env"),
        ]);
        let c = Config::load_with(&flags, &env).unwrap();
        assert_eq!(c.admin_listen.port(), 3);
        assert_eq!(c.fleet_id.as_deref(), Some("f-env"));
        assert_eq!(c.rate_limit_per_second, 7);
    }

    #[test]
    fn the_shipped_example_config_loads() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/toolgate.example.toml");
        let flags = Flags {
            config_file: Some(file),
            ..Flags::default()
        };
        let c = Config::load_with(&flags, &env_of(&[])).unwrap();
        assert_eq!(c.fleet_id.as_deref(), Some("engineering"));
        assert_eq!(
            c.dashboard_url.as_deref(),
            Some("https://toolgate.example.com")
        );
    }

    #[test]
    fn bad_values_name_the_field() {
        let cases: [(&[(&str, &str)], &str); 3] = [
            (&[("TOOLGATE_ADMIN_LISTEN", "nope")], "admin_listen"),
            (
                &[("TOOLGATE_RATE_LIMIT_PER_SECOND", "-1")],
                "rate_limit_per_second",
            ),
            (&[("TOOLGATE_DASHBOARD_URL", "ftp://x")], "dashboard_url"),
        ];
        for (env, field) in cases {
            let err = Config::load_with(&Flags::default(), &env_of(env)).unwrap_err();
            assert_eq!(err.field, field);
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.toml");
        std::fs::write(&file, "admn_listen = \"x\"\n").unwrap();
        let flags = Flags {
            config_file: Some(file),
            ..Flags::default()
        };
        let err = Config::load_with(&flags, &env_of(&[])).unwrap_err();
        assert!(err.to_string().contains("admn_listen"), "{err}");
    }
}
