//! KeyStore: API key records in sled (tree `keys`) with an in-memory cache, authentication of a
//! presented key, revocation (control plane and the revocation file).

use super::keys::{self, ApiKeyRecord, CreateKeyRequest, KeyInfo, MintedKey};
use super::revoked::RevokedSet;
use super::AuthError;
use crate::store::{Store, Tree, TreeName};
use chrono::{DateTime, Utc};
use dashmap::DashMap;
use std::sync::Arc;

/// The posture of a presented key (GET /v1/health's `api_key`).
#[derive(Debug, Clone)]
pub struct KeyPosture {
    /// The record.
    pub record: Arc<ApiKeyRecord>,
    /// Revoked by the control plane or the revocation file.
    pub revoked: bool,
}

/// Every API key of this process, cached in memory, written through to sled.
pub struct KeyStore {
    store: Store,
    tree: Tree,
    cache: DashMap<String, Arc<ApiKeyRecord>>,
    revoked_file: RevokedSet,
}

impl KeyStore {
    /// Loads every stored key into the cache.
    pub fn open(store: &Store, revoked_file: RevokedSet) -> Result<KeyStore, AuthError> {
        let tree = store.tree(TreeName::Keys);
        let cache = DashMap::new();
        for (_, record) in tree.scan::<ApiKeyRecord>(b"")? {
            cache.insert(record.key_id.clone(), Arc::new(record));
        }
        Ok(KeyStore {
            store: store.clone(),
            tree,
            cache,
            revoked_file,
        })
    }

    /// Mints, stores and flushes a key for `tenant_id`.
    ///
    /// Errors: `BadKeyRequest` (422) for an invalid request; `Store` on storage failure.
    pub async fn create(
        &self,
        tenant_id: &str,
        req: CreateKeyRequest,
        now: DateTime<Utc>,
    ) -> Result<MintedKey, AuthError> {
        let minted = keys::mint(tenant_id, req, now).map_err(AuthError::BadKeyRequest)?;
        self.tree
            .put(minted.record.key_id.as_bytes(), &minted.record)?;
        self.store.flush().await?;
        self.cache.insert(
            minted.record.key_id.clone(),
            Arc::new(minted.record.clone()),
        );
        Ok(minted)
    }

    /// Every stored record of `tenant_id` (hashes, never secrets), sorted by key_id: the key
    /// snapshot a control plane serves to its sidecars.
    pub fn records(&self, tenant_id: &str) -> Vec<ApiKeyRecord> {
        let mut out: Vec<ApiKeyRecord> = self
            .cache
            .iter()
            .filter(|r| r.tenant_id == tenant_id)
            .map(|r| r.as_ref().clone())
            .collect();
        out.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        out
    }

    /// Replaces every key of `tenant_id` with `records` (a snapshot from the control plane):
    /// keys missing from it are removed, the rest written through, then flushed. Records of
    /// another tenant in the snapshot are ignored. Returns how many keys the tenant now has.
    ///
    /// Errors: `Store` on storage failure (the cache may then be partly updated; the next
    /// snapshot repairs it).
    pub async fn replace_tenant(
        &self,
        tenant_id: &str,
        records: Vec<ApiKeyRecord>,
    ) -> Result<usize, AuthError> {
        let keep: std::collections::HashSet<String> =
            records.iter().map(|r| r.key_id.clone()).collect();
        let stale: Vec<String> = self
            .cache
            .iter()
            .filter(|r| r.tenant_id == tenant_id && !keep.contains(&r.key_id))
            .map(|r| r.key_id.clone())
            .collect();
        for key_id in stale {
            self.tree.remove(key_id.as_bytes())?;
            self.cache.remove(&key_id);
        }
        let mut count = 0;
        for record in records.into_iter().filter(|r| r.tenant_id == tenant_id) {
            self.tree.put(record.key_id.as_bytes(), &record)?;
            self.cache.insert(record.key_id.clone(), Arc::new(record));
            count += 1;
        }
        self.store.flush().await?;
        Ok(count)
    }

    /// Every key of `tenant_id`, oldest first, as public views.
    pub fn list(&self, tenant_id: &str, now: DateTime<Utc>) -> Vec<KeyInfo> {
        let mut out: Vec<KeyInfo> = self
            .cache
            .iter()
            .filter(|r| r.tenant_id == tenant_id)
            .map(|r| r.info(now, self.revoked_file.contains(&r.key_id)))
            .collect();
        out.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        out
    }

