//! An upstream loop: a mio loop on its own thread that owns its connections to the
//! upstream servers and the requests for its share of the keys (see the module above).
//!
//! - Requests arrive from the workers through the loop's bounded channel. A plain read
//!   joins the read of the same key already in flight, if any (single flight: N
//!   concurrent misses of a key make one upstream request); every other request is its
//!   own flight.
//! - The writes of a key (and its `gat`s, which write its TTL) are *ordered*: they go out
//!   on one connection at a time, pipelined in arrival order (`write_order.rs`), so the upstream
//!   applies and answers them in that order (as it does a connection's requests), and
//!   the edge copy is changed here, as each answer comes, before the client gets it
//!   (`edge.rs`). A key's next ordered request goes elsewhere only once
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
//!
//! One room per job: this file is the loop (its turn, submissions, a flight's end and
//! delivery); `pool.rs` the connections and the wire; `single_flight.rs` the reads that
//! share a flight; `write_order.rs` the per-key lines of ordered requests;
//! `deadlines.rs` the timeouts, stuck connections and the breaker's failures; `edge.rs`
//! what an answer does to the edge copy.

mod deadlines;
mod edge;
mod pool;
mod single_flight;
mod write_order;

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::Engine;
use ketama::Ketama;
use mio::{Events, Poll, Token, Waker};

use super::{Delivery, Failure, Route, Submission, Upstream, UpstreamReply, UpstreamRequest};
use pool::{UpstreamConn, UpstreamServer};
use single_flight::SingleFlight;
use write_order::{Joined, Lines, Turn};

const WAKER_TOKEN: Token = Token(0);
/// Requests outstanding on one connection at most.
pub const PIPELINE_DEPTH_MAX: usize = 128;
/// Submissions taken per loop turn, so that timers and replies are not starved.
const SUBMISSIONS_PER_TURN: usize = 1024;
const EVENTS_CAPACITY: usize = 256;

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
        .map(|&addr| UpstreamServer {
            addr,
            dialect: None,
            conns: Vec::new(),
            backlog: VecDeque::new(),
        })
        .collect();
    let value_max_bytes = engine.config().item_size_max_bytes;
    let mut io = UpstreamLoop {
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
        reads: SingleFlight::default(),
        lines: Lines::default(),
        to_advance: Vec::new(),
        to_pump: Vec::new(),
        next_flight: 1,
        next_conn_serial: 1,
        to_wake: Vec::new(),
        unflushed: Vec::new(),
    };
    io.run();
}

struct Waiter {
    route: Arc<Route>,
    slot: usize,
    serial: u64,
}

struct Flight {
    request: UpstreamRequest,
    server: usize,
    waiters: Vec<Waiter>,
    started: Instant,
    deadline: Instant,
    /// An ordered request of the key ended while this read was in flight: do not store
    /// its (possibly older) value at the edge.
    poisoned: bool,
    /// A plain read (single flight), which others may join while it is in
    /// [`SingleFlight`]; every other request is ordered (its key's line, [`Lines`]).
    joinable: bool,
    /// Where an ordered request stands in its key's line.
    turn: Turn,
}

struct UpstreamLoop {
    poll: Poll,
    /// Which of the upstream loops this is.
    shard: usize,
    upstream: Arc<Upstream>,
    engine: Arc<Engine>,
    ketama: Ketama,
    timeout: Duration,
    retry: Duration,
    value_max_bytes: usize,
    servers: Vec<UpstreamServer>,
    /// Slot `i` is the connection with token `i + 1`.
    conns: Vec<Option<UpstreamConn>>,
    free_conns: Vec<usize>,
    flights: HashMap<FlightId, Flight>,
    /// Plain reads in flight, by key.
    reads: SingleFlight,
    /// Keys with ordered requests not finished.
    lines: Lines,
    /// Lines to move on, and servers whose backlog to pump, once the work at hand is
    /// done ([`UpstreamLoop::settle`]): not from inside it, so nothing recurses.
    to_advance: Vec<Vec<u8>>,
    to_pump: Vec<usize>,
    next_flight: FlightId,
    next_conn_serial: u64,
    /// Workers with new deliveries this turn.
    to_wake: Vec<Arc<Route>>,
    /// Connections with requests encoded this turn, written at its end.
    unflushed: Vec<usize>,
}

impl UpstreamLoop {
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
            self.submit_one(UpstreamRequest::get(&key, None), waiter, submitted);
        }
        let waiter = Waiter {
            route,
            slot,
            serial,
        };
        self.submit_one(request, waiter, submitted);
    }

    fn submit_one(&mut self, request: UpstreamRequest, waiter: Waiter, submitted: Instant) {
        let stats = &self.upstream.stats;
        let joinable = SingleFlight::joinable(&request.op);
        if joinable {
            if let Some(flight) = self
                .reads
                .in_flight(&request.key)
                .and_then(|id| self.flights.get_mut(&id))
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
            self.reads.started(request.key.clone(), id);
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
            self.finish(id, UpstreamReply::Failed(Failure::Unavailable));
            return;
        }
        if let Some(key) = key {
            // Ordered: behind the key's unfinished ones, if any (a line exists while it
            // has some).
            let joined = self.lines.join(&key, id);
            if let Some(flight) = self.flights.get_mut(&id) {
                flight.turn = match joined {
                    Joined::Waiting => Turn::Waiting,
                    Joined::Outstanding => Turn::Outstanding,
                };
            }
            if joined == Joined::Waiting {
                // Straight onto its line's connection if that takes it.
                self.advance(&key);
                return;
            }
        }
        self.servers[server].backlog.push_back(id);
        self.pump(server);
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

    /// Ends flight `id` with `reply`: statistics, single-flight bookkeeping, delivery.
    fn finish(&mut self, id: FlightId, reply: UpstreamReply) {
        let Some(flight) = self.flights.remove(&id) else {
            return;
        };
        let stats = &self.upstream.stats;
        let server_stats = &stats.servers[flight.server];
        stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        server_stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        match reply {
            UpstreamReply::Failed(Failure::Timeout) => {
                stats.timeouts.fetch_add(1, Ordering::Relaxed);
                server_stats.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            UpstreamReply::Failed(_) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                server_stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                stats.record_latency(flight.server, flight.started.elapsed());
            }
        }
        let key = &flight.request.key;
        if flight.joinable {
            self.reads.ended(key, id);
        }
        if !flight.joinable {
            // An ordered request: its edge change, in the order the upstream applied
            // the key's (a read still in flight may have seen the value before it: its
            // answer goes to its readers but not into the edge), then its place.
            self.poison_read(key);
            self.apply_to_edge(&flight.request, &reply);
            match flight.turn {
                Turn::Outstanding => self.release(key),
                // Never sent: it leaves its line, which ends if that was all.
                Turn::Waiting => self.lines.leave(key, id),
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
}
