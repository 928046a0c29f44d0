//! Deterministic plain-language explanations (SPEC.md, "Explanation"): templates, builder, store.
//! STUB: replaced by the explain module.

use crate::store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Errors of explanation building and storage.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// No explanation for that (tenant_id, violation_id).
    #[error("human explanation not found")]
    NotFound,
    /// A request field has a value outside its closed list.
    #[error("{0}")]
    Invalid(String),
    /// A template failed to load or render.
    #[error("explanation template error: {0}")]
    Template(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Organization settings used in wording and `request_url`.
#[derive(Debug, Clone, Default)]
pub struct Organization {
    /// Organization name used in the wording.
    pub name: Option<String>,
    /// Dashboard base URL; fills `request_url` when set.
    pub dashboard_url: Option<String>,
}

/// Body of POST /v1/explain; every field optional.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct ExplainRequest {
    /// Storage key, with violation_id.
    pub tenant_id: Option<String>,
    /// Storage and retrieval key.
    pub violation_id: Option<String>,
}

/// The explanation object (SPEC.md).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Explanation {
    /// Storage key.
    pub violation_id: Option<String>,
}

/// Builds, stores and reads explanations.
pub struct Explainer {
    _store: Store,
}

impl Explainer {
    /// Loads the templates in `dir`.
    pub fn load(dir: &Path, org: Organization, store: &Store) -> Result<Explainer, ExplainError> {
        let _ = (dir, org);
        Ok(Explainer { _store: store.clone() })
    }

    /// Builds, stores under (storage_tenant, violation_id) when a violation_id is given, flushes.
    pub async fn create(
        &self,
        req: ExplainRequest,
        storage_tenant: &str,
    ) -> Result<Explanation, ExplainError> {
        let _ = (req, storage_tenant);
        todo!("explain")
    }

    /// The stored explanation.
    pub fn get(&self, tenant_id: &str, violation_id: &str) -> Result<Explanation, ExplainError> {
        let _ = (tenant_id, violation_id);
        Err(ExplainError::NotFound)
    }
}
