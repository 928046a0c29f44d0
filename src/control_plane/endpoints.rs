//! Control-plane endpoints (SPEC.md, "Control-plane calls": POST /endpoints, POST
//! /endpoints/<endpoint_id>/checkin, GET /endpoints): the sidecars (workstations, servers) of a
//! tenant, their registration and their periodic check-ins. Bodies and answers are documented in
//! docs/control-plane.md.
//!
//! * `POST /<tenant_id>/service/endpoints` with [`Registration`] → 201 [`EndpointView`] on the
//!   first registration, 200 on a re-registration (fields present in the body replace the stored
//!   ones; `registered_at` stays).
//! * `POST /<tenant_id>/service/endpoints/<endpoint_id>/checkin` with [`CheckIn`] → 200
//!   `{"endpoint_id", "accepted": true, "next_checkin_seconds", "server_time"}`; 404
//!   `endpoint not registered` for an unknown endpoint (the sidecar then registers).
//! * `GET /<tenant_id>/service/endpoints` → `{"endpoints": [EndpointView…]}` by endpoint_id.
//!
//! Authentication: the admin bearer or an organization key of the tenant (`read` for the GET,
//! `write` for the POSTs). The two POSTs also accept an endpoint-scoped key with `write` whose
//! `scope_target_id` is the endpoint in question, so a sidecar needs no organization key.
//!
//! Storage: the `Endpoints` tree, one JSON [`EndpointRecord`] at `pair_key(tenant_id,
//! endpoint_id)`. A registration is flushed before it is answered; a check-in is not (sled's
//! background flush writes it within about 500 ms: a crash may lose the last check-in, never a
//! registration).

use crate::api::{ApiError, ApiJson};
use crate::auth::{AuthError, Operator, Permission, ScopeLevel};
use crate::ids;
use crate::state::AppState;
use crate::store::{pair_key, Store, StoreError, Tree, TreeName};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::{Mutex, MutexGuard};

/// Longest `endpoint_id` and agent id, in characters.
pub const MAX_ID_CHARS: usize = 256;
/// Longest free-text field (hostname, employee_email, enrollment, environment, proxy_version),
/// in characters.
pub const MAX_TEXT_CHARS: usize = 512;
/// Most `agent_ids` one endpoint may report.
pub const MAX_AGENT_IDS: usize = 1000;

/// Body of POST /endpoints. Unknown fields are ignored (newer sidecars may send more).
#[derive(Debug, Clone, Deserialize)]
pub struct Registration {
    /// Required; 1..=256 characters, no control characters.
    pub endpoint_id: String,
    /// Host name of the machine.
    #[serde(default)]
    pub hostname: Option<String>,
    /// E-mail of the employee using the machine.
    #[serde(default)]
    pub employee_email: Option<String>,
    /// How the endpoint was enrolled (for example `mdm`, `manual`).
    #[serde(default)]
    pub enrollment: Option<String>,
    /// Environment tag (for example `prod`).
    #[serde(default)]
    pub environment: Option<String>,
    /// Version of the sidecar.
    #[serde(default)]
    pub proxy_version: Option<String>,
    /// Agents running on the endpoint.
    #[serde(default)]
    pub agent_ids: Option<Vec<String>>,
}

/// Body of POST /endpoints/<endpoint_id>/checkin; every field optional. Unknown fields are
/// ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CheckIn {
    /// Version of the sidecar.
    #[serde(default)]
    pub proxy_version: Option<String>,
    /// Agents running on the endpoint.
    #[serde(default)]
    pub agent_ids: Option<Vec<String>>,
    /// The endpoint's current risk score, 0..=100.
    #[serde(default)]
    pub risk_score: Option<f64>,
    /// BLOCK decisions on the endpoint today (non-negative integer).
    #[serde(default)]
    pub violations_today: Option<u64>,
    /// Agent sessions on the endpoint today (non-negative integer).
    #[serde(default)]
    pub sessions_today: Option<u64>,
}

