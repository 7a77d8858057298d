//! One client connection: its socket, its input and output buffers, and the loop that
//! feeds input to a protocol dispatcher and writes the replies.
//!
//! The per-batch cycle is: run every complete request in the input (bounded by
//! `reqs_per_event` and by the output high-water mark), write all replies with one
//! `write`, then read until the socket is drained or the buffer is full, and repeat.
//! A multi-key `get` whose replies pass the high-water mark part-way stops there and
//! stays at the front of the input; it resumes at its next key once the output drained
//! below the mark, so that no request makes a connection buffer more than the mark plus
//! one value.
//! Sockets are registered edge-triggered, so `read_ready`/`write_ready` remember whether
//! the socket may still have data or room without a new event.
//!
//! Under the io_uring loop (`worker/uring.rs`) a connection does no I/O of its own
//! (*completion I/O*): the loop hands it received bytes ([`Connection::receive`]), runs
//! [`Connection::service`] (which then only dispatches), takes its replies
//! ([`Connection::take_output`]) and asks whether it wants more input
//! ([`Connection::input_wanted`]). The request machinery is the same for both loops.

use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;

use std::sync::atomic::Ordering;

use engine::CloseReason;

use crate::auth::{self, ConnAuth};
use crate::dispatch;
use crate::registry::{ConnEntry, ConnState, WorkerCounters};
use crate::session::{BindingProtocol, ServerSettings, ServerStats, Session, Step};
use crate::stream::Stream;
use crate::upstream::{Parking, WorkerPort};

/// Input buffer size of a fresh connection.
pub const INPUT_INITIAL_BYTES: usize = 16 * 1024;
/// Room beyond the largest item for the command line or binary header around it, and
/// for multi-key `get` lines.
pub const INPUT_HEADROOM_BYTES: usize = 64 * 1024;
/// An idle connection keeps at most this much input buffer; a larger one (grown for a
/// big value) is given back once it is empty.
pub const INPUT_RETAIN_BYTES: usize = 256 * 1024;
/// Output buffer capacity a connection keeps between batches.
pub const OUTPUT_RETAIN_BYTES: usize = 256 * 1024;
/// While this much output waits for a slow reader, no further requests are parsed:
/// a client that pipelines without reading cannot make the server buffer without bound.
pub const OUTPUT_HIGH_WATER_BYTES: usize = 4 * 1024 * 1024;
/// Reads per service call before the connection yields, so that one fast sender cannot
/// hold a worker (requests are bounded separately by `reqs_per_event`).
const READS_PER_SERVICE_MAX: u32 = 64;
/// Retries of a syscall interrupted by a signal.
const EINTR_RETRIES_MAX: u32 = 8;

/// Which protocol a connection speaks; decided by its first byte, as memcached does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Unknown,
    Text,
    Binary,
}

/// memcached's binary protocol request magic.
const BINARY_REQUEST_MAGIC: u8 = 0x80;

/// What a worker does with a connection after servicing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Wait for the next socket event.
    Wait,
    /// It still has work but gave up its turn; service it again after the others.
    Yielded,
    /// Close it now.
    Close,
    /// Stop the server (its output was written as far as the socket allowed).
    Shutdown,
    /// It asked to `watch` these event kinds: hand it to the logger thread.
    Watch(u32),
    /// Its replies wait until the slow-tier pool's invalidations are on the file
    /// (`--slow-durability power`): the worker flushes the pool once for all such
    /// connections of its turn, then services them again.
    Held,
    /// The request at the front needs the upstream (`--upstream`): the worker submits it
    /// ([`Connection::submit_upstream`]) and services the connection again when the
    /// reply is delivered ([`Connection::deliver_upstream`]).
    Parked,
}

/// A protocol dispatcher: handles the request at the front of the input.
#[cfg(test)]
pub type DispatchFn = fn(&mut Session<'_>, &[u8]) -> Step;

/// Which protocol a connection's requests go to. A connection calls memcached's
/// dispatchers directly (`dispatch::text::handle`, `dispatch::binary::handle`, chosen by
/// its first byte), so this is empty outside the crate's unit tests; there, the runtime's
/// own tests (`runtime/toy_tests.rs`) put a toy line protocol in their place, to test
/// the connection machinery apart from memcached's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Dispatchers {
    #[cfg(test)]
    pub toy: Option<DispatchFn>,
}

