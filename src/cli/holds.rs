//! `toolgate holds list|approve|deny`: STEP_UP holds waiting for a person on the control plane.

use super::client::Client;
use super::table::{self, field};
use super::{items, print_json, print_out, CliError, ConnArgs};
use clap::{Args, Subcommand};
use serde_json::json;

/// `toolgate holds …`
#[derive(Debug, Subcommand)]
pub enum HoldsCmd {
    /// List the pending holds, soonest expiry first.
    List {
        #[command(flatten)]
        /// Connection options.
        conn: ConnArgs,
    },
    /// Approve a held call: it runs (resolution ALLOW).
    Approve(DecideArgs),
    /// Deny a held call: it is refused (resolution BLOCK).
    Deny(DecideArgs),
}

/// `toolgate holds approve|deny`.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The hold token (from `holds list`).
    pub token: String,
    /// Who decides (e-mail or name); recorded as `resolved_by`.
    #[arg(long)]
    pub approver: String,
    /// Why; recorded with the resolution.
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    /// Connection options.
    pub conn: ConnArgs,
}

/// Runs a `holds` command.
pub async fn run(cmd: HoldsCmd) -> Result<(), CliError> {
    match cmd {
        HoldsCmd::List { conn } => list(conn).await,
        HoldsCmd::Approve(a) => decide(a, "approve").await,
        HoldsCmd::Deny(a) => decide(a, "deny").await,
    }
}

async fn list(conn: ConnArgs) -> Result<(), CliError> {
    let client = Client::new(&conn)?;
    let answer = client.get(&["approvals"], &[("status", "pending")]).await?;
    if conn.json {
        print_json(&answer);
        return Ok(());
    }
    let holds = items(&answer, "approvals")?;
    if holds.is_empty() {
        print_out(&format!("no pending holds in tenant {}", conn.tenant));
        return Ok(());
    }
    let columns = [
        "hold_token",
        "tool_name",
        "agent_id",
        "session_id",
        "risk_score",
        "expires_at",
        "reason",
    ];
    let mut t = table::list(&columns);
    for h in holds {
        t.add_row(columns.map(|c| field(h, c)));
    }
    table::print(&t);
    Ok(())
}

async fn decide(a: DecideArgs, verb: &str) -> Result<(), CliError> {
    let client = Client::new(&a.conn)?;
    let mut body = json!({"approver": a.approver});
    if let Some(reason) = a.reason {
        body["reason"] = json!(reason);
    }
    let hold = client.post(&["approvals", &a.token, verb], &body).await?;
    if a.conn.json {
        print_json(&hold);
        return Ok(());
    }
    let mut rows: Vec<(&str, String)> = [
        "token",
        "tool_name",
        "agent_id",
        "session_id",
        "resolved",
        "resolution",
        "resolved_by",
        "resolved_at",
        "reason",
    ]
    .into_iter()
    .map(|k| (k, field(&hold, k)))
    .collect();
    rows.push((
        "receipt",
        table::text(hold.pointer("/terminal_receipt/receipt_id")),
    ));
    table::print(&table::pairs(&rows));
    Ok(())
}
