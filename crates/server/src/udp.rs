//! UDP (`-U <port>`): memcached 1.6's text protocol over datagrams, framed, split and
//! bounded as memcached frames, splits and bounds it (protocol.txt "UDP protocol";
//! memcached.c `try_read_udp`, `transmit_udp`, `build_udp_header`).
//!
//! **Frame.** Every datagram starts with 8 bytes, four big-endian 16-bit fields: request
//! id, sequence number, datagram count, reserved. A request is one datagram: one whose
//! count is not 1 is dropped unanswered (memcached: "If this is a multi-packet request,
//! drop it"), as is one of 8 bytes or fewer; the sequence number and the reserved field
//! are not looked at. Every reply datagram echoes the request id.
//!
//! **Replies.** memcached builds each reply as a list of response objects and sends each
//! object in datagrams of its own, numbered from 0 with the object's datagram count
//! (`ceil(bytes / 1392)`; 1400 bytes at most, header included). An object is the reply
//! of one command, except that a `get`/`gets`/`gat`/`gats` of several keys has one per
//! key (a miss's is empty; `END` goes in the last key's). A `noreply` or quiet command's
//! object is skipped. An empty object goes out as a header alone, counting 0 datagrams,
//! when it is first in the queue; when one that was sent precedes it, it is finished
//! with that one and sends nothing. The queue is sent after each retrieval command,
//! after `mn`, after `-R` + 1 requests of a datagram and every `-R` after that (its
//! first request is not counted), and at the end of the datagram, so each of those
//! starts the queue afresh. [`Framer`] keeps exactly these rules; the replies'
//! bytes are the text dispatcher's, run as for a TCP connection (with a high-water mark
//! of 0, a multi-key retrieval stops after each hit, which gives the per-key objects).
//!
//! **What is served.** The commands that read and write items (`get gets gat gats bget
//! set add replace append prepend cas delete incr decr touch`, the meta commands
//! `mg ms md ma mn me`), `flush_all`, `version`, `verbosity` and `quit`, as memcached
//! answers them. Everything else is answered `ERROR`, as an unknown command: `stats` in
//! all its forms (fogcached's lists are longer than memcached's, so served they would
//! let a datagram ask for more than memcached sends back), `watch` and `lru_crawler
//! metadump` (a stream, which needs a connection), and the commands that change how the
//! server runs (`lru_crawler`, `lru`, `slabs`, `cache_memlimit`, `shutdown`,
//! `refresh_certs`), which a datagram with a forged source should not reach. A binary
//! request is dropped. So no reply is longer than memcached's to the same datagram but
//! `version`'s (fogcached's version string is longer).
//!
//! **Differences, on purpose.** A request that does not end inside its datagram (a line
//! without its newline, a value cut short) is dropped with the rest of the datagram, and
//! so is the rest of a value refused as too large: nothing of a datagram carries over to
//! the next one. memcached reads the next datagram (whoever sent it, header included) as
//! the rest of the value, which loses that datagram.
//!
//! **Runtime.** Each worker serves its own duplicate of the socket from its `mio::Poll`
//! (memcached's one descriptor per worker thread), under either event loop: the io_uring
//! loop polls the same `mio::Poll`, since one socket carries every client's datagrams and
//! each needs its sender's address, which readiness and `recvfrom`/`sendto` give with
//! memcached's system calls. A datagram wakes every worker; the first to read it serves
//! it. A worker takes at most [`DATAGRAMS_PER_SERVICE_MAX`] datagrams per turn, then
//! its connections get theirs. When the socket cannot take a reply datagram, the rest
//! wait for its writable event and no datagram is read meanwhile, so a port holds at
//! most one dispatcher call's replies (the mark of 0 makes that one value).

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};

use crate::connection::ServiceContext;
use crate::registry::{ConnEntry, ConnState, WorkerCounters};
use crate::session::{Session, Step};

