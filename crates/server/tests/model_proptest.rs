//! Property test: random sequences of text-protocol commands over a few keys get, byte for
//! byte, the replies that a simple model of memcached 1.6's semantics predicts.
//!
//! The model is a map from key to (value, flags, version). It knows memcached's quirks that
//! a client can see: `incr`/`decr` rewrite a shorter number in place padded with spaces,
//! `decr` stops at 0 and `incr` wraps at 2^64, `append`/`prepend` keep the item's flags
//! and exptime, a negative exptime stores an item that is already expired, `touch` does
//! not change the CAS unique, and `noreply` silences every reply of the storage and
//! arithmetic commands (memcached sends even their `CLIENT_ERROR`s through the
//! noreply-aware path).
//!
//! CAS uniques are chosen by the server, so the model learns them from `gets` replies:
//! `gets` replies are compared with the unique masked, and the uniques must behave — the
//! same unique while an item is unmodified, a never-seen-before one after every
//! modification. A `cas` command then uses the last unique seen for its key (or one that
//! was never issued), and the model knows whether the item changed since.
//!
//! The same sequences run against Debian's memcached too, which keeps the model honest:
//! when both servers agree with the model they agree with each other. No timing: exptime
//! is 0 or negative only.
//!
//! After every command the test sends `mn` (meta no-op, reply `MN\r\n`), so the reply of a
//! command is exactly the bytes before `MN\r\n` — empty for a silent `noreply` command,
//! and any stray byte shows up as a difference.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use testkit::{escape, RawClient, ServerProcess};

/// Distinct keys per sequence: few, so that commands collide on the same items.
const KEYS_PER_CASE: usize = 4;
const COMMANDS_PER_CASE_MAX: usize = 50;
/// Sequences per test, unless PROPTEST_CASES says otherwise.
const CASES_DEFAULT: u32 = 256;
/// Bound on shrinking steps, each of which replays a sequence against the server.
const SHRINK_ITERS_MAX: u32 = 512;
/// A CAS unique no server issues during a test (they count up from 1).
const CAS_NEVER_ISSUED: u64 = 1 << 62;
const SENTINEL: &[u8] = b"mn\r\n";
const SENTINEL_REPLY: &[u8] = b"MN\r\n";

#[test]
fn model_matches_fogcached() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    check_against_model(server.addr())
        .map_err(|error| anyhow::anyhow!("fogcached differs from the model: {error}"))?;
    server.stop()?;
    Ok(())
}

/// The same property against the reference, so that a wrong model fails here and not
/// only against fogcached.
///
/// memcached itself very rarely (once in ~15 000 sequences seen) answers `decr` of a
/// number with "non-numeric value" after a long sequence, which does not happen again
/// when the same sequence is replayed on a fresh memcached. So exactly that failure, when
/// its minimal failing sequence passes every replay on a fresh memcached, is reported as
/// a skip (it ended the run early, so the property is checked again with new sequences);
/// any other failure, one that reproduces, or that flake twice in a row fails the test.
#[test]
fn model_matches_memcached() -> anyhow::Result<()> {
    let mut flakes = Vec::new();
    for attempt in 1..=MEMCACHED_ATTEMPTS {
        let server = ServerProcess::memcached(&[])?;
        let Err(error) = check_against_model(server.addr()) else {
            return Ok(());
        };
        drop(server);
        let TestError::Fail(reason, commands) = error else {
            anyhow::bail!("memcached run aborted: {error}");
        };
        let reason = reason.to_string();
        if !is_memcacheds_arith_flake(&reason) {
            anyhow::bail!(
                "memcached differs from the model: {reason}\nminimal failing input: {commands:#?}"
            );
        }
        // Replays on a fresh server, each with keys of its own: the flake never showed
        // on one, a wrong model shows on every one.
        let fresh = ServerProcess::memcached(&[])?;
        for replay in 0..FLAKE_REPLAYS {
            if let Err(replayed) = run_sequence(fresh.addr(), replay, &commands) {
                anyhow::bail!(
                    "memcached differs from the model, reproduced on a fresh memcached: \
                     {replayed}\nminimal failing input: {commands:#?}"
                );
            }
        }
        testkit::skip!(
            "model_matches_memcached",
            "run {attempt} of {MEMCACHED_ATTEMPTS} ended on memcached's arith flake (the minimal \
             sequence passed {FLAKE_REPLAYS} replays on a fresh memcached); the rest of that \
             run's sequences were not checked: {}",
            reason.lines().next().unwrap_or_default()
        );
        flakes.push(reason);
    }
    anyhow::bail!(
        "memcached hit its arith flake in all {MEMCACHED_ATTEMPTS} runs: far more often than \
         it does, so suspect the model: {flakes:#?}"
    )
}

