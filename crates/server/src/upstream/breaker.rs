//! The circuit breaker of one upstream server, shared by the upstream loops: consecutive
//! failures (refused or lost connections, garbage, a turn of the loop in which requests
//! timed out) open it for `--upstream-retry-ms`, during which the server's requests fail
//! at once (a read as a miss); then the next request tries the server again, and any
//! reply closes it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Milliseconds since a process-wide origin, so that an instant fits an atomic; 0 is
/// "never".
fn now_ms() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    // +1: an instant is never 0 ("never").
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
}

#[derive(Debug, Default)]
pub struct Breaker {
    /// Consecutive failures; reset by any reply.
    failures: AtomicU32,
    /// Open until then ([`now_ms`]); 0: closed, or never opened.
    open_until_ms: AtomicU64,
}

/// What a failure did to the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tripped {
    /// Still closed.
    No,
    /// Open (again) for the retry period; `failures` in a row so far.
    Open { failures: u32 },
}

impl Breaker {
    /// Whether requests to the server fail at once now.
    pub fn is_open(&self) -> bool {
        let until = self.open_until_ms.load(Ordering::Relaxed);
        until != 0 && now_ms() < until
    }

    /// Counts a failure; at `threshold` failures in a row the breaker opens for `retry`
    /// (and opens again at every failure after, i.e. after each failed retry).
    pub fn failed(&self, threshold: u32, retry: Duration) -> Tripped {
        let failures = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if failures < threshold.max(1) {
            return Tripped::No;
        }
        let retry_ms = u64::try_from(retry.as_millis()).unwrap_or(u64::MAX / 2);
        self.open_until_ms
            .store(now_ms().saturating_add(retry_ms), Ordering::Relaxed);
        Tripped::Open { failures }
    }

    /// The server answered: the failures in a row end and the breaker closes. Reads
    /// before writing, so that the loops do not fight over the cache line at every reply.
    pub fn answered(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if self.open_until_ms.load(Ordering::Relaxed) != 0 {
            self.open_until_ms.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_at_the_threshold_and_closes_on_a_reply() {
        let breaker = Breaker::default();
        let retry = Duration::from_secs(60);
        assert_eq!(breaker.failed(3, retry), Tripped::No);
        assert_eq!(breaker.failed(3, retry), Tripped::No);
        assert!(!breaker.is_open());
        assert_eq!(breaker.failed(3, retry), Tripped::Open { failures: 3 });
        assert!(breaker.is_open());
        breaker.answered();
        assert!(!breaker.is_open());
        assert_eq!(
            breaker.failed(3, retry),
            Tripped::No,
            "counting starts again"
        );
    }

    #[test]
    fn a_retry_that_fails_opens_it_again_at_once() {
        let breaker = Breaker::default();
        assert_eq!(
            breaker.failed(1, Duration::ZERO),
            Tripped::Open { failures: 1 }
        );
        // The retry period (none here) is over: requests are tried again.
        assert!(!breaker.is_open());
        assert_eq!(
            breaker.failed(1, Duration::from_secs(60)),
            Tripped::Open { failures: 2 }
        );
        assert!(breaker.is_open());
    }
}
