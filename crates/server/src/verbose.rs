//! `-vv` (and `verbosity 2`): memcached's log of client commands and replies on stderr,
//! in its format (checked against memcached 1.6.18 -vv):
//!
//! ```text
//! <28 new auto-negotiating client connection
//! 28: Client using the ascii protocol
//! <28 get foo nokey
//! >28 sending key foo
//! >28 END
//! <28 connection closed.
//! ```
//!
//! Text protocol: the command line (never a payload), then each reply line memcached
//! prints with `out_string` (a hit of a `get` as `sending key <key>`; none of the lines
//! of `stats`, dumps, or meta replies other than `MN` and errors). Binary protocol: the
//! 24-byte request and response headers in hex, as memcached dumps them. A reply that
//! `noreply` suppressed is not logged (memcached prints it as `NOREPLY <reply>`).
//!
//! Credentials never reach the log: a connection of a server with `-Y` or `-S` has none
//! of its requests logged until it authenticated (the `-Y` token travels in a payload,
//! which is never logged anyway; a SASL exchange is binary, whose bodies are never
//! logged).
//!
//! Cost: the connection reads the verbosity once per batch of requests; with less than
//! `-vv` each request costs one untaken branch. Each request's lines go to stderr in one
//! write, so lines of different connections do not interleave mid-line.

use std::io::Write;

/// What kind of reply a text command has, for which of its lines memcached logs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TextReply {
    /// `get gets gat gats`: each `VALUE` as `sending key <key>`, then `END`.
    Retrieval,
    /// `mg ms md ma mn me`: only `MN` and error lines.
    Meta,
    /// `stats ...`, `lru_crawler metadump`: a one-line answer unless it is `END` or a
    /// listing line.
    Listing,
    /// Everything else: every line.
    Plain,
}

fn reply_kind(line: &[u8]) -> TextReply {
    let command = line
        .split(|&b| b == b' ')
        .find(|word| !word.is_empty())
        .unwrap_or(b"");
    match command {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => TextReply::Retrieval,
        b"mg" | b"ms" | b"md" | b"ma" | b"mn" | b"me" => TextReply::Meta,
        b"stats" => TextReply::Listing,
        b"lru_crawler" if line.windows(8).any(|w| w == b"metadump") => TextReply::Listing,
        _ => TextReply::Plain,
    }
}