/// The stored endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EndpointRecord {
    /// Endpoint id.
    pub endpoint_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Host name.
    pub hostname: Option<String>,
    /// Employee e-mail.
    pub employee_email: Option<String>,
    /// Enrollment.
    pub enrollment: Option<String>,
    /// Environment.
    pub environment: Option<String>,
    /// Sidecar version (registration or last check-in).
    pub proxy_version: Option<String>,
    /// Agents (registration or last check-in).
    pub agent_ids: Vec<String>,
    /// First registration.
    pub registered_at: DateTime<Utc>,
    /// Last registration (first or repeated).
    pub updated_at: DateTime<Utc>,
    /// Last check-in; `None` before the first.
    pub last_checkin_at: Option<DateTime<Utc>>,
    /// Risk score of the last check-in.
    pub risk_score: Option<f64>,
    /// violations_today of the last check-in.
    pub violations_today: Option<u64>,
    /// sessions_today of the last check-in.
    pub sessions_today: Option<u64>,
}

/// An endpoint as GET /endpoints lists it: the record plus its liveness.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EndpointView {
    /// Endpoint id.
    pub endpoint_id: String,
    /// Host name, or null.
    pub hostname: Option<String>,
    /// Employee e-mail, or null.
    pub employee_email: Option<String>,
    /// Enrollment, or null.
    pub enrollment: Option<String>,
    /// Environment, or null.
    pub environment: Option<String>,
    /// Sidecar version, or null.
    pub proxy_version: Option<String>,
    /// Agents.
    pub agent_ids: Vec<String>,
    /// RFC 3339.
    pub registered_at: String,
    /// RFC 3339, or null before the first check-in.
    pub last_checkin_at: Option<String>,
    /// Risk score of the last check-in, or null.
    pub risk_score: Option<f64>,
    /// violations_today of the last check-in, or null.
    pub violations_today: Option<u64>,
    /// sessions_today of the last check-in, or null.
    pub sessions_today: Option<u64>,
    /// True when neither a check-in nor a registration arrived within `stale_after_seconds`.
    pub stale: bool,
    /// Whole seconds since the last check-in (since the last registration before the first).
    pub seconds_since_checkin: u64,
}

impl EndpointRecord {
    /// The last sign of life: the last check-in, else the last registration.
    pub fn last_seen(&self) -> DateTime<Utc> {
        match self.last_checkin_at {
            Some(c) if c > self.updated_at => c,
            _ => self.updated_at,
        }
    }

    /// Whole seconds since [`EndpointRecord::last_seen`] (0 for a time in the future).
    pub fn seconds_silent(&self, now: DateTime<Utc>) -> u64 {
        u64::try_from((now - self.last_seen()).num_seconds()).unwrap_or(0)
    }

    /// True when silent for longer than `stale_after_seconds`.
    pub fn is_stale(&self, now: DateTime<Utc>, stale_after_seconds: u64) -> bool {
        self.seconds_silent(now) >= stale_after_seconds
    }

    /// The listed view at `now`.
    pub fn view(&self, now: DateTime<Utc>, stale_after_seconds: u64) -> EndpointView {
        EndpointView {
            endpoint_id: self.endpoint_id.clone(),
            hostname: self.hostname.clone(),
            employee_email: self.employee_email.clone(),
            enrollment: self.enrollment.clone(),
            environment: self.environment.clone(),
            proxy_version: self.proxy_version.clone(),
            agent_ids: self.agent_ids.clone(),
            registered_at: ids::rfc3339(self.registered_at),
            last_checkin_at: self.last_checkin_at.map(ids::rfc3339),
            risk_score: self.risk_score,
            violations_today: self.violations_today,
            sessions_today: self.sessions_today,
            stale: self.is_stale(now, stale_after_seconds),
            seconds_since_checkin: self.seconds_silent(now),
        }
    }
}

/// The endpoints of every tenant, in the `Endpoints` tree.
pub struct Endpoints {
    store: Store,
    tree: Tree,
    /// Serialises read-modify-write of records (never held across an await).
    write: Mutex<()>,
}

impl Endpoints {
    /// Endpoints over `store`.
    pub fn new(store: &Store) -> Endpoints {
        Endpoints {
            store: store.clone(),
            tree: store.tree(TreeName::Endpoints),
            write: Mutex::new(()),
        }
    }

