//! A worker thread: its own `mio::Poll`, the connections the listener handed it, and a
//! queue of connections that yielded their turn.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::connection::{Connection, Outcome, ServiceContext, INPUT_HEADROOM_BYTES};
use crate::registry::{ConnEntry, ConnState, WorkerCounters};
use crate::runtime::Shared;
use crate::stream::Stream;
use crate::upstream::WorkerPort;

/// The token of the worker's waker; connection `i` uses token `i + 1`.
const WAKER_TOKEN: Token = Token(0);
/// Connections waiting in a worker's hand-off channel.
pub const HANDOFF_CAPACITY: usize = 256;
/// Socket events taken per poll call.
const EVENTS_CAPACITY: usize = 256;
/// How often idle connections are checked when `-o idle_timeout` is on.
const IDLE_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// A connection accepted by the listener, on its way to a worker.
pub struct Incoming {
    pub stream: Stream,
    /// The peer as `stats conns` shows it: `tcp:<ip>:<port>`, or `unix:<path>`.
    pub peer: String,
    /// `tcp:<ip>:<port>` (or `unix:<path>`) of the accepting socket, for `stats conns`.
    pub listen_addr: Arc<str>,
}

/// The listener's and the runtime's handle on a worker.
#[derive(Clone)]
pub struct WorkerHandle {
    sender: Sender<Incoming>,
    waker: Arc<Waker>,
}

impl WorkerHandle {
    /// Hands over a connection; gives it back if the worker's channel is full.
    pub fn hand_off(&self, incoming: Incoming) -> Result<(), Incoming> {
        match self.sender.try_send(incoming) {
            Ok(()) => {
                // A failed wake only delays the connection until the next event.
                let _ = self.waker.wake();
                Ok(())
            }
            Err(TrySendError::Full(incoming)) | Err(TrySendError::Disconnected(incoming)) => {
                Err(incoming)
            }
        }
    }

    /// Wakes the worker so that it notices a shutdown.
    pub fn wake(&self) {
        let _ = self.waker.wake();
    }
}

/// Formats an address as memcached's `stats conns` does.
pub fn conn_addr(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(_) => format!("tcp:{addr}"),
        SocketAddr::V6(_) => format!("tcp6:{addr}"),
    }
}

/// Starts worker `index`.
pub fn spawn(index: usize, shared: Arc<Shared>) -> std::io::Result<(WorkerHandle, JoinHandle<()>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
    let (sender, receiver) = crossbeam_channel::bounded(HANDOFF_CAPACITY);
    let counters = shared.stats.runtime.add_worker();
    let upstream = shared
        .settings
        .upstream
        .as_ref()
        .map(|upstream| upstream.worker_port(Arc::clone(&waker)));
    let thread = std::thread::Builder::new()
        .name(format!("fogcached-worker-{index}"))
        .spawn(move || {
            let mut worker = Worker {
                poll,
                receiver,
                shared,
                counters,
                connections: Vec::new(),
                free_slots: Vec::new(),
                yielded: Vec::new(),
                held: Vec::new(),
                upstream,
            };
            worker.run();
        })?;
    Ok((WorkerHandle { sender, waker }, thread))
}

struct Worker {
    poll: Poll,
    receiver: Receiver<Incoming>,
    shared: Arc<Shared>,
    counters: Arc<WorkerCounters>,
    /// Slot `i` holds the connection with token `i + 1`.
    connections: Vec<Option<Connection>>,
    free_slots: Vec<usize>,
    /// Slots of connections that yielded and still have work.
    yielded: Vec<usize>,
    /// Slots of connections whose replies wait for the pool's durability.
    held: Vec<usize>,
    /// The fog layer's requests and replies (`--upstream`).
    upstream: Option<WorkerPort>,
}

