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

mod handlers;
mod store;
#[cfg(test)]
mod tests;
mod validation;

pub use handlers::{authorize_for_endpoint, check_in, list, register};
pub use store::Endpoints;
pub use validation::validate_id;

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
