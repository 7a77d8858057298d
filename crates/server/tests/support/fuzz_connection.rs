//! Drives a whole [`Connection`] — the runtime's buffers, swallowing, streaming and
//! closing, not only the dispatchers — over a unix socket pair, against an engine with a
//! DRAM tier and a slow tier between which items migrate. Shared by the cargo-fuzz target
//! `connection` (`fuzz/fuzz_targets/connection.rs`) and the test that replays its corpus
//! (`tests/fuzz_corpus_replay.rs`).
//!
//! An input is a control part (its first [`CONTROL_BYTES`] bytes, the seed of the choices
//! below) and a payload (the rest: what the client sends). The payload is sent twice,
//! each time to a connection of its own over a fresh engine:
//!
//! - **at once**: every byte written before the connection runs, no migrations;
//! - **in pieces**: split at points the control part chooses (from one byte to a few
//!   hundred), with the engine's migration and LRU maintainer steps run between pieces
//!   (so items move between the tiers while requests are half-read), replies read only
//!   now and then (a client that does not read its replies, up to the point where the
//!   connection stops reading it), and either a half-close at the end or, sometimes, a
//!   reset in the middle of the payload.
//!
//! What must hold: no panic; every connection finishes (closes after the client's
//! half-close, within a bounded number of turns); the client gets the same bytes back
//! whichever way the payload was cut and wherever the items were (except where replies
//! legitimately depend on timing: `stats`, slab moves, a reset); and afterwards the
//! engine still stores and serves a value through a fresh connection.

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::sync::Arc;

use engine::{Engine, EngineConfig, ManualClock, PlacementPolicy};
use mio::net::UnixStream;
use server::connection::{Connection, Dispatchers, Outcome, ServiceContext};
use server::registry::{ConnEntry, ConnState, WorkerCounters};
use server::session::{ServerSettings, ServerStats};
use server::stream::Stream;

/// Bytes of the input that steer the run rather than being sent.
pub const CONTROL_BYTES: usize = 8;
/// Replies read from one run before it is cut short: a few requests for many large
/// values could ask for gigabytes, which is the streaming tests' business, not this one's.
const REPLY_MAX_BYTES: usize = 8 * 1024 * 1024;
/// Turns of the connection (service calls) after which a run that is still going is a
/// livelock.
const TURNS_MAX: usize = 200_000;
/// The largest item: small, so that many-key gets stay cheap to fuzz.
const ITEM_SIZE_MAX_BYTES: usize = 16 * 1024;

/// The control part's choices: a xorshift generator seeded by it.
struct Choices(u64);