/// The first line of `input` without its line end.
fn first_line(input: &[u8]) -> &[u8] {
    let end = input
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(input.len());
    let line = &input[..end];
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Formats the log of one text request: its command line (when `log_request`) and the
/// lines of `reply` memcached would print.
pub fn format_text(fd: i32, request: &[u8], reply: &[u8], log_request: bool, out: &mut Vec<u8>) {
    let line = first_line(request);
    if log_request {
        let _ = write!(out, "<{fd} ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    let kind = reply_kind(line);
    let lines = reply_lines(reply);
    if kind == TextReply::Listing {
        let [only] = lines.as_slice() else {
            return;
        };
        if only.starts_with(b"STAT ") || *only == b"END" || only.starts_with(b"key=") {
            return;
        }
    }
    for reply_line in lines {
        let logged: &[u8] = match kind {
            TextReply::Retrieval => match reply_line.strip_prefix(b"VALUE ") {
                Some(rest) => {
                    let key = rest.split(|&b| b == b' ').next().unwrap_or(b"");
                    let _ = write!(out, ">{fd} sending key ");
                    out.extend_from_slice(key);
                    out.push(b'\n');
                    continue;
                }
                None => reply_line,
            },
            TextReply::Meta => {
                let error = reply_line.starts_with(b"ERROR")
                    || reply_line.starts_with(b"CLIENT_ERROR")
                    || reply_line.starts_with(b"SERVER_ERROR");
                if !(error || reply_line == b"MN") {
                    continue;
                }
                reply_line
            }
            TextReply::Listing | TextReply::Plain => reply_line,
        };
        let _ = write!(out, ">{fd} ");
        out.extend_from_slice(logged);
        out.push(b'\n');
    }
}

/// The lines of a text reply, without their line ends and without the data blocks of
/// `VALUE` and `VA` lines (whose length they give).
fn reply_lines(reply: &[u8]) -> Vec<&[u8]> {
    let mut lines = Vec::new();
    let mut rest = reply;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n');
        let (line, after) = match end {
            Some(end) => (&rest[..end], &rest[end + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        lines.push(line);
        rest = after;
        // A data block follows: skip its bytes and their CRLF.
        let data_bytes = if let Some(header) = line.strip_prefix(b"VALUE ") {
            header.split(|&b| b == b' ').nth(2)
        } else if let Some(header) = line.strip_prefix(b"VA ") {
            header.split(|&b| b == b' ').next()
        } else {
            None
        };
        if let Some(bytes) =
            data_bytes.and_then(|b| std::str::from_utf8(b).ok()?.parse::<usize>().ok())
        {
            rest = rest.get(bytes.saturating_add(2)..).unwrap_or(&[]);
        }
    }
    lines
}

/// memcached's dump of a binary header: `<fd Read binary protocol data:` (or `>fd
/// Writing bin response:`) then six lines of four bytes.
fn push_header(fd: i32, header: &[u8], request: bool, out: &mut Vec<u8>) {
    let (mark, title, indent) = if request {
        ('<', "Read binary protocol data:", "   ")
    } else {
        ('>', "Writing bin response:", "  ")
    };
    let _ = writeln!(out, "{mark}{fd} {title}");
    for word in header.chunks(4) {
        let _ = write!(out, "{mark}{fd}{indent}");
        for byte in word {
            let _ = write!(out, " 0x{byte:02x}");
        }
        out.push(b'\n');
    }
}

/// Binary header length; the total body length is at bytes 8 to 12.
const BINARY_HEADER_BYTES: usize = 24;

/// Formats the log of one binary request: its header (when `log_request`) and the
/// header of every response in `reply`.
pub fn format_binary(fd: i32, request: &[u8], reply: &[u8], log_request: bool, out: &mut Vec<u8>) {
    if log_request {
        if let Some(header) = request.get(..BINARY_HEADER_BYTES) {
            push_header(fd, header, true, out);
        }
    }
    let mut rest = reply;
    while let Some(header) = rest.get(..BINARY_HEADER_BYTES) {
        push_header(fd, header, false, out);
        let body = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        rest = rest
            .get(BINARY_HEADER_BYTES.saturating_add(body)..)
            .unwrap_or(&[]);
    }
}

/// Writes one request's lines to stderr in one write (a failed write is dropped: the
/// log must never stop the server).
#[cold]
pub fn log_exchange(fd: i32, binary: bool, request: &[u8], reply: &[u8], log_request: bool) {
    let mut out = Vec::new();
    if binary {
        format_binary(fd, request, reply, log_request, &mut out);
    } else {
        format_text(fd, request, reply, log_request, &mut out);
    }
    if !out.is_empty() {
        let _ = std::io::stderr().lock().write_all(&out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(request: &[u8], reply: &[u8]) -> String {
        let mut out = Vec::new();
        format_text(24, request, reply, true, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The lines memcached 1.6.18 -vv printed for the same requests.
    #[test]
    fn text_lines_are_memcached_s() {
        assert_eq!(
            text(b"set foo 0 0 3\r\nbar\r\n", b"STORED\r\n"),
            "<24 set foo 0 0 3\n>24 STORED\n"
        );
        assert_eq!(
            text(b"get foo nokey\r\n", b"VALUE foo 0 3\r\nEND\r\nEND\r\n"),
            "<24 get foo nokey\n>24 sending key foo\n>24 END\n",
            "a data block that looks like a line is skipped"
        );
        assert_eq!(
            text(b"gets foo\n", b"VALUE foo 0 3 1\r\nbar\r\nEND\r\n"),
            "<24 gets foo\n>24 sending key foo\n>24 END\n"
        );
        assert_eq!(
            text(
                b"incr foo 1\r\n",
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
            ),
            "<24 incr foo 1\n>24 CLIENT_ERROR cannot increment or decrement non-numeric value\n"
        );
        assert_eq!(text(b"mg foo v\r\n", b"VA 3\r\nMN\r\n"), "<24 mg foo v\n");
        assert_eq!(text(b"mn\r\n", b"MN\r\n"), "<24 mn\n>24 MN\n");
        assert_eq!(text(b"ms k 2\r\nhi\r\n", b"HD\r\n"), "<24 ms k 2\n");
        assert_eq!(
            text(b"stats\r\n", b"STAT pid 1\r\nSTAT uptime 2\r\nEND\r\n"),
            "<24 stats\n"
        );
        assert_eq!(
            text(b"stats detail on\r\n", b"OK\r\n"),
            "<24 stats detail on\n>24 OK\n"
        );
        assert_eq!(
            text(b"stats cachedump 1 1\r\n", b"END\r\n"),
            "<24 stats cachedump 1 1\n"
        );
        assert_eq!(
            text(b"version\r\n", b"VERSION 1.6.18\r\n"),
            "<24 version\n>24 VERSION 1.6.18\n"
        );
        assert_eq!(text(b"bogus\r\n", b"ERROR\r\n"), "<24 bogus\n>24 ERROR\n");
        assert_eq!(
            text(b"set a 0 0 1 noreply\r\nb\r\n", b""),
            "<24 set a 0 0 1 noreply\n"
        );
        let mut quiet = Vec::new();
        format_text(
            24,
            b"set u 0 0 9\r\nuser pass\r\n",
            b"STORED\r\n",
            false,
            &mut quiet,
        );
        assert_eq!(String::from_utf8_lossy(&quiet), ">24 STORED\n");
    }

    /// memcached 1.6.18 -vv's dump of a binary `get` of a missing key.
    #[test]
    fn binary_headers_are_dumped_as_memcached_dumps_them() {
        let request = [
            0x80, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 3, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0,
            0, 0, 0, b'f', b'o', b'o',
        ];
        let mut reply = vec![
            0x81, 0x00, 0x00, 0x00, 0, 0, 0, 1, 0, 0, 0, 9, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0,
            0, 0, 0,
        ];
        reply.extend_from_slice(b"Not found");
        let mut out = Vec::new();
        format_binary(24, &request, &reply, true, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "<24 Read binary protocol data:\n\
             <24    0x80 0x00 0x00 0x03\n\
             <24    0x00 0x00 0x00 0x00\n\
             <24    0x00 0x00 0x00 0x03\n\
             <24    0xde 0xad 0xbe 0xef\n\
             <24    0x00 0x00 0x00 0x00\n\
             <24    0x00 0x00 0x00 0x00\n\
             >24 Writing bin response:\n\
             >24   0x81 0x00 0x00 0x00\n\
             >24   0x00 0x00 0x00 0x01\n\
             >24   0x00 0x00 0x00 0x09\n\
             >24   0xde 0xad 0xbe 0xef\n\
             >24   0x00 0x00 0x00 0x00\n\
             >24   0x00 0x00 0x00 0x00\n"
        );
    }
}
