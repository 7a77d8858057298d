//! Hostile clients against the real binary, memcached's history as the checklist:
//! garbage and binary noise; lengths that are negative, overflow 32 or 64 bits, exceed
//! `-I` or equal it; keys of 250 and 251 bytes; binary headers whose extras, key and body
//! lengths disagree (CVE-2016-8704/8705/8706); one byte at a time; thousands of pipelined
//! commands in one write; clients that half-close or reset in the middle of a payload;
//! more connections than `-c`; clients that never read their replies; a chunked `set`
//! whose data does not end in `\r\n` (memcached #1306).
//!
//! Each case gets memcached's answer — compared byte for byte with Debian's memcached
//! 1.6.18 started side by side, where memcached's answer is not itself a bug (the
//! exceptions are written at the case) — and then the server must still serve: a fresh
//! client is answered, and every one of a set of witness items stored before the attack,
//! in both tiers, reads back whole.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use testkit::{escape, reset_on_close, stat, RawClient, ServerProcess};

/// fogcached's tiers for these tests: a DRAM tier smaller than the witnesses, so they
/// are in both tiers, and memcached's `-I` (1 MiB).
const FOGCACHED_ARGS: &[&str] = &["-m", "4", "--slow-size", "64m", "-I", "1m"];
const MEMCACHED_ARGS: &[&str] = &["-m", "64", "-I", "1m"];
const ITEM_SIZE_MAX_BYTES: usize = 1024 * 1024;
/// Witness items: 400 of 20 000 bytes (8 MB) against a 4 MiB DRAM tier.
const WITNESSES: usize = 400;
const WITNESS_BYTES: usize = 20_000;
/// After the last byte of a reply, how long a silent server is taken to have said all
/// it will say.
const QUIET: Duration = Duration::from_millis(300);
/// How long a server that has said nothing yet is given before its silence counts as
/// its answer.
const QUIET_EMPTY: Duration = Duration::from_millis(1500);
/// The longest a single exchange may take (a server that keeps talking is a bug).
const EXCHANGE_MAX: Duration = Duration::from_secs(20);

fn witness_value(i: usize) -> Vec<u8> {
    let mut value = format!("witness {i} ").into_bytes();
    value.resize(WITNESS_BYTES, b'a' + (i % 26) as u8);
    value
}

/// fogcached with its witnesses stored, and memcached beside it when installed.
struct Target {
    fogcached: ServerProcess,
    memcached: Option<ServerProcess>,
}

impl Target {
    fn start(extra_fogcached_args: &[&str]) -> anyhow::Result<Target> {
        let mut args = FOGCACHED_ARGS.to_vec();
        args.extend_from_slice(extra_fogcached_args);
        let fogcached = ServerProcess::fogcached(&args)?;
        let memcached = match ServerProcess::memcached(MEMCACHED_ARGS) {
            Ok(server) => Some(server),
            Err(error) => {
                testkit::skip!(
                    "comparison_with_memcached",
                    "{error}: fogcached's answers are checked alone"
                );
                None
            }
        };
        let mut client = RawClient::connect(fogcached.addr())?;
        let mut batch = Vec::new();
        for i in 0..WITNESSES {
            let value = witness_value(i);
            batch.extend_from_slice(format!("set witness{i} {i} 0 {}\r\n", value.len()).as_bytes());
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
        }
        client.send(&batch)?;
        let replies = client.read_exact(WITNESSES * b"STORED\r\n".len())?;
        assert_eq!(
            replies,
            b"STORED\r\n".repeat(WITNESSES),
            "storing the witnesses"
        );
        let stats = client.stats("")?;
        for tier in ["tier_dram_items", "tier_slow_items"] {
            let items: u64 = stat(&stats, tier).unwrap_or("0").parse()?;
            assert!(
                items > 0,
                "{tier} is {items}: the witnesses must be in both tiers"
            );
        }
        Ok(Target {
            fogcached,
            memcached,
        })
    }

    /// The server still serves: a fresh client is answered, every witness reads back
    /// whole, and a new item can be stored and read.
    fn check_unharmed(&self, after: &str) -> anyhow::Result<()> {
        let mut client = RawClient::connect(self.fogcached.addr())?;
        assert!(
            client
                .request(b"version\r\n", b"\r\n")?
                .starts_with(b"VERSION "),
            "after {after}: a fresh client is not answered"
        );
        let mut batch = Vec::new();
        for i in 0..WITNESSES {
            batch.extend_from_slice(format!("get witness{i}\r\n").as_bytes());
        }
        client.send(&batch)?;
        for i in 0..WITNESSES {
            let value = witness_value(i);
            let mut expected = format!("VALUE witness{i} {i} {}\r\n", value.len()).into_bytes();
            expected.extend_from_slice(&value);
            expected.extend_from_slice(b"\r\nEND\r\n");
            let reply = client.read_exact(expected.len())?;
            assert!(
                reply == expected,
                "after {after}: witness{i} came back as {:?}",
                escape(&reply[..reply.len().min(120)])
            );
        }
        assert_eq!(
            client.request(
                b"set after-attack 0 0 2\r\nok\r\nget after-attack\r\n",
                b"END\r\n"
            )?,
            b"STORED\r\nVALUE after-attack 0 2\r\nok\r\nEND\r\n",
            "after {after}"
        );
        Ok(())
    }
}

