//! Counters of the fog layer: in `stats` (totals, `upstream_` prefix), in
//! `stats upstreams` (the latency histogram and one block per upstream server, each with
//! its own histogram) and on the Prometheus endpoint (`metrics.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use engine::StatValue::{self, Text, U64};

/// Upper bounds of the latency histogram's buckets, in microseconds (the last bucket
/// takes everything above the last bound).
pub const LATENCY_BOUNDS_US: [u64; 14] = [
    100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000,
    1_000_000, 2_000_000,
];

/// Counters of one upstream server.
#[derive(Debug, Default)]
pub struct ServerCounters {
    pub name: String,
    /// Requests sent (reads and writes).
    pub requests: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub in_flight: AtomicU64,
    pub connections: AtomicU64,
    pub connects: AtomicU64,
    pub breaker_opens: AtomicU64,
    pub breaker_open: AtomicBool,
    /// 0 unknown, 1 meta, 2 text.
    pub dialect: AtomicU64,
    /// Completed requests by latency.
    pub latency: LatencyHistogram,
}

/// Completed request latencies by [`LATENCY_BOUNDS_US`], and their sum.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl LatencyHistogram {
    pub fn record(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BOUNDS_US.partition_point(|&bound| bound < us);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The count of each bucket (the last one above every bound), not cumulative.
    pub fn buckets(&self) -> [u64; LATENCY_BOUNDS_US.len() + 1] {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }

    pub fn count(&self) -> u64 {
        self.buckets().iter().sum()
    }

    pub fn sum_us(&self) -> u64 {
        self.sum_us.load(Ordering::Relaxed)
    }

    fn reset(&self) {
        for bucket in &self.buckets {
            bucket.store(0, Ordering::Relaxed);
        }
        self.sum_us.store(0, Ordering::Relaxed);
    }

    /// `<prefix>le_<N>us` per bucket, then `<prefix>le_inf`.
    fn emit(&self, prefix: &str, emit: &mut dyn FnMut(&str, StatValue)) {
        let buckets = self.buckets();
        for (bound, count) in LATENCY_BOUNDS_US.iter().zip(buckets) {
            emit(&format!("{prefix}le_{bound}us"), U64(count));
        }
        emit(
            &format!("{prefix}le_inf"),
            U64(buckets[LATENCY_BOUNDS_US.len()]),
        );
    }
}

/// The fog layer's counters.
#[derive(Debug)]
pub struct UpstreamStats {
    /// Reads sent upstream (one per single flight).
    pub gets: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Reads that joined a read of the same key already in flight.
    pub joined: AtomicU64,
    pub writes: AtomicU64,
    /// Requests that failed: refused or lost connections, protocol errors, an open
    /// breaker (timeouts apart).
    pub errors: AtomicU64,
    pub timeouts: AtomicU64,
    /// Replies that came after their request had timed out (read and dropped).
    pub late_replies: AtomicU64,
    /// Connections closed because their oldest reply was late by a second timeout.
    pub stuck_closes: AtomicU64,
    /// Requests failed at once because their upstream's breaker was open.
    pub breaker_rejects: AtomicU64,
    /// Times a breaker opened after its upstream had answered (not its re-openings after
    /// failed retries while the upstream stays down).
    pub breaker_opens: AtomicU64,
    /// Requests refused because the queue to their upstream loop was full.
    pub queue_full: AtomicU64,
    /// Fetched items stored at the edge, and those not stored (a write of the key
    /// overtook the read, the edge already had a copy, too large, no TTL left).
    pub fills: AtomicU64,
    pub fills_skipped: AtomicU64,
    /// Single flights (reads) and writes waiting for the upstream now.
    pub in_flight: AtomicU64,
    /// Completed requests by latency.
    pub latency: LatencyHistogram,
    pub servers: Vec<ServerCounters>,
}

impl UpstreamStats {
    pub fn new(names: &[String]) -> UpstreamStats {
        UpstreamStats {
            gets: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            joined: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            late_replies: AtomicU64::new(0),
            stuck_closes: AtomicU64::new(0),
            breaker_rejects: AtomicU64::new(0),
            breaker_opens: AtomicU64::new(0),
            queue_full: AtomicU64::new(0),
            fills: AtomicU64::new(0),
            fills_skipped: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            latency: LatencyHistogram::default(),
            servers: names
                .iter()
                .map(|name| ServerCounters {
                    name: name.clone(),
                    ..ServerCounters::default()
                })
                .collect(),
        }
    }

    /// A request to `server` completed after `latency`.
    pub fn record_latency(&self, server: usize, latency: Duration) {
        self.latency.record(latency);
        self.servers[server].latency.record(latency);
    }

