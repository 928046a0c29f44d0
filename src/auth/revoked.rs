//! The revocation file (SPEC.md, Authentication 9): key ids listed in the file named by
//! `TOOLGATE_REVOKED_KEYS_FILE` are refused with 401. The file is re-read when its modification
//! time or size changes (checked every [`POLL_INTERVAL`]).
//!
//! Format: one key_id per line; blank lines and lines starting with `#` are ignored; surrounding
//! whitespace is trimmed. A file that cannot be read at start is a configuration error; one that
//! becomes unreadable later keeps the last good set and logs a warning (fail closed: a revocation
//! is never forgotten because the file went missing).

use arc_swap::ArcSwap;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often the file's metadata is checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The current set of revoked key ids. Cheap to clone; shared with the watcher task.
#[derive(Clone, Default)]
pub struct RevokedSet {
    ids: Arc<ArcSwap<HashSet<String>>>,
}

impl RevokedSet {
    /// An empty set (no file configured).
    pub fn empty() -> Self {
        Self::default()
    }

    /// True when `key_id` is listed.
    pub fn contains(&self, key_id: &str) -> bool {
        self.ids.load().contains(key_id)
    }

    fn replace(&self, ids: HashSet<String>) {
        self.ids.store(Arc::new(ids));
    }
}

/// Parses the file's text into key ids.
pub fn parse(text: &str) -> HashSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Watches one revocation file.
pub struct RevokedFile {
    path: PathBuf,
    set: RevokedSet,
    stamp: Option<(SystemTime, u64)>,
}

impl RevokedFile {
    /// Reads `path` once.
    ///
    /// Errors: the file cannot be read (a message naming the path).
    pub fn load(path: &Path) -> Result<RevokedFile, String> {
        let mut file = RevokedFile {
            path: path.to_path_buf(),
            set: RevokedSet::empty(),
            stamp: None,
        };
        file.refresh()
            .map_err(|e| format!("revoked_keys_file: cannot read {}: {e}", path.display()))?;
        Ok(file)
    }

    /// The shared set this file feeds.
    pub fn set(&self) -> RevokedSet {
        self.set.clone()
    }

    /// Re-reads the file when its metadata changed. Returns true when the set was replaced.
    pub fn refresh(&mut self) -> std::io::Result<bool> {
        let meta = std::fs::metadata(&self.path)?;
        let stamp = (meta.modified()?, meta.len());
        if self.stamp == Some(stamp) {
            return Ok(false);
        }
        let text = std::fs::read_to_string(&self.path)?;
        self.set.replace(parse(&text));
        self.stamp = Some(stamp);
        Ok(true)
    }

    /// Polls the file until `shutdown` fires.
    pub async fn watch(mut self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            match self.refresh() {
                Ok(true) => tracing::info!(path = %self.path.display(), "revocation file reloaded"),
                Ok(false) => {}
                Err(e) => tracing::warn!(path = %self.path.display(), error = %e,
                    "revocation file unreadable; keeping the last revocation set"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_blanks_are_ignored() {
        let ids = parse("# revoked\nkey_a\n\n  key_b  \n#key_c\n");
        assert_eq!(ids.len(), 2);
        assert!(ids.contains("key_b") && !ids.contains("#key_c"));
    }

    #[test]
    fn refresh_picks_up_changes_and_missing_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("revoked");
        assert!(RevokedFile::load(&path).is_err());
        std::fs::write(&path, "key_a\n").unwrap();
        let mut f = RevokedFile::load(&path).unwrap();
        let set = f.set();
        assert!(set.contains("key_a") && !set.contains("key_b"));
        std::fs::write(&path, "key_a\nkey_b\n").unwrap();
        assert!(f.refresh().unwrap());
        assert!(set.contains("key_b"));
    }
}
