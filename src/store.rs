//! The sled database: the one place that names sled. Named trees, typed JSON get/put, and the
//! flush policy.
//!
//! On-disk invariants:
//! * One sled database per data dir (`<data-dir>/db`); sled's file lock makes a second process
//!   on the same dir fail at open with [`StoreError::Open`].
//! * Values are JSON documents, large ones possibly LZ4-compressed (`codec.rs`: a NUL-led
//!   header no JSON can start with; every typed read accepts both forms); keys are UTF-8
//!   strings or big-endian `u64` sequence numbers, so iteration order is insertion order for
//!   sequences.
//! * Anything that must survive a crash (keys, holds, explanations, accepted events) is written and
//!   then [`Store::flush`]ed before the caller is acknowledged. Decision receipts are flushed by
//!   sled's background flusher (every 500 ms) — losing the last half second of *allowed* decision
//!   receipts in a power cut is the documented trade-off for not paying an fsync per decision.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;

pub(crate) mod codec;

/// sled's page cache, bytes (sled's default of 1 GiB would let a sidecar's RSS grow far beyond
/// what a per-host agent guard should use; the working set is recent holds, keys and chain heads).
pub const CACHE_BYTES: u64 = 32 * 1024 * 1024;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened (another process holds it, permissions, corruption).
    #[error("cannot open the database at {path}: {source}")]
    Open {
        /// Database directory.
        path: String,
        /// sled's reason.
        source: sled::Error,
    },
    /// A read, write or flush failed.
    #[error("storage failure: {0}")]
    Io(#[from] sled::Error),
    /// A stored value did not decode (corruption or an incompatible version).
    #[error("stored value in tree {tree} does not decode: {source}")]
    Decode {
        /// Tree name.
        tree: &'static str,
        /// serde's reason.
        source: serde_json::Error,
    },
    /// A compare-and-swap found a different current value.
    #[error("concurrent update in tree {0}")]
    Conflict(&'static str),
}

/// The named trees. Each module owns the trees named after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeName {
    /// API key records by key_id (auth).
    Keys,
    /// Holds by hold_token (holds).
    Holds,
    /// Explanations by `tenant_id \u{1f} violation_id` (explain).
    Explanations,
    /// Hash-chained event ledger by u64 sequence (ledger).
    Ledger,
    /// Hash-chained signed receipts by u64 sequence (ledger::receipt).
    Receipts,
    /// event_id → first-seen unix millis, for replay protection (ledger::ingest).
    Replay,
    /// Small singletons: chain heads, settings (any module, namespaced keys).
    Meta,
    /// Control plane: endpoints by `tenant_id \u{1f} endpoint_id` (control_plane::endpoints).
    Endpoints,
    /// Control plane: tenant settings (webhook URL and secret) by tenant_id (control_plane::webhooks).
    Settings,
    /// Control plane: webhook deliveries waiting for (re)delivery, by u64 sequence.
    Deliveries,
    /// Control plane: holds relayed by sidecars, by hold_token (control_plane::relay).
    Relayed,
    /// Control plane: ids of events shipped by sidecars, for idempotent storage (control_plane::sync).
    Shipped,
}

impl TreeName {
    const ALL: [TreeName; 12] = [
        TreeName::Keys,
        TreeName::Holds,
        TreeName::Explanations,
        TreeName::Ledger,
        TreeName::Receipts,
        TreeName::Replay,
        TreeName::Meta,
        TreeName::Endpoints,
        TreeName::Settings,
        TreeName::Deliveries,
        TreeName::Relayed,
        TreeName::Shipped,
    ];

    /// The tree's name on disk.
    pub fn as_str(self) -> &'static str {
        match self {
            TreeName::Keys => "keys",
            TreeName::Holds => "holds",
            TreeName::Explanations => "explanations",
            TreeName::Ledger => "ledger",
            TreeName::Receipts => "receipts",
            TreeName::Replay => "replay",
            TreeName::Meta => "meta",
            TreeName::Endpoints => "endpoints",
            TreeName::Settings => "settings",
            TreeName::Deliveries => "deliveries",
            TreeName::Relayed => "relayed",
            TreeName::Shipped => "shipped",
        }
    }
}

/// The opened database. Cheap to clone (sled handles are reference counted).
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    trees: Vec<sled::Tree>,
    flushing: std::sync::Arc<tokio::sync::Mutex<()>>,
}

