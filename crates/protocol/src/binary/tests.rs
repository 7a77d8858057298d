use super::*;
use proptest::prelude::*;

const LIMITS: BinaryLimits = BinaryLimits {
    value_max_bytes: 1024,
};

/// Builds a request: header with the given lengths, then extras, key, value.
fn req_bytes(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let body_len = extras.len() + key.len() + value.len();
    let mut b = vec![REQUEST_MAGIC, opcode];
    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
    b.push(extras.len() as u8);
    b.push(0);
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&(body_len as u32).to_be_bytes());
    b.extend_from_slice(&0x0102_0304u32.to_be_bytes());
    b.extend_from_slice(&cas.to_be_bytes());
    b.extend_from_slice(extras);
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

fn store_extras(flags: u32, exptime: u32) -> Vec<u8> {
    let mut e = flags.to_be_bytes().to_vec();
    e.extend_from_slice(&exptime.to_be_bytes());
    e
}

fn arith_extras(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    let mut e = delta.to_be_bytes().to_vec();
    e.extend_from_slice(&initial.to_be_bytes());
    e.extend_from_slice(&exptime.to_be_bytes());
    e
}

fn complete(buf: &[u8]) -> (BinaryRequest<'_>, usize) {
    match parse(buf, &LIMITS) {
        Parsed::Complete { request, consumed } => (request, consumed),
        other => panic!("expected a complete request, got {other:?}"),
    }
}

fn command(buf: &[u8]) -> Command<'_> {
    let (request, consumed) = complete(buf);
    assert_eq!(consumed, buf.len(), "whole request consumed");
    request.command
}

/// One well-formed request per opcode, with what it must parse to.
fn every_opcode() -> Vec<(Vec<u8>, Command<'static>)> {
    let se = store_extras(0xdead_beef, 300);
    let ae = arith_extras(7, 42, 0xffff_ffff);
    let te = 1000u32.to_be_bytes();
    let store = |kind, quiet, flags, exptime| Command::Store {
        kind,
        key: b"k",
        value: b"val",
        flags,
        exptime,
        quiet,
    };
    let get = |return_key, quiet| Command::Get {
        key: b"k",
        return_key,
        quiet,
    };
    let gat = |return_key, quiet| Command::GetAndTouch {
        key: b"k",
        exptime: 1000,
        return_key,
        quiet,
    };
    let arith = |increment, quiet| Command::Arith {
        increment,
        key: b"k",
        delta: 7,
        initial: 42,
        exptime: ARITH_EXPTIME_NO_CREATE,
        quiet,
    };
    vec![
        (req_bytes(0x00, b"", b"k", b"", 0), get(false, false)),
        (req_bytes(0x09, b"", b"k", b"", 0), get(false, true)),
        (req_bytes(0x0c, b"", b"k", b"", 0), get(true, false)),
        (req_bytes(0x0d, b"", b"k", b"", 0), get(true, true)),
        (
            req_bytes(0x01, &se, b"k", b"val", 0),
            store(StoreKind::Set, false, 0xdead_beef, 300),
        ),
        (
            req_bytes(0x11, &se, b"k", b"val", 0),
            store(StoreKind::Set, true, 0xdead_beef, 300),
        ),
        (
            req_bytes(0x02, &se, b"k", b"val", 0),
            store(StoreKind::Add, false, 0xdead_beef, 300),
        ),
        (
            req_bytes(0x12, &se, b"k", b"val", 0),
            store(StoreKind::Add, true, 0xdead_beef, 300),
        ),
        (
            req_bytes(0x03, &se, b"k", b"val", 0),
            store(StoreKind::Replace, false, 0xdead_beef, 300),
        ),
        (
            req_bytes(0x13, &se, b"k", b"val", 0),
            store(StoreKind::Replace, true, 0xdead_beef, 300),
        ),
        (
            req_bytes(0x0e, b"", b"k", b"val", 0),
            store(StoreKind::Append, false, 0, 0),
        ),
        (
            req_bytes(0x19, b"", b"k", b"val", 0),
            store(StoreKind::Append, true, 0, 0),
        ),
        (
            req_bytes(0x0f, b"", b"k", b"val", 0),
            store(StoreKind::Prepend, false, 0, 0),
        ),
        (
            req_bytes(0x1a, b"", b"k", b"val", 0),
            store(StoreKind::Prepend, true, 0, 0),
        ),
        (
            req_bytes(0x04, b"", b"k", b"", 0),
            Command::Delete {
                key: b"k",
                quiet: false,
            },
        ),
        (
            req_bytes(0x14, b"", b"k", b"", 0),
            Command::Delete {
                key: b"k",
                quiet: true,
            },
        ),
        (req_bytes(0x05, &ae, b"k", b"", 0), arith(true, false)),
        (req_bytes(0x15, &ae, b"k", b"", 0), arith(true, true)),
        (req_bytes(0x06, &ae, b"k", b"", 0), arith(false, false)),
        (req_bytes(0x16, &ae, b"k", b"", 0), arith(false, true)),
        (
            req_bytes(0x08, b"", b"", b"", 0),
            Command::Flush {
                exptime: 0,
                quiet: false,
            },
        ),
        (
            req_bytes(0x08, &te, b"", b"", 0),
            Command::Flush {
                exptime: 1000,
                quiet: false,
            },
        ),
        (
            req_bytes(0x18, b"", b"", b"", 0),
            Command::Flush {
                exptime: 0,
                quiet: true,
            },
        ),
        (req_bytes(0x0a, b"", b"", b"", 0), Command::Noop),
        (req_bytes(0x0b, b"", b"", b"", 0), Command::Version),
        (
            req_bytes(0x10, b"", b"", b"", 0),
            Command::Stat { group: b"" },
        ),
        (
            req_bytes(0x10, b"", b"items", b"", 0),
            Command::Stat { group: b"items" },
        ),
        (
            req_bytes(0x07, b"", b"", b"", 0),
            Command::Quit { quiet: false },
        ),
        (
            req_bytes(0x17, b"", b"", b"", 0),
            Command::Quit { quiet: true },
        ),
        (
            req_bytes(0x1c, &te, b"k", b"", 0),
            Command::Touch {
                key: b"k",
                exptime: 1000,
            },
        ),
        (req_bytes(0x1d, &te, b"k", b"", 0), gat(false, false)),
        (req_bytes(0x1e, &te, b"k", b"", 0), gat(false, true)),
        (req_bytes(0x23, &te, b"k", b"", 0), gat(true, false)),
        (req_bytes(0x24, &te, b"k", b"", 0), gat(true, true)),
        (
            req_bytes(0x1b, &te, b"", b"", 0),
            Command::Unknown { swallow_bytes: 4 },
        ),
    ]
}

