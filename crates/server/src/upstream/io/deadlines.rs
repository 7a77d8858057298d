//! When things are late, and what lateness does to a server: every flight's deadline
//! (`--upstream-timeout-ms` after its submission), a connection attempt's and a probe's,
//! the abandoned place a timed-out request keeps on its pipelined connection, the
//! connection that is stuck behind one; and the consecutive failures that open the
//! server's circuit breaker ([`Breaker`](crate::upstream::Breaker), shared by the loops).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::pool::{Awaiting, UpstreamConn, UpstreamConnState};
use super::{FlightId, Turn, UpstreamLoop};
use crate::upstream::breaker::Tripped;
use crate::upstream::{Failure, UpstreamReply};

impl UpstreamConn {
    /// When the connection counts as stuck: its oldest request was abandoned and no
    /// reply came for `grace` since then. (Counted from when the loop saw the lateness,
    /// so that a loop that was itself held up does not close a connection whose replies
    /// wait in its socket.)
    pub(super) fn stuck_at(&self, grace: Duration) -> Option<Instant> {
        match self.sent.front()?.awaiting {
            Awaiting::Abandoned { since, .. } => Some(since.max(self.last_reply) + grace),
            _ => None,
        }
    }

    /// When the loop must look at this connection again: its connection attempt's
    /// deadline, the deadline of its oldest request still awaited, or the time it would
    /// be stuck.
    pub(super) fn next_deadline(&self, grace: Duration) -> Option<Instant> {
        if let UpstreamConnState::Connecting { deadline } = self.state {
            return Some(deadline);
        }
        let stuck = self.stuck_at(grace);
        let mut live = self
            .sent
            .iter()
            .filter(|sent| !matches!(sent.awaiting, Awaiting::Abandoned { .. }))
            .map(|sent| sent.deadline);
        let live = if self.deadlines_unordered {
            live.min()
        } else {
            live.next()
        };
        match (stuck, live) {
            (Some(stuck), Some(live)) => Some(stuck.min(live)),
            (stuck, live) => stuck.or(live),
        }
    }
}