/// A typed handle on one tree.
#[derive(Clone)]
pub struct Tree {
    name: &'static str,
    inner: sled::Tree,
}

impl Store {
    /// Opens (creating if needed) the database under `<data_dir>/db`.
    ///
    /// Errors: [`StoreError::Open`] when the directory is locked by another process or unreadable.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        let path = data_dir.join("db");
        let open_err = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let db = sled::Config::new()
            .path(&path)
            .cache_capacity(CACHE_BYTES)
            .flush_every_ms(Some(500))
            .open()
            .map_err(open_err)?;
        let trees = TreeName::ALL
            .iter()
            .map(|t| db.open_tree(t.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(open_err)?;
        Ok(Store {
            db,
            trees,
            flushing: Default::default(),
        })
    }

    /// A typed handle on a named tree.
    pub fn tree(&self, name: TreeName) -> Tree {
        let idx = TreeName::ALL.iter().position(|t| *t == name).unwrap_or(0);
        Tree {
            name: name.as_str(),
            inner: self.trees[idx].clone(),
        }
    }

    /// Writes everything buffered to disk (fsync). Call before acknowledging durable writes.
    ///
    /// Not sled's `flush_async`: several of those awaited at once can deadlock in sled 0.34
    /// (spacejam/sled#1308; found by the held-connection benchmark, BENCHMARKS.md). The
    /// blocking `flush` runs on the blocking pool, one at a time; a caller that waited for the
    /// lock still flushes, so its own writes are covered.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let _one_at_a_time = self.flushing.lock().await;
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush())
            .await
            .map_err(|e| StoreError::Io(sled::Error::Unsupported(format!("flush task: {e}"))))??;
        Ok(())
    }

    /// Blocking flush, for shutdown paths outside the runtime.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}

impl Tree {
    /// Reads and decodes the value at `key`.
    pub fn get<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StoreError> {
        match self.inner.get(key)? {
            Some(bytes) => self.decode(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Encodes and writes `value` at `key` (not flushed).
    pub fn put<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|source| StoreError::Decode {
            tree: self.name,
            source,
        })?;
        self.inner.insert(key, bytes)?;
        Ok(())
    }

    /// Encodes `value`, compresses the JSON ([`codec::compress`]) and writes it at `key` (not
    /// flushed); typed reads decompress it. For large values written once (receipt segments).
    pub fn put_compressed<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StoreError> {
        let json = serde_json::to_vec(value).map_err(|source| StoreError::Decode {
            tree: self.name,
            source,
        })?;
        self.inner.insert(key, codec::compress(&json))?;
        Ok(())
    }

    /// Writes `value` at `key` only if the key is absent. Returns false when it already existed.
    pub fn put_new<T: Serialize>(&self, key: &[u8], value: &T) -> Result<bool, StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|source| StoreError::Decode {
            tree: self.name,
            source,
        })?;
        Ok(self
            .inner
            .compare_and_swap(key, None as Option<&[u8]>, Some(bytes))?
            .is_ok())
    }

    /// Removes `key`; true when it existed.
    pub fn remove(&self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.inner.remove(key)?.is_some())
    }

    /// True when `key` exists.
    pub fn contains(&self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.inner.contains_key(key)?)
    }

    /// Every `(key, value)` whose key starts with `prefix`, in key order.
    pub fn scan<T: DeserializeOwned>(
        &self,
        prefix: &[u8],
    ) -> Result<Vec<(Vec<u8>, T)>, StoreError> {
        self.inner
            .scan_prefix(prefix)
            .map(|item| {
                let (k, v) = item?;
                Ok((k.to_vec(), self.decode(&v)?))
            })
            .collect()
    }

    /// Every `(key, value)` from `start` (inclusive) on, in key order, at most `limit` entries.
    pub fn range_from<T: DeserializeOwned>(
        &self,
        start: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, T)>, StoreError> {
        self.inner
            .range(start..)
            .take(limit)
            .map(|item| {
                let (k, v) = item?;
                Ok((k.to_vec(), self.decode(&v)?))
            })
            .collect()
    }

    /// Every `(key, raw value)` from `start` (inclusive) on, in key order, read lazily as the
    /// iterator advances (for values a caller decodes itself: the ledger's segments, which it
    /// reads only as far as it needs).
    pub fn range_raw(
        &self,
        start: &[u8],
    ) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), StoreError>> + '_ {
        self.inner.range(start..).map(|item| {
            item.map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(StoreError::from)
        })
    }

    /// The entry with the greatest key, if any.
    pub fn last<T: DeserializeOwned>(&self) -> Result<Option<(Vec<u8>, T)>, StoreError> {
        match self.inner.last()? {
            Some((k, v)) => Ok(Some((k.to_vec(), self.decode(&v)?))),
            None => Ok(None),
        }
    }

    /// The raw bytes at the greatest key, if any (for values a caller decodes itself: the
    /// ledger's segments, which may be compressed).
    pub fn last_raw(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.inner.last()?.map(|(_, v)| v.to_vec()))
    }

    /// Number of entries (walks the tree: O(n)).
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True when the tree has no entries.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Raw bytes at `key` (for tests that tamper with stored data, and for byte-level checks).
    pub fn get_raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.inner.get(key)?.map(|v| v.to_vec()))
    }

    /// Writes raw bytes at `key` (not flushed): a value its caller encoded itself (the
    /// ledger's segments, assembled from entries encoded one by one), or corruption made by
    /// tamper tests. Other production code uses [`Tree::put`].
    pub fn put_raw(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.inner.insert(key, value)?;
        Ok(())
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, StoreError> {
        codec::stored_json(bytes)
            .and_then(|json| serde_json::from_slice(&json))
            .map_err(|source| StoreError::Decode {
                tree: self.name,
                source,
            })
    }
}