#[test]
fn every_opcode_parses_to_its_command() {
    for (bytes, expected) in every_opcode() {
        let consumed_expected = match expected {
            // Unknown commands stop at the header; their body is swallowed.
            Command::Unknown { .. } => HEADER_BYTES,
            _ => bytes.len(),
        };
        let (request, consumed) = complete(&bytes);
        assert_eq!(request.command, expected, "opcode {:#04x}", bytes[1]);
        assert_eq!(consumed, consumed_expected, "opcode {:#04x}", bytes[1]);
        assert_eq!(request.header.opaque, 0x0102_0304);
        assert_eq!(request.header.opcode, bytes[1]);
    }
}

#[test]
fn header_fields_are_big_endian() {
    let bytes = req_bytes(
        0x01,
        &store_extras(1, 2),
        b"key",
        b"v",
        0x1122_3344_5566_7788,
    );
    let (request, _) = complete(&bytes);
    assert_eq!(
        request.header,
        RequestHeader {
            opcode: 0x01,
            key_len: 3,
            extras_len: 8,
            data_type: 0,
            vbucket: 0,
            body_len: 12,
            opaque: 0x0102_0304,
            cas: 0x1122_3344_5566_7788,
        }
    );
}

#[test]
fn every_split_point_of_every_request_is_incomplete() {
    for (bytes, _) in every_opcode() {
        let (_, needed) = complete(&bytes);
        for split in 0..needed {
            assert_eq!(
                parse(&bytes[..split], &LIMITS),
                Parsed::Incomplete,
                "opcode {:#04x} cut at {split}",
                bytes[1]
            );
        }
    }
}