/// The frame header's length.
pub const HEADER_BYTES: usize = 8;
/// memcached's `UDP_MAX_PAYLOAD_SIZE`: a reply datagram, its header included.
pub const DATAGRAM_MAX_BYTES: usize = 1400;
/// Reply bytes per datagram (memcached's `UDP_DATA_SIZE`).
pub const DATA_PER_DATAGRAM_BYTES: usize = DATAGRAM_MAX_BYTES - HEADER_BYTES;
/// memcached's `UDP_READ_BUFFER_SIZE`: a longer request datagram is cut to this.
const READ_BUFFER_BYTES: usize = 65536;
/// Datagrams a port reads per service before the worker's connections get their turn.
pub const DATAGRAMS_PER_SERVICE_MAX: u32 = 64;
/// Dispatcher calls per service (each at most one key of a retrieval), likewise.
const CALLS_PER_SERVICE_MAX: u32 = 1024;
/// memcached's binary request magic: such a datagram is dropped.
const BINARY_REQUEST_MAGIC: u8 = 0x80;
/// The reply to a command not served over UDP.
const NOT_SERVED: &[u8] = b"ERROR\r\n";

/// The commands served over UDP (see the module comment).
const SERVED: &[&[u8]] = &[
    b"get",
    b"gets",
    b"gat",
    b"gats",
    b"bget",
    b"set",
    b"add",
    b"replace",
    b"append",
    b"prepend",
    b"cas",
    b"delete",
    b"incr",
    b"decr",
    b"touch",
    b"mg",
    b"ms",
    b"md",
    b"ma",
    b"mn",
    b"me",
    b"flush_all",
    b"version",
    b"verbosity",
    b"quit",
];

/// What the first line of a request says about its reply's framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `get gets gat gats bget` of this many keys: one response object per key, and the
    /// queue is sent after it.
    Retrieval {
        keys: usize,
    },
    /// `mn`: the queue is sent after it.
    MetaNoop,
    Other,
}

/// The frame header of a datagram of a reply.
fn header(request_id: u16, sequence: u16, total: u16) -> [u8; HEADER_BYTES] {
    let [r0, r1] = request_id.to_be_bytes();
    let [s0, s1] = sequence.to_be_bytes();
    let [t0, t1] = total.to_be_bytes();
    [r0, r1, s0, s1, t0, t1, 0, 0]
}

/// The request id of a datagram, or `None` if memcached would drop it: 8 bytes or fewer,
/// or a datagram count other than 1.
pub fn request_id(datagram: &[u8]) -> Option<u16> {
    if datagram.len() <= HEADER_BYTES || datagram[4..6] != [0, 1] {
        return None;
    }
    Some(u16::from_be_bytes([datagram[0], datagram[1]]))
}

/// Turns response objects into reply datagrams by memcached's rules (module comment).
/// The datagrams are appended to `out` back to back; `ends` holds where each ends.
#[derive(Debug, Default)]
pub struct Framer {
    request_id: u16,
    /// A sent object precedes in the queue: an empty one now finishes with it, unsent.
    after_sent: bool,
    pub out: Vec<u8>,
    pub ends: Vec<usize>,
}

impl Framer {
    /// A new request datagram: its id, and a fresh queue.
    pub fn start(&mut self, request_id: u16) {
        debug_assert!(self.ends.is_empty(), "datagrams of the last request unsent");
        self.request_id = request_id;
        self.after_sent = false;
    }

    /// memcached sent its queue: the next object is first again.
    pub fn queue_sent(&mut self) {
        self.after_sent = false;
    }

    /// One response object that is not skipped (possibly empty).
    pub fn object(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            if !self.after_sent {
                self.datagram(0, 0, &[]);
                self.after_sent = true;
            }
            return;
        }
        // memcached caps the count at USHRT_MAX and writes the sequence's low 16 bits.
        let total = bytes.len().div_ceil(DATA_PER_DATAGRAM_BYTES);
        let total = u16::try_from(total).unwrap_or(u16::MAX);
        for (sequence, data) in bytes.chunks(DATA_PER_DATAGRAM_BYTES).enumerate() {
            self.datagram(sequence as u16, total, data);
        }
        self.after_sent = true;
    }

    fn datagram(&mut self, sequence: u16, total: u16, data: &[u8]) {
        self.out
            .extend_from_slice(&header(self.request_id, sequence, total));
        self.out.extend_from_slice(data);
        debug_assert!(
            self.out.len() - self.ends.last().copied().unwrap_or(0) <= DATAGRAM_MAX_BYTES
        );
        self.ends.push(self.out.len());
    }
}