/// Read-only context a worker passes to its connections.
pub struct ServiceContext<'a> {
    pub engine: &'a engine::Engine,
    pub settings: &'a ServerSettings,
    pub stats: &'a ServerStats,
    pub counters: &'a WorkerCounters,
    pub dispatchers: Dispatchers,
    pub reqs_per_event: u32,
    /// Largest input buffer: one whole request (a maximal item plus its framing).
    pub input_limit_bytes: usize,
    /// Engine-clock seconds, refreshed once per poll wake-up.
    pub now_s: u32,
}

/// What [`Connection::take_output`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakeOutput {
    /// No reply is waiting.
    Nothing,
    /// The replies are in the caller's buffer now.
    Taken,
    /// Replies wait for the pool's durability: service the connection as `Outcome::Held`.
    Held,
}

enum Dispatched {
    /// The input holds no complete request.
    NeedMore,
    /// `reqs_per_event` requests ran; others get a turn.
    Yield,
    /// Too much output is waiting; stop parsing until it drains.
    OutputFull,
    Close,
    Shutdown,
    /// `watch`: no more requests; the connection becomes a watcher of these kinds.
    Watch(u32),
    /// The front request waits for the upstream.
    Parked,
}

enum Fill {
    /// New bytes arrived.
    Data,
    /// The socket is drained.
    Drained,
    /// The peer closed its side.
    Eof,
    /// One request does not fit the largest allowed buffer.
    TooLarge,
    Failed,
}

pub struct Connection {
    stream: Stream,
    fd: i32,
    entry: Arc<ConnEntry>,
    protocol: Protocol,
    /// Whether the client authenticated (`-Y`, `-S`).
    auth: ConnAuth,
    /// Input bytes live in `input[input_start..input_end]`; the Vec is fully initialised
    /// (its length is its capacity) so reads need no unsafe code.
    input: Vec<u8>,
    input_start: usize,
    input_end: usize,
    /// Bytes still to discard after a `Step::Swallow`.
    swallow_bytes: usize,
    /// Keys already answered of the multi-key retrieval at the front of the input, which
    /// stopped at the output high-water mark (`Step::Partial`); 0 between requests.
    resume_keys: usize,
    /// Replies; `output[output_written..]` is still to be written.
    output: Vec<u8>,
    output_written: usize,
    /// The socket may have unread bytes (no `WouldBlock` since the last readable event).
    read_ready: bool,
    /// The socket may have room (no short write since the last writable event).
    write_ready: bool,
    /// The peer has shut down its sending side.
    peer_closed: bool,
    /// The socket reported the peer's shutdown (`EPOLLRDHUP`) while data may still be
    /// unread: a short read then does not mean the socket is drained, because the
    /// end of file that came with the same event is still to be read.
    eof_reported: bool,
    /// Close once the output is written (`quit`, protocol error, end of input).
    closing: bool,
    /// The fog layer's request the front request waits for, and its replies; made at the
    /// first one (a connection of a server without an upstream never has one).
    upstream: Option<Box<Parking>>,
    /// In the worker's yield queue.
    pub queued: bool,
    /// It asked to `watch` (and was counted as a watcher) but was not handed to the
    /// logger yet: a close gives the count back.
    pub watching: bool,
    /// The io_uring loop moves this connection's bytes (see the module comment).
    completion_io: bool,
    /// Completion I/O: the last service ran out of complete requests and would have read.
    input_wanted: bool,
    /// Engine-clock second of the last request or input, for `-o idle_timeout`.
    pub last_active_s: u32,
    /// Why it closes, for `watch connevents`: an error unless the client closed its side
    /// or sent `quit` (set where that is seen), or the worker closes it for idleness or
    /// a shutdown.
    pub close_reason: CloseReason,
    /// The peer's address (`None` on a unix socket), for `watch connevents`.
    pub peer_addr: Option<std::net::SocketAddr>,
}