    /// One key of `tenant_id`. Errors: `UnknownKey` (also for another tenant's key).
    pub fn get(&self, tenant_id: &str, key_id: &str) -> Result<Arc<ApiKeyRecord>, AuthError> {
        match self.cache.get(key_id) {
            Some(r) if r.tenant_id == tenant_id => Ok(r.clone()),
            _ => Err(AuthError::UnknownKey),
        }
    }

    /// Revokes a key of `tenant_id` (idempotent) and flushes.
    pub async fn revoke(
        &self,
        tenant_id: &str,
        key_id: &str,
        now: DateTime<Utc>,
    ) -> Result<KeyInfo, AuthError> {
        let current = self.get(tenant_id, key_id)?;
        let mut record = (*current).clone();
        record.revoked_at.get_or_insert(now);
        self.tree.put(key_id.as_bytes(), &record)?;
        self.store.flush().await?;
        let info = record.info(now, self.revoked_file.contains(key_id));
        self.cache.insert(key_id.to_string(), Arc::new(record));
        Ok(info)
    }

    /// Verifies a presented key's secret (constant time) without judging revocation or expiry.
    ///
    /// Errors: `Invalid` for a malformed, unknown or wrong key.
    pub fn inspect(&self, presented: &str) -> Result<KeyPosture, AuthError> {
        let (key_id, secret) = keys::parse_presented(presented).ok_or(AuthError::Invalid)?;
        let record = self
            .cache
            .get(key_id)
            .map(|r| r.clone())
            .ok_or(AuthError::Invalid)?;
        if !record.secret_matches(secret) {
            return Err(AuthError::Invalid);
        }
        let revoked = record.revoked_at.is_some() || self.revoked_file.contains(key_id);
        Ok(KeyPosture { record, revoked })
    }

    /// Authenticates a presented key: valid secret, not revoked, not expired.
    ///
    /// Errors: `Invalid`, `Revoked`, `Expired` (all 401).
    pub fn authenticate(
        &self,
        presented: &str,
        now: DateTime<Utc>,
    ) -> Result<Arc<ApiKeyRecord>, AuthError> {
        let posture = self.inspect(presented)?;
        if posture.revoked {
            return Err(AuthError::Revoked);
        }
        if posture.record.expired(now) {
            return Err(AuthError::Expired);
        }
        Ok(posture.record)
    }

    /// True when the revocation file lists `key_id`.
    pub fn revoked_by_file(&self, key_id: &str) -> bool {
        self.revoked_file.contains(key_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::keys::{Permission, ScopeLevel};

    fn org_request() -> CreateKeyRequest {
        CreateKeyRequest {
            name: Some("ci".into()),
            scope_level: ScopeLevel::Organization,
            scope_target_id: None,
            permissions: vec![Permission::Execute],
            expires_in_days: None,
        }
    }

    #[tokio::test]
    async fn created_keys_authenticate_until_revoked_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let now = Utc::now();
        let plaintext;
        {
            let store = Store::open(dir.path()).unwrap();
            let ks = KeyStore::open(&store, RevokedSet::empty()).unwrap();
            let minted = ks.create("t1", org_request(), now).await.unwrap();
            plaintext = minted.plaintext;
            assert_eq!(ks.authenticate(&plaintext, now).unwrap().tenant_id, "t1");
            assert!(matches!(
                ks.authenticate("tgk.key_x.y", now),
                Err(AuthError::Invalid)
            ));
            assert_eq!(ks.list("t1", now).len(), 1);
            assert!(ks.list("t2", now).is_empty());
        }
        let store = crate::store::reopen_for_tests(dir.path());
        let ks = KeyStore::open(&store, RevokedSet::empty()).unwrap();
        let id = ks.authenticate(&plaintext, now).unwrap().key_id.clone();
        assert!(matches!(
            ks.revoke("t2", &id, now).await,
            Err(AuthError::UnknownKey)
        ));
        ks.revoke("t1", &id, now).await.unwrap();
        assert!(matches!(
            ks.authenticate(&plaintext, now),
            Err(AuthError::Revoked)
        ));
        assert!(ks.inspect(&plaintext).unwrap().revoked);
    }

    #[tokio::test]
    async fn expired_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let ks = KeyStore::open(&store, RevokedSet::empty()).unwrap();
        let mut r = org_request();
        r.expires_in_days = Some(1);
        let minted = ks.create("t", r, Utc::now()).await.unwrap();
        let later = Utc::now() + chrono::Duration::days(2);
        assert!(matches!(
            ks.authenticate(&minted.plaintext, later),
            Err(AuthError::Expired)
        ));
    }
}
