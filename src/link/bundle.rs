//! The policy bundle on a linked sidecar's disk: `<data-dir>/policy-bundle/` holds the last pack
//! received from the control plane (the sidecar starts from it after a restart, so it keeps
//! serving when the control plane is down), written through `policy-bundle.new/` and swapped
//! in by rename only after it loaded. Before the first bundle ever arrives, the sidecar runs on
//! a built-in placeholder pack with `policy_ready = false`: every decision fails closed.

use crate::config::Config;
use crate::control_plane::sync::bundle::PolicyBundle;
use crate::policy::{PolicySnapshot, PolicyVersion};
use base64::Engine;
use std::path::{Component, Path, PathBuf};

/// Directory of the last good bundle.
pub fn bundle_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("policy-bundle")
}

/// For a linked sidecar: point `config.policy_dir` at the last good bundle, or at the
/// placeholder pack when there is none yet. Returns whether a real pack is in place.
/// Unlinked processes keep their `--policy` and are ready.
///
/// Errors: the placeholder cannot be written (I/O), as text.
pub fn startup_policy(config: &mut Config) -> Result<bool, String> {
    if config.control_plane_url.is_none() {
        return Ok(true);
    }
    let dir = bundle_dir(&config.data_dir);
    if dir.join("pack.toml").is_file() {
        config.policy_dir = dir;
        return Ok(true);
    }
    let placeholder = config.data_dir.join("policy-placeholder");
    write_placeholder(&placeholder).map_err(|e| format!("{}: {e}", placeholder.display()))?;
    config.policy_dir = placeholder;
    Ok(false)
}

/// The placeholder: an empty pack with the default explanation wording (never used to allow
/// anything: `policy_ready` stays false until a bundle loads).
fn write_placeholder(dir: &Path) -> std::io::Result<()> {
    let explanations = dir.join("explanations");
    std::fs::create_dir_all(&explanations)?;
    std::fs::write(
        dir.join("pack.toml"),
        "name = \"awaiting-control-plane\"\nversion = \"0\"\n",
    )?;
    std::fs::write(
        explanations.join("default.j2"),
        include_str!("../../policy/explanations/default.j2"),
    )?;
    std::fs::write(
        explanations.join("_common.j2"),
        include_str!("../../policy/explanations/_common.j2"),
    )
}

/// Writes `bundle` under `<data-dir>/policy-bundle.new/`, loads it, checks that its digest is
/// the bundle's, and moves it into place. Returns the loaded snapshot; the caller swaps it in.
///
/// Errors (the previous bundle stays): a file path that leaves the pack directory, bad
/// base64, I/O, a pack that does not load, or a digest mismatch.
pub fn install(data_dir: &Path, bundle: &PolicyBundle) -> Result<PolicySnapshot, String> {
    let staging = data_dir.join("policy-bundle.new");
    let _ = std::fs::remove_dir_all(&staging);
    write_files(&staging, bundle)?;
    let snapshot =
        PolicySnapshot::load(&staging).map_err(|e| format!("bundle does not load: {e}"))?;
    let PolicyVersion { digest, .. } = snapshot.version();
    if *digest != bundle.digest {
        return Err(format!(
            "bundle digest mismatch: announced {}, files give {digest}",
            bundle.digest
        ));
    }
    let current = bundle_dir(data_dir);
    let old = data_dir.join("policy-bundle.old");
    let _ = std::fs::remove_dir_all(&old);
    if current.exists() {
        std::fs::rename(&current, &old).map_err(|e| format!("{}: {e}", current.display()))?;
    }
    std::fs::rename(&staging, &current).map_err(|e| format!("{}: {e}", current.display()))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(snapshot)
}

fn write_files(root: &Path, bundle: &PolicyBundle) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    for file in &bundle.files {
        let rel = Path::new(&file.path);
        let safe = rel.components().all(|c| matches!(c, Component::Normal(_)));
        if !safe || rel.components().count() > 2 {
            return Err(format!("bundle file path `{}` is not allowed", file.path));
        }
        let bytes = b64
            .decode(&file.content_base64)
            .map_err(|e| format!("bundle file `{}`: {e}", file.path))?;
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_plane::sync::bundle::BundleFile;

    fn bundle_of(dir: &Path) -> PolicyBundle {
        let snap = PolicySnapshot::load(dir).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD;
        PolicyBundle {
            name: snap.version().name.clone(),
            version: snap.version().version.clone(),
            digest: snap.version().digest.clone(),
            files: snap
                .files()
                .iter()
                .map(|(p, b)| BundleFile {
                    path: p.clone(),
                    content_base64: b64.encode(b),
                })
                .collect(),
        }
    }

    #[test]
    fn a_bundle_installs_with_the_same_digest_and_bad_ones_leave_the_previous() {
        let data = tempfile::tempdir().unwrap();
        let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
        let bundle = bundle_of(&pack);
        let snap = install(data.path(), &bundle).unwrap();
        assert_eq!(snap.version().digest, bundle.digest);
        assert!(bundle_dir(data.path()).join("pack.toml").is_file());
        let mut evil = bundle.clone();
        evil.files[0].path = "../escape.toml".into();
        assert!(install(data.path(), &evil)
            .unwrap_err()
            .contains("not allowed"));
        let mut lying = bundle.clone();
        lying.digest = "0".repeat(64);
        assert!(install(data.path(), &lying)
            .unwrap_err()
            .contains("mismatch"));
        assert!(
            bundle_dir(data.path()).join("pack.toml").is_file(),
            "previous bundle kept"
        );
    }

    #[test]
    fn a_linked_sidecar_without_a_bundle_starts_on_the_placeholder_not_ready() {
        let data = tempfile::tempdir().unwrap();
        let mut cfg = crate::config::Config::load_with(&Default::default(), &|_| None).unwrap();
        cfg.data_dir = data.path().to_path_buf();
        cfg.control_plane_url = Some("http://127.0.0.1:1".into());
        assert!(!startup_policy(&mut cfg).unwrap());
        assert!(PolicySnapshot::load(&cfg.policy_dir).is_ok());
        let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy");
        install(data.path(), &bundle_of(&pack)).unwrap();
        assert!(startup_policy(&mut cfg).unwrap());
        assert_eq!(cfg.policy_dir, bundle_dir(data.path()));
    }
}
