//! The fog layer: an edge fogcached in front of one or more upstream memcached-protocol
//! servers (`--upstream host:port[,host:port...]`, keys placed by ketama).
//!
//! - **Read-through.** A `get`/`gets`/`gat`/`mg`/binary get that misses at the edge is
//!   fetched from the key's upstream, stored at the edge with the upstream's flags, CAS
//!   and remaining TTL (capped by `--upstream-ttl-max`), and answered; the client sees one
//!   round trip to the edge.
//! - **Writes** go to the upstream first; the edge copy is updated (`--upstream-writes
//!   through`) or removed (`invalidate`) only once the upstream answered — by the key's
//!   upstream loop, in the order the upstream applied the key's writes, before the
//!   client gets the upstream's answer — so the edge's copy of a key ends as the
//!   upstream's last value of it, or absent, whatever the writes' interleaving and
//!   failures (`io/write_order.rs`: a key's writes go out on one connection at a time, in order).
//!
//! How it runs. The upstream sockets belong to `--upstream-threads` upstream loops (one
//! per two worker threads by default; `io/`: a mio loop each, with its own bounded,
//! pipelined pool of connections per upstream server, single flight, per-request
//! timeouts). Keys are split among the loops by a hash of the key, so every request for
//! one key — the reads that share a single flight and the writes, which are kept in
//! order and spoil the reads they overtake — meets in one loop, and the edge stores
//! (fills and written values) spread over the loops as the workers' requests spread
//! over the workers. The circuit breaker of each upstream server
//! is shared by the loops ([`Breaker`]). A worker never waits for a loop: a dispatcher
//! that needs the upstream returns [`crate::session::Step::Upstream`]; the connection
//! keeps the request at the front of its input and parks ([`Parking`]); the worker hands
//! the request to the key's loop through a bounded channel ([`WorkerPort::submit`]); the
//! loop answers through the worker's delivery channel and wakes the worker's
//! `mio::Waker`; the worker gives the reply to the connection, which runs the same
//! request again with the reply in `Session::upstream_reply` and goes on with the
//! requests after it. Replies stay in request order because a parked connection parses
//! nothing further.

mod breaker;
pub mod counters;
mod io;

use std::hash::Hasher;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use engine::{Engine, ItemView, ReadOptions, ReadOutcome, TierId};
use mio::Waker;
use parking_lot::Mutex;
pub use protocol::client::StoreKind;

pub use breaker::Breaker;
pub use counters::UpstreamStats;

/// What a write does to the edge's copy once the upstream answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Store the written value at the edge too (when the upstream reports the new CAS;
    /// otherwise, and for appends and counters, remove the edge copy).
    Through,
    /// Only remove the edge copy; the next read fetches the upstream's value.
    Invalidate,
}

impl WriteMode {
    pub fn name(self) -> &'static str {
        match self {
            WriteMode::Through => "through",
            WriteMode::Invalidate => "invalidate",
        }
    }
}

/// The `--upstream*` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// `host:port` as given (ketama hashes these names, as twemproxy does).
    pub servers: Vec<String>,
    pub writes: WriteMode,
    /// Longest time an edge copy lives, in seconds; 0 = as long as the upstream's TTL.
    pub ttl_max_s: u32,
    /// Time an upstream request may take before it counts as failed.
    pub timeout_ms: u32,
    /// Connections per upstream server of each upstream loop (each pipelined).
    pub conns_per_server: usize,
    /// Upstream loops (threads); keys are split among them by hash.
    pub threads: usize,
    /// Consecutive failures of one upstream that open its circuit breaker.
    pub breaker_failures: u32,
    /// How long an open breaker fails requests at once before one is tried again.
    pub retry_ms: u32,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            servers: Vec::new(),
            writes: WriteMode::Through,
            ttl_max_s: TTL_MAX_DEFAULT_S,
            timeout_ms: TIMEOUT_DEFAULT_MS,
            conns_per_server: CONNS_PER_SERVER_DEFAULT,
            threads: 1,
            breaker_failures: BREAKER_FAILURES_DEFAULT,
            retry_ms: RETRY_DEFAULT_MS,
        }
    }
}

