//! Engine time: whole seconds since a fixed zero ("relative time", as memcached keeps
//! it), so item headers store 32-bit times. The zero is the process start, or, when the
//! slow tier is a persistent pool, the pool's creation (`Clock::rebase`), so the times
//! stored in the pool's records keep their meaning across restarts. Tests and the
//! simulator drive a manual clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Clock ticks per second of [`Clock::now_ticks`]: 1/32 s.
pub const TICKS_PER_S: u64 = 32;

/// A source of relative time in whole seconds (and 1/32-second ticks).
pub trait Clock: Send + Sync {
    /// Seconds since relative time 0.
    fn now_s(&self) -> u32;
    /// The same time in 1/32-second ticks; `now_ticks() / TICKS_PER_S == now_s()`.
    /// The default has whole-second resolution.
    fn now_ticks(&self) -> u64 {
        u64::from(self.now_s()) * TICKS_PER_S
    }
    /// Unix time (seconds) at which relative time 0 began.
    fn start_unix_s(&self) -> u64;
    /// Moves relative time 0 to Unix time `start_unix_s` (earlier than now), keeping the
    /// wall-clock time: `now_s` grows by the difference. A later zero than the current
    /// one (the wall clock went back between two runs) is refused and `false` returned.
    fn rebase(&self, start_unix_s: u64) -> bool;
    /// Seconds since the clock was made (the process's uptime), whatever its zero.
    fn uptime_s(&self) -> u32;
}

/// Wall-clock time, read from the coarse monotonic clock (`tier::monotonic_coarse_ns`):
/// it is read on every request, and its few milliseconds of resolution are far finer than
/// the engine's 1/32-second ticks.
pub struct SystemClock {
    /// `monotonic_coarse_ns` when the clock was made.
    started_ns: u64,
    /// Unix time of relative 0 when the clock was made (two seconds before it).
    made_zero_unix_s: u64,
    /// Seconds from the rebased zero to `made_zero_unix_s`.
    rebase_s: AtomicU64,
}

impl SystemClock {
    pub fn new() -> Arc<Self> {
        let now_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        // memcached starts its relative clock two seconds in the past so that an
        // absolute exptime in the current second is not mistaken for "never".
        Arc::new(SystemClock {
            started_ns: tier::monotonic_coarse_ns(),
            made_zero_unix_s: now_unix_s.saturating_sub(2),
            rebase_s: AtomicU64::new(0),
        })
    }
}

impl SystemClock {
    fn elapsed_ns(&self) -> u64 {
        tier::monotonic_coarse_ns().saturating_sub(self.started_ns)
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_s(&self) -> u32 {
        let elapsed_s =
            self.elapsed_ns() / 1_000_000_000 + 2 + self.rebase_s.load(Ordering::Relaxed);
        u32::try_from(elapsed_s).unwrap_or(u32::MAX)
    }
    fn now_ticks(&self) -> u64 {
        // 2 s in the past, as `now_s`; floor(ticks / 32) is `now_s` (same saturation).
        let ticks =
            (u128::from(self.elapsed_ns()) * u128::from(TICKS_PER_S) / 1_000_000_000) as u64;
        ticks
            .saturating_add((2 + self.rebase_s.load(Ordering::Relaxed)) * TICKS_PER_S)
            .min(u64::from(u32::MAX) * TICKS_PER_S)
    }
    fn start_unix_s(&self) -> u64 {
        self.made_zero_unix_s - self.rebase_s.load(Ordering::Relaxed)
    }
    fn rebase(&self, start_unix_s: u64) -> bool {
        match self.made_zero_unix_s.checked_sub(start_unix_s) {
            Some(diff) => {
                self.rebase_s.store(diff, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
    fn uptime_s(&self) -> u32 {
        u32::try_from(self.elapsed_ns() / 1_000_000_000).unwrap_or(u32::MAX)
    }
}

/// A clock that only moves when told to: for tests and the deterministic simulator.
pub struct ManualClock {
    now_ticks: AtomicU64,
    start_unix_s: AtomicU64,
    /// Ticks at which the clock was made (2 s: it starts two seconds in, as
    /// `SystemClock`), moved by `rebase` along with `now_ticks`.
    made_ticks: AtomicU64,
}

impl ManualClock {
    pub fn new(start_unix_s: u64) -> Arc<Self> {
        Arc::new(ManualClock {
            now_ticks: AtomicU64::new(2 * TICKS_PER_S),
            start_unix_s: AtomicU64::new(start_unix_s),
            made_ticks: AtomicU64::new(2 * TICKS_PER_S),
        })
    }
    pub fn advance_s(&self, seconds: u32) {
        self.now_ticks
            .fetch_add(u64::from(seconds) * TICKS_PER_S, Ordering::SeqCst);
    }
    /// Moves on by `ticks` 1/32-second ticks (the second changes every 32).
    pub fn advance_ticks(&self, ticks: u64) {
        self.now_ticks.fetch_add(ticks, Ordering::SeqCst);
    }
    /// The Unix time it shows now (tests that restart an engine make a new clock at
    /// this time).
    pub fn now_unix_s(&self) -> u64 {
        self.start_unix_s.load(Ordering::SeqCst) + u64::from(self.now_s())
    }
}

impl Clock for ManualClock {
    fn now_s(&self) -> u32 {
        u32::try_from(self.now_ticks() / TICKS_PER_S).unwrap_or(u32::MAX)
    }
    fn now_ticks(&self) -> u64 {
        self.now_ticks.load(Ordering::SeqCst)
    }
    fn start_unix_s(&self) -> u64 {
        self.start_unix_s.load(Ordering::SeqCst)
    }
    fn rebase(&self, start_unix_s: u64) -> bool {
        let current = self.start_unix_s.load(Ordering::SeqCst);
        let Some(diff) = current.checked_sub(start_unix_s) else {
            return false;
        };
        self.now_ticks
            .fetch_add(diff * TICKS_PER_S, Ordering::SeqCst);
        self.made_ticks
            .fetch_add(diff * TICKS_PER_S, Ordering::SeqCst);
        self.start_unix_s.store(start_unix_s, Ordering::SeqCst);
        true
    }
    fn uptime_s(&self) -> u32 {
        let ticks = self.now_ticks() - self.made_ticks.load(Ordering::SeqCst);
        u32::try_from(ticks / TICKS_PER_S).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebasing_keeps_the_wall_clock_and_the_uptime() {
        let clock = ManualClock::new(1_000_000);
        clock.advance_s(5);
        let wall = clock.now_unix_s();
        assert!(clock.rebase(999_000));
        assert_eq!(clock.now_unix_s(), wall);
        assert_eq!(clock.now_s(), 1000 + 7);
        assert_eq!(clock.uptime_s(), 5);
        assert!(!clock.rebase(2_000_000), "a later zero is refused");
        let system = SystemClock::new();
        let wall = system.start_unix_s() + u64::from(system.now_s());
        assert!(system.rebase(system.start_unix_s() - 100));
        let after = system.start_unix_s() + u64::from(system.now_s());
        assert!(after.abs_diff(wall) <= 1, "{wall} then {after}");
        assert!(system.uptime_s() < 100);
    }
}
