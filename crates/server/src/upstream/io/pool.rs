//! The connections of an upstream loop: each server's pool of at most
//! `--upstream-conns` pipelined connections, the `mn` probe that learns its dialect,
//! the backlog of requests waiting for a connection with room, and the bytes on the
//! wire (requests encoded and written once per turn, replies parsed in order). What a
//! reply means for its flight is `edge.rs`'s; when a request or connection is late is
//! `deadlines.rs`'s.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::time::Instant;

use mio::net::TcpStream;
use mio::{Interest, Token};
use protocol::client::{self, Dialect, Expect, ReplyParse};

use super::{FlightId, Turn, UpstreamLoop, PIPELINE_DEPTH_MAX};
use crate::upstream::{Failure, UpstreamReply};

/// Unwritten request bytes on one connection at most before it counts as full.
const OUTPUT_FULL_BYTES: usize = 4 * 1024 * 1024;
const READ_CHUNK_BYTES: usize = 64 * 1024;

pub(super) struct UpstreamServer {
    pub(super) addr: std::net::SocketAddr,
    /// Learned from the first connection's `mn` (this loop's, or another loop's through
    /// the server's statistics).
    pub(super) dialect: Option<Dialect>,
    /// Slots of its connections in `UpstreamLoop::conns`.
    pub(super) conns: Vec<usize>,
    /// Flights waiting for a connection with room.
    pub(super) backlog: VecDeque<FlightId>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum UpstreamConnState {
    Connecting {
        deadline: Instant,
    },
    /// `mn` sent; the reply says the dialect.
    Probing,
    Ready,
}

/// Whose reply a request written on a connection waits for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Awaiting {
    /// The `mn` probe.
    Probe,
    Flight(FlightId),
    /// A flight that timed out (`since` then): its reply is read in its turn and
    /// dropped. An ordered request keeps its key, and its place in the key's line
    /// (`write_order.rs`): its late reply removes the edge copy again (it may have
    /// happened after a read filled the edge), then lets the key's next ordered request
    /// go out.
    Abandoned {
        line_key: Option<Vec<u8>>,
        since: Instant,
    },
}

/// A request written on a connection, waiting for its reply.
pub(super) struct Sent {
    pub(super) awaiting: Awaiting,
    pub(super) expect: Expect,
    pub(super) deadline: Instant,
}

pub(super) struct UpstreamConn {
    pub(super) server: usize,
    /// Tells this connection from a later one in the same slot.
    pub(super) serial: u64,
    pub(super) stream: TcpStream,
    pub(super) state: UpstreamConnState,
    pub(super) out: Vec<u8>,
    pub(super) input: Vec<u8>,
    /// Bytes of an oversized value still to discard from the input.
    pub(super) skip_bytes: usize,
    pub(super) sent: VecDeque<Sent>,
    /// Entries of `sent` that are [`Awaiting::Abandoned`]: while there are any, the
    /// connection waits for a late reply and takes no new requests.
    pub(super) abandoned: usize,
    /// When a reply last came (or the connection opened).
    pub(super) last_reply: Instant,
    /// A request was sent with an earlier deadline than one before it (an ordered
    /// request that waited for its turn): deadlines do not grow along `sent`, every
    /// entry must be looked at. Cleared when `sent` empties.
    pub(super) deadlines_unordered: bool,
    /// Keys whose ordered requests wait for room on this connection (their line's).
    pub(super) blocked: Vec<Vec<u8>>,
}

impl UpstreamConn {
    /// Whether the connection may take a new request.
    pub(super) fn has_room(&self) -> bool {
        self.state == UpstreamConnState::Ready
            && self.sent.len() < PIPELINE_DEPTH_MAX
            && self.out.len() < OUTPUT_FULL_BYTES
    }

    /// Whether a request may be sent on it now: room, and no late reply awaited (a
    /// request behind one would wait for a reply that may never come).
    pub(super) fn takes_requests(&self) -> bool {
        self.has_room() && self.abandoned == 0
    }
}

/// A reply copied out of a connection's input buffer.
pub(super) enum WireReply {
    Value {
        client_flags: u32,
        value: Vec<u8>,
        cas: Option<u64>,
        ttl_s: Option<i64>,
    },
    Miss,
    Done {
        cas: Option<u64>,
    },
    NotStored,
    Exists,
    NotFound,
    Number {
        value: u64,
        cas: Option<u64>,
    },
    MetaNoop,
    Error(Vec<u8>),
    /// A value larger than the edge's `-I`, skipped.
    Oversized,
}