impl UpstreamLoop {
    /// The soonest deadline of a request, a connection attempt or a stuck connection.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let conns = self
            .conns
            .iter()
            .flatten()
            .filter_map(|conn| conn.next_deadline(self.timeout));
        let backlogs = self
            .servers
            .iter()
            .filter_map(|server| server.backlog.front())
            .filter_map(|id| self.flights.get(id).map(|flight| flight.deadline));
        // Looked at only when some wait: most keys have no line, most lines no waiting.
        let waiting = self
            .lines
            .waiting()
            .filter_map(|id| self.flights.get(&id).map(|flight| flight.deadline));
        conns.chain(backlogs).chain(waiting).min()
    }

    /// Times out what is past its deadline: each request alone (its place on the
    /// connection abandoned), backlogged flights, connection attempts and probes; and
    /// closes the connections that are stuck ([`UpstreamConn::stuck_at`]). A server whose
    /// requests timed out in this turn counts one failure.
    pub(super) fn expire(&mut self, now: Instant) {
        let mut timed_out = Vec::new();
        for slot in 0..self.conns.len() {
            let Some(conn) = self.conns[slot].as_mut() else {
                continue;
            };
            let server = conn.server;
            let late_start = match conn.state {
                UpstreamConnState::Connecting { deadline } => deadline <= now,
                // Nothing goes out before the probe's answer: an unanswered probe is a
                // connection that does not work.
                UpstreamConnState::Probing => {
                    conn.sent.front().is_some_and(|sent| sent.deadline <= now)
                }
                UpstreamConnState::Ready => false,
            };
            let stuck = conn.stuck_at(self.timeout).is_some_and(|at| at <= now);
            if late_start || stuck {
                if stuck {
                    self.upstream
                        .stats
                        .stuck_closes
                        .fetch_add(1, Ordering::Relaxed);
                }
                // A stuck connection's backlog waits for a new connection; one that never
                // got going fails it, as a refused one does.
                self.drop_conn(slot, Failure::Timeout, late_start);
                continue;
            }
            let mut expired = Vec::new();
            for sent in conn.sent.iter_mut() {
                let Awaiting::Flight(id) = sent.awaiting else {
                    continue;
                };
                if sent.deadline > now {
                    // Deadlines grow along the connection (but for requests of
                    // different workers submitted at nearly the same time, and ordered
                    // requests that waited for their turn): the first one not yet due
                    // ends the scan, unless they are known not to.
                    if conn.deadlines_unordered {
                        continue;
                    }
                    break;
                }
                // An ordered request's place in its line passes to the abandoned entry.
                let line_key = self
                    .flights
                    .get_mut(&id)
                    .filter(|flight| !flight.joinable)
                    .map(|flight| {
                        flight.turn = Turn::Out;
                        flight.request.key.clone()
                    });
                sent.awaiting = Awaiting::Abandoned {
                    line_key,
                    since: now,
                };
                conn.abandoned += 1;
                expired.push(id);
            }
            if !expired.is_empty() && !timed_out.contains(&server) {
                timed_out.push(server);
            }
            for id in expired {
                self.finish(id, UpstreamReply::Failed(Failure::Timeout));
            }
        }
        for server in 0..self.servers.len() {
            while let Some(&id) = self.servers[server].backlog.front() {
                let late = !matches!(self.flights.get(&id), Some(f) if f.deadline > now);
                if !late {
                    break;
                }
                self.servers[server].backlog.pop_front();
                self.finish(id, UpstreamReply::Failed(Failure::Timeout));
            }
        }
        // Never sent: their deadlines apply while they wait for their turn.
        let late: Vec<FlightId> = self
            .lines
            .waiting()
            .filter(|id| self.flights.get(id).is_some_and(|f| f.deadline <= now))
            .collect();
        for id in late {
            self.finish(id, UpstreamReply::Failed(Failure::Timeout));
        }
        for server in timed_out {
            self.server_failed(server, false);
        }
        // Connections closed above are replaced.
        for server in 0..self.servers.len() {
            if !self.servers[server].backlog.is_empty() {
                self.pump(server);
            }
        }
    }

    /// Counts a failure of `server` on its breaker (logged when it opens). With
    /// `fail_backlog`, a server left without a connection here fails its backlog.
    pub(super) fn server_failed(&mut self, server: usize, fail_backlog: bool) {
        let tripped = self
            .upstream
            .breaker(server)
            .failed(self.upstream.config.breaker_failures, self.retry);
        if let Tripped::Open { failures } = tripped {
            // Counted and logged when it opens after answering, not at every retry
            // while the upstream stays down, nor by every loop.
            let stats = &self.upstream.stats;
            let was_closed = !stats.servers[server]
                .breaker_open
                .swap(true, Ordering::Relaxed);
            if was_closed {
                stats.breaker_opens.fetch_add(1, Ordering::Relaxed);
                stats.servers[server]
                    .breaker_opens
                    .fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "fogcached: upstream {}: circuit breaker open after {failures} failures \
                     in a row; its reads are misses, retried every {} ms",
                    stats.servers[server].name,
                    self.retry.as_millis()
                );
            }
        }
        if fail_backlog && self.servers[server].conns.is_empty() {
            let backlog = std::mem::take(&mut self.servers[server].backlog);
            for id in backlog {
                self.finish(id, UpstreamReply::Failed(Failure::Unavailable));
            }
        }
    }

    pub(super) fn server_answered(&mut self, server: usize) {
        self.upstream.breaker(server).answered();
        let server_stats = &self.upstream.stats.servers[server];
        if server_stats.breaker_open.swap(false, Ordering::Relaxed) {
            eprintln!(
                "fogcached: upstream {}: answering again, circuit breaker closed",
                server_stats.name
            );
        }
    }
}