/// Runs of the memcached property: when every one ends on memcached's rare flake (see
/// `model_matches_memcached`), the test fails.
const MEMCACHED_ATTEMPTS: u32 = 2;
/// Replays on a fresh memcached of a sequence that showed the flake.
const FLAKE_REPLAYS: u64 = 3;
/// The reply of memcached's flake: `incr`/`decr` of a number answered as if it were not
/// one.
const ARITH_FLAKE_REPLY: &str = "CLIENT_ERROR cannot increment or decrement non-numeric value";

/// Whether a failure (`run_sequence`'s message) is memcached's known flake: the failing
/// step is an `incr`/`decr` and memcached answered "non-numeric value". Nothing else, not
/// a missing reply nor any other mismatch, may be ignored.
fn is_memcacheds_arith_flake(reason: &str) -> bool {
    let mut lines = reason.lines();
    // "step N: <request>"
    let step_is_arith = lines.next().is_some_and(|first| {
        first
            .strip_prefix("step ")
            .and_then(|rest| rest.split_once(": "))
            .is_some_and(|(_, request)| {
                request.starts_with("incr ") || request.starts_with("decr ")
            })
    });
    // "  actual   <reply>", worded as `mismatch_message` words it.
    let flake_line = mismatch_message(
        0,
        b"",
        b"",
        format!("{ARITH_FLAKE_REPLY}\r\n").as_bytes(),
        "",
    )
    .lines()
    .nth(2)
    .unwrap_or_default()
    .to_owned();
    step_is_arith && lines.nth(1).is_some_and(|line| line == flake_line)
}

fn check_against_model(addr: SocketAddr) -> Result<(), TestError<Vec<Command>>> {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES_DEFAULT);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: SHRINK_ITERS_MAX,
        // The failing sequence is printed in full; no regression files in the tree.
        failure_persistence: None,
        ..Config::default()
    });
    // Each run (including every shrinking replay) gets keys of its own, so runs never see
    // each other's items and no flush_all is needed.
    let run_counter = AtomicU64::new(1);
    let strategy = prop::collection::vec(command_strategy(), 1..=COMMANDS_PER_CASE_MAX);
    runner.run(&strategy, |commands| {
        let run = run_counter.fetch_add(1, Ordering::Relaxed);
        run_sequence(addr, run, &commands)
    })
}

// ---------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreVerb {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

impl StoreVerb {
    fn name(self) -> &'static str {
        match self {
            StoreVerb::Set => "set",
            StoreVerb::Add => "add",
            StoreVerb::Replace => "replace",
            StoreVerb::Append => "append",
            StoreVerb::Prepend => "prepend",
        }
    }
}

/// Exptime 0 (never) or negative (already expired); nothing in between, so no timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expire {
    Never,
    Past,
}

