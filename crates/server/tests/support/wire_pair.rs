//! Differential wire tests: the same bytes go to Debian's memcached 1.6.18 and to
//! fogcached, each on its own connection, and the two replies are compared.
//!
//! Every request is followed by a sentinel `mg <sentinel key> Os<n>` (a miss the server
//! answers `EN Os<n>`, with a sequence number), so the reply to a request is exactly the
//! bytes before the sentinel's reply: empty for a silent quiet-mode request, and a stray
//! byte shows up as a difference. A plain `mn` cannot be the sentinel because the tests
//! pipeline `mn` themselves.
//!
//! Replies are compared through a normaliser that keeps every byte except the values that
//! depend on the clock or on the CAS counter, and still checks those:
//! - a CAS value (`c<n>` of `mg`/`ms`/`ma`, `cas=<n>` of `me`) must be a decimal number,
//!   and is replaced by its order of first appearance on that server. The two servers
//!   must then show the same pattern: a CAS that changes on one (after a store, an
//!   increment, an invalidation) must change on the other, and one that stays (after a
//!   read or a touch) must stay. `c0` (the CAS of a failed store) is kept as is.
//! - a number of seconds (`t<n>` and `l<n>` flags, `exp=` and `la=` of `me`) must be a
//!   decimal number, and the two servers may differ by at most [`CLOCK_SLACK_S`]: both
//!   count whole seconds on clocks that tick at different instants. `t-1` and `exp=-1`
//!   ("never expires") are kept as is.
//! - `size=` of `me` is the item's footprint in the server's own item layout: it must be
//!   a positive number (exactly equal only where a caller asks for it).

#![allow(dead_code)] // each test file uses part of this module

use std::collections::HashMap;
use std::time::Duration;

use testkit::{escape, RawClient, ServerProcess};

/// How far apart the two servers may read a number of seconds: each counts whole seconds
/// on its own clock, so one may have ticked and the other not yet.
pub const CLOCK_SLACK_S: i64 = 1;

const SENTINEL_KEY: &str = "wire-test-sentinel";

/// One server of a pair and its connection.
pub struct Side {
    pub name: &'static str,
    pub server: ServerProcess,
    pub client: RawClient,
    normaliser: Normaliser,
}

/// memcached (index 0) and fogcached (index 1), started side by side.
pub struct Pair {
    pub sides: [Side; 2],
    sentinel_seq: u64,
}

pub const MEMCACHED: usize = 0;
pub const FOGCACHED: usize = 1;

impl Pair {
    /// Starts memcached with `memcached_args` and fogcached with `fogcached_args`.
    pub fn start(memcached_args: &[&str], fogcached_args: &[&str]) -> anyhow::Result<Pair> {
        let memcached = ServerProcess::memcached(memcached_args)?;
        let fogcached = ServerProcess::fogcached(fogcached_args)?;
        let memcached_client = RawClient::connect(memcached.addr())?;
        let fogcached_client = RawClient::connect(fogcached.addr())?;
        Ok(Pair {
            sides: [
                Side {
                    name: "memcached",
                    server: memcached,
                    client: memcached_client,
                    normaliser: Normaliser::default(),
                },
                Side {
                    name: "fogcached",
                    server: fogcached,
                    client: fogcached_client,
                    normaliser: Normaliser::default(),
                },
            ],
            sentinel_seq: 0,
        })
    }

    /// Both servers with their default settings.
    pub fn default_servers() -> anyhow::Result<Pair> {
        Pair::start(&[], &[])
    }

