//! The client side of memcached's meta and text protocols, for a server that forwards
//! requests to another memcached-protocol server (fogcached's `--upstream`): request
//! encoders and an incremental reply parser. Pure functions over byte buffers, no I/O.
//!
//! Two dialects: [`Dialect::Meta`] (memcached 1.6+, fogcached, memcached's proxy), whose
//! `mg <key> v f t c` returns the flags, the *remaining TTL* and the CAS of an item in one
//! reply, and [`Dialect::Text`] for servers without meta commands, whose `gets` returns
//! flags and CAS but not the TTL (the caller then picks one). A server's dialect is found
//! with [`Request::Probe`] (`mn`): a meta server answers `MN`, another `ERROR`.
//!
//! Replies are matched to requests by order, so the caller keeps, per connection, the
//! [`Expect`] that [`encode`] returned for each request it sent.

use crate::common::{is_valid_key, parse_i64, parse_u32, parse_u64, KEY_LENGTH_MAX_BYTES};
use crate::meta::{push_i64, push_key, push_u64};

/// Which protocol the other server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Meta,
    Text,
}

/// How a store treats an existing item on the other server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// One request to the other server. Exptimes are passed on as the client sent them
/// (relative seconds, an absolute Unix time, or negative), so the other server applies
/// memcached's rules to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `mn`: tells a meta server (`MN`) from one without meta commands (`ERROR`).
    Probe,
    /// A read returning flags, value, CAS and (meta only) the remaining TTL; with
    /// `touch_exptime`, also a touch (`gat`).
    Get {
        key: &'a [u8],
        touch_exptime: Option<i64>,
    },
    Store {
        kind: StoreKind,
        key: &'a [u8],
        client_flags: u32,
        exptime: i64,
        /// A compare-and-swap (`cas`, or a store carrying a CAS).
        compare_cas: Option<u64>,
        value: &'a [u8],
    },
    Delete {
        key: &'a [u8],
        compare_cas: Option<u64>,
    },
    /// `incr`/`decr`; `create` = (initial value, exptime) creates a missing counter (the
    /// binary protocol's form; meta only: a text server answers `NOT_FOUND`).
    Arith {
        key: &'a [u8],
        increment: bool,
        delta: u64,
        create: Option<(u64, i64)>,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
    },
}

/// The shape of the reply a request gets, which the parser needs to know (a text `get`
/// reply is a block ended by `END`, an `incr` reply is a bare number, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// `MN` or `ERROR`.
    Probe,
    /// `VA <len> <flags>*` + data, `HD <flags>*` (a touch), or `EN`.
    MetaValue,
    /// `HD <flags>*`, `NS`, `EX`, `NF`.
    MetaStatus,
    /// `VALUE <key> <flags> <len> [<cas>]` + data + `END`, or `END`.
    TextValue,
    /// `STORED`, `NOT_STORED`, `EXISTS`, `NOT_FOUND`, `DELETED`, `TOUCHED`.
    TextStatus,
    /// A decimal number, or `NOT_FOUND`.
    TextArith,
}

/// A request that cannot be written in the dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unencodable {
    /// A key the text protocol cannot carry (a binary-protocol key with a space or a
    /// control byte, or one longer than 250 bytes).
    Key,
    /// A compare-and-swap the text protocol has no form for (`delete`, `append`,
    /// `prepend`).
    CasCompare,
}