/// The first line of `payload` (without `\r\n`), if it has its newline.
fn first_line(payload: &[u8]) -> Option<(&[u8], usize)> {
    let end = payload.iter().position(|&b| b == b'\n')?;
    let line = &payload[..end];
    Some((line.strip_suffix(b"\r").unwrap_or(line), end + 1))
}

/// The command of a line and how its reply is framed.
fn classify(line: &[u8]) -> (&[u8], Kind) {
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let command = words.next().unwrap_or(b"");
    let kind = match command {
        b"get" | b"gets" | b"bget" => Kind::Retrieval {
            keys: words.count(),
        },
        // The first word after `gat` is the expiry.
        b"gat" | b"gats" => Kind::Retrieval {
            keys: words.count().saturating_sub(1),
        },
        b"mn" => Kind::MetaNoop,
        _ => Kind::Other,
    };
    (command, kind)
}

/// The datagram being served.
#[derive(Debug)]
struct Current {
    /// `input[at..end]` is what is left of its payload.
    at: usize,
    end: usize,
    /// Keys of the retrieval at `at` already answered (a `Step::Partial`).
    resume_keys: usize,
    kind: Kind,
    /// Requests since memcached last sent its queue for `-R`, and how many it runs
    /// before it does: `-R` + 1 the first time (the datagram's first request does not
    /// count against its budget, memcached's `nreqs`), `-R` after that.
    requests: u32,
    requests_max: u32,
}

/// What a port's service asks of the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpOutcome {
    /// Nothing to read, or waiting for the socket to take a reply: wait for its event.
    Wait,
    /// Its turn is over with datagrams perhaps left: serve it again next turn.
    More,
}

/// One worker's UDP socket and the datagram it is serving.
pub struct UdpPort {
    socket: UdpSocket,
    token: Token,
    fd: i32,
    entry: Arc<ConnEntry>,
    input: Vec<u8>,
    current: Option<Current>,
    /// One dispatcher call's reply bytes.
    reply: Vec<u8>,
    framer: Framer,
    /// Datagrams of `framer` already sent, and where the next starts.
    sent: usize,
    sent_bytes: usize,
    peer: Option<SocketAddr>,
    /// Registered for writable events (a reply datagram waits for room).
    writable: bool,
}