impl Worker {
    fn run(&mut self) {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut yielded_now: Vec<usize> = Vec::new();
        let mut held_now: Vec<usize> = Vec::new();
        let shared = Arc::clone(&self.shared);
        let counters = Arc::clone(&self.counters);
        let idle_timeout_s = shared.config.idle_timeout_s;
        let mut last_sweep_s = shared.engine.clock().now_s();
        loop {
            let timeout = if !self.yielded.is_empty() {
                Some(Duration::ZERO)
            } else if idle_timeout_s > 0 {
                Some(IDLE_SWEEP_INTERVAL)
            } else {
                None
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                if shared.verbosity() > 0 {
                    eprintln!("worker poll failed: {e}");
                }
                break;
            }
            if shared.settings.shutdown_requested.load(Ordering::Acquire) {
                break;
            }
            let ctx = ServiceContext {
                engine: &shared.engine,
                settings: &shared.settings,
                stats: &shared.stats,
                counters: &counters,
                dispatchers: shared.dispatchers,
                reqs_per_event: shared.config.reqs_per_event,
                input_limit_bytes: shared.config.engine.item_size_max_bytes + INPUT_HEADROOM_BYTES,
                now_s: shared.engine.clock().now_s(),
            };
            for event in events.iter() {
                if event.token() == WAKER_TOKEN {
                    self.accept_handed_off(&ctx);
                    self.deliver_upstream(&ctx);
                    continue;
                }
                let slot = event.token().0 - 1;
                let readable = event.is_readable() || event.is_read_closed() || event.is_error();
                let writable = event.is_writable() || event.is_write_closed();
                if let Some(Some(connection)) = self.connections.get_mut(slot) {
                    connection.on_event(readable, writable);
                    if event.is_read_closed() {
                        connection.on_read_closed();
                    }
                    let outcome = connection.service(&ctx);
                    self.apply(slot, outcome, &ctx);
                }
            }
            // Connections that yielded get one more turn each, after the new events.
            std::mem::swap(&mut self.yielded, &mut yielded_now);
            for slot in yielded_now.drain(..) {
                if let Some(Some(connection)) = self.connections.get_mut(slot) {
                    connection.queued = false;
                    let outcome = connection.service(&ctx);
                    self.apply(slot, outcome, &ctx);
                }
            }
            // Replies held for the slow-tier pool's durability: one flush for all of them
            // (shared with the other workers'), then they go out.
            if !self.held.is_empty() {
                if let Err(e) = ctx.engine.make_durable() {
                    eprintln!("fogcached: cannot flush the slow-tier pool: {e}");
                }
                std::mem::swap(&mut self.held, &mut held_now);
                for slot in held_now.drain(..) {
                    if let Some(Some(connection)) = self.connections.get_mut(slot) {
                        let outcome = connection.service(&ctx);
                        self.apply(slot, outcome, &ctx);
                    }
                }
            }
            if idle_timeout_s > 0 && ctx.now_s.saturating_sub(last_sweep_s) >= 1 {
                last_sweep_s = ctx.now_s;
                self.close_idle(&ctx, idle_timeout_s);
            }
        }
        self.close_all();
    }

    fn apply(&mut self, slot: usize, outcome: Outcome, ctx: &ServiceContext<'_>) {
        match outcome {
            Outcome::Wait => {}
            Outcome::Yielded => {
                WorkerCounters::add(&self.counters.conn_yields, 1);
                if let Some(Some(connection)) = self.connections.get_mut(slot) {
                    if !connection.queued {
                        connection.queued = true;
                        self.yielded.push(slot);
                    }
                }
            }
            Outcome::Close => self.close(slot),
            Outcome::Watch(kinds) => self.start_watching(slot, kinds),
            Outcome::Held => self.held.push(slot),
            Outcome::Parked => {
                let port = self.upstream.as_ref();
                if let Some(Some(connection)) = self.connections.get_mut(slot) {
                    if connection.submit_upstream(port, slot) && !connection.queued {
                        // Answered at once (a full queue): run it again this turn.
                        connection.queued = true;
                        self.yielded.push(slot);
                    }
                }
            }
            Outcome::Shutdown => {
                if let Some(Some(connection)) = self.connections.get_mut(slot) {
                    connection.flush_on_shutdown(ctx);
                }
                self.shared.request_shutdown();
            }
        }
    }

    /// Gives the upstream's replies to the connections parked on them and runs those
    /// connections on (the fog layer's resume; see `crate::upstream`).
    fn deliver_upstream(&mut self, ctx: &ServiceContext<'_>) {
        // Only what is there now: a reply that arrives meanwhile wakes the worker again.
        let pending = self
            .upstream
            .as_ref()
            .map_or(0, |port| port.deliveries.len());
        for _ in 0..pending {
            let Some(delivery) = self
                .upstream
                .as_ref()
                .and_then(|port| port.deliveries.try_recv().ok())
            else {
                return;
            };
            let slot = delivery.slot;
            if let Some(Some(connection)) = self.connections.get_mut(slot) {
                if connection.deliver_upstream(delivery) {
                    let outcome = connection.service(ctx);
                    self.apply(slot, outcome, ctx);
                }
            }
        }
    }

    /// Registers the connections the listener queued for this worker.
    fn accept_handed_off(&mut self, ctx: &ServiceContext<'_>) {
        // Bounded by the channel's capacity: the listener may keep adding meanwhile.
        for _ in 0..HANDOFF_CAPACITY {
            let Ok(incoming) = self.receiver.try_recv() else {
                return;
            };
            self.register(incoming, ctx);
        }
    }

