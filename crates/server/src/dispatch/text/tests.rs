//! The unit tests of `dispatch/text.rs`.

use super::*;
use crate::dispatch::test_server::{TestServer, START_UNIX_S};
use crate::session::ServerSettings;
use engine::{Engine, EngineConfig, ManualClock};

struct Fixture(TestServer);

impl std::ops::Deref for Fixture {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl Fixture {
    fn new() -> Self {
        Self::with_settings(ServerSettings::default())
    }

    fn with_settings(settings: ServerSettings) -> Self {
        Fixture(TestServer::new(EngineConfig::default(), settings))
    }

    /// Feeds `input` the way the runtime does (several requests per buffer, payload
    /// swallowing) and returns the replies and the steps taken.
    fn run(&self, input: &[u8]) -> (Vec<u8>, Vec<Step>) {
        self.run_streaming(input, usize::MAX)
    }

    /// [`Fixture::run`] with a high-water mark: at a `Step::Partial` the output so far
    /// is moved to the replies (as if written to the socket) and the request resumed,
    /// as the runtime does once the socket drained.
    fn run_streaming(&self, input: &[u8], out_high_water_bytes: usize) -> (Vec<u8>, Vec<Step>) {
        let mut out = Vec::new();
        let mut steps = Vec::new();
        let mut rest = input;
        let mut resume_keys = 0;
        let mut written = Vec::new();
        // Bounded: every step consumes input, answers more keys, or ends the loop.
        while !rest.is_empty() {
            let mut session = self.session(&mut out, resume_keys, out_high_water_bytes);
            let step = handle(&mut session, rest);
            if let Step::Partial { keys_done } = step {
                assert!(keys_done > resume_keys, "no progress: {keys_done}");
                assert!(out.len() >= out_high_water_bytes, "stopped under the mark");
                written.append(&mut out);
                resume_keys = keys_done;
                steps.push(step);
                continue;
            }
            resume_keys = 0;
            match step {
                Step::Partial { .. } => unreachable!("handled above"),
                Step::Consumed(n) => rest = &rest[n..],
                Step::Swallow { consumed, bytes } => {
                    rest = &rest[consumed..];
                    rest = &rest[bytes.min(rest.len())..];
                }
                Step::NeedMore
                | Step::Close
                | Step::Shutdown
                | Step::Watch { .. }
                | Step::Upstream { .. } => {
                    steps.push(step);
                    break;
                }
            }
            steps.push(step);
        }
        written.append(&mut out);
        (written, steps)
    }

    /// One line of `stats`, read from the wire reply.
    fn stat(&self, name: &str) -> String {
        let all = self.reply(b"stats\r\n");
        let prefix = format!("STAT {name} ");
        match all.lines().find_map(|line| line.strip_prefix(&prefix)) {
            Some(value) => value.to_string(),
            None => panic!("no stat {name} in {all}"),
        }
    }

    /// The replies to `input`, which must hold only whole requests.
    fn reply(&self, input: &[u8]) -> String {
        let (out, steps) = self.run(input);
        assert!(
            !steps.contains(&Step::NeedMore),
            "{:?} left a partial request",
            String::from_utf8_lossy(input)
        );
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The CAS of `key` as `gets` prints it.
    fn cas_of(&self, key: &str) -> u64 {
        let reply = self.reply(format!("gets {key}\r\n").as_bytes());
        let header = reply.lines().next().unwrap_or("");
        match header.rsplit(' ').next().map(str::parse::<u64>) {
            Some(Ok(cas)) if header.starts_with("VALUE ") => cas,
            _ => panic!("no CAS for {key}: {reply:?}"),
        }
    }
}

#[test]
fn set_then_get_and_gets() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"set foo 42 0 3\r\nbar\r\n"), "STORED\r\n");
    assert_eq!(f.reply(b"get foo\r\n"), "VALUE foo 42 3\r\nbar\r\nEND\r\n");
    let cas = f.cas_of("foo");
    assert_eq!(
        f.reply(b"gets foo\r\n"),
        format!("VALUE foo 42 3 {cas}\r\nbar\r\nEND\r\n")
    );
    assert_eq!(f.reply(b"get nothing\r\n"), "END\r\n");
    // Multi-get: hits in key order, misses skipped, duplicates repeated.
    assert_eq!(f.reply(b"set b 0 0 1\r\nB\r\n"), "STORED\r\n");
    assert_eq!(
        f.reply(b"get foo nothing b foo\r\n"),
        "VALUE foo 42 3\r\nbar\r\nVALUE b 0 1\r\nB\r\nVALUE foo 42 3\r\nbar\r\nEND\r\n"
    );
    // Largest flags, payload holding CRLF, bare-\n command lines.
    assert_eq!(
        f.reply(b"set crlf 4294967295 0 4\na\r\nb\r\nget crlf\n"),
        "STORED\r\nVALUE crlf 4294967295 4\r\na\r\nb\r\nEND\r\n"
    );
    assert_eq!(
        f.reply(b"set empty 0 0 0\r\n\r\nget empty\r\n"),
        "STORED\r\nVALUE empty 0 0\r\n\r\nEND\r\n"
    );
}

