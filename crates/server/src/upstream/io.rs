//! The upstream thread: one mio loop that owns every connection to the upstream servers.
//!
//! - Requests arrive from the workers through a bounded channel. A plain read joins the
//!   read of the same key already in flight, if any (single flight: N concurrent misses
//!   of a key make one upstream request); every other request is its own flight.
//! - Each server has a pool of at most `--upstream-conns` connections, each pipelined
//!   (replies come back in request order; up to [`PIPELINE_DEPTH_MAX`] outstanding).
//!   A new connection first sends `mn` to learn whether the server speaks meta.
//! - Every flight has a deadline (`--upstream-timeout-ms` after its first submission).
//!   A connection whose oldest request is past its deadline is closed: a pipelined stream
//!   cannot skip a reply, and a server that stopped answering one will not answer the next.
//! - Consecutive failures of a server (refused or lost connections, timeouts, garbage)
//!   open its circuit breaker: for `--upstream-retry-ms` its requests fail at once (a read
//!   as a miss), then the next request tries a connection again.
//! - A read's reply is stored at the edge here (`Add`, with the upstream's flags, CAS and
//!   capped TTL) before the waiting connections get it — unless a write of that key
//!   completed while the read was in flight (the read may have seen the old value).

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

use super::{Delivery, Failure, Fetched, Op, Reply, Request, Route, Submission, Upstream};

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

pub(super) fn run(poll: Poll, upstream: Arc<Upstream>, engine: Arc<Engine>) {
    let servers = upstream
        .addrs
        .iter()
        .map(|&addr| Server {
            addr,
            dialect: None,
            conns: Vec::new(),
            backlog: VecDeque::new(),
            failures: 0,
            open_until: None,
        })
        .collect();
    let value_max_bytes = engine.config().item_size_max_bytes;
    let mut io = Io {
        poll,
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
        next_flight: 1,
        to_wake: Vec::new(),
    };
    io.run();
}