impl Expire {
    fn token(self) -> &'static str {
        match self {
            Expire::Never => "0",
            Expire::Past => "-1",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CasUnique {
    /// The unique from the last `gets` of this key (never issued if there was none).
    LastSeen,
    NeverIssued,
}

#[derive(Clone, Debug)]
enum Command {
    Store {
        verb: StoreVerb,
        key: usize,
        flags: u32,
        expire: Expire,
        value: Vec<u8>,
        noreply: bool,
    },
    Cas {
        key: usize,
        flags: u32,
        expire: Expire,
        value: Vec<u8>,
        unique: CasUnique,
        noreply: bool,
    },
    Get {
        keys: Vec<usize>,
        with_cas: bool,
    },
    Delete {
        key: usize,
        noreply: bool,
    },
    Arith {
        incr: bool,
        key: usize,
        /// The delta token as sent: usually a valid u64, sometimes not a number.
        delta: String,
        noreply: bool,
    },
    Touch {
        key: usize,
        expire: Expire,
        noreply: bool,
    },
}

fn key_strategy() -> impl Strategy<Value = usize> {
    0..KEYS_PER_CASE
}

fn flags_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(65535),
        Just(u32::MAX),
        any::<u32>()
    ]
}

fn expire_strategy() -> impl Strategy<Value = Expire> {
    prop_oneof![4 => Just(Expire::Never), 1 => Just(Expire::Past)]
}

fn noreply_strategy() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.2)
}

/// Values: numbers (for incr/decr), words, payloads containing `\r\n`, empty, and a few
/// kilobytes. Lower-case only, so a value can never contain the sentinel reply `MN\r\n`.
fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (0u64..1000).prop_map(|n| n.to_string().into_bytes()),
        1 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        1 => prop::sample::select(vec![
            "18446744073709551615", // u64::MAX: the next incr wraps
            "18446744073709551616", // one more: not a number for memcached
            "9",
            "10",
            "00042",
            "-1",
            "-0",
            "12abc",
            "12 abc",
            " 7",
            "+3",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        3 => "[a-z]{0,12}".prop_map(String::into_bytes),
        1 => "[a-z]{1,6}\r\n[a-z]{0,6}".prop_map(String::into_bytes),
        1 => (1000usize..4000).prop_map(|len_bytes| {
            (0..len_bytes).map(|i| b'a' + (i % 26) as u8).collect()
        }),
    ]
}

fn delta_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u64..100).prop_map(|n| n.to_string()),
        2 => any::<u64>().prop_map(|n| n.to_string()),
        1 => Just(u64::MAX.to_string()),
        1 => prop::sample::select(vec!["abc", "-1", "18446744073709551616", "1x"])
            .prop_map(str::to_owned),
    ]
}

fn command_strategy() -> impl Strategy<Value = Command> {
    let store = (
        prop::sample::select(vec![
            StoreVerb::Set,
            StoreVerb::Set,
            StoreVerb::Add,
            StoreVerb::Replace,
            StoreVerb::Append,
            StoreVerb::Prepend,
        ]),
        key_strategy(),
        flags_strategy(),
        expire_strategy(),
        value_strategy(),
        noreply_strategy(),
    )
        .prop_map(
            |(verb, key, flags, expire, value, noreply)| Command::Store {
                verb,
                key,
                flags,
                expire,
                value,
                noreply,
            },
        );
    let cas = (
        key_strategy(),
        flags_strategy(),
        expire_strategy(),
        value_strategy(),
        prop_oneof![4 => Just(CasUnique::LastSeen), 1 => Just(CasUnique::NeverIssued)],
        noreply_strategy(),
    )
        .prop_map(
            |(key, flags, expire, value, unique, noreply)| Command::Cas {
                key,
                flags,
                expire,
                value,
                unique,
                noreply,
            },
        );
    let get = (prop::collection::vec(key_strategy(), 1..=3), any::<bool>())
        .prop_map(|(keys, with_cas)| Command::Get { keys, with_cas });
    let delete = (key_strategy(), noreply_strategy())
        .prop_map(|(key, noreply)| Command::Delete { key, noreply });
    let arith = (
        any::<bool>(),
        key_strategy(),
        delta_strategy(),
        noreply_strategy(),
    )
        .prop_map(|(incr, key, delta, noreply)| Command::Arith {
            incr,
            key,
            delta,
            noreply,
        });
    let touch = (key_strategy(), expire_strategy(), noreply_strategy()).prop_map(
        |(key, expire, noreply)| Command::Touch {
            key,
            expire,
            noreply,
        },
    );
    prop_oneof![
        5 => store,
        2 => cas,
        5 => get,
        1 => delete,
        3 => arith,
        1 => touch,
    ]
}

