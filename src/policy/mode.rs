//! How `enforcement_mode` shapes findings (decision algorithm step 4), and which finding
//! decides.
//!
//! Each finding's effect is shaped on its own, unless the finding is `always`:
//! * `observe`: every effect becomes ALLOW (what would have happened is recorded);
//! * `step_up`: DENY becomes STEP_UP;
//! * `progressive`: DENY stays DENY for high/critical findings, else becomes STEP_UP;
//! * `block`: unchanged.
//!
//! The verdict is the most restrictive shaped effect (DENY > STEP_UP > DEFER > MODIFY > ALLOW).
//! Among the findings with that shaped effect, the deciding one is the one with the most
//! restrictive raw effect, then the highest severity, then the first evaluated. The raw
//! verdict is the most restrictive unshaped effect, chosen the same way.

use super::Finding;
use crate::vocab::{AuthorizationDecision, EnforcementMode, Severity};

/// The outcome of shaping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The shaped verdict.
    pub decision: AuthorizationDecision,
    /// The verdict before shaping.
    pub raw: AuthorizationDecision,
    /// Index of the finding that gives the shaped verdict its reason (None: nothing objected
    /// after shaping, or nothing at all).
    pub deciding: Option<usize>,
    /// Index of the finding behind the raw verdict (None when the raw verdict is a clean ALLOW).
    pub raw_deciding: Option<usize>,
}

/// One finding's effect under `mode`.
pub(crate) fn shaped(f: &Finding, mode: EnforcementMode) -> AuthorizationDecision {
    use AuthorizationDecision::{Allow, Deny, StepUp};
    if f.always {
        return f.effect;
    }
    match (mode, f.effect) {
        (EnforcementMode::Observe, _) => Allow,
        (EnforcementMode::StepUp, Deny) => StepUp,
        (EnforcementMode::Progressive, Deny) if f.severity < Severity::High => StepUp,
        (_, effect) => effect,
    }
}

/// Shapes `findings` (in evaluation order) under `mode`.
pub(crate) fn shape<'a>(
    findings: impl Iterator<Item = &'a Finding> + Clone,
    mode: EnforcementMode,
) -> Outcome {
    let (decision, deciding) = pick(findings.clone(), |f| shaped(f, mode));
    let (raw, raw_deciding) = pick(findings, |f| f.effect);
    Outcome {
        decision,
        raw,
        deciding,
        raw_deciding,
    }
}

/// The most restrictive effect by `effect_of` and the index of the finding that gives it;
/// ALLOW findings never decide.
fn pick<'a>(
    findings: impl Iterator<Item = &'a Finding>,
    effect_of: impl Fn(&Finding) -> AuthorizationDecision,
) -> (AuthorizationDecision, Option<usize>) {
    let mut best: Option<(
        usize,
        (AuthorizationDecision, AuthorizationDecision, Severity),
    )> = None;
    for (i, f) in findings.enumerate() {
        let key = (effect_of(f), f.effect, f.severity);
        if key.0 == AuthorizationDecision::Allow {
            continue;
        }
        // Strictly greater only: on a tie the first evaluated finding stays.
        if best.is_none_or(|(_, b)| key > b) {
            best = Some((i, key));
        }
    }
    match best {
        Some((i, (effect, _, _))) => (effect, Some(i)),
        None => (AuthorizationDecision::Allow, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_support::finding;
    use AuthorizationDecision::*;
    use EnforcementMode as M;

    fn f(effect: AuthorizationDecision, severity: Severity, always: bool) -> Finding {
        let mut f = finding("x", effect, 0.0).finding;
        f.severity = severity;
        f.always = always;
        f
    }

    #[test]
    fn shaping_table() {
        let cases = [
            (M::Block, Deny, Severity::Low, false, Deny),
            (M::Observe, Deny, Severity::Critical, false, Allow),
            (M::Observe, Modify, Severity::Low, false, Allow),
            (M::Observe, Deny, Severity::Low, true, Deny),
            (M::StepUp, Deny, Severity::Critical, false, StepUp),
            (M::StepUp, Deny, Severity::Critical, true, Deny),
            (M::StepUp, Modify, Severity::Low, false, Modify),
            (M::StepUp, Defer, Severity::Low, false, Defer),
            (M::Progressive, Deny, Severity::High, false, Deny),
            (M::Progressive, Deny, Severity::Critical, false, Deny),
            (M::Progressive, Deny, Severity::Medium, false, StepUp),
            (M::Progressive, Deny, Severity::Low, true, Deny),
            (M::Progressive, StepUp, Severity::Low, false, StepUp),
        ];
        for (mode, effect, severity, always, want) in cases {
            assert_eq!(
                shaped(&f(effect, severity, always), mode),
                want,
                "{mode} {effect} {severity} {always}"
            );
        }
    }

    #[test]
    fn deciding_finding_table() {
        let findings = [
            f(Modify, Severity::Medium, false),
            f(Deny, Severity::Medium, false),
            f(StepUp, Severity::High, false),
            f(Deny, Severity::High, false),
        ];
        let cases = [
            (M::Block, Deny, Some(3)),       // two DENYs: the higher severity decides
            (M::StepUp, StepUp, Some(3)),    // all STEP_UP after shaping: raw DENY high first
            (M::Progressive, Deny, Some(3)), // only the high DENY stays DENY
            (M::Observe, Allow, None),
        ];
        for (mode, want, index) in cases {
            let o = shape(findings.iter(), mode);
            assert_eq!((o.decision, o.deciding), (want, index), "{mode}");
            assert_eq!((o.raw, o.raw_deciding), (Deny, Some(3)), "{mode}");
        }
        let none = shape([].iter(), M::Block);
        assert_eq!(
            (none.decision, none.raw, none.deciding),
            (Allow, Allow, None)
        );
        let allow_only = [f(Allow, Severity::High, true)];
        assert_eq!(shape(allow_only.iter(), M::Block).deciding, None);
    }
}