#[test]
fn pipelined_requests_are_consumed_one_at_a_time() {
    let mut bytes = req_bytes(0x09, b"", b"a", b"", 0);
    bytes.extend_from_slice(&req_bytes(0x0a, b"", b"", b"", 0));
    let (request, consumed) = complete(&bytes);
    assert_eq!(
        request.command,
        Command::Get {
            key: b"a",
            return_key: false,
            quiet: true
        }
    );
    assert_eq!(consumed, HEADER_BYTES + 1);
    assert_eq!(command(&bytes[consumed..]), Command::Noop);
}

#[test]
fn a_bad_magic_byte_closes_without_a_reply() {
    let mut bytes = req_bytes(0x0a, b"", b"", b"", 0);
    bytes[0] = RESPONSE_MAGIC;
    assert_eq!(
        parse(&bytes, &LIMITS),
        Parsed::Invalid {
            reply: b"",
            consumed: 0,
            swallow_bytes: 0,
            close: true
        }
    );
    // Decided on the header alone, as memcached does.
    assert_eq!(
        parse(&bytes[..HEADER_BYTES], &LIMITS),
        Parsed::Invalid {
            reply: b"",
            consumed: 0,
            swallow_bytes: 0,
            close: true
        }
    );
}

fn protocol_error(bytes: &[u8]) -> Status {
    // Decided on the header alone: nothing after it is needed.
    match complete(&bytes[..HEADER_BYTES]).0.command {
        Command::ProtocolError { status } => status,
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[test]
fn lengths_that_do_not_fit_the_opcode_are_invalid_arguments() {
    let se = store_extras(0, 0);
    let ae = arith_extras(1, 0, 0);
    let te = 0u32.to_be_bytes();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("get with extras", req_bytes(0x00, &te, b"k", b"", 0)),
        ("get without key", req_bytes(0x00, b"", b"", b"", 0)),
        ("get with value", req_bytes(0x00, b"", b"k", b"v", 0)),
        ("getkq with value", req_bytes(0x0d, b"", b"k", b"v", 0)),
        ("set without extras", req_bytes(0x01, b"", b"k", b"v", 0)),
        (
            "setq with short extras",
            req_bytes(0x11, &te, b"k", b"v", 0),
        ),
        ("set without key", req_bytes(0x01, &se, b"", b"v", 0)),
        ("add without key", req_bytes(0x02, &se, b"", b"v", 0)),
        ("delete with extras", req_bytes(0x04, &te, b"k", b"", 0)),
        ("delete with value", req_bytes(0x04, b"", b"k", b"v", 0)),
        ("incr with short extras", req_bytes(0x05, &se, b"k", b"", 0)),
        ("decr with value", req_bytes(0x06, &ae, b"k", b"v", 0)),
        ("incr without key", req_bytes(0x05, &ae, b"", b"", 0)),
        ("append with extras", req_bytes(0x0e, &se, b"k", b"v", 0)),
        ("prepend without key", req_bytes(0x0f, b"", b"", b"v", 0)),
        ("noop with body", req_bytes(0x0a, b"", b"k", b"", 0)),
        ("version with body", req_bytes(0x0b, b"", b"", b"v", 0)),
        ("quit with key", req_bytes(0x07, b"", b"k", b"", 0)),
        ("quitq with extras", req_bytes(0x17, &te, b"", b"", 0)),
        ("flush with key", req_bytes(0x08, b"", b"k", b"", 0)),
        ("flush with 8 extras", req_bytes(0x08, &se, b"", b"", 0)),
        ("flush with value", req_bytes(0x08, b"", b"", b"v", 0)),
        ("stat with extras", req_bytes(0x10, &te, b"", b"", 0)),
        ("touch without extras", req_bytes(0x1c, b"", b"k", b"", 0)),
        ("gat without key", req_bytes(0x1d, &te, b"", b"", 0)),
        ("sasl auth without key", req_bytes(0x21, b"", b"", b"", 0)),
        (
            "key of 251 bytes",
            req_bytes(0x00, b"", &[b'k'; 251], b"", 0),
        ),
    ];
    for (name, bytes) in cases {
        assert_eq!(protocol_error(&bytes), Status::InvalidArguments, "{name}");
    }
}

#[test]
fn key_and_extras_longer_than_the_body_are_unknown_command() {
    let mut bytes = req_bytes(0x00, b"", b"kk", b"", 0);
    bytes[8..12].copy_from_slice(&1u32.to_be_bytes());
    assert_eq!(protocol_error(&bytes), Status::UnknownCommand);
    let mut bytes = req_bytes(0x05, &arith_extras(1, 1, 1), b"k", b"", 0);
    bytes[8..12].copy_from_slice(&20u32.to_be_bytes());
    assert_eq!(protocol_error(&bytes), Status::UnknownCommand);
}

#[test]
fn a_250_byte_key_is_accepted() {
    let key = [b'k'; 250];
    let bytes = req_bytes(0x00, b"", &key, b"", 0);
    assert_eq!(
        command(&bytes),
        Command::Get {
            key: &key,
            return_key: false,
            quiet: false
        }
    );
}

#[test]
fn keys_may_hold_any_byte_in_the_binary_protocol() {
    let bytes = req_bytes(0x00, b"", b"a b\r\n\0", b"", 0);
    assert_eq!(
        command(&bytes),
        Command::Get {
            key: b"a b\r\n\0",
            return_key: false,
            quiet: false
        }
    );
}

#[test]
fn a_value_over_the_limit_completes_at_its_key_without_buffering() {
    let value = vec![b'x'; 1025];
    let bytes = req_bytes(0x11, &store_extras(0, 0), b"big", &value, 0);
    let key_end = HEADER_BYTES + 8 + 3;
    for available in [key_end, key_end + 10, bytes.len()] {
        let (request, consumed) = complete(&bytes[..available]);
        assert_eq!(
            request.command,
            Command::StoreTooLarge {
                kind: StoreKind::Set,
                key: b"big",
                value_len: 1025,
                quiet: true
            }
        );
        assert_eq!(consumed, key_end);
    }
    assert_eq!(parse(&bytes[..key_end - 1], &LIMITS), Parsed::Incomplete);

    let bytes = req_bytes(0x0e, b"", b"k", &value, 0);
    assert_eq!(
        complete(&bytes[..HEADER_BYTES + 1]).0.command,
        Command::StoreTooLarge {
            kind: StoreKind::Append,
            key: b"k",
            value_len: 1025,
            quiet: false
        }
    );
}

#[test]
fn a_value_at_the_limit_is_buffered() {
    let value = vec![b'x'; 1024];
    let bytes = req_bytes(0x01, &store_extras(0, 0), b"k", &value, 0);
    assert_eq!(
        parse(&bytes[..bytes.len() - 1], &LIMITS),
        Parsed::Incomplete
    );
    assert!(matches!(command(&bytes), Command::Store { value: v, .. } if v.len() == 1024));
}

#[test]
fn values_may_contain_anything_and_may_be_empty() {
    let se = store_extras(0, 0);
    let bytes = req_bytes(0x01, &se, b"k", b"\r\n\x80\x00", 0);
    assert!(matches!(
        command(&bytes),
        Command::Store {
            value: b"\r\n\x80\x00",
            ..
        }
    ));
    let bytes = req_bytes(0x01, &se, b"k", b"", 0);
    assert!(matches!(command(&bytes), Command::Store { value: b"", .. }));
}

/// A set's body need only hold extras and key: a key of several bytes with a short or
/// empty value is a valid store, for every store opcode that carries extras.
#[test]
fn stores_with_multi_byte_keys_and_short_values_parse() {
    let se = store_extras(9, 10);
    for (opcode, kind) in [
        (0x01, StoreKind::Set),
        (0x02, StoreKind::Add),
        (0x03, StoreKind::Replace),
    ] {
        for value in [&b""[..], b"v"] {
            let bytes = req_bytes(opcode, &se, b"key", value, 0);
            assert_eq!(
                command(&bytes),
                Command::Store {
                    kind,
                    key: b"key",
                    value,
                    flags: 9,
                    exptime: 10,
                    quiet: false
                },
                "opcode {opcode:#04x} value {value:?}"
            );
        }
    }
}

/// Only quit and a protocol error end the connection after their reply.
#[test]
fn only_quit_and_protocol_errors_close_the_connection() {
    for (bytes, command) in every_opcode() {
        let expected = matches!(command, Command::Quit { .. });
        assert_eq!(
            command.closes_connection(),
            expected,
            "opcode {:#04x}",
            bytes[1]
        );
    }
    let error = Command::ProtocolError {
        status: Status::InvalidArguments,
    };
    assert!(error.closes_connection());
    let too_large = Command::StoreTooLarge {
        kind: StoreKind::Set,
        key: b"k",
        value_len: 2000,
        quiet: false,
    };
    assert!(!too_large.closes_connection());
}

#[test]
fn unknown_opcodes_swallow_exactly_their_body() {
    let bytes = req_bytes(0x50, b"ee", b"ab", b"vvv", 0);
    let (request, consumed) = complete(&bytes[..HEADER_BYTES]);
    assert_eq!(request.command, Command::Unknown { swallow_bytes: 7 });
    assert_eq!(consumed, HEADER_BYTES);
    // SASL is not compiled in: its opcodes are unknown once their lengths check out.
    let bytes = req_bytes(0x20, b"", b"", b"", 0);
    assert_eq!(command(&bytes), Command::Unknown { swallow_bytes: 0 });
}

/// Without SASL, memcached still applies the SASL opcodes' length rules before
/// answering "Unknown command": list-mechs takes no body at all, auth and step need a
/// key and no extras.
#[test]
fn sasl_opcodes_are_unknown_only_when_their_lengths_fit() {
    let te = 0u32.to_be_bytes();
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("list mechs with value", req_bytes(0x20, b"", b"", b"v", 0)),
        ("list mechs with key", req_bytes(0x20, b"", b"k", b"", 0)),
        ("list mechs with extras", req_bytes(0x20, &te, b"", b"", 0)),
        ("auth with extras", req_bytes(0x21, &te, b"PLAIN", b"x", 0)),
        ("step with extras", req_bytes(0x22, &te, b"PLAIN", b"x", 0)),
        ("step without key", req_bytes(0x22, b"", b"", b"x", 0)),
    ];
    for (name, bytes) in bad {
        assert_eq!(protocol_error(&bytes), Status::InvalidArguments, "{name}");
    }
    for opcode in [0x21, 0x22] {
        let bytes = req_bytes(opcode, b"", b"PLAIN", b"\0user\0pass", 0);
        let (request, consumed) = complete(&bytes[..HEADER_BYTES]);
        assert_eq!(
            request.command,
            Command::Unknown { swallow_bytes: 15 },
            "opcode {opcode:#04x}"
        );
        assert_eq!(consumed, HEADER_BYTES);
    }
}

