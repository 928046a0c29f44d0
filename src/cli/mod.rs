//! The operator CLI: `toolgate keys|holds|endpoints …` against the control plane's admin API.
//!
//! | command | call |
//! |---|---|
//! | `keys create` | POST /{tenant}/service/api-keys |
//! | `keys list` | GET /{tenant}/service/api-keys |
//! | `keys revoke KEY_ID` | DELETE /{tenant}/service/api-keys/{key_id} |
//! | `keys authorize KEY_ID` | POST /{tenant}/service/api-keys/{key_id}/authorize |
//! | `holds list` | GET /{tenant}/service/approvals?status=pending |
//! | `holds approve TOKEN` / `holds deny TOKEN` | POST /{tenant}/service/approvals/{token}/approve / deny |
//! | `endpoints list` | GET /{tenant}/service/endpoints |
//!
//! Every command takes [`ConnArgs`]: `--control-plane URL` (`TOOLGATE_CONTROL_PLANE`), `--tenant`
//! (`TOOLGATE_TENANT`), the admin token (`--admin-token-file PATH`, else `TOOLGATE_ADMIN_TOKEN`,
//! else `./toolgate-data/admin-token`) and `--json` (the control plane's JSON, pretty, instead of
//! a table). The admin token is never printed. Exit codes: 0 done, 1 the control plane refused or
//! could not be reached, 2 usage (clap), 64 no usable admin token.

pub mod client;
pub mod endpoints;
pub mod holds;
pub mod keys;
pub mod table;

pub use endpoints::EndpointsCmd;
pub use holds::HoldsCmd;
pub use keys::KeysCmd;

use clap::builder::NonEmptyStringValueParser;
use clap::Args;
use reqwest::Url;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

/// Where the token file is when neither `--admin-token-file` nor `TOOLGATE_ADMIN_TOKEN` is given:
/// the file `toolgate up` generates in its default data dir.
pub const DEFAULT_ADMIN_TOKEN_FILE: &str = "./toolgate-data/admin-token";

/// Connection options shared by every operator command.
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// Control-plane URL.
    #[arg(
        long = "control-plane",
        env = "TOOLGATE_CONTROL_PLANE",
        default_value = "http://127.0.0.1:8182",
        value_name = "URL",
        value_parser = parse_url
    )]
    pub control_plane: Url,
    /// Tenant whose resources to manage.
    #[arg(long, env = "TOOLGATE_TENANT", value_name = "TENANT", value_parser = NonEmptyStringValueParser::new())]
    pub tenant: String,
    /// File holding the admin token [default: TOOLGATE_ADMIN_TOKEN, else
    /// ./toolgate-data/admin-token, the token `toolgate up` generates].
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
    /// Print the control plane's JSON answer (pretty) instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn parse_url(s: &str) -> Result<Url, String> {
    let url = Url::parse(s).map_err(|e| format!("not a URL ({e})"))?;
    match url.scheme() {
        "http" | "https" if url.has_host() => Ok(url),
        "http" | "https" => Err("the URL has no host".into()),
        other => Err(format!("scheme `{other}` is not http or https")),
    }
}

/// An operator command, as dispatched by `main`.
#[derive(Debug)]
pub enum Command {
    /// `toolgate keys …`
    Keys(KeysCmd),
    /// `toolgate holds …`
    Holds(HoldsCmd),
    /// `toolgate endpoints …`
    Endpoints(EndpointsCmd),
}

/// Why an operator command failed; [`CliError::exit_code`] is the process's exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No admin token could be found (exit 64).
    #[error("{0}")]
    NoToken(String),
    /// The control plane answered an error status with its `{"detail"}` (exit 1).
    #[error("{status}: {detail}")]
    Status {
        /// e.g. `409 Conflict`.
        status: reqwest::StatusCode,
        /// The `detail` of the error body (or the body itself, cut short).
        detail: String,
    },
    /// Connection refused, DNS failure, timeout (exit 1).
    #[error("cannot reach the control plane at {url}: {reason}")]
    Unreachable {
        /// The control-plane URL as given.
        url: String,
        /// The underlying cause.
        reason: String,
    },
    /// Anything else: TLS setup, an unexpected answer (exit 1).
    #[error("{0}")]
    Other(String),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::NoToken(_) => 64,
            _ => 1,
        }
    }
}

/// Runs one operator command to completion, printing its result on stdout.
pub async fn run(cmd: Command) -> Result<(), CliError> {
    match cmd {
        Command::Keys(c) => keys::run(c).await,
        Command::Holds(c) => holds::run(c).await,
        Command::Endpoints(c) => endpoints::run(c).await,
    }
}

/// Prints `value` as pretty JSON.
pub(crate) fn print_json(value: &Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    print_out(&text);
}

/// Prints `text` and a newline on stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|_| out.flush());
}

/// The array `answer[key]`, or an error naming what was expected.
pub(crate) fn items<'a>(answer: &'a Value, key: &str) -> Result<&'a Vec<Value>, CliError> {
    answer.get(key).and_then(Value::as_array).ok_or_else(|| {
        CliError::Other(format!(
            "unexpected answer from the control plane: no `{key}` list"
        ))
    })
}