pub const TTL_MAX_DEFAULT_S: u32 = 300;
pub const TIMEOUT_DEFAULT_MS: u32 = 200;
pub const CONNS_PER_SERVER_DEFAULT: usize = 2;
pub const BREAKER_FAILURES_DEFAULT: u32 = 5;
pub const RETRY_DEFAULT_MS: u32 = 1000;
/// Most upstream loops (`--upstream-threads`).
pub const THREADS_MAX: usize = 64;
/// The TTL of an edge copy fetched from a server without meta commands (its `gets`
/// does not say the remaining TTL) when `--upstream-ttl-max` is 0.
pub const TEXT_UPSTREAM_TTL_S: u32 = 60;
/// Requests waiting to be taken by one upstream loop; a full queue answers at once (a
/// read as a miss, a write with an error).
pub const SUBMIT_QUEUE_CAPACITY: usize = 4096;

/// One request for the upstream, owned so it can cross threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamRequest {
    pub key: Vec<u8>,
    pub op: UpstreamOp,
    /// More keys to read with this one (a multi-key `get` asks for all its missing keys
    /// at once, so it waits one upstream round trip, not one per key); plain reads only.
    pub more_keys: Vec<Vec<u8>>,
}

/// Keys of a multi-key `get` fetched together at most.
pub const BATCH_KEYS_MAX: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamOp {
    /// A read (single flight with concurrent reads of the key); with `touch_exptime`,
    /// a `gat` (sent on its own).
    Get {
        touch_exptime: Option<i64>,
    },
    Store {
        kind: StoreKind,
        client_flags: u32,
        exptime: i64,
        compare_cas: Option<u64>,
        value: Vec<u8>,
    },
    Delete {
        compare_cas: Option<u64>,
    },
    Arith {
        increment: bool,
        delta: u64,
        create: Option<(u64, i64)>,
    },
    Touch {
        exptime: i64,
    },
}

impl UpstreamRequest {
    pub fn new(key: &[u8], op: UpstreamOp) -> UpstreamRequest {
        UpstreamRequest {
            key: key.to_vec(),
            op,
            more_keys: Vec::new(),
        }
    }

    pub fn get(key: &[u8], touch_exptime: Option<i64>) -> UpstreamRequest {
        UpstreamRequest::new(key, UpstreamOp::Get { touch_exptime })
    }

    /// A read of `first`, which missed, and of the keys of `rest` that miss at the edge
    /// too (at most [`BATCH_KEYS_MAX`] in all). Each of those is counted as the get miss
    /// it is, here; the dispatcher answers it from the reply without reading it again.
    pub fn get_batch<'k>(
        engine: &Engine,
        first: &[u8],
        rest: impl Iterator<Item = &'k [u8]>,
    ) -> UpstreamRequest {
        let peek = ReadOptions {
            no_bump: true,
            no_stats: true,
            ..ReadOptions::default()
        };
        let mut request = UpstreamRequest::get(first, None);
        for key in rest {
            if request.more_keys.len() + 1 >= BATCH_KEYS_MAX {
                break;
            }
            if matches!(engine.read(key, &peek, |_| ()), ReadOutcome::Hit(())) {
                continue;
            }
            // A plain read counts the miss (or, if a fill landed meanwhile, the hit).
            let missed = matches!(
                engine.read(key, &ReadOptions::default(), |_| ()),
                ReadOutcome::Miss { .. }
            );
            let repeated = key == first || request.more_keys.iter().any(|k| k == key);
            if missed && !repeated {
                request.more_keys.push(key.to_vec());
            }
        }
        request
    }

    /// Every key the request reads or writes.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(&self.key[..]).chain(self.more_keys.iter().map(Vec::as_slice))
    }

    pub fn is_read(&self) -> bool {
        matches!(self.op, UpstreamOp::Get { .. })
    }

    fn wire(&self) -> protocol::client::Request<'_> {
        use protocol::client::Request as Wire;
        let key = &self.key[..];
        match &self.op {
            UpstreamOp::Get { touch_exptime } => Wire::Get {
                key,
                touch_exptime: *touch_exptime,
            },
            UpstreamOp::Store {
                kind,
                client_flags,
                exptime,
                compare_cas,
                value,
            } => Wire::Store {
                kind: *kind,
                key,
                client_flags: *client_flags,
                exptime: *exptime,
                compare_cas: *compare_cas,
                value,
            },
            UpstreamOp::Delete { compare_cas } => Wire::Delete {
                key,
                compare_cas: *compare_cas,
            },
            UpstreamOp::Arith {
                increment,
                delta,
                create,
            } => Wire::Arith {
                key,
                increment: *increment,
                delta: *delta,
                create: *create,
            },
            UpstreamOp::Touch { exptime } => Wire::Touch {
                key,
                exptime: *exptime,
            },
        }
    }
}

