//! Per-key rate limits (SPEC.md, Limits: "Rate limits depend on deployment"): a GCRA limiter
//! from `governor`, keyed by key_id. Over the limit the API answers 429 with `Retry-After`.

use super::AuthError;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;

/// Keyed limiter; `None` inside when limits are off (`rate_limit_per_second = 0`).
pub struct RateLimits {
    limiter: Option<DefaultKeyedRateLimiter<String>>,
    clock: DefaultClock,
}

impl RateLimits {
    /// `per_second` sustained requests per key with bursts of `burst`; 0 turns limits off.
    pub fn new(per_second: u32, burst: u32) -> Self {
        let limiter = NonZeroU32::new(per_second).map(|rate| {
            let burst = NonZeroU32::new(burst.max(per_second)).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        RateLimits {
            limiter,
            clock: DefaultClock::default(),
        }
    }

    /// Admits one request for `key_id`.
    ///
    /// Errors: `RateLimited` with the whole seconds (≥ 1) until the next admission.
    pub fn check(&self, key_id: &str) -> Result<(), AuthError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        // Avoid allocating a String per request for keys the limiter already knows.
        match limiter.check_key(&key_id.to_string()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                Err(AuthError::RateLimited {
                    retry_after_secs: secs.max(1),
                })
            }
        }
    }

    /// Forgets keys idle long enough to be back at full burst (bounded memory).
    pub fn prune(&self) {
        if let Some(l) = &self.limiter {
            l.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_429_with_retry_after_per_key() {
        let rl = RateLimits::new(1, 2);
        assert!(rl.check("a").is_ok() && rl.check("a").is_ok());
        match rl.check("a") {
            Err(AuthError::RateLimited { retry_after_secs }) => assert!(retry_after_secs >= 1),
            other => panic!("{other:?}"),
        }
        assert!(rl.check("b").is_ok(), "keys are limited independently");
    }

    #[test]
    fn zero_turns_limits_off() {
        let rl = RateLimits::new(0, 0);
        for _ in 0..1000 {
            rl.check("a").unwrap();
        }
    }
}