    /// Sends `requests[i]` to server i and returns each raw reply (everything before the
    /// sentinel's reply).
    pub fn replies(&mut self, requests: [&[u8]; 2]) -> anyhow::Result<[Vec<u8>; 2]> {
        self.sentinel_seq += 1;
        let sentinel = format!("mg {SENTINEL_KEY} Os{}\r\n", self.sentinel_seq);
        let sentinel_reply = format!("EN Os{}\r\n", self.sentinel_seq);
        // Send to both before reading either, so that time passes alike on both.
        for (side, request) in self.sides.iter_mut().zip(requests) {
            let mut bytes = request.to_vec();
            bytes.extend_from_slice(sentinel.as_bytes());
            side.client.send(&bytes)?;
        }
        let mut replies: [Vec<u8>; 2] = Default::default();
        for (side, reply) in self.sides.iter_mut().zip(replies.iter_mut()) {
            let mut bytes = side
                .client
                .read_until(sentinel_reply.as_bytes())
                .map_err(|e| e.context(format!("{} did not answer", side.name)))?;
            bytes.truncate(bytes.len() - sentinel_reply.len());
            *reply = bytes;
        }
        Ok(replies)
    }

    /// Sends the same request to both; fails unless the replies are equal once
    /// normalised. Returns fogcached's raw reply.
    pub fn same(&mut self, request: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.same_each([request, request])
    }

    /// Like [`Pair::same`], with a request per server (e.g. each with its own CAS value).
    pub fn same_each(&mut self, requests: [&[u8]; 2]) -> anyhow::Result<Vec<u8>> {
        let [memcached, fogcached] = self.replies(requests)?;
        if std::env::var_os("WIRE_TRACE").is_some() {
            // For reading what a test really exchanged: WIRE_TRACE=1 cargo test ... --nocapture
            eprintln!(
                "> {}\n< {}",
                escape(requests[FOGCACHED]),
                escape(&fogcached)
            );
        }
        let memcached_pieces = self.sides[MEMCACHED].normaliser.pieces(&memcached)?;
        let fogcached_pieces = self.sides[FOGCACHED].normaliser.pieces(&fogcached)?;
        if !pieces_match(&memcached_pieces, &fogcached_pieces, SizeRule::AnyPositive) {
            anyhow::bail!(
                "replies differ for {:?}\n  memcached: {:?}\n  fogcached: {:?}\n  \
                 normalised memcached: {}\n  normalised fogcached: {}",
                escape(requests[FOGCACHED]),
                escape(&memcached),
                escape(&fogcached),
                render(&memcached_pieces),
                render(&fogcached_pieces),
            );
        }
        Ok(fogcached)
    }

    /// [`Pair::same`] for a list of requests, one exchange each.
    pub fn all_same(&mut self, requests: &[&[u8]]) -> anyhow::Result<()> {
        for request in requests {
            self.same(request)?;
        }
        Ok(())
    }

    /// The CAS value of `key` on each server, read with `me` (which neither bumps the item
    /// nor takes its recache token).
    pub fn cas_of(&mut self, key: &str) -> anyhow::Result<[u64; 2]> {
        let request = format!("me {key}\r\n");
        let replies = self.replies([request.as_bytes(), request.as_bytes()])?;
        let mut cas = [0u64; 2];
        for (i, reply) in replies.iter().enumerate() {
            let text = String::from_utf8_lossy(reply);
            cas[i] = text
                .split_ascii_whitespace()
                .find_map(|field| field.strip_prefix("cas="))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("{}: no cas in {text:?}", self.sides[i].name))?;
        }
        Ok(cas)
    }

    /// Forgets the CAS labels of both servers (for a new, independent scenario).
    pub fn reset_normalisers(&mut self) {
        for side in &mut self.sides {
            side.normaliser = Normaliser::default();
        }
    }

    pub fn fogcached(&mut self) -> &mut RawClient {
        &mut self.sides[FOGCACHED].client
    }

    pub fn memcached(&mut self) -> &mut RawClient {
        &mut self.sides[MEMCACHED].client
    }

    /// Opens a second connection to each server.
    pub fn connect_again(&self) -> anyhow::Result<[RawClient; 2]> {
        Ok([
            RawClient::connect(self.sides[MEMCACHED].server.addr())?,
            RawClient::connect(self.sides[FOGCACHED].server.addr())?,
        ])
    }

    /// Stops both servers; an unclean fogcached exit is an error.
    pub fn stop(self) -> anyhow::Result<()> {
        let [memcached, fogcached] = self.sides;
        drop(memcached);
        fogcached.server.stop()?;
        Ok(())
    }
}

