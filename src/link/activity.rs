//! Today's activity of this sidecar, for its check-ins: the agents and sessions seen, the
//! violations (BLOCK decisions), and the highest risk score of the day. Kept in memory for the
//! current UTC day (a restart starts the day's counts again; the ledger keeps the record).

use crate::vocab::Decision;
use chrono::NaiveDate;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// Most agents and sessions remembered per day (beyond that only the counts grow).
const MAX_IDS: usize = 10_000;

#[derive(Default)]
struct Day {
    date: Option<NaiveDate>,
    agents: BTreeSet<String>,
    sessions: BTreeSet<String>,
    sessions_beyond: u64,
    violations: u64,
    max_risk: f64,
}

/// What a check-in reports about today.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivitySummary {
    /// Agents seen today, sorted.
    pub agent_ids: Vec<String>,
    /// Distinct sessions seen today.
    pub sessions_today: u64,
    /// BLOCK decisions today.
    pub violations_today: u64,
    /// Highest risk score of today's decisions (0 when none).
    pub risk_score: f64,
}

/// The day's counters (one per process).
#[derive(Default)]
pub struct Activity {
    day: Mutex<Day>,
}

impl Activity {
    /// Records one decision.
    pub fn record(&self, agent_id: &str, session_id: &str, decision: Decision, risk: f64) {
        let today = crate::ids::now().date_naive();
        let Ok(mut d) = self.day.lock() else { return };
        if d.date != Some(today) {
            *d = Day {
                date: Some(today),
                ..Day::default()
            };
        }
        if d.agents.len() < MAX_IDS {
            d.agents.insert(agent_id.to_string());
        }
        if d.sessions.len() < MAX_IDS {
            d.sessions.insert(session_id.to_string());
        } else if !d.sessions.contains(session_id) {
            d.sessions_beyond += 1;
        }
        if decision == Decision::Block {
            d.violations += 1;
        }
        d.max_risk = d.max_risk.max(risk);
    }

    /// Today's summary (empty on a new day).
    pub fn summary(&self) -> ActivitySummary {
        let today = crate::ids::now().date_naive();
        let Ok(d) = self.day.lock() else {
            return ActivitySummary::empty();
        };
        if d.date != Some(today) {
            return ActivitySummary::empty();
        }
        ActivitySummary {
            agent_ids: d.agents.iter().cloned().collect(),
            sessions_today: d.sessions.len() as u64 + d.sessions_beyond,
            violations_today: d.violations,
            risk_score: d.max_risk,
        }
    }
}

impl ActivitySummary {
    fn empty() -> ActivitySummary {
        ActivitySummary {
            agent_ids: Vec::new(),
            sessions_today: 0,
            violations_today: 0,
            risk_score: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_agents_sessions_violations_and_the_days_highest_risk() {
        let a = Activity::default();
        a.record("bot-b", "s1", Decision::Allow, 10.0);
        a.record("bot-a", "s1", Decision::Block, 80.0);
        a.record("bot-a", "s2", Decision::StepUp, 40.0);
        let s = a.summary();
        assert_eq!(s.agent_ids, vec!["bot-a", "bot-b"]);
        assert_eq!((s.sessions_today, s.violations_today), (2, 1));
        assert_eq!(s.risk_score, 80.0);
    }
}
