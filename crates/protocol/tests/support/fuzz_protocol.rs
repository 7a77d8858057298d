//! What must hold for any bytes given to the three wire parsers, whatever they are:
//! shared by the cargo-fuzz targets `text`, `meta` and `binary` (`fuzz/fuzz_targets/`)
//! and by the test that replays their committed corpora (`tests/fuzz_corpus_replay.rs`).
//!
//! For every input the parser must not panic, and:
//! - a completed request consumed at least one byte and no more than it was given, and
//!   everything it borrows (keys, values, opaque tokens) lies inside those bytes;
//! - keys are keys (1..=250 bytes, no space, CR, LF or NUL) and, in the binary protocol,
//!   the header's key, extras and body lengths agree with what was taken and swallowed
//!   (memcached's CVE-2016-8704/8705/8706 were disagreements there);
//! - an error reply is one `\r\n`-terminated line, or nothing (`noreply`, and the
//!   binary protocol's bad magic, which closes without a reply);
//! - the answer does not depend on where the bytes were split: parsing any prefix that
//!   already gives an answer (not `Incomplete`) gives the same answer as the whole
//!   input, so a request read in pieces is the request read at once. The prefixes
//!   checked are the consumed length and a few points the input's first bytes choose.

#![allow(dead_code)]

use protocol::binary::{self, BinaryLimits, BinaryRequest, Command, HEADER_BYTES};
use protocol::common::is_valid_key;
use protocol::meta::{self, MetaKey, MetaLimits, MetaRequest, SetValue};
use protocol::text::{self, TextLimits, TextRequest};
use protocol::Parsed;

/// Small limits, so that the fuzzer reaches the too-large paths with short inputs.
pub const VALUE_MAX_BYTES: usize = 1000;
/// Per-item overhead the text target's `item_fits` charges (an item header).
const ITEM_HEADER_BYTES: usize = 56;

fn item_fits(key_len: usize, value_len: usize) -> bool {
    key_len
        .checked_add(value_len)
        .and_then(|n| n.checked_add(ITEM_HEADER_BYTES))
        .is_some_and(|n| n <= VALUE_MAX_BYTES)
}

/// Whether `part` lies inside `whole[..len]` (pointer ranges; an empty slice anywhere
/// inside counts).
fn within(whole: &[u8], len: usize, part: &[u8]) -> bool {
    let start = whole.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    p >= start && p + part.len() <= start + len
}

/// Split points to check: the prefix lengths the input's first two bytes choose, and
/// the consumed length.
fn split_points(input: &[u8], consumed: Option<usize>) -> Vec<usize> {
    let len = input.len();
    let mut points = Vec::with_capacity(5);
    if len > 1 {
        for &selector in input.iter().take(2) {
            points.push(selector as usize * len / 256);
        }
        points.push(len - 1);
    }
    // Where memcached's 2048-byte rule starts to apply: a line read up to here and a
    // line read whole must get the same answer (the meta parser once answered a long
    // line that arrived whole and closed on one that arrived in pieces).
    points.push(protocol::common::COMMAND_LINE_MAX_BYTES + 1);
    points.extend(consumed);
    points.retain(|&k| k < len);
    points.sort_unstable();
    points.dedup();
    points
}

/// An error reply is empty (`noreply`, or a close without a word) or one line.
fn check_error_line(reply: &[u8]) {
    if reply.is_empty() {
        return;
    }
    assert!(reply.ends_with(b"\r\n"), "error reply {reply:?}");
    assert_eq!(
        reply.iter().filter(|&&b| b == b'\n').count(),
        1,
        "error reply of several lines: {reply:?}"
    );
}

/// Checks common to every parser's answer; returns the consumed length of an answer.
fn check_parsed<R: std::fmt::Debug>(parsed: &Parsed<R>, len: usize) -> Option<usize> {
    match parsed {
        Parsed::Complete { consumed, .. } => {
            assert!(
                *consumed > 0 && *consumed <= len,
                "consumed {consumed} of {len}"
            );
            Some(*consumed)
        }
        Parsed::Incomplete => None,
        Parsed::Invalid {
            reply, consumed, ..
        } => {
            assert!(*consumed <= len, "consumed {consumed} of {len}");
            check_error_line(reply);
            Some(*consumed)
        }
    }
}

