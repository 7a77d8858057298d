//! Request encoding and incremental reply parsing for the protocols fogbench speaks.
//!
//! Replies are matched to requests by order on each connection. The binary protocol also
//! carries an `opaque` that the server echoes: fogbench numbers its binary requests per
//! connection and treats a reply with another number as a broken stream.

use std::borrow::Cow;

use anyhow::bail;

use crate::workload::OpKind;

/// Wire protocol of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `get <key>` / `set <key> <flags> <exptime> <bytes>`.
    Text,
    /// `mg <key> v` / `ms <key> <bytes> T<ttl>`.
    Meta,
    /// memcached's binary protocol: GET (0x00) / SET (0x01).
    Binary,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
            Protocol::Binary => "binary",
        }
    }
}

/// Binary protocol constants (memcached's `protocol_binary.h`).
mod binary {
    pub const REQUEST_MAGIC: u8 = 0x80;
    pub const RESPONSE_MAGIC: u8 = 0x81;
    pub const HEADER_BYTES: usize = 24;
    pub const OP_GET: u8 = 0x00;
    pub const OP_SET: u8 = 0x01;
    pub const STATUS_OK: u16 = 0x0000;
    pub const STATUS_KEY_NOT_FOUND: u16 = 0x0001;
    pub const STATUS_KEY_EXISTS: u16 = 0x0002;
    pub const STATUS_NOT_STORED: u16 = 0x0005;
    /// Largest body fogbench accepts: the largest value it writes, its flags and a key.
    pub const BODY_MAX_BYTES: usize = crate::workload::VALUE_MAX_BYTES + 4 + 256;

    /// memcached's names of the binary status codes, for readable error reports.
    pub fn status_name(status: u16) -> &'static str {
        match status {
            0x0001 => "key not found",
            0x0002 => "key exists",
            0x0003 => "value too large",
            0x0004 => "invalid arguments",
            0x0005 => "item not stored",
            0x0006 => "incr/decr on a non-numeric value",
            0x0007 => "vbucket belongs to another server",
            0x0008 => "authentication error",
            0x0009 => "authentication continue",
            0x0081 => "unknown command",
            0x0082 => "out of memory",
            0x0083 => "not supported",
            0x0084 => "internal error",
            0x0085 => "busy",
            0x0086 => "temporary failure",
            _ => "unknown status",
        }
    }

    /// Appends a request header.
    pub fn header(
        out: &mut Vec<u8>,
        opcode: u8,
        key_len: usize,
        extras_len: u8,
        body_len: usize,
        opaque: u32,
    ) {
        out.push(REQUEST_MAGIC);
        out.push(opcode);
        // Keys are at most 250 bytes and values at most VALUE_MAX_BYTES (checked by the
        // callers' configuration), so these never saturate in practice.
        out.extend_from_slice(&u16::try_from(key_len).unwrap_or(u16::MAX).to_be_bytes());
        out.push(extras_len);
        out.push(0); // data type: raw bytes
        out.extend_from_slice(&0u16.to_be_bytes()); // vbucket
        out.extend_from_slice(&u32::try_from(body_len).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(&opaque.to_be_bytes());
        out.extend_from_slice(&0u64.to_be_bytes()); // cas
    }
}