// ---------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Item {
    value: Vec<u8>,
    flags: u32,
    /// Bumped by every modification; the server's CAS unique must change with it.
    version: u64,
}

#[derive(Default)]
struct Model {
    items: HashMap<usize, Item>,
    next_version: u64,
    /// Per key: the CAS unique last seen in a `gets` reply and the version it belonged to.
    last_seen: HashMap<usize, (u64, u64)>,
    /// The CAS unique of every version seen so far, and all uniques seen.
    cas_of_version: HashMap<u64, u64>,
    cas_seen: HashSet<u64>,
}

impl Model {
    fn new_version(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Stores a whole new item (set/add/replace/cas); a past exptime stores an item that
    /// is expired at once, which removes whatever was there.
    fn put(&mut self, key: usize, value: &[u8], flags: u32, expire: Expire) {
        match expire {
            Expire::Never => {
                let version = self.new_version();
                self.items.insert(
                    key,
                    Item {
                        value: value.to_vec(),
                        flags,
                        version,
                    },
                );
            }
            Expire::Past => {
                self.items.remove(&key);
            }
        }
    }

    /// The unique a `cas` command sends for `key`.
    fn cas_unique_for(&self, key: usize, unique: CasUnique) -> u64 {
        match (unique, self.last_seen.get(&key)) {
            (CasUnique::LastSeen, Some(&(cas, _))) => cas,
            _ => CAS_NEVER_ISSUED,
        }
    }

    /// Applies `command` and returns the reply memcached sends. For `gets`, the CAS unique
    /// of each VALUE line is `*` (see `mask_cas`).
    fn apply(&mut self, command: &Command) -> Vec<u8> {
        let (reply, noreply): (Vec<u8>, bool) = match command {
            Command::Store {
                verb,
                key,
                flags,
                expire,
                value,
                noreply,
            } => {
                let exists = self.items.contains_key(key);
                let reply: &[u8] = match verb {
                    StoreVerb::Set => {
                        self.put(*key, value, *flags, *expire);
                        b"STORED\r\n"
                    }
                    StoreVerb::Add if exists => b"NOT_STORED\r\n",
                    StoreVerb::Replace if !exists => b"NOT_STORED\r\n",
                    StoreVerb::Add | StoreVerb::Replace => {
                        self.put(*key, value, *flags, *expire);
                        b"STORED\r\n"
                    }
                    StoreVerb::Append | StoreVerb::Prepend => {
                        let version = self.new_version();
                        match self.items.get_mut(key) {
                            None => b"NOT_STORED\r\n",
                            Some(item) => {
                                // The item keeps its flags and exptime; the ones sent are
                                // ignored.
                                if *verb == StoreVerb::Append {
                                    item.value.extend_from_slice(value);
                                } else {
                                    let mut joined = value.clone();
                                    joined.extend_from_slice(&item.value);
                                    item.value = joined;
                                }
                                item.version = version;
                                b"STORED\r\n"
                            }
                        }
                    }
                };
                (reply.to_vec(), *noreply)
            }
            Command::Cas {
                key,
                flags,
                expire,
                value,
                unique,
                noreply,
            } => {
                let reply: &[u8] = match self.items.get(key) {
                    None => b"NOT_FOUND\r\n",
                    Some(item) => {
                        let matches = *unique == CasUnique::LastSeen
                            && self
                                .last_seen
                                .get(key)
                                .is_some_and(|&(_, version)| version == item.version);
                        if matches {
                            self.put(*key, value, *flags, *expire);
                            b"STORED\r\n"
                        } else {
                            b"EXISTS\r\n"
                        }
                    }
                };
                (reply.to_vec(), *noreply)
            }
            Command::Get { keys, with_cas } => {
                let mut reply = Vec::new();
                for key in keys {
                    if let Some(item) = self.items.get(key) {
                        reply.extend_from_slice(
                            format!(
                                "VALUE {} {} {}{}\r\n",
                                KeyName(*key),
                                item.flags,
                                item.value.len(),
                                if *with_cas { " *" } else { "" }
                            )
                            .as_bytes(),
                        );
                        reply.extend_from_slice(&item.value);
                        reply.extend_from_slice(b"\r\n");
                    }
                }
                reply.extend_from_slice(b"END\r\n");
                (reply, false)
            }
            Command::Delete { key, noreply } => {
                let reply: &[u8] = match self.items.remove(key) {
                    Some(_) => b"DELETED\r\n",
                    None => b"NOT_FOUND\r\n",
                };
                (reply.to_vec(), *noreply)
            }
            Command::Arith {
                incr,
                key,
                delta,
                noreply,
            } => (self.arith(*incr, *key, delta), *noreply),
            Command::Touch {
                key,
                expire,
                noreply,
            } => {
                let reply: &[u8] = if self.items.contains_key(key) {
                    if *expire == Expire::Past {
                        self.items.remove(key);
                    }
                    b"TOUCHED\r\n"
                } else {
                    b"NOT_FOUND\r\n"
                };
                (reply.to_vec(), *noreply)
            }
        };
        if noreply {
            Vec::new()
        } else {
            reply
        }
    }

    fn arith(&mut self, incr: bool, key: usize, delta: &str) -> Vec<u8> {
        // The delta is checked before the item is looked up.
        let Some(delta) = strtoull_like(delta.as_bytes()) else {
            return b"CLIENT_ERROR invalid numeric delta argument\r\n".to_vec();
        };
        let version = self.new_version();
        let Some(item) = self.items.get_mut(&key) else {
            return b"NOT_FOUND\r\n".to_vec();
        };
        let Some(current) = strtoull_like(&item.value) else {
            return b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".to_vec();
        };
        let next = if incr {
            current.wrapping_add(delta)
        } else {
            current.saturating_sub(delta)
        };
        let mut digits = next.to_string().into_bytes();
        // memcached rewrites the item in place when the new number fits, padding the rest
        // with spaces; a longer number gets a new item of its exact length.
        if digits.len() <= item.value.len() {
            digits.resize(item.value.len(), b' ');
        }
        item.value = digits;
        item.version = version;
        format!("{next}\r\n").into_bytes()
    }

    /// Checks the CAS uniques of a `gets` reply against the model's versions and records
    /// them. `returned` lists the keys in reply order, `uniques` their CAS uniques.
    fn observe_cas(&mut self, returned: &[usize], uniques: &[u64]) -> Result<(), String> {
        for (&key, &cas) in returned.iter().zip(uniques) {
            let version = self
                .items
                .get(&key)
                .map(|item| item.version)
                .ok_or_else(|| format!("gets returned {} which the model lacks", KeyName(key)))?;
            match self.cas_of_version.get(&version) {
                Some(&known) if known != cas => {
                    return Err(format!(
                        "CAS unique of unmodified {} changed from {known} to {cas}",
                        KeyName(key)
                    ));
                }
                Some(_) => {}
                None => {
                    if !self.cas_seen.insert(cas) {
                        return Err(format!(
                            "CAS unique {cas} of modified {} was already used",
                            KeyName(key)
                        ));
                    }
                    self.cas_of_version.insert(version, cas);
                }
            }
            self.last_seen.insert(key, (cas, version));
        }
        Ok(())
    }
}

/// memcached's reading of an item as a number: `safe_strtoull` on the item's data, which
/// is followed by `\r\n` in memory. So: optional leading whitespace and sign, digits
/// within u64, then whitespace or the end. What follows the whitespace does not matter
/// (`"12 abc"` is 12), and a minus sign is refused only when it makes the number wrap.
/// The delta token of `incr`/`decr` goes through the same function.
fn strtoull_like(text: &[u8]) -> Option<u64> {
    // C's isspace in the "C" locale.
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let mut at = text.iter().take_while(|&&b| is_space(b)).count();
    let negative = match text.get(at) {
        Some(b'-') => {
            at += 1;
            true
        }
        Some(b'+') => {
            at += 1;
            false
        }
        _ => false,
    };
    let digits_len = text[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits_len == 0 {
        return None;
    }
    let end = at + digits_len;
    if end < text.len() && !is_space(text[end]) {
        return None;
    }
    // Out of range is ERANGE in strtoull: refused.
    let magnitude: u64 = std::str::from_utf8(&text[at..end]).ok()?.parse().ok()?;
    let number = if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    if negative && (number as i64) < 0 {
        return None;
    }
    Some(number)
}

/// The key names of the current run; set by `run_sequence`.
struct KeyName(usize);

thread_local! {
    static RUN_PREFIX: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl std::fmt::Display for KeyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "r{}k{}", RUN_PREFIX.with(std::cell::Cell::get), self.0)
    }
}

