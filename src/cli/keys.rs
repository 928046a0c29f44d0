//! `toolgate keys create|list|revoke|authorize`: API keys on the control plane.

use super::client::Client;
use super::table::{self, field};
use super::{items, print_json, print_out, CliError, ConnArgs};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

/// `toolgate keys …`
#[derive(Debug, Subcommand)]
pub enum KeysCmd {
    /// Create an API key; its plaintext is printed once, here.
    Create(CreateArgs),
    /// List the tenant's keys (never a key's plaintext or hash).
    List {
        #[command(flatten)]
        /// Connection options.
        conn: ConnArgs,
    },
    /// Revoke a key.
    Revoke {
        /// The key's id (`key_…`).
        key_id: String,
        #[command(flatten)]
        /// Connection options.
        conn: ConnArgs,
    },
    /// Check a key before rollout: valid, permission allowed, scope allowed.
    Authorize(AuthorizeArgs),
}

/// `toolgate keys create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Label.
    #[arg(long)]
    pub name: Option<String>,
    /// Scope level.
    #[arg(long, value_parser = ["organization", "fleet", "endpoint", "agent"])]
    pub scope: String,
    /// Fleet, endpoint or agent id (required unless --scope organization).
    #[arg(long, value_name = "ID", required_if_eq_any = [("scope", "fleet"), ("scope", "endpoint"), ("scope", "agent")])]
    pub target: Option<String>,
    /// Comma-separated permissions.
    #[arg(long, required = true, value_delimiter = ',', value_parser = ["read", "write", "execute"])]
    pub permissions: Vec<String>,
    /// Lifetime in days (the control plane's default: 90).
    #[arg(long, value_name = "N")]
    pub expires_in_days: Option<u32>,
    #[command(flatten)]
    /// Connection options.
    pub conn: ConnArgs,
}

/// `toolgate keys authorize`.
#[derive(Debug, Args)]
pub struct AuthorizeArgs {
    /// The key's id (`key_…`).
    pub key_id: String,
    /// The plaintext key to check.
    #[arg(long, value_name = "KEY")]
    pub api_key: String,
    /// Permission to check.
    #[arg(long, value_parser = ["read", "write", "execute"])]
    pub permission: String,
    /// Resource type to check the scope against [default: organization].
    #[arg(long, value_name = "T", requires = "resource_id", value_parser = ["organization", "fleet", "endpoint", "agent"])]
    pub resource_type: Option<String>,
    /// Resource id to check the scope against [default: the tenant].
    #[arg(long, value_name = "R", requires = "resource_type")]
    pub resource_id: Option<String>,
    #[command(flatten)]
    /// Connection options.
    pub conn: ConnArgs,
}

/// Runs a `keys` command.
pub async fn run(cmd: KeysCmd) -> Result<(), CliError> {
    match cmd {
        KeysCmd::Create(a) => create(a).await,
        KeysCmd::List { conn } => list(conn).await,
        KeysCmd::Revoke { key_id, conn } => revoke(key_id, conn).await,
        KeysCmd::Authorize(a) => authorize(a).await,
    }
}

async fn create(a: CreateArgs) -> Result<(), CliError> {
    let client = Client::new(&a.conn)?;
    let mut body = json!({"scope_level": a.scope, "permissions": a.permissions});
    if let Some(name) = a.name {
        body["name"] = json!(name);
    }
    if let Some(target) = a.target {
        body["scope_target_id"] = json!(target);
    }
    if let Some(days) = a.expires_in_days {
        body["expires_in_days"] = json!(days);
    }
    let created = client.post(&["api-keys"], &body).await?;
    if a.conn.json {
        print_json(&created);
        return Ok(());
    }
    let mut rows = key_rows(&created);
    rows.push(("key", field(&created, "key")));
    table::print(&table::pairs(&rows));
    print_out(
        "This is the only time the key is shown: store it now, it cannot be retrieved later.",
    );
    Ok(())
}

async fn list(conn: ConnArgs) -> Result<(), CliError> {
    let client = Client::new(&conn)?;
    let answer = client.get(&["api-keys"], &[]).await?;
    if conn.json {
        print_json(&answer);
        return Ok(());
    }
    let keys = items(&answer, "api_keys")?;
    if keys.is_empty() {
        print_out(&format!("no API keys in tenant {}", conn.tenant));
        return Ok(());
    }
    let mut t = table::list(&[
        "key_id",
        "name",
        "scope",
        "permissions",
        "created_at",
        "expires_at",
        "status",
    ]);
    for k in keys {
        t.add_row([
            field(k, "key_id"),
            field(k, "name"),
            scope(k),
            field(k, "permissions"),
            field(k, "created_at"),
            field(k, "expires_at"),
            status(k).to_string(),
        ]);
    }
    table::print(&t);
    Ok(())
}

async fn revoke(key_id: String, conn: ConnArgs) -> Result<(), CliError> {
    let client = Client::new(&conn)?;
    let info = client.delete(&["api-keys", &key_id]).await?;
    if conn.json {
        print_json(&info);
    } else {
        table::print(&table::pairs(&key_rows(&info)));
    }
    Ok(())
}

async fn authorize(a: AuthorizeArgs) -> Result<(), CliError> {
    let client = Client::new(&a.conn)?;
    let body = json!({
        "api_key": a.api_key,
        "permission": a.permission,
        "resource_type": a.resource_type.as_deref().unwrap_or("organization"),
        "resource_id": a.resource_id.as_deref().unwrap_or(&a.conn.tenant),
    });
    let answer = client
        .post(&["api-keys", &a.key_id, "authorize"], &body)
        .await?;
    if a.conn.json {
        print_json(&answer);
        return Ok(());
    }
    let rows: Vec<(&str, String)> = [
        "key_id",
        "valid",
        "permission_allowed",
        "scope_allowed",
        "revoked",
        "expired",
        "rotation_required",
    ]
    .into_iter()
    .filter(|k| answer.get(*k).is_some())
    .map(|k| (k, field(&answer, k)))
    .collect();
    table::print(&table::pairs(&rows));
    Ok(())
}

/// The rows of a key's field/value table (KeyInfo).
fn key_rows(k: &Value) -> Vec<(&'static str, String)> {
    vec![
        ("key_id", field(k, "key_id")),
        ("name", field(k, "name")),
        ("scope", scope(k)),
        ("permissions", field(k, "permissions")),
        ("created_at", field(k, "created_at")),
        ("expires_at", field(k, "expires_at")),
        ("status", status(k).to_string()),
    ]
}

/// `organization`, or `agent:support-bot`.
fn scope(k: &Value) -> String {
    match k.get("scope_target_id").and_then(Value::as_str) {
        Some(target) => format!("{}:{target}", field(k, "scope_level")),
        None => field(k, "scope_level"),
    }
}

fn status(k: &Value) -> &'static str {
    let flag = |name| k.get(name).and_then(Value::as_bool).unwrap_or(false);
    if flag("revoked") {
        "revoked"
    } else if flag("expired") {
        "expired"
    } else if flag("rotation_required") {
        "rotate soon"
    } else {
        "active"
    }
}
