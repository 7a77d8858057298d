//! Per-key write ordering: the ordered requests of a key (its writes, and its `gat`s,
//! which write its TTL) go out on one connection at a time, pipelined in arrival order,
//! so the upstream applies and answers them in that order and the edge sees their
//! outcomes in the same order. A key's next request goes elsewhere only once none is
//! outstanding. [`Lines`] is the bookkeeping alone (no socket, no flight), so that its
//! rules are tested here; [`UpstreamLoop::advance`] moves a line's requests onto the wire.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;

use super::{FlightId, UpstreamLoop};
use crate::upstream::{Failure, UpstreamReply};

/// Where an ordered request stands in its key's [`Line`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turn {
    /// Not in a line: a plain read, or an ordered request whose place an abandoned
    /// entry on its connection now holds, or one finished before it had a place.
    Out,
    /// In `Line::waiting`: not sent.
    Waiting,
    /// Counted in `Line::outstanding`: in the server's backlog or sent.
    Outstanding,
}

/// The ordered requests (writes, `gat`s) of one key not yet finished. Those sent are
/// all on one connection, in arrival order: the upstream applies and answers a
/// connection's requests in order, so the edge sees their outcomes in the order the
/// upstream applied them.
#[derive(Default)]
struct Line {
    /// The connection (slot, serial) its outstanding requests went out on; `None` while
    /// its one outstanding request waits in the server's backlog.
    conn: Option<(usize, u64)>,
    /// Its requests in the backlog or on `conn` whose outcome is not known yet (timed
    /// out ones included: the upstream may still apply them).
    outstanding: usize,
    /// Its requests waiting for their turn, in arrival order.
    waiting: VecDeque<FlightId>,
}

/// Where a new ordered request goes ([`Lines::join`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Joined {
    /// Its key had no line: it is the line's one outstanding request (to the backlog).
    Outstanding,
    /// Behind its key's unfinished requests, waiting for its turn.
    Waiting,
}

/// What a line's first waiting request may do now ([`Lines::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Nothing waits (the line ended if nothing is outstanding either).
    Nothing,
    /// None is outstanding: `id` goes alone, to the server's backlog ([`Lines::go_alone`]).
    Alone(FlightId),
    /// Its outstanding requests went out on connection (`slot`, `serial`): `id` may
    /// follow them there, if that takes requests ([`Lines::go_behind`]).
    Behind {
        slot: usize,
        serial: u64,
        id: FlightId,
    },
    /// Its one outstanding request is still in the backlog: the send that takes it ties
    /// the line to a connection ([`Lines::bind`]), and the waiting ones follow.
    Hold,
}

/// The lines of the keys with unfinished ordered requests: the bookkeeping of who goes
/// out when, apart from the sockets and flights that [`UpstreamLoop`] moves.
#[derive(Default)]
pub(super) struct Lines {
    by_key: HashMap<Vec<u8>, Line>,
    /// Requests in the lines' `waiting` (when there are any, deadlines look at them).
    waiting: usize,
}

impl Lines {
    /// A new ordered request `id` of `key`: outstanding at once if the key has no line,
    /// else behind the ones there.
    pub(super) fn join(&mut self, key: &[u8], id: FlightId) -> Joined {
        if let Some(line) = self.by_key.get_mut(key) {
            line.waiting.push_back(id);
            self.waiting += 1;
            return Joined::Waiting;
        }
        self.by_key.insert(
            key.to_vec(),
            Line {
                conn: None,
                outstanding: 1,
                waiting: VecDeque::new(),
            },
        );
        Joined::Outstanding
    }

    /// What `key`'s first waiting request may do; ends the line when nothing is left.
    pub(super) fn next(&mut self, key: &[u8]) -> Next {
        let Some(line) = self.by_key.get(key) else {
            return Next::Nothing;
        };
        let Some(&id) = line.waiting.front() else {
            if line.outstanding == 0 {
                self.by_key.remove(key);
            }
            return Next::Nothing;
        };
        if line.outstanding == 0 {
            return Next::Alone(id);
        }
        match line.conn {
            Some((slot, serial)) => Next::Behind { slot, serial, id },
            None => Next::Hold,
        }
    }

    /// `key`'s first waiting request leaves the line without going out (it failed).
    pub(super) fn drop_first(&mut self, key: &[u8]) {
        if let Some(line) = self.by_key.get_mut(key) {
            if line.waiting.pop_front().is_some() {
                self.waiting -= 1;
            }
        }
    }

    /// [`Next::Alone`]: the first waiting request becomes the one outstanding, on no
    /// connection yet.
    pub(super) fn go_alone(&mut self, key: &[u8]) {
        let Some(line) = self.by_key.get_mut(key) else {
            return;
        };
        debug_assert_eq!(line.outstanding, 0, "alone behind an outstanding request");
        if line.waiting.pop_front().is_some() {
            self.waiting -= 1;
        }
        line.outstanding = 1;
        line.conn = None;
    }