    /// The counters `stats` shows (memcached-style names with an `upstream_` prefix).
    pub fn general(&self, emit: &mut dyn FnMut(&str, StatValue)) {
        let load = |c: &AtomicU64| U64(c.load(Ordering::Relaxed));
        emit("upstream_servers", U64(self.servers.len() as u64));
        emit("upstream_cmd_get", load(&self.gets));
        emit("upstream_get_hits", load(&self.hits));
        emit("upstream_get_misses", load(&self.misses));
        emit("upstream_get_joined", load(&self.joined));
        emit("upstream_cmd_write", load(&self.writes));
        emit("upstream_errors", load(&self.errors));
        emit("upstream_timeouts", load(&self.timeouts));
        emit("upstream_late_replies", load(&self.late_replies));
        emit("upstream_stuck_closes", load(&self.stuck_closes));
        emit("upstream_breaker_rejects", load(&self.breaker_rejects));
        emit("upstream_breaker_opens", load(&self.breaker_opens));
        emit("upstream_queue_full", load(&self.queue_full));
        emit("upstream_fills", load(&self.fills));
        emit("upstream_fills_skipped", load(&self.fills_skipped));
        emit("upstream_in_flight", load(&self.in_flight));
        emit("upstream_latency_count", U64(self.latency.count()));
        emit("upstream_latency_sum_us", U64(self.latency.sum_us()));
    }

    /// `stats upstreams`: the latency histogram, then one block per server (with its own
    /// histogram).
    pub fn detail(&self, emit: &mut dyn FnMut(&str, StatValue)) {
        self.latency.emit("upstream_latency_", emit);
        for (index, server) in self.servers.iter().enumerate() {
            let load = |c: &AtomicU64| U64(c.load(Ordering::Relaxed));
            let prefix = format!("upstream:{index}");
            emit(&format!("{prefix}:addr"), Text(server.name.clone()));
            let dialect = match server.dialect.load(Ordering::Relaxed) {
                1 => "meta",
                2 => "text",
                _ => "unknown",
            };
            emit(&format!("{prefix}:protocol"), Text(dialect.to_owned()));
            emit(&format!("{prefix}:requests"), load(&server.requests));
            emit(&format!("{prefix}:get_hits"), load(&server.hits));
            emit(&format!("{prefix}:get_misses"), load(&server.misses));
            emit(&format!("{prefix}:errors"), load(&server.errors));
            emit(&format!("{prefix}:timeouts"), load(&server.timeouts));
            emit(&format!("{prefix}:in_flight"), load(&server.in_flight));
            emit(
                &format!("{prefix}:latency_count"),
                U64(server.latency.count()),
            );
            emit(
                &format!("{prefix}:latency_sum_us"),
                U64(server.latency.sum_us()),
            );
            server
                .latency
                .emit(&format!("{prefix}:latency_"), &mut *emit);
            emit(&format!("{prefix}:connections"), load(&server.connections));
            emit(&format!("{prefix}:connects"), load(&server.connects));
            emit(
                &format!("{prefix}:breaker_opens"),
                load(&server.breaker_opens),
            );
            let open = server.breaker_open.load(Ordering::Relaxed);
            emit(
                &format!("{prefix}:breaker"),
                Text(if open { "open" } else { "closed" }.to_owned()),
            );
        }
    }

    /// `stats reset`.
    pub fn reset(&self) {
        for counter in [
            &self.gets,
            &self.hits,
            &self.misses,
            &self.joined,
            &self.writes,
            &self.errors,
            &self.timeouts,
            &self.late_replies,
            &self.stuck_closes,
            &self.breaker_rejects,
            &self.breaker_opens,
            &self.queue_full,
            &self.fills,
            &self.fills_skipped,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
        self.latency.reset();
        for server in &self.servers {
            for counter in [
                &server.requests,
                &server.hits,
                &server.misses,
                &server.errors,
                &server.timeouts,
                &server.connects,
                &server.breaker_opens,
            ] {
                counter.store(0, Ordering::Relaxed);
            }
            server.latency.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_the_bucket_of_their_upper_bound() {
        let stats = UpstreamStats::new(&["a:1".to_owned()]);
        stats.record_latency(0, Duration::from_micros(100));
        stats.record_latency(0, Duration::from_micros(101));
        stats.record_latency(0, Duration::from_secs(10));
        let mut seen = Vec::new();
        stats.detail(&mut |name, value| seen.push((name.to_owned(), value.to_string())));
        let count = |name: &str| {
            seen.iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(count("upstream_latency_le_100us"), "1");
        assert_eq!(count("upstream_latency_le_200us"), "1");
        assert_eq!(count("upstream_latency_le_inf"), "1");
        assert_eq!(count("upstream:0:addr"), "a:1");
        assert_eq!(count("upstream:0:latency_le_100us"), "1");
        assert_eq!(count("upstream:0:latency_le_200us"), "1");
        assert_eq!(count("upstream:0:latency_le_500us"), "0");
        assert_eq!(count("upstream:0:latency_le_inf"), "1");
        assert_eq!(count("upstream:0:latency_count"), "3");
    }
}