#[test]
fn add_replace_append_prepend() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"replace k 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    assert_eq!(f.reply(b"append k 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    assert_eq!(f.reply(b"prepend k 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    assert_eq!(f.reply(b"add k 5 0 1\r\nb\r\n"), "STORED\r\n");
    assert_eq!(f.reply(b"add k 0 0 1\r\nz\r\n"), "NOT_STORED\r\n");
    assert_eq!(f.reply(b"append k 9 0 2\r\ncd\r\n"), "STORED\r\n");
    assert_eq!(f.reply(b"prepend k 9 0 1\r\na\r\n"), "STORED\r\n");
    // append/prepend keep the item's flags.
    assert_eq!(f.reply(b"get k\r\n"), "VALUE k 5 4\r\nabcd\r\nEND\r\n");
    assert_eq!(f.reply(b"replace k 7 0 1\r\nr\r\n"), "STORED\r\n");
    assert_eq!(f.reply(b"get k\r\n"), "VALUE k 7 1\r\nr\r\nEND\r\n");
}

#[test]
fn cas_compares_the_unique_and_changes_it_on_every_write() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"cas k 0 0 1 1\r\nx\r\n"), "NOT_FOUND\r\n");
    assert_eq!(f.reply(b"set k 0 0 1\r\nx\r\n"), "STORED\r\n");
    let cas = f.cas_of("k");
    let stale = format!("cas k 0 0 1 {}\r\ny\r\n", cas + 1000);
    assert_eq!(f.reply(stale.as_bytes()), "EXISTS\r\n");
    let fresh = format!("cas k 3 0 1 {cas}\r\ny\r\n");
    assert_eq!(f.reply(fresh.as_bytes()), "STORED\r\n");
    let new_cas = f.cas_of("k");
    assert_ne!(new_cas, cas);
    // The old unique no longer matches.
    assert_eq!(f.reply(fresh.as_bytes()), "EXISTS\r\n");
    assert_eq!(f.reply(b"get k\r\n"), "VALUE k 3 1\r\ny\r\nEND\r\n");
    assert_eq!(
        f.reply(b"incr k 1\r\n"),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(
        f.reply(b"set n 0 0 1\r\n1\r\nincr n 1\r\n"),
        "STORED\r\n2\r\n"
    );
    let after_set = f.cas_of("n");
    assert_eq!(f.reply(b"incr n 1\r\n"), "3\r\n");
    assert_ne!(f.cas_of("n"), after_set);
    let touch_cas = f.cas_of("n");
    assert_eq!(
        f.reply(b"cas n 0 0 1 noreply 5\r\n"),
        "CLIENT_ERROR bad command line format\r\n"
    );
    let quiet = format!("cas n 0 0 1 {touch_cas} noreply\r\n7\r\n");
    assert_eq!(f.reply(quiet.as_bytes()), "");
    assert_eq!(f.reply(b"get n\r\n"), "VALUE n 0 1\r\n7\r\nEND\r\n");
}

#[test]
fn incr_wraps_at_2_pow_64_and_decr_stops_at_zero() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"incr missing 1\r\n"), "NOT_FOUND\r\n");
    assert_eq!(f.reply(b"decr missing 1\r\n"), "NOT_FOUND\r\n");
    assert_eq!(
        f.reply(b"set n 0 0 20\r\n18446744073709551615\r\nincr n 1\r\n"),
        "STORED\r\n0\r\n"
    );
    assert_eq!(
        f.reply(b"incr n 18446744073709551615\r\n"),
        "18446744073709551615\r\n"
    );
    assert_eq!(f.reply(b"incr n 2\r\n"), "1\r\n");
    assert_eq!(
        f.reply(b"set d 0 0 2\r\n10\r\ndecr d 3\r\n"),
        "STORED\r\n7\r\n"
    );
    assert_eq!(f.reply(b"decr d 100\r\n"), "0\r\n");
    // memcached rewrites a shrinking number in place, padded with spaces.
    assert_eq!(f.reply(b"get d\r\n"), "VALUE d 0 2\r\n0 \r\nEND\r\n");
    // Growing back within the old length keeps the padding (memcached 1.6.18).
    assert_eq!(
        f.reply(b"incr d 5 noreply\r\nget d\r\n"),
        "VALUE d 0 2\r\n5 \r\nEND\r\n"
    );
    // A wrapped 20-digit number is rewritten in place too.
    assert_eq!(
        f.reply(b"get n\r\n"),
        "VALUE n 0 20\r\n1                   \r\nEND\r\n"
    );
    // A number longer than the stored text gets a new item of the exact length.
    assert_eq!(
        f.reply(b"set g 0 0 1\r\n9\r\nincr g 1\r\nget g\r\n"),
        "STORED\r\n10\r\nVALUE g 0 2\r\n10\r\nEND\r\n"
    );
    assert_eq!(
        f.reply(b"incr d x\r\n"),
        "CLIENT_ERROR invalid numeric delta argument\r\n"
    );
    assert_eq!(f.reply(b"incr d -1 noreply\r\n"), "");
    // memcached 1.6.18 reads values and deltas with strtoull: the padded `9 ` plus an
    // appended `0` reads as 9; signs, leading blanks and leading zeros are accepted.
    assert_eq!(
        f.reply(b"set p 0 0 2\r\n10\r\ndecr p 1\r\nappend p 0 0 1\r\n0\r\ndecr p 0\r\n"),
        "STORED\r\n9\r\nSTORED\r\n9\r\n"
    );
    assert_eq!(
        f.reply(b"set p 0 0 2\r\n+3\r\nincr p 1\r\nset p 0 0 2\r\n 7\r\nincr p 1\r\n"),
        "STORED\r\n4\r\nSTORED\r\n8\r\n"
    );
    assert_eq!(
        f.reply(b"set p 0 0 6\r\n12 abc\r\nincr p 1\r\nset p 0 0 2\r\n-0\r\nincr p 1\r\n"),
        "STORED\r\n13\r\nSTORED\r\n1\r\n"
    );
    assert_eq!(
        f.reply(b"incr p -0\r\nincr p 00000000000000000000005\r\n"),
        "1\r\n6\r\n"
    );
    assert_eq!(
        f.reply(b"set s 0 0 3\r\nabc\r\ndecr s 1 noreply\r\n"),
        "STORED\r\n"
    );
}