struct Server {
    addr: std::net::SocketAddr,
    /// Learned from the first connection's `mn`.
    dialect: Option<Dialect>,
    /// Slots of its connections in `Io::conns`.
    conns: Vec<usize>,
    /// Flights waiting for a connection with room.
    backlog: VecDeque<FlightId>,
    /// Consecutive failures; reset by any reply.
    failures: u32,
    /// The breaker is open until then.
    open_until: Option<Instant>,
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

/// A request written on a connection, waiting for its reply.
struct Sent {
    /// `None`: the `mn` probe.
    flight: Option<FlightId>,
    expect: Expect,
    deadline: Instant,
}

struct Conn {
    server: usize,
    stream: TcpStream,
    state: ConnState,
    out: Vec<u8>,
    input: Vec<u8>,
    /// Bytes of an oversized value still to discard from the input.
    skip_bytes: usize,
    sent: VecDeque<Sent>,
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
    /// A write of the key completed while this read was in flight: do not store its
    /// (possibly older) value at the edge.
    poisoned: bool,
    /// In `reads_by_key` (a plain read that others may join).
    joinable: bool,
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
    next_flight: FlightId,
    /// Workers with new deliveries this turn.
    to_wake: Vec<Arc<Route>>,
}

impl Io {
    fn run(&mut self) {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut more_submissions = false;
        loop {
            let timeout = if more_submissions {
                Some(Duration::ZERO)
            } else {
                self.next_deadline()
                    .map(|at| at.saturating_duration_since(Instant::now()))
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
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
            self.wake_workers();
        }
    }

    /// The soonest deadline of a request or a connection attempt.
    fn next_deadline(&self) -> Option<Instant> {
        let conns = self
            .conns
            .iter()
            .flatten()
            .filter_map(|conn| match conn.state {
                ConnState::Connecting { deadline } => Some(deadline),
                _ => conn.sent.front().map(|sent| sent.deadline),
            });
        let backlogs = self
            .servers
            .iter()
            .filter_map(|server| server.backlog.front())
            .filter_map(|id| self.flights.get(id).map(|flight| flight.deadline));
        conns.chain(backlogs).min()
    }

    fn take_submissions(&mut self) -> bool {
        for _ in 0..SUBMISSIONS_PER_TURN {
            match self.upstream.submissions.try_recv() {
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
            },
        );
        let now = Instant::now();
        if self.servers[server]
            .open_until
            .is_some_and(|until| now < until)
        {
            stats.breaker_rejects.fetch_add(1, Ordering::Relaxed);
            self.finish(id, Reply::Failed(Failure::Unavailable));
            return;
        }
        self.servers[server].backlog.push_back(id);
        self.pump(server);
    }

    /// Moves the server's backlog onto connections with room, opening connections up to
    /// the pool size.
    fn pump(&mut self, server: usize) {
        let mut written = Vec::new();
        while let Some(&id) = self.servers[server].backlog.front() {
            let ready = self.servers[server]
                .conns
                .iter()
                .copied()
                .filter(|&slot| {
                    self.conns[slot].as_ref().is_some_and(|conn| {
                        conn.state == ConnState::Ready
                            && conn.sent.len() < PIPELINE_DEPTH_MAX
                            && conn.out.len() < OUTPUT_FULL_BYTES
                    })
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
            let dialect = self.servers[server].dialect.unwrap_or(Dialect::Meta);
            let (Some(flight), Some(conn)) = (self.flights.get(&id), self.conns[slot].as_mut())
            else {
                continue;
            };
            let encoded = client::encode(dialect, &flight.request.wire(), &mut conn.out);
            match encoded {
                Ok(expect) => {
                    conn.sent.push_back(Sent {
                        flight: Some(id),
                        expect,
                        deadline: flight.deadline,
                    });
                    self.upstream.stats.servers[server]
                        .requests
                        .fetch_add(1, Ordering::Relaxed);
                    if !written.contains(&slot) {
                        written.push(slot);
                    }
                }
                Err(_) => self.finish(id, Reply::Failed(Failure::Unsupported)),
            }
        }
        for slot in written {
            self.write(slot);
        }
    }

    fn connect(&mut self, server: usize) {
        let stats = &self.upstream.stats.servers[server];
        stats.connects.fetch_add(1, Ordering::Relaxed);
        let addr = self.servers[server].addr;
        let mut stream = match TcpStream::connect(addr) {
            Ok(stream) => stream,
            Err(_) => {
                self.server_failed(server);
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
            self.server_failed(server);
            return;
        }
        self.conns[slot] = Some(Conn {
            server,
            stream,
            state: ConnState::Connecting {
                deadline: Instant::now() + self.timeout,
            },
            out: Vec::new(),
            input: Vec::new(),
            skip_bytes: 0,
            sent: VecDeque::new(),
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
                    self.drop_conn(slot, Failure::Unavailable);
                    return;
                }
            }
            match conn.stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotConnected => return,
                Err(_) => {
                    self.drop_conn(slot, Failure::Unavailable);
                    return;
                }
            }
            let _ = conn.stream.set_nodelay(true);
            let server = conn.server;
            self.upstream.stats.servers[server]
                .connections
                .fetch_add(1, Ordering::Relaxed);
            if self.servers[server].dialect.is_some() {
                conn.state = ConnState::Ready;
                self.pump(server);
            } else {
                conn.state = ConnState::Probing;
                let _ = client::encode(Dialect::Meta, &client::Request::Probe, &mut conn.out);
                conn.sent.push_back(Sent {
                    flight: None,
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
                    self.drop_conn(slot, Failure::Unavailable);
                    return;
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.drop_conn(slot, Failure::Unavailable);
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
            self.drop_conn(slot, Failure::Unavailable);
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
            self.server_answered(server);
        }
        for (sent, wire) in replies {
            match sent.flight {
                Some(id) => self.complete(id, wire),
                None => {
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
            self.drop_conn(slot, Failure::Protocol);
        } else {
            self.pump(server);
        }
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
                let latency = flight.started.elapsed();
                stats.record_latency(latency);
                server_stats.record_latency(latency);
            }
        }
        if flight.joinable && self.reads_by_key.get(&flight.request.key) == Some(&id) {
            self.reads_by_key.remove(&flight.request.key);
        }
        if !flight.request.is_read() {
            // A read of this key still in flight may have seen the value before this
            // write: its answer goes to its readers but not into the edge.
            if let Some(read) = self
                .reads_by_key
                .get(&flight.request.key)
                .and_then(|read| self.flights.get_mut(read))
            {
                read.poisoned = true;
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

    /// Times out what is past its deadline: connections whose oldest request (or whose
    /// connection attempt) is late, and backlogged flights.
    fn expire(&mut self, now: Instant) {
        for slot in 0..self.conns.len() {
            let late = self.conns[slot]
                .as_ref()
                .is_some_and(|conn| match conn.state {
                    ConnState::Connecting { deadline } => deadline <= now,
                    _ => conn.sent.front().is_some_and(|sent| sent.deadline <= now),
                });
            if late {
                self.drop_conn(slot, Failure::Timeout);
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
    }

    /// Closes a connection and fails what it carried: requests past their deadline as
    /// timeouts, the others as `failure`. A server left without a connection fails its
    /// backlog too (a read is then a miss at once, not after the timeout).
    fn drop_conn(&mut self, slot: usize, failure: Failure) {
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
            if let Some(id) = sent.flight {
                let failure = if sent.deadline <= now {
                    Failure::Timeout
                } else if failure == Failure::Timeout {
                    Failure::Unavailable
                } else {
                    failure
                };
                self.finish(id, Reply::Failed(failure));
            }
        }
        if !idle_close {
            self.server_failed(server);
        }
    }

    fn server_failed(&mut self, server: usize) {
        let state = &mut self.servers[server];
        state.failures = state.failures.saturating_add(1);
        if state.failures >= self.upstream.config.breaker_failures.max(1) {
            // Open (again, after a retry that failed too) for the retry period.
            state.open_until = Some(Instant::now() + self.retry);
            // Counted and logged when it opens after answering, not at every retry
            // while the upstream stays down.
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
                    "fogcached: upstream {}: circuit breaker open after {} failures in a \
                     row; its reads are misses, retried every {} ms",
                    stats.servers[server].name,
                    state.failures,
                    self.retry.as_millis()
                );
            }
        }
        if self.servers[server].conns.is_empty() {
            let backlog = std::mem::take(&mut self.servers[server].backlog);
            for id in backlog {
                self.finish(id, Reply::Failed(Failure::Unavailable));
            }
        }
    }

    fn server_answered(&mut self, server: usize) {
        let state = &mut self.servers[server];
        state.failures = 0;
        state.open_until = None;
        let server_stats = &self.upstream.stats.servers[server];
        if server_stats.breaker_open.swap(false, Ordering::Relaxed) {
            eprintln!(
                "fogcached: upstream {}: answering again, circuit breaker closed",
                server_stats.name
            );
        }
    }
}