/// What a client that sent `bytes` in one write saw: the reply, and whether the server
/// closed the connection (within [`QUIET`] of its last byte).
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    reply: Vec<u8>,
    closed: bool,
}

/// The request that ends a case, whose reply says the server has answered everything
/// before it: a text `mn` (memcached answers `MN`) or a binary noop. A case that ends
/// otherwise is done when the server falls silent for [`QUIET`] (which a loaded machine
/// can stretch: only cases that expect silence end that way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sentinel {
    TextNoop,
    BinaryNoop,
}

const TEXT_NOOP: &[u8] = b"mn\r\n";

impl Sentinel {
    fn of(request: &[u8]) -> Option<Sentinel> {
        if request.ends_with(TEXT_NOOP) {
            Some(Sentinel::TextNoop)
        } else if request.len() >= 24 && request[request.len() - 24..] == binary_noop()[..] {
            Some(Sentinel::BinaryNoop)
        } else {
            None
        }
    }

    fn answered(self, reply: &[u8]) -> bool {
        match self {
            Sentinel::TextNoop => reply.ends_with(b"MN\r\n"),
            Sentinel::BinaryNoop => {
                reply.len() >= 24 && {
                    let last = &reply[reply.len() - 24..];
                    last[..2] == [0x81, BINARY_NOOP]
                        && last[8..16] == [0, 0, 0, 0, 0xAB, 0xAB, 0xAB, 0xAB]
                }
            }
        }
    }
}

fn exchange(addr: SocketAddr, bytes: &[u8]) -> anyhow::Result<Seen> {
    exchange_with(addr, Sentinel::of(bytes), |stream| {
        stream.write_all(bytes)?;
        Ok(())
    })
}

/// Connects, lets `send` write, then reads until the server closes, answers the
/// `sentinel`, or (without one) falls silent.
fn exchange_with(
    addr: SocketAddr,
    sentinel: Option<Sentinel>,
    send: impl FnOnce(&mut TcpStream) -> std::io::Result<()>,
) -> anyhow::Result<Seen> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_nodelay(true)?;
    // The reader runs while the writer writes: a large request may only be taken in
    // once the replies of its first part were read.
    let mut reader = stream.try_clone()?;
    let collector = std::thread::spawn(move || -> std::io::Result<Seen> {
        reader.set_read_timeout(Some(QUIET))?;
        let started = Instant::now();
        let mut reply = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut idle_since = Instant::now();
        loop {
            match reader.read(&mut buf) {
                Ok(0) => {
                    return Ok(Seen {
                        reply,
                        closed: true,
                    })
                }
                Ok(n) => {
                    reply.extend_from_slice(&buf[..n]);
                    idle_since = Instant::now();
                    if sentinel.is_some_and(|s| s.answered(&reply)) {
                        // Anything the server does next (a close) is not this case's.
                        return Ok(Seen {
                            reply,
                            closed: false,
                        });
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    // Silence ends a case once the server said something, or after
                    // QUIET_EMPTY when it said nothing (a loaded machine may take a
                    // while to answer at all).
                    let silent = idle_since.elapsed() >= QUIET
                        && (!reply.is_empty() || started.elapsed() >= QUIET_EMPTY);
                    if sentinel.is_none() && silent {
                        return Ok(Seen {
                            reply,
                            closed: false,
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    return Ok(Seen {
                        reply,
                        closed: true,
                    })
                }
                Err(e) => return Err(e),
            }
            if started.elapsed() > EXCHANGE_MAX {
                return Ok(Seen {
                    reply,
                    closed: false,
                });
            }
        }
    });
    // A server that closes while we write is an answer, not a failure.
    match send(&mut stream) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {}
        Err(e) => return Err(e.into()),
    }
    collector
        .join()
        .map_err(|_| anyhow::anyhow!("the reading thread panicked"))?
        .map_err(Into::into)
}

/// Sends `bytes` to both servers on fresh connections; asserts that fogcached saw what
/// memcached saw (when memcached is installed), and returns fogcached's.
fn same_as_memcached(target: &Target, case: &str, bytes: &[u8]) -> anyhow::Result<Seen> {
    let normalise = |mut seen: Seen| {
        if bytes.first() == Some(&0x80) {
            zero_binary_cas(&mut seen.reply);
        } else {
            seen.reply = trim_padded_numbers(&seen.reply);
        }
        seen
    };
    let fogcached = normalise(exchange(target.fogcached.addr(), bytes)?);
    if let Some(memcached) = &target.memcached {
        let memcached = normalise(exchange(memcached.addr(), bytes)?);
        if fogcached != memcached {
            let at = fogcached
                .reply
                .iter()
                .zip(&memcached.reply)
                .position(|(a, b)| a != b)
                .unwrap_or(fogcached.reply.len().min(memcached.reply.len()));
            let around = |reply: &[u8]| {
                escape(&reply[at.saturating_sub(100).min(reply.len())..(at + 200).min(reply.len())])
            };
            panic!(
                "{case}: the replies differ at byte {at} (memcached {} bytes{}, fogcached {} \
                 bytes{})\nmemcached: {:?}\nfogcached: {:?}",
                memcached.reply.len(),
                if memcached.closed { ", closed" } else { "" },
                fogcached.reply.len(),
                if fogcached.closed { ", closed" } else { "" },
                around(&memcached.reply),
                around(&fogcached.reply),
            );
        }
    }
    Ok(fogcached)
}

/// Rewrites every text `VALUE` and meta `VA` data block that is a number padded with
/// spaces (`194 `) to the bare number (`194`), fixing its length (and a `VA`'s `s` flag).
/// memcached's `decr` pads in place when it alone holds the item and writes a new item of
/// the exact length when another of its threads (the LRU maintainer, the crawler) holds
/// it for a moment, so under load its answer changes from run to run; fogcached always
/// pads, as memcached does when nothing else holds the item.
fn trim_padded_numbers(reply: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(reply.len());
    let mut at = 0;
    while at < reply.len() {
        let line_end = match reply[at..].windows(2).position(|w| w == b"\r\n") {
            Some(offset) => at + offset,
            None => {
                out.extend_from_slice(&reply[at..]);
                break;
            }
        };
        let line = &reply[at..line_end];
        let words: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let length_word = if line.starts_with(b"VALUE ") {
            3
        } else if line.starts_with(b"VA ") {
            1
        } else {
            usize::MAX
        };
        let length = words
            .get(length_word)
            .and_then(|w| std::str::from_utf8(w).ok())
            .and_then(|w| w.parse::<usize>().ok());
        let data_start = line_end + 2;
        let Some(length) = length.filter(|&n| data_start + n + 2 <= reply.len()) else {
            out.extend_from_slice(&reply[at..data_start.min(reply.len())]);
            at = data_start;
            continue;
        };
        let data = &reply[data_start..data_start + length];
        let digits = data.iter().take_while(|b| b.is_ascii_digit()).count();
        let padded = digits > 0 && digits < length && data[digits..].iter().all(|&b| b == b' ');
        if !padded {
            out.extend_from_slice(&reply[at..data_start + length + 2]);
            at = data_start + length + 2;
            continue;
        }
        let (old_len, new_len) = (length.to_string(), digits.to_string());
        let rewritten: Vec<Vec<u8>> = words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if i == length_word {
                    new_len.clone().into_bytes()
                } else if length_word == 1 && *w == format!("s{old_len}").as_bytes() {
                    format!("s{new_len}").into_bytes()
                } else {
                    w.to_vec()
                }
            })
            .collect();
        out.extend_from_slice(&rewritten.join(&b' '));
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&data[..digits]);
        out.extend_from_slice(b"\r\n");
        at = data_start + length + 2;
    }
    out
}