#[test]
fn delete_and_touch() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"delete k\r\n"), "NOT_FOUND\r\n");
    assert_eq!(
        f.reply(b"set k 0 0 1\r\nx\r\ndelete k\r\nget k\r\n"),
        "STORED\r\nDELETED\r\nEND\r\n"
    );
    assert_eq!(
        f.reply(b"set k 0 0 1\r\nx\r\ndelete k 0\r\n"),
        "STORED\r\nDELETED\r\n"
    );
    assert_eq!(
        f.reply(b"set k 0 0 1\r\nx\r\ndelete k noreply\r\nget k\r\n"),
        "STORED\r\nEND\r\n"
    );
    assert_eq!(
        f.reply(b"delete k 5\r\n"),
        "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
    );
    assert_eq!(f.reply(b"touch k 10\r\n"), "NOT_FOUND\r\n");
    assert_eq!(
        f.reply(b"set k 0 0 1\r\nx\r\ntouch k 10\r\n"),
        "STORED\r\nTOUCHED\r\n"
    );
    f.clock.advance_s(9);
    assert_eq!(f.reply(b"get k\r\n"), "VALUE k 0 1\r\nx\r\nEND\r\n");
    f.clock.advance_s(1);
    assert_eq!(f.reply(b"get k\r\n"), "END\r\n");
    assert_eq!(
        f.reply(b"set k 0 0 1\r\nx\r\ntouch k -1 noreply\r\nget k\r\n"),
        "STORED\r\nEND\r\n"
    );
    assert_eq!(f.reply(b"touch k x noreply\r\n"), "");
}

#[test]
fn relative_absolute_and_negative_expiry() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"set rel 0 100 1\r\nr\r\n"), "STORED\r\n");
    // 30 days is still relative.
    assert_eq!(f.reply(b"set month 0 2592000 1\r\nm\r\n"), "STORED\r\n");
    // Above 30 days it is a Unix time: 200 seconds from now.
    let now_unix = START_UNIX_S + u64::from(engine::Clock::now_s(&*f.clock));
    let absolute = format!("set abs 0 {} 1\r\na\r\n", now_unix + 200);
    assert_eq!(f.reply(absolute.as_bytes()), "STORED\r\n");
    let past = format!("set past 0 {} 1\r\np\r\n", now_unix - 10);
    assert_eq!(f.reply(past.as_bytes()), "STORED\r\n");
    assert_eq!(f.reply(b"set neg 0 -1 1\r\nn\r\n"), "STORED\r\n");
    assert_eq!(f.reply(b"get past neg\r\n"), "END\r\n");
    f.clock.advance_s(99);
    assert_eq!(
        f.reply(b"get rel abs month\r\n"),
        "VALUE rel 0 1\r\nr\r\nVALUE abs 0 1\r\na\r\nVALUE month 0 1\r\nm\r\nEND\r\n"
    );
    f.clock.advance_s(1);
    assert_eq!(f.reply(b"get rel abs\r\n"), "VALUE abs 0 1\r\na\r\nEND\r\n");
    f.clock.advance_s(100);
    assert_eq!(
        f.reply(b"get abs month\r\n"),
        "VALUE month 0 1\r\nm\r\nEND\r\n"
    );
    f.clock.advance_s(2_592_000);
    assert_eq!(f.reply(b"get month\r\n"), "END\r\n");
}

#[test]
fn gat_and_gats_touch_what_they_return() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"set k 1 10 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(
        f.reply(b"gat 100 k missing\r\n"),
        "VALUE k 1 1\r\nx\r\nEND\r\n"
    );
    let cas = f.cas_of("k");
    assert_eq!(
        f.reply(b"gats 100 k\r\n"),
        format!("VALUE k 1 1 {cas}\r\nx\r\nEND\r\n")
    );
    f.clock.advance_s(50);
    assert_eq!(f.reply(b"get k\r\n"), "VALUE k 1 1\r\nx\r\nEND\r\n");
    f.clock.advance_s(50);
    assert_eq!(f.reply(b"get k\r\n"), "END\r\n");
    assert_eq!(f.reply(b"gat 10\r\n"), "END\r\n");
    assert_eq!(
        f.reply(b"gat x k\r\n"),
        "CLIENT_ERROR invalid exptime argument\r\n"
    );
}