/// One normalised part of a reply.
#[derive(Clone, PartialEq)]
pub enum Piece {
    /// Bytes that must be equal.
    Bytes(Vec<u8>),
    /// A CAS value, as its order of first appearance on its server.
    Cas(usize),
    /// A number of seconds, compared with [`CLOCK_SLACK_S`]; `flag` is the flag or field.
    Seconds { flag: String, value_s: i64 },
    /// `size=` of `me`.
    ItemSize(u64),
}

impl std::fmt::Debug for Piece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Piece::Bytes(bytes) => write!(f, "{}", escape(bytes)),
            Piece::Cas(label) => write!(f, "<cas#{label}>"),
            Piece::Seconds { flag, value_s } => write!(f, "<{flag}:{value_s}s>"),
            Piece::ItemSize(size) => write!(f, "<size:{size}>"),
        }
    }
}

/// How [`pieces_match`] compares `size=` of `me`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeRule {
    /// Any positive footprint matches (the servers' item layouts differ).
    AnyPositive,
    /// Exactly equal (a documented reply).
    Exact,
}

/// Replaces CAS values by labels, per server, over a whole session.
#[derive(Default)]
pub struct Normaliser {
    cas_labels: HashMap<u64, usize>,
}

impl Normaliser {
    /// Splits `reply` into lines and data blocks and normalises each line.
    pub fn pieces(&mut self, reply: &[u8]) -> anyhow::Result<Vec<Piece>> {
        let mut pieces = Vec::new();
        let mut rest = reply;
        while !rest.is_empty() {
            let Some(line_len) = rest.windows(2).position(|w| w == b"\r\n") else {
                pieces.push(Piece::Bytes(rest.to_vec()));
                break;
            };
            let line = &rest[..line_len];
            rest = &rest[line_len + 2..];
            let data_bytes = self.line(line, &mut pieces)?;
            pieces.push(Piece::Bytes(b"\r\n".to_vec()));
            if let Some(data_bytes) = data_bytes {
                // The data block and its "\r\n", byte for byte; a short one stays as is.
                let block_bytes = (data_bytes + 2).min(rest.len());
                pieces.push(Piece::Bytes(rest[..block_bytes].to_vec()));
                rest = &rest[block_bytes..];
            }
        }
        Ok(pieces)
    }

    /// Normalises one line; returns the size of the data block that follows (`VA <n>`).
    fn line(&mut self, line: &[u8], pieces: &mut Vec<Piece>) -> anyhow::Result<Option<usize>> {
        let tokens: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let code = tokens[0];
        let is_meta_status = matches!(code, b"VA" | b"HD" | b"EN" | b"NS" | b"EX" | b"NF");
        if !is_meta_status && code != b"ME" {
            pieces.push(Piece::Bytes(line.to_vec()));
            return Ok(None);
        }
        let mut data_bytes = None;
        for (at, token) in tokens.iter().enumerate() {
            if at > 0 {
                pieces.push(Piece::Bytes(b" ".to_vec()));
            }
            if at == 0 {
                pieces.push(Piece::Bytes(token.to_vec()));
            } else if code == b"VA" && at == 1 {
                let size = std::str::from_utf8(token)
                    .ok()
                    .and_then(|s| s.parse::<usize>().ok())
                    .ok_or_else(|| anyhow::anyhow!("VA without a size: {:?}", escape(line)))?;
                data_bytes = Some(size);
                pieces.push(Piece::Bytes(token.to_vec()));
            } else if code == b"ME" {
                pieces.push(self.debug_field(token, at, line)?);
            } else {
                pieces.push(self.flag(token, line)?);
            }
        }
        Ok(data_bytes)
    }

    fn flag(&mut self, token: &[u8], line: &[u8]) -> anyhow::Result<Piece> {
        let Some((&flag, value)) = token.split_first() else {
            return Ok(Piece::Bytes(Vec::new()));
        };
        match flag {
            b'c' => {
                let cas = decimal(value, line)?;
                Ok(if cas == 0 {
                    Piece::Bytes(token.to_vec())
                } else {
                    Piece::Cas(self.label(cas))
                })
            }
            b't' if value == b"-1" => Ok(Piece::Bytes(token.to_vec())),
            b't' | b'l' => Ok(Piece::Seconds {
                flag: char::from(flag).to_string(),
                value_s: decimal(value, line)? as i64,
            }),
            _ => Ok(Piece::Bytes(token.to_vec())),
        }
    }

