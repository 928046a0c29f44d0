//! Per-session usage: USD spent and tokens used by allowed calls, for the session budget control.
//!
//! Kept in memory only (a restart forgets it, so the session budget restarts too; documented in
//! docs/reference.md). Bounded: past [`MAX_SESSIONS`] tracked sessions the least recently seen
//! half is forgotten.

use crate::policy::DecideContext;
use chrono::{DateTime, Utc};
use dashmap::DashMap;

/// Most sessions tracked at once.
pub const MAX_SESSIONS: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Usage {
    spent_usd: f64,
    tokens: f64,
    last_seen: DateTime<Utc>,
}

/// Spend per (tenant_id, session_id).
#[derive(Default)]
pub struct SessionUsage {
    map: DashMap<(String, String), Usage>,
}

impl SessionUsage {
    /// The decide context for a session at `now`.
    pub fn context(&self, tenant_id: &str, session_id: &str, now: DateTime<Utc>) -> DecideContext {
        let mut ctx = DecideContext::fresh(now);
        if let Some(u) = self
            .map
            .get(&(tenant_id.to_string(), session_id.to_string()))
        {
            ctx.session_spent_usd = u.spent_usd;
            ctx.session_tokens = u.tokens;
        }
        ctx
    }

    /// Adds an allowed call's planned spend to its session.
    pub fn record(
        &self,
        tenant_id: &str,
        session_id: &str,
        cost_usd: f64,
        tokens: f64,
        now: DateTime<Utc>,
    ) {
        if cost_usd == 0.0 && tokens == 0.0 {
            return;
        }
        if self.map.len() >= MAX_SESSIONS {
            self.evict_oldest_half();
        }
        let mut entry = self
            .map
            .entry((tenant_id.to_string(), session_id.to_string()))
            .or_insert(Usage {
                spent_usd: 0.0,
                tokens: 0.0,
                last_seen: now,
            });
        entry.spent_usd += cost_usd;
        entry.tokens += tokens;
        entry.last_seen = now;
    }

    fn evict_oldest_half(&self) {
        let mut seen: Vec<DateTime<Utc>> = self.map.iter().map(|e| e.last_seen).collect();
        seen.sort();
        if let Some(cutoff) = seen.get(seen.len() / 2).copied() {
            self.map.retain(|_, u| u.last_seen > cutoff);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spend_accumulates_per_tenant_and_session() {
        let s = SessionUsage::default();
        let now = Utc::now();
        s.record("t", "s1", 1.5, 100.0, now);
        s.record("t", "s1", 2.0, 0.0, now);
        s.record("t", "s2", 9.0, 0.0, now);
        assert_eq!(s.context("t", "s1", now).session_spent_usd, 3.5);
        assert_eq!(s.context("t", "s1", now).session_tokens, 100.0);
        assert_eq!(s.context("u", "s1", now).session_spent_usd, 0.0);
    }
}