#[test]
fn noreply_hides_every_reply_but_error_for_unknown_or_miscounted_lines() {
    let f = Fixture::new();
    let quiet = b"set k 0 0 1 noreply\r\nx\r\nadd k 0 0 1 noreply\r\ny\r\n\
            replace k 0 0 1 noreply\r\nz\r\nappend k 0 0 1 noreply\r\n1\r\n\
            prepend k 0 0 1 noreply\r\n0\r\ncas k 0 0 1 1 noreply\r\nq\r\n\
            touch k 0 noreply\r\nverbosity 0 noreply\r\ndelete k noreply\r\n\
            delete k noreply\r\nincr k 1 noreply\r\nflush_all noreply\r\n\
            flush_all 0 noreply\r\nslabs automove 1 noreply\r\n";
    assert_eq!(f.reply(quiet), "");
    // Each reply below is memcached 1.6.18's for the same input.
    assert_eq!(
        f.reply(b"set k 0 0 1 noreply\r\nxy\r\n"),
        // memcached drops "xy\r" with the line; the "\n" left over is an empty line.
        "ERROR\r\n"
    );
    // A refused store line does not swallow its payload: `x` reads as a command.
    assert_eq!(f.reply(b"set k abc 0 1 noreply\r\nx\r\n"), "ERROR\r\n");
    let silenced: &[&[u8]] = &[
        b"set k 0 0 -1 noreply\r\n",
        b"flush_all abc noreply\r\n",
        b"verbosity x noreply\r\n",
        b"incr w x noreply\r\n",
        b"decr k abc noreply\r\n",
        b"touch k abc noreply\r\n",
        b"delete k 5 noreply\r\n",
        b"verbosity noreply\r\n",
        b"slabs automove 9 noreply\r\n",
        b"cache_memlimit x noreply\r\n",
        b"cache_memlimit 1 noreply\r\n",
        b"set v 0 0 3 noreply\r\nabc\r\nincr v 1 noreply\r\n",
    ];
    for input in silenced {
        assert_eq!(f.reply(input), "", "{}", String::from_utf8_lossy(input));
    }
    assert_eq!(f.reply(b"incr noreply\r\n"), "ERROR\r\n");
    assert_eq!(f.reply(b"foo noreply\r\n"), "ERROR\r\n");
    assert_eq!(f.reply(b"touch k 1 2 noreply\r\n"), "ERROR\r\n");
    assert_eq!(
        f.reply(b"gat abc k noreply\r\n"),
        "CLIENT_ERROR invalid exptime argument\r\n"
    );
}

#[test]
fn oversized_payload_is_refused_swallowed_and_unlinks_a_set() {
    let f = Fixture::new();
    let too_big = f.engine.config().item_size_max_bytes;
    assert!(!f.engine.item_fits(1, too_big));
    assert_eq!(
        f.reply(b"set k 0 0 1\r\nx\r\nset j 0 0 1\r\ny\r\n"),
        "STORED\r\nSTORED\r\n"
    );
    let line = format!("set k 0 0 {too_big}\r\n");
    let mut session_out = Vec::new();
    let mut session = Session {
        engine: &f.engine,
        settings: &f.settings,
        stats: &f.stats,
        out: &mut session_out,
        resume_keys: 0,
        out_high_water_bytes: usize::MAX,
        client_fd: -1,
        upstream_reply: None,
    };
    // Only the line is needed: the payload is never buffered.
    assert_eq!(
        handle(&mut session, line.as_bytes()),
        Step::Swallow {
            consumed: line.len(),
            bytes: too_big + 2
        }
    );
    assert_eq!(session_out, b"SERVER_ERROR object too large for cache\r\n");
    assert_eq!(f.reply(b"get k\r\n"), "END\r\n");
    // Not for add/replace/append/prepend/cas. noreply hides the error but the
    // payload is still swallowed (memcached 1.6.18 answers only the `get`).
    let mut input = format!("add j 0 0 {too_big} noreply\r\n").into_bytes();
    input.resize(input.len() + too_big, b'z');
    input.extend_from_slice(b"\r\nget j\r\n");
    assert_eq!(f.reply(&input), "VALUE j 0 1\r\ny\r\nEND\r\n");
}

#[test]
fn oversized_payload_counts_store_too_large_not_a_delete() {
    let f = Fixture::new();
    let too_big = f.engine.config().item_size_max_bytes;
    let mut input = b"set k 0 0 1\r\nx\r\n".to_vec();
    for command in ["set k", "cas k", "append nokey"] {
        let line = match command {
            "cas k" => format!("{command} 0 0 {too_big} 1\r\n"),
            _ => format!("{command} 0 0 {too_big}\r\n"),
        };
        input.extend_from_slice(line.as_bytes());
        input.resize(input.len() + too_big, b'z');
        input.extend_from_slice(b"\r\n");
    }
    assert_eq!(
        f.reply(&input),
        format!(
            "STORED\r\n{}",
            "SERVER_ERROR object too large for cache\r\n".repeat(3)
        )
    );
    assert_eq!(f.stat("store_too_large"), "3");
    assert_eq!(f.stat("delete_hits"), "0");
    assert_eq!(f.stat("delete_misses"), "0");
    assert_eq!(f.stat("cmd_set"), "1");
    // The refused `set` unlinked k; a refused `cas` keeps the value (memcached).
    assert_eq!(
        f.reply(b"get k\r\nset c 0 0 1\r\nc\r\n"),
        "END\r\nSTORED\r\n"
    );
    let mut cas = format!("cas c 0 0 {too_big} 1\r\n").into_bytes();
    cas.resize(cas.len() + too_big, b'z');
    cas.extend_from_slice(b"\r\nget c\r\n");
    assert_eq!(
        f.reply(&cas),
        "SERVER_ERROR object too large for cache\r\nVALUE c 0 1\r\nc\r\nEND\r\n"
    );
}

/// Stores `count` keys `s0..` of `value_bytes` each (distinct contents per key).
fn store_numbered(f: &Fixture, count: usize, value_bytes: usize) {
    for i in 0..count {
        let value = format!("{i:0>width$}", width = value_bytes);
        let set = format!("set s{i} {i} 0 {value_bytes}\r\n{value}\r\n");
        assert_eq!(f.reply(set.as_bytes()), "STORED\r\n");
    }
}

