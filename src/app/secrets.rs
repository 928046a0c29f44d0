//! Files the sidecar keeps in its data dir with tight permissions: the data dir itself (0700),
//! the generated admin token (`<data-dir>/admin-token`, 0600), and atomic writes (ready file).

use crate::config::Config;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates the data dir with mode 0700 when it does not exist.
pub fn ensure_data_dir(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The control-plane admin token: `TOOLGATE_ADMIN_TOKEN`, else `<data-dir>/admin-token`, created
/// (mode 0600) at first start. The file's path is logged, never the token.
pub fn admin_token(config: &Config) -> std::io::Result<String> {
    if let Some(t) = &config.admin_token {
        return Ok(t.clone());
    }
    let path = config.data_dir.join("admin-token");
    if let Ok(existing) = fs::read_to_string(&path) {
        let t = existing.trim().to_string();
        if !t.is_empty() {
            return Ok(t);
        }
    }
    let token = crate::ids::secret_token("tgadm", 32);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    f.write_all(token.as_bytes())?;
    f.sync_all()?;
    tracing::info!(path = %path.display(), "generated the control-plane admin token (TOOLGATE_ADMIN_TOKEN was not set)");
    Ok(token)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so readers never see half.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, path)
}