/// An item fetched from the upstream, as the edge stored it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub client_flags: u32,
    /// The upstream's CAS (the edge copy carries it, so a `gets` at the edge returns a
    /// CAS the upstream accepts), or 0 when it did not say.
    pub cas: u64,
    /// The edge copy's TTL: the upstream's remaining TTL capped by `--upstream-ttl-max`;
    /// `None`: never expires.
    pub edge_ttl_s: Option<u32>,
}

impl Fetched {
    /// The item as a dispatcher's reply encoders take it.
    pub fn view(&self) -> ItemView<'_> {
        ItemView {
            key: &self.key,
            value: &self.value,
            client_flags: self.client_flags,
            cas: self.cas,
            ttl_remaining_s: self.edge_ttl_s,
            ttl_before_touch_s: self.edge_ttl_s,
            last_access_ago_s: 0,
            fetched_before: false,
            stale: false,
            win: false,
            win_token_already_sent: false,
            key_binary: false,
            slab_class: 0,
            total_size_bytes: self.key.len() + self.value.len(),
            tier: TierId::Dram,
        }
    }
}

/// Why an upstream request has no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No reply within `--upstream-timeout-ms`.
    Timeout,
    /// The upstream is down: refused or lost connection, or its circuit breaker is open.
    Unavailable,
    /// The upstream's reply made no sense; the connection was dropped.
    Protocol,
    /// The queue to the key's upstream loop is full.
    Busy,
    /// The request cannot be written in the upstream's protocol (a text-only upstream and
    /// a binary key or a compare-and-swap delete).
    Unsupported,
    /// The upstream's value is larger than the edge's `-I` (it was skipped).
    TooLarge,
}

impl Failure {
    /// The text protocol's error line for a write that failed so.
    pub fn server_error(self) -> &'static [u8] {
        match self {
            Failure::Timeout => b"SERVER_ERROR upstream timeout\r\n",
            Failure::Unavailable => b"SERVER_ERROR upstream unavailable\r\n",
            Failure::Protocol => b"SERVER_ERROR upstream protocol error\r\n",
            Failure::Busy => b"SERVER_ERROR upstream busy\r\n",
            Failure::Unsupported => b"SERVER_ERROR not supported by the upstream\r\n",
            Failure::TooLarge => b"SERVER_ERROR object too large for cache\r\n",
        }
    }
}

/// The upstream's answer to one request, shared by every connection a single flight
/// served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamReply {
    Hit(Fetched),
    Miss,
    /// `STORED`/`DELETED`/`TOUCHED`/`HD`, with the new CAS when the upstream said.
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
    NonNumeric,
    /// An error line of the upstream (`SERVER_ERROR ...`, `CLIENT_ERROR ...`), CRLF
    /// included, passed on to a text client.
    Error(Vec<u8>),
    Failed(Failure),
}

/// How a worker's connections are reached when their replies arrive.
struct Route {
    sender: Sender<Delivery>,
    waker: Arc<Waker>,
}

/// A reply for the connection in `slot` (if it is still connection `serial`): the
/// upstream's answer for `key`.
pub struct Delivery {
    pub slot: usize,
    pub serial: u64,
    pub key: Vec<u8>,
    pub reply: Arc<UpstreamReply>,
}

