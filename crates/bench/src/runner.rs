//! Drives the load: N connections spread over a few threads, each thread running its own
//! mio event loop.
//!
//! Why mio rather than a blocking socket per connection: open loop needs to send on a
//! schedule whether or not earlier replies came back (otherwise a slow server silently
//! lowers the offered load — coordinated omission), and hundreds of connections on a
//! 2-core machine should not need hundreds of threads competing with the server under
//! test. One readiness loop per thread can pipeline sends and reads on each of its
//! connections and time everything against the intended send instant.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::ketama::Ketama;
use crate::proto::{encode_get, encode_set, parse_reply, Protocol, Reply};
use crate::run_report::{Measurements, ServerSample, SERVER_FIELDS};
use crate::timer::PreciseTimer;
use crate::workload::{
    check_value, next_op, write_key, write_value, KeyDistribution, KeyGenerator, OpKind, Rng,
    ValueSize,
};

/// The random stream of connection 0 under `--seed`; connection i takes the stream after
/// it by i. Far above the streams the key distributions draw their own setup from (the
/// zipf permutation), so no connection repeats those draws.
const CONNECTION_STREAM_FIRST: u64 = 1 << 32;
/// How long, after the end of a phase, outstanding replies are still awaited.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a single poll sleeps, so that the end of a phase is noticed promptly.
const POLL_MAX_WAIT: Duration = Duration::from_millis(50);
/// The worker's timer; connection tokens are far below it.
const TIMER_TOKEN: Token = Token(usize::MAX);
/// Bytes read per `read` call.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// A connection whose unparsed input grows past this is broken (largest value + slack).
const INPUT_MAX_BYTES: usize = crate::workload::VALUE_MAX_BYTES + 64 * 1024;
/// Connect timeout per connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Extra seconds kept in a phase's time series beyond its nominal length (drain).
const SERIES_SLACK_S: usize = 4;

/// Most servers one run spreads its keys over.
pub const SERVERS_MAX: usize = 64;

/// Everything a run needs; built from the command line.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The servers under test. With several, every key lives on the server ketama
    /// consistent hashing picks for it (see [`crate::ketama`]), and every logical
    /// connection holds one socket per server.
    pub servers: Vec<SocketAddr>,
    pub protocol: Protocol,
    pub connections: usize,
    pub threads: usize,
    pub duration: Duration,
    /// Open loop at this many requests per second in total; closed loop if None.
    pub rate_per_s: Option<f64>,
    pub distribution: KeyDistribution,
    pub value_size: ValueSize,
    /// Share of gets in the run phase, in [0, 1].
    pub get_ratio: f64,
    pub ttl_s: u32,
    pub key_prefix: String,
    pub verify: bool,
    pub seed: u64,
    /// Open loop: most requests in flight per connection before sends are held back.
    pub pipeline_max: usize,
    /// Bound on the load phase's length.
    pub load_timeout: Duration,
    /// Edge-cloud look-aside mode: `servers` are the edge, this the origin.
    pub origin: Option<Origin>,
}

/// The origin of the look-aside mode (seeds 003/001).
///
/// A get that misses at the edge waits `delay` in the client (scheduled in the worker's
/// event loop, so other connections keep running), is then read from the origin, and
/// the edge is filled with a set of the value read. If the origin misses too, the client
/// generates the key's value as the "database" would (the same checkable pattern
/// `--verify` expects) and sets it in the origin and in the edge, so that later reads of
/// the key behave as if it had always been in the database. The delay is added once per
/// fetch, before the origin request; run-phase sets go to the edge only.
#[derive(Debug, Clone, Copy)]
pub struct Origin {
    pub server: SocketAddr,
    pub delay: Duration,
}

/// Which phase the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// YCSB-style load: every key in [0, keys) set once, closed loop.
    Load,
    /// The measured run phase.
    Run,
}

#[derive(Clone, Copy)]
struct Pending {
    /// Binary protocol: the number the server must echo (checked in order).
    opaque: u32,
    op: OpKind,
    key_id: u64,
    intended: Instant,
    /// A look-aside fill of the edge, not an operation of the workload.
    fill: bool,
}

/// A request on the origin connection.
#[derive(Clone, Copy)]
enum OriginPending {
    /// The fetch of a key that missed at the edge; `intended` is the edge get's.
    Fetch {
        opaque: u32,
        key_id: u64,
        intended: Instant,
    },
    /// The set of a generated value after an origin miss.
    Fill { opaque: u32 },
}