#[test]
fn a_multi_get_past_the_mark_streams_in_key_order_and_counts_each_key_once() {
    const KEYS: usize = 12;
    const VALUE_BYTES: usize = 1000;
    // Misses and a repeated key among the hits, as a client may send them.
    let line = b"gets s0 nope s1 s2 s3 s4 s5 s3 s6 s7 s8 gone s9 s10 s11\r\nmn\r\n";
    let keys_in_line = 15;
    let whole = Fixture::new();
    let streamed = Fixture::new();
    for f in [&whole, &streamed] {
        store_numbered(f, KEYS, VALUE_BYTES);
    }
    let (expected, _) = whole.run(line);
    // A mark of one and a half values: each call answers two hits (or one, and the
    // misses next to it).
    let (out, steps) = streamed.run_streaming(line, VALUE_BYTES * 3 / 2);
    assert!(
        out == expected,
        "the streamed reply ({} bytes) differs from the whole one ({} bytes) from byte {}",
        out.len(),
        expected.len(),
        out.iter()
            .zip(&expected)
            .take_while(|(a, b)| a == b)
            .count()
    );
    // The last key's block (flags = index, CAS = 12th store) and then END.
    let tail = format!(
        "VALUE s11 11 {VALUE_BYTES} 12\r\n{:0>VALUE_BYTES$}\r\nEND\r\nMN\r\n",
        11
    );
    assert!(String::from_utf8_lossy(&out).ends_with(&tail));
    let partials: Vec<usize> = steps
        .iter()
        .filter_map(|step| match step {
            Step::Partial { keys_done } => Some(*keys_done),
            _ => None,
        })
        .collect();
    assert!(partials.len() >= KEYS / 2, "{steps:?}");
    assert!(
        partials.windows(2).all(|w| w[0] < w[1]) && partials.iter().all(|&k| k < keys_in_line),
        "{partials:?}"
    );
    for f in [&whole, &streamed] {
        assert_eq!(f.stat("cmd_get"), keys_in_line.to_string());
        assert_eq!(f.stat("get_hits"), (keys_in_line - 2).to_string());
        assert_eq!(f.stat("get_misses"), "2");
    }
    // gat touches each key as it is reached, once.
    let (out, steps) = streamed.run_streaming(b"gat 100 s0 s1 s2 nope s3\r\n", VALUE_BYTES);
    assert_eq!(
        steps
            .iter()
            .filter(|s| matches!(s, Step::Partial { .. }))
            .count(),
        3
    );
    assert_eq!(out.windows(6).filter(|w| w == b"VALUE ").count(), 4);
    assert_eq!(streamed.stat("cmd_touch"), "5");
    assert_eq!(streamed.stat("touch_hits"), "4");
    assert_eq!(streamed.stat("touch_misses"), "1");
    // The touched keys now expire; the others (stored without exptime) do not.
    streamed.clock.advance_s(101);
    assert_eq!(streamed.reply(b"get s3\r\n"), "END\r\n");
    assert_eq!(streamed.reply(b"get s4\r\n").matches("VALUE").count(), 1);
}

#[test]
fn an_immediate_flush_takes_one_cas_value() {
    let f = Fixture::new();
    assert_eq!(
        f.reply(b"set a 0 0 1\r\nx\r\ngets a\r\nflush_all\r\nset a 0 0 1\r\nx\r\ngets a\r\n"),
        "STORED\r\nVALUE a 0 1 1\r\nx\r\nEND\r\nOK\r\nSTORED\r\nVALUE a 0 1 3\r\nx\r\nEND\r\n"
    );
    // A delayed flush takes none (memcached 1.6.18 gives the same numbers).
    assert_eq!(
        f.reply(b"flush_all 100\r\nset a 0 0 1\r\nx\r\ngets a\r\n"),
        "OK\r\nSTORED\r\nVALUE a 0 1 4\r\nx\r\nEND\r\n"
    );
}

#[test]
fn gat_counts_as_a_touch_and_get_leaves_the_recache_token() {
    let f = Fixture::new();
    assert_eq!(
        f.reply(b"set t 0 0 1\r\nx\r\ngat 10 t nokey\r\ngats 10 t\r\n"),
        "STORED\r\nVALUE t 0 1\r\nx\r\nEND\r\nVALUE t 0 1 1\r\nx\r\nEND\r\n"
    );
    assert_eq!(f.stat("cmd_get"), "0");
    assert_eq!(f.stat("cmd_touch"), "3");
    assert_eq!(f.stat("touch_hits"), "2");
    assert_eq!(f.stat("touch_misses"), "1");
    assert_eq!(f.stat("get_hits"), "0");
    // A text get of a stale item does not take the token: the next mg wins it.
    assert_eq!(
        f.reply(b"ms s 1\r\na\r\nmd s I\r\nget s\r\nmg s\r\nmg s\r\n"),
        "HD\r\nHD\r\nVALUE s 0 1\r\na\r\nEND\r\nHD X W\r\nHD Z X\r\n"
    );
}

