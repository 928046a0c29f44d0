//! The shipper's durable cursor and its shared status (read by GET /v1/health).

use super::CURSOR_KEY;
use crate::ids;
use crate::store::{Store, StoreError, TreeName};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::{Mutex, MutexGuard};

/// The durable cursor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Every entry with seq ≤ this was shipped (or skipped).
    pub shipped_seq: u64,
    /// Entries passed without shipping because they belong to another tenant.
    pub skipped: u64,
}

impl Cursor {
    /// The stored cursor (zero when none).
    ///
    /// Errors: [`StoreError`] when storage fails or the value does not decode.
    pub fn load(store: &Store) -> Result<Cursor, StoreError> {
        Ok(store
            .tree(TreeName::Meta)
            .get(CURSOR_KEY)?
            .unwrap_or_default())
    }

    /// Writes and flushes the cursor.
    pub(super) async fn save(&self, store: &Store) -> Result<(), StoreError> {
        store.tree(TreeName::Meta).put(CURSOR_KEY, self)?;
        store.flush().await
    }
}

/// The shipper's shared status (in `Core::shipping`; read by GET /v1/health).
#[derive(Debug, Default)]
pub struct ShipStatus(Mutex<StatusInner>);

#[derive(Debug, Default)]
struct StatusInner {
    cursor: Cursor,
    last_error: Option<String>,
    last_shipped_at: Option<String>,
}

impl ShipStatus {
    /// The status at start-up: the stored cursor, no error yet.
    ///
    /// Errors: [`StoreError`] reading the cursor.
    pub fn load(store: &Store) -> Result<ShipStatus, StoreError> {
        let status = ShipStatus::default();
        status.lock().cursor = Cursor::load(store)?;
        Ok(status)
    }

    /// The current cursor.
    pub fn cursor(&self) -> Cursor {
        self.lock().cursor
    }

    /// `{"backlog", "shipped_seq", "skipped", "last_error", "last_shipped_at"}` for a ledger of
    /// `ledger_len` entries; `backlog` = entries not yet shipped.
    pub fn health(&self, ledger_len: u64) -> Value {
        let s = self.lock();
        json!({
            "backlog": ledger_len.saturating_sub(s.cursor.shipped_seq),
            "shipped_seq": s.cursor.shipped_seq,
            "skipped": s.cursor.skipped,
            "last_error": s.last_error,
            "last_shipped_at": s.last_shipped_at,
        })
    }

    pub(super) fn shipped(&self, cursor: Cursor) {
        let mut s = self.lock();
        s.cursor = cursor;
        s.last_error = None;
        s.last_shipped_at = Some(ids::rfc3339(ids::now()));
    }

    pub(super) fn failed(&self, error: String) {
        self.lock().last_error = Some(error);
    }

    fn lock(&self) -> MutexGuard<'_, StatusInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