    /// A field of `ME <key> exp=.. la=.. cas=.. fetch=.. cls=.. size=..`.
    fn debug_field(&mut self, token: &[u8], at: usize, line: &[u8]) -> anyhow::Result<Piece> {
        let text = String::from_utf8_lossy(token);
        let Some((name, value)) = text.split_once('=').filter(|_| at > 1) else {
            return Ok(Piece::Bytes(token.to_vec()));
        };
        Ok(match name {
            "exp" if value == "-1" => Piece::Bytes(token.to_vec()),
            "exp" => {
                // memcached prints `current_time - exptime`: negative while the item lives.
                let magnitude = value.strip_prefix('-').unwrap_or(value);
                let seconds = decimal(magnitude.as_bytes(), line)? as i64;
                Piece::Seconds {
                    flag: "exp".to_owned(),
                    value_s: if value.starts_with('-') {
                        -seconds
                    } else {
                        seconds
                    },
                }
            }
            "la" => Piece::Seconds {
                flag: "la".to_owned(),
                value_s: decimal(value.as_bytes(), line)? as i64,
            },
            "cas" => Piece::Cas(self.label(decimal(value.as_bytes(), line)?)),
            "size" => Piece::ItemSize(decimal(value.as_bytes(), line)?),
            _ => Piece::Bytes(token.to_vec()),
        })
    }

    fn label(&mut self, cas: u64) -> usize {
        let next = self.cas_labels.len();
        *self.cas_labels.entry(cas).or_insert(next)
    }
}

fn decimal(digits: &[u8], line: &[u8]) -> anyhow::Result<u64> {
    std::str::from_utf8(digits)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{:?} is not a decimal number in {:?}",
                escape(digits),
                escape(line)
            )
        })
}

/// A normalised reply as one line of text, for failure messages.
pub fn render(pieces: &[Piece]) -> String {
    pieces.iter().map(|piece| format!("{piece:?}")).collect()
}

/// Whether two normalised replies are the same.
pub fn pieces_match(a: &[Piece], b: &[Piece], sizes: SizeRule) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Piece::Bytes(x), Piece::Bytes(y)) => x == y,
            (Piece::Cas(x), Piece::Cas(y)) => x == y,
            (
                Piece::Seconds {
                    flag: flag_a,
                    value_s: a_s,
                },
                Piece::Seconds {
                    flag: flag_b,
                    value_s: b_s,
                },
            ) => flag_a == flag_b && (a_s - b_s).abs() <= CLOCK_SLACK_S,
            (Piece::ItemSize(x), Piece::ItemSize(y)) => match sizes {
                SizeRule::AnyPositive => *x > 0 && *y > 0,
                SizeRule::Exact => x == y,
            },
            _ => false,
        })
}

/// Whether `actual` is `documented` once both are normalised (fresh CAS labels each, so
/// a documented `c1` stands for "the first CAS of this reply").
pub fn matches_documented(actual: &[u8], documented: &[u8]) -> anyhow::Result<bool> {
    let actual = Normaliser::default().pieces(actual)?;
    let documented = Normaliser::default().pieces(documented)?;
    Ok(pieces_match(&actual, &documented, SizeRule::Exact))
}

/// The number after `flag` in the first line of a meta reply (e.g. `t` of `HD t97`).
pub fn flag_value(reply: &[u8], flag: u8) -> Option<i64> {
    let line_end = reply
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(reply.len());
    reply[..line_end]
        .split(|&b| b == b' ')
        .skip(1)
        .find_map(|token| match token.split_first() {
            Some((&f, value)) if f == flag => std::str::from_utf8(value).ok()?.parse().ok(),
            _ => None,
        })
}

/// Sleeps for `duration`: the deliberate waits of the timing tests.
pub fn pause(duration: Duration) {
    std::thread::sleep(duration);
}