#[test]
fn flush_all_now_and_with_delay() {
    let f = Fixture::new();
    assert_eq!(
        f.reply(b"set a 0 0 1\r\na\r\nflush_all\r\nget a\r\n"),
        "STORED\r\nOK\r\nEND\r\n"
    );
    assert_eq!(
        f.reply(b"set a 0 0 1\r\na\r\nflush_all 10\r\n"),
        "STORED\r\nOK\r\n"
    );
    f.clock.advance_s(9);
    assert_eq!(f.reply(b"get a\r\n"), "VALUE a 0 1\r\na\r\nEND\r\n");
    f.clock.advance_s(1);
    assert_eq!(f.reply(b"get a\r\n"), "END\r\n");
    // Items stored after the flush are kept.
    assert_eq!(
        f.reply(b"set b 0 0 1\r\nb\r\nget b\r\n"),
        "STORED\r\nVALUE b 0 1\r\nb\r\nEND\r\n"
    );
    assert_eq!(f.reply(b"flush_all -5\r\nget b\r\n"), "OK\r\nEND\r\n");
}

#[test]
fn stats_groups_reset_and_refusals() {
    let f = Fixture::new();
    let general = f.reply(b"stats\r\n");
    assert!(general.starts_with("STAT pid "), "{general}");
    assert!(general.ends_with("END\r\n"), "{general}");
    assert!(general.contains("\r\nSTAT curr_items 0\r\n"), "{general}");
    assert!(
        general
            .lines()
            .all(|l| l.starts_with("STAT ") || l == "END"),
        "{general}"
    );
    let settings = f.reply(b"stats settings\r\n");
    assert!(
        settings.contains("STAT maxbytes 67108864\r\n"),
        "{settings}"
    );
    assert!(f.reply(b"stats items\r\n").ends_with("END\r\n"));
    assert!(f.reply(b"stats slabs\r\n").contains("STAT total_malloced "));
    assert_eq!(
        f.reply(b"stats sizes\r\n"),
        "STAT sizes_status disabled\r\nEND\r\n"
    );
    assert!(f.reply(b"stats conns\r\n").ends_with("END\r\n"));
    assert_eq!(f.reply(b"stats reset\r\n"), "RESET\r\n");
    assert_eq!(f.reply(b"stats cachedump 1 1\r\n"), "END\r\n");
    assert_eq!(f.reply(b"stats detail on\r\n"), "OK\r\n");
    assert_eq!(f.reply(b"stats bogus\r\n"), "ERROR\r\n");
    let refusing = Fixture::with_settings(ServerSettings {
        dumps_enabled: false,
        watch_enabled: false,
        ..ServerSettings::default()
    });
    assert_eq!(
        refusing.reply(b"stats cachedump 1 1\r\nlru_crawler metadump all\r\nwatch\r\n"),
        "CLIENT_ERROR stats cachedump not allowed\r\nERROR metadump not allowed\r\n\
             CLIENT_ERROR watch commands not allowed\r\n"
    );
}

/// Replies checked against memcached 1.6.18 (`stats detail`, `stats cachedump`,
/// `lru_crawler metadump`; the item lines differ only in times and sizes).
#[test]
fn admin_commands_look_inside_the_cache() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"stats detail dump\r\n"), "END\r\n");
    assert_eq!(
        f.reply(b"stats detail\r\nstats detail foo\r\n"),
        "CLIENT_ERROR usage: stats detail on|off|dump\r\n".repeat(2)
    );
    assert_eq!(
        f.reply(
            b"stats detail on\r\nset a:b 0 0 1\r\nx\r\nget a:b a:c nope\r\n\
                      mg a:b v\r\ndelete a:c\r\nstats detail off\r\nset a:d 0 0 1\r\ny\r\n\
                      stats detail dump\r\n"
        ),
        "OK\r\nSTORED\r\nVALUE a:b 0 1\r\nx\r\nEND\r\nVA 1\r\nx\r\nNOT_FOUND\r\nOK\r\n\
             STORED\r\nPREFIX a get 3 hit 2 set 1 del 1\r\nEND\r\n"
    );

    let class = f.engine.slab_class_for(3, 1);
    let now_unix_s = START_UNIX_S + u64::from(engine::Clock::now_s(&*f.clock));
    assert_eq!(
        f.reply(format!("stats cachedump {class} 0\r\n").as_bytes()),
        "ITEM a:d [1 b; 0 s]\r\nITEM a:b [1 b; 0 s]\r\nEND\r\n"
    );
    assert_eq!(
        f.reply(b"set t 0 100 2\r\nab\r\nstats cachedump 1 1\r\n"),
        format!("STORED\r\nITEM t [2 b; {} s]\r\nEND\r\n", now_unix_s + 100)
    );
    for (input, reply) in [
        ("stats cachedump\r\n", "CLIENT_ERROR bad command line\r\n"),
        ("stats cachedump 1\r\n", "CLIENT_ERROR bad command line\r\n"),
        (
            "stats cachedump x y\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "stats cachedump -1 1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "stats cachedump 1 -1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "stats cachedump 64 1\r\n",
            "CLIENT_ERROR Illegal slab id\r\n",
        ),
        ("stats cachedump 63 1\r\n", "END\r\n"),
        ("stats cachedump 0 1\r\n", "END\r\n"),
        ("stats cachedump slow:1 1\r\n", "END\r\n"),
        (
            "lru_crawler metadump 0\r\n",
            "BADCLASS invalid class id\r\n",
        ),
        (
            "lru_crawler metadump 99\r\n",
            "BADCLASS invalid class id\r\n",
        ),
        (
            "lru_crawler metadump x\r\n",
            "BADCLASS invalid class id\r\n",
        ),
        ("lru_crawler crawl 99\r\n", "BADCLASS invalid class id\r\n"),
        ("lru_crawler crawl all\r\n", "OK\r\n"),
        ("lru_crawler crawl 1,2\r\n", "OK\r\n"),
        ("watch bogus\r\n", "ERROR\r\n"),
    ] {
        assert_eq!(f.reply(input.as_bytes()), reply, "{input}");
    }

    let dump = f.reply(b"lru_crawler metadump all\r\n");
    let mut lines: Vec<&str> = dump.split('\n').collect();
    assert_eq!(lines.pop(), Some(""));
    assert_eq!(lines.pop(), Some("END\r"));
    lines.sort_unstable();
    let cas_b = f.cas_of("a:b");
    assert_eq!(lines.len(), 3, "{dump}");
    assert_eq!(
        lines[0],
        format!(
            "key=a%3Ab exp=-1 la={} cas={cas_b} fetch=yes cls={class} size={}",
            now_unix_s,
            56 + 3 + 1
        )
    );
    assert!(lines[2].starts_with(&format!("key=t exp={} ", now_unix_s + 100)));
    // A class list selects; the hash order lists the same items.
    let only_t =
        f.reply(format!("lru_crawler metadump {}\r\n", f.engine.slab_class_for(1, 2)).as_bytes());
    assert!(only_t.contains("key=t "), "{only_t}");
    assert_eq!(f.reply(b"lru_crawler metadump hash\r\n").len(), dump.len());
}