impl UdpPort {
    /// A worker's duplicate of a bound socket, registered with its poll under `token`
    /// and listed in `stats conns` as memcached lists its UDP connections.
    pub fn new(
        mut socket: UdpSocket,
        token: Token,
        registry: &Registry,
        entry: Arc<ConnEntry>,
    ) -> std::io::Result<UdpPort> {
        registry.register(&mut socket, token, Interest::READABLE)?;
        let fd = socket.as_raw_fd();
        Ok(UdpPort {
            socket,
            token,
            fd,
            entry,
            input: vec![0; READ_BUFFER_BYTES],
            current: None,
            reply: Vec::new(),
            framer: Framer::default(),
            sent: 0,
            sent_bytes: 0,
            peer: None,
            writable: false,
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    pub fn socket_mut(&mut self) -> &mut UdpSocket {
        &mut self.socket
    }

    /// Sends replies, serves the datagram in hand and reads the next ones, until the
    /// socket is drained, cannot take a reply, or the port's turn is over.
    pub fn service(&mut self, ctx: &ServiceContext<'_>, registry: &Registry) -> UdpOutcome {
        let mut received = 0u32;
        let mut calls = 0u32;
        loop {
            if !self.send_replies(ctx) {
                if !self.writable {
                    self.writable = true;
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if let Err(e) = registry.reregister(&mut self.socket, self.token, interest) {
                        // Without the event the replies would wait for the next datagram.
                        eprintln!("fogcached: UDP socket: cannot wait for room: {e}");
                        self.drop_replies();
                        continue;
                    }
                }
                self.entry.set_state(ConnState::Mwrite);
                return UdpOutcome::Wait;
            }
            if self.writable {
                self.writable = false;
                let _ = registry.reregister(&mut self.socket, self.token, Interest::READABLE);
            }
            if self.current.is_some() {
                if calls >= CALLS_PER_SERVICE_MAX {
                    return UdpOutcome::More;
                }
                calls += 1;
                self.serve_one(ctx);
                continue;
            }
            if received >= DATAGRAMS_PER_SERVICE_MAX {
                return UdpOutcome::More;
            }
            match self.socket.recv_from(&mut self.input) {
                Ok((len, peer)) => {
                    received += 1;
                    WorkerCounters::add(&ctx.counters.bytes_read, len as u64);
                    self.entry.set_last_cmd_s(ctx.now_s);
                    if let Some(request_id) = request_id(&self.input[..len]) {
                        self.framer.start(request_id);
                        self.peer = Some(peer);
                        self.current = Some(Current {
                            at: HEADER_BYTES,
                            end: len,
                            resume_keys: 0,
                            kind: Kind::Other,
                            requests: 0,
                            requests_max: ctx.reqs_per_event.saturating_add(1),
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.entry.set_state(ConnState::Read);
                    return UdpOutcome::Wait;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    if ctx.settings.verbosity.load(Ordering::Relaxed) > 0 {
                        eprintln!("fogcached: UDP receive failed: {e}");
                    }
                    return UdpOutcome::Wait;
                }
            }
        }
    }

    /// Runs the next request of the datagram in hand (or the next key of a retrieval),
    /// framing its reply.
    fn serve_one(&mut self, ctx: &ServiceContext<'_>) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        let payload = &self.input[current.at..current.end];
        if payload.is_empty() {
            self.current = None;
            return;
        }
        if current.resume_keys == 0 {
            // memcached sends its queue when its `-R` budget runs out.
            if current.requests >= current.requests_max {
                self.framer.queue_sent();
                current.requests = 0;
                current.requests_max = ctx.reqs_per_event;
            }
            let Some((line, line_bytes)) = first_line(payload) else {
                // A line cut short by the datagram's end: dropped, as memcached drops it.
                self.current = None;
                return;
            };
            if payload[0] == BINARY_REQUEST_MAGIC {
                self.current = None;
                return;
            }
            let (command, kind) = classify(line);
            if !SERVED.contains(&command) {
                self.framer.object(NOT_SERVED);
                if ctx.settings.verbosity.load(Ordering::Relaxed) > 1 {
                    crate::verbose::log_exchange(self.fd, false, payload, NOT_SERVED, true);
                }
                current.at += line_bytes;
                current.requests += 1;
                return;
            }
            current.kind = kind;
        }
        self.entry.set_state(ConnState::ParseCmd);
        self.reply.clear();
        let mut session = Session {
            engine: ctx.engine,
            settings: ctx.settings,
            stats: ctx.stats,
            out: &mut self.reply,
            resume_keys: current.resume_keys,
            // Stop after every hit: one response object per key, as memcached's.
            out_high_water_bytes: 0,
            client_fd: self.fd,
            upstream_reply: None,
        };
        let step = crate::dispatch::text::handle(&mut session, payload);
        if ctx.settings.verbosity.load(Ordering::Relaxed) > 1 && step != Step::NeedMore {
            let log_request = current.resume_keys == 0;
            crate::verbose::log_exchange(self.fd, false, payload, &self.reply, log_request);
        }
        let available = payload.len();
        match step {
            Step::Consumed(consumed) => {
                debug_assert!(consumed > 0 && consumed <= available);
                match current.kind {
                    // A retrieval that ran (not one refused at its line) ends in END.
                    Kind::Retrieval { keys }
                        if self.reply.ends_with(crate::dispatch::text::END) =>
                    {
                        if keys.saturating_sub(current.resume_keys) > 1 {
                            // The keys before the last one missed.
                            self.framer.object(&[]);
                        }
                        self.framer.object(&self.reply);
                        self.framer.queue_sent();
                    }
                    Kind::MetaNoop => {
                        self.framer.object(&self.reply);
                        self.framer.queue_sent();
                    }
                    // An empty reply is a `noreply` or quiet one: skipped.
                    _ if self.reply.is_empty() => {}
                    _ => self.framer.object(&self.reply),
                }
                current.at += consumed.min(available);
                current.resume_keys = 0;
                current.requests += 1;
            }
            Step::Partial { keys_done } => {
                // Misses, then one hit: its object, after empty ones for the misses.
                if keys_done.saturating_sub(current.resume_keys) > 1 {
                    self.framer.object(&[]);
                }
                self.framer.object(&self.reply);
                debug_assert!(keys_done > current.resume_keys);
                if keys_done <= current.resume_keys {
                    self.current = None;
                    return;
                }
                current.resume_keys = keys_done;
            }
            Step::Swallow { consumed, bytes } => {
                if !self.reply.is_empty() {
                    self.framer.object(&self.reply);
                }
                // The refused value goes, within this datagram only.
                let skipped = consumed.saturating_add(bytes).min(available);
                current.at += skipped;
                current.resume_keys = 0;
                current.requests += 1;
            }
            Step::Close => {
                // `quit`: memcached's empty object, then the rest of the datagram goes.
                self.framer.object(&self.reply);
                self.current = None;
            }
            // The end of the datagram is the end of the request: dropped.
            Step::NeedMore => self.current = None,
            // Not served over UDP (`watch`, `shutdown`), and `-U` is refused with
            // `--upstream`.
            Step::Watch { .. } | Step::Shutdown | Step::Upstream { .. } => {
                debug_assert!(false, "{step:?} over UDP");
                self.current = None;
            }
        }
    }

    /// Sends the framed datagrams to the request's sender. False if the socket has no
    /// room for the next one (it waits for a writable event).
    fn send_replies(&mut self, ctx: &ServiceContext<'_>) -> bool {
        if self.sent == self.framer.ends.len() {
            self.drop_replies();
            return true;
        }
        let Some(peer) = self.peer else {
            self.drop_replies();
            return true;
        };
        // `--slow-durability power`: no reply leaves before the invalidations it depends
        // on are on the pool (a TCP connection's are held for the worker's group flush;
        // a datagram's reply flushes here).
        let mark = ctx.engine.durability_mark();
        if !ctx.engine.is_durable(mark) {
            if let Err(e) = ctx.engine.make_durable() {
                eprintln!("fogcached: cannot flush the slow-tier pool: {e}");
            }
        }
        while self.sent < self.framer.ends.len() {
            let end = self.framer.ends[self.sent];
            let datagram = &self.framer.out[self.sent_bytes..end];
            match self.socket.send_to(datagram, peer) {
                Ok(written) => {
                    WorkerCounters::add(&ctx.counters.bytes_written, written as u64);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // UDP promises nothing: the client treats a lost reply as a miss.
                    if ctx.settings.verbosity.load(Ordering::Relaxed) > 0 {
                        eprintln!("fogcached: UDP reply to {peer} not sent: {e}");
                    }
                }
            }
            self.sent += 1;
            self.sent_bytes = end;
        }
        self.drop_replies();
        true
    }

    fn drop_replies(&mut self) {
        self.framer.out.clear();
        self.framer.ends.clear();
        self.sent = 0;
        self.sent_bytes = 0;
        if self.framer.out.capacity() > crate::connection::OUTPUT_RETAIN_BYTES {
            self.framer
                .out
                .shrink_to(crate::connection::OUTPUT_RETAIN_BYTES);
        }
        if self.reply.capacity() > crate::connection::OUTPUT_RETAIN_BYTES {
            self.reply.shrink_to(crate::connection::OUTPUT_RETAIN_BYTES);
        }
    }
}

/// Binds a UDP socket on every `-l` address (a `notls:` one too: TLS is TCP's) at
/// `port` (0: a port the kernel picks, per address), as memcached binds its UDP port
/// beside each TCP one. Non-blocking, ready to be duplicated for each worker.
pub fn bind_all(entries: &[String], port: u16) -> anyhow::Result<Vec<std::net::UdpSocket>> {
    use anyhow::Context;
    let mut sockets = Vec::new();
    for entry in entries {
        let entry = entry
            .strip_prefix(crate::listener::NOTLS_PREFIX)
            .unwrap_or(entry);
        for addr in crate::listener::resolve(entry, port)? {
            let socket = std::net::UdpSocket::bind(addr)
                .with_context(|| format!("failed to listen on UDP {addr}"))?;
            socket.set_nonblocking(true)?;
            sockets.push(socket);
        }
    }
    Ok(sockets)
}

/// `udp:<ip>:<port>`, as memcached's `stats conns` names a UDP socket.
pub fn label(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(_) => format!("udp:{addr}"),
        SocketAddr::V6(_) => format!("udp6:{addr}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The datagrams as (request id, sequence, total, data).
    fn datagrams(framer: &Framer) -> Vec<(u16, u16, u16, Vec<u8>)> {
        let mut start = 0;
        framer
            .ends
            .iter()
            .map(|&end| {
                let d = &framer.out[start..end];
                start = end;
                let field = |at: usize| u16::from_be_bytes([d[at], d[at + 1]]);
                assert_eq!(&d[6..8], &[0, 0]);
                (field(0), field(2), field(4), d[HEADER_BYTES..].to_vec())
            })
            .collect()
    }

    #[test]
    fn a_request_is_one_datagram_of_more_than_its_header() {
        assert_eq!(
            request_id(b"\xab\xcd\x00\x00\x00\x01\x00\x00v"),
            Some(0xabcd)
        );
        // The sequence number and the reserved field are not looked at.
        assert_eq!(request_id(b"\x00\x03\x00\x05\x00\x01\xff\xffv"), Some(3));
        assert_eq!(request_id(b"\x00\x01\x00\x00\x00\x02\x00\x00v"), None);
        assert_eq!(request_id(b"\x00\x01\x00\x00\x00\x00\x00\x00v"), None);
        assert_eq!(request_id(b"\x00\x01\x00\x00\x00\x01\x00\x00"), None);
        assert_eq!(request_id(b"vers"), None);
    }

    /// The rules memcached 1.6.18 showed for these sequences of response objects.
    #[test]
    fn objects_are_framed_as_memcached_frames_them() {
        let mut framer = Framer::default();
        framer.start(7);
        // `get zz a b a`: a miss first (a header alone), a hit, a miss finished with
        // the hit before it, a hit with END.
        framer.object(b"");
        framer.object(b"VALUE a 0 1\r\nx\r\n");
        framer.object(b"");
        framer.object(b"VALUE a 0 1\r\nx\r\nEND\r\n");
        assert_eq!(
            datagrams(&framer),
            [
                (7, 0, 0, b"".to_vec()),
                (7, 0, 1, b"VALUE a 0 1\r\nx\r\n".to_vec()),
                (7, 0, 1, b"VALUE a 0 1\r\nx\r\nEND\r\n".to_vec()),
            ]
        );
        // A sent queue makes the next empty object first again.
        framer.ends.clear();
        framer.out.clear();
        framer.queue_sent();
        framer.object(b"");
        framer.object(b"");
        assert_eq!(datagrams(&framer), [(7, 0, 0, b"".to_vec())]);
    }

    #[test]
    fn an_object_is_split_into_datagrams_of_1400_bytes() {
        let mut framer = Framer::default();
        framer.start(1);
        let reply = vec![b'x'; 2 * DATA_PER_DATAGRAM_BYTES + 1];
        framer.object(&reply);
        let sent = datagrams(&framer);
        assert_eq!(sent.len(), 3);
        for (sequence, (_, seq, total, data)) in sent.iter().enumerate() {
            assert_eq!((*seq as usize, *total), (sequence, 3));
            assert!(data.len() + HEADER_BYTES <= DATAGRAM_MAX_BYTES);
        }
        assert_eq!(sent[0].3.len() + HEADER_BYTES, DATAGRAM_MAX_BYTES);
        assert_eq!(sent[2].3.len(), 1);
        let joined: Vec<u8> = sent.iter().flat_map(|d| d.3.clone()).collect();
        assert_eq!(joined, reply);
    }

    #[test]
    fn the_framing_of_a_line_is_read_from_its_command() {
        assert_eq!(classify(b"get a b c").1, Kind::Retrieval { keys: 3 });
        assert_eq!(classify(b"  gets  a   b").1, Kind::Retrieval { keys: 2 });
        assert_eq!(classify(b"gat 100 a b").1, Kind::Retrieval { keys: 2 });
        assert_eq!(classify(b"mn").1, Kind::MetaNoop);
        assert_eq!(classify(b"stats settings").0, b"stats");
        assert_eq!(first_line(b"get a\r\nrest"), Some((&b"get a"[..], 7)));
        assert_eq!(first_line(b"get a"), None);
    }
}
