//! Storage of endpoints: the `Endpoints` tree and the read-modify-write of records.

use super::*;
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
    pub(super) fn new(tenant_id: &str, endpoint_id: &str, now: DateTime<Utc>) -> EndpointRecord {
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
