//! Policy bundle and key snapshot sync: every `sync_interval_seconds` the sidecar asks its
//! control plane for both with `If-None-Match`; a changed bundle is installed on disk, loaded
//! and swapped in without a restart (a bundle that does not load is refused and the last good
//! one keeps serving); a changed key snapshot replaces the tenant's keys (hashes only). The
//! first bundle ever received lifts the fail-closed state.

use super::client::{CpClient, LinkError};
use super::LinkStatus;
use crate::control_plane::sync::bundle::{KeySnapshot, PolicyBundle};
use crate::state::AppState;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Runs until shutdown.
pub async fn run(
    core: AppState,
    client: CpClient,
    status: Arc<LinkStatus>,
    stop: watch::Receiver<bool>,
) {
    let every = Duration::from_secs(core.config.sync_interval_seconds);
    let mut policy_tag = None;
    let mut keys_tag = None;
    let mut rounds = super::Rounds::new(every, stop);
    while rounds.next().await {
        let keys = sync_keys(&core, &client, &mut keys_tag).await;
        let policy = sync_policy(&core, &client, &mut policy_tag).await;
        let error = policy.err().or(keys.err());
        status.note("sync", error);
    }
}

async fn sync_policy(
    core: &AppState,
    client: &CpClient,
    tag: &mut Option<String>,
) -> Result<(), String> {
    let fetched: Option<(PolicyBundle, Option<String>)> = client
        .get_if_changed("/sync/policy", tag.as_deref())
        .await
        .map_err(|e: LinkError| e.to_string())?;
    let Some((bundle, etag)) = fetched else {
        return Ok(());
    };
    if core.policy_ready.load(Ordering::Acquire)
        && core.policy.current().version().digest == bundle.digest
    {
        *tag = etag;
        return Ok(());
    }
    let data_dir = core.config.data_dir.clone();
    let b = bundle.clone();
    let snapshot = tokio::task::spawn_blocking(move || super::bundle::install(&data_dir, &b))
        .await
        .map_err(|e| e.to_string())??;
    let label = snapshot.version().label();
    core.policy.replace(snapshot);
    let dir = super::bundle::bundle_dir(&core.config.data_dir);
    if let Err(e) = core.explainer.reload(&dir.join("explanations")) {
        tracing::warn!(error = %e, "bundle explanations refused; keeping the previous wording");
    }
    core.policy_ready.store(true, Ordering::Release);
    *tag = etag;
    tracing::info!(policy_version = %label, "policy bundle from the control plane applied");
    Ok(())
}

async fn sync_keys(
    core: &AppState,
    client: &CpClient,
    tag: &mut Option<String>,
) -> Result<(), String> {
    let fetched: Option<(KeySnapshot, Option<String>)> = client
        .get_if_changed("/sync/keys", tag.as_deref())
        .await
        .map_err(|e: LinkError| e.to_string())?;
    let Some((snapshot, etag)) = fetched else {
        return Ok(());
    };
    let tenant = client.tenant().to_string();
    let count = core
        .keys
        .replace_tenant(&tenant, snapshot.keys)
        .await
        .map_err(|e| e.to_string())?;
    *tag = etag;
    tracing::info!(keys = count, "key snapshot from the control plane applied");
    Ok(())
}