/// One socket of a logical connection, with its own output, unparsed input and queue of
/// requests awaiting replies (replies come back in request order on each socket).
struct Link<P> {
    stream: TcpStream,
    out: Vec<u8>,
    out_pos: usize,
    input: Vec<u8>,
    pending: VecDeque<P>,
    next_opaque: u32,
}

impl<P> Link<P> {
    fn new(stream: TcpStream) -> Link<P> {
        Link {
            stream,
            out: Vec::new(),
            out_pos: 0,
            input: Vec::new(),
            pending: VecDeque::new(),
            next_opaque: 0,
        }
    }

    /// The opaque of the next request on this socket.
    fn take_opaque(&mut self) -> u32 {
        next_opaque(&mut self.next_opaque)
    }
}

/// Returns `counter` and advances it (wrapping: only the order matters).
fn next_opaque(counter: &mut u32) -> u32 {
    let opaque = *counter;
    *counter = counter.wrapping_add(1);
    opaque
}

/// The connection to the origin that belongs to one edge connection.
type OriginLink = Link<OriginPending>;

/// An edge miss waiting out the origin delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayedFetch {
    pub conn: usize,
    pub key_id: u64,
    pub intended: Instant,
}

/// Items released in order of their due instant (first in, first out among equal
/// instants). One per worker thread: its length is bounded by the requests in flight
/// (connections x pipeline), since every entry stands for an outstanding get.
#[derive(Debug)]
pub struct DelayQueue<T> {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    items: std::collections::HashMap<u64, T>,
    next_seq: u64,
}

impl<T> Default for DelayQueue<T> {
    fn default() -> Self {
        DelayQueue {
            heap: BinaryHeap::new(),
            items: std::collections::HashMap::new(),
            next_seq: 0,
        }
    }
}

impl<T> DelayQueue<T> {
    pub fn push(&mut self, due: Instant, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse((due, seq)));
        self.items.insert(seq, item);
    }

    /// The earliest due instant, if any.
    pub fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((due, _))| *due)
    }

    /// Removes and returns the earliest item due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<T> {
        match self.heap.peek() {
            Some(Reverse((due, _))) if *due <= now => {}
            _ => return None,
        }
        let Reverse((_, seq)) = self.heap.pop()?;
        self.items.remove(&seq)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// One logical connection: a socket to each server (indexed as `RunConfig::servers`),
/// each request going to its key's server.
struct Conn {
    links: Vec<Link<Pending>>,
    keys: KeyGenerator,
    rng: Rng,
    /// Open loop: when the next request is due.
    next_due: Instant,
    alive: bool,
    /// Look-aside mode only.
    origin: Option<OriginLink>,
    /// Edge misses of this connection waiting in the thread's delay queue.
    delayed: usize,
}

impl Conn {
    /// Requests of this connection not yet answered: edge requests (fills included),
    /// edge misses waiting out the origin delay, and origin requests. The closed loop
    /// issues the next operation only when this is zero.
    fn outstanding(&self) -> usize {
        self.links.iter().map(|l| l.pending.len()).sum::<usize>()
            + self.delayed
            + self.origin.as_ref().map_or(0, |o| o.pending.len())
    }
}

/// Shared between the workers and the progress/stats thread.
#[derive(Debug, Default)]
pub struct Live {
    pub completed_ops: AtomicU64,
    /// Load phase: the next key to set.
    pub next_load_key: AtomicU64,
    /// Set by the operator (or a fatal error) to end the phase early.
    pub stop: AtomicBool,
}

/// Opens `count` connections to the server (blocking connect, then non-blocking).
fn connect_one(server: SocketAddr) -> anyhow::Result<TcpStream> {
    let stream = StdTcpStream::connect_timeout(&server, CONNECT_TIMEOUT)
        .with_context(|| format!("connecting to {server}"))?;
    stream.set_nodelay(true).context("TCP_NODELAY")?;
    stream.set_nonblocking(true).context("non-blocking mode")?;
    Ok(TcpStream::from_std(stream))
}

fn connect_all(config: &RunConfig, first_index: usize, count: usize) -> anyhow::Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(count);
    for i in 0..count {
        let index = (first_index + i) as u64;
        let origin = match &config.origin {
            Some(origin) => Some(Link::new(connect_one(origin.server)?)),
            None => None,
        };
        let links = config
            .servers
            .iter()
            .map(|&server| connect_one(server).map(Link::new))
            .collect::<anyhow::Result<Vec<_>>>()?;
        conns.push(Conn {
            links,
            keys: KeyGenerator::new(config.distribution.clone()),
            // Distinct, reproducible streams per connection.
            rng: Rng::new(config.seed, CONNECTION_STREAM_FIRST + index),
            next_due: Instant::now(),
            alive: true,
            origin,
            delayed: 0,
        });
    }
    Ok(conns)
}

