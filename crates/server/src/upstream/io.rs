//! An upstream loop: a mio loop on its own thread that owns its connections to the
//! upstream servers and the requests for its share of the keys (see the module above).
//!
//! - Requests arrive from the workers through the loop's bounded channel. A plain read
//!   joins the read of the same key already in flight, if any (single flight: N
//!   concurrent misses of a key make one upstream request); every other request is its
//!   own flight.
//! - The writes of a key (and its `gat`s, which write its TTL) are *ordered*: they go out
//!   on one connection at a time, pipelined in arrival order ([`Line`]), so the upstream
//!   applies and answers them in that order (as it does a connection's requests), and
//!   the edge copy is changed here, as each answer comes, before the client gets it
//!   ([`Io::apply_to_edge`]). A key's next ordered request goes elsewhere only once
//!   none is outstanding — answered, failed with its connection, or, if it timed out,
//!   once its late reply came or its connection was closed — and waits meanwhile
//!   (within its deadline). So the edge's last change of a key is the one for the
//!   upstream's last write of it, or a removal.
//! - Each server has a pool of at most `--upstream-conns` connections in this loop, each
//!   pipelined (replies come back in request order; up to [`PIPELINE_DEPTH_MAX`]
//!   outstanding). A new connection first sends `mn` to learn whether the server speaks
//!   meta (once per server: the loops share what they learned).
//! - Every flight has a deadline (`--upstream-timeout-ms` after its first submission).
//!   A flight past it fails alone: its waiters get a timeout, and its place on the
//!   connection is kept, *abandoned* — a pipelined stream cannot skip a reply, so the late
//!   reply is read in its turn and dropped (a late write's reply removes the edge copy of
//!   its key once more, and only then may the key's next write go out) and the requests
//!   behind it get theirs. A connection with an
//!   abandoned request takes no new ones (they wait for another connection, or for it to
//!   catch up); it is closed only when no reply came on it for one more timeout after
//!   the abandonment (stuck: a server that stopped answering).
//! - Consecutive failures of a server (refused or lost connections, a loop turn in which
//!   requests timed out, a stuck connection, garbage) open its circuit breaker (shared by
//!   the loops): for `--upstream-retry-ms` its requests fail at once (a read as a miss),
//!   then the next request tries a connection again; any reply closes it.
//! - A read's reply is stored at the edge here (`Add`, with the upstream's flags, CAS and
//!   capped TTL) before the waiting connections get it — unless an ordered request of
//!   that key ended while the read was in flight (the read may have seen the old value;
//!   the read is then *poisoned*, and later reads do not join it).

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::{Engine, StoreMode, StoreOptions, StoreOutcome};
use ketama::Ketama;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use protocol::client::{self, Dialect, Expect, ReplyParse};

use super::breaker::Tripped;
use super::{
    now_unix_s, Delivery, Failure, Fetched, Op, Reply, Request, Route, StoreKind, Submission,
    Upstream, WriteMode,
};

const WAKER_TOKEN: Token = Token(0);
/// Requests outstanding on one connection at most.
pub const PIPELINE_DEPTH_MAX: usize = 128;
/// Unwritten request bytes on one connection at most before it counts as full.
const OUTPUT_FULL_BYTES: usize = 4 * 1024 * 1024;
/// Submissions taken per loop turn, so that timers and replies are not starved.
const SUBMISSIONS_PER_TURN: usize = 1024;
const EVENTS_CAPACITY: usize = 256;
const READ_CHUNK_BYTES: usize = 64 * 1024;

type FlightId = u64;

pub(super) fn new_poll() -> std::io::Result<(Poll, Arc<Waker>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
    Ok((poll, waker))
}

/// Runs upstream loop `shard` until the server stops.
pub(super) fn run(poll: Poll, upstream: Arc<Upstream>, shard: usize, engine: Arc<Engine>) {
    let servers = upstream
        .addrs
        .iter()
        .map(|&addr| Server {
            addr,
            dialect: None,
            conns: Vec::new(),
            backlog: VecDeque::new(),
        })
        .collect();
    let value_max_bytes = engine.config().item_size_max_bytes;
    let mut io = Io {
        poll,
        shard,
        ketama: Ketama::new(&upstream.config.servers),
        timeout: Duration::from_millis(u64::from(upstream.config.timeout_ms.max(1))),
        retry: Duration::from_millis(u64::from(upstream.config.retry_ms)),
        upstream,
        engine,
        value_max_bytes,
        servers,
        conns: Vec::new(),
        free_conns: Vec::new(),
        flights: HashMap::new(),
        reads_by_key: HashMap::new(),
        lines: HashMap::new(),
        waiting: 0,
        to_advance: Vec::new(),
        to_pump: Vec::new(),
        next_flight: 1,
        next_conn_serial: 1,
        to_wake: Vec::new(),
        unflushed: Vec::new(),
    };
    io.run();
}