#[test]
fn padded_numbers_are_trimmed_for_the_comparison_and_nothing_else_changes() {
    let reply = b"VALUE a 0 4\r\n194 \r\nVALUE b 5 3\r\nxyz\r\nVA 4 s4 f5\r\n12  \r\nEN\r\nVALUE c 0 2\r\n 1\r\nEND\r\n";
    assert_eq!(
        trim_padded_numbers(reply),
        b"VALUE a 0 3\r\n194\r\nVALUE b 5 3\r\nxyz\r\nVA 2 s2 f5\r\n12\r\nEN\r\nVALUE c 0 2\r\n 1\r\nEND\r\n"
    );
}

/// Zeroes the CAS of every binary response in `reply`: two servers number their items'
/// versions each its own way.
fn zero_binary_cas(reply: &mut [u8]) {
    let mut at = 0;
    while at + 24 <= reply.len() && reply[at] == 0x81 {
        let body =
            u32::from_be_bytes([reply[at + 8], reply[at + 9], reply[at + 10], reply[at + 11]]);
        reply[at + 16..at + 24].fill(0);
        at += 24 + body as usize;
    }
}

/// A binary request header (and body) with the lengths given, whatever the body holds.
fn binary_request(opcode: u8, key_len: u16, extras_len: u8, body_len: u32, body: &[u8]) -> Vec<u8> {
    let mut request = vec![0x80, opcode];
    request.extend_from_slice(&key_len.to_be_bytes());
    request.push(extras_len);
    request.extend_from_slice(&[0, 0, 0]); // data type, vbucket
    request.extend_from_slice(&body_len.to_be_bytes());
    request.extend_from_slice(&[0xAB; 4]); // opaque
    request.extend_from_slice(&[0; 8]); // CAS: none
    request.extend_from_slice(body);
    request
}

/// A binary noop (opaque 0xABABABAB): the binary sentinel.
fn binary_noop() -> Vec<u8> {
    binary_request(BINARY_NOOP, 0, 0, 0, &[])
}

/// A well-formed binary request.
fn binary(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = extras.to_vec();
    body.extend_from_slice(key);
    body.extend_from_slice(value);
    binary_request(
        opcode,
        key.len() as u16,
        extras.len() as u8,
        body.len() as u32,
        &body,
    )
}

const BINARY_SET: u8 = 0x01;
const BINARY_GET: u8 = 0x00;
const BINARY_GETK: u8 = 0x0c;
const BINARY_NOOP: u8 = 0x0a;
const BINARY_APPEND: u8 = 0x0e;
const BINARY_SASL_AUTH: u8 = 0x21;
const SET_EXTRAS: [u8; 8] = [0; 8];