pub fn text(input: &[u8]) {
    let fits = item_fits;
    let limits = TextLimits { item_fits: &fits };
    let parsed = text::parse(input, &limits);
    let consumed = check_parsed(&parsed, input.len());
    if let Parsed::Complete { request, consumed } = &parsed {
        check_text_request(input, *consumed, request);
    }
    for k in split_points(input, consumed) {
        let prefix = text::parse(&input[..k], &limits);
        if prefix != Parsed::Incomplete {
            assert_eq!(prefix, parsed, "the first {k} bytes parse otherwise");
        }
    }
}

fn check_text_request(input: &[u8], consumed: usize, request: &TextRequest<'_>) {
    let key_ok = |key: &[u8]| {
        assert!(is_valid_key(key), "invalid key {key:?}");
        assert!(within(input, consumed, key), "key outside the request");
    };
    match request {
        TextRequest::Store { key, value, .. } => {
            key_ok(key);
            assert!(within(input, consumed, value), "value outside the request");
            assert!(item_fits(key.len(), value.len()), "a store that cannot fit");
            // The payload is followed by its "\r\n", the last bytes consumed.
            assert_eq!(&input[consumed - 2..consumed], b"\r\n");
        }
        TextRequest::StoreTooLarge { key, value_len, .. } => {
            key_ok(key);
            assert!(!item_fits(key.len(), *value_len), "a fitting store refused");
            assert_eq!(
                input[consumed - 1],
                b'\n',
                "only the command line is consumed"
            );
        }
        TextRequest::Get {
            keys,
            touch_exptime,
            ..
        } => {
            let mut count = 0;
            for key in keys.iter() {
                key_ok(key);
                count += 1;
            }
            // `gat <exptime>` alone is memcached's empty `END`; a get needs a key.
            assert!(count > 0 || touch_exptime.is_some(), "a get without keys");
        }
        TextRequest::Delete { key, .. }
        | TextRequest::Arith { key, .. }
        | TextRequest::Touch { key, .. } => key_ok(key),
        _ => {}
    }
}

pub fn meta(input: &[u8]) {
    let limits = MetaLimits {
        value_max_bytes: VALUE_MAX_BYTES,
    };
    let parsed = meta::parse(input, &limits);
    let consumed = check_parsed(&parsed, input.len());
    if let Parsed::Complete { request, consumed } = &parsed {
        check_meta_request(input, *consumed, request);
    }
    for k in split_points(input, consumed) {
        let prefix = meta::parse(&input[..k], &limits);
        if prefix != Parsed::Incomplete {
            assert_eq!(prefix, parsed, "the first {k} bytes parse otherwise");
        }
    }
}

fn check_meta_request(input: &[u8], consumed: usize, request: &MetaRequest<'_>) {
    let key_ok = |key: &MetaKey<'_>| {
        let bytes = key.as_bytes();
        assert!(
            !bytes.is_empty() && bytes.len() <= protocol::common::KEY_LENGTH_MAX_BYTES,
            "key of {} bytes",
            bytes.len()
        );
        if !key.binary {
            assert!(is_valid_key(bytes), "invalid key {bytes:?}");
            assert!(within(input, consumed, bytes), "key outside the request");
        }
    };
    match request {
        MetaRequest::Get { key, flags }
        | MetaRequest::Delete { key, flags }
        | MetaRequest::Arith { key, flags, .. } => {
            key_ok(key);
            if let Some(opaque) = flags.opaque {
                assert!(
                    within(input, consumed, opaque),
                    "opaque outside the request"
                );
            }
        }
        MetaRequest::Set {
            key, flags, value, ..
        } => {
            key_ok(key);
            if let Some(opaque) = flags.opaque {
                assert!(
                    within(input, consumed, opaque),
                    "opaque outside the request"
                );
            }
            match value {
                SetValue::Data(data) => {
                    assert!(
                        data.len() <= VALUE_MAX_BYTES,
                        "{} bytes buffered",
                        data.len()
                    );
                    assert!(within(input, consumed, data), "value outside the request");
                    assert_eq!(&input[consumed - 2..consumed], b"\r\n");
                }
                SetValue::TooLarge { swallow_bytes } => {
                    assert!(
                        *swallow_bytes > VALUE_MAX_BYTES,
                        "swallowed {swallow_bytes}"
                    );
                    assert_eq!(
                        input[consumed - 1],
                        b'\n',
                        "only the command line is consumed"
                    );
                }
            }
        }
        MetaRequest::Debug { key } => key_ok(key),
        MetaRequest::Noop => {}
    }
}