/// Appends a get of `key`; `opaque` is sent (and must be echoed) in the binary protocol
/// only.
pub fn encode_get(protocol: Protocol, key: &[u8], opaque: u32, out: &mut Vec<u8>) {
    match protocol {
        Protocol::Text => {
            out.extend_from_slice(b"get ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Meta => {
            out.extend_from_slice(b"mg ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" v\r\n");
        }
        Protocol::Binary => {
            binary::header(out, binary::OP_GET, key.len(), 0, key.len(), opaque);
            out.extend_from_slice(key);
        }
    }
}

/// Appends a set of `key` to `value` with `ttl_s` (0: never expires); `opaque` as for
/// [`encode_get`].
pub fn encode_set(
    protocol: Protocol,
    key: &[u8],
    value: &[u8],
    ttl_s: u32,
    opaque: u32,
    out: &mut Vec<u8>,
) {
    match protocol {
        Protocol::Text | Protocol::Meta => {
            let header = match protocol {
                Protocol::Text => format!(" 0 {ttl_s} {}\r\n", value.len()),
                _ => format!(" {} T{ttl_s}\r\n", value.len()),
            };
            match protocol {
                Protocol::Text => out.extend_from_slice(b"set "),
                _ => out.extend_from_slice(b"ms "),
            }
            out.extend_from_slice(key);
            out.extend_from_slice(header.as_bytes());
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Binary => {
            // Extras: flags (4 bytes, 0) then exptime (4 bytes).
            let body_len = 8 + key.len() + value.len();
            binary::header(out, binary::OP_SET, key.len(), 8, body_len, opaque);
            out.extend_from_slice(&0u32.to_be_bytes());
            out.extend_from_slice(&ttl_s.to_be_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
    }
}

/// A complete reply to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// A get found the key; the value bytes.
    Hit(&'a [u8]),
    Miss,
    Stored,
    /// A set was refused without an error (NOT_STORED / NS and friends).
    NotStored,
    /// ERROR, CLIENT_ERROR or SERVER_ERROR: the line without its CRLF; in the binary
    /// protocol, the status code, its name and the server's message.
    Error(Cow<'a, [u8]>),
}

/// Longest reply line fogbench accepts before calling the stream broken.
const LINE_MAX_BYTES: usize = 8 * 1024;

/// Parses one reply to `op` from the start of `input`: `Ok(None)` if more bytes are
/// needed, else the reply and how many bytes it took. `opaque` is the number the request
/// was sent with (binary protocol only). Errors mean the stream cannot be
/// resynchronised.
pub fn parse_reply(
    protocol: Protocol,
    op: OpKind,
    opaque: u32,
    input: &[u8],
) -> anyhow::Result<Option<(Reply<'_>, usize)>> {
    if protocol == Protocol::Binary {
        return parse_binary_reply(op, opaque, input);
    }
    let Some(line_end) = find_crlf(input) else {
        if input.len() > LINE_MAX_BYTES {
            bail!("reply line longer than {LINE_MAX_BYTES} bytes");
        }
        return Ok(None);
    };
    let line = &input[..line_end];
    let after_line = line_end + 2;
    if line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR") {
        return Ok(Some((Reply::Error(Cow::Borrowed(line)), after_line)));
    }
    match (protocol, op) {
        (Protocol::Text, OpKind::Get) => {
            if line == b"END" {
                return Ok(Some((Reply::Miss, after_line)));
            }
            if !line.starts_with(b"VALUE ") {
                bail!("unexpected get reply {:?}", String::from_utf8_lossy(line));
            }
            // VALUE <key> <flags> <bytes> [<cas>]
            let Some(size_field) = line.split(|&b| b == b' ').nth(3) else {
                bail!(
                    "VALUE line without a size: {:?}",
                    String::from_utf8_lossy(line)
                );
            };
            let size = parse_size(size_field)?;
            let data_end = after_line + size;
            let total = data_end + 2 + b"END\r\n".len();
            if input.len() < total {
                return Ok(None);
            }
            if &input[data_end..total] != b"\r\nEND\r\n" {
                bail!("get reply not terminated by CRLF END CRLF");
            }
            Ok(Some((Reply::Hit(&input[after_line..data_end]), total)))
        }
        (Protocol::Meta, OpKind::Get) => {
            if line == b"EN" {
                return Ok(Some((Reply::Miss, after_line)));
            }
            if !line.starts_with(b"VA ") {
                bail!("unexpected mg reply {:?}", String::from_utf8_lossy(line));
            }
            let Some(size_field) = line.split(|&b| b == b' ').nth(1) else {
                bail!("VA line without a size");
            };
            let size = parse_size(size_field)?;
            let data_end = after_line + size;
            let total = data_end + 2;
            if input.len() < total {
                return Ok(None);
            }
            if &input[data_end..total] != b"\r\n" {
                bail!("mg value not terminated by CRLF");
            }
            Ok(Some((Reply::Hit(&input[after_line..data_end]), total)))
        }
        (Protocol::Text, OpKind::Set) => match line {
            b"STORED" => Ok(Some((Reply::Stored, after_line))),
            b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => Ok(Some((Reply::NotStored, after_line))),
            _ => bail!("unexpected set reply {:?}", String::from_utf8_lossy(line)),
        },
        (Protocol::Meta, OpKind::Set) => {
            if line == b"HD" || line.starts_with(b"HD ") {
                Ok(Some((Reply::Stored, after_line)))
            } else if line.starts_with(b"NS") || line.starts_with(b"EX") || line.starts_with(b"NF")
            {
                Ok(Some((Reply::NotStored, after_line)))
            } else {
                bail!("unexpected ms reply {:?}", String::from_utf8_lossy(line))
            }
        }
        // Answered before any line parsing above; listed so the match stays exhaustive.
        (Protocol::Binary, _) => parse_binary_reply(op, opaque, input),
    }
}

fn be_u16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// One binary response: header checks (magic, opcode, opaque, lengths), then the status.
fn parse_binary_reply(
    op: OpKind,
    opaque: u32,
    input: &[u8],
) -> anyhow::Result<Option<(Reply<'_>, usize)>> {
    if input.len() < binary::HEADER_BYTES {
        // The magic can be checked as soon as it arrives: text (e.g. a server that does
        // not speak binary answering "ERROR\r\n") is refused at once.
        if let Some(&magic) = input.first() {
            if magic != binary::RESPONSE_MAGIC {
                bail!("binary reply with magic 0x{magic:02x} instead of 0x81");
            }
        }
        return Ok(None);
    }
    let magic = input[0];
    let opcode = input[1];
    let key_len = usize::from(be_u16(&input[2..4]));
    let extras_len = usize::from(input[4]);
    let status = be_u16(&input[6..8]);
    let body_len = be_u32(&input[8..12]) as usize;
    let reply_opaque = be_u32(&input[12..16]);
    if magic != binary::RESPONSE_MAGIC {
        bail!("binary reply with magic 0x{magic:02x} instead of 0x81");
    }
    let expected_opcode = match op {
        OpKind::Get => binary::OP_GET,
        OpKind::Set => binary::OP_SET,
    };
    if opcode != expected_opcode {
        bail!(
            "binary reply for opcode 0x{opcode:02x} where a reply to 0x{expected_opcode:02x} was due"
        );
    }
    if reply_opaque != opaque {
        bail!("binary reply out of order: opaque {reply_opaque} where {opaque} was due");
    }
    if body_len > binary::BODY_MAX_BYTES {
        bail!("binary reply body of {body_len} bytes is larger than any fogbench writes");
    }
    if extras_len + key_len > body_len {
        bail!("binary reply with {extras_len} extras and {key_len} key bytes in a {body_len}-byte body");
    }
    let total = binary::HEADER_BYTES + body_len;
    if input.len() < total {
        return Ok(None);
    }
    let body = &input[binary::HEADER_BYTES..total];
    let reply = match (op, status) {
        (OpKind::Get, binary::STATUS_OK) => Reply::Hit(&body[extras_len + key_len..]),
        (OpKind::Get, binary::STATUS_KEY_NOT_FOUND) => Reply::Miss,
        (OpKind::Set, binary::STATUS_OK) => Reply::Stored,
        // As the text protocol's NOT_STORED / EXISTS / NOT_FOUND.
        (
            OpKind::Set,
            binary::STATUS_NOT_STORED | binary::STATUS_KEY_EXISTS | binary::STATUS_KEY_NOT_FOUND,
        ) => Reply::NotStored,
        _ => {
            let message = String::from_utf8_lossy(&body[extras_len + key_len..]);
            Reply::Error(Cow::Owned(
                format!(
                    "binary status 0x{status:04x} ({}): {}",
                    binary::status_name(status),
                    message.trim()
                )
                .into_bytes(),
            ))
        }
    };
    Ok(Some((reply, total)))
}

fn find_crlf(input: &[u8]) -> Option<usize> {
    input.windows(2).position(|w| w == b"\r\n")
}

fn parse_size(field: &[u8]) -> anyhow::Result<usize> {
    let size: usize = std::str::from_utf8(field)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("bad value size {:?}", String::from_utf8_lossy(field)))?;
    if size > crate::workload::VALUE_MAX_BYTES {
        bail!("value of {size} bytes is larger than any fogbench writes");
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(
        protocol: Protocol,
        op: OpKind,
        input: &[u8],
    ) -> anyhow::Result<Option<(Reply<'_>, usize)>> {
        parse_reply(protocol, op, 0, input)
    }

    #[test]
    fn requests_are_encoded_byte_exact() {
        let mut out = Vec::new();
        encode_get(Protocol::Text, b"k1", 0, &mut out);
        encode_set(Protocol::Text, b"k1", b"abc", 30, 0, &mut out);
        encode_get(Protocol::Meta, b"k1", 0, &mut out);
        encode_set(Protocol::Meta, b"k1", b"abc", 0, 0, &mut out);
        assert_eq!(
            out,
            b"get k1\r\nset k1 0 30 3\r\nabc\r\nmg k1 v\r\nms k1 3 T0\r\nabc\r\n".to_vec()
        );
    }

    #[test]
    fn binary_requests_are_encoded_byte_exact() {
        let mut out = Vec::new();
        encode_get(Protocol::Binary, b"k1", 0x0102_0304, &mut out);
        #[rustfmt::skip]
        let get: &[u8] = &[
            0x80, 0x00, 0x00, 0x02, // magic, GET, key length 2
            0x00, 0x00, 0x00, 0x00, // no extras, raw data, vbucket 0
            0x00, 0x00, 0x00, 0x02, // body: the key
            0x01, 0x02, 0x03, 0x04, // opaque
            0, 0, 0, 0, 0, 0, 0, 0, // cas
            b'k', b'1',
        ];
        assert_eq!(out, get);
        out.clear();
        encode_set(Protocol::Binary, b"k1", b"abc", 300, 7, &mut out);
        #[rustfmt::skip]
        let set: &[u8] = &[
            0x80, 0x01, 0x00, 0x02, // magic, SET, key length 2
            0x08, 0x00, 0x00, 0x00, // 8 bytes of extras
            0x00, 0x00, 0x00, 0x0d, // body: 8 + 2 + 3
            0x00, 0x00, 0x00, 0x07, // opaque
            0, 0, 0, 0, 0, 0, 0, 0, // cas
            0x00, 0x00, 0x00, 0x00, // flags
            0x00, 0x00, 0x01, 0x2c, // exptime 300
            b'k', b'1', b'a', b'b', b'c',
        ];
        assert_eq!(out, set);
    }

    /// A binary response header followed by `extras`, `key` and `value`.
    fn binary_response(
        opcode: u8,
        status: u16,
        opaque: u32,
        extras: &[u8],
        key: &[u8],
        value: &[u8],
    ) -> Vec<u8> {
        let mut out = vec![0x81, opcode];
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.push(extras.len() as u8);
        out.push(0);
        out.extend_from_slice(&status.to_be_bytes());
        out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
        out.extend_from_slice(&opaque.to_be_bytes());
        out.extend_from_slice(&5u64.to_be_bytes());
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn binary_replies_parse_incrementally_at_every_split() {
        // A hit, a miss, a stored set and a not-stored set, back to back, opaques 1..=4.
        let hit = binary_response(0x00, 0, 1, &[0, 0, 0, 0], b"", b"hello");
        let miss = binary_response(0x00, 1, 2, &[], b"", b"Not found");
        let stored = binary_response(0x01, 0, 3, &[], b"", b"");
        let not_stored = binary_response(0x01, 5, 4, &[], b"", b"Not stored.");
        let replies = [
            (OpKind::Get, 1, hit, Reply::Hit(b"hello")),
            (OpKind::Get, 2, miss, Reply::Miss),
            (OpKind::Set, 3, stored, Reply::Stored),
            (OpKind::Set, 4, not_stored, Reply::NotStored),
        ];
        for (op, opaque, bytes, expected) in &replies {
            for cut in 0..bytes.len() {
                assert_eq!(
                    parse_reply(Protocol::Binary, *op, *opaque, &bytes[..cut]).unwrap(),
                    None,
                    "cut {cut} of {expected:?}"
                );
            }
            // Complete, and with the next reply's bytes behind it.
            let mut stream = bytes.clone();
            stream.extend_from_slice(&replies[0].2);
            for input in [&bytes[..], &stream[..]] {
                assert_eq!(
                    parse_reply(Protocol::Binary, *op, *opaque, input).unwrap(),
                    Some((expected.clone(), bytes.len()))
                );
            }
        }
    }

    #[test]
    fn binary_errors_are_readable_and_broken_streams_are_refused() {
        let oom = binary_response(0x01, 0x82, 9, &[], b"", b"Out of memory");
        assert_eq!(
            parse_reply(Protocol::Binary, OpKind::Set, 9, &oom).unwrap(),
            Some((
                Reply::Error(Cow::Borrowed(
                    &b"binary status 0x0082 (out of memory): Out of memory"[..]
                )),
                oom.len()
            ))
        );
        let too_large = binary_response(0x01, 0x03, 1, &[], b"", b"Too large.");
        assert_eq!(
            parse_reply(Protocol::Binary, OpKind::Set, 1, &too_large)
                .unwrap()
                .map(|(r, _)| r),
            Some(Reply::Error(Cow::Borrowed(
                &b"binary status 0x0003 (value too large): Too large."[..]
            )))
        );
        // A reply out of order (another opaque) breaks the stream.
        let hit = binary_response(0x00, 0, 2, &[0, 0, 0, 0], b"", b"x");
        let error = parse_reply(Protocol::Binary, OpKind::Get, 1, &hit).unwrap_err();
        assert!(error.to_string().contains("out of order"), "{error}");
        // A reply to another opcode than the one due.
        assert!(parse_reply(Protocol::Binary, OpKind::Set, 2, &hit).is_err());
        // Not a binary response at all: refused from its first byte.
        assert!(parse_reply(Protocol::Binary, OpKind::Get, 0, b"E").is_err());
        assert!(parse_reply(Protocol::Binary, OpKind::Get, 0, b"ERROR\r\n").is_err());
        // Extras and key longer than the body.
        let mut bad = binary_response(0x00, 0, 0, &[0, 0, 0, 0], b"", b"");
        bad[4] = 8;
        assert!(parse_reply(Protocol::Binary, OpKind::Get, 0, &bad).is_err());
        // A body larger than any value fogbench writes is not awaited.
        let mut huge = binary_response(0x00, 0, 0, &[], b"", b"");
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_reply(Protocol::Binary, OpKind::Get, 0, &huge).is_err());
    }

    #[test]
    fn text_replies_parse_incrementally() {
        let reply = b"VALUE k1 0 3\r\nabc\r\nEND\r\nSTORED\r\n";
        for cut in 0..24 {
            assert_eq!(
                parse(Protocol::Text, OpKind::Get, &reply[..cut]).unwrap(),
                None,
                "cut {cut}"
            );
        }
        assert_eq!(
            parse(Protocol::Text, OpKind::Get, reply).unwrap(),
            Some((Reply::Hit(b"abc"), 24))
        );
        assert_eq!(
            parse(Protocol::Text, OpKind::Set, &reply[24..]).unwrap(),
            Some((Reply::Stored, 8))
        );
        assert_eq!(
            parse(Protocol::Text, OpKind::Get, b"END\r\n").unwrap(),
            Some((Reply::Miss, 5))
        );
        assert_eq!(
            parse(
                Protocol::Text,
                OpKind::Set,
                b"SERVER_ERROR out of memory\r\n"
            )
            .unwrap(),
            Some((
                Reply::Error(Cow::Borrowed(&b"SERVER_ERROR out of memory"[..])),
                28
            ))
        );
        assert!(parse(Protocol::Text, OpKind::Get, b"VALUE k 0 3\r\nabcXXEND\r\n").is_err());
        assert!(parse(Protocol::Text, OpKind::Get, b"HELLO\r\n").is_err());
    }

    #[test]
    fn meta_replies_parse() {
        assert_eq!(
            parse(Protocol::Meta, OpKind::Get, b"VA 2 \r\nhi\r\n").unwrap(),
            Some((Reply::Hit(b"hi"), 11))
        );
        assert_eq!(
            parse(Protocol::Meta, OpKind::Get, b"VA 2\r\nh").unwrap(),
            None
        );
        assert_eq!(
            parse(Protocol::Meta, OpKind::Get, b"EN\r\n").unwrap(),
            Some((Reply::Miss, 4))
        );
        assert_eq!(
            parse(Protocol::Meta, OpKind::Set, b"HD\r\n").unwrap(),
            Some((Reply::Stored, 4))
        );
        assert_eq!(
            parse(Protocol::Meta, OpKind::Set, b"NS\r\n").unwrap(),
            Some((Reply::NotStored, 4))
        );
    }
}