struct Server {
    addr: std::net::SocketAddr,
    /// Learned from the first connection's `mn` (this loop's, or another loop's through
    /// the server's statistics).
    dialect: Option<Dialect>,
    /// Slots of its connections in `Io::conns`.
    conns: Vec<usize>,
    /// Flights waiting for a connection with room.
    backlog: VecDeque<FlightId>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Connecting {
        deadline: Instant,
    },
    /// `mn` sent; the reply says the dialect.
    Probing,
    Ready,
}

/// Whose reply a request written on a connection waits for.
#[derive(Debug, PartialEq, Eq)]
enum Awaiting {
    /// The `mn` probe.
    Probe,
    Flight(FlightId),
    /// A flight that timed out (`since` then): its reply is read in its turn and
    /// dropped. An ordered request keeps its key, and its place in the key's [`Line`]:
    /// its late reply removes the edge copy again (it may have happened after a read
    /// filled the edge), then lets the key's next ordered request go out.
    Abandoned {
        line_key: Option<Vec<u8>>,
        since: Instant,
    },
}

/// A request written on a connection, waiting for its reply.
struct Sent {
    awaiting: Awaiting,
    expect: Expect,
    deadline: Instant,
}

struct Conn {
    server: usize,
    /// Tells this connection from a later one in the same slot.
    serial: u64,
    stream: TcpStream,
    state: ConnState,
    out: Vec<u8>,
    input: Vec<u8>,
    /// Bytes of an oversized value still to discard from the input.
    skip_bytes: usize,
    sent: VecDeque<Sent>,
    /// Entries of `sent` that are [`Awaiting::Abandoned`]: while there are any, the
    /// connection waits for a late reply and takes no new requests.
    abandoned: usize,
    /// When a reply last came (or the connection opened).
    last_reply: Instant,
    /// A request was sent with an earlier deadline than one before it (an ordered
    /// request that waited for its turn): deadlines do not grow along `sent`, every
    /// entry must be looked at. Cleared when `sent` empties.
    deadlines_unordered: bool,
    /// Keys whose ordered requests wait for room on this connection (their line's).
    blocked: Vec<Vec<u8>>,
}

impl Conn {
    /// When the connection counts as stuck: its oldest request was abandoned and no
    /// reply came for `grace` since then. (Counted from when the loop saw the lateness,
    /// so that a loop that was itself held up does not close a connection whose replies
    /// wait in its socket.)
    fn stuck_at(&self, grace: Duration) -> Option<Instant> {
        match self.sent.front()?.awaiting {
            Awaiting::Abandoned { since, .. } => Some(since.max(self.last_reply) + grace),
            _ => None,
        }
    }