pub fn binary(input: &[u8]) {
    let limits = BinaryLimits {
        value_max_bytes: VALUE_MAX_BYTES,
    };
    let parsed = binary::parse(input, &limits);
    let consumed = check_parsed(&parsed, input.len());
    match &parsed {
        Parsed::Complete { request, consumed } => check_binary_request(input, *consumed, request),
        Parsed::Invalid { consumed, .. } => {
            // Only a bad magic byte is refused without a request to answer.
            assert_ne!(input.first(), Some(&binary::REQUEST_MAGIC));
            assert_eq!(*consumed, 0);
        }
        Parsed::Incomplete => {}
    }
    for k in split_points(input, consumed) {
        let prefix = binary::parse(&input[..k], &limits);
        if prefix != Parsed::Incomplete {
            assert_eq!(prefix, parsed, "the first {k} bytes parse otherwise");
        }
    }
}

fn check_binary_request(input: &[u8], consumed: usize, request: &BinaryRequest<'_>) {
    let header = &request.header;
    let key_len = usize::from(header.key_len);
    let extras_len = usize::from(header.extras_len);
    let body_len = header.body_len as usize;
    let frame = HEADER_BYTES + body_len;
    let key_ok = |key: &[u8]| {
        assert_eq!(key.len(), key_len, "key length against the header's");
        assert!(within(input, consumed, key), "key outside the request");
        assert!(
            key_len + extras_len <= body_len,
            "key {key_len} + extras {extras_len} beyond body {body_len}"
        );
    };
    match &request.command {
        Command::Store { key, value, .. } => {
            key_ok(key);
            assert!(within(input, consumed, value), "value outside the request");
            assert_eq!(extras_len + key_len + value.len(), body_len);
            assert!(value.len() <= VALUE_MAX_BYTES);
            assert_eq!(consumed, frame);
        }
        Command::StoreTooLarge { key, value_len, .. } => {
            key_ok(key);
            assert!(*value_len > VALUE_MAX_BYTES);
            assert_eq!(HEADER_BYTES + extras_len + key_len, consumed);
            assert_eq!(
                consumed + value_len,
                frame,
                "taken and swallowed against the frame"
            );
        }
        Command::Unknown { swallow_bytes } => {
            assert_eq!(consumed, HEADER_BYTES);
            assert_eq!(
                consumed + swallow_bytes,
                frame,
                "swallowed against the frame"
            );
        }
        Command::ProtocolError { .. } => {}
        Command::Get { key, .. } | Command::Delete { key, .. } | Command::Arith { key, .. } => {
            key_ok(key);
            assert!(!key.is_empty(), "an empty key");
            assert_eq!(consumed, frame);
        }
        // memcached reads only the extras and key of these and takes the rest of a longer
        // body for the next request; fogcached does the same (found by this target: the
        // frame check failed on a `stat` with a body; `binary.rs` has the test
        // `stat_and_touch_leave_bytes_beyond_the_key_for_the_next_request`).
        Command::GetAndTouch { key, .. } | Command::Touch { key, .. } => {
            key_ok(key);
            assert!(!key.is_empty(), "an empty key");
            assert_eq!(consumed, HEADER_BYTES + extras_len + key_len);
        }
        Command::Stat { group } => {
            key_ok(group);
            assert_eq!(consumed, HEADER_BYTES + extras_len + key_len);
        }
        // Flush, noop, version, quit, and whatever opcodes are added later: the whole
        // frame is taken.
        _ => assert_eq!(consumed, frame),
    }
}