// ---------------------------------------------------------------------------------------
// Running a sequence
// ---------------------------------------------------------------------------------------

fn request_bytes(command: &Command, model: &Model) -> Vec<u8> {
    let noreply_suffix = |noreply: bool| if noreply { " noreply" } else { "" };
    match command {
        Command::Store {
            verb,
            key,
            flags,
            expire,
            value,
            noreply,
        } => {
            let mut bytes = format!(
                "{} {} {flags} {} {}{}\r\n",
                verb.name(),
                KeyName(*key),
                expire.token(),
                value.len(),
                noreply_suffix(*noreply)
            )
            .into_bytes();
            bytes.extend_from_slice(value);
            bytes.extend_from_slice(b"\r\n");
            bytes
        }
        Command::Cas {
            key,
            flags,
            expire,
            value,
            unique,
            noreply,
        } => {
            let mut bytes = format!(
                "cas {} {flags} {} {} {}{}\r\n",
                KeyName(*key),
                expire.token(),
                value.len(),
                model.cas_unique_for(*key, *unique),
                noreply_suffix(*noreply)
            )
            .into_bytes();
            bytes.extend_from_slice(value);
            bytes.extend_from_slice(b"\r\n");
            bytes
        }
        Command::Get { keys, with_cas } => {
            let mut line = String::from(if *with_cas { "gets" } else { "get" });
            for key in keys {
                line.push_str(&format!(" {}", KeyName(*key)));
            }
            line.push_str("\r\n");
            line.into_bytes()
        }
        Command::Delete { key, noreply } => {
            format!("delete {}{}\r\n", KeyName(*key), noreply_suffix(*noreply)).into_bytes()
        }
        Command::Arith {
            incr,
            key,
            delta,
            noreply,
        } => format!(
            "{} {} {delta}{}\r\n",
            if *incr { "incr" } else { "decr" },
            KeyName(*key),
            noreply_suffix(*noreply)
        )
        .into_bytes(),
        Command::Touch {
            key,
            expire,
            noreply,
        } => format!(
            "touch {} {}{}\r\n",
            KeyName(*key),
            expire.token(),
            noreply_suffix(*noreply)
        )
        .into_bytes(),
    }
}

