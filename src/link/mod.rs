//! The sidecar's link to a remote control plane (`toolgate serve --control-plane URL --tenant T
//! --endpoint-id E`): registration and check-ins, policy bundle and key snapshot sync, durable
//! event shipping, and the relay of pending holds and their resolutions.

pub mod activity;
pub mod bundle;
pub mod checkin;
pub mod client;
pub mod relay;
pub mod shipper;
pub mod sync;

pub use client::{CpClient, LinkError};

use crate::state::AppState;
use serde_json::{json, Map, Value};
use std::sync::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The last outcome of each link task (`checkin`, `sync`, `relay`) for GET /v1/health.
#[derive(Default)]
pub struct LinkStatus {
    tasks: Mutex<Map<String, Value>>,
}

impl LinkStatus {
    /// Records a task's outcome: `None` for success, else the error text. A changed error is
    /// logged once (a control plane that stays down does not flood the log).
    pub fn note(&self, task: &str, error: Option<String>) {
        let Ok(mut tasks) = self.tasks.lock() else {
            return;
        };
        let previous = tasks
            .get(task)
            .and_then(|t| t["last_error"].as_str().map(String::from));
        if error != previous {
            match &error {
                Some(e) => tracing::warn!(task, error = %e, "control-plane link: retrying"),
                None if previous.is_some() => tracing::info!(task, "control-plane link recovered"),
                None => {}
            }
        }
        let at = crate::ids::rfc3339(crate::ids::now());
        let entry = tasks.entry(task.to_string()).or_insert_with(|| json!({}));
        entry["last_error"] = error.clone().map(Value::from).unwrap_or(Value::Null);
        if error.is_none() {
            entry["last_success_at"] = at.into();
        }
    }

    /// `{task: {last_error, last_success_at}}`.
    pub fn health(&self) -> Value {
        self.tasks
            .lock()
            .map(|t| Value::Object(t.clone()))
            .unwrap_or(Value::Null)
    }
}

/// Starts check-ins, policy/key sync and the hold relay when `control_plane_url` is set
/// (the shipper is started by [`shipper::spawn`]). Returns the tasks; each ends on shutdown.
///
/// Errors: [`LinkError::Setup`] when the client cannot be built.
pub fn spawn(
    core: &AppState,
    shutdown: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, LinkError> {
    let Some(status) = core.link.clone() else {
        return Ok(Vec::new());
    };
    let client = CpClient::new(&core.config)?;
    let (c, s) = (core.clone(), shutdown.clone());
    Ok(vec![
        tokio::spawn(checkin::run(
            c.clone(),
            client.clone(),
            status.clone(),
            s.clone(),
        )),
        tokio::spawn(sync::run(
            c.clone(),
            client.clone(),
            status.clone(),
            s.clone(),
        )),
        tokio::spawn(relay::report(
            c.clone(),
            client.clone(),
            status.clone(),
            s.clone(),
        )),
        tokio::spawn(relay::apply(c, client, status, s)),
    ])
}

/// The rounds of a periodic link task: the first at once, then one every `every` (a late
/// round delays the next instead of bunching them), until shutdown.
pub(crate) struct Rounds {
    tick: tokio::time::Interval,
    stop: watch::Receiver<bool>,
}

impl Rounds {
    /// Rounds every `every` until `stop` turns true.
    pub(crate) fn new(every: std::time::Duration, stop: watch::Receiver<bool>) -> Rounds {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Rounds { tick, stop }
    }

    /// Waits for the next round; false once the process is stopping.
    pub(crate) async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.tick.tick() => true,
            _ = self.stop.wait_for(|s| *s) => false,
        }
    }
}
