//! Per-key rate limits: each API key may make `per_second` requests a second on average,
//! with bursts of up to `burst`; one more answers `429 rate_limited` with `Retry-After`.
//!
//! On a database several nodes share, each node admits its share: with N nodes live (their
//! follower records, `memlayer_index::Recall::live_nodes`), a request costs N of the key's
//! cells, so each node admits a key at most `per_second / N` a second in bursts of
//! `burst / N`, and all of them together at most the limit, whichever nodes its requests
//! reach, as long as there are no more nodes than the burst (a request costs at most the
//! burst). A client whose requests reach fewer nodes gets less. The count is each node's
//! own, refreshed every few seconds: for a moment after a node joins, the others still
//! divide by one node fewer.
//!
//! `governor`'s keyed GCRA limiter does the accounting (one timestamp per key, no counters to
//! reset, lock-free per key). Only authenticated keys reach it — a request with an unknown
//! key is refused before — so its map holds at most one small entry per key the store knows.
//! Unlike load shedding (`layers.rs`), which protects the server from everyone together, this
//! keeps one tenant's runaway agent from starving the others.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::ApiError;

/// How many requests one API key may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Sustained requests per second.
    pub per_second: NonZeroU32,
    /// Requests a key may make at once after being idle.
    pub burst: NonZeroU32,
}

/// The limiter of a server, keyed by the API key's lookup prefix (never its secret).
pub(crate) struct KeyRateLimiter {
    limiter: DefaultKeyedRateLimiter<String>,
    burst: NonZeroU32,
}

impl KeyRateLimiter {
    pub(crate) fn new(limit: RateLimit) -> Self {
        let quota = Quota::per_second(limit.per_second).allow_burst(limit.burst);
        Self {
            limiter: DefaultKeyedRateLimiter::dashmap(quota),
            burst: limit.burst,
        }
    }

    /// Counts one request of the key with prefix `key` on one of `nodes` nodes admitting it:
    /// `429` with the time after which the next one will be admitted, if the key has used up
    /// this node's share of its quota.
    pub(crate) fn check(&self, key: &str, nodes: u64) -> Result<(), ApiError> {
        // More nodes than the burst: each still admits one request at a time.
        let cost = u32::try_from(nodes)
            .unwrap_or(u32::MAX)
            .clamp(1, self.burst.get());
        let cost = NonZeroU32::new(cost).unwrap_or(NonZeroU32::MIN);
        match self.limiter.check_key_n(&key.to_owned(), cost) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(ApiError::RateLimited {
                retry_after: not_until.wait_time_from(DefaultClock::default().now()),
            }),
            // Never: the cost is within the burst.
            Err(_) => Err(ApiError::RateLimited {
                retry_after: Duration::from_secs(1),
            }),
        }
    }
}

/// Whole seconds a client should wait: at least one, since `Retry-After` has no fractions and
/// `0` would invite an immediate retry that is refused again.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(per_second: u32, burst: u32) -> KeyRateLimiter {
        KeyRateLimiter::new(RateLimit {
            per_second: NonZeroU32::new(per_second).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        })
    }

    #[test]
    fn with_several_nodes_each_admits_its_share_of_the_burst() {
        let limits = limiter(1, 4);
        for _ in 0..2 {
            limits.check("mlk_a", 2).unwrap();
        }
        assert!(matches!(
            limits.check("mlk_a", 2),
            Err(ApiError::RateLimited { .. })
        ));
        // More nodes than the burst: one request at a time, never none.
        let limits = limiter(1, 3);
        limits.check("mlk_a", 10).unwrap();
        assert!(matches!(
            limits.check("mlk_a", 10),
            Err(ApiError::RateLimited { .. })
        ));
    }

    #[test]
    fn a_key_gets_its_burst_then_is_refused_while_others_are_not() {
        let limits = limiter(1, 3);
        for _ in 0..3 {
            limits.check("mlk_a", 1).unwrap();
        }
        let Err(ApiError::RateLimited { retry_after }) = limits.check("mlk_a", 1) else {
            panic!("the fourth request in a burst of three must be refused");
        };
        assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1));
        limits.check("mlk_b", 1).unwrap();
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(60)), 60);
    }
}