    /// [`Next::Behind`]: the first waiting request goes out behind the outstanding ones.
    pub(super) fn go_behind(&mut self, key: &[u8]) {
        let Some(line) = self.by_key.get_mut(key) else {
            return;
        };
        if line.waiting.pop_front().is_some() {
            self.waiting -= 1;
        }
        line.outstanding += 1;
    }

    /// An outstanding request of `key` was sent on connection (`slot`, `serial`): the
    /// line's requests are there. `true` when some wait to follow it.
    pub(super) fn bind(&mut self, key: &[u8], slot: usize, serial: u64) -> bool {
        let Some(line) = self.by_key.get_mut(key) else {
            return false;
        };
        debug_assert!(
            line.conn.is_none_or(|conn| conn == (slot, serial)),
            "a line on two connections"
        );
        line.conn = Some((slot, serial));
        !line.waiting.is_empty()
    }

    /// One of `key`'s outstanding requests ended (answered, failed, or its late reply
    /// came). `true` when that was the last outstanding one and some wait: the line
    /// moves on (to any connection). Ends the line when nothing is left.
    pub(super) fn release(&mut self, key: &[u8]) -> bool {
        let Some(line) = self.by_key.get_mut(key) else {
            debug_assert!(false, "an ordered request without its line");
            return false;
        };
        debug_assert!(line.outstanding > 0, "a line released more than it sent");
        line.outstanding = line.outstanding.saturating_sub(1);
        if line.outstanding > 0 {
            // Still on its connection; the waiting ones follow when it has room.
            return false;
        }
        line.conn = None;
        if line.waiting.is_empty() {
            self.by_key.remove(key);
            return false;
        }
        true
    }

    /// Waiting request `id` of `key` ended before its turn: it leaves the line, which
    /// ends if that was all.
    pub(super) fn leave(&mut self, key: &[u8], id: FlightId) {
        let Some(line) = self.by_key.get_mut(key) else {
            return;
        };
        let before = line.waiting.len();
        line.waiting.retain(|&waiting| waiting != id);
        self.waiting -= before - line.waiting.len();
        if line.outstanding == 0 && line.waiting.is_empty() {
            self.by_key.remove(key);
        }
    }

    /// The requests waiting in any line (none to look at, most of the time: most keys
    /// have no line, most lines no waiting request).
    pub(super) fn waiting(&self) -> impl Iterator<Item = FlightId> + '_ {
        (self.waiting > 0)
            .then(|| {
                self.by_key
                    .values()
                    .flat_map(|line| line.waiting.iter().copied())
            })
            .into_iter()
            .flatten()
    }
}

impl UpstreamLoop {
    /// Moves key `key`'s waiting requests on as far as they may go: behind its
    /// outstanding ones on their connection while it takes requests, or, when none is
    /// outstanding, the first one into the server's backlog (the others follow it once
    /// it is sent). Ends the line when nothing is left in it.
    pub(super) fn advance(&mut self, key: &[u8]) {
        loop {
            match self.lines.next(key) {
                Next::Nothing | Next::Hold => return,
                Next::Alone(id) => {
                    let Some(flight) = self.flights.get_mut(&id) else {
                        debug_assert!(false, "a finished request waiting in its line");
                        self.lines.drop_first(key);
                        continue;
                    };
                    let server = flight.server;
                    if self.upstream.breaker(server).is_open() {
                        self.lines.drop_first(key);
                        flight.turn = Turn::Out;
                        let stats = &self.upstream.stats;
                        stats.breaker_rejects.fetch_add(1, Ordering::Relaxed);
                        self.finish(id, UpstreamReply::Failed(Failure::Unavailable));
                        continue;
                    }
                    flight.turn = Turn::Outstanding;
                    self.lines.go_alone(key);
                    self.servers[server].backlog.push_back(id);
                    if !self.to_pump.contains(&server) {
                        self.to_pump.push(server);
                    }
                    return;
                }
                Next::Behind { slot, serial, id } => {
                    match self.conns.get_mut(slot).and_then(Option::as_mut) {
                        Some(conn) if conn.serial == serial => {
                            if !conn.takes_requests() {
                                // Moved on when it has caught up (`take_replies`).
                                if !conn.blocked.iter().any(|k| k == key) {
                                    conn.blocked.push(key.to_vec());
                                }
                                return;
                            }
                        }
                        // The connection is gone; its requests end (and leave the line)
                        // in the same step (`drop_conn`), before lines move on.
                        _ => {
                            debug_assert!(false, "a line on a closed connection");
                            return;
                        }
                    }
                    self.lines.go_behind(key);
                    if let Some(flight) = self.flights.get_mut(&id) {
                        flight.turn = Turn::Outstanding;
                    }
                    if self.send(slot, id).is_err() {
                        self.finish(id, UpstreamReply::Failed(Failure::Unsupported));
                    }
                }
            }
        }
    }

    /// Counts one of `key`'s outstanding ordered requests as ended (answered, failed,
    /// or its late reply come): the line moves on in [`UpstreamLoop::settle`].
    pub(super) fn release(&mut self, key: &[u8]) {
        if self.lines.release(key) {
            self.to_advance.push(key.to_vec());
        }
    }
}

#[cfg(test)]
mod tests;