/// A deterministic generator for the noise (xorshift).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn garbage_and_binary_noise_are_refused_without_harm() -> anyhow::Result<()> {
    let target = Target::start(&[])?;
    let addr = target.fogcached.addr();
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    for round in 0..60 {
        let len = 1 + (noise.next() % 3000) as usize;
        let mut bytes = noise.bytes(len);
        match round % 3 {
            // Text-looking garbage: printable bytes cut into lines.
            0 => {
                for b in &mut bytes {
                    *b = b' ' + *b % 95;
                }
                for at in (0..bytes.len()).step_by(37) {
                    bytes[at] = b'\n';
                }
            }
            // Binary noise behind a request magic byte.
            1 => bytes[0] = 0x80,
            // Raw bytes, whatever the first one is.
            _ => {}
        }
        let seen = exchange(addr, &bytes)?;
        // Whatever it was, the answer is a bounded one: the garbage's own size in error
        // lines at most, never an echo of megabytes.
        assert!(
            seen.reply.len() <= 64 * (bytes.len() + 1),
            "round {round}: {} reply bytes for {} bytes of noise",
            seen.reply.len(),
            bytes.len()
        );
        if round % 3 == 0 {
            // Lines of text garbage are answered line by line with memcached's errors.
            for line in seen.reply.split_inclusive(|&b| b == b'\n') {
                assert!(
                    line.starts_with(b"ERROR")
                        || line.starts_with(b"CLIENT_ERROR ")
                        || line.starts_with(b"SERVER_ERROR ")
                        || line == b"END\r\n"
                        || line.starts_with(b"VERSION ")
                        || line.starts_with(b"EN")
                        || line.starts_with(b"NOT_FOUND")
                        || line.starts_with(b"MN"),
                    "round {round}: unexpected reply line {:?}",
                    escape(line)
                );
            }
        }
    }
    target.check_unharmed("garbage and binary noise")
}

#[test]
fn hostile_lengths_get_memcacheds_errors() -> anyhow::Result<()> {
    let target = Target::start(&[])?;
    // Negative, overflowing 64 bits, INT_MAX and beyond memcached's INT_MAX - 2 limit:
    // the line is refused and the two bytes after it are a command of their own.
    for length in [
        "-1",
        "-2147483648",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999",
        "2147483646",
        "2147483647",
        "2147483648",
        "0x10",
        "1e3",
    ] {
        let request = format!("set k 0 0 {length}\r\nxx\r\nget k\r\nmn\r\n");
        same_as_memcached(
            &target,
            &format!("set of length {length}"),
            request.as_bytes(),
        )?;
        let request = format!("ms k {length} T0\r\nxx\r\nmg k v\r\nmn\r\n");
        same_as_memcached(
            &target,
            &format!("ms of length {length}"),
            request.as_bytes(),
        )?;
    }
    // A length that overflows 32 bits: memcached 1.6.18 stores it in an int and wraps
    // 4294967296 to 0 (it then reads the next two bytes as a bad data chunk); fogcached
    // refuses the line, as memcached refuses every other length it cannot hold.
    let seen = exchange(
        target.fogcached.addr(),
        b"set k 0 0 4294967296\r\nxx\r\nget k\r\nmn\r\n",
    )?;
    assert_eq!(
        escape(&seen.reply),
        escape(b"CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\nMN\r\n")
    );
    // Larger than -I, exactly -I (an item is more than its value), and the largest value
    // both servers store under -I 1m (less than -I by their item headers and the key).
    for value_bytes in [
        ITEM_SIZE_MAX_BYTES + 1,
        ITEM_SIZE_MAX_BYTES,
        ITEM_SIZE_MAX_BYTES - 100,
        4 * ITEM_SIZE_MAX_BYTES,
    ] {
        let mut request = b"set big 0 0 3\r\nold\r\n".to_vec();
        request.extend_from_slice(format!("set big 0 0 {value_bytes}\r\n").as_bytes());
        request.resize(request.len() + value_bytes, b'v');
        request.extend_from_slice(b"\r\nmg big s\r\nmn\r\n");
        let seen = same_as_memcached(&target, &format!("a set of {value_bytes} bytes"), &request)?;
        let expected: &[u8] = if value_bytes > ITEM_SIZE_MAX_BYTES - 100 {
            // Too large: the old value is gone (memcached unlinks it), the payload was
            // swallowed, the next command answered.
            b"STORED\r\nSERVER_ERROR object too large for cache\r\nEN\r\nMN\r\n"
        } else {
            b"STORED\r\nSTORED\r\nHD s1048476\r\nMN\r\n"
        };
        assert_eq!(escape(&seen.reply), escape(expected), "{value_bytes} bytes");
        // The same in the meta protocol.
        let mut request = format!("ms big {value_bytes} T0\r\n").into_bytes();
        request.resize(request.len() + value_bytes, b'v');
        request.extend_from_slice(b"\r\nmn\r\n");
        same_as_memcached(&target, &format!("an ms of {value_bytes} bytes"), &request)?;
        // And binary: a body larger than -I is answered "Too large." and swallowed.
        let mut request = binary(BINARY_SET, &SET_EXTRAS, b"big", &vec![b'v'; value_bytes]);
        request.extend_from_slice(&binary_noop());
        same_as_memcached(
            &target,
            &format!("a binary set of {value_bytes} bytes"),
            &request,
        )?;
    }
    // A binary body length of 4 GiB - 1: memcached 1.6.18 computes the value length in
    // an int (negative) and swallows nothing, answering the noop inside the declared
    // body; fogcached keeps the frame and swallows the whole declared body, so the noop
    // is payload and nothing more is answered.
    let mut request = binary_request(
        BINARY_SET,
        4,
        8,
        u32::MAX,
        &[&SET_EXTRAS[..], b"kkkk"].concat(),
    );
    request.extend_from_slice(&binary_noop());
    let seen = exchange(target.fogcached.addr(), &request)?;
    assert_eq!(
        &seen.reply[..2],
        &[0x81, BINARY_SET],
        "{:?}",
        escape(&seen.reply)
    );
    assert_eq!(&seen.reply[6..8], &[0x00, 0x03], "status E2BIG");
    assert_eq!(&seen.reply[24..], b"Too large.");
    assert!(!seen.closed);
    target.check_unharmed("hostile lengths")
}

