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
    /// Where a ticking clock publishes `now_s` ([`NOT_TICKING`] while it is not
    /// ticking), so that the engine reads it with a load instead of a call through the
    /// trait object, several times a request; `None` for a clock that
    /// publishes nothing (a manual clock).
    fn published_now_s(&self) -> Option<Arc<AtomicU64>> {
        None
    }
}

/// Wall-clock time, read from the coarse monotonic clock (`tier::monotonic_coarse_ns`).
///
/// Every request reads the engine time (a worker once per loop turn, a store again), and
/// a read of the coarse clock costs a large part of what a whole GET miss may cost
/// (docs/results/speed.md, docs/results/engine-hot-path-figures.md). So a server starts a ticker
/// ([`SystemClock::start_ticker`]) that publishes the elapsed time every
/// [`TICKER_INTERVAL`], and a read is then one atomic load, as memcached's `current_time`
/// (which its clock event sets once a second). Without a ticker (tests, tools) every read
/// is a clock read.
pub struct SystemClock {
    /// `monotonic_coarse_ns` when the clock was made.
    started_ns: u64,
    /// Unix time of relative 0 when the clock was made (two seconds before it).
    made_zero_unix_s: u64,
    /// Seconds from the rebased zero to `made_zero_unix_s`.
    rebase_s: AtomicU64,
    /// Ticks since the clock was made, as the ticker last read them; [`NOT_TICKING`] while
    /// no ticker runs.
    ticked: AtomicU64,
    /// `now_s` as of the ticker's last reading (republished by `rebase`); [`NOT_TICKING`]
    /// while no ticker runs. Kept whole so that a read is a load and a compare; shared
    /// with the engine (`Clock::published_now_s`).
    ticked_now_s: Arc<AtomicU64>,
}

/// How often the ticker publishes the time: one engine tick, so `now_ticks` is as fine
/// with the ticker as without, and a second begins at most this late (plus the ticker's
/// scheduling delay).
pub const TICKER_INTERVAL: std::time::Duration =
    std::time::Duration::from_nanos(1_000_000_000 / TICKS_PER_S);

/// `SystemClock::ticked` (and the published `now_s`) while no ticker runs.
pub(crate) const NOT_TICKING: u64 = u64::MAX;

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
            ticked: AtomicU64::new(NOT_TICKING),
            ticked_now_s: Arc::new(AtomicU64::new(NOT_TICKING)),
        })
    }

    /// Starts the thread that publishes the time every [`TICKER_INTERVAL`]; it ends once
    /// the clock is dropped. From now on reads take the published time.
    pub fn start_ticker(self: &Arc<Self>) -> std::io::Result<()> {
        self.tick();
        let clock = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("fc-clock".to_owned())
            .spawn(move || loop {
                std::thread::sleep(TICKER_INTERVAL);
                crate::fault::panic_point();
                match clock.upgrade() {
                    Some(clock) => clock.tick(),
                    None => return,
                }
            })?;
        Ok(())
    }

    fn tick(&self) {
        let ticks = self.elapsed_ticks_now();
        self.ticked.store(ticks, Ordering::Relaxed);
        self.ticked_now_s
            .store(u64::from(self.now_s_at(ticks)), Ordering::Relaxed);
    }

    /// `now_s` when `ticks` ticks have passed since the clock was made.
    fn now_s_at(&self, ticks: u64) -> u32 {
        let elapsed_s = ticks / TICKS_PER_S + 2 + self.rebase_s.load(Ordering::Relaxed);
        u32::try_from(elapsed_s).unwrap_or(u32::MAX)
    }

    fn elapsed_ticks_now(&self) -> u64 {
        let elapsed_ns = tier::monotonic_coarse_ns().saturating_sub(self.started_ns);
        (u128::from(elapsed_ns) * u128::from(TICKS_PER_S) / 1_000_000_000) as u64
    }

    /// Ticks since the clock was made: the ticker's, or read now.
    #[inline]
    fn elapsed_ticks(&self) -> u64 {
        match self.ticked.load(Ordering::Relaxed) {
            NOT_TICKING => self.elapsed_ticks_now(),
            ticked => ticked,
        }
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_s(&self) -> u32 {
        match self.ticked_now_s.load(Ordering::Relaxed) {
            NOT_TICKING => self.now_s_at(self.elapsed_ticks_now()),
            // Published from a u32.
            now_s => now_s as u32,
        }
    }
    fn now_ticks(&self) -> u64 {
        // 2 s in the past, as `now_s`; floor(ticks / 32) is `now_s` (same saturation).
        self.elapsed_ticks()
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
                if self.ticked.load(Ordering::Relaxed) != NOT_TICKING {
                    // The published second moves with the zero at once.
                    self.tick();
                }
                true
            }
            None => false,
        }
    }
    fn uptime_s(&self) -> u32 {
        u32::try_from(self.elapsed_ticks() / TICKS_PER_S).unwrap_or(u32::MAX)
    }
    fn published_now_s(&self) -> Option<Arc<AtomicU64>> {
        Some(Arc::clone(&self.ticked_now_s))
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

    #[test]
    fn the_ticker_publishes_the_time_the_clock_reads() {
        let clock = SystemClock::new();
        let unticked = clock.now_ticks();
        clock.start_ticker().expect("ticker thread");
        // The ticker moves on with the clock: wait for a few of its intervals.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while clock.now_ticks() < unticked + 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "the ticker never ticked"
            );
            std::thread::sleep(TICKER_INTERVAL);
        }
        // A read never runs ahead of the clock itself.
        let published = clock.elapsed_ticks();
        assert!(clock.elapsed_ticks_now() >= published);
        // A rebase moves the published second at once, as it moves an unticked clock's.
        let before = clock.now_s();
        assert!(clock.rebase(clock.start_unix_s() - 100));
        assert!(
            clock.now_s() >= before + 100,
            "{before} then {}",
            clock.now_s()
        );
    }
}