impl WireReply {
    fn from_parsed(reply: &client::Reply<'_>) -> WireReply {
        match *reply {
            client::Reply::Value {
                client_flags,
                value,
                cas,
                ttl_s,
            } => WireReply::Value {
                client_flags,
                value: value.to_vec(),
                cas,
                ttl_s,
            },
            client::Reply::Miss => WireReply::Miss,
            client::Reply::Done { cas } => WireReply::Done { cas },
            client::Reply::NotStored => WireReply::NotStored,
            client::Reply::Exists => WireReply::Exists,
            client::Reply::NotFound => WireReply::NotFound,
            client::Reply::Number { value, cas } => WireReply::Number { value, cas },
            client::Reply::MetaNoop => WireReply::MetaNoop,
            client::Reply::Error(line) => WireReply::Error(line.to_vec()),
            client::Reply::Oversized { .. } => WireReply::Oversized,
        }
    }
}

impl UpstreamLoop {
    /// Moves the server's backlog onto connections with room, opening connections up to
    /// the pool size. A connection waiting for a late reply takes none: the requests
    /// wait here for another connection (or for it to catch up) rather than queue behind
    /// a reply that may not come.
    pub(super) fn pump(&mut self, server: usize) {
        while let Some(&id) = self.servers[server].backlog.front() {
            let ready = self.servers[server]
                .conns
                .iter()
                .copied()
                .filter(|&slot| {
                    self.conns[slot]
                        .as_ref()
                        .is_some_and(|conn| conn.has_room() && conn.abandoned == 0)
                })
                .min_by_key(|&slot| self.conns[slot].as_ref().map_or(0, |c| c.sent.len()));
            // Every connection busy (or none ready): open another, up to the pool size,
            // so that one slow reply does not hold up the requests queued behind it.
            let busy = match ready {
                Some(slot) => self.conns[slot]
                    .as_ref()
                    .is_some_and(|conn| !conn.sent.is_empty()),
                None => true,
            };
            if busy {
                let opening = self.servers[server].conns.iter().any(|&slot| {
                    self.conns[slot]
                        .as_ref()
                        .is_some_and(|conn| conn.state != UpstreamConnState::Ready)
                });
                if !opening
                    && self.servers[server].conns.len() < self.upstream.config.conns_per_server
                {
                    self.connect(server);
                }
            }
            // Meanwhile a busy connection takes it (pipelined), if one has room.
            let Some(slot) = ready else {
                break;
            };
            self.servers[server].backlog.pop_front();
            if self.send(slot, id).is_err() {
                self.finish(id, UpstreamReply::Failed(Failure::Unsupported));
            }
        }
    }

    /// Encodes flight `id` on connection `slot` (written at the turn's end). The
    /// first sent request of a line ties the line to the connection, and the requests
    /// waiting in it follow ([`UpstreamLoop::settle`]).
    pub(super) fn send(&mut self, slot: usize, id: FlightId) -> Result<(), client::Unencodable> {
        let (Some(flight), Some(conn)) = (self.flights.get(&id), self.conns[slot].as_mut()) else {
            debug_assert!(
                false,
                "sending a finished request or on a closed connection"
            );
            return Ok(());
        };
        let server = conn.server;
        let dialect = self.servers[server].dialect.unwrap_or(Dialect::Meta);
        let expect = client::encode(dialect, &flight.request.wire(), &mut conn.out)?;
        if conn
            .sent
            .back()
            .is_some_and(|last| last.deadline > flight.deadline)
        {
            conn.deadlines_unordered = true;
        }
        conn.sent.push_back(Sent {
            awaiting: Awaiting::Flight(id),
            expect,
            deadline: flight.deadline,
        });
        self.upstream.stats.servers[server]
            .requests
            .fetch_add(1, Ordering::Relaxed);
        if !self.unflushed.contains(&slot) {
            self.unflushed.push(slot);
        }
        if flight.turn == Turn::Outstanding
            && self.lines.bind(&flight.request.key, slot, conn.serial)
        {
            self.to_advance.push(flight.request.key.clone());
        }
        Ok(())
    }

    /// Writes what this turn encoded: one send per connection for all the requests the
    /// turn gave it, not one per request.
    pub(super) fn flush(&mut self) {
        let mut unflushed = std::mem::take(&mut self.unflushed);
        for &slot in &unflushed {
            self.write(slot);
        }
        unflushed.clear();
        self.unflushed = unflushed;
    }