#[test]
fn stat_and_touch_leave_bytes_beyond_the_key_for_the_next_request() {
    // memcached does not check body_len on these: the rest is read as a new request.
    let mut bytes = req_bytes(0x10, b"", b"", b"", 0);
    bytes[8..12].copy_from_slice(&24u32.to_be_bytes());
    bytes.extend_from_slice(&req_bytes(0x0a, b"", b"", b"", 0));
    let (request, consumed) = complete(&bytes);
    assert_eq!(request.command, Command::Stat { group: b"" });
    assert_eq!(consumed, HEADER_BYTES);
}

#[test]
fn errors_carry_memcached_text() {
    let mut out = Vec::new();
    encode_error(&mut out, 0x01, 0xaabb_ccdd, Status::KeyExists);
    let mut expected = vec![0x81, 0x01, 0, 0, 0, 0, 0x00, 0x02, 0, 0, 0, 20];
    expected.extend_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 0, 0, 0, 0, 0]);
    expected.extend_from_slice(b"Data exists for key.");
    assert_eq!(out, expected);

    let texts: [(Status, u16, &[u8]); 8] = [
        (Status::KeyNotFound, 1, b"Not found"),
        (Status::TooLarge, 3, b"Too large."),
        (Status::InvalidArguments, 4, b"Invalid arguments"),
        (Status::NotStored, 5, b"Not stored."),
        (
            Status::NonNumeric,
            6,
            b"Non-numeric server-side value for incr or decr",
        ),
        (Status::UnknownCommand, 0x81, b"Unknown command"),
        (Status::OutOfMemory, 0x82, b"Out of memory"),
        (Status::NoError, 0, b""),
    ];
    for (status, code, text) in texts {
        assert_eq!(status.code(), code);
        assert_eq!(status.message(), text);
    }
}