#[test]
fn keys_of_250_bytes_work_and_251_are_refused_in_every_protocol() -> anyhow::Result<()> {
    let target = Target::start(&[])?;
    for key_len in [250, 251] {
        let key = "k".repeat(key_len);
        // One command per connection: memcached 1.6.18 wipes the replies of earlier
        // pipelined commands when a get's key is too long (it answers only the error);
        // fogcached answers each command.
        let commands = [
            format!("set {key} 0 0 1\r\nx\r\n"),
            format!("get {key}\r\n"),
            format!("get a {key} b\r\n"),
            format!("gat 0 {key}\r\n"),
            format!("append {key} 0 0 1\r\ny\r\n"),
            format!("incr {key} 1\r\n"),
            format!("touch {key} 10\r\n"),
            format!("delete {key}\r\n"),
            format!("mg {key} s v\r\n"),
            format!("ms {key} 2 T0\r\nzz\r\n"),
            format!("ma {key}\r\n"),
            format!("md {key} q\r\n"),
        ];
        for command in &commands {
            same_as_memcached(
                &target,
                &format!("{key_len}-byte key: {}", &command[..command.len().min(12)]),
                format!("{command}mn\r\n").as_bytes(),
            )?;
        }
        let mut request = binary(BINARY_SET, &SET_EXTRAS, key.as_bytes(), b"v");
        request.extend_from_slice(&binary(BINARY_GETK, &[], key.as_bytes(), &[]));
        request.extend_from_slice(&binary_noop());
        same_as_memcached(
            &target,
            &format!("binary set of a {key_len}-byte key"),
            &request,
        )?;
    }
    target.check_unharmed("250- and 251-byte keys")
}

#[test]
fn binary_headers_whose_lengths_disagree_are_refused_and_closed() -> anyhow::Result<()> {
    let target = Target::start(&[])?;
    let padding = |n: usize| vec![b'p'; n];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // CVE-2016-8704: an append whose key is longer than its body. memcached reads
        // key + extras bytes before checking, so they are sent; both answer "Unknown
        // command" and close.
        (
            "append, key length 200 > body length 4",
            binary_request(BINARY_APPEND, 200, 0, 4, &padding(200)),
        ),
        // CVE-2016-8705: a set whose key + extras exceed the body.
        (
            "set, key 100 + extras 8 > body 10",
            binary_request(BINARY_SET, 100, 8, 10, &padding(108)),
        ),
        (
            "set, extras 255 > body 8",
            binary_request(BINARY_SET, 0, 255, 8, &padding(255)),
        ),
        // The extras a command does not take, or misses.
        (
            "get with extras",
            binary_request(BINARY_GET, 1, 4, 5, b"\0\0\0\0k"),
        ),
        (
            "get whose body is longer than its key",
            binary_request(BINARY_GET, 1, 0, 5, b"kxxxx"),
        ),
        ("set without extras", binary(BINARY_SET, &[], b"k", b"v")),
        (
            "incr with 8 of its 20 bytes of extras",
            binary(0x05, &[0; 8], b"n", &[]),
        ),
        ("noop with a body", binary(BINARY_NOOP, &[], &[], b"zz")),
        ("get without a key", binary(BINARY_GET, &[], &[], &[])),
    ];
    for (case, bytes) in &cases {
        let seen = same_as_memcached(&target, case, bytes)?;
        assert!(seen.closed, "{case}: the connection stays open");
        assert_eq!(seen.reply.get(..2), Some(&[0x81, bytes[1]][..]), "{case}");
    }
    // The same with a key length of 65535: memcached closes without a word (the key
    // does not fit its read buffer); fogcached closes after the same "Unknown command".
    let bytes = binary_request(
        BINARY_APPEND,
        u16::MAX,
        0,
        4,
        &padding(usize::from(u16::MAX)),
    );
    let seen = exchange(target.fogcached.addr(), &bytes)?;
    assert!(
        seen.closed,
        "append with key length 65535 > body 4: not closed"
    );
    assert_eq!(&seen.reply[..2], &[0x81, BINARY_APPEND]);
    assert_eq!(&seen.reply[24..], b"Unknown command");
    // CVE-2016-8706: a SASL authentication whose key length exceeds what the body can
    // hold after it; memcached (without -S) waits for the key, fogcached answers at
    // once. Either way: an error status and a close, never a read past the body.
    let bytes = binary_request(BINARY_SASL_AUTH, 0xfff0, 0, 9, b"PLAIN\0u\0p");
    let seen = exchange(target.fogcached.addr(), &bytes)?;
    assert!(
        seen.closed,
        "SASL with key length 0xfff0 > body 9: not closed"
    );
    assert_eq!(&seen.reply[..2], &[0x81, BINARY_SASL_AUTH]);
    assert_ne!(&seen.reply[6..8], &[0, 0], "a success status");
    // An unknown opcode's body is swallowed whole, and what follows is answered.
    let mut bytes = binary(0x55, &[], &[], b"abcdef");
    bytes.extend_from_slice(&binary_noop());
    let seen = same_as_memcached(&target, "unknown opcode with a body, then noop", &bytes)?;
    assert!(!seen.closed);
    // A first byte other than the request magic makes a text connection: 24 bytes
    // without a newline are half a command line, and both servers wait for the rest.
    let seen = same_as_memcached(&target, "response magic", &[0x81; 24])?;
    assert_eq!(
        seen,
        Seen {
            reply: Vec::new(),
            closed: false
        }
    );
    target.check_unharmed("binary headers whose lengths disagree")
}

