//! A worker thread: its own `mio::Poll`, the connections the listener handed it, and a
//! queue of connections that yielded their turn.
//!
//! Two event loops drive the same connections and dispatchers (`--io-engine`): the epoll
//! loop here ([`Worker::run_epoll`]: readiness events, each connection reads and writes its
//! own socket) and the io_uring loop in `worker/uring.rs` (completions: received bytes
//! are handed to the connection, replies are taken from it and sent, one `io_uring_enter`
//! per turn for all of them). The io_uring loop keeps the `mio::Poll` as one of its
//! sources, so the waker, the listener's hand-off, and any connection that cannot use
//! completion I/O work unchanged under both.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use engine::events::kind;
use engine::{CloseReason, EventWhat};
use mio::{Events, Interest, Poll, Token, Waker};

mod uring;

pub use uring::{
    probe as probe_io_uring, probe_multishot_recv, IoEngine, IoUringRecv, TaskRun, IO_ENGINE_ENV,
    IO_URING_RECV_ENV, IO_URING_TASKRUN_ENV,
};

use crate::connection::{Connection, Outcome, ServiceContext, INPUT_HEADROOM_BYTES};
use crate::registry::{ConnEntry, ConnState, WorkerCounters};
use crate::runtime::Shared;
use crate::session::BindingProtocol;
use crate::stream::Stream;
use crate::udp::{UdpOutcome, UdpPort};
use crate::upstream::WorkerPort;

/// The token of the worker's waker; connection `i` uses token `i + 1`, and the worker's
/// UDP socket `i` (one per `-l` address with `-U`) token `usize::MAX - i`.
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
    /// The peer's address, for `watch connevents`; `None` on a unix socket.
    pub peer_addr: Option<SocketAddr>,
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

/// Records a connection's opening or closing for `watch connevents` (one relaxed load
/// when nobody watches them).
pub fn record_connection(
    shared: &Shared,
    opened: bool,
    peer: Option<SocketAddr>,
    reason: CloseReason,
    fd: i32,
) {
    let log = shared.engine.events();
    if log.wants(kind::CONNECTIONS) {
        let what = EventWhat::Connection {
            opened,
            peer,
            reason,
            fd,
        };
        log.record(kind::CONNECTIONS, b"", what);
    }
}

/// Formats an address as memcached's `stats conns` does.
pub fn conn_addr(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(_) => format!("tcp:{addr}"),
        SocketAddr::V6(_) => format!("tcp6:{addr}"),
    }
}

/// Starts worker `index` with the event loop `engine` and, under io_uring, the receive
/// `recv` (both resolved at start-up: never `Auto`), serving `udp` (its duplicates of
/// the `-U` sockets) beside its connections. An io_uring the kernel refuses here fails
/// the start, as the probe said it would not.
pub fn spawn(
    index: usize,
    shared: Arc<Shared>,
    engine: IoEngine,
    recv: IoUringRecv,
    udp: Vec<mio::net::UdpSocket>,
) -> std::io::Result<(WorkerHandle, JoinHandle<()>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
    let now_s = shared.engine.clock().now_s();
    let mut udp_ports = Vec::with_capacity(udp.len());
    for (i, socket) in udp.into_iter().enumerate() {
        let label = crate::udp::label(&socket.local_addr()?);
        let entry = Arc::new(ConnEntry::new(label, None, ConnState::Read, now_s));
        let port = UdpPort::new(
            socket,
            Token(usize::MAX - i),
            poll.registry(),
            Arc::clone(&entry),
        )?;
        // memcached counts each thread's UDP connection as a connection.
        shared.stats.runtime.connections.insert(port.fd(), entry);
        shared
            .stats
            .curr_connections
            .fetch_add(1, Ordering::Relaxed);
        shared
            .stats
            .total_connections
            .fetch_add(1, Ordering::Relaxed);
        udp_ports.push(port);
    }
    let io = match engine {
        IoEngine::IoUring => Io::Uring(Box::new(uring::Uring::new(&poll, recv)?)),
        IoEngine::Epoll | IoEngine::Auto => Io::Epoll,
    };
    let (sender, receiver) = crossbeam_channel::bounded(HANDOFF_CAPACITY);
    let counters = shared.stats.runtime.add_worker();
    let upstream = shared
        .settings
        .upstream
        .as_ref()
        .map(|upstream| upstream.worker_port(Arc::clone(&waker)));
    let thread = std::thread::Builder::new()
        .name(format!("fc-worker-{index}"))
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
                udp: udp_ports,
                udp_more: false,
            };
            match io {
                Io::Epoll => worker.run_epoll(),
                Io::Uring(mut uring) => uring.run(&mut worker),
            }
        })?;
    Ok((WorkerHandle { sender, waker }, thread))
}

