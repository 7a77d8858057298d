//! What the upstream's answers do at the edge: a reply translated into the edge's
//! [`UpstreamReply`], a read's value stored (`Add`, unless a write overtook the read), and an
//! ordered request's outcome applied to the edge copy of its key (kept, retimed or
//! removed), in the order the upstream applied the key's writes.

use std::sync::atomic::Ordering;

use engine::{StoreMode, StoreOptions, StoreOutcome};
use protocol::client::Dialect;

use super::pool::WireReply;
use super::{FlightId, UpstreamLoop};
use crate::upstream::{
    now_unix_s, Failure, Fetched, StoreKind, UpstreamOp, UpstreamReply, UpstreamRequest, WriteMode,
};

impl UpstreamLoop {
    /// Turns the upstream's reply to flight `id` into the edge's [`UpstreamReply`].
    pub(super) fn complete(&mut self, id: FlightId, wire: WireReply) {
        let Some(flight) = self.flights.get(&id) else {
            return;
        };
        let stats = &self.upstream.stats;
        let server_stats = &stats.servers[flight.server];
        let text_upstream = self.servers[flight.server].dialect == Some(Dialect::Text);
        let reply = match (&flight.request.op, wire) {
            (
                UpstreamOp::Get { .. },
                WireReply::Value {
                    client_flags,
                    value,
                    cas,
                    ttl_s,
                },
            ) => {
                stats.hits.fetch_add(1, Ordering::Relaxed);
                server_stats.hits.fetch_add(1, Ordering::Relaxed);
                let fetched = Fetched {
                    key: flight.request.key.clone(),
                    value,
                    client_flags,
                    cas: cas.unwrap_or(0),
                    edge_ttl_s: self.upstream.edge_ttl(ttl_s, text_upstream),
                };
                self.fill(&fetched, flight.poisoned);
                UpstreamReply::Hit(fetched)
            }
            (UpstreamOp::Get { .. }, WireReply::Miss | WireReply::NotFound) => {
                stats.misses.fetch_add(1, Ordering::Relaxed);
                server_stats.misses.fetch_add(1, Ordering::Relaxed);
                UpstreamReply::Miss
            }
            (UpstreamOp::Arith { .. }, WireReply::Value { value, cas, .. }) => {
                match protocol::common::parse_u64(&value) {
                    Some(value) => UpstreamReply::Number { value, cas },
                    None => UpstreamReply::Failed(Failure::Protocol),
                }
            }
            (_, WireReply::Number { value, cas }) => UpstreamReply::Number { value, cas },
            (UpstreamOp::Touch { .. } | UpstreamOp::Delete { .. }, WireReply::Miss) => {
                UpstreamReply::NotFound
            }
            (_, WireReply::Done { cas }) => UpstreamReply::Done { cas },
            (_, WireReply::NotStored) => UpstreamReply::NotStored,
            (_, WireReply::Exists) => UpstreamReply::Exists,
            (_, WireReply::NotFound | WireReply::Miss) => UpstreamReply::NotFound,
            (UpstreamOp::Arith { .. }, WireReply::Error(line))
                if line.starts_with(b"CLIENT_ERROR cannot increment or decrement") =>
            {
                UpstreamReply::NonNumeric
            }
            (_, WireReply::Error(mut line)) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                server_stats.errors.fetch_add(1, Ordering::Relaxed);
                line.extend_from_slice(b"\r\n");
                UpstreamReply::Error(line)
            }
            // Counted as errors by `finish`, as every failure is.
            (_, WireReply::Oversized) => UpstreamReply::Failed(Failure::TooLarge),
            (_, WireReply::Value { .. } | WireReply::MetaNoop) => {
                UpstreamReply::Failed(Failure::Protocol)
            }
        };
        self.finish(id, reply);
    }

    /// Stores a fetched item at the edge, unless a write overtook its read.
    pub(super) fn fill(&self, fetched: &Fetched, poisoned: bool) {
        let stats = &self.upstream.stats;
        if poisoned || fetched.edge_ttl_s == Some(0) {
            stats.fills_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut options = StoreOptions::new(
            // A copy the edge already has (a write-through that landed first) is newer.
            StoreMode::Add,
            fetched.client_flags,
            fetched.edge_ttl_s.map_or(0, i64::from),
        );
        options.new_cas = (fetched.cas != 0).then_some(fetched.cas);
        match self.engine.store(&fetched.key, &fetched.value, &options) {
            StoreOutcome::Stored { .. } => stats.fills.fetch_add(1, Ordering::Relaxed),
            _ => stats.fills_skipped.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Removes the edge copy of `key`, and keeps a read of it in flight from storing its
    /// value: a write of `key` whose outcome came late or never (it may have happened
    /// upstream after the read, or after the copy was filled).
    pub(super) fn forget_edge_copy(&mut self, key: &[u8]) {
        self.engine.unlink_key(key);
        self.poison_read(key);
    }

    /// Changes the edge copy of an ordered request's key for its outcome `reply`. Runs
    /// in the order the upstream applied the key's ordered requests, before the client
    /// gets the reply (so it reads its own write at the edge). In write-through mode a
    /// whole-value store the upstream reports with its new CAS is kept at the edge with
    /// that CAS (so a `gets` at the edge returns a CAS the upstream accepts) and the
    /// capped TTL; a touch, and a `gat` that found the item (its value was filled in
    /// [`UpstreamLoop::complete`], in both modes: a `gat` is a read), retime the edge copy;
    /// everything else — appends, counters, deletes, refusals, failures (the write may
    /// still have happened), every write in invalidate mode — removes it, so the next
    /// read fetches the upstream's value.
    pub(super) fn apply_to_edge(&self, request: &UpstreamRequest, reply: &UpstreamReply) {
        let through = self.upstream.config.writes == WriteMode::Through;
        let key = &request.key[..];
        let kept = match (&request.op, reply) {
            (
                UpstreamOp::Store {
                    kind: StoreKind::Set | StoreKind::Add | StoreKind::Replace,
                    client_flags,
                    exptime,
                    value,
                    ..
                },
                UpstreamReply::Done { cas: Some(cas) },
            ) if through => self
                .upstream
                .edge_exptime(*exptime, now_unix_s())
                .is_some_and(|edge_exptime| {
                    let mut options =
                        StoreOptions::new(StoreMode::Set, *client_flags, edge_exptime);
                    options.new_cas = Some(*cas);
                    matches!(
                        self.engine.store(key, value, &options),
                        StoreOutcome::Stored { .. }
                    )
                }),
            (UpstreamOp::Touch { exptime }, UpstreamReply::Done { .. }) if through => {
                self.retime(key, *exptime)
            }
            (
                UpstreamOp::Get {
                    touch_exptime: Some(exptime),
                },
                UpstreamReply::Hit(_),
            ) => self.retime(key, *exptime),
            _ => false,
        };
        if !kept {
            // Not counted as a delete: the client did not delete anything at the edge.
            self.engine.unlink_key(key);
        }
    }

    /// Gives the edge copy of `key` (if any) the TTL a client's `exptime` sets,
    /// capped; `false` when the edge should keep no copy.
    pub(super) fn retime(&self, key: &[u8], exptime: i64) -> bool {
        match self.upstream.edge_exptime(exptime, now_unix_s()) {
            Some(edge_exptime) => {
                // No edge copy to retime is fine too.
                let _ = self.engine.touch(key, edge_exptime);
                true
            }
            None => false,
        }
    }
}