impl Connection {
    pub fn new(stream: Stream, fd: i32, entry: Arc<ConnEntry>, now_s: u32) -> Connection {
        Connection {
            stream,
            fd,
            entry,
            protocol: Protocol::Unknown,
            auth: ConnAuth::default(),
            input: vec![0; INPUT_INITIAL_BYTES],
            input_start: 0,
            input_end: 0,
            swallow_bytes: 0,
            resume_keys: 0,
            output: Vec::with_capacity(INPUT_INITIAL_BYTES),
            output_written: 0,
            // Data may have arrived before the socket was registered.
            read_ready: true,
            write_ready: true,
            peer_closed: false,
            eof_reported: false,
            closing: false,
            upstream: None,
            queued: false,
            watching: false,
            completion_io: false,
            input_wanted: false,
            last_active_s: now_s,
            close_reason: CloseReason::Error,
            peer_addr: None,
        }
    }

    /// `-B`: the protocol is the server's, not the first byte's.
    pub fn bind_protocol(&mut self, binding: BindingProtocol) {
        self.protocol = match binding {
            BindingProtocol::Auto => Protocol::Unknown,
            BindingProtocol::Ascii => Protocol::Text,
            BindingProtocol::Binary => Protocol::Binary,
        };
    }

    /// Switches the connection to completion I/O: from now on the io_uring loop does its
    /// reads and writes (and `read_ready`/`write_ready` stay false, so `service` never
    /// touches the socket).
    pub fn use_completion_io(&mut self) {
        self.completion_io = true;
        self.read_ready = false;
        self.write_ready = false;
        // Whatever the client sent before the switch is still in the socket.
        self.input_wanted = true;
    }

    /// Completion I/O: the connection has run every complete request it holds and waits
    /// for more input (the point where the epoll loop would read). False while it is
    /// closing, stopped by unwritten output, or yielded with requests left.
    pub fn input_wanted(&self) -> bool {
        self.input_wanted && !self.closing && !self.peer_closed
    }

    /// Completion I/O: the connection waits for input and has no reply left to send, so a
    /// completed send needs no service (whatever is left is the receive's).
    pub fn waits_for_input_only(&self) -> bool {
        self.input_wanted() && self.output_pending() == 0
    }

    /// Completion I/O: appends received bytes to the input. False when they do not fit;
    /// the caller closes the connection. While the connection wants input
    /// ([`Connection::input_wanted`]) its input holds no complete request, so more than
    /// `input_limit_bytes` is one request larger than the largest allowed buffer (as
    /// `fill`'s `TooLarge`), and the input may exceed the limit by at most one receive.
    /// While it does not (a multishot receive delivered before its cancel took effect),
    /// the input may hold complete requests not yet run: then only more than
    /// `unwanted_max` bytes past the limit do not fit (the loop's accounting says it
    /// cannot deliver that much).
    pub fn receive(&mut self, ctx: &ServiceContext<'_>, bytes: &[u8], unwanted_max: usize) -> bool {
        let limit = if self.input_wanted() {
            ctx.input_limit_bytes
        } else {
            ctx.input_limit_bytes.saturating_add(unwanted_max)
        };
        if self.input_start == self.input_end {
            self.input_start = 0;
            self.input_end = 0;
        }
        if self.input_end + bytes.len() > self.input.len() {
            if self.input_start > 0 {
                self.input.copy_within(self.input_start..self.input_end, 0);
                self.input_end -= self.input_start;
                self.input_start = 0;
            }
            let needed = self.input_end + bytes.len();
            if needed > self.input.len() {
                if self.input_end > limit {
                    // More than any request and still incomplete (or, not wanted, more
                    // than the loop can deliver).
                    debug_assert!(
                        self.input_wanted(),
                        "{} input bytes past a limit of {limit} while not wanting input",
                        self.input_end
                    );
                    return false;
                }
                let grown = (self.input.len() * 2).min(limit).max(needed);
                self.input.resize(grown, 0);
            }
        }
        self.input[self.input_end..self.input_end + bytes.len()].copy_from_slice(bytes);
        self.input_end += bytes.len();
        self.last_active_s = ctx.now_s;
        WorkerCounters::add(&ctx.counters.bytes_read, bytes.len() as u64);
        true
    }

