//! `watch`: connections that stream the cache's event log, in memcached's line format.
//!
//! A client sends `watch [fetchers] [mutations] [evictions] [connevents] [sysevents]
//! [migrations]`, gets `OK`, and
//! from then on receives one line per event of those kinds (no kind: fetchers, as
//! memcached). Its worker hands the socket to the *logger* thread (memcached's design:
//! one thread writes to every watcher), which drains the engine's bounded event log
//! ([`engine::EventLog`]), formats each event once per kind and copies the line into the
//! buffer of every watcher of that kind.
//!
//! Bounds: the engine's log holds at most `EVENT_LOG_CAPACITY` events; each watcher
//! buffers at most [`WATCHER_BUFFER_BYTES`] (memcached's `watcher_logbuf_size` default).
//! Whatever does not fit is dropped and counted, and the watcher gets memcached's
//! `skipped=<n>` line before its next line, so a slow watcher costs lines, never memory
//! or a request's time. A watcher leaves when it closes its socket (anything it sends is
//! ignored, as memcached ignores it).
//!
//! Line formats (memcached 1.6's, byte for byte; `ts` prints its microseconds without
//! leading zeros, as memcached's `%d.%d` does):
//!
//! ```text
//! ts=<s>.<us> gid=<n> type=item_get key=<key> status=found|not_found clsid=<c> cfd=<fd> size=<bytes>
//! ts=<s>.<us> gid=<n> type=item_store key=<key> status=stored|not_stored|exists|not_found|too_large|no_memory cmd=set|add|replace|append|prepend|cas ttl=<s> clsid=<c> cfd=<fd> size=<bytes>
//! ts=<s>.<us> gid=<n> type=eviction key=<key> fetch=yes|no ttl=<s>|-1 la=<s> clsid=<c> size=<bytes>
//! ts=<s>.<us> gid=<n> type=promotion|demotion key=<key> la=<s> clsid=<c> size=<bytes>
//! ts=<s>.<us> gid=<n> type=conn_new rip=<ip>|unix rport=<port>|0 transport=tcp|local cfd=<fd>
//! ts=<s>.<us> gid=<n> type=conn_close rip=<ip> rport=<port> transport=tcp reason=normal|error|idle_timeout|shutdown cfd=<fd>
//! ts=<s>.<us> gid=<n> type=slab_move src=<c> dst=<c>
//! ts=<s>.<us> gid=<n> type=lru_crawler crawler=<c> lru=hot|warm|cold low_mark=<n> next_reclaims=<n> since_run=<s> next_run=<s> elapsed=<s> examined=<n> reclaimed=<n>
//! ```
//!
//! `sysevents` are the slab automover's decisions and, per LRU segment a crawler pass
//! walked, its counts (`crawler.rs` says how each is taken; under the hotspot and
//! hyperbolic policies the segments are their queues, `lru=q0` to `q4`). memcached's
//! `rawcmds` and `proxy*` kinds are answered `ERROR`: fogcached records no raw commands
//! and has no proxy.
//!
//! Keys are URI-encoded as memcached encodes them. A slow-tier item's line ends with
//! ` tier=slow` (class numbers are per tier); promotions and demotions are fogcached's own
//! stream (`watch migrations`).

use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use engine::events::kind;
use engine::{CloseReason, Event, EventWhat, StoreMode, StoreOutcome, TierId};

use crate::registry::{ConnEntry, ConnState};
use crate::runtime::Shared;
use crate::stream::Stream;

/// Bytes a watcher may have waiting to be written (memcached's `watcher_logbuf_size`
/// default, 256 KiB); lines beyond it are skipped and counted.
pub const WATCHER_BUFFER_BYTES: usize = 256 * 1024;
/// Watchers at once; memcached allows 20 (`WATCHER_LIMIT`).
pub const WATCHERS_MAX: usize = 20;
/// memcached's reply when every watcher slot is taken.
pub const WATCHERS_FULL: &[u8] = b"WATCHER_TOO_MANY log watcher limit reached\r\n";
/// How often the logger drains the event log while somebody watches.
const DRAIN_INTERVAL: Duration = Duration::from_millis(10);
/// Events taken from the log per drain.
const DRAIN_BATCH_MAX: usize = 4096;
/// Hand-off queue from the workers to the logger.
const HANDOFF_CAPACITY: usize = 64;