/// Replaces the CAS unique of every `VALUE <key> <flags> <bytes> <cas>` line with `*`;
/// returns the masked reply, the keys' indexes and their uniques in reply order. A reply
/// that does not parse is returned unmasked, so that the comparison shows it.
fn mask_cas(reply: &[u8]) -> (Vec<u8>, Vec<usize>, Vec<u64>) {
    let mut masked = Vec::with_capacity(reply.len());
    let mut keys = Vec::new();
    let mut uniques = Vec::new();
    let mut rest = reply;
    while rest.starts_with(b"VALUE ") {
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            break;
        };
        let Ok(line) = std::str::from_utf8(&rest[..line_end]) else {
            break;
        };
        let tokens: Vec<&str> = line.split(' ').collect();
        let [_, key, flags, len, cas] = tokens[..] else {
            break;
        };
        let (Ok(len), Ok(cas)) = (len.parse::<usize>(), cas.parse::<u64>()) else {
            break;
        };
        let Some(key_index) = key
            .rsplit_once('k')
            .and_then(|(_, index)| index.parse::<usize>().ok())
        else {
            break;
        };
        let data_end = line_end + 2 + len + 2;
        if rest.len() < data_end {
            break;
        }
        masked.extend_from_slice(format!("VALUE {key} {flags} {len} *\r\n").as_bytes());
        masked.extend_from_slice(&rest[line_end + 2..data_end]);
        keys.push(key_index);
        uniques.push(cas);
        rest = &rest[data_end..];
    }
    masked.extend_from_slice(rest);
    (masked, keys, uniques)
}

