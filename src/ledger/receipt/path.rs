//! `checkpoint_path` of a returned receipt: the hex content digests of the receipts after it up
//! to its checkpoint. The receipts of one signed batch share one list of digests, each viewing
//! its own suffix, so handing out a batch of `n` receipts costs no per-receipt copies.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A suffix of a shared list of hex digests; serializes as a JSON array of strings and
/// dereferences to `[String]`.
#[derive(Clone)]
pub struct CheckpointPath {
    digests: Arc<[String]>,
    /// Start of this path in `digests` (≤ its length).
    from: usize,
}

impl CheckpointPath {
    /// The digests of `digests` from index `from` on (empty when `from` is past the end).
    pub(crate) fn suffix(digests: Arc<[String]>, from: usize) -> CheckpointPath {
        let from = from.min(digests.len());
        CheckpointPath { digests, from }
    }
}

impl From<Vec<String>> for CheckpointPath {
    fn from(digests: Vec<String>) -> Self {
        CheckpointPath {
            digests: digests.into(),
            from: 0,
        }
    }
}

impl Deref for CheckpointPath {
    type Target = [String];

    fn deref(&self) -> &[String] {
        // `from ≤ len` is kept by both constructors; `get` keeps the impossible case empty.
        self.digests.get(self.from..).unwrap_or_default()
    }
}

impl PartialEq for CheckpointPath {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl fmt::Debug for CheckpointPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for CheckpointPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for CheckpointPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(deserializer).map(CheckpointPath::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_views_the_shared_list_and_round_trips_as_an_array() {
        let all: Arc<[String]> = vec!["a".to_string(), "b".into(), "c".into()].into();
        let path = CheckpointPath::suffix(all.clone(), 1);
        assert_eq!(&*path, &["b".to_string(), "c".into()]);
        assert!(CheckpointPath::suffix(all, 9).is_empty());
        let json = serde_json::to_string(&path).unwrap();
        assert_eq!(json, r#"["b","c"]"#);
        let back: CheckpointPath = serde_json::from_str(&json).unwrap();
        assert_eq!(back, path);
        assert_eq!(format!("{back:?}"), r#"["b", "c"]"#);
    }
}