/// Big-endian bytes of a sequence number, so sled orders sequences numerically.
pub fn seq_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// A composite key `a \u{1f} b` (unit separator: cannot appear in validated identifiers).
pub fn pair_key(a: &str, b: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + b.len() + 1);
    k.extend_from_slice(a.as_bytes());
    k.push(0x1f);
    k.extend_from_slice(b.as_bytes());
    k
}

/// Opens the store in `dir` again after the previous handles were dropped, in the same process
/// (tests only).
///
/// sled 0.34 releases its file lock from a background I/O thread shortly after the last handle
/// is dropped, so an immediate reopen in the same process fails now and then with `could not
/// acquire lock`. This retries that one error until a 10 s deadline; any other error, or the
/// deadline, panics. (A restarted process never sees this: the OS drops the lock at exit.)
#[cfg(test)]
pub(crate) fn reopen_for_tests(dir: &Path) -> Store {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Store::open(dir) {
            Ok(store) => return store,
            Err(StoreError::Open { source, .. })
                if source.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::yield_now()
            }
            Err(e) => panic!("reopen failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 500 writers that each flush before answering, all at once (what 500 concurrent STEP_UPs
    /// do): with sled's `flush_async` some of them never returned. The timeout only turns a
    /// hang into a failure; it does not measure anything.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_concurrent_flushes_all_complete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let tree = store.tree(TreeName::Holds);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..500u32 {
            let (store, tree) = (store.clone(), tree.clone());
            tasks.spawn(async move {
                tree.put(&i.to_be_bytes(), &i).unwrap();
                store.flush().await.unwrap();
            });
        }
        let all = async {
            while let Some(r) = tasks.join_next().await {
                r.unwrap();
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), all)
            .await
            .expect("every flush returns");
        assert_eq!(tree.len(), 500);
    }

    #[tokio::test]
    async fn values_survive_reopen_after_flush() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let t = store.tree(TreeName::Meta);
            t.put(b"k", &serde_json::json!({"a": 1})).unwrap();
            assert!(!t.put_new(b"k", &1).unwrap());
            store.flush().await.unwrap();
        }
        let store = reopen_for_tests(dir.path());
        let v: serde_json::Value = store.tree(TreeName::Meta).get(b"k").unwrap().unwrap();
        assert_eq!(v["a"], 1);
    }

    #[test]
    fn a_second_open_of_the_same_dir_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Store::open(dir.path()).unwrap();
        assert!(matches!(
            Store::open(dir.path()),
            Err(StoreError::Open { .. })
        ));
    }

    #[test]
    fn sequence_keys_iterate_in_numeric_order() {
        let dir = tempfile::tempdir().unwrap();
        let t = Store::open(dir.path()).unwrap().tree(TreeName::Ledger);
        for n in [256u64, 1, 2] {
            t.put(&seq_key(n), &n).unwrap();
        }
        let all: Vec<(Vec<u8>, u64)> = t.scan(b"").unwrap();
        assert_eq!(
            all.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
            vec![1, 2, 256]
        );
        assert_eq!(t.last::<u64>().unwrap().unwrap().1, 256);
    }
}