/// The failure of a step whose reply differs from the model's; its first lines are what
/// `is_memcacheds_arith_flake` reads.
fn mismatch_message(
    step: usize,
    request: &[u8],
    expected: &[u8],
    actual: &[u8],
    transcript: &str,
) -> String {
    format!(
        "step {step}: {}\n  expected {:?}\n  actual   {:?}\ntranscript:\n{transcript}",
        escape(request),
        escape(expected),
        escape(actual)
    )
}

fn run_sequence(addr: SocketAddr, run: u64, commands: &[Command]) -> Result<(), TestCaseError> {
    RUN_PREFIX.with(|prefix| prefix.set(run));
    let mut client =
        RawClient::connect(addr).map_err(|e| TestCaseError::fail(format!("connect: {e:#}")))?;
    let mut model = Model::default();
    let mut transcript = String::new();
    for (step, command) in commands.iter().enumerate() {
        let mut request = request_bytes(command, &model);
        let expected = model.apply(command);
        request.extend_from_slice(SENTINEL);
        let actual = client
            .send(&request)
            .and_then(|()| client.read_until(SENTINEL_REPLY))
            .map_err(|e| {
                TestCaseError::fail(format!(
                    "step {step}: {:?}: no reply: {e:#}\ntranscript:\n{transcript}",
                    escape(&request)
                ))
            })?;
        let actual = &actual[..actual.len() - SENTINEL_REPLY.len()];
        let is_gets = matches!(command, Command::Get { with_cas: true, .. });
        let (actual_masked, returned, uniques) = if is_gets {
            mask_cas(actual)
        } else {
            (actual.to_vec(), Vec::new(), Vec::new())
        };
        transcript.push_str(&format!(
            "  {step}: {} -> {}\n",
            escape(&request[..request.len() - SENTINEL.len()]),
            escape(actual)
        ));
        if actual_masked != expected {
            return Err(TestCaseError::fail(mismatch_message(
                step,
                &request[..request.len() - SENTINEL.len()],
                &expected,
                &actual_masked,
                &transcript,
            )));
        }
        if is_gets {
            model.observe_cas(&returned, &uniques).map_err(|why| {
                TestCaseError::fail(format!("step {step}: {why}\ntranscript:\n{transcript}"))
            })?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The model's own tests
// ---------------------------------------------------------------------------------------

#[test]
fn model_pads_shorter_numbers_and_wraps() {
    let mut model = Model::default();
    let set = |value: &str| Command::Store {
        verb: StoreVerb::Set,
        key: 0,
        flags: 0,
        expire: Expire::Never,
        value: value.as_bytes().to_vec(),
        noreply: false,
    };
    let arith = |incr: bool, delta: &str| Command::Arith {
        incr,
        key: 0,
        delta: delta.to_owned(),
        noreply: false,
    };
    model.apply(&set("100"));
    assert_eq!(model.apply(&arith(false, "1")), b"99\r\n");
    assert_eq!(model.items[&0].value, b"99 ");
    assert_eq!(model.apply(&arith(true, "1")), b"100\r\n");
    assert_eq!(model.apply(&arith(false, "1000")), b"0\r\n");
    assert_eq!(model.items[&0].value, b"0  ");
    model.apply(&set("9"));
    assert_eq!(model.apply(&arith(true, "1")), b"10\r\n");
    assert_eq!(model.items[&0].value, b"10");
    model.apply(&set("18446744073709551615"));
    assert_eq!(model.apply(&arith(true, "2")), b"1\r\n");
    assert_eq!(
        model.apply(&arith(true, "x")),
        b"CLIENT_ERROR invalid numeric delta argument\r\n"
    );
    model.apply(&set("18446744073709551616"));
    assert_eq!(
        model.apply(&arith(true, "1")),
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    // What follows whitespace is ignored, as strtoull does.
    model.apply(&set("12 abc"));
    assert_eq!(model.apply(&arith(true, "1")), b"13\r\n");
    assert_eq!(model.items[&0].value, b"13    ");
}

#[test]
fn numbers_are_read_as_strtoull_does() {
    assert_eq!(strtoull_like(b"42"), Some(42));
    assert_eq!(strtoull_like(b" 42 "), Some(42));
    assert_eq!(strtoull_like(b"42\r\nxyz"), Some(42));
    assert_eq!(strtoull_like(b"+42"), Some(42));
    assert_eq!(strtoull_like(b"-0"), Some(0));
    assert_eq!(strtoull_like(b"-1"), None);
    assert_eq!(strtoull_like(b"42x"), None);
    assert_eq!(strtoull_like(b""), None);
    assert_eq!(strtoull_like(b"   "), None);
    assert_eq!(strtoull_like(b"18446744073709551615"), Some(u64::MAX));
    assert_eq!(strtoull_like(b"18446744073709551616"), None);
}

#[test]
fn mask_cas_masks_uniques_and_keeps_data() {
    let reply = b"VALUE r1k2 5 3 77\r\nab\n\r\nVALUE r1k0 0 0 78\r\n\r\nEND\r\n";
    let (masked, keys, uniques) = mask_cas(reply);
    assert_eq!(
        masked,
        b"VALUE r1k2 5 3 *\r\nab\n\r\nVALUE r1k0 0 0 *\r\n\r\nEND\r\n"
    );
    assert_eq!(keys, vec![2, 0]);
    assert_eq!(uniques, vec![77, 78]);
    // Not a gets reply: left as is.
    assert_eq!(mask_cas(b"ERROR\r\n").0, b"ERROR\r\n");
}

#[test]
fn only_memcacheds_arith_flake_is_recognised_as_one() {
    // Failures as `run_sequence` words them, and as `TestError::Fail`'s reason shows them.
    let failure = |request: &str, actual: &str| {
        let message = mismatch_message(7, request.as_bytes(), b"5\r\n", actual.as_bytes(), "");
        proptest::test_runner::Reason::from(message).to_string()
    };
    let flake = format!("{ARITH_FLAKE_REPLY}\r\n");
    assert!(is_memcacheds_arith_flake(&failure("decr r3k1 4", &flake)));
    assert!(is_memcacheds_arith_flake(&failure(
        "incr r3k1 4 noreply",
        &flake
    )));
    // The same reply to another command, or another reply to decr, is a real failure.
    assert!(!is_memcacheds_arith_flake(&failure("get r3k1", &flake)));
    assert!(!is_memcacheds_arith_flake(&failure(
        "decr r3k1 4",
        "NOT_FOUND\r\n"
    )));
    assert!(!is_memcacheds_arith_flake(&failure(
        "decr r3k1 4",
        "CLIENT_ERROR invalid numeric delta argument\r\n"
    )));
    // Expected the flake's reply but got another: not the flake either.
    let reversed = mismatch_message(7, b"decr r3k1 4", flake.as_bytes(), b"5\r\n", "");
    assert!(!is_memcacheds_arith_flake(&reversed));
    // A missing reply is never the flake.
    let no_reply = format!(
        "step 2: {:?}: no reply: timed out\ntranscript:\n",
        escape(b"decr r3k1 4\r\nmn\r\n")
    );
    assert!(!is_memcacheds_arith_flake(&no_reply));
}