/// A metadump of a cache larger than the output mark streams: each call stops at the
/// mark, and the whole listing holds every item once.
#[test]
fn a_metadump_streams_under_the_output_mark() {
    let f = Fixture::new();
    let mut input = Vec::new();
    for i in 0..2000 {
        input.extend_from_slice(format!("set key:{i} 0 0 1 noreply\r\nx\r\n").as_bytes());
    }
    assert_eq!(f.reply(&input), "");
    let (out, steps) = f.run_streaming(b"lru_crawler metadump all\r\n", 4096);
    let partials = steps
        .iter()
        .filter(|s| matches!(s, Step::Partial { .. }))
        .count();
    assert!(partials > 10, "{partials} partial steps");
    let text = String::from_utf8_lossy(&out);
    let mut keys: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("key=")?.split(' ').next())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 2000);
    assert!(text.ends_with("END\r\n"));
}

#[test]
fn watch_turns_the_connection_into_a_watcher() {
    let f = Fixture::new();
    let (out, steps) = f.run(b"watch fetchers mutations\r\nget ignored\r\n");
    assert_eq!(out, b"OK\r\n");
    assert_eq!(
        steps,
        vec![Step::Watch {
            consumed: 26,
            kinds: engine::events::kind::FETCHES | engine::events::kind::MUTATIONS
        }]
    );
    f.stats
        .runtime
        .watchers
        .store(crate::watch::WATCHERS_MAX as u32, Ordering::Relaxed);
    assert_eq!(
        f.reply(b"watch\r\n"),
        "WATCHER_TOO_MANY log watcher limit reached\r\n"
    );
}

#[test]
fn version_verbosity_quit_and_shutdown() {
    let f = Fixture::new();
    assert_eq!(
        f.reply(b"version\r\n"),
        format!("VERSION {SERVER_VERSION}\r\n")
    );
    assert_eq!(f.reply(b"verbosity 1\r\n"), "OK\r\n");
    assert_eq!(f.settings.verbosity.load(Ordering::Relaxed), 1);
    assert_eq!(f.reply(b"verbosity 7\r\n"), "OK\r\n");
    assert_eq!(f.settings.verbosity.load(Ordering::Relaxed), 2);
    assert_eq!(f.reply(b"verbosity\r\n"), "ERROR\r\n");
    let (out, steps) = f.run(b"quit\r\nget a\r\n");
    assert_eq!(
        (out.as_slice(), steps.as_slice()),
        (&b""[..], &[Step::Close][..])
    );
    assert_eq!(f.reply(b"shutdown\r\n"), "ERROR: shutdown not enabled\r\n");
    assert_eq!(
        f.reply(b"shutdown now\r\n"),
        "ERROR: shutdown not enabled\r\n"
    );
    assert!(!f.settings.shutdown_requested.load(Ordering::SeqCst));

    let enabled = Fixture::with_settings(ServerSettings {
        shutdown_enabled: true,
        ..ServerSettings::default()
    });
    assert_eq!(
        enabled.reply(b"shutdown now\r\n"),
        "CLIENT_ERROR invalid shutdown mode\r\n"
    );
    let (out, steps) = enabled.run(b"shutdown graceful\r\n");
    assert_eq!(
        (out.as_slice(), steps.as_slice()),
        (&b""[..], &[Step::Shutdown][..])
    );
    assert!(enabled.settings.shutdown_requested.load(Ordering::SeqCst));
    let (_, steps) = enabled.run(b"shutdown\r\n");
    assert_eq!(steps, [Step::Shutdown]);
}

