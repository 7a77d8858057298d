//! Engine time: seconds since the process started ("relative time", as memcached keeps
//! it), so item headers store 32-bit times. Tests and the simulator drive a manual clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Clock ticks per second of [`Clock::now_ticks`]: 1/32 s, so the fraction of a second
/// fits the five spare bits of an item header's state word (`item.rs`).
pub const TICKS_PER_S: u64 = 32;

/// A source of relative time in whole seconds (and 1/32-second ticks).
pub trait Clock: Send + Sync {
    /// Seconds since the engine started.
    fn now_s(&self) -> u32;
    /// The same time in 1/32-second ticks; `now_ticks() / TICKS_PER_S == now_s()`.
    /// The default has whole-second resolution.
    fn now_ticks(&self) -> u64 {
        u64::from(self.now_s()) * TICKS_PER_S
    }
    /// Unix time (seconds) at which relative time 0 began.
    fn start_unix_s(&self) -> u64;
}

/// Wall-clock time, read from a monotonic clock.
pub struct SystemClock {
    started: Instant,
    start_unix_s: u64,
}

impl SystemClock {
    pub fn new() -> Arc<Self> {
        let start_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        // memcached starts its relative clock two seconds in the past so that an
        // absolute exptime in the current second is not mistaken for "never".
        Arc::new(SystemClock {
            started: Instant::now(),
            start_unix_s: start_unix_s.saturating_sub(2),
        })
    }
}

impl Clock for SystemClock {
    fn now_s(&self) -> u32 {
        let elapsed_s = self.started.elapsed().as_secs() + 2;
        u32::try_from(elapsed_s).unwrap_or(u32::MAX)
    }
    fn now_ticks(&self) -> u64 {
        // 2 s in the past, as `now_s`; floor(ticks / 32) is `now_s` (same saturation).
        let elapsed = self.started.elapsed();
        let ticks = u64::try_from(elapsed.as_nanos() * u128::from(TICKS_PER_S) / 1_000_000_000)
            .unwrap_or(u64::MAX)
            .saturating_add(2 * TICKS_PER_S);
        ticks.min(u64::from(u32::MAX) * TICKS_PER_S)
    }
    fn start_unix_s(&self) -> u64 {
        self.start_unix_s
    }
}

/// A clock that only moves when told to: for tests and the deterministic simulator.
pub struct ManualClock {
    now_ticks: AtomicU64,
    start_unix_s: u64,
}

impl ManualClock {
    pub fn new(start_unix_s: u64) -> Arc<Self> {
        Arc::new(ManualClock {
            now_ticks: AtomicU64::new(2 * TICKS_PER_S),
            start_unix_s,
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
}

impl Clock for ManualClock {
    fn now_s(&self) -> u32 {
        u32::try_from(self.now_ticks() / TICKS_PER_S).unwrap_or(u32::MAX)
    }
    fn now_ticks(&self) -> u64 {
        self.now_ticks.load(Ordering::SeqCst)
    }
    fn start_unix_s(&self) -> u64 {
        self.start_unix_s
    }
}