    pub(super) fn connect(&mut self, server: usize) {
        let stats = &self.upstream.stats.servers[server];
        stats.connects.fetch_add(1, Ordering::Relaxed);
        let addr = self.servers[server].addr;
        let mut stream = match TcpStream::connect(addr) {
            Ok(stream) => stream,
            Err(_) => {
                self.server_failed(server, true);
                return;
            }
        };
        let slot = self.free_conns.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if self
            .poll
            .registry()
            .register(
                &mut stream,
                Token(slot + 1),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            self.free_conns.push(slot);
            self.server_failed(server, true);
            return;
        }
        let serial = self.next_conn_serial;
        self.next_conn_serial += 1;
        self.conns[slot] = Some(UpstreamConn {
            server,
            serial,
            stream,
            state: UpstreamConnState::Connecting {
                deadline: Instant::now() + self.timeout,
            },
            out: Vec::new(),
            input: Vec::new(),
            skip_bytes: 0,
            sent: VecDeque::new(),
            abandoned: 0,
            last_reply: Instant::now(),
            deadlines_unordered: false,
            blocked: Vec::new(),
        });
        self.servers[server].conns.push(slot);
    }

    pub(super) fn on_event(&mut self, slot: usize, readable: bool, writable: bool) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if let UpstreamConnState::Connecting { .. } = conn.state {
            if !(readable || writable) {
                return;
            }
            match conn.stream.take_error() {
                Ok(None) => {}
                Ok(Some(_)) | Err(_) => {
                    self.drop_conn(slot, Failure::Unavailable, true);
                    return;
                }
            }
            match conn.stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotConnected => return,
                Err(_) => {
                    self.drop_conn(slot, Failure::Unavailable, true);
                    return;
                }
            }
            let _ = conn.stream.set_nodelay(true);
            let server = conn.server;
            let server_stats = &self.upstream.stats.servers[server];
            server_stats.connections.fetch_add(1, Ordering::Relaxed);
            if self.servers[server].dialect.is_none() {
                // Another loop may have probed the server already.
                self.servers[server].dialect = match server_stats.dialect.load(Ordering::Relaxed) {
                    1 => Some(Dialect::Meta),
                    2 => Some(Dialect::Text),
                    _ => None,
                };
            }
            if self.servers[server].dialect.is_some() {
                conn.state = UpstreamConnState::Ready;
                self.pump(server);
            } else {
                conn.state = UpstreamConnState::Probing;
                let _ = client::encode(Dialect::Meta, &client::Request::Probe, &mut conn.out);
                conn.sent.push_back(Sent {
                    awaiting: Awaiting::Probe,
                    expect: Expect::Probe,
                    deadline: Instant::now() + self.timeout,
                });
                self.write(slot);
            }
            // The same event may say the peer already closed: read it now, as no
            // further edge-triggered event will come for it.
            if readable {
                self.read(slot);
            }
            return;
        }
        if writable {
            self.write(slot);
        }
        if readable {
            self.read(slot);
        }
    }

    pub(super) fn write(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if matches!(conn.state, UpstreamConnState::Connecting { .. }) {
            return;
        }
        let mut written = 0;
        while written < conn.out.len() {
            match conn.stream.write(&conn.out[written..]) {
                Ok(0) => {
                    self.drop_conn(slot, Failure::Unavailable, true);
                    return;
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.drop_conn(slot, Failure::Unavailable, true);
                    return;
                }
            }
        }
        conn.out.drain(..written);
    }

    pub(super) fn read(&mut self, slot: usize) {
        let mut closed = false;
        {
            let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
                return;
            };
            let mut chunk = [0u8; READ_CHUNK_BYTES];
            loop {
                match conn.stream.read(&mut chunk) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => conn.input.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
        }
        self.take_replies(slot);
        if closed {
            self.drop_conn(slot, Failure::Unavailable, true);
        }
    }

    /// Parses the replies in a connection's input and completes their flights.
    pub(super) fn take_replies(&mut self, slot: usize) {
        let mut replies = Vec::new();
        let mut malformed = false;
        let server;
        {
            let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
                return;
            };
            server = conn.server;
            let mut at = 0;
            while at < conn.input.len() {
                if conn.skip_bytes > 0 {
                    let skipped = conn.skip_bytes.min(conn.input.len() - at);
                    at += skipped;
                    conn.skip_bytes -= skipped;
                    continue;
                }
                let Some(front) = conn.sent.front() else {
                    // Bytes nobody asked for.
                    malformed = true;
                    break;
                };
                match client::parse_reply(front.expect, &conn.input[at..], self.value_max_bytes) {
                    ReplyParse::Complete { reply, consumed } => {
                        let wire = WireReply::from_parsed(&reply);
                        at += consumed;
                        if let client::Reply::Oversized { skip_bytes } = reply {
                            conn.skip_bytes = skip_bytes;
                        }
                        if let Some(sent) = conn.sent.pop_front() {
                            replies.push((sent, wire));
                        }
                    }
                    ReplyParse::Incomplete => break,
                    ReplyParse::Malformed => {
                        malformed = true;
                        break;
                    }
                }
            }
            conn.input.drain(..at);
            if conn.input.capacity() > READ_CHUNK_BYTES * 4 && conn.input.is_empty() {
                conn.input = Vec::new();
            }
        }
        if !replies.is_empty() {
            if let Some(conn) = self.conns[slot].as_mut() {
                conn.last_reply = Instant::now();
                if conn.sent.is_empty() {
                    conn.deadlines_unordered = false;
                }
            }
            self.server_answered(server);
        }
        for (sent, wire) in replies {
            match sent.awaiting {
                Awaiting::Flight(id) => self.complete(id, wire),
                Awaiting::Abandoned { line_key, .. } => {
                    if let Some(conn) = self.conns[slot].as_mut() {
                        debug_assert!(conn.abandoned > 0, "an abandoned reply not counted");
                        conn.abandoned -= 1;
                    }
                    self.upstream
                        .stats
                        .late_replies
                        .fetch_add(1, Ordering::Relaxed);
                    if let Some(key) = line_key {
                        self.forget_edge_copy(&key);
                        self.release(&key);
                    }
                }
                Awaiting::Probe => {
                    let dialect = match wire {
                        WireReply::MetaNoop => Dialect::Meta,
                        _ => Dialect::Text,
                    };
                    self.servers[server].dialect = Some(dialect);
                    self.upstream.stats.servers[server].dialect.store(
                        if dialect == Dialect::Meta { 1 } else { 2 },
                        Ordering::Relaxed,
                    );
                    if let Some(conn) = self.conns[slot].as_mut() {
                        conn.state = UpstreamConnState::Ready;
                    }
                }
            }
        }
        if malformed {
            self.drop_conn(slot, Failure::Protocol, true);
            return;
        }
        // Caught up: the lines waiting for room here move on first.
        if let Some(conn) = self.conns[slot].as_mut() {
            if conn.takes_requests() && !conn.blocked.is_empty() {
                self.to_advance.append(&mut conn.blocked);
            }
        }
        self.pump(server);
    }

    /// Closes a connection and fails what it carried: requests past their deadline as
    /// timeouts, the others as `failure` (a timeout of the connection itself fails them
    /// as unavailable). A server left without a connection fails its backlog too (a
    /// read is then a miss at once, not after the timeout) unless `fail_backlog` is off
    /// (the connection was stuck, not refused: the backlog waits for a new one).
    pub(super) fn drop_conn(&mut self, slot: usize, failure: Failure, fail_backlog: bool) {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.free_conns.push(slot);
        let server = conn.server;
        if !matches!(conn.state, UpstreamConnState::Connecting { .. }) {
            self.upstream.stats.servers[server]
                .connections
                .fetch_sub(1, Ordering::Relaxed);
        }
        self.servers[server].conns.retain(|&s| s != slot);
        // An idle connection the upstream closed (its idle timeout, a restart with
        // nothing pending) is no failure of the upstream: the next request reconnects.
        let idle_close = conn.state == UpstreamConnState::Ready
            && conn.sent.is_empty()
            && failure == Failure::Unavailable;
        let now = Instant::now();
        for sent in conn.sent {
            match sent.awaiting {
                Awaiting::Flight(id) => {
                    let failure = if sent.deadline <= now {
                        Failure::Timeout
                    } else if failure == Failure::Timeout {
                        Failure::Unavailable
                    } else {
                        failure
                    };
                    self.finish(id, UpstreamReply::Failed(failure));
                }
                // An ordered request whose outcome will never be known.
                Awaiting::Abandoned {
                    line_key: Some(key),
                    ..
                } => {
                    self.forget_edge_copy(&key);
                    self.release(&key);
                }
                Awaiting::Abandoned { line_key: None, .. } | Awaiting::Probe => {}
            }
        }
        if !idle_close {
            self.server_failed(server, fail_backlog);
        }
    }
}