/// Runs one phase on `threads` threads, returning the merged measurements and the
/// phase's wall time. `on_tick` is called about once a second on the calling thread with
/// the elapsed seconds (for progress and server stats polling).
pub fn run_phase(
    config: &RunConfig,
    phase: Phase,
    live: &Live,
    mut on_tick: impl FnMut(usize, &Live),
) -> anyhow::Result<(Measurements, Duration)> {
    if config.connections == 0 || config.threads == 0 {
        bail!("need at least one connection and one thread");
    }
    if config.servers.is_empty() || config.servers.len() > SERVERS_MAX {
        bail!("need between 1 and {SERVERS_MAX} servers");
    }
    let ring = Ketama::for_addrs(&config.servers);
    let ring = &ring;
    let threads = config.threads.min(config.connections);
    let mut thread_conns = Vec::with_capacity(threads);
    let mut first = 0;
    for t in 0..threads {
        let count = config.connections / threads + usize::from(t < config.connections % threads);
        thread_conns.push((first, connect_all(config, first, count)?));
        first += count;
    }
    live.completed_ops.store(0, Ordering::Relaxed);
    live.next_load_key.store(0, Ordering::Relaxed);
    let start = Instant::now();
    let length = match phase {
        Phase::Load => config.load_timeout,
        Phase::Run => config.duration,
    };
    let end = start + length;
    let series_max = length.as_secs() as usize + 1 + SERIES_SLACK_S;
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = thread_conns
            .into_iter()
            .map(|(first, conns)| {
                scope.spawn(move || {
                    worker(
                        config, ring, phase, live, conns, first, start, end, series_max,
                    )
                })
            })
            .collect();
        let mut next_tick = 1;
        while !handles.iter().all(|h| h.is_finished()) {
            let tick_at = start + Duration::from_secs(next_tick as u64);
            let now = Instant::now();
            if now >= tick_at {
                on_tick(next_tick, live);
                next_tick += 1;
            } else {
                std::thread::sleep((tick_at - now).min(Duration::from_millis(20)));
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a worker thread panicked"))?
            })
            .collect::<anyhow::Result<Vec<Measurements>>>()
    })?;
    let elapsed = start.elapsed();
    let mut merged = Measurements::new()?;
    for result in &results {
        merged.merge(result)?;
    }
    Ok((merged, elapsed))
}