    /// Completion I/O: the peer closed its sending side (a receive returned 0 bytes).
    pub fn on_peer_closed(&mut self) {
        self.peer_closed = true;
        self.close_reason = CloseReason::Normal;
    }

    /// Completion I/O: hands the unwritten replies over for sending by swapping them with
    /// `spare` (an empty buffer, whose capacity the connection keeps), so no reply byte is
    /// copied. [`TakeOutput::Held`] when the slow-tier pool must be made durable first
    /// (`--slow-durability power`), exactly as `service` holds a write.
    pub fn take_output(&mut self, ctx: &ServiceContext<'_>, spare: &mut Vec<u8>) -> TakeOutput {
        if self.output_pending() == 0 {
            return TakeOutput::Nothing;
        }
        let mark = ctx.engine.durability_mark();
        if !ctx.engine.is_durable(mark) {
            return TakeOutput::Held;
        }
        debug_assert!(spare.is_empty());
        spare.clear();
        if spare.capacity() > OUTPUT_RETAIN_BYTES {
            spare.shrink_to(OUTPUT_RETAIN_BYTES);
        }
        std::mem::swap(&mut self.output, spare);
        if self.output_written > 0 {
            spare.drain(..self.output_written);
            self.output_written = 0;
        }
        TakeOutput::Taken
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    pub fn stream_mut(&mut self) -> &mut Stream {
        &mut self.stream
    }

    pub fn entry(&self) -> &ConnEntry {
        &self.entry
    }

    /// Fog layer: hands the request this connection parked on to the upstream thread;
    /// `slot` routes the reply back. `true`: the reply is already there (no upstream, a
    /// full queue), so service the connection again.
    pub fn submit_upstream(&mut self, port: Option<&WorkerPort>, slot: usize) -> bool {
        self.upstream
            .as_mut()
            .is_some_and(|parking| parking.submit(port, slot))
    }

    /// Fog layer: the upstream's reply for `key` of connection `serial`; `true` when the
    /// connection can run again (every key of its request answered). Ignored if this is
    /// not that connection (it closed and the slot was reused) or it is not parked.
    pub fn deliver_upstream(&mut self, delivery: crate::upstream::Delivery) -> bool {
        let Some(parking) = self.upstream.as_mut() else {
            return false;
        };
        if !parking.accepts(delivery.serial) {
            return false;
        }
        parking.deliver(delivery.key, delivery.reply);
        !parking.is_parked()
    }

    /// Records a socket event; the caller then calls [`Connection::service`].
    pub fn on_event(&mut self, readable: bool, writable: bool) {
        self.read_ready |= readable;
        self.write_ready |= writable;
    }

    /// Records that the socket reported the peer's shutdown (`EPOLLRDHUP`), with or
    /// without data before it: the connection reads until it sees the end of file.
    /// Without this, data and a FIN that arrive together are one edge-triggered event,
    /// the read that takes the data is short, and the end of file is never read: a client
    /// that half-closes in the middle of a value would hold its connection forever.
    pub fn on_read_closed(&mut self) {
        self.eof_reported = true;
        self.read_ready = true;
    }

    fn output_pending(&self) -> usize {
        self.output.len() - self.output_written
    }

    /// Replies, or bytes of the stream's own (TLS ciphertext), wait to be written.
    fn has_output(&self) -> bool {
        self.output_pending() > 0 || self.stream.wants_write()
    }

    /// Runs requests, writes replies and reads input until the connection must wait for
    /// the socket, has used its turn, or must close.
    pub fn service(&mut self, ctx: &ServiceContext<'_>) -> Outcome {
        if self.closing {
            return self.finish_closing(ctx);
        }
        let mut requests = 0u32;
        let mut reads = 0u32;
        self.input_wanted = false;
        loop {
            let dispatched = self.dispatch(ctx, &mut requests);
            if requests > 0 {
                self.last_active_s = ctx.now_s;
            }
            // No reply leaves before the slow-tier record invalidations made so far are
            // on the pool file (`--slow-durability power`), so a client told STORED or
            // DELETED never sees the old value come back after a power loss: the worker
            // flushes the pool once for every connection held in its turn.
            if self.output_pending() > 0 && self.write_ready {
                let mark = ctx.engine.durability_mark();
                if !ctx.engine.is_durable(mark) {
                    return Outcome::Held;
                }
            }
            // One write per batch of pipelined replies.
            if self.has_output() && self.write_ready && self.flush(ctx).is_err() {
                return Outcome::Close;
            }
            match dispatched {
                Dispatched::NeedMore => {}
                Dispatched::Yield => return Outcome::Yielded,
                Dispatched::OutputFull => {
                    if self.write_ready && self.output_pending() < OUTPUT_HIGH_WATER_BYTES {
                        // The write drained enough: keep going within this turn.
                        continue;
                    }
                    self.entry.set_state(ConnState::Mwrite);
                    return Outcome::Wait;
                }
                Dispatched::Close => {
                    self.closing = true;
                    return self.finish_closing(ctx);
                }
                Dispatched::Shutdown => return Outcome::Shutdown,
                Dispatched::Watch(kinds) => return Outcome::Watch(kinds),
                // Nothing more is parsed or read until the reply came.
                Dispatched::Parked => return Outcome::Parked,
            }
            if self.peer_closed {
                // No further request can complete; send what is left, then close.
                self.closing = true;
                return self.finish_closing(ctx);
            }
            if !self.read_ready {
                self.input_wanted = self.completion_io;
                return Outcome::Wait;
            }
            if reads >= READS_PER_SERVICE_MAX {
                return Outcome::Yielded;
            }
            reads += 1;
            match self.fill(ctx) {
                Fill::Data => self.last_active_s = ctx.now_s,
                Fill::Drained => return Outcome::Wait,
                Fill::Eof => {
                    self.peer_closed = true;
                    self.close_reason = CloseReason::Normal;
                }
                Fill::TooLarge | Fill::Failed => return Outcome::Close,
            }
        }
    }

    fn finish_closing(&mut self, ctx: &ServiceContext<'_>) -> Outcome {
        self.entry.set_state(ConnState::Closing);
        make_durable_now(ctx);
        if self.has_output() && self.write_ready && self.flush(ctx).is_err() {
            return Outcome::Close;
        }
        if !self.has_output() {
            Outcome::Close
        } else {
            Outcome::Wait
        }
    }

    /// Feeds buffered input to the dispatcher, one request per call, until it needs more
    /// input or a bound stops it.
    fn dispatch(&mut self, ctx: &ServiceContext<'_>, requests: &mut u32) -> Dispatched {
        // The state is published once per batch, not once per request.
        let mut state_published = false;
        // `-vv`: read once per batch, so a request pays one untaken branch without it.
        let log_requests = ctx.settings.verbosity.load(Ordering::Relaxed) > 1;
        loop {
            if self.swallow_bytes > 0 {
                let available = self.input_end - self.input_start;
                let discard = available.min(self.swallow_bytes);
                self.input_start += discard;
                self.swallow_bytes -= discard;
                if self.swallow_bytes > 0 {
                    self.entry.set_state(ConnState::Swallow);
                    self.input_start = 0;
                    self.input_end = 0;
                    return Dispatched::NeedMore;
                }
            }
            if self.input_start == self.input_end {
                self.input_start = 0;
                self.input_end = 0;
                if self.input.len() > INPUT_RETAIN_BYTES {
                    self.input = vec![0; INPUT_INITIAL_BYTES];
                }
                self.entry.set_state(ConnState::Waiting);
                return Dispatched::NeedMore;
            }
            if *requests >= ctx.reqs_per_event {
                return Dispatched::Yield;
            }
            if self.output_pending() >= OUTPUT_HIGH_WATER_BYTES {
                return Dispatched::OutputFull;
            }
            let input = &self.input[self.input_start..self.input_end];
            if self.protocol == Protocol::Unknown {
                self.protocol = if input[0] == BINARY_REQUEST_MAGIC {
                    Protocol::Binary
                } else {
                    Protocol::Text
                };
                if log_requests {
                    let name = match self.protocol {
                        Protocol::Binary => "binary",
                        _ => "ascii",
                    };
                    eprintln!("{}: Client using the {name} protocol", self.fd);
                }
            }
            if !state_published {
                self.entry.set_state(ConnState::ParseCmd);
                state_published = true;
            }
            // The fog layer: a parked request waits for its replies; one that has them
            // runs with them. One pointer test on a connection that never used it.
            let upstream_replies = match &mut self.upstream {
                Some(parking) if parking.is_parked() => return Dispatched::Parked,
                Some(parking) => parking.take_replies(),
                None => None,
            };
            let mut session = Session {
                engine: ctx.engine,
                settings: ctx.settings,
                stats: ctx.stats,
                out: &mut self.output,
                resume_keys: self.resume_keys,
                out_high_water_bytes: OUTPUT_HIGH_WATER_BYTES,
                client_fd: self.fd,
                upstream_reply: upstream_replies.as_ref(),
            };
            let binary = self.protocol == Protocol::Binary;
            // `-vv`: where this request's replies start, and whether its request may be
            // logged: not a resumed one (logged already), nor one of a client that has
            // not authenticated (see `verbose`).
            let log = log_requests.then(|| {
                let authenticated = self.auth.is_authenticated() || !ctx.settings.auth.enabled();
                (session.out.len(), self.resume_keys == 0 && authenticated)
            });
            // `-Y`/`-S`: authentication answers first (one branch when it is off).
            let step = match auth::intercept(&mut self.auth, binary, &mut session, input) {
                Some(step) => step,
                #[cfg(test)]
                None if ctx.dispatchers.toy.is_some() => ctx
                    .dispatchers
                    .toy
                    .map_or(Step::Close, |toy| toy(&mut session, input)),
                None if binary => dispatch::binary::handle(&mut session, input),
                None => dispatch::text::handle(&mut session, input),
            };
            if let Some((out_start, log_request)) = log {
                if !matches!(step, Step::NeedMore) {
                    crate::verbose::log_exchange(
                        self.fd,
                        binary,
                        input,
                        &self.output[out_start..],
                        log_request,
                    );
                }
            }
            let available = input.len();
            match step {
                Step::Partial { keys_done } => {
                    // The request stays in the input; it resumes at `keys_done` once the
                    // output drained below the mark (checked above on the next pass).
                    if keys_done <= self.resume_keys {
                        debug_assert!(
                            false,
                            "resumed at {} and stopped at {keys_done}",
                            self.resume_keys
                        );
                        return Dispatched::Close;
                    }
                    self.resume_keys = keys_done;
                    // Counted as a request so that one huge retrieval shares the worker.
                    *requests += 1;
                }
                Step::Consumed(consumed) => {
                    self.resume_keys = 0;
                    // Consuming nothing would loop forever; more than we have is a bug.
                    if consumed == 0 || consumed > available {
                        debug_assert!(false, "dispatcher consumed {consumed} of {available}");
                        return Dispatched::Close;
                    }
                    self.input_start += consumed;
                    *requests += 1;
                }
                Step::NeedMore => {
                    self.entry.set_state(ConnState::Nread);
                    return Dispatched::NeedMore;
                }
                Step::Swallow { consumed, bytes } => {
                    self.resume_keys = 0;
                    if consumed > available {
                        debug_assert!(false, "dispatcher consumed {consumed} of {available}");
                        return Dispatched::Close;
                    }
                    self.input_start += consumed;
                    self.swallow_bytes = bytes;
                    *requests += 1;
                }
                Step::Upstream { keys_done, request } => {
                    // The request stays in the input and runs again with the reply; a
                    // reply must move it on, or it would wait on the upstream forever.
                    if upstream_replies.is_some() && keys_done <= self.resume_keys {
                        debug_assert!(false, "resumed at {keys_done} and parked there again");
                        return Dispatched::Close;
                    }
                    self.resume_keys = keys_done;
                    self.upstream
                        .get_or_insert_with(Box::default)
                        .park(*request);
                    *requests += 1;
                    return Dispatched::Parked;
                }
                Step::Close => {
                    if is_quit(binary, input) {
                        self.close_reason = CloseReason::Normal;
                    }
                    return Dispatched::Close;
                }
                Step::Shutdown => return Dispatched::Shutdown,
                Step::Watch { consumed, kinds } => {
                    // Whatever the client sent after `watch` is ignored, as memcached
                    // ignores it.
                    let _ = consumed;
                    *requests += 1;
                    self.watching = true;
                    return Dispatched::Watch(kinds);
                }
            }
        }
    }

    /// One `write` of the pending output.
    fn flush(&mut self, ctx: &ServiceContext<'_>) -> std::io::Result<()> {
        for _ in 0..EINTR_RETRIES_MAX {
            match self.stream.write(&self.output[self.output_written..]) {
                Ok(written) => {
                    // TLS: ciphertext the socket could not take waits for a writable event.
                    if self.stream.wants_write() {
                        self.write_ready = false;
                    }
                    WorkerCounters::add(&ctx.counters.bytes_written, written as u64);
                    self.output_written += written;
                    if self.output_written == self.output.len() {
                        self.output.clear();
                        self.output_written = 0;
                        if self.output.capacity() > OUTPUT_RETAIN_BYTES {
                            self.output.shrink_to(OUTPUT_RETAIN_BYTES);
                        }
                    } else {
                        // The socket is full; move the rest to the front so that the
                        // buffer holds only unwritten bytes and stays bounded.
                        self.write_ready = false;
                        self.output.drain(..self.output_written);
                        self.output_written = 0;
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.write_ready = false;
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads until the socket is drained or the buffer is full.
    fn fill(&mut self, ctx: &ServiceContext<'_>) -> Fill {
        if self.input_end == self.input.len() {
            if self.input_start > 0 {
                self.input.copy_within(self.input_start..self.input_end, 0);
                self.input_end -= self.input_start;
                self.input_start = 0;
            } else if self.input.len() < ctx.input_limit_bytes {
                let grown = (self.input.len() * 2).min(ctx.input_limit_bytes);
                self.input.resize(grown, 0);
            } else {
                // One request larger than any valid one (e.g. a line with no newline).
                return Fill::TooLarge;
            }
        }
        let mut interrupts = 0;
        loop {
            let space = self.input.len() - self.input_end;
            match self.stream.read(&mut self.input[self.input_end..]) {
                Ok(0) => return Fill::Eof,
                Ok(read) => {
                    WorkerCounters::add(&ctx.counters.bytes_read, read as u64);
                    self.input_end += read;
                    if read < space && !self.eof_reported {
                        // A short read means the socket was drained; edge-triggered
                        // polling reports any later data as a new event (not an end of
                        // file that came with this data: `on_read_closed`).
                        self.read_ready = false;
                    }
                    return Fill::Data;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.read_ready = false;
                    return Fill::Drained;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted && interrupts < EINTR_RETRIES_MAX => {
                    interrupts += 1;
                }
                Err(_) => return Fill::Failed,
            }
        }
    }

    /// Takes the connection apart to become a watcher (`watch`): its socket, file
    /// descriptor, `stats conns` entry, peer and the replies not yet written (its `OK`);
    /// the caller sets the kinds it watches.
    pub fn into_watcher(self) -> crate::watch::NewWatcher {
        let pending = self.output[self.output_written..].to_vec();
        crate::watch::NewWatcher {
            stream: self.stream,
            fd: self.fd,
            entry: self.entry,
            kinds: 0,
            pending,
            peer_addr: self.peer_addr,
        }
    }

    /// Best-effort final write when the server stops.
    pub fn flush_on_shutdown(&mut self, ctx: &ServiceContext<'_>) {
        make_durable_now(ctx);
        if self.has_output() {
            let _ = self.flush(ctx);
        }
    }
}

/// Whether the request that closed the connection was the client's `quit` (a normal
/// close for `watch connevents`), not a protocol error.
#[cold]
fn is_quit(binary: bool, input: &[u8]) -> bool {
    if binary {
        // QUIT and QUITQ.
        matches!(input.get(1), Some(0x07 | 0x17))
    } else {
        let line = input.split(|&b| b == b'\n').next().unwrap_or(b"");
        line.trim_ascii() == b"quit"
    }
}

/// Flushes the slow-tier pool's pending invalidations before a reply that cannot wait
/// for the worker's turn (a closing connection, a shutdown).
fn make_durable_now(ctx: &ServiceContext<'_>) {
    if let Err(e) = ctx.engine.make_durable() {
        eprintln!("fogcached: cannot flush the slow-tier pool: {e}");
    }
}