impl Choices {
    fn new(control: &[u8]) -> Choices {
        let mut seed = [0u8; 8];
        seed[..control.len()].copy_from_slice(control);
        Choices(u64::from_le_bytes(seed) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How a run ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// The client shuts down its sending side after the payload and reads to the end.
    HalfClose,
    /// The client disappears at this payload offset (its socket closed).
    Reset { at: usize },
}

struct Run {
    replies: Vec<u8>,
    /// The reply limit cut the run short.
    truncated: bool,
}

/// The engine of a run: the placement policy and DRAM size are the control part's
/// choice, the same for both runs of an input.
#[derive(Clone, Copy, Debug)]
struct EngineChoice {
    policy: PlacementPolicy,
    /// Dual-LRU's promotion admission margin (0 admits every promotion).
    promotion_margin: u8,
}

/// Items every engine starts with, so that both tiers hold some before the payload
/// arrives: keys `a0`..`a99` of 12000 bytes fill the one DRAM page (about 75 of them)
/// and spill into the slow tier, so a payload that reads `a90` a few times makes it
/// migrate (the dictionary has such keys). Other sizes start in the slow tier.
const PREFILL_KEY_PREFIX: u8 = b'a';
const PREFILL_VALUE_BYTES: usize = 12000;
const PREFILL_ITEMS: usize = 100;

fn make_engine(choice: EngineChoice) -> Arc<Engine> {
    let config = EngineConfig {
        // One DRAM page and a slow tier: new items spill to the slow tier at once, hits
        // on them offer promotions, and promotions make DRAM room by demoting (under
        // two-level, every slow-tier hit promotes and every store may demote).
        memory_limit_bytes: 1024 * 1024,
        policy: choice.policy,
        promotion_margin: choice.promotion_margin,
        slow_tier: Some(tier::RegionSpec {
            size_bytes: 64 * 1024 * 1024,
            backing: tier::RegionBacking::Anonymous,
            cost: tier::CostModel::NONE,
        }),
        item_size_max_bytes: ITEM_SIZE_MAX_BYTES,
        hashpower_initial: 12,
        ..EngineConfig::default()
    };
    let engine = match Engine::new(config, ManualClock::new(1_700_000_000)) {
        Ok(engine) => engine,
        Err(error) => panic!("fixed fuzz configuration refused: {error}"),
    };
    prefill(&engine);
    engine
}

fn prefill(engine: &Engine) {
    let settings = ServerSettings::default();
    let stats = ServerStats::default();
    let mut out = Vec::new();
    let mut request = Vec::new();
    let prefix = PREFILL_KEY_PREFIX as char;
    for i in 0..PREFILL_ITEMS {
        request.clear();
        request.extend_from_slice(
            format!("set {prefix}{i} {i} 0 {PREFILL_VALUE_BYTES}\r\n").as_bytes(),
        );
        request.resize(request.len() + PREFILL_VALUE_BYTES, PREFILL_KEY_PREFIX);
        request.extend_from_slice(b"\r\n");
        out.clear();
        let mut session = server::session::Session {
            engine,
            settings: &settings,
            stats: &stats,
            out: &mut out,
            resume_keys: 0,
            out_high_water_bytes: usize::MAX,
            client_fd: -1,
            upstream_reply: None,
        };
        let step = server::dispatch::text::handle(&mut session, &request);
        assert_eq!(step, server::session::Step::Consumed(request.len()));
        assert_eq!(out, b"STORED\r\n", "prefill of {prefix}{i}");
    }
}

/// Runs the engine's background work once, as its threads would between requests.
fn background_steps(engine: &Engine) {
    engine.lru_maintainer_step();
    engine.migration_step();
}

struct Harness<'a> {
    engine: &'a Engine,
    settings: ServerSettings,
    stats: ServerStats,
    counters: WorkerCounters,
}

impl<'a> Harness<'a> {
    fn new(engine: &'a Engine) -> Self {
        Harness {
            engine,
            settings: ServerSettings::default(),
            stats: ServerStats::default(),
            counters: WorkerCounters::default(),
        }
    }

    fn ctx(&self) -> ServiceContext<'_> {
        ServiceContext {
            engine: self.engine,
            settings: &self.settings,
            stats: &self.stats,
            counters: &self.counters,
            dispatchers: Dispatchers::default(),
            reqs_per_event: 20,
            input_limit_bytes: ITEM_SIZE_MAX_BYTES + server::connection::INPUT_HEADROOM_BYTES,
            now_s: self.engine.clock().now_s(),
        }
    }

    /// A connection and the client's end of its socket.
    fn connect(&self) -> (Connection, std::os::unix::net::UnixStream) {
        let (server_end, client_end) = match std::os::unix::net::UnixStream::pair() {
            Ok(pair) => pair,
            Err(error) => panic!("socketpair: {error}"),
        };
        for end in [&server_end, &client_end] {
            if let Err(error) = end.set_nonblocking(true) {
                panic!("set_nonblocking: {error}");
            }
        }
        use std::os::fd::AsRawFd;
        let fd = server_end.as_raw_fd();
        let entry = Arc::new(ConnEntry::new(
            "unix:fuzz".to_owned(),
            None,
            ConnState::Waiting,
            0,
        ));
        let stream = Stream::Unix(UnixStream::from_std(server_end));
        (Connection::new(stream, fd, entry, 0), client_end)
    }
}