/// A mixed pipeline whose replies carry no CAS value and no clock (so two servers
/// answer it byte for byte alike): stores, reads, counters, deletes, meta commands.
fn mixed_pipeline(count: usize, namespace: &str) -> Vec<u8> {
    let mut noise = Noise(0x2545_f491_4f6c_dd1d);
    let mut bytes = Vec::new();
    for i in 0..count {
        let key = format!("{namespace}{}", noise.next() % 200);
        let command = match noise.next() % 12 {
            0 | 1 => {
                let len = (noise.next() % 3000) as usize;
                let mut c = format!("set {key} {i} 0 {len}\r\n").into_bytes();
                c.resize(c.len() + len, b'a' + (i % 26) as u8);
                c.extend_from_slice(b"\r\n");
                c
            }
            2 => format!("get {key} {namespace}1 {namespace}2\r\n").into_bytes(),
            3 => format!("add {key} 0 0 1\r\n1\r\n").into_bytes(),
            4 => format!("incr {key} {}\r\n", noise.next() % 1000).into_bytes(),
            5 => format!("decr {key} 7\r\n").into_bytes(),
            6 => format!("delete {key}\r\n").into_bytes(),
            7 => format!("append {key} 0 0 2\r\n++\r\n").into_bytes(),
            8 => format!("mg {key} s v f k\r\n").into_bytes(),
            9 => format!("ms {key} 3 F5 I\r\nxyz\r\n").into_bytes(),
            10 => format!("ma {key} N0 J13 D2 v\r\n").into_bytes(),
            // (No `mn` here: the one at the end says the pipeline was answered.)
            _ => format!("touch {key} 0\r\n").into_bytes(),
        };
        bytes.extend_from_slice(&command);
    }
    bytes.extend_from_slice(TEXT_NOOP);
    bytes
}

#[test]
fn thousands_of_pipelined_commands_in_one_write_are_answered_as_memcached_does(
) -> anyhow::Result<()> {
    let target = Target::start(&[])?;
    let bytes = mixed_pipeline(5000, "pipe");
    let seen = same_as_memcached(&target, "5000 pipelined commands", &bytes)?;
    assert!(!seen.closed);
    // Binary: 3000 quiet sets and quiet gets in one write, then a noop to end them.
    let mut bytes = Vec::new();
    let mut expected_hits = 0;
    for i in 0..3000u32 {
        let key = format!("bin{}", i % 500);
        if i % 2 == 0 {
            bytes.extend_from_slice(&binary(0x11, &SET_EXTRAS, key.as_bytes(), &i.to_be_bytes()));
        } else {
            bytes.extend_from_slice(&binary(0x0d, &[], key.as_bytes(), &[]));
            expected_hits += 1;
        }
    }
    bytes.extend_from_slice(&binary_noop());
    let seen = same_as_memcached(&target, "3000 pipelined quiet binary commands", &bytes)?;
    assert!(!seen.closed);
    assert!(expected_hits > 0 && seen.reply.ends_with(&[0; 8][..]));
    target.check_unharmed("thousands of pipelined commands")
}

