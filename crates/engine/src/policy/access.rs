//! A decayed access counter per item, kept in the header's policy byte: five bits of
//! count and three bits of the *period* it was last updated in. Periods are counted in
//! requests (HMCached, seed 002 section 3.2: "logical periods"), so the counter measures
//! how often an item is used relative to the traffic, whatever the request rate.
//!
//! Decay is lazy: an item's count is halved for every period that ended since its last
//! access, and reset after three idle periods (HMCached divides by 2^(idle+1) and resets
//! after three idle periods; here the halving for the period the access fell in is the
//! `+1`). Nothing walks the items to decay them, so a slow-tier item's header is only
//! written when the item itself is accessed.
//!
//! Three bits of period wrap every eight periods. An item idle for eight or more would
//! look recent, so the period's start time is kept for the last eight periods and an
//! access older than the start of the period three back counts as idle (the check is
//! exact while fewer than eight periods begin within one second, i.e. a period longer
//! than an eighth of a second of traffic).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::engine_ops::EngineOps;
use crate::counters::G;
use crate::item::{HeaderEdit, HeaderRead};

/// Count bits of the policy byte.
const COUNT_BITS: u32 = 5;
pub(crate) const COUNT_MAX: u8 = (1 << COUNT_BITS) - 1;
/// Periods the period bits distinguish.
const PERIOD_SLOTS: u32 = 1 << (8 - COUNT_BITS);
/// Idle periods after which a count is reset (HMCached: three).
const IDLE_PERIODS_MAX: u32 = 3;
/// Smallest automatic period, in requests (a tiny DRAM would otherwise decay counts
/// faster than any item can be read twice).
pub(crate) const PERIOD_REQUESTS_MIN: u64 = 1024;

/// What one access did to an item's count: the count it had before (decayed from earlier
/// periods when this is its first access of the period) and after. The hotspot policy's
/// per-period histograms are built from these steps, each item counted once per value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CountStep {
    pub first_in_period: bool,
    pub before: u8,
    pub after: u8,
}

/// The period clock: which period the engine is in, and when the last eight began.
pub(crate) struct Periods {
    /// Requests per period; 0: twice the DRAM tier's item count (at least
    /// [`PERIOD_REQUESTS_MIN`]), re-read every maintainer pass.
    configured_requests: u64,
    current: AtomicU32,
    /// The request count at which the current period began.
    started_at_requests: AtomicU64,
    /// Relative second at which each of the last eight periods began.
    started_at_s: [AtomicU32; PERIOD_SLOTS as usize],
}