/// Reads what the socket holds into `replies`; false when the server end is gone.
fn read_available(client: &mut std::os::unix::net::UnixStream, replies: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 64 * 1024];
    loop {
        match client.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => replies.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Sends `payload` through one connection, cut as `choices` says (`None`: all at once),
/// and reads the replies.
fn run(engine: &Engine, payload: &[u8], mut choices: Option<&mut Choices>, ending: Ending) -> Run {
    let harness = Harness::new(engine);
    let (mut connection, mut client) = harness.connect();
    let mut replies = Vec::new();
    let mut sent = 0usize;
    let mut server_closed = false;
    let mut client_gone = false;
    let mut half_closed = false;
    let mut truncated = false;
    let mut turns = 0usize;
    loop {
        turns += 1;
        assert!(
            turns <= TURNS_MAX,
            "the connection did not finish in {TURNS_MAX} turns ({sent} of {} bytes sent, \
             {} reply bytes)",
            payload.len(),
            replies.len()
        );
        // The client sends its next piece.
        let limit = match ending {
            Ending::Reset { at } => at.min(payload.len()),
            Ending::HalfClose => payload.len(),
        };
        let mut progress = false;
        if sent < limit {
            let piece = match choices.as_deref_mut() {
                None => limit - sent,
                Some(c) => match c.below(4) {
                    0 => 1,
                    1 => 1 + c.below(16) as usize,
                    _ => 1 + c.below(512) as usize,
                },
            };
            let end = (sent + piece).min(limit);
            match client.write(&payload[sent..end]) {
                Ok(n) => {
                    sent += n;
                    progress |= n > 0;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => server_closed = true,
            }
        } else if !half_closed && !client_gone {
            match ending {
                Ending::HalfClose => {
                    let _ = client.shutdown(Shutdown::Write);
                    half_closed = true;
                }
                Ending::Reset { .. } => {
                    // Drop the client's socket: the server sees a reset or an end of file
                    // in the middle of whatever it was reading.
                    let (_, replacement) = match std::os::unix::net::UnixStream::pair() {
                        Ok(pair) => pair,
                        Err(error) => panic!("socketpair: {error}"),
                    };
                    drop(std::mem::replace(&mut client, replacement));
                    client_gone = true;
                }
            }
            progress = true;
        }
        // The server's turn.
        connection.on_event(true, true);
        let outcome = connection.service(&harness.ctx());
        if let Some(c) = choices.as_deref_mut() {
            if c.below(4) == 0 {
                background_steps(engine);
            }
        }
        // The client reads its replies, or, now and then, does not.
        let reads = match choices.as_deref_mut() {
            None => true,
            Some(c) => c.below(3) != 0 || !progress,
        };
        if reads && !client_gone && !read_available(&mut client, &mut replies) {
            server_closed = true;
        }
        if replies.len() > REPLY_MAX_BYTES {
            truncated = true;
            break;
        }
        match outcome {
            Outcome::Close | Outcome::Shutdown => {
                // What was written before the close is still readable.
                if !client_gone {
                    read_available(&mut client, &mut replies);
                }
                break;
            }
            Outcome::Held => {
                let _ = engine.make_durable();
            }
            Outcome::Wait | Outcome::Yielded => {}
            // A watcher takes no more requests (the harness has no logger to hand it to).
            Outcome::Watch(_) => break,
            Outcome::Parked => panic!("a connection without an upstream never parks"),
        }
        if server_closed && !half_closed {
            break;
        }
    }
    Run { replies, truncated }
}

/// Whether the payload's replies may depend on when its bytes arrived or on what the
/// background work did meanwhile: `stats` (byte counts, rusage), slab page moves (a page
/// is busy or not), `cache_memlimit` (evictions follow the maintainer's passes).
fn replies_depend_on_timing(payload: &[u8]) -> bool {
    let text_words: [&[u8]; 3] = [b"stats", b"slabs", b"cache_memlimit"];
    if payload.first() == Some(&protocol::binary::REQUEST_MAGIC) {
        return binary_frames_ask_for_stats(payload);
    }
    text_words
        .iter()
        .any(|word| payload.windows(word.len()).any(|w| w == *word))
}

/// Whether a `stat` request may be anywhere in a binary payload: a request magic
/// followed by the stat opcode at any offset (a `stat` or `touch` with a body longer than
/// its key has the rest of its body read as the next request, as memcached does, so
/// walking the declared frames would miss one).
fn binary_frames_ask_for_stats(payload: &[u8]) -> bool {
    const STAT_OPCODE: u8 = 0x10;
    payload
        .windows(2)
        .any(|w| w == [protocol::binary::REQUEST_MAGIC, STAT_OPCODE])
}

/// Whatever came before, the engine stores and serves through a fresh connection.
fn probe(engine: &Engine) {
    let request = b"set fuzz-probe 0 0 2\r\nok\r\nget fuzz-probe\r\n";
    let run = run(engine, request, None, Ending::HalfClose);
    assert_eq!(
        run.replies, b"STORED\r\nVALUE fuzz-probe 0 2\r\nok\r\nEND\r\n",
        "the engine no longer serves a fresh connection"
    );
}

pub fn drive(input: &[u8]) {
    drive_counting_migrations(input);
}

/// [`drive`], returning the migrations the run in pieces made (for the test that shows
/// the harness does move items).
pub fn drive_counting_migrations(input: &[u8]) -> engine::MigrationCounts {
    let split = input.len().min(CONTROL_BYTES);
    let (control, payload) = input.split_at(split);
    let mut choices = Choices::new(control);
    let ending = if choices.below(8) == 0 && !payload.is_empty() {
        Ending::Reset {
            at: choices.below(payload.len() as u64) as usize,
        }
    } else {
        Ending::HalfClose
    };

    let engine_choice = EngineChoice {
        policy: PlacementPolicy::ALL[choices.below(PlacementPolicy::ALL.len() as u64) as usize],
        promotion_margin: if choices.below(2) == 0 { 0 } else { 3 },
    };
    let whole_engine = make_engine(engine_choice);
    let whole = run(&whole_engine, payload, None, Ending::HalfClose);
    probe(&whole_engine);

    let pieces_engine = make_engine(engine_choice);
    let pieces = run(&pieces_engine, payload, Some(&mut choices), ending);
    // Items keep moving after the client left; the engine must stay whole.
    for _ in 0..4 {
        background_steps(&pieces_engine);
    }
    probe(&pieces_engine);

    let comparable = ending == Ending::HalfClose
        && !whole.truncated
        && !pieces.truncated
        && !replies_depend_on_timing(payload);
    if comparable {
        // Whether the server closed before or after the client's half-close depends on
        // when the half-close came (a run in pieces half-closes later), not on what the
        // server did: both runs end closed, and the replies say the rest.
        if whole.replies != pieces.replies {
            let at = whole
                .replies
                .iter()
                .zip(&pieces.replies)
                .position(|(a, b)| a != b)
                .unwrap_or(whole.replies.len().min(pieces.replies.len()));
            let from = at.saturating_sub(64);
            panic!(
                "replies differ at byte {at} (at once: {} bytes, in pieces: {} bytes)\n\
                 at once:   {:?}\nin pieces: {:?}",
                whole.replies.len(),
                pieces.replies.len(),
                String::from_utf8_lossy(&whole.replies[from..(at + 64).min(whole.replies.len())]),
                String::from_utf8_lossy(
                    &pieces.replies
                        [from.min(pieces.replies.len())..(at + 64).min(pieces.replies.len())]
                ),
            );
        }
    }
    pieces_engine.migration_counts()
}