#[test]
fn item_and_counter_replies_are_laid_out_like_memcached() {
    let header = complete(&req_bytes(0x0c, b"", b"k", b"", 0)).0.header;
    let mut out = Vec::new();
    encode_item(&mut out, &header, 5, 1, b"k", b"v1");
    let mut expected = vec![0x81, 0x0c, 0, 1, 4, 0, 0, 0, 0, 0, 0, 7];
    expected.extend_from_slice(&[1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 1]);
    expected.extend_from_slice(b"\0\0\0\x05kv1");
    assert_eq!(out, expected);

    out.clear();
    encode_counter(&mut out, 0x05, 9, 6, 15);
    let mut expected = vec![0x81, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8];
    expected.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 6]);
    expected.extend_from_slice(&15u64.to_be_bytes());
    assert_eq!(out, expected);

    out.clear();
    encode_stat(&mut out, 0x10, 9, b"pid", b"42");
    let mut expected = vec![0x81, 0x10, 0, 3, 0, 0, 0, 0, 0, 0, 0, 5];
    expected.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0]);
    expected.extend_from_slice(b"pid42");
    assert_eq!(out, expected);
}

#[test]
fn success_replies_are_a_bare_header_with_the_cas() {
    let mut out = b"prior".to_vec();
    encode_success(&mut out, 0x11, 0x0a0b_0c0d, 0x0102_0304_0506_0708);
    let mut expected = b"prior".to_vec();
    expected.extend_from_slice(&[0x81, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    expected.extend_from_slice(&[0x0a, 0x0b, 0x0c, 0x0d, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(out, expected);
}

/// A reply with a value longer than the header is written whole, and the encoder
/// reserves about what it writes rather than a multiple of it (replies of large items
/// are common).
#[test]
fn large_replies_are_written_whole_without_over_reserving() {
    let header = complete(&req_bytes(0x00, b"", b"k", b"", 0)).0.header;
    let value = vec![b'v'; 64 * 1024];
    let mut out = Vec::new();
    encode_item(&mut out, &header, 7, 3, b"", &value);
    assert_eq!(out.len(), HEADER_BYTES + 4 + value.len());
    assert_eq!(&out[8..12], &(4 + value.len() as u32).to_be_bytes());
    assert_eq!(&out[HEADER_BYTES..HEADER_BYTES + 4], &7u32.to_be_bytes());
    assert!(out[HEADER_BYTES + 4..] == value[..]);
    assert!(
        out.capacity() <= 2 * out.len(),
        "reserved {} bytes for a {}-byte reply",
        out.capacity(),
        out.len()
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        match parse(&bytes, &LIMITS) {
            Parsed::Complete { consumed, .. } | Parsed::Invalid { consumed, .. } => {
                prop_assert!(consumed <= bytes.len());
            }
            Parsed::Incomplete => {}
        }
    }

    #[test]
    fn arbitrary_headers_with_valid_magic_never_panic(
        opcode in any::<u8>(),
        key_len in 0u16..300,
        extras_len in any::<u8>(),
        body_len in 0u32..600,
        tail in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bytes = vec![REQUEST_MAGIC, opcode];
        bytes.extend_from_slice(&key_len.to_be_bytes());
        bytes.push(extras_len);
        bytes.extend_from_slice(&[0; 3]);
        bytes.extend_from_slice(&body_len.to_be_bytes());
        bytes.extend_from_slice(&[0; 12]);
        bytes.extend_from_slice(&tail);
        match parse(&bytes, &LIMITS) {
            Parsed::Complete { consumed, request } => {
                prop_assert!(consumed <= bytes.len());
                prop_assert!(consumed >= HEADER_BYTES);
                if let Command::Store { value, key, .. } = request.command {
                    prop_assert!(value.len() <= LIMITS.value_max_bytes);
                    prop_assert!(!key.is_empty());
                }
            }
            Parsed::Invalid { .. } => prop_assert!(false, "valid magic is never Invalid"),
            Parsed::Incomplete => {}
        }
    }
}
