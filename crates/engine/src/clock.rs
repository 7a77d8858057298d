//! Engine time: seconds since the process started ("relative time", as memcached keeps
//! it), so item headers store 32-bit times. Tests and the simulator drive a manual clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of relative time in whole seconds.
pub trait Clock: Send + Sync {
    /// Seconds since the engine started.
    fn now_s(&self) -> u32;
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
    fn start_unix_s(&self) -> u64 {
        self.start_unix_s
    }
}

/// A clock that only moves when told to: for tests and the deterministic simulator.
pub struct ManualClock {
    now_s: AtomicU32,
    start_unix_s: u64,
}

impl ManualClock {
    pub fn new(start_unix_s: u64) -> Arc<Self> {
        Arc::new(ManualClock {
            now_s: AtomicU32::new(2),
            start_unix_s,
        })
    }
    pub fn advance_s(&self, seconds: u32) {
        self.now_s.fetch_add(seconds, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_s(&self) -> u32 {
        self.now_s.load(Ordering::SeqCst)
    }
    fn start_unix_s(&self) -> u64 {
        self.start_unix_s
    }
}