/// The event loop a worker runs.
enum Io {
    Epoll,
    Uring(Box<uring::Uring>),
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
    /// `-U`: this worker's duplicates of the UDP sockets (see `crate::udp`).
    udp: Vec<UdpPort>,
    /// A UDP socket used its turn with datagrams perhaps left: serve it next turn.
    udp_more: bool,
}

impl Worker {
    /// The service context of one loop turn.
    fn context<'a>(shared: &'a Shared, counters: &'a WorkerCounters) -> ServiceContext<'a> {
        ServiceContext {
            engine: &shared.engine,
            settings: &shared.settings,
            stats: &shared.stats,
            counters,
            dispatchers: shared.dispatchers,
            reqs_per_event: shared.config.reqs_per_event,
            input_limit_bytes: shared.config.engine.item_size_max_bytes + INPUT_HEADROOM_BYTES,
            now_s: shared.engine.now_s(),
        }
    }

    fn run_epoll(&mut self) {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut yielded_now: Vec<usize> = Vec::new();
        let mut held_now: Vec<usize> = Vec::new();
        let shared = Arc::clone(&self.shared);
        let counters = Arc::clone(&self.counters);
        let idle_timeout_s = shared.config.idle_timeout_s;
        let mut last_sweep_s = shared.engine.clock().now_s();
        loop {
            engine::fault::panic_point();
            let timeout = if !self.yielded.is_empty() || self.udp_more {
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
            let ctx = Self::context(&shared, &counters);
            self.handle_poll_events(&events, &ctx, &mut Epoll);
            self.service_queued(&ctx, &mut yielded_now, &mut held_now, &mut Epoll);
            if idle_timeout_s > 0 && ctx.now_s.saturating_sub(last_sweep_s) >= 1 {
                last_sweep_s = ctx.now_s;
                self.close_idle(&ctx, idle_timeout_s, &mut Epoll);
            }
        }
        self.close_all(&mut Epoll);
    }

    /// Serves the readiness events of one `mio` poll: hand-offs on the waker's token,
    /// socket events for the connections registered with the poll.
    fn handle_poll_events(
        &mut self,
        events: &Events,
        ctx: &ServiceContext<'_>,
        io: &mut impl LoopIo,
    ) {
        for event in events.iter() {
            if event.token() == WAKER_TOKEN {
                self.accept_handed_off(ctx, io);
                self.deliver_upstream(ctx, io);
                continue;
            }
            let udp_index = usize::MAX - event.token().0;
            if udp_index < self.udp.len() {
                self.service_udp(udp_index, ctx);
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
                let outcome = connection.service(ctx);
                self.apply(slot, outcome, ctx, io);
            }
        }
    }

    /// The second half of every loop turn: connections that yielded get one more turn
    /// each, after the new events; then replies held for the slow-tier pool's durability
    /// get one flush for all of them (shared with the other workers') and go out.
    fn service_queued(
        &mut self,
        ctx: &ServiceContext<'_>,
        yielded_now: &mut Vec<usize>,
        held_now: &mut Vec<usize>,
        io: &mut impl LoopIo,
    ) {
        if std::mem::take(&mut self.udp_more) {
            for index in 0..self.udp.len() {
                self.service_udp(index, ctx);
            }
        }
        if self.yielded.is_empty() && self.held.is_empty() {
            return;
        }
        std::mem::swap(&mut self.yielded, yielded_now);
        for slot in yielded_now.drain(..) {
            if let Some(Some(connection)) = self.connections.get_mut(slot) {
                connection.queued = false;
                let outcome = connection.service(ctx);
                self.apply(slot, outcome, ctx, io);
            }
        }
        if !self.held.is_empty() {
            if let Err(e) = ctx.engine.make_durable() {
                eprintln!("fogcached: cannot flush the slow-tier pool: {e}");
            }
            std::mem::swap(&mut self.held, held_now);
            for slot in held_now.drain(..) {
                if let Some(Some(connection)) = self.connections.get_mut(slot) {
                    let outcome = connection.service(ctx);
                    self.apply(slot, outcome, ctx, io);
                }
            }
        }
    }

    /// Whether the io_uring loop must not wait for a completion: a connection yielded or
    /// holds replies, or a UDP socket used its turn.
    fn has_queued_work(&self) -> bool {
        !self.yielded.is_empty() || !self.held.is_empty() || self.udp_more
    }

    /// Serves UDP socket `index` (readable or writable, or its turn came again).
    fn service_udp(&mut self, index: usize, ctx: &ServiceContext<'_>) {
        let registry = self.poll.registry();
        let Some(port) = self.udp.get_mut(index) else {
            return;
        };
        match port.service(ctx, registry) {
            UdpOutcome::Wait => {}
            UdpOutcome::More => self.udp_more = true,
        }
    }

    /// Acts on what servicing a connection returned, then lets the loop move its bytes
    /// (the io_uring loop sends its replies and asks for more input; epoll does nothing).
    fn apply(
        &mut self,
        slot: usize,
        outcome: Outcome,
        ctx: &ServiceContext<'_>,
        io: &mut impl LoopIo,
    ) {
        let outcome = match outcome {
            // A watcher's `OK` stays in its output and goes to the logger with it, after
            // anything the loop is still sending.
            Outcome::Close | Outcome::Shutdown | Outcome::Watch(_) => outcome,
            _ => match self.connections.get_mut(slot) {
                Some(Some(connection)) => io.after_service(slot, connection, outcome, ctx),
                _ => outcome,
            },
        };
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
            Outcome::Close => self.close(slot, io),
            Outcome::Watch(kinds) => self.start_watching(slot, kinds, io),
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
                    if io.may_write_directly(slot) {
                        connection.flush_on_shutdown(ctx);
                    }
                }
                self.shared.request_shutdown();
            }
        }
    }

    /// Gives the upstream's replies to the connections parked on them and runs those
    /// connections on (the fog layer's resume; see `crate::upstream`).
    fn deliver_upstream(&mut self, ctx: &ServiceContext<'_>, io: &mut impl LoopIo) {
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
                    self.apply(slot, outcome, ctx, io);
                }
            }
        }
    }

    /// Registers the connections the listener queued for this worker.
    fn accept_handed_off(&mut self, ctx: &ServiceContext<'_>, io: &mut impl LoopIo) {
        // Bounded by the channel's capacity: the listener may keep adding meanwhile.
        for _ in 0..HANDOFF_CAPACITY {
            let Ok(incoming) = self.receiver.try_recv() else {
                return;
            };
            self.register(incoming, ctx, io);
        }
    }

    fn register(&mut self, incoming: Incoming, ctx: &ServiceContext<'_>, io: &mut impl LoopIo) {
        let Incoming {
            mut stream,
            peer,
            peer_addr,
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
        let completion_io = io.attach(slot, &stream);
        let registered = if completion_io {
            Ok(())
        } else {
            self.poll.registry().register(
                &mut stream,
                Token(slot + 1),
                Interest::READABLE | Interest::WRITABLE,
            )
        };
        if let Err(e) = registered {
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
        let binding = self.shared.settings.binding;
        if self.shared.verbosity() > 1 {
            match binding {
                BindingProtocol::Auto => eprintln!("<{fd} new auto-negotiating client connection"),
                BindingProtocol::Ascii => eprintln!("<{fd} new ascii client connection."),
                BindingProtocol::Binary => eprintln!("<{fd} new binary client connection."),
            }
        }
        record_connection(&self.shared, true, peer_addr, CloseReason::Normal, fd);
        let mut connection = Connection::new(stream, fd, entry, ctx.now_s);
        connection.peer_addr = peer_addr;
        connection.bind_protocol(binding);
        if completion_io {
            connection.use_completion_io();
        }
        // Serve anything the client sent before registration without waiting for an
        // event (edge-triggered registration reports it too; servicing twice is cheap).
        let outcome = connection.service(ctx);
        self.connections[slot] = Some(connection);
        self.apply(slot, outcome, ctx, io);
    }

    fn close(&mut self, slot: usize, io: &mut impl LoopIo) {
        let Some(connection) = self.connections.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let fd = connection.fd();
        record_connection(
            &self.shared,
            false,
            connection.peer_addr,
            connection.close_reason,
            fd,
        );
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
        // The loop closes the socket (by dropping the connection) once nothing of its
        // is in flight, and gives the slot back then.
        if let Some(mut connection) = io.detach(slot, connection) {
            let _ = self.poll.registry().deregister(connection.stream_mut());
            drop(connection);
            self.free_slots.push(slot);
        }
    }

    /// Hands the connection in `slot` to the logger thread as a watcher of `kinds`. The
    /// connection stays counted and listed (`conn_watch`) until the logger closes it.
    fn start_watching(&mut self, slot: usize, kinds: u32, io: &mut impl LoopIo) {
        let Some(connection) = self.connections.get_mut(slot).and_then(Option::take) else {
            return;
        };
        if let Some(connection) = io.detach_watcher(slot, connection, kinds) {
            self.hand_to_logger(slot, connection, kinds);
        }
    }

    /// The second half of [`Worker::start_watching`], once no operation of the event loop
    /// is in flight on the connection: it leaves the worker (its slot is freed) for the
    /// logger thread.
    fn hand_to_logger(&mut self, slot: usize, mut connection: Connection, kinds: u32) {
        let _ = self.poll.registry().deregister(connection.stream_mut());
        self.free_slots.push(slot);
        let mut watcher = connection.into_watcher();
        watcher.kinds = kinds;
        let fd = watcher.fd;
        let runtime = &self.shared.stats.runtime;
        let refused = match self.shared.logger.get() {
            Some(logger) => logger.add(watcher).err(),
            None => Some(watcher),
        };
        if let Some(watcher) = refused {
            // The logger is gone or swamped: the connection is closed. It leaves the
            // connection table before its socket closes, so the descriptor cannot be
            // reused (and listed) meanwhile.
            runtime.watchers.fetch_sub(1, Ordering::Relaxed);
            record_connection(
                &self.shared,
                false,
                watcher.peer_addr,
                CloseReason::Error,
                fd,
            );
            runtime.connections.remove(fd);
            self.shared
                .stats
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
            drop(watcher);
        }
    }

    fn close_idle(&mut self, ctx: &ServiceContext<'_>, idle_timeout_s: u32, io: &mut impl LoopIo) {
        for slot in 0..self.connections.len() {
            let idle = matches!(
                &self.connections[slot],
                Some(c) if ctx.now_s.saturating_sub(c.last_active_s) > idle_timeout_s
            );
            if idle {
                WorkerCounters::add(&self.counters.idle_kicks, 1);
                if let Some(connection) = &mut self.connections[slot] {
                    connection.close_reason = CloseReason::IdleTimeout;
                }
                self.close(slot, io);
            }
        }
    }

    fn close_all(&mut self, io: &mut impl LoopIo) {
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
        for (slot, connection) in self.connections.iter_mut().enumerate() {
            if let Some(connection) = connection {
                if io.may_write_directly(slot) {
                    connection.flush_on_shutdown(&ctx);
                }
            }
        }
        for slot in 0..self.connections.len() {
            if let Some(connection) = &mut self.connections[slot] {
                connection.close_reason = CloseReason::Shutdown;
            }
            self.close(slot, io);
        }
        for mut port in std::mem::take(&mut self.udp) {
            let _ = self.poll.registry().deregister(port.socket_mut());
            self.shared.stats.runtime.connections.remove(port.fd());
            self.shared
                .stats
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
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

/// What a worker's event loop does beside the shared connection handling: the seam
/// between the connection state machine (`connection.rs`, the dispatchers) and the loop
/// that moves bytes. The epoll loop's is empty: its connections read and write their own
/// sockets, and `mio` registration is the worker's.
trait LoopIo {
    /// A new connection in `slot`: true if the loop moves its bytes (completion I/O), false
    /// if it is to be registered with the worker's `mio::Poll` (readiness).
    fn attach(&mut self, slot: usize, stream: &Stream) -> bool;
    /// Called after every service of a connection that stays open: the loop sends its
    /// replies and asks for input as it needs; returns the outcome to act on (the io_uring
    /// loop turns a reply held for durability into `Outcome::Held`).
    fn after_service(
        &mut self,
        slot: usize,
        connection: &mut Connection,
        outcome: Outcome,
        ctx: &ServiceContext<'_>,
    ) -> Outcome;
    /// The connection in `slot` is closed: returns it to be dropped now, or keeps it
    /// until the operations in flight on it are over (the loop frees the slot then).
    fn detach(&mut self, slot: usize, connection: Connection) -> Option<Connection>;
    /// The connection in `slot` becomes a watcher of `kinds` (`watch`): returns it to be
    /// handed to the logger now, or keeps it until the operations in flight on it are
    /// over (the loop hands it over and frees the slot then, through
    /// [`Worker::hand_to_logger`]).
    fn detach_watcher(
        &mut self,
        slot: usize,
        connection: Connection,
        kinds: u32,
    ) -> Option<Connection>;
    /// Whether a last write at shutdown may go straight to the socket (no send of the
    /// loop's is in flight that it could overtake).
    fn may_write_directly(&self, slot: usize) -> bool;
}

/// The epoll loop's side of [`LoopIo`].
struct Epoll;

impl LoopIo for Epoll {
    fn attach(&mut self, _slot: usize, _stream: &Stream) -> bool {
        false
    }

    #[inline]
    fn after_service(
        &mut self,
        _slot: usize,
        _connection: &mut Connection,
        outcome: Outcome,
        _ctx: &ServiceContext<'_>,
    ) -> Outcome {
        outcome
    }

    fn detach(&mut self, _slot: usize, connection: Connection) -> Option<Connection> {
        Some(connection)
    }

    fn detach_watcher(
        &mut self,
        _slot: usize,
        connection: Connection,
        _kinds: u32,
    ) -> Option<Connection> {
        Some(connection)
    }

    fn may_write_directly(&self, _slot: usize) -> bool {
        true
    }
}