    /// When the loop must look at this connection again: its connection attempt's
    /// deadline, the deadline of its oldest request still awaited, or the time it would
    /// be stuck.
    fn next_deadline(&self, grace: Duration) -> Option<Instant> {
        if let ConnState::Connecting { deadline } = self.state {
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

    /// Whether the connection may take a new request.
    fn has_room(&self) -> bool {
        self.state == ConnState::Ready
            && self.sent.len() < PIPELINE_DEPTH_MAX
            && self.out.len() < OUTPUT_FULL_BYTES
    }

    /// Whether a request may be sent on it now: room, and no late reply awaited (a
    /// request behind one would wait for a reply that may never come).
    fn takes_requests(&self) -> bool {
        self.has_room() && self.abandoned == 0
    }
}

struct Waiter {
    route: Arc<Route>,
    slot: usize,
    serial: u64,
}

struct Flight {
    request: Request,
    server: usize,
    waiters: Vec<Waiter>,
    started: Instant,
    deadline: Instant,
    /// An ordered request of the key ended while this read was in flight: do not store
    /// its (possibly older) value at the edge.
    poisoned: bool,
    /// A plain read (single flight), which others may join while it is in
    /// `reads_by_key`; every other request is ordered (its key's [`Line`]).
    joinable: bool,
    /// Where an ordered request stands in its key's line.
    turn: Turn,
}

/// Where an ordered request stands in its key's [`Line`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
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

/// A reply copied out of a connection's input buffer.
enum WireReply {
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

struct Io {
    poll: Poll,
    /// Which of the upstream loops this is.
    shard: usize,
    upstream: Arc<Upstream>,
    engine: Arc<Engine>,
    ketama: Ketama,
    timeout: Duration,
    retry: Duration,
    value_max_bytes: usize,
    servers: Vec<Server>,
    /// Slot `i` is the connection with token `i + 1`.
    conns: Vec<Option<Conn>>,
    free_conns: Vec<usize>,
    flights: HashMap<FlightId, Flight>,
    /// Plain reads in flight, by key (single flight).
    reads_by_key: HashMap<Vec<u8>, FlightId>,
    /// Keys with ordered requests not finished.
    lines: HashMap<Vec<u8>, Line>,
    /// Requests in the lines' `waiting` (when there are any, `expire` looks at them).
    waiting: usize,
    /// Lines to move on, and servers whose backlog to pump, once the work at hand is
    /// done ([`Io::settle`]): not from inside it, so nothing recurses.
    to_advance: Vec<Vec<u8>>,
    to_pump: Vec<usize>,
    next_flight: FlightId,
    next_conn_serial: u64,
    /// Workers with new deliveries this turn.
    to_wake: Vec<Arc<Route>>,
    /// Connections with requests encoded this turn, written at its end.
    unflushed: Vec<usize>,
}

impl Io {
    fn run(&mut self) {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut more_submissions = false;
        loop {
            engine::fault::panic_point();
            let timeout = if more_submissions || !self.upstream.may_sleep(self.shard) {
                Some(Duration::ZERO)
            } else {
                self.next_deadline()
                    .map(|at| at.saturating_duration_since(Instant::now()))
            };
            let polled = self.poll.poll(&mut events, timeout);
            self.upstream.awake(self.shard);
            if let Err(e) = polled {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("fogcached: upstream poll failed: {e}");
                break;
            }
            if self.upstream.stopping() {
                break;
            }
            for event in events.iter() {
                if event.token() == WAKER_TOKEN {
                    continue;
                }
                let slot = event.token().0 - 1;
                let readable = event.is_readable() || event.is_read_closed() || event.is_error();
                let writable = event.is_writable() || event.is_write_closed();
                self.on_event(slot, readable, writable);
            }
            more_submissions = self.take_submissions();
            self.expire(Instant::now());
            // A failed send ends requests, which may let others go: until nothing moves.
            loop {
                self.settle();
                self.flush();
                if self.to_advance.is_empty() && self.to_pump.is_empty() {
                    break;
                }
            }
            self.wake_workers();
        }
    }

    /// The soonest deadline of a request, a connection attempt or a stuck connection.
    fn next_deadline(&self) -> Option<Instant> {
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
        let waiting = (self.waiting > 0)
            .then(|| self.lines.values().flat_map(|line| line.waiting.iter()))
            .into_iter()
            .flatten()
            .filter_map(|id| self.flights.get(id).map(|flight| flight.deadline));
        conns.chain(backlogs).chain(waiting).min()
    }

    fn take_submissions(&mut self) -> bool {
        for _ in 0..SUBMISSIONS_PER_TURN {
            match self.upstream.shards[self.shard].submissions.try_recv() {
                Ok(submission) => self.submit(submission),
                Err(_) => return false,
            }
        }
        true
    }

    fn submit(&mut self, submission: Submission) {
        let Submission {
            mut request,
            slot,
            serial,
            route,
            submitted,
        } = submission;
        // A batch is one flight per key, each answering the same connection.
        for key in std::mem::take(&mut request.more_keys) {
            let waiter = Waiter {
                route: Arc::clone(&route),
                slot,
                serial,
            };
            self.submit_one(Request::get(&key, None), waiter, submitted);
        }
        let waiter = Waiter {
            route,
            slot,
            serial,
        };
        self.submit_one(request, waiter, submitted);
    }

    fn submit_one(&mut self, request: Request, waiter: Waiter, submitted: Instant) {
        let stats = &self.upstream.stats;
        let joinable = matches!(
            request.op,
            Op::Get {
                touch_exptime: None
            }
        );
        if joinable {
            if let Some(flight) = self
                .reads_by_key
                .get(&request.key)
                .and_then(|id| self.flights.get_mut(id))
            {
                flight.waiters.push(waiter);
                stats.joined.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let server = self.ketama.server_for(&request.key);
        if request.is_read() {
            stats.gets.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.writes.fetch_add(1, Ordering::Relaxed);
        }
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        stats.servers[server]
            .in_flight
            .fetch_add(1, Ordering::Relaxed);
        let id = self.next_flight;
        self.next_flight += 1;
        if joinable {
            self.reads_by_key.insert(request.key.clone(), id);
        }
        let key = (!joinable).then(|| request.key.clone());
        self.flights.insert(
            id,
            Flight {
                request,
                server,
                waiters: vec![waiter],
                started: submitted,
                deadline: submitted + self.timeout,
                poisoned: false,
                joinable,
                turn: Turn::Out,
            },
        );
        if self.upstream.breaker(server).is_open() {
            stats.breaker_rejects.fetch_add(1, Ordering::Relaxed);
            self.finish(id, Reply::Failed(Failure::Unavailable));
            return;
        }
        if let Some(key) = key {
            // Ordered: behind the key's unfinished ones, if any (a line exists while it
            // has some).
            let flight = self.flights.get_mut(&id);
            if let Some(line) = self.lines.get_mut(&key) {
                line.waiting.push_back(id);
                self.waiting += 1;
                if let Some(flight) = flight {
                    flight.turn = Turn::Waiting;
                }
                // Straight onto its line's connection if that takes it.
                self.advance(&key);
                return;
            }
            if let Some(flight) = flight {
                flight.turn = Turn::Outstanding;
            }
            self.lines.insert(
                key,
                Line {
                    conn: None,
                    outstanding: 1,
                    waiting: VecDeque::new(),
                },
            );
        }
        self.servers[server].backlog.push_back(id);
        self.pump(server);
    }

    /// Moves key `key`'s waiting requests on as far as they may go: behind its
    /// outstanding ones on their connection while it takes requests, or, when none is
    /// outstanding, the first one into the server's backlog (the others follow it once
    /// it is sent). Ends the line when nothing is left in it.
    fn advance(&mut self, key: &[u8]) {
        loop {
            let Some(line) = self.lines.get_mut(key) else {
                return;
            };
            let Some(&id) = line.waiting.front() else {
                if line.outstanding == 0 {
                    self.lines.remove(key);
                }
                return;
            };
            if line.outstanding == 0 {
                line.waiting.pop_front();
                self.waiting -= 1;
                let Some(flight) = self.flights.get_mut(&id) else {
                    debug_assert!(false, "a finished request waiting in its line");
                    continue;
                };
                let server = flight.server;
                if self.upstream.breaker(server).is_open() {
                    flight.turn = Turn::Out;
                    let stats = &self.upstream.stats;
                    stats.breaker_rejects.fetch_add(1, Ordering::Relaxed);
                    self.finish(id, Reply::Failed(Failure::Unavailable));
                    continue;
                }
                flight.turn = Turn::Outstanding;
                line.outstanding = 1;
                line.conn = None;
                self.servers[server].backlog.push_back(id);
                if !self.to_pump.contains(&server) {
                    self.to_pump.push(server);
                }
                return;
            }
            // Its first outstanding request is still in the backlog: the pump that
            // sends it moves the line on.
            let Some((slot, serial)) = line.conn else {
                return;
            };
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
                // The connection is gone; its requests end (and leave the line) in the
                // same step (`drop_conn`), before lines move on.
                _ => {
                    debug_assert!(false, "a line on a closed connection");
                    return;
                }
            }
            line.waiting.pop_front();
            self.waiting -= 1;
            line.outstanding += 1;
            if let Some(flight) = self.flights.get_mut(&id) {
                flight.turn = Turn::Outstanding;
            }
            if self.send(slot, id).is_err() {
                self.finish(id, Reply::Failed(Failure::Unsupported));
            }
        }
    }

    /// Counts one of `key`'s outstanding ordered requests as ended (answered, failed,
    /// or its late reply come): the line moves on in [`Io::settle`].
    fn release(&mut self, key: &[u8]) {
        let Some(line) = self.lines.get_mut(key) else {
            debug_assert!(false, "an ordered request without its line");
            return;
        };
        debug_assert!(line.outstanding > 0, "a line released more than it sent");
        line.outstanding -= 1;
        if line.outstanding > 0 {
            // Still on its connection; the waiting ones follow when it has room.
            return;
        }
        line.conn = None;
        if line.waiting.is_empty() {
            self.lines.remove(key);
        } else {
            self.to_advance.push(key.to_vec());
        }
    }

    /// Moves on the lines and pumps the backlogs that the work just done let go, until
    /// none is left (each step may let others go).
    fn settle(&mut self) {
        loop {
            if let Some(key) = self.to_advance.pop() {
                self.advance(&key);
            } else if let Some(server) = self.to_pump.pop() {
                self.pump(server);
            } else {
                return;
            }
        }
    }

    /// Moves the server's backlog onto connections with room, opening connections up to
    /// the pool size. A connection waiting for a late reply takes none: the requests
    /// wait here for another connection (or for it to catch up) rather than queue behind
    /// a reply that may not come.
    fn pump(&mut self, server: usize) {
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
                        .is_some_and(|conn| conn.state != ConnState::Ready)
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
                self.finish(id, Reply::Failed(Failure::Unsupported));
            }
        }
    }

    /// Encodes flight `id` on connection `slot` (written at the turn's end). The
    /// first sent request of a line ties the line to the connection, and the requests
    /// waiting in it follow ([`Io::settle`]).
    fn send(&mut self, slot: usize, id: FlightId) -> Result<(), client::Unencodable> {
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
        if flight.turn == Turn::Outstanding {
            if let Some(line) = self.lines.get_mut(&flight.request.key) {
                debug_assert!(
                    line.conn
                        .is_none_or(|(s, serial)| (s, serial) == (slot, conn.serial)),
                    "a line on two connections"
                );
                line.conn = Some((slot, conn.serial));
                if !line.waiting.is_empty() {
                    self.to_advance.push(flight.request.key.clone());
                }
            }
        }
        Ok(())
    }

    /// Writes what this turn encoded: one send per connection for all the requests the
    /// turn gave it, not one per request.
    fn flush(&mut self) {
        let mut unflushed = std::mem::take(&mut self.unflushed);
        for &slot in &unflushed {
            self.write(slot);
        }
        unflushed.clear();
        self.unflushed = unflushed;
    }

    fn connect(&mut self, server: usize) {
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
        self.conns[slot] = Some(Conn {
            server,
            serial,
            stream,
            state: ConnState::Connecting {
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

    fn on_event(&mut self, slot: usize, readable: bool, writable: bool) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if let ConnState::Connecting { .. } = conn.state {
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
                conn.state = ConnState::Ready;
                self.pump(server);
            } else {
                conn.state = ConnState::Probing;
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

    fn write(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if matches!(conn.state, ConnState::Connecting { .. }) {
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

    fn read(&mut self, slot: usize) {
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
    fn take_replies(&mut self, slot: usize) {
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
                        conn.state = ConnState::Ready;
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

    /// Turns the upstream's reply to flight `id` into the edge's [`Reply`].
    fn complete(&mut self, id: FlightId, wire: WireReply) {
        let Some(flight) = self.flights.get(&id) else {
            return;
        };
        let stats = &self.upstream.stats;
        let server_stats = &stats.servers[flight.server];
        let text_upstream = self.servers[flight.server].dialect == Some(Dialect::Text);
        let reply = match (&flight.request.op, wire) {
            (
                Op::Get { .. },
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
                Reply::Hit(fetched)
            }
            (Op::Get { .. }, WireReply::Miss | WireReply::NotFound) => {
                stats.misses.fetch_add(1, Ordering::Relaxed);
                server_stats.misses.fetch_add(1, Ordering::Relaxed);
                Reply::Miss
            }
            (Op::Arith { .. }, WireReply::Value { value, cas, .. }) => {
                match protocol::common::parse_u64(&value) {
                    Some(value) => Reply::Number { value, cas },
                    None => Reply::Failed(Failure::Protocol),
                }
            }
            (_, WireReply::Number { value, cas }) => Reply::Number { value, cas },
            (Op::Touch { .. } | Op::Delete { .. }, WireReply::Miss) => Reply::NotFound,
            (_, WireReply::Done { cas }) => Reply::Done { cas },
            (_, WireReply::NotStored) => Reply::NotStored,
            (_, WireReply::Exists) => Reply::Exists,
            (_, WireReply::NotFound | WireReply::Miss) => Reply::NotFound,
            (Op::Arith { .. }, WireReply::Error(line))
                if line.starts_with(b"CLIENT_ERROR cannot increment or decrement") =>
            {
                Reply::NonNumeric
            }
            (_, WireReply::Error(mut line)) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                server_stats.errors.fetch_add(1, Ordering::Relaxed);
                line.extend_from_slice(b"\r\n");
                Reply::Error(line)
            }
            // Counted as errors by `finish`, as every failure is.
            (_, WireReply::Oversized) => Reply::Failed(Failure::TooLarge),
            (_, WireReply::Value { .. } | WireReply::MetaNoop) => Reply::Failed(Failure::Protocol),
        };
        self.finish(id, reply);
    }

    /// Stores a fetched item at the edge, unless a write overtook its read.
    fn fill(&self, fetched: &Fetched, poisoned: bool) {
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
    fn forget_edge_copy(&mut self, key: &[u8]) {
        self.engine.unlink_key(key);
        self.poison_read(key);
    }

    /// Keeps the read of `key` in flight, if any, from storing its value (it may have
    /// seen the value before an ordered request that just ended), and lets later reads
    /// ask again rather than join it (a client that got its write's reply must not be
    /// answered with the value from before it).
    fn poison_read(&mut self, key: &[u8]) {
        if let Some(read) = self.reads_by_key.remove(key) {
            if let Some(read) = self.flights.get_mut(&read) {
                read.poisoned = true;
            }
        }
    }

    /// Changes the edge copy of an ordered request's key for its outcome `reply`. Runs
    /// in the order the upstream applied the key's ordered requests, before the client
    /// gets the reply (so it reads its own write at the edge). In write-through mode a
    /// whole-value store the upstream reports with its new CAS is kept at the edge with
    /// that CAS (so a `gets` at the edge returns a CAS the upstream accepts) and the
    /// capped TTL; a touch, and a `gat` that found the item (its value was filled in
    /// [`Io::complete`], in both modes: a `gat` is a read), retime the edge copy;
    /// everything else — appends, counters, deletes, refusals, failures (the write may
    /// still have happened), every write in invalidate mode — removes it, so the next
    /// read fetches the upstream's value.
    fn apply_to_edge(&self, request: &Request, reply: &Reply) {
        let through = self.upstream.config.writes == WriteMode::Through;
        let key = &request.key[..];
        let kept = match (&request.op, reply) {
            (
                Op::Store {
                    kind: StoreKind::Set | StoreKind::Add | StoreKind::Replace,
                    client_flags,
                    exptime,
                    value,
                    ..
                },
                Reply::Done { cas: Some(cas) },
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
            (Op::Touch { exptime }, Reply::Done { .. }) if through => self.retime(key, *exptime),
            (
                Op::Get {
                    touch_exptime: Some(exptime),
                },
                Reply::Hit(_),
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
    fn retime(&self, key: &[u8], exptime: i64) -> bool {
        match self.upstream.edge_exptime(exptime, now_unix_s()) {
            Some(edge_exptime) => {
                // No edge copy to retime is fine too.
                let _ = self.engine.touch(key, edge_exptime);
                true
            }
            None => false,
        }
    }

    /// Ends flight `id` with `reply`: statistics, single-flight bookkeeping, delivery.
    fn finish(&mut self, id: FlightId, reply: Reply) {
        let Some(flight) = self.flights.remove(&id) else {
            return;
        };
        let stats = &self.upstream.stats;
        let server_stats = &stats.servers[flight.server];
        stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        server_stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        match reply {
            Reply::Failed(Failure::Timeout) => {
                stats.timeouts.fetch_add(1, Ordering::Relaxed);
                server_stats.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            Reply::Failed(_) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                server_stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                stats.record_latency(flight.server, flight.started.elapsed());
            }
        }
        let key = &flight.request.key;
        if flight.joinable && self.reads_by_key.get(key) == Some(&id) {
            self.reads_by_key.remove(key);
        }
        if !flight.joinable {
            // An ordered request: its edge change, in the order the upstream applied
            // the key's (a read still in flight may have seen the value before it: its
            // answer goes to its readers but not into the edge), then its place.
            self.poison_read(key);
            self.apply_to_edge(&flight.request, &reply);
            match flight.turn {
                Turn::Outstanding => self.release(key),
                Turn::Waiting => {
                    // Never sent: it leaves its line, which ends if that was all.
                    if let Some(line) = self.lines.get_mut(key) {
                        line.waiting.retain(|&waiting| waiting != id);
                        self.waiting -= 1;
                        if line.outstanding == 0 && line.waiting.is_empty() {
                            self.lines.remove(key);
                        }
                    }
                }
                Turn::Out => {}
            }
        }
        let reply = Arc::new(reply);
        for waiter in flight.waiters {
            let delivery = Delivery {
                slot: waiter.slot,
                serial: waiter.serial,
                key: flight.request.key.clone(),
                reply: Arc::clone(&reply),
            };
            // A worker that stopped has no connection left to answer.
            if waiter.route.sender.send(delivery).is_ok()
                && !self.to_wake.iter().any(|r| Arc::ptr_eq(r, &waiter.route))
            {
                self.to_wake.push(waiter.route);
            }
        }
    }

    fn wake_workers(&mut self) {
        for route in self.to_wake.drain(..) {
            // A failed wake leaves the reply for the worker's next event.
            let _ = route.waker.wake();
        }
    }

    /// Times out what is past its deadline: each request alone (its place on the
    /// connection abandoned), backlogged flights, connection attempts and probes; and
    /// closes the connections that are stuck ([`Conn::stuck_at`]). A server whose
    /// requests timed out in this turn counts one failure.
    fn expire(&mut self, now: Instant) {
        let mut timed_out = Vec::new();
        for slot in 0..self.conns.len() {
            let Some(conn) = self.conns[slot].as_mut() else {
                continue;
            };
            let server = conn.server;
            let late_start = match conn.state {
                ConnState::Connecting { deadline } => deadline <= now,
                // Nothing goes out before the probe's answer: an unanswered probe is a
                // connection that does not work.
                ConnState::Probing => conn.sent.front().is_some_and(|sent| sent.deadline <= now),
                ConnState::Ready => false,
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
                self.finish(id, Reply::Failed(Failure::Timeout));
            }
        }
        for server in 0..self.servers.len() {
            while let Some(&id) = self.servers[server].backlog.front() {
                let late = !matches!(self.flights.get(&id), Some(f) if f.deadline > now);
                if !late {
                    break;
                }
                self.servers[server].backlog.pop_front();
                self.finish(id, Reply::Failed(Failure::Timeout));
            }
        }
        if self.waiting > 0 {
            // Never sent: their deadlines apply while they wait for their turn.
            let late: Vec<FlightId> = self
                .lines
                .values()
                .flat_map(|line| line.waiting.iter().copied())
                .filter(|id| self.flights.get(id).is_some_and(|f| f.deadline <= now))
                .collect();
            for id in late {
                self.finish(id, Reply::Failed(Failure::Timeout));
            }
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

    /// Closes a connection and fails what it carried: requests past their deadline as
    /// timeouts, the others as `failure` (a timeout of the connection itself fails them
    /// as unavailable). A server left without a connection fails its backlog too (a
    /// read is then a miss at once, not after the timeout) unless `fail_backlog` is off
    /// (the connection was stuck, not refused: the backlog waits for a new one).
    fn drop_conn(&mut self, slot: usize, failure: Failure, fail_backlog: bool) {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.free_conns.push(slot);
        let server = conn.server;
        if !matches!(conn.state, ConnState::Connecting { .. }) {
            self.upstream.stats.servers[server]
                .connections
                .fetch_sub(1, Ordering::Relaxed);
        }
        self.servers[server].conns.retain(|&s| s != slot);
        // An idle connection the upstream closed (its idle timeout, a restart with
        // nothing pending) is no failure of the upstream: the next request reconnects.
        let idle_close = conn.state == ConnState::Ready
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
                    self.finish(id, Reply::Failed(failure));
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

    /// Counts a failure of `server` on its breaker (logged when it opens). With
    /// `fail_backlog`, a server left without a connection here fails its backlog.
    fn server_failed(&mut self, server: usize, fail_backlog: bool) {
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
                self.finish(id, Reply::Failed(Failure::Unavailable));
            }
        }
    }

    fn server_answered(&mut self, server: usize) {
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
