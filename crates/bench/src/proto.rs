//! Request encoding and incremental reply parsing for the protocols fogbench speaks.

use anyhow::bail;

use crate::workload::OpKind;

/// Wire protocol of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `get <key>` / `set <key> <flags> <exptime> <bytes>`.
    Text,
    /// `mg <key> v` / `ms <key> <bytes> T<ttl>`.
    Meta,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
        }
    }
}

/// Appends a get of `key`.
pub fn encode_get(protocol: Protocol, key: &[u8], out: &mut Vec<u8>) {
    match protocol {
        Protocol::Text => out.extend_from_slice(b"get "),
        Protocol::Meta => out.extend_from_slice(b"mg "),
    }
    out.extend_from_slice(key);
    match protocol {
        Protocol::Text => out.extend_from_slice(b"\r\n"),
        Protocol::Meta => out.extend_from_slice(b" v\r\n"),
    }
}

/// Appends a set of `key` to `value` with `ttl_s` (0: never expires).
pub fn encode_set(protocol: Protocol, key: &[u8], value: &[u8], ttl_s: u32, out: &mut Vec<u8>) {
    let header = match protocol {
        Protocol::Text => format!(" 0 {ttl_s} {}\r\n", value.len()),
        Protocol::Meta => format!(" {} T{ttl_s}\r\n", value.len()),
    };
    match protocol {
        Protocol::Text => out.extend_from_slice(b"set "),
        Protocol::Meta => out.extend_from_slice(b"ms "),
    }
    out.extend_from_slice(key);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A complete reply to one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// A get found the key; the value bytes.
    Hit(&'a [u8]),
    Miss,
    Stored,
    /// A set was refused without an error (NOT_STORED / NS and friends).
    NotStored,
    /// ERROR, CLIENT_ERROR or SERVER_ERROR: the line without its CRLF.
    Error(&'a [u8]),
}

/// Longest reply line fogbench accepts before calling the stream broken.
const LINE_MAX_BYTES: usize = 8 * 1024;

/// Parses one reply to `op` from the start of `input`: `Ok(None)` if more bytes are
/// needed, else the reply and how many bytes it took. Errors mean the stream cannot be
/// resynchronised.
pub fn parse_reply(
    protocol: Protocol,
    op: OpKind,
    input: &[u8],
) -> anyhow::Result<Option<(Reply<'_>, usize)>> {
    let Some(line_end) = find_crlf(input) else {
        if input.len() > LINE_MAX_BYTES {
            bail!("reply line longer than {LINE_MAX_BYTES} bytes");
        }
        return Ok(None);
    };
    let line = &input[..line_end];
    let after_line = line_end + 2;
    if line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR") {
        return Ok(Some((Reply::Error(line), after_line)));
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
    }
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

    #[test]
    fn requests_are_encoded_byte_exact() {
        let mut out = Vec::new();
        encode_get(Protocol::Text, b"k1", &mut out);
        encode_set(Protocol::Text, b"k1", b"abc", 30, &mut out);
        encode_get(Protocol::Meta, b"k1", &mut out);
        encode_set(Protocol::Meta, b"k1", b"abc", 0, &mut out);
        assert_eq!(
            out,
            b"get k1\r\nset k1 0 30 3\r\nabc\r\nmg k1 v\r\nms k1 3 T0\r\nabc\r\n".to_vec()
        );
    }

    #[test]
    fn text_replies_parse_incrementally() {
        let reply = b"VALUE k1 0 3\r\nabc\r\nEND\r\nSTORED\r\n";
        for cut in 0..24 {
            assert_eq!(
                parse_reply(Protocol::Text, OpKind::Get, &reply[..cut]).unwrap(),
                None,
                "cut {cut}"
            );
        }
        assert_eq!(
            parse_reply(Protocol::Text, OpKind::Get, reply).unwrap(),
            Some((Reply::Hit(b"abc"), 24))
        );
        assert_eq!(
            parse_reply(Protocol::Text, OpKind::Set, &reply[24..]).unwrap(),
            Some((Reply::Stored, 8))
        );
        assert_eq!(
            parse_reply(Protocol::Text, OpKind::Get, b"END\r\n").unwrap(),
            Some((Reply::Miss, 5))
        );
        assert_eq!(
            parse_reply(
                Protocol::Text,
                OpKind::Set,
                b"SERVER_ERROR out of memory\r\n"
            )
            .unwrap(),
            Some((Reply::Error(b"SERVER_ERROR out of memory"), 28))
        );
        assert!(parse_reply(Protocol::Text, OpKind::Get, b"VALUE k 0 3\r\nabcXXEND\r\n").is_err());
        assert!(parse_reply(Protocol::Text, OpKind::Get, b"HELLO\r\n").is_err());
    }

    #[test]
    fn meta_replies_parse() {
        assert_eq!(
            parse_reply(Protocol::Meta, OpKind::Get, b"VA 2 \r\nhi\r\n").unwrap(),
            Some((Reply::Hit(b"hi"), 11))
        );
        assert_eq!(
            parse_reply(Protocol::Meta, OpKind::Get, b"VA 2\r\nh").unwrap(),
            None
        );
        assert_eq!(
            parse_reply(Protocol::Meta, OpKind::Get, b"EN\r\n").unwrap(),
            Some((Reply::Miss, 4))
        );
        assert_eq!(
            parse_reply(Protocol::Meta, OpKind::Set, b"HD\r\n").unwrap(),
            Some((Reply::Stored, 4))
        );
        assert_eq!(
            parse_reply(Protocol::Meta, OpKind::Set, b"NS\r\n").unwrap(),
            Some((Reply::NotStored, 4))
        );
    }
}