#[test]
fn slabs_commands() {
    let f = Fixture::new();
    assert_eq!(
        f.reply(b"slabs reassign 3 3\r\n"),
        "SAME src and dst class are identical\r\n"
    );
    assert_eq!(f.reply(b"slabs reassign 1 2 3\r\n"), "ERROR\r\n");
    assert_eq!(
        f.reply(b"slabs reassign x 2\r\n"),
        "CLIENT_ERROR bad command line format\r\n"
    );
    // memcached 1.6.18's replies, in its order of checks.
    assert_eq!(
        f.reply(b"slabs reassign 99 99\r\n"),
        "SAME src and dst class are identical\r\n"
    );
    assert_eq!(
        f.reply(b"slabs reassign 1 99\r\nslabs reassign 1 -1\r\nslabs reassign -2 1\r\n"),
        "BADCLASS invalid src or dst class id\r\n".repeat(3)
    );
    assert_eq!(
        f.reply(b"slabs reassign 1 2\r\nslabs reassign 0 2\r\n"),
        "NOSPARE source class has no spare pages\r\n".repeat(2)
    );
    // -1 with no class holding a spare page.
    assert_eq!(
        f.reply(b"slabs reassign -1 0\r\n"),
        "BADCLASS invalid src or dst class id\r\n"
    );
    // Two pages of one class: one can move to the pool, then none is spare.
    let value = "v".repeat(100_000);
    let mut fill = Vec::new();
    for i in 0..20 {
        fill.extend_from_slice(format!("set k{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
    }
    assert_eq!(f.reply(&fill), "STORED\r\n".repeat(20));
    let class = f.engine.slab_class_for(3, value.len());
    let reassign = format!("slabs reassign {class} 0\r\n");
    assert_eq!(f.reply(reassign.as_bytes()), "OK\r\n");
    assert_eq!(
        f.reply(reassign.as_bytes()),
        "NOSPARE source class has no spare pages\r\n"
    );
    // automove changes the level the engine reports.
    assert_eq!(f.reply(b"slabs automove 2\r\n"), "OK\r\n");
    assert!(f
        .reply(b"stats settings\r\n")
        .contains("\r\nSTAT slab_automove 2\r\n"));
    assert_eq!(f.reply(b"slabs automove 0 noreply\r\n"), "");
    assert!(f
        .reply(b"stats settings\r\n")
        .contains("\r\nSTAT slab_automove 0\r\n"));
    assert_eq!(f.reply(b"slabs automove 1\r\n"), "OK\r\n");
    assert_eq!(f.reply(b"slabs automove 3\r\n"), "ERROR\r\n");
    assert_eq!(
        f.reply(b"slabs automove x\r\n"),
        "CLIENT_ERROR bad command line format\r\n"
    );

    let clock = ManualClock::new(START_UNIX_S);
    let config = EngineConfig {
        slab_reassign: false,
        ..EngineConfig::default()
    };
    let Ok(engine) = Engine::new(config, clock) else {
        panic!("engine config")
    };
    let f = Fixture(TestServer {
        engine,
        ..TestServer::new(EngineConfig::default(), ServerSettings::default())
    });
    assert_eq!(
        f.reply(b"slabs reassign 1 2\r\n"),
        "CLIENT_ERROR slab reassignment disabled\r\n"
    );
}

#[test]
fn cache_memlimit_replies() {
    let f = Fixture::new();
    assert_eq!(
        f.reply(b"cache_memlimit 7\r\n"),
        "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
    );
    assert_eq!(
        f.reply(b"cache_memlimit 2000000000\r\n"),
        "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n"
    );
    assert_eq!(f.reply(b"cache_memlimit 64\r\n"), "OK\r\n");
    assert_eq!(f.reply(b"cache_memlimit 64 noreply\r\n"), "");
    assert_eq!(f.reply(b"cache_memlimit x\r\n"), "ERROR\r\n");
    // The DRAM tier shrinks and grows back within what was reserved at start-up
    // (-m here); beyond it, memcached's reply for memory it cannot adjust.
    assert_eq!(f.reply(b"cache_memlimit 8\r\n"), "OK\r\n");
    assert_eq!(f.stat("limit_maxbytes"), "8388608");
    assert_eq!(
        f.reply(b"cache_memlimit 65\r\n"),
        "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
    );
    assert_eq!(f.stat("limit_maxbytes"), "8388608");
    assert_eq!(f.reply(b"cache_memlimit 64\r\n"), "OK\r\n");
    assert_eq!(f.stat("limit_maxbytes"), "67108864");
}

#[test]
fn protocol_errors_pass_through_and_pipelining_continues() {
    let f = Fixture::new();
    assert_eq!(
            f.reply(b"bogus\r\nset k 0 0 2\r\nabc\r\nset k 0 0 -1\r\nget k\r\n"),
            // The bad chunk drops line + 2 + 2 bytes, so "\n" is an empty line.
            "ERROR\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\nCLIENT_ERROR bad command line format\r\nEND\r\n"
        );
    let long_key = format!("get {}\r\n", "k".repeat(251));
    assert_eq!(
        f.reply(long_key.as_bytes()),
        "CLIENT_ERROR bad command line format\r\n"
    );
    let (out, steps) = f.run(&[b'x'; 2049]);
    assert_eq!(
        (out.as_slice(), steps.as_slice()),
        (&b""[..], &[Step::Close][..])
    );
    let (out, steps) = f.run(b"get a b");
    assert_eq!(
        (out.as_slice(), steps.as_slice()),
        (&b""[..], &[Step::NeedMore][..])
    );
    let (out, steps) = f.run(b"set k 0 0 5\r\nabc");
    assert_eq!(
        (out.as_slice(), steps.as_slice()),
        (&b""[..], &[Step::NeedMore][..])
    );
}

#[test]
fn meta_commands_go_to_the_meta_dispatcher() {
    let f = Fixture::new();
    assert_eq!(f.reply(b"mn\r\n"), "MN\r\n");
    assert_eq!(f.reply(b"  mn\r\n"), "MN\r\n");
    assert_eq!(f.reply(b" mg foo v\r\n"), "EN\r\n");
    assert_eq!(
        f.reply(b"set k 0 0 1\r\nx\r\nmn\r\nget k\r\n"),
        "STORED\r\nMN\r\nVALUE k 0 1\r\nx\r\nEND\r\n"
    );
}
