//! Access accounting that is cheap enough to stay on for DRAM: each thread adds to its
//! own stripe (a cache-line-padded set of counters), so no shared counter line bounces
//! between cores on every access; a snapshot sums the stripes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Size of the lines counted (and of a CPU cache line on the machines we target).
pub const LINE_SIZE_BYTES: usize = 64;

/// Stripes per region. More threads than this share stripes (still correct, since the
/// counters are atomic, only slower).
const STRIPE_COUNT: usize = 64;
const _: () = assert!(STRIPE_COUNT.is_power_of_two());

/// Snapshot of a region's access accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessCounts {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub lines_read: u64,
    pub lines_written: u64,
}

/// One thread's counters, padded to two cache lines so that the adjacent-line
/// prefetcher does not couple neighbouring stripes either.
#[repr(align(128))]
#[derive(Default)]
struct Stripe {
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    lines_read: AtomicU64,
    lines_written: AtomicU64,
    wait_ns: AtomicU64,
}

pub(crate) struct StripedCounters {
    /// A fixed-size array, so that a stripe index masked to it needs no bounds check.
    stripes: Box<[Stripe; STRIPE_COUNT]>,
}

impl std::fmt::Debug for StripedCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StripedCounters")
            .field(&self.snapshot())
            .finish()
    }
}

/// Hands each thread a stripe index once, round-robin.
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The thread's stripe, `usize::MAX` until its first access. A `const` thread-local
    /// without a destructor is one thread-pointer-relative load: every item access of a
    /// request reads it (three to five times per request).
    static THREAD_STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn thread_stripe() -> usize {
    THREAD_STRIPE.with(|stripe| {
        let index = stripe.get();
        if index != usize::MAX {
            return index;
        }
        let index = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPE_COUNT;
        stripe.set(index);
        index
    })
}

/// The 64-byte lines `[addr, addr + len)` touches (0 for an empty range).
#[inline]
pub fn lines_touched(addr: usize, len_bytes: usize) -> u64 {
    if len_bytes == 0 {
        return 0;
    }
    let first = addr / LINE_SIZE_BYTES;
    let last = addr.saturating_add(len_bytes - 1) / LINE_SIZE_BYTES;
    (last - first + 1) as u64
}

impl StripedCounters {
    pub(crate) fn new() -> StripedCounters {
        StripedCounters {
            stripes: Box::new(std::array::from_fn(|_| Stripe::default())),
        }
    }

    #[inline]
    fn stripe(&self) -> &Stripe {
        // STRIPE_COUNT is a power of two: the mask keeps the index in bounds.
        &self.stripes[thread_stripe() & (STRIPE_COUNT - 1)]
    }

    #[inline]
    pub(crate) fn add_read(&self, bytes: u64, lines: u64) {
        let s = self.stripe();
        s.bytes_read.fetch_add(bytes, Ordering::Relaxed);
        s.lines_read.fetch_add(lines, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn add_write(&self, bytes: u64, lines: u64) {
        let s = self.stripe();
        s.bytes_written.fetch_add(bytes, Ordering::Relaxed);
        s.lines_written.fetch_add(lines, Ordering::Relaxed);
    }

    /// Adds emulated wait time (only called when the cost model is not NONE).
    pub(crate) fn add_wait_ns(&self, ns: u64) {
        self.stripe().wait_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub(crate) fn wait_ns(&self) -> u64 {
        self.stripes.iter().fold(0u64, |sum, s| {
            sum.wrapping_add(s.wait_ns.load(Ordering::Relaxed))
        })
    }

    pub(crate) fn snapshot(&self) -> AccessCounts {
        let mut total = AccessCounts::default();
        for s in self.stripes.iter() {
            total.bytes_read = total
                .bytes_read
                .wrapping_add(s.bytes_read.load(Ordering::Relaxed));
            total.bytes_written = total
                .bytes_written
                .wrapping_add(s.bytes_written.load(Ordering::Relaxed));
            total.lines_read = total
                .lines_read
                .wrapping_add(s.lines_read.load(Ordering::Relaxed));
            total.lines_written = total
                .lines_written
                .wrapping_add(s.lines_written.load(Ordering::Relaxed));
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_touched_counts_partial_lines() {
        assert_eq!(lines_touched(60, 100), 3); // 60..160: lines 0, 1, 2
        assert_eq!(lines_touched(0, 64), 1);
        assert_eq!(lines_touched(0, 65), 2);
        assert_eq!(lines_touched(63, 2), 2);
        assert_eq!(lines_touched(128, 1), 1);
        assert_eq!(lines_touched(5, 0), 0);
    }

    #[test]
    fn snapshot_sums_every_thread() {
        let counters = StripedCounters::new();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        counters.add_read(10, 1);
                        counters.add_write(3, 2);
                    }
                });
            }
        });
        assert_eq!(
            counters.snapshot(),
            AccessCounts {
                bytes_read: 80_000,
                bytes_written: 24_000,
                lines_read: 8000,
                lines_written: 16_000
            }
        );
    }
}
