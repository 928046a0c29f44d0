//! `toolgate endpoints list`: the endpoints (hosts running the sidecar) registered with the
//! control plane, with their last check-in and whether they have gone stale.

use super::client::Client;
use super::table::{self, field};
use super::{items, print_json, print_out, CliError, ConnArgs};
use clap::Subcommand;
use serde_json::Value;

/// `toolgate endpoints …`
#[derive(Debug, Subcommand)]
pub enum EndpointsCmd {
    /// List the tenant's endpoints.
    List {
        #[command(flatten)]
        /// Connection options.
        conn: ConnArgs,
    },
}

/// Runs an `endpoints` command.
pub async fn run(cmd: EndpointsCmd) -> Result<(), CliError> {
    match cmd {
        EndpointsCmd::List { conn } => list(conn).await,
    }
}

async fn list(conn: ConnArgs) -> Result<(), CliError> {
    let client = Client::new(&conn)?;
    let answer = client.get(&["endpoints"], &[]).await?;
    if conn.json {
        print_json(&answer);
        return Ok(());
    }
    let endpoints = items(&answer, "endpoints")?;
    if endpoints.is_empty() {
        print_out(&format!(
            "no endpoints registered in tenant {}",
            conn.tenant
        ));
        return Ok(());
    }
    let mut t = table::list(&[
        "endpoint_id",
        "hostname",
        "proxy_version",
        "agents",
        "last_checkin_at",
        "risk",
        "violations_today",
        "stale",
    ]);
    for e in endpoints {
        let last = match e.get("last_checkin_at") {
            None | Some(Value::Null) => "never".to_string(),
            v => table::text(v),
        };
        t.add_row([
            field(e, "endpoint_id"),
            field(e, "hostname"),
            field(e, "proxy_version"),
            field(e, "agent_ids"),
            last,
            field(e, "risk_score"),
            field(e, "violations_today"),
            field(e, "stale"),
        ]);
    }
    table::print(&t);
    Ok(())
}