#[allow(clippy::too_many_arguments)]
fn worker(
    config: &RunConfig,
    ring: &Ketama,
    phase: Phase,
    live: &Live,
    mut conns: Vec<Conn>,
    first_index: usize,
    start: Instant,
    end: Instant,
    series_max: usize,
) -> anyhow::Result<Measurements> {
    let mut poll = Poll::new().context("creating a poll")?;
    let mut events = Events::with_capacity(1024);
    // Wakes the loop at open-loop send times and origin-delay ends with microsecond
    // precision (a poll timeout alone is rounded up to whole milliseconds).
    let mut timer = PreciseTimer::new().context("creating a timerfd")?;
    poll.registry()
        .register(&mut timer, TIMER_TOKEN, Interest::READABLE)
        .context("registering the timer")?;
    let mut measurements = Measurements::new()?;
    let interval = match (phase, config.rate_per_s) {
        (Phase::Run, Some(rate)) => Some(
            Duration::try_from_secs_f64(config.connections as f64 / rate)
                .ok()
                .filter(|i| !i.is_zero())
                .with_context(|| format!("--rate {rate} gives no usable send interval"))?,
        ),
        _ => None,
    };
    // Connection i's socket to server s is token i * stride + s, its origin socket
    // i * stride + servers.
    let stride = config.servers.len() + 1;
    for (i, conn) in conns.iter_mut().enumerate() {
        for (s, link) in conn.links.iter_mut().enumerate() {
            poll.registry()
                .register(
                    &mut link.stream,
                    Token(i * stride + s),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .context("registering a connection")?;
        }
        if let Some(origin) = conn.origin.as_mut() {
            poll.registry()
                .register(
                    &mut origin.stream,
                    Token(i * stride + stride - 1),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .context("registering an origin connection")?;
        }
        if let Some(interval) = interval {
            // Spread the connections' schedules evenly over one interval.
            let global = (first_index + i) as f64 / config.connections as f64;
            conn.next_due = start + interval.mul_f64(global);
        }
    }
    let keys = config.distribution.keys();
    let mut key_buf = Vec::new();
    let mut value_buf = Vec::new();
    let mut read_buf = vec![0u8; READ_CHUNK_BYTES];
    let mut delays: DelayQueue<DelayedFetch> = DelayQueue::default();
    let series_ctx = SeriesCtx { start, series_max };
    // The last instant at which due requests were issued: sends due later than this
    // were not held back by a full pipeline, only cut off by the end of the phase.
    let mut last_issue_check = start;
    loop {
        let now = Instant::now();
        let issuing = now < end && !live.stop.load(Ordering::Relaxed);
        if issuing {
            last_issue_check = now;
        }
        // Edge misses whose origin delay is over go to the origin now, whether or not the
        // phase is still issuing (they are outstanding requests being drained).
        while let Some(fetch) = delays.pop_due(now) {
            let Some(conn) = conns.get_mut(fetch.conn) else {
                continue;
            };
            conn.delayed = conn.delayed.saturating_sub(1);
            if !conn.alive {
                continue;
            }
            if let Some(origin) = conn.origin.as_mut() {
                key_buf.clear();
                write_key(&config.key_prefix, fetch.key_id, &mut key_buf);
                let opaque = origin.take_opaque();
                encode_get(config.protocol, &key_buf, opaque, &mut origin.out);
                origin.pending.push_back(OriginPending::Fetch {
                    opaque,
                    key_id: fetch.key_id,
                    intended: fetch.intended,
                });
            }
            flush(conn, &mut measurements);
        }
        let mut load_done = false;
        if issuing {
            for conn in conns.iter_mut().filter(|c| c.alive) {
                let mut issued = false;
                match interval {
                    None => {
                        if conn.outstanding() == 0 {
                            let request = match phase {
                                Phase::Load => {
                                    let key = live.next_load_key.fetch_add(1, Ordering::Relaxed);
                                    if key >= keys {
                                        load_done = true;
                                        None
                                    } else {
                                        Some((OpKind::Set, key))
                                    }
                                }
                                Phase::Run => {
                                    let op = next_op(config.get_ratio, &mut conn.rng);
                                    Some((op, conn.keys.next_key(&mut conn.rng)))
                                }
                            };
                            if let Some((op, key_id)) = request {
                                issue(
                                    config,
                                    ring,
                                    conn,
                                    op,
                                    key_id,
                                    now,
                                    &mut key_buf,
                                    &mut value_buf,
                                );
                                issued = true;
                            }
                        }
                    }
                    Some(interval) => {
                        while conn.next_due <= now && conn.outstanding() < config.pipeline_max {
                            let op = next_op(config.get_ratio, &mut conn.rng);
                            let key_id = conn.keys.next_key(&mut conn.rng);
                            let due = conn.next_due;
                            issue(
                                config,
                                ring,
                                conn,
                                op,
                                key_id,
                                due,
                                &mut key_buf,
                                &mut value_buf,
                            );
                            conn.next_due += interval;
                            issued = true;
                        }
                    }
                }
                if issued {
                    flush(conn, &mut measurements);
                }
            }
        }
        let outstanding: usize = conns
            .iter()
            .filter(|c| c.alive)
            .map(Conn::outstanding)
            .sum();
        let live_conns = conns.iter().filter(|c| c.alive).count();
        if live_conns == 0 || ((!issuing || load_done) && outstanding == 0) {
            break;
        }
        if !issuing && now >= end + DRAIN_TIMEOUT {
            measurements.unanswered += outstanding as u64;
            break;
        }
        let mut wait = POLL_MAX_WAIT;
        if let (Some(_), true) = (interval, issuing) {
            if let Some(due) = conns.iter().filter(|c| c.alive).map(|c| c.next_due).min() {
                wait = wait.min(due.saturating_duration_since(now));
            }
        }
        if let Some(due) = delays.next_due() {
            wait = wait.min(due.saturating_duration_since(now));
        }
        let poll_timeout = if !wait.is_zero() && wait < POLL_MAX_WAIT {
            timer.arm_after(wait).context("arming the timer")?;
            POLL_MAX_WAIT
        } else {
            wait
        };
        match poll.poll(&mut events, Some(poll_timeout)) {
            Ok(()) => {}
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(error) => return Err(error).context("polling"),
        }
        for event in events.iter() {
            if event.token() == TIMER_TOKEN {
                timer.clear();
                continue;
            }
            let index = event.token().0 / stride;
            let link = event.token().0 % stride;
            let is_origin = link == stride - 1;
            let Some(conn) = conns.get_mut(index) else {
                continue;
            };
            if !conn.alive {
                continue;
            }
            if event.is_writable() {
                flush(conn, &mut measurements);
            }
            if event.is_readable() || event.is_read_closed() || event.is_error() {
                let mut ctx = Ctx {
                    config,
                    measurements: &mut measurements,
                    series: series_ctx,
                    live,
                    delays: &mut delays,
                    index,
                    ring,
                };
                if is_origin {
                    receive_origin(&mut ctx, conn, &mut read_buf);
                } else {
                    receive(&mut ctx, conn, link, &mut read_buf);
                }
                // Fills queued while consuming replies go out now.
                if conn.alive {
                    flush(conn, &mut measurements);
                }
            }
        }
    }
    if let Some(interval) = interval {
        // Requests that were due before the end but never sent (pipeline full).
        for conn in conns.iter().filter(|c| c.alive) {
            if conn.next_due <= last_issue_check {
                let behind = last_issue_check.duration_since(conn.next_due).as_secs_f64()
                    / interval.as_secs_f64();
                measurements.open_loop_unsent += behind as u64 + 1;
            }
        }
    }
    Ok(measurements)
}

#[allow(clippy::too_many_arguments)]
fn issue(
    config: &RunConfig,
    ring: &Ketama,
    conn: &mut Conn,
    op: OpKind,
    key_id: u64,
    intended: Instant,
    key_buf: &mut Vec<u8>,
    value_buf: &mut Vec<u8>,
) {
    key_buf.clear();
    write_key(&config.key_prefix, key_id, key_buf);
    let Some(link) = conn.links.get_mut(ring.server_for(key_buf)) else {
        return;
    };
    let opaque = link.take_opaque();
    match op {
        OpKind::Get => encode_get(config.protocol, key_buf, opaque, &mut link.out),
        OpKind::Set => {
            value_buf.clear();
            let size = config.value_size.next_size(&mut conn.rng);
            write_value(key_id, size, value_buf);
            encode_set(
                config.protocol,
                key_buf,
                value_buf,
                config.ttl_s,
                opaque,
                &mut link.out,
            );
        }
    }
    link.pending.push_back(Pending {
        opaque,
        op,
        key_id,
        intended,
        fill: false,
    });
}

fn fail(conn: &mut Conn, measurements: &mut Measurements, error: String) {
    conn.alive = false;
    measurements.connection_failures += 1;
    measurements.unanswered += conn.outstanding() as u64;
    for link in &mut conn.links {
        link.pending.clear();
    }
    if let Some(origin) = conn.origin.as_mut() {
        origin.pending.clear();
    }
    // Its entries in the delay queue are dropped when they come due.
    if measurements.first_error.is_none() {
        measurements.first_error = Some(error);
    }
}

/// Writes as much of the servers' and the origin's output as the sockets take (a socket
/// with nothing to send costs no system call).
fn flush(conn: &mut Conn, measurements: &mut Measurements) {
    let mut result = Ok(());
    for link in &mut conn.links {
        result = write_out(&mut link.stream, &mut link.out, &mut link.out_pos);
        if result.is_err() {
            break;
        }
    }
    if let (Ok(()), Some(origin)) = (&result, conn.origin.as_mut()) {
        result = write_out(&mut origin.stream, &mut origin.out, &mut origin.out_pos)
            .map_err(|error| format!("origin: {error}"));
    }
    if let Err(error) = result {
        fail(conn, measurements, error);
    }
}

fn write_out(stream: &mut TcpStream, out: &mut Vec<u8>, out_pos: &mut usize) -> Result<(), String> {
    while *out_pos < out.len() {
        match stream.write(&out[*out_pos..]) {
            Ok(0) => return Err("connection closed while writing".to_owned()),
            Ok(n) => *out_pos += n,
            Err(error) if error.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(format!("write: {error}")),
        }
    }
    out.clear();
    *out_pos = 0;
    Ok(())
}

/// Where in the phase's time series completions land.
#[derive(Clone, Copy)]
struct SeriesCtx {
    start: Instant,
    series_max: usize,
}

/// What reply handling needs besides the connection.
struct Ctx<'a> {
    config: &'a RunConfig,
    measurements: &'a mut Measurements,
    series: SeriesCtx,
    live: &'a Live,
    delays: &'a mut DelayQueue<DelayedFetch>,
    /// The connection's index in its thread.
    index: usize,
    /// Where look-aside fills of the edge go.
    ring: &'a Ketama,
}

fn receive(ctx: &mut Ctx<'_>, conn: &mut Conn, link: usize, read_buf: &mut [u8]) {
    loop {
        let Some(socket) = conn.links.get_mut(link) else {
            return;
        };
        match socket.stream.read(read_buf) {
            Ok(0) => {
                if conn.outstanding() > 0 {
                    fail(
                        conn,
                        ctx.measurements,
                        "server closed the connection".to_owned(),
                    );
                } else {
                    conn.alive = false;
                }
                return;
            }
            Ok(n) => {
                socket.input.extend_from_slice(&read_buf[..n]);
                if let Err(error) = consume(ctx, conn, link) {
                    fail(conn, ctx.measurements, format!("{error:#}"));
                    return;
                }
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => return,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => {
                fail(conn, ctx.measurements, format!("read: {error}"));
                return;
            }
        }
    }
}

/// Counts an error reply and keeps the first one for the report.
fn note_error(ctx: &mut Ctx<'_>, second: usize, line: &[u8]) -> anyhow::Result<()> {
    if ctx.measurements.first_error.is_none() {
        ctx.measurements.first_error = Some(String::from_utf8_lossy(line).into_owned());
    }
    ctx.measurements
        .note(second, ctx.series.series_max, |c| c.error_replies += 1)
}

/// Nanoseconds from `intended` to `now`, and the series second `now` falls in.
fn elapsed_since(ctx: &Ctx<'_>, intended: Instant, now: Instant) -> (u64, usize) {
    let second = now.saturating_duration_since(ctx.series.start).as_secs() as usize;
    let latency_ns =
        u64::try_from(now.saturating_duration_since(intended).as_nanos()).unwrap_or(u64::MAX);
    (latency_ns, second)
}

/// Parses every complete reply in the input of the connection's socket `link` and
/// records it.
fn consume(ctx: &mut Ctx<'_>, conn: &mut Conn, link: usize) -> anyhow::Result<()> {
    let config = ctx.config;
    let series_max = ctx.series.series_max;
    let Conn { links, delayed, .. } = conn;
    let Some(socket) = links.get_mut(link) else {
        return Ok(());
    };
    let mut position = 0;
    while let Some(&front) = socket.pending.front() {
        let Some((reply, used)) = parse_reply(
            config.protocol,
            front.op,
            front.opaque,
            &socket.input[position..],
        )?
        else {
            break;
        };
        position += used;
        socket.pending.pop_front();
        let now = Instant::now();
        let (latency_ns, second) = elapsed_since(ctx, front.intended, now);
        if front.fill {
            // Fills are the look-aside's own traffic, not workload operations.
            match reply {
                Reply::Stored => ctx.measurements.lookaside.edge_fills += 1,
                Reply::Error(line) => {
                    ctx.measurements.lookaside.fill_failures += 1;
                    note_error(ctx, second, &line)?;
                }
                _ => ctx.measurements.lookaside.fill_failures += 1,
            }
            continue;
        }
        let edge_miss_to_origin =
            config.origin.is_some() && front.op == OpKind::Get && reply == Reply::Miss;
        if edge_miss_to_origin {
            // Completed (and timed) when the origin answers.
            ctx.measurements
                .note(second, series_max, |c| c.misses += 1)?;
            if let Some(origin) = &config.origin {
                ctx.delays.push(
                    now + origin.delay,
                    DelayedFetch {
                        conn: ctx.index,
                        key_id: front.key_id,
                        intended: front.intended,
                    },
                );
                *delayed += 1;
            }
            continue;
        }
        ctx.measurements
            .record(front.op, latency_ns, second, series_max)?;
        match reply {
            Reply::Hit(value) => {
                let good = !config.verify || check_value(front.key_id, value);
                if config.origin.is_some() {
                    ctx.measurements
                        .edge_hit_latency
                        .saturating_record(latency_ns.max(1));
                }
                ctx.measurements.note(second, series_max, |c| {
                    c.hits += 1;
                    if !good {
                        c.verify_failures += 1;
                    }
                })?;
            }
            Reply::Miss => ctx
                .measurements
                .note(second, series_max, |c| c.misses += 1)?,
            Reply::Stored => {}
            Reply::NotStored => ctx
                .measurements
                .note(second, series_max, |c| c.not_stored += 1)?,
            Reply::Error(line) => note_error(ctx, second, &line)?,
        }
        ctx.live.completed_ops.fetch_add(1, Ordering::Relaxed);
    }
    socket.input.drain(..position);
    if socket.input.len() > INPUT_MAX_BYTES {
        bail!("more than {INPUT_MAX_BYTES} bytes of unparsed input");
    }
    if socket.pending.is_empty() && !socket.input.is_empty() {
        bail!(
            "{} bytes received with no request outstanding",
            socket.input.len()
        );
    }
    Ok(())
}

fn receive_origin(ctx: &mut Ctx<'_>, conn: &mut Conn, read_buf: &mut [u8]) {
    loop {
        let Some(origin) = conn.origin.as_mut() else {
            return;
        };
        match origin.stream.read(read_buf) {
            Ok(0) => {
                if conn.outstanding() > 0 {
                    fail(
                        conn,
                        ctx.measurements,
                        "origin closed the connection".to_owned(),
                    );
                } else {
                    conn.alive = false;
                }
                return;
            }
            Ok(n) => {
                origin.input.extend_from_slice(&read_buf[..n]);
                if let Err(error) = consume_origin(ctx, conn) {
                    fail(conn, ctx.measurements, format!("origin: {error:#}"));
                    return;
                }
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => return,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => {
                fail(conn, ctx.measurements, format!("origin read: {error}"));
                return;
            }
        }
    }
}

/// Parses the origin's replies: completes the fetched gets and queues the fills.
fn consume_origin(ctx: &mut Ctx<'_>, conn: &mut Conn) -> anyhow::Result<()> {
    let config = ctx.config;
    let series_max = ctx.series.series_max;
    let Conn {
        origin, links, rng, ..
    } = conn;
    let Some(origin) = origin.as_mut() else {
        return Ok(());
    };
    let mut key_buf = Vec::new();
    let mut generated = Vec::new();
    let mut position = 0;
    while let Some(&front) = origin.pending.front() {
        let (op, opaque) = match front {
            OriginPending::Fetch { opaque, .. } => (OpKind::Get, opaque),
            OriginPending::Fill { opaque } => (OpKind::Set, opaque),
        };
        let Some((reply, used)) =
            parse_reply(config.protocol, op, opaque, &origin.input[position..])?
        else {
            break;
        };
        position += used;
        origin.pending.pop_front();
        let now = Instant::now();
        let OriginPending::Fetch {
            key_id, intended, ..
        } = front
        else {
            match reply {
                Reply::Stored => ctx.measurements.lookaside.origin_fills += 1,
                Reply::Error(line) => {
                    ctx.measurements.lookaside.fill_failures += 1;
                    let (_, second) = elapsed_since(ctx, now, now);
                    note_error(ctx, second, &line)?;
                }
                _ => ctx.measurements.lookaside.fill_failures += 1,
            }
            continue;
        };
        let (latency_ns, second) = elapsed_since(ctx, intended, now);
        ctx.measurements
            .record(OpKind::Get, latency_ns, second, series_max)?;
        ctx.measurements
            .origin_served_latency
            .saturating_record(latency_ns.max(1));
        ctx.measurements.lookaside.origin_fetches += 1;
        key_buf.clear();
        write_key(&config.key_prefix, key_id, &mut key_buf);
        let fill_value: &[u8] = match &reply {
            Reply::Hit(value) => {
                ctx.measurements.lookaside.origin_hits += 1;
                if config.verify && !check_value(key_id, value) {
                    ctx.measurements
                        .note(second, series_max, |c| c.verify_failures += 1)?;
                }
                value
            }
            Reply::Miss => {
                // The "database" has no row yet: make the value it would hold and store
                // it at the origin as well as at the edge.
                ctx.measurements.lookaside.origin_misses += 1;
                generated.clear();
                let size = config.value_size.next_size(rng);
                write_value(key_id, size, &mut generated);
                let opaque = next_opaque(&mut origin.next_opaque);
                encode_set(
                    config.protocol,
                    &key_buf,
                    &generated,
                    config.ttl_s,
                    opaque,
                    &mut origin.out,
                );
                origin.pending.push_back(OriginPending::Fill { opaque });
                &generated
            }
            Reply::Error(line) => {
                note_error(ctx, second, line)?;
                &[]
            }
            Reply::Stored | Reply::NotStored => {
                bail!("origin answered a get with a store reply")
            }
        };
        if !matches!(reply, Reply::Error(_)) {
            // The fill goes to the key's edge server.
            if let Some(edge) = links.get_mut(ctx.ring.server_for(&key_buf)) {
                let opaque = edge.take_opaque();
                encode_set(
                    config.protocol,
                    &key_buf,
                    fill_value,
                    config.ttl_s,
                    opaque,
                    &mut edge.out,
                );
                edge.pending.push_back(Pending {
                    opaque,
                    op: OpKind::Set,
                    key_id,
                    intended: now,
                    fill: true,
                });
            }
        }
        ctx.live.completed_ops.fetch_add(1, Ordering::Relaxed);
    }
    origin.input.drain(..position);
    if origin.input.len() > INPUT_MAX_BYTES {
        bail!("more than {INPUT_MAX_BYTES} bytes of unparsed input");
    }
    if origin.pending.is_empty() && !origin.input.is_empty() {
        bail!(
            "{} bytes received with no request outstanding",
            origin.input.len()
        );
    }
    Ok(())
}

/// Polls the server's `stats` on its own blocking connection (bounded by timeouts).
pub struct StatsPoller {
    stream: StdTcpStream,
    buffer: Vec<u8>,
}

/// Bounds a `stats` reply; the general group is a few KiB.
const STATS_MAX_BYTES: usize = 1024 * 1024;

impl StatsPoller {
    pub fn connect(server: SocketAddr) -> anyhow::Result<StatsPoller> {
        let stream = StdTcpStream::connect_timeout(&server, CONNECT_TIMEOUT)
            .context("connecting the stats poller")?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.set_write_timeout(Some(Duration::from_secs(1)))?;
        Ok(StatsPoller {
            stream,
            buffer: Vec::new(),
        })
    }

    /// One `stats` round trip: the fields of [`SERVER_FIELDS`] the server reports.
    pub fn sample(&mut self) -> anyhow::Result<ServerSample> {
        self.stream
            .write_all(b"stats\r\n")
            .context("sending stats")?;
        self.buffer.clear();
        let mut chunk = [0u8; 16 * 1024];
        while !self.buffer.ends_with(b"END\r\n") {
            let n = self.stream.read(&mut chunk).context("reading stats")?;
            if n == 0 {
                bail!("server closed the stats connection");
            }
            self.buffer.extend_from_slice(&chunk[..n]);
            if self.buffer.len() > STATS_MAX_BYTES {
                bail!("stats reply larger than {STATS_MAX_BYTES} bytes");
            }
        }
        Ok(parse_stats(&self.buffer))
    }
}

/// Picks the selected numeric `STAT name value` lines out of a stats reply.
pub fn parse_stats(reply: &[u8]) -> ServerSample {
    let text = String::from_utf8_lossy(reply);
    let mut sample = ServerSample::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        if fields.next() != Some("STAT") {
            continue;
        }
        let (Some(name), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        if SERVER_FIELDS.contains(&name) {
            if let Ok(value) = value.parse::<u64>() {
                sample.insert(name.to_owned(), value);
            }
        }
    }
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_queue_releases_in_due_order_and_only_when_due() {
        let base = Instant::now();
        let at = |ms: u64| base + Duration::from_millis(ms);
        let mut queue = DelayQueue::default();
        assert!(queue.is_empty());
        assert_eq!(queue.pop_due(at(1_000)), None);
        queue.push(at(30), "c");
        queue.push(at(10), "a");
        queue.push(at(20), "b1");
        queue.push(at(20), "b2");
        queue.push(at(40), "d");
        assert_eq!(queue.len(), 5);
        assert_eq!(queue.next_due(), Some(at(10)));
        // Nothing is released before it is due.
        assert_eq!(queue.pop_due(at(9)), None);
        assert_eq!(queue.pop_due(at(10)), Some("a"));
        // Equal due instants come out in insertion order.
        assert_eq!(queue.pop_due(at(25)), Some("b1"));
        assert_eq!(queue.pop_due(at(25)), Some("b2"));
        assert_eq!(queue.pop_due(at(25)), None);
        assert_eq!(queue.next_due(), Some(at(30)));
        // A late poll releases everything due, earliest first.
        assert_eq!(queue.pop_due(at(100)), Some("c"));
        assert_eq!(queue.pop_due(at(100)), Some("d"));
        assert_eq!(queue.pop_due(at(100)), None);
        assert!(queue.is_empty());
        assert_eq!(queue.next_due(), None);
    }

    #[test]
    fn stats_fields_are_selected_when_present() {
        let reply = b"STAT pid 12\r\nSTAT curr_items 5\r\nSTAT tier_dram_get_hits 7\r\nSTAT version 1.6\r\nEND\r\n";
        let sample = parse_stats(reply);
        assert_eq!(sample.len(), 2);
        assert_eq!(sample["curr_items"], 5);
        assert_eq!(sample["tier_dram_get_hits"], 7);
    }
}