    fn register(&mut self, incoming: Incoming, ctx: &ServiceContext<'_>) {
        let Incoming {
            mut stream,
            peer,
            listen_addr,
        } = incoming;
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.connections.push(None);
                self.shared
                    .stats
                    .connection_structures
                    .fetch_add(1, Ordering::Relaxed);
                self.connections.len() - 1
            }
        };
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            Token(slot + 1),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            if self.shared.verbosity() > 0 {
                eprintln!("failed to register connection from {peer}: {e}");
            }
            self.free_slots.push(slot);
            self.shared
                .stats
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let fd = stream.as_raw_fd();
        let entry = Arc::new(ConnEntry::new(
            peer,
            Some(listen_addr.to_string()),
            ConnState::Waiting,
            ctx.now_s,
        ));
        self.shared
            .stats
            .runtime
            .connections
            .insert(fd, Arc::clone(&entry));
        if self.shared.verbosity() > 1 {
            eprintln!("<{fd} new auto-negotiating client connection");
        }
        let mut connection = Connection::new(stream, fd, entry, ctx.now_s);
        // Serve anything the client sent before registration without waiting for an
        // event (edge-triggered registration reports it too; servicing twice is cheap).
        let outcome = connection.service(ctx);
        self.connections[slot] = Some(connection);
        self.apply(slot, outcome, ctx);
    }

    fn close(&mut self, slot: usize) {
        let Some(mut connection) = self.connections.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let _ = self.poll.registry().deregister(connection.stream_mut());
        let fd = connection.fd();
        if connection.watching {
            // It asked to watch but closed before reaching the logger.
            self.shared
                .stats
                .runtime
                .watchers
                .fetch_sub(1, Ordering::Relaxed);
        }
        self.shared.stats.runtime.connections.remove(fd);
        self.shared
            .stats
            .curr_connections
            .fetch_sub(1, Ordering::Relaxed);
        if self.shared.verbosity() > 1 {
            eprintln!("<{fd} connection closed.");
        }
        // Dropping the stream closes the socket.
        drop(connection);
        self.free_slots.push(slot);
    }

    /// Hands the connection in `slot` to the logger thread as a watcher of `kinds`. The
    /// connection stays counted and listed (`conn_watch`) until the logger closes it.
    fn start_watching(&mut self, slot: usize, kinds: u32) {
        let Some(mut connection) = self.connections.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let _ = self.poll.registry().deregister(connection.stream_mut());
        self.free_slots.push(slot);
        let (stream, fd, entry, pending) = connection.into_watcher();
        let runtime = &self.shared.stats.runtime;
        let watcher = crate::watch::NewWatcher {
            stream,
            fd,
            entry,
            kinds,
            pending,
        };
        let refused = match self.shared.logger.get() {
            Some(logger) => logger.add(watcher).err(),
            None => Some(watcher),
        };
        if let Some(watcher) = refused {
            // The logger is gone or swamped: the connection is closed. It leaves the
            // connection table before its socket closes, so the descriptor cannot be
            // reused (and listed) meanwhile.
            runtime.watchers.fetch_sub(1, Ordering::Relaxed);
            runtime.connections.remove(fd);
            self.shared
                .stats
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
            drop(watcher);
        }
    }

    fn close_idle(&mut self, ctx: &ServiceContext<'_>, idle_timeout_s: u32) {
        for slot in 0..self.connections.len() {
            let idle = matches!(
                &self.connections[slot],
                Some(c) if ctx.now_s.saturating_sub(c.last_active_s) > idle_timeout_s
            );
            if idle {
                WorkerCounters::add(&self.counters.idle_kicks, 1);
                self.close(slot);
            }
        }
    }

    fn close_all(&mut self) {
        let shared = Arc::clone(&self.shared);
        let counters = Arc::clone(&self.counters);
        let ctx = ServiceContext {
            engine: &shared.engine,
            settings: &shared.settings,
            stats: &shared.stats,
            counters: &counters,
            dispatchers: shared.dispatchers,
            reqs_per_event: 0,
            input_limit_bytes: 0,
            now_s: 0,
        };
        for connection in self.connections.iter_mut().flatten() {
            connection.flush_on_shutdown(&ctx);
        }
        for slot in 0..self.connections.len() {
            self.close(slot);
        }
        // Connections handed over but never registered are closed by dropping them.
        while let Ok(incoming) = self.receiver.try_recv() {
            drop(incoming);
            self.shared
                .stats
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}