/// The kinds a `watch` line asks for, as an event-log mask; `None` for an unknown word
/// (memcached answers `ERROR`).
pub fn parse_kinds<'a>(words: impl Iterator<Item = &'a [u8]>) -> Option<u32> {
    let mut kinds = 0;
    for word in words {
        kinds |= match word {
            b"fetchers" => kind::FETCHES,
            b"mutations" => kind::MUTATIONS,
            b"evictions" => kind::EVICTIONS,
            b"migrations" => kind::MIGRATIONS,
            b"connevents" => kind::CONNECTIONS,
            b"sysevents" => kind::SYSTEM,
            _ => return None,
        };
    }
    // No kind at all: memcached's default.
    Some(if kinds == 0 { kind::FETCHES } else { kinds })
}

/// A connection on its way from its worker to the logger.
pub struct NewWatcher {
    pub stream: Stream,
    pub fd: i32,
    pub entry: Arc<ConnEntry>,
    pub kinds: u32,
    /// Replies not yet written when it turned into a watcher (its `OK`).
    pub pending: Vec<u8>,
    /// Its peer, for its own `conn_close` line.
    pub peer_addr: Option<std::net::SocketAddr>,
}

/// The workers' handle on the logger thread.
pub struct Logger {
    sender: Sender<NewWatcher>,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl Logger {
    /// Starts the logger thread (it sleeps on its hand-off queue until a watcher comes,
    /// and ends once the server is gone or stopping).
    pub fn spawn(shared: std::sync::Weak<Shared>) -> std::io::Result<Logger> {
        let (sender, receiver) = crossbeam_channel::bounded(HANDOFF_CAPACITY);
        let thread = std::thread::Builder::new()
            .name("fc-logger".to_owned())
            .spawn(move || run(&shared, &receiver))?;
        Ok(Logger {
            sender,
            thread: parking_lot::Mutex::new(Some(thread)),
        })
    }

    /// Hands a connection to the logger; gives it back if the hand-off queue is full.
    pub fn add(&self, watcher: NewWatcher) -> Result<(), NewWatcher> {
        self.sender.try_send(watcher).map_err(|e| e.into_inner())
    }

    /// Waits for the thread after a shutdown was requested (it notices within
    /// `DRAIN_INTERVAL` or at its next hand-off wake-up).
    pub fn join(&self) {
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

struct Watcher {
    stream: Stream,
    fd: i32,
    entry: Arc<ConnEntry>,
    kinds: u32,
    /// Bytes waiting to be written.
    out: Vec<u8>,
    /// Lines dropped since the last `skipped=` line.
    skipped: u64,
    peer_addr: Option<std::net::SocketAddr>,
}

impl Watcher {
    /// Queues `line`, or counts it as skipped when the buffer is full. Returns whether
    /// it was queued.
    fn offer(&mut self, line: &[u8]) -> bool {
        if self.skipped > 0 {
            let note = format!("skipped={}\n", self.skipped);
            if self.out.len() + note.len() + line.len() > WATCHER_BUFFER_BYTES {
                self.skipped += 1;
                return false;
            }
            self.out.extend_from_slice(note.as_bytes());
            self.skipped = 0;
        }
        if self.out.len() + line.len() > WATCHER_BUFFER_BYTES {
            self.skipped += 1;
            return false;
        }
        self.out.extend_from_slice(line);
        true
    }

    /// Writes what it can; false when the watcher is gone.
    fn flush(&mut self) -> bool {
        // A TLS watcher: ciphertext of earlier lines first (it is sent as room appears).
        if self.stream.wants_write() && self.stream.flush().is_err() {
            return false;
        }
        while !self.out.is_empty() {
            match self.stream.write(&self.out) {
                Ok(0) => return false,
                Ok(written) => {
                    self.out.drain(..written);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        true
    }

    /// Whether the client is still there: input is read and ignored; end of file or an
    /// error means it left.
    fn still_connected(&mut self) -> bool {
        let mut scratch = [0u8; 512];
        // Bounded: at most a few reads of whatever it sent since the last look.
        for _ in 0..16 {
            match self.stream.read(&mut scratch) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        true
    }
}

fn run(shared: &std::sync::Weak<Shared>, receiver: &Receiver<NewWatcher>) {
    let mut watchers: Vec<Watcher> = Vec::new();
    let mut events: Vec<Event> = Vec::new();
    let mut line = Vec::with_capacity(512);
    loop {
        engine::fault::panic_point();
        // Asleep on the hand-off queue while nobody watches; a drain tick otherwise.
        let timeout = if watchers.is_empty() {
            Duration::from_millis(100)
        } else {
            DRAIN_INTERVAL
        };
        let incoming = match receiver.recv_timeout(timeout) {
            Ok(watcher) => Some(watcher),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let Some(shared) = shared.upgrade() else {
            break;
        };
        if shared.settings.shutdown_requested.load(Ordering::Acquire) {
            for watcher in watchers.drain(..) {
                close(&shared, watcher, CloseReason::Shutdown);
            }
            break;
        }
        let queues = shared.engine.config().policy.lists_are_queues();
        for new in incoming.into_iter().chain(receiver.try_iter()) {
            new.entry.set_state(ConnState::Watch);
            watchers.push(Watcher {
                stream: new.stream,
                fd: new.fd,
                entry: new.entry,
                kinds: new.kinds,
                out: new.pending,
                skipped: 0,
                peer_addr: new.peer_addr,
            });
        }
        let log = shared.engine.events();
        let wanted = watchers.iter().fold(0, |kinds, w| kinds | w.kinds);
        // A watcher counted but still on its way here (its dispatcher already turned its
        // kinds on): keep every kind on until it arrives.
        let in_flight =
            shared.stats.runtime.watchers.load(Ordering::Relaxed) as usize > watchers.len();
        if in_flight {
            log.add_wanted(wanted);
        } else {
            log.set_wanted(wanted);
        }
        if wanted != 0 {
            events.clear();
            let dropped = log.drain(&mut events, DRAIN_BATCH_MAX);
            let runtime = &shared.stats.runtime;
            if dropped > 0 {
                for watcher in &mut watchers {
                    watcher.skipped += dropped;
                }
                runtime
                    .watcher_lines_skipped
                    .fetch_add(dropped, Ordering::Relaxed);
            }
            let (mut sent, mut skipped) = (0, 0);
            for event in &events {
                let event_kind = kind_of(&event.what);
                line.clear();
                format_event(event, queues, &mut line);
                for watcher in watchers.iter_mut().filter(|w| w.kinds & event_kind != 0) {
                    if watcher.offer(&line) {
                        sent += 1;
                    } else {
                        skipped += 1;
                    }
                }
            }
            runtime
                .watcher_lines_sent
                .fetch_add(sent, Ordering::Relaxed);
            runtime
                .watcher_lines_skipped
                .fetch_add(skipped, Ordering::Relaxed);
        }
        let mut index = 0;
        while index < watchers.len() {
            let watcher = &mut watchers[index];
            if watcher.flush() && watcher.still_connected() {
                index += 1;
            } else {
                let gone = watchers.swap_remove(index);
                close(&shared, gone, CloseReason::Normal);
            }
        }
        if watchers.is_empty() && shared.stats.runtime.watchers.load(Ordering::Relaxed) == 0 {
            log.set_wanted(0);
        }
    }
}

/// Closes a watcher's connection and removes it from the connection table.
fn close(shared: &Shared, watcher: Watcher, reason: CloseReason) {
    crate::worker::record_connection(shared, false, watcher.peer_addr, reason, watcher.fd);
    watcher.entry.set_state(ConnState::Closing);
    shared
        .stats
        .runtime
        .watchers
        .fetch_sub(1, Ordering::Relaxed);
    shared.stats.runtime.connections.remove(watcher.fd);
    shared
        .stats
        .curr_connections
        .fetch_sub(1, Ordering::Relaxed);
    if shared.verbosity() > 1 {
        eprintln!("<{} connection closed.", watcher.fd);
    }
    drop(watcher);
}

fn kind_of(what: &EventWhat) -> u32 {
    match what {
        EventWhat::Fetched { .. } => kind::FETCHES,
        EventWhat::Stored { .. } => kind::MUTATIONS,
        EventWhat::Evicted { .. } => kind::EVICTIONS,
        EventWhat::Moved { .. } => kind::MIGRATIONS,
        EventWhat::Connection { .. } => kind::CONNECTIONS,
        EventWhat::SlabMove { .. } | EventWhat::CrawlerStatus(_) => kind::SYSTEM,
    }
}

/// Appends `event` as memcached prints it, with its newline. `queues`: LRU segments are
/// the multi-queue's (hotspot, hyperbolic), named `q<n>` in crawler lines.
pub fn format_event(event: &Event, queues: bool, out: &mut Vec<u8>) {
    use std::io::Write as _;
    let seconds = event.unix_us / 1_000_000;
    let micros = event.unix_us % 1_000_000;
    // Writing to a Vec cannot fail.
    let _ = write!(out, "ts={seconds}.{micros} gid={} type=", event.seq);
    let key = &event.key;
    let slow = |tier: TierId| {
        if tier == TierId::Slow {
            " tier=slow"
        } else {
            ""
        }
    };
    match event.what {
        EventWhat::Fetched { hit, requester } => {
            out.extend_from_slice(b"item_get key=");
            uri_encode(key, out);
            let (status, class_id, size, tier) = match hit {
                Some(item) => ("found", item.class_id, item.value_bytes, slow(item.tier)),
                None => ("not_found", 0, 0, ""),
            };
            let _ = write!(
                out,
                " status={status} clsid={class_id} cfd={requester} size={size}{tier}"
            );
        }
        EventWhat::Stored {
            mode,
            compare,
            outcome,
            ttl_s,
            class_id,
            value_bytes,
            requester,
        } => {
            out.extend_from_slice(b"item_store key=");
            uri_encode(key, out);
            let status = match outcome {
                StoreOutcome::Stored { .. } => "stored",
                StoreOutcome::NotStored => "not_stored",
                StoreOutcome::Exists => "exists",
                StoreOutcome::NotFound => "not_found",
                StoreOutcome::TooLarge => "too_large",
                StoreOutcome::OutOfMemory => "no_memory",
            };
            let command = match (mode, compare) {
                (_, true) => "cas",
                (StoreMode::Set, false) => "set",
                (StoreMode::Add, false) => "add",
                (StoreMode::Replace, false) => "replace",
                (StoreMode::Append, false) => "append",
                (StoreMode::Prepend, false) => "prepend",
            };
            let _ = write!(
                out,
                " status={status} cmd={command} ttl={ttl_s} clsid={class_id} cfd={requester} size={value_bytes}"
            );
        }
        EventWhat::Evicted {
            item,
            fetched,
            ttl_s,
            idle_s,
        } => {
            out.extend_from_slice(b"eviction key=");
            uri_encode(key, out);
            let fetched = if fetched { "yes" } else { "no" };
            let ttl = ttl_s.map_or(-1, i64::from);
            let _ = write!(
                out,
                " fetch={fetched} ttl={ttl} la={idle_s} clsid={} size={}{}",
                item.class_id,
                item.value_bytes,
                slow(item.tier)
            );
        }
        EventWhat::Connection {
            opened,
            peer,
            reason,
            fd,
        } => {
            // memcached's `_logger_util_addr_endpoint`: the bare address (IPv6 without
            // brackets); a unix-socket client is `unix`, port 0, transport `local`.
            let (ip, port, transport) = match peer {
                Some(addr) => (addr.ip().to_string(), addr.port(), "tcp"),
                None => ("unix".to_owned(), 0, "local"),
            };
            if opened {
                let _ = write!(
                    out,
                    "conn_new rip={ip} rport={port} transport={transport} cfd={fd}"
                );
            } else {
                let _ = write!(
                    out,
                    "conn_close rip={ip} rport={port} transport={transport} reason={} cfd={fd}",
                    reason.name()
                );
            }
        }
        EventWhat::SlabMove { src, dst } => {
            let _ = write!(out, "slab_move src={src} dst={dst}");
        }
        EventWhat::CrawlerStatus(status) => {
            let _ = write!(out, "lru_crawler crawler={} lru=", status.class_id);
            match (queues, status.segment) {
                (false, 0) => out.extend_from_slice(b"hot"),
                (false, 1) => out.extend_from_slice(b"warm"),
                (false, 2) => out.extend_from_slice(b"cold"),
                (_, queue) => {
                    let _ = write!(out, "q{queue}");
                }
            }
            let _ = write!(
                out,
                " low_mark={} next_reclaims={} since_run={} next_run={} elapsed={} examined={} reclaimed={}{}",
                status.low_mark,
                status.next_reclaims,
                status.since_run_s,
                status.next_run_s,
                status.elapsed_s,
                status.examined,
                status.reclaimed,
                slow(status.tier)
            );
        }
        EventWhat::Moved { item, from, idle_s } => {
            let direction = if from == TierId::Slow {
                "promotion"
            } else {
                "demotion"
            };
            out.extend_from_slice(direction.as_bytes());
            out.extend_from_slice(b" key=");
            uri_encode(key, out);
            let _ = write!(
                out,
                " la={idle_s} clsid={} size={}{}",
                item.class_id,
                item.value_bytes,
                slow(item.tier)
            );
        }
    }
    out.push(b'\n');
}

/// memcached's `uriencode`: letters, digits and `-._~` stay, every other byte is `%XX`.
pub fn uri_encode(bytes: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::ItemFacts;

    fn line(seq: u64, unix_us: u64, key: &[u8], what: EventWhat) -> String {
        let mut out = Vec::new();
        format_event(
            &Event {
                unix_us,
                seq,
                key: key.into(),
                what,
            },
            false,
            &mut out,
        );
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn lines_are_memcached_s() {
        let dram = |class_id, value_bytes| ItemFacts {
            tier: TierId::Dram,
            class_id,
            value_bytes,
        };
        // The lines below are memcached 1.6.18's for the same events (`watch`).
        assert_eq!(
            line(
                11,
                1_795_613_227_898_220,
                b"foo:1",
                EventWhat::Stored {
                    mode: StoreMode::Set,
                    compare: false,
                    outcome: StoreOutcome::Stored { cas: 1 },
                    ttl_s: 100,
                    class_id: 1,
                    value_bytes: 3,
                    requester: 25,
                }
            ),
            "ts=1795613227.898220 gid=11 type=item_store key=foo%3A1 status=stored cmd=set ttl=100 clsid=1 cfd=25 size=3\n"
        );
        assert_eq!(
            line(
                12,
                1_795_613_227_898_224,
                b"foo:1",
                EventWhat::Fetched {
                    hit: Some(dram(1, 3)),
                    requester: 25
                }
            ),
            "ts=1795613227.898224 gid=12 type=item_get key=foo%3A1 status=found clsid=1 cfd=25 size=3\n"
        );
        assert_eq!(
            line(
                13,
                1_795_613_227_898_275,
                b"nokey",
                EventWhat::Fetched {
                    hit: None,
                    requester: 25
                }
            ),
            "ts=1795613227.898275 gid=13 type=item_get key=nokey status=not_found clsid=0 cfd=25 size=0\n"
        );
        assert_eq!(
            line(
                30,
                1_795_613_227_898_408,
                b"sp%ace",
                EventWhat::Stored {
                    mode: StoreMode::Set,
                    compare: true,
                    outcome: StoreOutcome::Exists,
                    ttl_s: 0,
                    class_id: 1,
                    value_bytes: 1,
                    requester: 25,
                }
            ),
            "ts=1795613227.898408 gid=30 type=item_store key=sp%25ace status=exists cmd=cas ttl=0 clsid=1 cfd=25 size=1\n"
        );
        // memcached prints the microseconds with %d: 026492 shows as 26492.
        assert_eq!(
            line(
                3,
                1_795_613_273_026_494,
                b"key1",
                EventWhat::Evicted {
                    item: dram(12, 1000),
                    fetched: false,
                    ttl_s: None,
                    idle_s: 0
                }
            ),
            "ts=1795613273.26494 gid=3 type=eviction key=key1 fetch=no ttl=-1 la=0 clsid=12 size=1000\n"
        );
        assert_eq!(
            line(
                4,
                1_795_613_273_000_001,
                b"k",
                EventWhat::Moved {
                    item: ItemFacts {
                        tier: TierId::Slow,
                        class_id: 5,
                        value_bytes: 10
                    },
                    from: TierId::Dram,
                    idle_s: 7
                }
            ),
            "ts=1795613273.1 gid=4 type=demotion key=k la=7 clsid=5 size=10 tier=slow\n"
        );
    }

    /// memcached 1.6.18's `connevents` and `sysevents` lines (a unix-socket client: `-s`).
    #[test]
    fn connection_and_system_lines_are_memcached_s() {
        let conn = |opened, peer, reason| EventWhat::Connection {
            opened,
            peer,
            reason,
            fd: 25,
        };
        let tcp: std::net::SocketAddr = "127.0.0.1:35248".parse().unwrap();
        assert_eq!(
            line(10, 1_795_766_147_664_548, b"", conn(true, Some(tcp), CloseReason::Normal)),
            "ts=1795766147.664548 gid=10 type=conn_new rip=127.0.0.1 rport=35248 transport=tcp cfd=25\n"
        );
        assert_eq!(
            line(11, 1_795_766_147_664_588, b"", conn(false, Some(tcp), CloseReason::Error)),
            "ts=1795766147.664588 gid=11 type=conn_close rip=127.0.0.1 rport=35248 transport=tcp reason=error cfd=25\n"
        );
        assert_eq!(
            line(
                2,
                1_795_766_813_933_604,
                b"",
                conn(true, None, CloseReason::Normal)
            ),
            "ts=1795766813.933604 gid=2 type=conn_new rip=unix rport=0 transport=local cfd=25\n"
        );
        assert_eq!(
            line(5, 1_795_766_822_258_804, b"", conn(false, None, CloseReason::IdleTimeout)),
            "ts=1795766822.258804 gid=5 type=conn_close rip=unix rport=0 transport=local reason=idle_timeout cfd=25\n"
        );
        let v6: std::net::SocketAddr = "[::1]:4000".parse().unwrap();
        assert!(line(1, 1, b"", conn(true, Some(v6), CloseReason::Normal))
            .contains(" rip=::1 rport=4000 "));
        assert_eq!(
            line(7, 1_000_000, b"", EventWhat::SlabMove { src: 5, dst: 0 }),
            "ts=1.0 gid=7 type=slab_move src=5 dst=0\n"
        );
        let status = engine::CrawlerStatus {
            tier: TierId::Slow,
            class_id: 3,
            segment: 2,
            low_mark: 1,
            next_reclaims: 4,
            since_run_s: 5,
            next_run_s: 3600,
            elapsed_s: 0,
            examined: 10,
            reclaimed: 2,
        };
        assert_eq!(
            line(8, 1_000_000, b"", EventWhat::CrawlerStatus(status)),
            "ts=1.0 gid=8 type=lru_crawler crawler=3 lru=cold low_mark=1 next_reclaims=4 \
             since_run=5 next_run=3600 elapsed=0 examined=10 reclaimed=2 tier=slow\n"
        );
    }

    #[test]
    fn kinds_are_memcached_s_words_plus_migrations() {
        let words = |line: &'static str| parse_kinds(line.split(' ').map(str::as_bytes));
        assert_eq!(
            words("fetchers mutations"),
            Some(kind::FETCHES | kind::MUTATIONS)
        );
        assert_eq!(
            words("evictions migrations"),
            Some(kind::EVICTIONS | kind::MIGRATIONS)
        );
        assert_eq!(parse_kinds(std::iter::empty()), Some(kind::FETCHES));
        assert_eq!(words("fetchers bogus"), None);
        assert_eq!(
            words("connevents sysevents"),
            Some(kind::CONNECTIONS | kind::SYSTEM)
        );
        // memcached's rawcmds and proxy kinds: fogcached has neither.
        assert_eq!(words("rawcmds"), None);
        assert_eq!(words("proxyreqs"), None);
    }

    #[test]
    fn a_full_watcher_skips_and_says_how_many() {
        let (a, _b) = match mio::net::UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => panic!("socketpair: {e}"),
        };
        let mut watcher = Watcher {
            stream: Stream::Unix(a),
            fd: 0,
            entry: Arc::new(ConnEntry::new(String::new(), None, ConnState::Watch, 0)),
            kinds: kind::FETCHES,
            out: Vec::new(),
            skipped: 0,
            peer_addr: None,
        };
        let line = vec![b'x'; 1000];
        for _ in 0..WATCHER_BUFFER_BYTES / 1000 + 3 {
            watcher.offer(&line);
        }
        assert!(watcher.out.len() <= WATCHER_BUFFER_BYTES);
        assert_eq!(watcher.skipped, 3);
        watcher.out.clear();
        watcher.offer(b"next\n");
        assert_eq!(watcher.out, b"skipped=3\nnext\n");
        assert_eq!(watcher.skipped, 0);
    }
}
