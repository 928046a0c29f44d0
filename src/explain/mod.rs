//! Deterministic plain-language explanations of decisions (SPEC.md, "Explanation", POST
//! /v1/explain and GET /v1/explain/{violation_id}): request validation, template rendering,
//! and storage of explanations in the `explanations` tree.
//!
//! No model is involved: the text comes from the templates in the pack's
//! `policy/explanations/` directory (see docs/explanations.md), rendered with the request
//! fields and the organization settings, so equal input gives equal text.
//!
//! Layout: `request` (the body and its validation), `context` (template variables and derived
//! fields), `regimes` (regulatory descriptions), `templates` (loading, selection, sections),
//! `explanation` (the returned object), and this file (the [`Explainer`] and its storage).

mod context;
mod explanation;
mod regimes;
mod request;
mod templates;

pub use explanation::Explanation;
pub use request::{ExplainDecision, ExplainRequest, MAX_ID_BYTES, MAX_LIST_ENTRIES};
pub use templates::{DEFAULT_TEMPLATE, SECTION_NAMES};

use crate::store::{pair_key, Store, StoreError, TreeName};
use crate::vocab::ActionClassification;
use chrono::{DateTime, Utc};
use context::TemplateContext;
use std::path::Path;
use templates::Templates;

/// Errors of explanation building and storage. The API maps them (src/api/error.rs): NotFound →
/// 404, Invalid → 422, Template → 500, Store → the storage error's status.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// No explanation for that (tenant_id, violation_id) (GET /v1/explain/{violation_id}).
    #[error("human explanation not found")]
    NotFound,
    /// A request field is invalid; the message starts with the field name
    /// (`occurred_at: ...`, `matched_rule_ids[3]: ...`).
    #[error("{0}")]
    Invalid(String),
    /// A template failed to load or render; the message names the file.
    #[error("explanation template error: {0}")]
    Template(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Organization settings used in wording and `request_url`.
///
/// Empty or blank values count as unset. Without a name the wording says "your organization's
/// security policy" and "your security team"; without a dashboard `request_url` is `""` and the
/// wording asks the reader to contact the security team citing the violation ID.
#[derive(Debug, Clone, Default)]
pub struct Organization {
    /// Organization name used in the wording (`the Acme security team`).
    pub name: Option<String>,
    /// Dashboard base URL (`https://dash.example.com`); fills `request_url` when set.
    pub dashboard_url: Option<String>,
}

/// Loads and checks the explanation templates of `dir` the way [`Explainer::load`] does at
/// start-up (with the default organization), without a store: `toolgate policy check` uses it
/// so that a pack it accepts is one `serve` accepts.
///
/// Errors: as [`Explainer::load`].
pub fn check_templates(dir: &Path) -> Result<(), ExplainError> {
    let org = context::normalize_org(Organization::default());
    Templates::load(dir, &org).map(|_| ())
}

/// Builds, stores and reads explanations. Cheap to share behind an `Arc`; `Send + Sync`.
pub struct Explainer {
    templates: arc_swap::ArcSwap<Templates>,
    org: Organization,
    store: Store,
}

impl Explainer {
    /// Loads and checks every template in `dir` (the pack's `policy/explanations/`) once.
    ///
    /// Errors: [`ExplainError::Template`] naming the file, for an unreadable directory, a
    /// missing `default.j2`, a syntax error, an unknown file name or section marker, or a
    /// template that fails its load-time render check (see docs/explanations.md).
    pub fn load(dir: &Path, org: Organization, store: &Store) -> Result<Explainer, ExplainError> {
        let org = context::normalize_org(org);
        let templates = Templates::load(dir, &org)?;
        Ok(Explainer {
            templates: arc_swap::ArcSwap::from_pointee(templates),
            org,
            store: store.clone(),
        })
    }

    /// Loads the templates of `dir` and swaps them in (a new policy bundle from the control
    /// plane); on an error the previous templates stay.
    ///
    /// Errors: as [`Explainer::load`].
    pub fn reload(&self, dir: &Path) -> Result<(), ExplainError> {
        let templates = Templates::load(dir, &self.org)?;
        self.templates.store(std::sync::Arc::new(templates));
        Ok(())
    }

    /// Builds the explanation for `req`; pure and deterministic. `now` is the creation time
    /// (`timestamp`) and stands in for a missing `occurred_at`.
    ///
    /// Errors: [`ExplainError::Invalid`] for a field failing [`ExplainRequest::validate`];
    /// [`ExplainError::Template`] when the template fails to render.
    pub fn build(
        &self,
        req: &ExplainRequest,
        now: DateTime<Utc>,
    ) -> Result<Explanation, ExplainError> {
        req.validate().map_err(ExplainError::Invalid)?;
        let ctx = TemplateContext::new(req, &self.org, now).map_err(ExplainError::Invalid)?;
        let sections = self
            .templates
            .load()
            .render(req.action_classification, &ctx)?;
        Ok(Explanation::assemble(req, &self.org, sections, now))
    }

    /// POST /v1/explain: builds with the current time and, when the request carries a
    /// `violation_id`, stores the explanation under (`storage_tenant`, violation_id) and flushes
    /// before returning. A later request for the same pair replaces it. A request without
    /// `violation_id` is built and returned but not stored (there is no key to read it back by).
    ///
    /// `storage_tenant` is the authenticated caller's tenant, not the request's `tenant_id`.
    /// Errors: as [`Explainer::build`]; [`ExplainError::Invalid`] (`tenant_id: ...`) for an empty
    /// or malformed `storage_tenant` when storing; [`ExplainError::Store`] on storage failure.
    pub async fn create(
        &self,
        req: ExplainRequest,
        storage_tenant: &str,
    ) -> Result<Explanation, ExplainError> {
        let explanation = self.build(&req, crate::ids::now())?;
        if let Some(violation_id) = &req.violation_id {
            request::check_text(storage_tenant)
                .map_err(|e| ExplainError::Invalid(format!("tenant_id: {e}")))?;
            self.tree()
                .put(&pair_key(storage_tenant, violation_id), &explanation)?;
            self.store.flush().await?;
        }
        Ok(explanation)
    }

    /// GET /v1/explain/{violation_id}: the stored explanation, the same object as returned at
    /// creation.
    ///
    /// Errors: [`ExplainError::NotFound`] when nothing is stored for the pair (or either id is
    /// not a valid identifier); [`ExplainError::Store`] on storage failure.
    pub fn get(&self, tenant_id: &str, violation_id: &str) -> Result<Explanation, ExplainError> {
        if request::check_text(tenant_id).is_err() || request::check_text(violation_id).is_err() {
            return Err(ExplainError::NotFound);
        }
        self.tree()
            .get(&pair_key(tenant_id, violation_id))?
            .ok_or(ExplainError::NotFound)
    }

    /// The template file used for `classification` (`<classification>.j2` or `default.j2`).
    pub fn template_name(&self, classification: Option<ActionClassification>) -> String {
        self.templates.load().name_for(classification)
    }

    fn tree(&self) -> crate::store::Tree {
        self.store.tree(TreeName::Explanations)
    }
}

#[cfg(test)]
mod tests;
