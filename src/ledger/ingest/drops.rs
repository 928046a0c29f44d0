//! Recent replay drops per tenant, in memory only (the control plane's `replay_storm` alert).
//!
//! Each tenant keeps `(second, count)` buckets: the unix second (in millis) of the batches whose
//! events were dropped as replays or in-request duplicates, and how many. Buckets older than
//! [`DROP_MEMORY_MS`] are pruned on every record and read; at most
//! [`MAX_BUCKETS_PER_TENANT`] buckets per tenant and [`MAX_TENANTS`] tenants are kept, so memory
//! stays bounded whatever the traffic. Nothing here survives a restart.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// How long drop buckets are remembered: 24 hours, in milliseconds.
pub const DROP_MEMORY_MS: u64 = 24 * 60 * 60 * 1000;
/// Buckets kept per tenant (the oldest go first): about 2.5 hours of drops in every second.
pub const MAX_BUCKETS_PER_TENANT: usize = 8192;
/// Tenants tracked at once; drops of further tenants are not recorded until old ones expire.
pub const MAX_TENANTS: usize = 10_000;

/// The per-tenant drop buckets.
#[derive(Default)]
pub(crate) struct DropLog {
    tenants: Mutex<HashMap<String, VecDeque<(u64, u64)>>>,
}

impl DropLog {
    /// Records `count` drops for `tenant` at `now_ms` (nothing for 0).
    pub(crate) fn record(&self, tenant: &str, count: u64, now_ms: u64) {
        if count == 0 {
            return;
        }
        let second = now_ms - now_ms % 1000;
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if !tenants.contains_key(tenant) && tenants.len() >= MAX_TENANTS {
            tenants.retain(|_, buckets| {
                prune(buckets, now_ms);
                !buckets.is_empty()
            });
            if tenants.len() >= MAX_TENANTS {
                tracing::debug!(tenant, "replay drop not recorded: too many tenants tracked");
                return;
            }
        }
        let buckets = tenants.entry(tenant.to_string()).or_default();
        prune(buckets, now_ms);
        match buckets.back_mut() {
            Some((at, n)) if *at == second => *n += count,
            _ => buckets.push_back((second, count)),
        }
        while buckets.len() > MAX_BUCKETS_PER_TENANT {
            buckets.pop_front();
        }
    }

    /// The tenant's buckets `(unix millis of the second, drops)` of the last
    /// [`DROP_MEMORY_MS`], oldest first.
    pub(crate) fn recent(&self, tenant: &str, now_ms: u64) -> Vec<(u64, u64)> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let Some(buckets) = tenants.get_mut(tenant) else {
            return Vec::new();
        };
        prune(buckets, now_ms);
        buckets.iter().copied().collect()
    }
}

fn prune(buckets: &mut VecDeque<(u64, u64)>, now_ms: u64) {
    while buckets
        .front()
        .is_some_and(|(at, _)| now_ms.saturating_sub(*at) > DROP_MEMORY_MS)
    {
        buckets.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_bucketed_per_second_and_forgotten_after_a_day() {
        let log = DropLog::default();
        log.record("t", 3, 10_100);
        log.record("t", 2, 10_900);
        log.record("t", 0, 11_000);
        log.record("t", 4, 12_000);
        log.record("u", 1, 12_000);
        assert_eq!(log.recent("t", 12_000), vec![(10_000, 5), (12_000, 4)]);
        assert_eq!(log.recent("u", 12_000), vec![(12_000, 1)]);
        assert!(log.recent("v", 12_000).is_empty());
        assert_eq!(log.recent("t", 12_000 + DROP_MEMORY_MS), vec![(12_000, 4)]);
    }

    #[test]
    fn buckets_per_tenant_are_bounded() {
        let log = DropLog::default();
        for s in 0..(MAX_BUCKETS_PER_TENANT as u64 + 10) {
            log.record("t", 1, s * 1000);
        }
        let recent = log.recent("t", MAX_BUCKETS_PER_TENANT as u64 * 1000);
        assert_eq!(recent.len(), MAX_BUCKETS_PER_TENANT);
        assert_eq!(recent[0].0, 10_000, "the oldest went first");
    }
}