/// The replies a parked request resumes with, one per key it asked for.
#[derive(Debug, Default)]
pub struct Replies {
    entries: Vec<(Vec<u8>, Arc<UpstreamReply>)>,
}

impl Replies {
    /// The reply for `key`.
    pub fn get(&self, key: &[u8]) -> Option<&UpstreamReply> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, reply)| &**reply)
    }

    /// The reply of a one-key request.
    pub fn first(&self) -> Option<&UpstreamReply> {
        self.entries.first().map(|(_, reply)| &**reply)
    }
}

/// A request on its way to the upstream thread.
struct Submission {
    request: UpstreamRequest,
    slot: usize,
    serial: u64,
    route: Arc<Route>,
    submitted: Instant,
}

/// The way to one upstream loop.
struct LoopShard {
    submit: Sender<Submission>,
    submissions: Receiver<Submission>,
    /// The loop's waker, set once when it starts (read without a lock on the workers'
    /// path).
    waker: OnceLock<Arc<Waker>>,
    /// The loop is (about to be) blocked in its poll: a submission must wake it. While it
    /// runs, it takes new submissions before it sleeps, and a wake (a system call in the
    /// worker, another turn in the loop) would be wasted.
    sleeping: AtomicBool,
}

/// The shared fog-layer state: configuration, statistics, circuit breakers, the ways to
/// the upstream loops.
pub struct Upstream {
    pub config: UpstreamConfig,
    pub stats: UpstreamStats,
    addrs: Vec<SocketAddr>,
    /// One per upstream server, shared by the loops.
    breakers: Vec<Breaker>,
    shards: Vec<LoopShard>,
    stop: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Resolves the servers' addresses (a name that does not resolve is a start-up
    /// error); the thread starts with [`Upstream::start`].
    pub fn new(config: UpstreamConfig) -> anyhow::Result<Upstream> {
        let mut addrs = Vec::with_capacity(config.servers.len());
        for server in &config.servers {
            let addr = server
                .to_socket_addrs()
                .map_err(|e| anyhow::anyhow!("--upstream {server}: {e}"))?
                .next()
                .ok_or_else(|| anyhow::anyhow!("--upstream {server}: no address"))?;
            addrs.push(addr);
        }
        let shards = (0..config.threads.clamp(1, THREADS_MAX))
            .map(|_| {
                let (submit, submissions) = crossbeam_channel::bounded(SUBMIT_QUEUE_CAPACITY);
                LoopShard {
                    submit,
                    submissions,
                    waker: OnceLock::new(),
                    sleeping: AtomicBool::new(false),
                }
            })
            .collect();
        let stats = UpstreamStats::new(&config.servers);
        let breakers = config.servers.iter().map(|_| Breaker::default()).collect();
        Ok(Upstream {
            config,
            stats,
            addrs,
            breakers,
            shards,
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Refuses an upstream that is this server itself (listening on `local`): every miss
    /// would ask the server again, without end.
    pub fn check_not_self(&self, local: &[SocketAddr]) -> anyhow::Result<()> {
        for (name, addr) in self.config.servers.iter().zip(&self.addrs) {
            let is_self = local.iter().any(|listening| {
                listening.port() == addr.port()
                    && (listening.ip() == addr.ip()
                        || (listening.ip().is_unspecified()
                            && (addr.ip().is_loopback() || addr.ip().is_unspecified())))
            });
            if is_self {
                anyhow::bail!(
                    "--upstream {name} is this server itself: every miss would ask it again"
                );
            }
        }
        Ok(())
    }

    /// Starts the upstream loops, a thread each; fills go into `engine`.
    pub fn start(self: &Arc<Self>, engine: Arc<Engine>) -> std::io::Result<()> {
        for (index, shard) in self.shards.iter().enumerate() {
            let (poll, waker) = io::new_poll()?;
            if shard.waker.set(Arc::clone(&waker)).is_err() {
                return Err(std::io::Error::other(
                    "the upstream loops are already running",
                ));
            }
            let upstream = Arc::clone(self);
            let engine = Arc::clone(&engine);
            let thread = std::thread::Builder::new()
                .name(format!("fc-upstream-{index}"))
                .spawn(move || io::run(poll, upstream, index, engine))?;
            self.threads.lock().push(thread);
        }
        Ok(())
    }

    /// Stops the loops (in-flight requests are dropped: the workers are gone).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        for shard in &self.shards {
            if let Some(waker) = shard.waker.get() {
                let _ = waker.wake();
            }
        }
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
    }

    /// Loop `shard` is about to block in its poll: `false` (and it must not) when a
    /// submission arrived meanwhile. From then until [`Upstream::awake`] submissions wake
    /// it.
    fn may_sleep(&self, shard: usize) -> bool {
        let shard = &self.shards[shard];
        shard.sleeping.store(true, Ordering::Relaxed);
        // Pairs with the fence in `WorkerPort::submit_to`.
        std::sync::atomic::fence(Ordering::SeqCst);
        if shard.submissions.is_empty() {
            return true;
        }
        shard.sleeping.store(false, Ordering::Relaxed);
        false
    }

    /// Loop `shard` returned from its poll: it will look at its submissions again.
    fn awake(&self, shard: usize) {
        self.shards[shard].sleeping.store(false, Ordering::Relaxed);
    }

    /// The upstream loops.
    pub fn threads(&self) -> usize {
        self.shards.len()
    }

    /// The loop that owns `key`: every request for one key goes to one loop, so that its
    /// reads share a single flight and its writes see (and spoil) the reads in flight.
    fn shard_of(&self, key: &[u8]) -> usize {
        if self.shards.len() == 1 {
            return 0;
        }
        // std's SipHash with fixed keys: the same loop for a key for the process's life.
        let mut hasher = std::hash::DefaultHasher::new();
        hasher.write(key);
        (hasher.finish() % self.shards.len() as u64) as usize
    }

    /// The circuit breaker of upstream server `server`.
    pub fn breaker(&self, server: usize) -> &Breaker {
        &self.breakers[server]
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The edge TTL of a copy whose upstream TTL is `upstream_ttl_s` (-1 or `None`:
    /// never expires / not said). `Some(0)`: do not keep a copy.
    pub fn edge_ttl(&self, upstream_ttl_s: Option<i64>, text_upstream: bool) -> Option<u32> {
        let cap = self.config.ttl_max_s;
        match upstream_ttl_s {
            Some(ttl) if ttl >= 0 => {
                let ttl = u32::try_from(ttl).unwrap_or(u32::MAX);
                Some(if cap > 0 { ttl.min(cap) } else { ttl })
            }
            // The upstream does not say (a text-only server): the cap, or a short default.
            None if text_upstream => Some(if cap > 0 { cap } else { TEXT_UPSTREAM_TTL_S }),
            // Never expires upstream.
            _ => (cap > 0).then_some(cap),
        }
    }

    /// The edge exptime of a value a client wrote with `exptime` (memcached's rules:
    /// relative seconds, an absolute Unix time above 30 days, negative = expired):
    /// capped by `--upstream-ttl-max`; `None` when the edge should keep no copy.
    pub fn edge_exptime(&self, exptime: i64, now_unix_s: u64) -> Option<i64> {
        let cap = i64::from(self.config.ttl_max_s);
        let relative = if exptime < 0 {
            return None;
        } else if exptime == 0 {
            None
        } else if exptime > engine::RELATIVE_EXPTIME_MAX_S {
            let now = i64::try_from(now_unix_s).unwrap_or(i64::MAX);
            let left = exptime - now;
            if left <= 0 {
                return None;
            }
            Some(left)
        } else {
            Some(exptime)
        };
        Some(match (relative, cap) {
            (None, 0) => 0,
            (None, cap) => cap,
            (Some(left), 0) => left,
            (Some(left), cap) => left.min(cap),
        })
    }

    /// The port a worker submits through and receives deliveries on.
    pub fn worker_port(self: &Arc<Self>, waker: Arc<Waker>) -> WorkerPort {
        let (sender, deliveries) = crossbeam_channel::unbounded();
        WorkerPort {
            upstream: Arc::clone(self),
            route: Arc::new(Route { sender, waker }),
            deliveries,
        }
    }
}

/// A worker's end: submits requests, receives replies. The delivery channel is unbounded
/// but holds at most one reply per key of a parked connection's request (a connection
/// parks on one request at a time).
pub struct WorkerPort {
    upstream: Arc<Upstream>,
    route: Arc<Route>,
    pub deliveries: Receiver<Delivery>,
}

impl WorkerPort {
    /// Hands `request` of the connection in `slot` (`serial`) to the upstream loop of its
    /// key — a multi-key read to the loops of its keys, each its share — without
    /// waiting: what a full queue refused comes back (the keys no loop took).
    pub fn submit(
        &self,
        request: UpstreamRequest,
        slot: usize,
        serial: u64,
    ) -> Result<(), UpstreamRequest> {
        let submitted = Instant::now();
        let upstream = &*self.upstream;
        if request.more_keys.is_empty() || upstream.shards.len() == 1 {
            let shard = upstream.shard_of(&request.key);
            return self.submit_to(shard, request, slot, serial, submitted);
        }
        // A batch (plain reads only): one share per loop, in key order.
        let mut shares: Vec<Option<UpstreamRequest>> =
            upstream.shards.iter().map(|_| None).collect();
        let UpstreamRequest { key, more_keys, .. } = request;
        for key in std::iter::once(key).chain(more_keys) {
            let share = &mut shares[upstream.shard_of(&key)];
            match share {
                Some(share) => share.more_keys.push(key),
                None => *share = Some(UpstreamRequest::get(&key, None)),
            }
        }
        let mut refused: Option<UpstreamRequest> = None;
        for (shard, share) in shares.into_iter().enumerate() {
            let Some(share) = share else { continue };
            if let Err(share) = self.submit_to(shard, share, slot, serial, submitted) {
                match &mut refused {
                    Some(refused) => refused.more_keys.extend(share.keys().map(<[u8]>::to_vec)),
                    None => refused = Some(share),
                }
            }
        }
        refused.map_or(Ok(()), Err)
    }

    fn submit_to(
        &self,
        shard: usize,
        request: UpstreamRequest,
        slot: usize,
        serial: u64,
        submitted: Instant,
    ) -> Result<(), UpstreamRequest> {
        let submission = Submission {
            request,
            slot,
            serial,
            route: Arc::clone(&self.route),
            submitted,
        };
        let shard = &self.upstream.shards[shard];
        match shard.submit.try_send(submission) {
            Ok(()) => {
                // Pairs with the loop's fence in `Upstream::may_sleep`: either the loop
                // sees the submission before it sleeps, or this sees it sleeping.
                std::sync::atomic::fence(Ordering::SeqCst);
                if shard.sleeping.load(Ordering::Relaxed) {
                    if let Some(waker) = shard.waker.get() {
                        // A failed wake delays the request until the loop's next event.
                        let _ = waker.wake();
                    }
                }
                Ok(())
            }
            Err(TrySendError::Full(submission)) | Err(TrySendError::Disconnected(submission)) => {
                self.upstream
                    .stats
                    .queue_full
                    .fetch_add(1, Ordering::Relaxed);
                Err(submission.request)
            }
        }
    }
}

/// Serial numbers of connections, so that a reply for a closed connection is not given
/// to the next connection in its slot.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A connection's side of an upstream request: the request waiting to be submitted,
/// whether the connection is parked, and the replies as they come (one per key).
#[derive(Debug)]
pub struct Parking {
    serial: u64,
    pending: Option<UpstreamRequest>,
    parked: bool,
    /// Replies expected for the parked request.
    expected: usize,
    replies: Replies,
}

impl Default for Parking {
    fn default() -> Self {
        Parking {
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            pending: None,
            parked: false,
            expected: 0,
            replies: Replies::default(),
        }
    }
}

impl Parking {
    pub fn is_parked(&self) -> bool {
        self.parked
    }

    /// The request at the front of the input needs `request` answered first.
    pub fn park(&mut self, request: UpstreamRequest) {
        self.expected = 1 + request.more_keys.len();
        self.replies.entries.clear();
        self.pending = Some(request);
        self.parked = true;
    }

    /// Submits the parked request (the worker calls this with the connection's slot).
    /// Without a port, or with a full queue, the reply of each key not taken is a
    /// failure at once; `true` when that leaves the connection ready to run again.
    pub fn submit(&mut self, port: Option<&WorkerPort>, slot: usize) -> bool {
        let Some(request) = self.pending.take() else {
            return false;
        };
        let (failure, refused) = match port {
            Some(port) => match port.submit(request, slot, self.serial) {
                Ok(()) => return false,
                Err(refused) => (Failure::Busy, refused),
            },
            None => (Failure::Unavailable, request),
        };
        let reply = Arc::new(UpstreamReply::Failed(failure));
        for key in refused.keys() {
            self.deliver(key.to_vec(), Arc::clone(&reply));
        }
        !self.parked
    }

    /// Whether `delivery` is for this connection's parked request.
    pub fn accepts(&self, serial: u64) -> bool {
        self.parked && self.serial == serial
    }

    /// The upstream's reply for `key`; the connection runs again once every key of its
    /// request has one.
    pub fn deliver(&mut self, key: Vec<u8>, reply: Arc<UpstreamReply>) {
        self.replies.entries.push((key, reply));
        if self.replies.entries.len() >= self.expected {
            self.parked = false;
        }
    }

    /// The replies for the request at the front of the input, for its next dispatch.
    pub fn take_replies(&mut self) -> Option<Replies> {
        if self.parked || self.replies.entries.is_empty() {
            return None;
        }
        Some(std::mem::take(&mut self.replies))
    }
}

/// Seconds since the Unix epoch (for absolute exptimes).
pub fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(ttl_max_s: u32) -> Upstream {
        Upstream::new(UpstreamConfig {
            servers: vec!["127.0.0.1:1".to_owned()],
            ttl_max_s,
            ..UpstreamConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn an_edge_copy_lives_at_most_the_cap_and_never_longer_than_upstream() {
        let capped = upstream(300);
        assert_eq!(capped.edge_ttl(Some(10), false), Some(10));
        assert_eq!(capped.edge_ttl(Some(1000), false), Some(300));
        assert_eq!(capped.edge_ttl(Some(-1), false), Some(300));
        assert_eq!(capped.edge_ttl(None, true), Some(300));
        assert_eq!(capped.edge_ttl(Some(0), false), Some(0));
        let uncapped = upstream(0);
        assert_eq!(uncapped.edge_ttl(Some(-1), false), None);
        assert_eq!(uncapped.edge_ttl(Some(1000), false), Some(1000));
        assert_eq!(uncapped.edge_ttl(None, true), Some(TEXT_UPSTREAM_TTL_S));
    }

    #[test]
    fn a_written_exptime_is_capped_and_absolute_times_become_relative() {
        let capped = upstream(300);
        let now = 2_000_000_000;
        assert_eq!(capped.edge_exptime(0, now), Some(300));
        assert_eq!(capped.edge_exptime(60, now), Some(60));
        assert_eq!(capped.edge_exptime(1000, now), Some(300));
        assert_eq!(capped.edge_exptime(now as i64 + 100, now), Some(100));
        assert_eq!(capped.edge_exptime(now as i64 - 1, now), None);
        assert_eq!(capped.edge_exptime(-1, now), None);
        assert_eq!(upstream(0).edge_exptime(0, now), Some(0));
    }

    #[test]
    fn a_full_queue_or_no_upstream_answers_the_parked_request_at_once() {
        let mut parking = Parking::default();
        parking.park(UpstreamRequest::get(b"k", None));
        assert!(parking.is_parked());
        assert!(parking.submit(None, 0));
        assert!(!parking.is_parked());
        let replies = parking.take_replies().expect("replies");
        assert_eq!(
            replies.get(b"k"),
            Some(&UpstreamReply::Failed(Failure::Unavailable))
        );
        assert!(parking.take_replies().is_none(), "taken once");
    }

    #[test]
    fn a_batch_is_split_among_the_loops_of_its_keys_and_a_full_loop_fails_only_its_keys() {
        let upstream = Arc::new(
            Upstream::new(UpstreamConfig {
                servers: vec!["127.0.0.1:1".to_owned()],
                threads: 4,
                ..UpstreamConfig::default()
            })
            .unwrap(),
        );
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let port = upstream.worker_port(waker);
        let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("key{i}").into_bytes()).collect();
        let batch = |keys: &[Vec<u8>]| {
            let mut request = UpstreamRequest::get(&keys[0], None);
            request.more_keys = keys[1..].to_vec();
            request
        };
        assert!(port.submit(batch(&keys), 7, 1).is_ok());
        let mut seen = Vec::new();
        for (index, shard) in upstream.shards.iter().enumerate() {
            let shares: Vec<Submission> = shard.submissions.try_iter().collect();
            assert!(shares.len() <= 1, "one share per loop");
            for share in shares {
                assert_eq!((share.slot, share.serial), (7, 1));
                for key in share.request.keys() {
                    assert_eq!(upstream.shard_of(key), index, "a key in another's loop");
                    seen.push(key.to_vec());
                }
            }
        }
        seen.sort();
        let mut expected = keys.clone();
        expected.sort();
        assert_eq!(seen, expected, "every key once");
        assert!(
            (0..4).all(|shard| keys.iter().any(|k| upstream.shard_of(k) == shard)),
            "40 keys reach every loop"
        );

        // Loop 0's queue full: its keys fail at once (busy), the others wait.
        let full = &upstream.shards[0];
        while full
            .submit
            .try_send(Submission {
                request: UpstreamRequest::get(b"filler", None),
                slot: 0,
                serial: 0,
                route: Arc::clone(&port.route),
                submitted: Instant::now(),
            })
            .is_ok()
        {}
        let mut parking = Parking::default();
        parking.park(batch(&keys));
        assert!(
            !parking.submit(Some(&port), 7),
            "still waiting for the others"
        );
        assert!(parking.is_parked());
        let busy: Vec<&Vec<u8>> = keys.iter().filter(|k| upstream.shard_of(k) == 0).collect();
        assert_eq!(parking.replies.entries.len(), busy.len());
        for (key, reply) in &parking.replies.entries {
            assert!(busy.contains(&key), "a key of another loop failed");
            assert_eq!(**reply, UpstreamReply::Failed(Failure::Busy));
        }
        assert_eq!(
            upstream.stats.queue_full.load(Ordering::Relaxed),
            1,
            "one share refused"
        );
    }

    #[test]
    fn a_batch_runs_again_only_once_every_key_has_its_reply() {
        let mut parking = Parking::default();
        let mut request = UpstreamRequest::get(b"a", None);
        request.more_keys = vec![b"b".to_vec(), b"c".to_vec()];
        parking.park(request);
        let serial = parking.serial;
        assert!(parking.accepts(serial));
        assert!(!parking.accepts(serial + 1), "another connection's reply");
        parking.deliver(b"c".to_vec(), Arc::new(UpstreamReply::Miss));
        parking.deliver(b"a".to_vec(), Arc::new(UpstreamReply::Miss));
        assert!(parking.is_parked());
        assert!(parking.take_replies().is_none());
        parking.deliver(
            b"b".to_vec(),
            Arc::new(UpstreamReply::Failed(Failure::Timeout)),
        );
        assert!(!parking.is_parked());
        let replies = parking.take_replies().expect("replies");
        assert_eq!(
            replies.get(b"b"),
            Some(&UpstreamReply::Failed(Failure::Timeout))
        );
        assert_eq!(replies.get(b"a"), Some(&UpstreamReply::Miss));
        assert_eq!(replies.get(b"d"), None);
    }
}