/// A parsed reply. `value` borrows the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// A hit: the item's flags and value; its CAS and remaining TTL when the server said
    /// (`ttl_s` -1: never expires).
    Value {
        client_flags: u32,
        value: &'a [u8],
        cas: Option<u64>,
        ttl_s: Option<i64>,
    },
    /// `EN` or a bare `END`.
    Miss,
    /// `HD`, `STORED`, `DELETED`, `TOUCHED`; the new CAS when the server said (meta `c`).
    Done {
        cas: Option<u64>,
    },
    NotStored,
    Exists,
    NotFound,
    /// The new value of an `incr`/`decr`.
    Number {
        value: u64,
        cas: Option<u64>,
    },
    /// `MN`: the server speaks meta.
    MetaNoop,
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`: the whole line, without CRLF.
    Error(&'a [u8]),
    /// A value longer than the caller can keep: only its header line was consumed, and
    /// the next `skip_bytes` bytes (the data, its CRLF, and a text reply's `END` line)
    /// are to be discarded as they arrive, so the stream stays usable.
    Oversized {
        skip_bytes: usize,
    },
}

/// What [`parse_reply`] found at the front of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyParse<'a> {
    Complete {
        reply: Reply<'a>,
        consumed: usize,
    },
    Incomplete,
    /// Not a reply of the expected shape: the stream can no longer be trusted.
    Malformed,
}

/// Reply lines longer than this without a newline are malformed.
pub const REPLY_LINE_MAX_BYTES: usize = 8 * 1024;

/// Appends `request` in `dialect`; returns the reply shape to expect.
pub fn encode(
    dialect: Dialect,
    request: &Request<'_>,
    out: &mut Vec<u8>,
) -> Result<Expect, Unencodable> {
    match dialect {
        Dialect::Meta => Ok(encode_meta(request, out)),
        Dialect::Text => encode_text(request, out),
    }
}

/// A meta key: as is when the text protocol allows it, else base64 with the `b` flag.
fn push_meta_key(out: &mut Vec<u8>, key: &[u8]) -> bool {
    let binary = !is_valid_key(key);
    push_key(out, key, binary);
    binary
}

fn push_flag_u64(out: &mut Vec<u8>, flag: u8, n: u64) {
    out.push(b' ');
    out.push(flag);
    push_u64(out, n);
}

fn push_flag_i64(out: &mut Vec<u8>, flag: u8, n: i64) {
    out.push(b' ');
    out.push(flag);
    push_i64(out, n);
}

fn encode_meta(request: &Request<'_>, out: &mut Vec<u8>) -> Expect {
    match *request {
        Request::Probe => {
            out.extend_from_slice(b"mn\r\n");
            Expect::Probe
        }
        Request::Get { key, touch_exptime } => {
            out.extend_from_slice(b"mg ");
            let binary = push_meta_key(out, key);
            if binary {
                out.extend_from_slice(b" b");
            }
            // The touch first, so that `t` reports the new TTL.
            if let Some(exptime) = touch_exptime {
                push_flag_i64(out, b'T', exptime);
            }
            out.extend_from_slice(b" v f t c\r\n");
            Expect::MetaValue
        }
        Request::Store {
            kind,
            key,
            client_flags,
            exptime,
            compare_cas,
            value,
        } => {
            out.extend_from_slice(b"ms ");
            let binary = push_meta_key(out, key);
            out.push(b' ');
            push_u64(out, value.len() as u64);
            if binary {
                out.extend_from_slice(b" b");
            }
            push_flag_u64(out, b'F', u64::from(client_flags));
            push_flag_i64(out, b'T', exptime);
            if let Some(cas) = compare_cas {
                push_flag_u64(out, b'C', cas);
            }
            out.extend_from_slice(match kind {
                StoreKind::Set => b" MS",
                StoreKind::Add => b" ME",
                StoreKind::Replace => b" MR",
                StoreKind::Append => b" MA",
                StoreKind::Prepend => b" MP",
            });
            out.extend_from_slice(b" c\r\n");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
            Expect::MetaStatus
        }
        Request::Delete { key, compare_cas } => {
            out.extend_from_slice(b"md ");
            if push_meta_key(out, key) {
                out.extend_from_slice(b" b");
            }
            if let Some(cas) = compare_cas {
                push_flag_u64(out, b'C', cas);
            }
            out.extend_from_slice(b"\r\n");
            Expect::MetaStatus
        }
        Request::Arith {
            key,
            increment,
            delta,
            create,
        } => {
            out.extend_from_slice(b"ma ");
            if push_meta_key(out, key) {
                out.extend_from_slice(b" b");
            }
            out.extend_from_slice(if increment { b" MI" } else { b" MD" });
            push_flag_u64(out, b'D', delta);
            if let Some((initial, exptime)) = create {
                push_flag_i64(out, b'N', exptime);
                push_flag_u64(out, b'J', initial);
            }
            out.extend_from_slice(b" v c\r\n");
            Expect::MetaValue
        }
        Request::Touch { key, exptime } => {
            out.extend_from_slice(b"mg ");
            if push_meta_key(out, key) {
                out.extend_from_slice(b" b");
            }
            push_flag_i64(out, b'T', exptime);
            out.extend_from_slice(b"\r\n");
            Expect::MetaValue
        }
    }
}

fn text_key(key: &[u8]) -> Result<&[u8], Unencodable> {
    if is_valid_key(key) && key.len() <= KEY_LENGTH_MAX_BYTES {
        Ok(key)
    } else {
        Err(Unencodable::Key)
    }
}

fn encode_text(request: &Request<'_>, out: &mut Vec<u8>) -> Result<Expect, Unencodable> {
    let expect = match *request {
        Request::Probe => {
            out.extend_from_slice(b"mn\r\n");
            Expect::Probe
        }
        Request::Get { key, touch_exptime } => {
            let key = text_key(key)?;
            match touch_exptime {
                Some(exptime) => {
                    out.extend_from_slice(b"gats ");
                    push_i64(out, exptime);
                    out.push(b' ');
                }
                None => out.extend_from_slice(b"gets "),
            }
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
            Expect::TextValue
        }
        Request::Store {
            kind,
            key,
            client_flags,
            exptime,
            compare_cas,
            value,
        } => {
            let key = text_key(key)?;
            let command: &[u8] = match (kind, compare_cas) {
                (StoreKind::Set | StoreKind::Add | StoreKind::Replace, Some(_)) => b"cas ",
                (StoreKind::Set, None) => b"set ",
                (StoreKind::Add, None) => b"add ",
                (StoreKind::Replace, None) => b"replace ",
                (StoreKind::Append | StoreKind::Prepend, Some(_)) => {
                    return Err(Unencodable::CasCompare)
                }
                (StoreKind::Append, None) => b"append ",
                (StoreKind::Prepend, None) => b"prepend ",
            };
            out.extend_from_slice(command);
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, u64::from(client_flags));
            out.push(b' ');
            push_i64(out, exptime);
            out.push(b' ');
            push_u64(out, value.len() as u64);
            if command == b"cas " {
                out.push(b' ');
                push_u64(out, compare_cas.unwrap_or(0));
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
            Expect::TextStatus
        }
        Request::Delete { key, compare_cas } => {
            let key = text_key(key)?;
            if compare_cas.is_some() {
                return Err(Unencodable::CasCompare);
            }
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
            Expect::TextStatus
        }
        Request::Arith {
            key,
            increment,
            delta,
            ..
        } => {
            let key = text_key(key)?;
            out.extend_from_slice(if increment { b"incr " } else { b"decr " });
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, delta);
            out.extend_from_slice(b"\r\n");
            Expect::TextArith
        }
        Request::Touch { key, exptime } => {
            let key = text_key(key)?;
            out.extend_from_slice(b"touch ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_i64(out, exptime);
            out.extend_from_slice(b"\r\n");
            Expect::TextStatus
        }
    };
    Ok(expect)
}

/// The first line of `buf` without its CRLF (or LF), and the bytes it takes with it.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ()> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(at) => {
            let line = &buf[..at];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            Ok(Some((line, at + 1)))
        }
        None if buf.len() > REPLY_LINE_MAX_BYTES => Err(()),
        None => Ok(None),
    }
}

fn is_error_line(line: &[u8]) -> bool {
    line == b"ERROR"
        || line.starts_with(b"ERROR ")
        || line.starts_with(b"CLIENT_ERROR")
        || line.starts_with(b"SERVER_ERROR")
}

/// A data block of `len` bytes and its CRLF at `buf[start..]`.
fn data_block(buf: &[u8], start: usize, len: usize) -> Result<Option<(&[u8], usize)>, ()> {
    let end = start.checked_add(len).ok_or(())?;
    let Some(tail) = buf.get(end..end + 2) else {
        return Ok(None);
    };
    if tail != b"\r\n" {
        return Err(());
    }
    Ok(Some((&buf[start..end], end + 2)))
}

/// Meta return flags: `f<flags> t<ttl> c<cas>` (others ignored).
fn meta_flags(tokens: &[u8]) -> Result<(u32, Option<u64>, Option<i64>), ()> {
    let mut client_flags = 0;
    let mut cas = None;
    let mut ttl_s = None;
    for token in tokens.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        let (flag, rest) = (token[0], &token[1..]);
        match flag {
            b'f' => client_flags = parse_u32(rest).ok_or(())?,
            b'c' => cas = Some(parse_u64(rest).ok_or(())?),
            b't' => ttl_s = Some(parse_i64(rest).ok_or(())?),
            _ => {}
        }
    }
    Ok((client_flags, cas, ttl_s))
}

/// Parses the reply at the front of `buf`, of the shape `expect`; a value longer than
/// `value_max_bytes` is [`Reply::Oversized`], to be skipped.
pub fn parse_reply(expect: Expect, buf: &[u8], value_max_bytes: usize) -> ReplyParse<'_> {
    match parse_inner(expect, buf, value_max_bytes) {
        Ok(Some((reply, consumed))) => ReplyParse::Complete { reply, consumed },
        Ok(None) => ReplyParse::Incomplete,
        Err(()) => ReplyParse::Malformed,
    }
}

type Parsed<'a> = Result<Option<(Reply<'a>, usize)>, ()>;

fn parse_inner(expect: Expect, buf: &[u8], value_max_bytes: usize) -> Parsed<'_> {
    let Some((first, line_bytes)) = line(buf)? else {
        return Ok(None);
    };
    if is_error_line(first) {
        return Ok(Some((Reply::Error(first), line_bytes)));
    }
    let (head, rest) = match first.iter().position(|&b| b == b' ') {
        Some(at) => (&first[..at], &first[at + 1..]),
        None => (first, &first[first.len()..]),
    };
    let reply = match (expect, head) {
        (Expect::Probe, b"MN") => Reply::MetaNoop,
        (Expect::MetaValue | Expect::MetaStatus, b"HD") => {
            let (_, cas, _) = meta_flags(rest)?;
            Reply::Done { cas }
        }
        (Expect::MetaValue | Expect::MetaStatus, b"EN") => Reply::Miss,
        (Expect::MetaValue | Expect::MetaStatus, b"NS") => Reply::NotStored,
        (Expect::MetaValue | Expect::MetaStatus, b"EX") => Reply::Exists,
        (Expect::MetaValue | Expect::MetaStatus, b"NF") => Reply::NotFound,
        (Expect::MetaValue, b"VA") => {
            let (len_token, flags) = match rest.iter().position(|&b| b == b' ') {
                Some(at) => (&rest[..at], &rest[at + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            let len = parse_u64(len_token).ok_or(())?;
            let len = usize::try_from(len).map_err(|_| ())?;
            if len > value_max_bytes {
                let skip_bytes = len.checked_add(2).ok_or(())?;
                return Ok(Some((Reply::Oversized { skip_bytes }, line_bytes)));
            }
            let (client_flags, cas, ttl_s) = meta_flags(flags)?;
            let Some((value, end)) = data_block(buf, line_bytes, len)? else {
                return Ok(None);
            };
            return Ok(Some((
                Reply::Value {
                    client_flags,
                    value,
                    cas,
                    ttl_s,
                },
                end,
            )));
        }
        (Expect::TextValue, b"END") if rest.is_empty() => Reply::Miss,
        (Expect::TextValue, b"VALUE") => {
            let mut tokens = rest.split(|&b| b == b' ').filter(|t| !t.is_empty());
            let _key = tokens.next().ok_or(())?;
            let client_flags = tokens.next().and_then(parse_u32).ok_or(())?;
            let len = tokens.next().and_then(parse_u64).ok_or(())?;
            let len = usize::try_from(len).map_err(|_| ())?;
            if len > value_max_bytes {
                // The data, its CRLF, then `END\r\n`.
                let skip_bytes = len.checked_add(2 + 5).ok_or(())?;
                return Ok(Some((Reply::Oversized { skip_bytes }, line_bytes)));
            }
            let cas = match tokens.next() {
                Some(token) => Some(parse_u64(token).ok_or(())?),
                None => None,
            };
            let Some((value, end)) = data_block(buf, line_bytes, len)? else {
                return Ok(None);
            };
            let Some((end_line, end_bytes)) = line(&buf[end..])? else {
                return Ok(None);
            };
            // One key was asked for: one block, then END.
            if end_line != b"END" {
                return Err(());
            }
            return Ok(Some((
                Reply::Value {
                    client_flags,
                    value,
                    cas,
                    ttl_s: None,
                },
                end + end_bytes,
            )));
        }
        (Expect::TextStatus, b"STORED" | b"DELETED" | b"TOUCHED") => Reply::Done { cas: None },
        (Expect::TextStatus, b"NOT_STORED") => Reply::NotStored,
        (Expect::TextStatus, b"EXISTS") => Reply::Exists,
        (Expect::TextStatus | Expect::TextArith, b"NOT_FOUND") => Reply::NotFound,
        (Expect::TextArith, digits) if rest.is_empty() => Reply::Number {
            value: parse_u64(digits).ok_or(())?,
            cas: None,
        },
        _ => return Err(()),
    };
    Ok(Some((reply, line_bytes)))
}

/// The value of a meta arithmetic reply (`VA <len> c<cas>` + the number as data).
pub fn arith_value(reply: &Reply<'_>) -> Option<Reply<'static>> {
    match *reply {
        Reply::Value { value, cas, .. } => {
            let value = parse_u64(value)?;
            Some(Reply::Number { value, cas })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(dialect: Dialect, request: Request<'_>) -> (String, Expect) {
        let mut out = Vec::new();
        let expect = encode(dialect, &request, &mut out).unwrap();
        (String::from_utf8_lossy(&out).into_owned(), expect)
    }

    fn parsed(expect: Expect, input: &[u8]) -> (Reply<'_>, usize) {
        match parse_reply(expect, input, 1 << 20) {
            ReplyParse::Complete { reply, consumed } => (reply, consumed),
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(input)),
        }
    }

    #[test]
    fn meta_requests_ask_for_flags_ttl_and_cas() {
        let get = Request::Get {
            key: b"k",
            touch_exptime: None,
        };
        assert_eq!(
            encoded(Dialect::Meta, get),
            ("mg k v f t c\r\n".to_owned(), Expect::MetaValue)
        );
        let gat = Request::Get {
            key: b"k",
            touch_exptime: Some(30),
        };
        assert_eq!(encoded(Dialect::Meta, gat).0, "mg k T30 v f t c\r\n");
        let store = Request::Store {
            kind: StoreKind::Add,
            key: b"k",
            client_flags: 7,
            exptime: -1,
            compare_cas: Some(9),
            value: b"abc",
        };
        assert_eq!(
            encoded(Dialect::Meta, store).0,
            "ms k 3 F7 T-1 C9 ME c\r\nabc\r\n"
        );
        let arith = Request::Arith {
            key: b"n",
            increment: false,
            delta: 2,
            create: Some((5, 0)),
        };
        assert_eq!(encoded(Dialect::Meta, arith).0, "ma n MD D2 N0 J5 v c\r\n");
        let delete = Request::Delete {
            key: b"a b",
            compare_cas: None,
        };
        // A key with a space travels base64-encoded.
        assert_eq!(encoded(Dialect::Meta, delete).0, "md YSBi b\r\n");
    }

    #[test]
    fn text_requests_use_gets_cas_and_refuse_what_text_cannot_say() {
        let get = Request::Get {
            key: b"k",
            touch_exptime: Some(5),
        };
        assert_eq!(
            encoded(Dialect::Text, get),
            ("gats 5 k\r\n".to_owned(), Expect::TextValue)
        );
        let cas = Request::Store {
            kind: StoreKind::Set,
            key: b"k",
            client_flags: 1,
            exptime: 0,
            compare_cas: Some(42),
            value: b"v",
        };
        assert_eq!(encoded(Dialect::Text, cas).0, "cas k 1 0 1 42\r\nv\r\n");
        let mut out = Vec::new();
        let spaced = Request::Get {
            key: b"a b",
            touch_exptime: None,
        };
        assert_eq!(
            encode(Dialect::Text, &spaced, &mut out),
            Err(Unencodable::Key)
        );
        let delete = Request::Delete {
            key: b"k",
            compare_cas: Some(1),
        };
        assert_eq!(
            encode(Dialect::Text, &delete, &mut out),
            Err(Unencodable::CasCompare)
        );
    }

    #[test]
    fn meta_value_replies_carry_flags_ttl_and_cas() {
        let input = b"VA 3 f5 t-1 c99\r\nabc\r\nEN\r\n";
        let (reply, consumed) = parsed(Expect::MetaValue, input);
        assert_eq!(
            reply,
            Reply::Value {
                client_flags: 5,
                value: b"abc",
                cas: Some(99),
                ttl_s: Some(-1)
            }
        );
        assert_eq!(
            parsed(Expect::MetaValue, &input[consumed..]),
            (Reply::Miss, 4)
        );
        assert_eq!(
            parsed(Expect::MetaStatus, b"HD c12\r\n").0,
            Reply::Done { cas: Some(12) }
        );
        assert_eq!(parsed(Expect::MetaStatus, b"NS\r\n").0, Reply::NotStored);
        let (arith, _) = parsed(Expect::MetaValue, b"VA 2 c3\r\n10\r\n");
        assert_eq!(
            arith_value(&arith),
            Some(Reply::Number {
                value: 10,
                cas: Some(3)
            })
        );
    }

    #[test]
    fn text_replies_and_errors() {
        let input = b"VALUE k 3 2 17\r\nhi\r\nEND\r\n";
        assert_eq!(
            parsed(Expect::TextValue, input),
            (
                Reply::Value {
                    client_flags: 3,
                    value: b"hi",
                    cas: Some(17),
                    ttl_s: None
                },
                input.len()
            )
        );
        assert_eq!(parsed(Expect::TextValue, b"END\r\n").0, Reply::Miss);
        assert_eq!(
            parsed(Expect::TextArith, b"42\r\n").0,
            Reply::Number {
                value: 42,
                cas: None
            }
        );
        assert_eq!(parsed(Expect::TextStatus, b"EXISTS\r\n").0, Reply::Exists);
        assert_eq!(
            parsed(Expect::MetaValue, b"SERVER_ERROR out of memory\r\n").0,
            Reply::Error(b"SERVER_ERROR out of memory")
        );
        assert_eq!(
            parsed(Expect::Probe, b"ERROR\r\n").0,
            Reply::Error(b"ERROR")
        );
        assert_eq!(parsed(Expect::Probe, b"MN\r\n").0, Reply::MetaNoop);
    }

    #[test]
    fn partial_and_malformed_replies() {
        let whole = b"VALUE k 0 5 1\r\nhello\r\nEND\r\n";
        for cut in 0..whole.len() {
            assert_eq!(
                parse_reply(Expect::TextValue, &whole[..cut], 1024),
                ReplyParse::Incomplete,
                "cut at {cut}"
            );
        }
        assert_eq!(
            parse_reply(Expect::MetaValue, b"VA 2\r\nabc\r\n", 1024),
            ReplyParse::Malformed
        );
        assert_eq!(
            parse_reply(Expect::MetaValue, b"VA 2000 f1\r\n", 1024),
            ReplyParse::Complete {
                reply: Reply::Oversized { skip_bytes: 2002 },
                consumed: 12
            },
            "a value too large is skipped, not a broken stream"
        );
        assert_eq!(
            parse_reply(Expect::TextValue, b"VALUE k 0 2000\r\n", 1024),
            ReplyParse::Complete {
                reply: Reply::Oversized { skip_bytes: 2007 },
                consumed: 16
            }
        );
        assert_eq!(
            parse_reply(Expect::TextStatus, b"HD\r\n", 1024),
            ReplyParse::Malformed
        );
        assert_eq!(
            parse_reply(Expect::TextStatus, &[b'x'; REPLY_LINE_MAX_BYTES + 1], 1024),
            ReplyParse::Malformed
        );
    }
}