#[test]
fn one_byte_at_a_time_is_answered_as_one_write() -> anyhow::Result<()> {
    let target = Target::start(&[])?;
    let bytes = mixed_pipeline(60, "drip");
    let whole = same_as_memcached(&target, "60 commands in one write", &bytes)?;
    // The same commands on keys of the same length that this server has not seen, one
    // byte per write.
    let bytes = mixed_pipeline(60, "drop");
    let expected = String::from_utf8_lossy(&whole.reply).replace("drip", "drop");
    let dripped = exchange_with(target.fogcached.addr(), Sentinel::of(&bytes), |stream| {
        for byte in &bytes {
            stream.write_all(std::slice::from_ref(byte))?;
            stream.flush()?;
            // Let the server read each byte on its own now and then.
            if *byte == b' ' || *byte == b'\n' {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    })?;
    assert_eq!(escape(&dripped.reply), escape(expected.as_bytes()));
    // A binary request one byte at a time.
    let mut bytes = binary(BINARY_SET, &SET_EXTRAS, b"bin-drip", b"value");
    bytes.extend_from_slice(&binary(BINARY_GETK, &[], b"bin-drip", &[]));
    bytes.extend_from_slice(&binary_noop());
    let whole = exchange(target.fogcached.addr(), &bytes)?;
    let dripped = exchange_with(target.fogcached.addr(), Sentinel::of(&bytes), |stream| {
        for byte in &bytes {
            stream.write_all(std::slice::from_ref(byte))?;
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    })?;
    // The CAS differs (two stores); everything before it is the same.
    assert_eq!(whole.reply.len(), dripped.reply.len());
    assert_eq!(whole.reply[..16], dripped.reply[..16]);
    assert!(dripped.reply[..dripped.reply.len() - 24].ends_with(b"bin-dripvalue"));
    target.check_unharmed("one byte at a time")
}

#[test]
fn clients_leaving_in_the_middle_of_a_payload_store_nothing_and_harm_no_one() -> anyhow::Result<()>
{
    let target = Target::start(&[])?;
    let addr = target.fogcached.addr();
    let mut half_value = b"set torn 0 0 100000\r\n".to_vec();
    half_value.resize(half_value.len() + 50_000, b't');
    let mut half_binary = binary(BINARY_SET, &SET_EXTRAS, b"torn", &vec![b't'; 100_000]);
    half_binary.truncate(24 + 8 + 4 + 50_000);
    let mut half_swallow = format!("set torn 0 0 {}\r\n", 3 * ITEM_SIZE_MAX_BYTES).into_bytes();
    half_swallow.resize(half_swallow.len() + ITEM_SIZE_MAX_BYTES, b't');
    // memcached 1.6.18 answers a too-large value only once its payload was swallowed,
    // and drops that answer when the client leaves first; fogcached answers at the
    // command line. Otherwise the two say the same: nothing.
    const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
    let cases: [(&str, &[u8], &[u8]); 5] = [
        ("half a value", &half_value, b""),
        ("half a binary value", &half_binary, b""),
        ("half a swallowed value", &half_swallow, TOO_LARGE),
        ("half a multi-get line", b"get witness1 witness2 wit", b""),
        ("half a command", b"se", b""),
    ];
    for (case, bytes, answer) in cases {
        // A half-close: the server gives up the request and closes its side.
        let half_closed = exchange_with(addr, None, |stream| {
            stream.write_all(bytes)?;
            stream.shutdown(Shutdown::Write)
        })?;
        let expected = Seen {
            reply: answer.to_vec(),
            closed: true,
        };
        assert_eq!(half_closed, expected, "{case}: half-closed");
        if let Some(memcached) = &target.memcached {
            let memcached_half_closed = exchange_with(memcached.addr(), None, |stream| {
                stream.write_all(bytes)?;
                stream.shutdown(Shutdown::Write)
            })?;
            assert_eq!(
                memcached_half_closed,
                Seen {
                    reply: Vec::new(),
                    closed: true
                },
                "memcached, {case}: half-closed"
            );
        }
        // A reset in the middle.
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        (&stream).write_all(bytes)?;
        reset_on_close(&stream)?;
        drop(stream);
        let mut client = RawClient::connect(addr)?;
        assert_eq!(
            client.request(b"get torn\r\n", b"END\r\n")?,
            b"END\r\n",
            "{case}: part of a value was stored"
        );
    }
    target.check_unharmed("clients leaving in the middle of a payload")
}

/// A fuzzing-and-testing finding: data and the client's FIN that arrive together are
/// one edge-triggered event; the read that took the data was short, the connection took
/// the socket for drained and never read the end of file, so a client that half-closed
/// in the middle of a value held its connection (and a `-c` slot) forever. The server
/// is stopped (SIGSTOP) while the client sends and half-closes, so that both are
/// waiting when it resumes.
#[test]
fn data_and_a_half_close_arriving_together_close_the_connection() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-t", "1"])?;
    let addr = server.addr();
    for payload_bytes in [10, 5000, 50_000] {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        // The connection is registered with its worker before the server stops.
        let mut probe = RawClient::connect(addr)?;
        assert!(probe
            .request(b"version\r\n", b"\r\n")?
            .starts_with(b"VERSION"));
        let mut client = RawClient::connect(addr)?;
        assert!(client
            .request(b"version\r\n", b"\r\n")?
            .starts_with(b"VERSION"));
        drop(client);
        stream.write_all(b"version\r\n")?;
        let mut version = vec![0u8; b"VERSION \r\n".len() + server::session::SERVER_VERSION.len()];
        stream.read_exact(&mut version)?;
        server.signal(libc::SIGSTOP)?;
        let mut request = b"set torn 0 0 100000\r\n".to_vec();
        request.resize(request.len() + payload_bytes, b't');
        let sent = stream
            .write_all(&request)
            .and_then(|()| stream.shutdown(Shutdown::Write));
        std::thread::sleep(Duration::from_millis(100));
        server.signal(libc::SIGCONT)?;
        sent?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut rest = Vec::new();
        let closed = match stream.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(e) => e.kind() == ErrorKind::ConnectionReset,
        };
        assert!(
            closed,
            "{payload_bytes} bytes of a value and a half-close: the connection stayed open"
        );
        assert_eq!(rest, b"");
    }
    Ok(())
}

#[test]
fn connections_beyond_the_limit_are_refused_and_the_server_recovers() -> anyhow::Result<()> {
    const LIMIT: usize = 8;
    let target = Target::start(&["-c", "8"])?;
    let addr = target.fogcached.addr();
    // Wait (bounded) until the start-up probes have been counted out.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut clients = vec![RawClient::connect(addr)?];
    while stat(&clients[0].stats("")?, "curr_connections") != Some("1") {
        assert!(
            Instant::now() < deadline,
            "earlier connections never counted out"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    while clients.len() < LIMIT {
        let mut client = RawClient::connect(addr)?;
        assert!(client
            .request(b"version\r\n", b"\r\n")?
            .starts_with(b"VERSION "));
        clients.push(client);
    }
    // Many more than the limit, at once: each is told and closed.
    let mut refused = Vec::new();
    for _ in 0..3 * LIMIT {
        refused.push(TcpStream::connect_timeout(&addr, Duration::from_secs(5))?);
    }
    for mut stream in refused {
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply)?;
        assert_eq!(reply, b"ERROR Too many open connections\r\n");
    }
    // The connected clients were not disturbed.
    for client in &mut clients {
        assert!(client.request(b"get witness7\r\n", b"END\r\n")?.len() > WITNESS_BYTES);
    }
    let stats = clients[0].stats("")?;
    assert_eq!(stat(&stats, "rejected_connections"), Some("24"));
    // Once one leaves, a newcomer is served.
    drop(clients.pop());
    wait_for_a_free_slot(addr)?;
    // The server counts the others out as it sees their closes: wait for that too, or
    // the check's client could be the ninth.
    drop(clients);
    let deadline = Instant::now() + Duration::from_secs(5);
    // The observer may itself be refused while the closes are being counted.
    let mut observer = loop {
        wait_for_a_free_slot(addr)?;
        let mut observer = RawClient::connect(addr)?;
        if observer.stats("").is_ok() {
            break observer;
        }
        assert!(Instant::now() < deadline, "no connection is served");
    };
    while stat(&observer.stats("")?, "curr_connections") != Some("1") {
        assert!(
            Instant::now() < deadline,
            "closed clients never counted out"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(observer);
    wait_for_a_free_slot(addr)?;
    target.check_unharmed("connections beyond the limit")
}

/// Connects until a connection is served rather than refused (bounded: 5 s).
fn wait_for_a_free_slot(addr: std::net::SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut client = RawClient::connect(addr)?;
        let reply = client.request(b"version\r\n", b"\r\n")?;
        if reply.starts_with(b"VERSION ") {
            return Ok(());
        }
        assert!(
            Instant::now() < deadline,
            "no slot came free: {:?}",
            escape(&reply)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn clients_that_never_read_their_replies_do_not_hold_up_the_others() -> anyhow::Result<()> {
    let target = Target::start(&[])?;
    let addr = target.fogcached.addr();
    // Four clients ask for the witnesses again and again and never read: each writes
    // until its socket is full (the server stops reading it once its replies pile up).
    let request = (0..WITNESSES)
        .map(|i| format!("get witness{i}\r\n"))
        .collect::<String>();
    let mut hogs = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_write_timeout(Some(Duration::from_millis(500)))?;
        let mut written = 0usize;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            match stream.write(request.as_bytes()) {
                Ok(n) => written += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
                Err(e) => return Err(e.into()),
            }
        }
        assert!(
            written < 64 * 1024 * 1024,
            "the server kept reading {written} bytes of requests whose replies nobody read"
        );
        hogs.push(stream);
    }
    // Meanwhile everyone else is served, correctly.
    target.check_unharmed("clients that never read")?;
    drop(hogs);
    Ok(())
}

#[test]
fn a_chunked_set_without_its_crlf_is_refused_as_memcached_does() -> anyhow::Result<()> {
    let target = Target::start(&[])?;
    // memcached #1306: a value larger than slab_chunk_max (chunked in memcached) whose
    // data is not followed by "\r\n". The data is refused, the old value stays, and the
    // bytes after the declared length are the next command.
    for value_bytes in [10, 16 * 1024, 600_000, ITEM_SIZE_MAX_BYTES - 100] {
        for trailer in [&b"XX"[..], b"\rX", b"\n\r\n", b"X\r\n"] {
            let mut request = b"set chunked 0 0 3\r\nold\r\n".to_vec();
            request.extend_from_slice(format!("set chunked 0 0 {value_bytes}\r\n").as_bytes());
            request.resize(request.len() + value_bytes, b'c');
            request.extend_from_slice(trailer);
            request.extend_from_slice(b"get chunked\r\nmn\r\n");
            let seen = same_as_memcached(
                &target,
                &format!("{value_bytes}-byte set ending {:?}", escape(trailer)),
                &request,
            )?;
            assert!(
                seen.reply
                    .starts_with(b"STORED\r\nCLIENT_ERROR bad data chunk\r\n"),
                "{:?}",
                escape(&seen.reply)
            );
            assert!(seen
                .reply
                .ends_with(b"VALUE chunked 0 3\r\nold\r\nEND\r\nMN\r\n"));
            // The same in the meta protocol.
            let mut request = format!("ms chunked {value_bytes} T0\r\n").into_bytes();
            request.resize(request.len() + value_bytes, b'c');
            request.extend_from_slice(trailer);
            request.extend_from_slice(b"mg chunked s\r\nmn\r\n");
            same_as_memcached(
                &target,
                &format!("{value_bytes}-byte ms ending {:?}", escape(trailer)),
                &request,
            )?;
        }
    }
    target.check_unharmed("chunked sets without their CRLF")
}