impl Periods {
    pub fn new(configured_requests: u64) -> Periods {
        Periods {
            configured_requests,
            current: AtomicU32::new(0),
            started_at_requests: AtomicU64::new(0),
            started_at_s: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    pub fn current(&self) -> u32 {
        self.current.load(Ordering::Relaxed)
    }

    /// The period length in requests now.
    pub fn length_requests(&self, e: EngineOps<'_>) -> u64 {
        if self.configured_requests > 0 {
            return self.configured_requests;
        }
        (2 * e.dram().items_seen.load(Ordering::Relaxed)).max(PERIOD_REQUESTS_MIN)
    }

    /// Moves the period on by as many periods as the requests since it began fill
    /// (called by the DRAM maintainer, one thread). Returns the periods that ended.
    pub fn advance(&self, e: EngineOps<'_>) -> u32 {
        let requests = e.counter(G::CmdGet) + e.counter(G::CmdTouch) + e.counter(G::TotalItems);
        let started = self.started_at_requests.load(Ordering::Relaxed);
        let length = self.length_requests(e);
        let ended = (requests.saturating_sub(started) / length).min(u64::from(PERIOD_SLOTS));
        if ended == 0 {
            return 0;
        }
        let now_s = e.now_s();
        let mut current = self.current.load(Ordering::Relaxed);
        for _ in 0..ended {
            current = current.wrapping_add(1);
            self.started_at_s[(current % PERIOD_SLOTS) as usize].store(now_s, Ordering::Relaxed);
        }
        self.started_at_requests.store(requests, Ordering::Relaxed);
        self.current.store(current, Ordering::Relaxed);
        ended as u32
    }

    /// The count an item with policy byte `access`, last accessed at `last_access_s`,
    /// has now.
    pub fn decayed(&self, access: u8, last_access_s: u32) -> u8 {
        let count = access & COUNT_MAX;
        if count == 0 {
            return 0;
        }
        let now = self.current();
        let elapsed = now.wrapping_sub(u32::from(access >> COUNT_BITS)) % PERIOD_SLOTS;
        if elapsed > IDLE_PERIODS_MAX {
            return 0;
        }
        let oldest_kept = now.wrapping_sub(IDLE_PERIODS_MAX) % PERIOD_SLOTS;
        if last_access_s < self.started_at_s[oldest_kept as usize].load(Ordering::Relaxed) {
            // Older than every period the bits can tell apart: idle long enough.
            return 0;
        }
        count >> elapsed
    }

    /// The policy byte after one more access now.
    #[cfg(test)]
    pub fn accessed(&self, access: u8, last_access_s: u32) -> u8 {
        self.accessed_step(access, last_access_s).0
    }

    /// The policy byte after one more access now, and what the access did to the count.
    /// Always inlined: it runs on every store (an overwrite's count) and slow-tier hit.
    #[inline(always)]
    pub fn accessed_step(&self, access: u8, last_access_s: u32) -> (u8, CountStep) {
        let current = self.current();
        let now_bits = ((current % PERIOD_SLOTS) as u8) << COUNT_BITS;
        let slot = (current % PERIOD_SLOTS) as usize;
        if access & !COUNT_MAX == now_bits
            && last_access_s >= self.started_at_s[slot].load(Ordering::Relaxed)
        {
            // Accessed before in this period (the common case of a hot item): no decay.
            let before = access & COUNT_MAX;
            let after = before.saturating_add(1).min(COUNT_MAX);
            let step = CountStep {
                // A count of 0 has not been counted yet (a new item's byte is 0, which
                // reads as period 0).
                first_in_period: before == 0,
                before,
                after,
            };
            return (now_bits | after, step);
        }
        let before = self.decayed(access, last_access_s);
        let after = before.saturating_add(1).min(COUNT_MAX);
        let step = CountStep {
            first_in_period: true,
            before,
            after,
        };
        (now_bits | after, step)
    }

    /// Records one access of the item whose header `edit` updates at `now_s`: the
    /// counter and the access time, written through the edit (which charges them once)
    /// only if they change. Returns whether either changed (the header word is dirty).
    #[inline(always)]
    pub fn record(&self, edit: &mut HeaderEdit<'_>, now_s: u32) -> bool {
        self.record_step(edit, now_s).0
    }

    /// [`Periods::record`], and what the access did to the count (its `after` is the
    /// count the item has now).
    #[inline(always)]
    pub fn record_step(&self, edit: &mut HeaderEdit<'_>, now_s: u32) -> (bool, CountStep) {
        let h = edit.read();
        let last_access_s = h.last_access_s();
        let old = h.access();
        let (new, step) = self.accessed_step(old, last_access_s);
        let mut dirty = false;
        if new != old {
            edit.write().set_access(new);
            dirty = true;
        }
        if last_access_s != now_s {
            edit.write().set_last_access_s(now_s);
            dirty = true;
        }
        (dirty, step)
    }

    /// The count of the item with header `h` now.
    pub fn count_of(&self, h: HeaderRead<'_>) -> u8 {
        self.decayed(h.access(), h.last_access_s())
    }

    /// The policy byte of a new item: one access in the current period.
    pub fn fresh(&self) -> u8 {
        self.with_count(1)
    }

    /// The policy byte holding `count` (at most [`COUNT_MAX`]) in the current period.
    pub fn with_count(&self, count: u8) -> u8 {
        debug_assert!(count <= COUNT_MAX);
        (((self.current() % PERIOD_SLOTS) as u8) << COUNT_BITS) | count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first access of a period starts from the decayed count; later ones in the
    /// period continue from it; a saturated count stays.
    #[test]
    fn an_access_step_says_where_the_count_came_from() {
        let p = Periods::new(100);
        let (byte, step) = p.accessed_step(0, 0);
        assert_eq!(
            step,
            CountStep {
                first_in_period: true,
                before: 0,
                after: 1
            }
        );
        let (byte, step) = p.accessed_step(byte, 0);
        assert_eq!(
            step,
            CountStep {
                first_in_period: false,
                before: 1,
                after: 2
            }
        );
        let mut saturated = byte;
        for _ in 0..40 {
            saturated = p.accessed(saturated, 0);
        }
        let (_, step) = p.accessed_step(saturated, 0);
        assert_eq!((step.before, step.after), (COUNT_MAX, COUNT_MAX));
        // A period later the count starts from half of what it was.
        p.current.store(1, Ordering::Relaxed);
        let (_, step) = p.accessed_step(saturated, 0);
        assert_eq!(
            step,
            CountStep {
                first_in_period: true,
                before: COUNT_MAX / 2,
                after: COUNT_MAX / 2 + 1
            }
        );
    }

    #[test]
    fn counts_halve_per_idle_period_and_reset_after_three() {
        let p = Periods::new(100);
        let mut byte = p.fresh();
        for _ in 0..9 {
            byte = p.accessed(byte, 0);
        }
        assert_eq!(p.decayed(byte, 0), 10);
        for (periods, expected) in [(1, 5), (2, 2), (3, 1), (4, 0)] {
            let q = Periods::new(100);
            q.current.store(periods, Ordering::Relaxed);
            assert_eq!(q.decayed(byte, 0), expected, "after {periods} periods");
        }
    }

    #[test]
    fn a_count_saturates_and_an_old_access_outside_the_tracked_periods_is_idle() {
        let p = Periods::new(100);
        let mut byte = 0;
        for _ in 0..100 {
            byte = p.accessed(byte, 0);
        }
        assert_eq!(p.decayed(byte, 0), COUNT_MAX);
        // Eight periods later the period bits read "now" again; the start times say the
        // access (second 5) came before the period three back began (second 10).
        p.current.store(8, Ordering::Relaxed);
        for slot in 0..PERIOD_SLOTS as usize {
            p.started_at_s[slot].store(10, Ordering::Relaxed);
        }
        assert_eq!(p.decayed(byte, 5), 0);
        assert_eq!(p.decayed(byte, 10), COUNT_MAX);
    }
}
