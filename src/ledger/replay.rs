//! Replay marks for ingest (SPEC.md, "Events": short-window replays are dropped): the `Replay`
//! tree maps `pair_key(tenant_id, event_id)` to the unix millis at which the event was last
//! accepted (a JSON number), and is pruned a bounded slice at a time.
//!
//! Callers serialise every use through the ingest lock, so plain get/put suffice here.

use crate::store::{Store, StoreError, Tree, TreeName};
use serde_json::Value;
use std::time::Duration;

/// Replay marks of one window length.
pub(crate) struct ReplayBook {
    tree: Tree,
    window_ms: u64,
}

impl ReplayBook {
    /// A book over the store's `Replay` tree with the given window.
    pub(crate) fn new(store: &Store, window: Duration) -> ReplayBook {
        ReplayBook {
            tree: store.tree(TreeName::Replay),
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// True when `key` was accepted less than one window before `now_ms`. A mark from the
    /// future (the clock went back) counts as recent; a mark that is not a number does not.
    ///
    /// Errors: storage failures, or a stored value that is not JSON.
    pub(crate) fn is_recent(&self, key: &[u8], now_ms: u64) -> Result<bool, StoreError> {
        let seen = self.tree.get::<Value>(key)?.and_then(|v| v.as_u64());
        Ok(seen.is_some_and(|t| now_ms.saturating_sub(t) < self.window_ms))
    }

    /// Sets each key's last-accepted time to `now_ms` (not flushed).
    ///
    /// Errors: storage failures; marks written before the failure stay.
    pub(crate) fn mark(&self, keys: &[Vec<u8>], now_ms: u64) -> Result<(), StoreError> {
        for key in keys {
            self.tree.put(key, &now_ms)?;
        }
        Ok(())
    }

    /// Looks at up to `budget` marks from `cursor` on and removes those at least one window old
    /// (or not a number). Advances `cursor`, wrapping to the start at the end of the tree.
    /// Best effort: a storage error is logged and pruning resumes from the start next time.
    /// Returns the number removed.
    pub(crate) fn prune(&self, cursor: &mut Vec<u8>, now_ms: u64, budget: usize) -> usize {
        match self.prune_slice(cursor, now_ms, budget) {
            Ok(removed) => removed,
            Err(e) => {
                tracing::warn!(error = %e, "replay mark pruning failed; restarting from the first mark");
                cursor.clear();
                0
            }
        }
    }

    fn prune_slice(
        &self,
        cursor: &mut Vec<u8>,
        now_ms: u64,
        budget: usize,
    ) -> Result<usize, StoreError> {
        let rows = self.tree.range_from::<Value>(cursor, budget)?;
        let mut removed = 0;
        for (key, seen) in &rows {
            let stale = seen
                .as_u64()
                .is_none_or(|t| now_ms.saturating_sub(t) >= self.window_ms);
            if stale && self.tree.remove(key)? {
                removed += 1;
            }
        }
        match rows.last() {
            Some((last, _)) if rows.len() == budget => {
                // The smallest key after `last`: `last` followed by a zero byte.
                *cursor = last.clone();
                cursor.push(0);
            }
            _ => cursor.clear(),
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::pair_key;

    #[test]
    fn marks_are_recent_only_inside_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let book = ReplayBook::new(&store, Duration::from_millis(100));
        let key = pair_key("t", "e");
        assert!(!book.is_recent(&key, 1_000).unwrap());
        book.mark(std::slice::from_ref(&key), 1_000).unwrap();
        let cases = [(1_000, true), (1_099, true), (1_100, false), (500, true)];
        for (now, recent) in cases {
            assert_eq!(book.is_recent(&key, now).unwrap(), recent, "at {now}");
        }
    }

    #[test]
    fn pruning_is_bounded_and_keeps_fresh_marks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let book = ReplayBook::new(&store, Duration::from_millis(100));
        let old: Vec<Vec<u8>> = (0..10)
            .map(|i| pair_key("t", &format!("old{i:02}")))
            .collect();
        book.mark(&old, 0).unwrap();
        book.mark(&[pair_key("t", "zfresh")], 950).unwrap();
        let mut cursor = Vec::new();
        assert_eq!(book.prune(&mut cursor, 1_000, 4), 4);
        assert!(!cursor.is_empty());
        assert_eq!(book.prune(&mut cursor, 1_000, 4), 4);
        assert_eq!(book.prune(&mut cursor, 1_000, 4), 2);
        assert!(cursor.is_empty(), "wraps after the last slice");
        let left: Vec<(Vec<u8>, Value)> = store.tree(TreeName::Replay).scan(b"").unwrap();
        assert_eq!(left.len(), 1);
        assert!(book.is_recent(&pair_key("t", "zfresh"), 1_000).unwrap());
    }
}
