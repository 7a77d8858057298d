//! Per-command service-time histograms for the Prometheus endpoint
//! (`fogcached_command_duration_seconds`): the time a dispatcher spends on one request,
//! from its parsed form to its reply bytes (the engine's work included, the network
//! not).
//!
//! Cost rule: while the endpoint is off (no `--metrics-listen`), a request pays one
//! relaxed load of [`enabled`]. While it is on, a request reads the clock twice and adds
//! to three counters of its own thread's histograms (relaxed adds on memory no other
//! thread writes); a scrape sums every thread's histograms. Memory is bounded: one
//! [`ThreadHistograms`] per thread that ever served a request, [`BUCKETS`] buckets per
//! command kind.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use std::sync::{Mutex, PoisonError};

/// Upper bounds of the histogram buckets, in nanoseconds (1 µs to 1 s, then +Inf).
pub const BUCKET_BOUNDS_NS: [u64; 16] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
    1_000_000_000,
];
/// Buckets per command kind: one per bound plus +Inf.
pub const BUCKETS: usize = BUCKET_BOUNDS_NS.len() + 1;

/// What a request was, for its histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum CommandKind {
    /// `get gets gat gats mg`, binary gets.
    Get = 0,
    /// `set add replace append prepend cas ms`, binary stores.
    Set = 1,
    /// `delete md`, binary delete.
    Delete = 2,
    /// `incr decr ma`, binary increment/decrement.
    Arith = 3,
    /// `touch`, binary touch.
    Touch = 4,
    /// Everything else (`stats`, `version`, `flush_all`, `mn`, ...).
    Other = 5,
}

impl CommandKind {
    pub const ALL: [CommandKind; 6] = [
        CommandKind::Get,
        CommandKind::Set,
        CommandKind::Delete,
        CommandKind::Arith,
        CommandKind::Touch,
        CommandKind::Other,
    ];

    /// The `command` label value.
    pub fn label(self) -> &'static str {
        match self {
            CommandKind::Get => "get",
            CommandKind::Set => "set",
            CommandKind::Delete => "delete",
            CommandKind::Arith => "incr_decr",
            CommandKind::Touch => "touch",
            CommandKind::Other => "other",
        }
    }
}

/// One command kind's histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    pub buckets: [AtomicU64; BUCKETS],
    pub sum_ns: AtomicU64,
}

impl Histogram {
    fn record(&self, ns: u64) {
        let bucket = BUCKET_BOUNDS_NS
            .iter()
            .position(|&bound| ns <= bound)
            .unwrap_or(BUCKETS - 1);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// The histograms one thread records into.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct ThreadHistograms {
    pub kinds: [Histogram; CommandKind::ALL.len()],
}

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Every thread's histograms, for the scrape to sum. Locked once per thread (its first
/// recorded request) and once per scrape.
static THREADS: Mutex<Vec<Arc<ThreadHistograms>>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Arc<ThreadHistograms> = {
        let mine = Arc::new(ThreadHistograms::default());
        THREADS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&mine));
        mine
    };
}

/// Turns recording on (the metrics endpoint is configured). Process-wide.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The start of a request's service time, if recording is on.
#[inline]
pub fn start() -> Option<Instant> {
    if enabled() {
        Some(Instant::now())
    } else {
        None
    }
}

/// Records the request that began at `started` (from [`start`], with the request's
/// kind), if recording was on when it began.
#[inline]
pub fn finish(started: Option<(Instant, CommandKind)>) {
    if let Some((started, kind)) = started {
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        MINE.with(|mine| mine.kinds[kind as usize].record(ns));
    }
}

/// One command kind's histogram summed over every thread: the count of each bucket
/// (not cumulative) and the sum in nanoseconds.
pub fn snapshot(kind: CommandKind) -> ([u64; BUCKETS], u64) {
    let mut buckets = [0u64; BUCKETS];
    let mut sum_ns = 0u64;
    let threads = THREADS.lock().unwrap_or_else(PoisonError::into_inner);
    for thread in threads.iter() {
        let histogram = &thread.kinds[kind as usize];
        for (total, bucket) in buckets.iter_mut().zip(&histogram.buckets) {
            *total = total.wrapping_add(bucket.load(Ordering::Relaxed));
        }
        sum_ns = sum_ns.wrapping_add(histogram.sum_ns.load(Ordering::Relaxed));
    }
    (buckets, sum_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_lands_in_the_first_bucket_that_holds_it() {
        let h = Histogram::default();
        h.record(999);
        h.record(1_000);
        h.record(1_001);
        h.record(2_000_000_000);
        let counts: Vec<u64> = h
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counts[0], 2);
        assert_eq!(counts[1], 1);
        assert_eq!(counts[BUCKETS - 1], 1, "beyond the last bound: +Inf");
        assert_eq!(h.sum_ns.load(Ordering::Relaxed), 2_000_003_000);
    }

    #[test]
    fn threads_record_apart_and_a_snapshot_sums_them() {
        enable();
        let (before, _) = snapshot(CommandKind::Touch);
        let threads: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..10 {
                        finish(start().map(|at| (at, CommandKind::Touch)));
                    }
                })
            })
            .collect();
        for thread in threads {
            let _ = thread.join();
        }
        let (after, _) = snapshot(CommandKind::Touch);
        assert_eq!(after.iter().sum::<u64>() - before.iter().sum::<u64>(), 30);
    }
}