    /// Registers (or re-registers) an endpoint and flushes. Returns the record and whether it
    /// was new. The body must have been validated ([`Registration::validate`]).
    ///
    /// Errors: storage failures.
    pub async fn register(
        &self,
        tenant_id: &str,
        reg: Registration,
        now: DateTime<Utc>,
    ) -> Result<(EndpointRecord, bool), StoreError> {
        let key = pair_key(tenant_id, &reg.endpoint_id);
        let (record, created) = {
            let _guard = self.lock();
            let (mut rec, created) = match self.tree.get::<EndpointRecord>(&key)? {
                Some(rec) => (rec, false),
                None => (EndpointRecord::new(tenant_id, &reg.endpoint_id, now), true),
            };
            rec.apply_registration(reg, now);
            self.tree.put(&key, &rec)?;
            (rec, created)
        };
        self.store.flush().await?;
        Ok((record, created))
    }

    /// Records a check-in (not flushed, see the module docs). `None` when the endpoint is not
    /// registered. The body must have been validated ([`CheckIn::validate`]).
    ///
    /// Errors: storage failures.
    pub fn check_in(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        c: CheckIn,
        now: DateTime<Utc>,
    ) -> Result<Option<EndpointRecord>, StoreError> {
        let key = pair_key(tenant_id, endpoint_id);
        let _guard = self.lock();
        let Some(mut rec) = self.tree.get::<EndpointRecord>(&key)? else {
            return Ok(None);
        };
        if c.proxy_version.is_some() {
            rec.proxy_version = c.proxy_version;
        }
        if let Some(agents) = c.agent_ids {
            rec.agent_ids = agents;
        }
        rec.risk_score = c.risk_score.or(rec.risk_score);
        rec.violations_today = c.violations_today.or(rec.violations_today);
        rec.sessions_today = c.sessions_today.or(rec.sessions_today);
        rec.last_checkin_at = Some(now);
        self.tree.put(&key, &rec)?;
        Ok(Some(rec))
    }

    /// Every endpoint of `tenant_id`, by endpoint_id.
    ///
    /// Errors: storage failures, a record that does not decode.
    pub fn list(&self, tenant_id: &str) -> Result<Vec<EndpointRecord>, StoreError> {
        let prefix = pair_key(tenant_id, "");
        let mut out: Vec<EndpointRecord> = self
            .tree
            .scan::<EndpointRecord>(&prefix)?
            .into_iter()
            .map(|(_, rec)| rec)
            .collect();
        out.sort_by(|a, b| a.endpoint_id.cmp(&b.endpoint_id));
        Ok(out)
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl EndpointRecord {
    fn new(tenant_id: &str, endpoint_id: &str, now: DateTime<Utc>) -> EndpointRecord {
        EndpointRecord {
            endpoint_id: endpoint_id.to_string(),
            tenant_id: tenant_id.to_string(),
            hostname: None,
            employee_email: None,
            enrollment: None,
            environment: None,
            proxy_version: None,
            agent_ids: Vec::new(),
            registered_at: now,
            updated_at: now,
            last_checkin_at: None,
            risk_score: None,
            violations_today: None,
            sessions_today: None,
        }
    }

    /// Fields present in `reg` replace the stored ones.
    fn apply_registration(&mut self, reg: Registration, now: DateTime<Utc>) {
        let keep = |new: Option<String>, old: &mut Option<String>| {
            if new.is_some() {
                *old = new;
            }
        };
        keep(reg.hostname, &mut self.hostname);
        keep(reg.employee_email, &mut self.employee_email);
        keep(reg.enrollment, &mut self.enrollment);
        keep(reg.environment, &mut self.environment);
        keep(reg.proxy_version, &mut self.proxy_version);
        if let Some(agents) = reg.agent_ids {
            self.agent_ids = agents;
        }
        self.updated_at = now;
    }
}

/// An identifier (endpoint_id, agent id): 1..=[`MAX_ID_CHARS`] characters, no control
/// characters. Errors: the 422 text naming `field`.
pub fn validate_id(field: &str, value: &str) -> Result<(), String> {
    let chars = value.chars().count();
    if chars == 0 || chars > MAX_ID_CHARS {
        return Err(format!("{field} must be 1 to {MAX_ID_CHARS} characters"));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

fn validate_text(field: &str, value: Option<&str>) -> Result<(), String> {
    let Some(v) = value else { return Ok(()) };
    if v.chars().count() > MAX_TEXT_CHARS {
        return Err(format!(
            "{field} is longer than {MAX_TEXT_CHARS} characters"
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

fn validate_agents(agents: Option<&[String]>) -> Result<(), String> {
    let Some(agents) = agents else { return Ok(()) };
    if agents.len() > MAX_AGENT_IDS {
        return Err(format!("agent_ids has more than {MAX_AGENT_IDS} entries"));
    }
    for (i, a) in agents.iter().enumerate() {
        validate_id(&format!("agent_ids[{i}]"), a)?;
    }
    Ok(())
}

impl Registration {
    /// Errors: the first problem, naming the field (422).
    pub fn validate(&self) -> Result<(), String> {
        validate_id("endpoint_id", &self.endpoint_id)?;
        for (field, value) in [
            ("hostname", &self.hostname),
            ("employee_email", &self.employee_email),
            ("enrollment", &self.enrollment),
            ("environment", &self.environment),
            ("proxy_version", &self.proxy_version),
        ] {
            validate_text(field, value.as_deref())?;
        }
        validate_agents(self.agent_ids.as_deref())
    }
}

impl CheckIn {
    /// Errors: the first problem, naming the field (422).
    pub fn validate(&self) -> Result<(), String> {
        validate_text("proxy_version", self.proxy_version.as_deref())?;
        validate_agents(self.agent_ids.as_deref())?;
        if let Some(r) = self.risk_score {
            if !(0.0..=100.0).contains(&r) {
                return Err("risk_score must be between 0 and 100".into());
            }
        }
        Ok(())
    }
}

/// Endpoint-scoped keys may act for their own endpoint: `write` and `scope_target_id ==
/// endpoint_id`. Everyone else goes through [`Operator::authorize`] (organization keys).
///
/// Errors: `TenantMismatch`, `PermissionDenied`, `ScopeDenied` (403).
pub fn authorize_for_endpoint(
    op: &Operator,
    tenant_id: &str,
    endpoint_id: &str,
) -> Result<(), AuthError> {
    if let Operator::Key(key) = op {
        if key.scope_level == ScopeLevel::Endpoint {
            if key.tenant_id != tenant_id {
                return Err(AuthError::TenantMismatch);
            }
            if !key.has(Permission::Write) {
                return Err(AuthError::PermissionDenied(Permission::Write.as_str()));
            }
            return match key.scope_target_id.as_deref() {
                Some(target) if target == endpoint_id => Ok(()),
                other => Err(AuthError::ScopeDenied(format!(
                    "API key is scoped to endpoint `{}`, not `{endpoint_id}`",
                    other.unwrap_or("")
                ))),
            };
        }
    }
    op.authorize(tenant_id, Permission::Write, true)
}

/// Handler of POST /endpoints.
pub async fn register(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
    ApiJson(reg): ApiJson<Registration>,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    authorize_for_endpoint(&op, &tenant_id, &reg.endpoint_id)?;
    reg.validate().map_err(ApiError::Unprocessable)?;
    let now = ids::now();
    let (rec, created) = core.endpoints.register(&tenant_id, reg, now).await?;
    if created {
        tracing::info!(tenant_id = %tenant_id, endpoint_id = %rec.endpoint_id, by = %op.identity(), "endpoint registered");
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(rec.view(now, core.config.stale_after_seconds))))
}

/// Handler of POST /endpoints/<endpoint_id>/checkin.
pub async fn check_in(
    State(core): State<AppState>,
    op: Operator,
    Path((tenant_id, endpoint_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<CheckIn>,
) -> Result<Json<Value>, ApiError> {
    authorize_for_endpoint(&op, &tenant_id, &endpoint_id)?;
    validate_id("endpoint_id", &endpoint_id).map_err(ApiError::Unprocessable)?;
    body.validate().map_err(ApiError::Unprocessable)?;
    let now = ids::now();
    if core
        .endpoints
        .check_in(&tenant_id, &endpoint_id, body, now)?
        .is_none()
    {
        return Err(ApiError::NotFound("endpoint not registered".into()));
    }
    Ok(Json(json!({
        "endpoint_id": endpoint_id,
        "accepted": true,
        "next_checkin_seconds": core.config.checkin_interval_seconds,
        "server_time": ids::rfc3339(now),
    })))
}

/// Handler of GET /endpoints.
pub async fn list(
    State(core): State<AppState>,
    op: Operator,
    Path(tenant_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    op.authorize(&tenant_id, Permission::Read, true)?;
    let now = ids::now();
    let stale_after = core.config.stale_after_seconds;
    let endpoints: Vec<EndpointView> = core
        .endpoints
        .list(&tenant_id)?
        .iter()
        .map(|r| r.view(now, stale_after))
        .collect();
    Ok(Json(json!({ "endpoints": endpoints })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn reg(id: &str) -> Registration {
        Registration {
            endpoint_id: id.into(),
            hostname: Some("host-1".into()),
            employee_email: None,
            enrollment: None,
            environment: Some("prod".into()),
            proxy_version: Some("1.0.0".into()),
            agent_ids: Some(vec!["a1".into()]),
        }
    }

    #[test]
    fn validation_names_the_field() {
        let cases: Vec<(Registration, &str)> = vec![
            (reg(""), "endpoint_id must be 1 to 256"),
            (reg(&"x".repeat(257)), "endpoint_id must be 1 to 256"),
            (reg("a\u{1f}b"), "endpoint_id must not contain control"),
            (
                Registration {
                    agent_ids: Some(vec!["ok".into(), String::new()]),
                    ..reg("e")
                },
                "agent_ids[1] must be 1 to 256",
            ),
            (
                Registration {
                    hostname: Some("h".repeat(MAX_TEXT_CHARS + 1)),
                    ..reg("e")
                },
                "hostname is longer",
            ),
        ];
        for (r, needle) in cases {
            let err = r.validate().unwrap_err();
            assert!(err.contains(needle), "{err} lacks {needle}");
        }
        assert!(reg(&"x".repeat(256)).validate().is_ok());
        for bad in [-0.1, 100.5, f64::NAN] {
            let c = CheckIn {
                risk_score: Some(bad),
                ..CheckIn::default()
            };
            assert!(c.validate().unwrap_err().contains("risk_score"), "{bad}");
        }
    }

    #[tokio::test]
    async fn reregistration_keeps_registered_at_and_checkin_needs_registration() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let eps = Endpoints::new(&store);
        let t0 = ids::now() - Duration::seconds(100);
        let (first, created) = eps.register("t", reg("e1"), t0).await.unwrap();
        assert!(created);
        let later = Registration {
            hostname: None,
            proxy_version: Some("1.1.0".into()),
            ..reg("e1")
        };
        let (second, created) = eps.register("t", later, ids::now()).await.unwrap();
        assert!(!created);
        assert_eq!(second.registered_at, first.registered_at);
        assert_eq!(second.hostname.as_deref(), Some("host-1"), "absent keeps");
        assert_eq!(second.proxy_version.as_deref(), Some("1.1.0"));
        assert!(eps
            .check_in("t", "e2", CheckIn::default(), ids::now())
            .unwrap()
            .is_none());
        assert!(eps
            .check_in("other", "e1", CheckIn::default(), ids::now())
            .unwrap()
            .is_none());
        let c = CheckIn {
            risk_score: Some(12.5),
            sessions_today: Some(3),
            ..CheckIn::default()
        };
        let rec = eps.check_in("t", "e1", c, ids::now()).unwrap().unwrap();
        assert_eq!(rec.risk_score, Some(12.5));
        assert!(rec.last_checkin_at.is_some());
        assert_eq!(eps.list("t").unwrap().len(), 1);
        assert!(eps.list("other").unwrap().is_empty());
        assert!(
            eps.list("").unwrap().is_empty(),
            "the empty tenant is not a prefix of all"
        );
    }

    #[test]
    fn staleness_counts_from_the_last_sign_of_life() {
        let now = ids::now();
        let mut rec = EndpointRecord::new("t", "e", now - Duration::seconds(200));
        assert!(rec.is_stale(now, 90));
        assert_eq!(rec.seconds_silent(now), 200);
        rec.last_checkin_at = Some(now - Duration::seconds(10));
        assert!(!rec.is_stale(now, 90));
        let v = rec.view(now, 90);
        assert_eq!(v.seconds_since_checkin, 10);
        assert!(!v.stale);
    }
}
