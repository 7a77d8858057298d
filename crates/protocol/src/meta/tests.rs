use super::*;
use proptest::prelude::*;

const LIMITS: MetaLimits = MetaLimits {
    value_max_bytes: 1024,
};

fn complete(input: &[u8]) -> (MetaRequest<'_>, usize) {
    match parse(input, &LIMITS) {
        Parsed::Complete { request, consumed } => (request, consumed),
        other => panic!("expected a complete request for {input:?}, got {other:?}"),
    }
}

/// The reply and the bytes consumed/swallowed of an invalid request.
fn refused(input: &[u8]) -> (&'static [u8], usize, usize) {
    match parse(input, &LIMITS) {
        Parsed::Invalid {
            reply,
            consumed,
            swallow_bytes,
            close: false,
        } => (reply, consumed, swallow_bytes),
        other => panic!("expected an error reply for {input:?}, got {other:?}"),
    }
}

fn reply_of(input: &[u8]) -> &'static [u8] {
    refused(input).0
}

#[test]
fn mg_parses_key_and_flags_in_order() {
    let (request, consumed) = complete(b"mg foo v t c Oab k q\r\nmn\r\n");
    assert_eq!(consumed, 22);
    let MetaRequest::Get { key, flags } = request else {
        panic!("not a get");
    };
    assert_eq!(key.as_bytes(), b"foo");
    assert!(!key.binary);
    assert_eq!(flags.in_order(), b"vtcOkq");
    assert!(flags.return_value && flags.return_ttl && flags.return_cas);
    assert!(flags.return_key && flags.quiet);
    assert_eq!(flags.opaque, Some(b"Oab".as_slice()));
}

#[test]
fn mg_takes_numeric_arguments_and_ignores_proxy_hints() {
    let (request, _) = complete(b"mg foo N30 R-5 T+7 Pxx L/a/ u h l s f\n");
    let MetaRequest::Get { flags, .. } = request else {
        panic!("not a get");
    };
    assert_eq!(flags.vivify_exptime, Some(30));
    assert_eq!(flags.recache_below_s, Some(-5));
    assert_eq!(flags.exptime, Some(7));
    assert!(flags.no_bump && flags.return_hit_before && flags.return_last_access);
    assert!(flags.return_size && flags.return_client_flags);
}

#[test]
fn only_the_first_character_of_a_bare_flag_counts() {
    let (request, _) = complete(b"mg foo vabc kk\r\n");
    let MetaRequest::Get { flags, .. } = request else {
        panic!("not a get");
    };
    assert!(flags.return_value && flags.return_key);
}

#[test]
fn mg_without_flags_is_a_plain_lookup() {
    let (request, consumed) = complete(b"mg foo\r\n");
    assert_eq!(consumed, 8);
    assert!(matches!(request, MetaRequest::Get { ref flags, .. } if flags.in_order().is_empty()));
}

#[test]
fn ms_reads_a_payload_that_contains_crlf() {
    let input = b"ms foo 5 T30 F7 C99 E5 I c k Oz\r\na\r\nbc\r\nmn\r\n";
    let (request, consumed) = complete(input);
    assert_eq!(consumed, input.len() - 4);
    let MetaRequest::Set {
        key,
        flags,
        mode,
        value,
    } = request
    else {
        panic!("not a set");
    };
    assert_eq!(key.as_bytes(), b"foo");
    assert_eq!(mode, SetMode::Set);
    assert_eq!(value, SetValue::Data(b"a\r\nbc"));
    assert_eq!(flags.exptime, Some(30));
    assert_eq!(flags.client_flags, Some(7));
    assert_eq!(flags.compare_cas, Some(99));
    assert_eq!(flags.new_cas, Some(5));
    assert!(flags.invalidate);
    assert_eq!(flags.in_order(), b"TFCEIckO");
}

#[test]
fn ms_modes_map_to_store_modes() {
    for (token, mode) in [
        (&b"MS"[..], SetMode::Set),
        (b"ME", SetMode::Add),
        (b"MA", SetMode::Append),
        (b"MP", SetMode::Prepend),
        (b"MR", SetMode::Replace),
    ] {
        let mut input = b"ms k 1 ".to_vec();
        input.extend_from_slice(token);
        input.extend_from_slice(b"\r\nx\r\n");
        let (request, _) = complete(&input);
        assert!(matches!(request, MetaRequest::Set { mode: m, .. } if m == mode));
    }
}

#[test]
fn ms_zero_length_payload() {
    let (request, consumed) = complete(b"ms foo 0\r\n\r\n");
    assert_eq!(consumed, 12);
    assert!(matches!(
        request,
        MetaRequest::Set {
            value: SetValue::Data(b""),
            ..
        }
    ));
}

#[test]
fn md_ma_mn_me_parse() {
    let (request, _) = complete(b"md foo I T30 C5 x q\r\n");
    let MetaRequest::Delete { flags, .. } = request else {
        panic!("not a delete");
    };
    assert!(flags.invalidate && flags.remove_value && flags.quiet);
    assert_eq!((flags.exptime, flags.compare_cas), (Some(30), Some(5)));

    let (request, _) = complete(b"ma foo N0 J10 D5 MD v\r\n");
    let MetaRequest::Arith { flags, mode, .. } = request else {
        panic!("not an arith");
    };
    assert_eq!(mode, ArithMode::Decrement);
    assert_eq!(
        (flags.vivify_exptime, flags.initial, flags.delta),
        (Some(0), Some(10), Some(5))
    );
    for (token, mode) in [
        (&b"MI"[..], ArithMode::Increment),
        (b"M+", ArithMode::Increment),
        (b"M-", ArithMode::Decrement),
    ] {
        let mut input = b"ma k ".to_vec();
        input.extend_from_slice(token);
        input.extend_from_slice(b"\r\n");
        let (request, _) = complete(&input);
        assert!(matches!(request, MetaRequest::Arith { mode: m, .. } if m == mode));
    }

    assert_eq!(complete(b"mn\r\n"), (MetaRequest::Noop, 4));
    assert_eq!(complete(b"mn foo bar\n"), (MetaRequest::Noop, 11));

    let (request, consumed) = complete(b"me foo\r\n");
    assert_eq!(consumed, 8);
    assert!(matches!(request, MetaRequest::Debug { ref key } if key.as_bytes() == b"foo"));
}

#[test]
fn base64_keys_are_decoded_like_memcached() {
    let (request, _) = complete(b"mg Zm9v b k v\r\n");
    let MetaRequest::Get { key, flags } = request else {
        panic!("not a get");
    };
    assert_eq!(key.as_bytes(), b"foo");
    assert!(key.binary && flags.base64_key);
    // Stray low bits in the last symbol are tolerated, as memcached's decoder does.
    let (request, _) = complete(b"mg Zm9vYmF= b\r\n");
    assert!(matches!(request, MetaRequest::Get { ref key, .. } if key.as_bytes() == b"fooba"));
    let (request, _) = complete(b"mg Zg== b\r\n");
    assert!(matches!(request, MetaRequest::Get { ref key, .. } if key.as_bytes() == b"f"));
    // Binary keys may hold any byte.
    let (request, _) = complete(b"mg AAEgCg== b\r\n");
    assert!(
        matches!(request, MetaRequest::Get { ref key, .. } if key.as_bytes() == b"\x00\x01 \n")
    );
    let (request, _) = complete(b"me Zm9v b\r\n");
    assert!(
        matches!(request, MetaRequest::Debug { ref key } if key.as_bytes() == b"foo" && key.binary)
    );
}

#[test]
fn bad_base64_keys_are_refused() {
    for input in [
        &b"mg Zm9v= b k\r\n"[..],
        b"mg Zm9v== b\r\n",
        b"mg !!!! b\r\n",
        b"mg Zm9 b\r\n",
        b"mg a b\r\n",
    ] {
        assert_eq!(reply_of(input), b"CLIENT_ERROR error decoding key\r\n");
    }
    assert_eq!(
        reply_of(b"md Zm9 b\r\n"),
        b"CLIENT_ERROR invalid or duplicate flag\r\n"
    );
    assert_eq!(
        reply_of(b"me Zm9 b\r\n"),
        b"CLIENT_ERROR bad command line format\r\n"
    );
    assert_eq!(
        refused(b"ms Zm9 3 b\r\nbar\r\n"),
        (&b"CLIENT_ERROR error decoding key\r\n"[..], 12, 5)
    );
}

#[test]
fn key_echo_encodes_binary_keys_again() {
    let mut out = Vec::new();
    push_key_flag(&mut out, b"fooba", true);
    push_key_flag(&mut out, b"foo", false);
    assert_eq!(out, b" kZm9vYmE= b kfoo");
    let mut out = Vec::new();
    push_numeric_flag(&mut out, b'c', u64::MAX);
    push_ttl_flag(&mut out, None);
    push_ttl_flag(&mut out, Some(0));
    push_i64(&mut out, -100);
    assert_eq!(out, b" c18446744073709551615 t-1 t0-100");
}

/// The encoders on their own, as the dispatcher calls them: zero has no sign, the
/// opaque token is echoed verbatim, and a binary key is encoded whole even when it is
/// the first thing in the buffer (`me` replies start with the key).
#[test]
fn reply_encoders_write_exact_bytes() {
    let mut out = Vec::new();
    push_i64(&mut out, 0);
    out.push(b'|');
    push_i64(&mut out, i64::MIN);
    assert_eq!(out, b"0|-9223372036854775808");

    let mut out = b"HD".to_vec();
    push_opaque_flag(&mut out, b"Oxyz");
    assert_eq!(out, b"HD Oxyz");

    for (prefix, expected) in [
        (&b""[..], &b"Zm9vYmE="[..]),
        (b"M", b"MZm9vYmE="),
        (b"ME ", b"ME Zm9vYmE="),
    ] {
        let mut out = prefix.to_vec();
        push_key(&mut out, b"fooba", true);
        assert_eq!(out, expected);
    }
    let mut out = Vec::new();
    push_key(&mut out, b"foo", false);
    assert_eq!(out, b"foo");
}

#[test]
fn flag_errors_match_memcached() {
    assert_eq!(
        reply_of(b"mg foo v v\r\n"),
        b"CLIENT_ERROR duplicate flag\r\n"
    );
    assert_eq!(reply_of(b"mg foo Z\r\n"), b"CLIENT_ERROR invalid flag\r\n");
    assert_eq!(
        reply_of(b"mg foo \xff\r\n"),
        b"CLIENT_ERROR duplicate flag\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo Tabc\r\n"),
        b"CLIENT_ERROR bad token in command line format\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo N\r\n"),
        b"CLIENT_ERROR bad token in command line format\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo R99999999999\r\n"),
        b"CLIENT_ERROR bad token in command line format\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo Cx\r\n"),
        b"CLIENT_ERROR bad token in command line format\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo Ex\r\n"),
        b"CLIENT_ERROR bad token in command line format\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo D\r\n"),
        b"CLIENT_ERROR invalid numeric delta value\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo J-1\r\n"),
        b"CLIENT_ERROR invalid numeric initial value\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo MSS\r\n"),
        b"CLIENT_ERROR incorrect length for M token\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo Fx\r\n"),
        b"CLIENT_ERROR bad command line format\r\n"
    );
    // The last bad argument names the error; an unknown flag stops at once.
    assert_eq!(
        reply_of(b"mg foo Tx MSS\r\n"),
        b"CLIENT_ERROR incorrect length for M token\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo Tx Fx\r\n"),
        b"CLIENT_ERROR bad token in command line format\r\n"
    );
    assert_eq!(
        reply_of(b"mg foo Tx Z\r\n"),
        b"CLIENT_ERROR invalid flag\r\n"
    );
    // md and ma have one message for every flag problem.
    assert_eq!(
        reply_of(b"md foo Z\r\n"),
        b"CLIENT_ERROR invalid or duplicate flag\r\n"
    );
    assert_eq!(
        reply_of(b"ma foo q q\r\n"),
        b"CLIENT_ERROR invalid or duplicate flag\r\n"
    );
    assert_eq!(
        reply_of(b"ma foo Dx\r\n"),
        b"CLIENT_ERROR invalid or duplicate flag\r\n"
    );
    assert_eq!(
        reply_of(b"ma foo MII\r\n"),
        b"CLIENT_ERROR invalid or duplicate flag\r\n"
    );
    assert_eq!(
        reply_of(b"ma foo Mx\r\n"),
        b"CLIENT_ERROR invalid mode for ma M token\r\n"
    );
}

#[test]
fn command_line_shape_errors_match_memcached() {
    assert_eq!(refused(b"mg\r\n"), (&b"ERROR\r\n"[..], 4, 0));
    assert_eq!(reply_of(b"mg \r\n"), b"ERROR\r\n");
    assert_eq!(reply_of(b"md\r\n"), b"ERROR\r\n");
    assert_eq!(reply_of(b"ma\r\n"), b"ERROR\r\n");
    assert_eq!(reply_of(b"ms\r\n"), b"ERROR\r\n");
    assert_eq!(
        reply_of(b"me\r\n"),
        b"CLIENT_ERROR bad command line format\r\n"
    );
    assert_eq!(reply_of(b"mgx foo\r\n"), b"ERROR\r\n");
    let long_key = [b'k'; 251];
    for command in [&b"mg "[..], b"md ", b"ma ", b"me "] {
        let mut input = command.to_vec();
        input.extend_from_slice(&long_key);
        input.extend_from_slice(b" v\r\n");
        assert_eq!(
            reply_of(&input),
            b"CLIENT_ERROR bad command line format\r\n"
        );
    }
    let mut input = b"mg ".to_vec();
    input.extend_from_slice(&[b'k'; 250]);
    input.extend_from_slice(b"\r\n");
    assert!(matches!(parse(&input, &LIMITS), Parsed::Complete { .. }));
    // Keys with a NUL byte are refused, as for every text command.
    assert_eq!(
        reply_of(b"mg a\x00b v\r\n"),
        b"CLIENT_ERROR bad command line format\r\n"
    );
}

#[test]
fn at_most_seventeen_flags() {
    let ok = b"mg foo v k c f s t h l u O1 q P1 L1 T100 R5 N1 F1\r\n";
    let (request, _) = complete(ok);
    let MetaRequest::Get { flags, .. } = request else {
        panic!("not a get");
    };
    // All seventeen are kept, in order, for the reply to echo.
    assert_eq!(flags.in_order(), b"vkcfsthluOqPLTRNF");
    let too_many = b"mg foo v k c f s t h l u O1 q P1 L1 T100 R5 N1 F1 C1\r\n";
    assert_eq!(
        reply_of(too_many),
        b"CLIENT_ERROR options flags are too long\r\n"
    );
    let too_many = b"md foo v k c f s t h l u O1 q P1 L1 T100 R5 N1 F1 C1\r\n";
    assert_eq!(
        reply_of(too_many),
        b"CLIENT_ERROR options flags too long\r\n"
    );
    let too_many = b"ma foo a b c d e f g h i j k l m n o p q r s t u v w x y z\r\n";
    assert_eq!(
        reply_of(too_many),
        b"CLIENT_ERROR options flags too long\r\n"
    );
    // ms has its length token too, so 16 flags; the refusal does not swallow.
    let ok = b"ms foo 1 k c f s t h l u O1 q P1 L1 T100 R5 N1 F1\r\nx\r\n";
    assert!(matches!(parse(ok, &LIMITS), Parsed::Complete { .. }));
    let too_many = b"ms foo 1 k c f s t h l u O1 q P1 L1 T100 R5 N1 F1 C1\r\nx\r\n";
    assert_eq!(
        refused(too_many),
        (&b"CLIENT_ERROR options flags too long\r\n"[..], 54, 0)
    );
}

/// `FLAGS_MAX` is what the parser enforces: that many distinct flags are taken, one
/// more is refused.
#[test]
fn flags_max_is_the_enforced_flag_limit() {
    let distinct = [
        "v", "k", "c", "f", "s", "t", "h", "l", "u", "O1", "q", "P1", "L1", "T100", "R5", "N1",
        "F1", "C1", "E1", "I", "x", "J1", "D1",
    ];
    assert!(distinct.len() > FLAGS_MAX + 1);
    let line = |count: usize| format!("mg foo {}\r\n", distinct[..count].join(" "));
    let at_limit = line(FLAGS_MAX);
    let (request, _) = complete(at_limit.as_bytes());
    let MetaRequest::Get { flags, .. } = request else {
        panic!("not a get");
    };
    assert_eq!(flags.in_order().len(), FLAGS_MAX);
    assert_eq!(
        reply_of(line(FLAGS_MAX + 1).as_bytes()),
        b"CLIENT_ERROR options flags are too long\r\n"
    );
}

#[test]
fn opaque_tokens_are_at_most_32_bytes() {
    let ok = b"mg foo O1234567890123456789012345678901\r\n";
    assert!(matches!(parse(ok, &LIMITS), Parsed::Complete { .. }));
    let long = b"mg foo O12345678901234567890123456789012\r\n";
    assert_eq!(reply_of(long), b"CLIENT_ERROR opaque token too long\r\n");
    let long = b"md foo O12345678901234567890123456789012\r\n";
    assert_eq!(reply_of(long), b"CLIENT_ERROR opaque token too long\r\n");
    let long = b"ms foo 3 O12345678901234567890123456789012\r\nbar\r\n";
    assert_eq!(
        refused(long),
        (&b"CLIENT_ERROR opaque token too long\r\n"[..], 44, 5)
    );
}

#[test]
fn ms_errors_swallow_the_data_block_once_its_length_is_known() {
    assert_eq!(
        refused(b"ms foo 3 Z\r\nbar\r\n"),
        (&b"CLIENT_ERROR invalid flag\r\n"[..], 12, 5)
    );
    assert_eq!(
        refused(b"ms foo 3 MX\r\nbar\r\n"),
        (&b"CLIENT_ERROR invalid mode for ms M token\r\n"[..], 13, 5)
    );
    assert_eq!(
        refused(b"ms foo 3 MSS\r\nbar\r\n"),
        (&b"CLIENT_ERROR incorrect length for M token\r\n"[..], 14, 5)
    );
    assert_eq!(
        refused(b"ms foo 3 Fx\r\nbar\r\n"),
        (&b"CLIENT_ERROR bad command line format\r\n"[..], 13, 5)
    );
    assert_eq!(
        refused(b"ms foo 3 Cx\r\nbar\r\n"),
        (
            &b"CLIENT_ERROR bad token in command line format\r\n"[..],
            13,
            5
        )
    );
    // Without a usable length nothing is swallowed: memcached then reads the payload
    // as a command.
    assert_eq!(refused(b"ms foo\r\n"), (BAD_FORMAT, 8, 0));
    assert_eq!(refused(b"ms foo bar\r\n"), (BAD_FORMAT, 12, 0));
    assert_eq!(refused(b"ms foo S3\r\nbar\r\n"), (BAD_FORMAT, 11, 0));
    assert_eq!(refused(b"ms foo -1\r\nbar\r\n"), (BAD_FORMAT, 11, 0));
    assert_eq!(refused(b"ms foo 4294967299\r\n"), (BAD_FORMAT, 19, 0));
    let mut long_key = b"ms ".to_vec();
    long_key.extend_from_slice(&[b'k'; 251]);
    long_key.extend_from_slice(b" 3\r\nbar\r\n");
    assert_eq!(refused(&long_key), (BAD_FORMAT, 258, 0));
}

/// The 250-byte key limit is inclusive for `ms` and `me`, as for `mg`; `me` checks
/// the token's length before decoding it, as memcached does.
#[test]
fn ms_and_me_accept_250_byte_keys_and_refuse_longer_tokens() {
    let key = [b'k'; KEY_LENGTH_MAX_BYTES];
    let mut input = b"ms ".to_vec();
    input.extend_from_slice(&key);
    input.extend_from_slice(b" 1\r\nx\r\n");
    let (request, consumed) = complete(&input);
    assert_eq!(consumed, input.len());
    assert!(matches!(request, MetaRequest::Set { ref key, .. } if key.as_bytes() == [b'k'; 250]));

    let mut input = b"me ".to_vec();
    input.extend_from_slice(&key);
    input.extend_from_slice(b"\r\n");
    let (request, _) = complete(&input);
    assert!(matches!(request, MetaRequest::Debug { ref key } if key.as_bytes() == [b'k'; 250]));

    // 252 base64 characters decode to 189 bytes, but the token itself is too long.
    let mut input = b"me ".to_vec();
    input.extend_from_slice(&[b'A'; 252]);
    input.extend_from_slice(b" b\r\n");
    assert_eq!(refused(&input), (BAD_FORMAT, input.len(), 0));
}

/// memcached takes `ms` lengths up to INT_MAX - 2 (the length plus its `\r\n` must fit
/// an int); one more is a bad command line and nothing is swallowed.
#[test]
fn ms_length_is_at_most_int_max_minus_two() {
    let (request, consumed) = complete(b"ms foo 2147483645\r\n");
    assert_eq!(consumed, 19);
    assert!(matches!(
        request,
        MetaRequest::Set {
            value: SetValue::TooLarge {
                swallow_bytes: 2_147_483_647
            },
            ..
        }
    ));
    assert_eq!(refused(b"ms foo 2147483646\r\n"), (BAD_FORMAT, 19, 0));
}

/// A payload exactly as long as the limit is buffered, not swallowed.
#[test]
fn ms_payload_at_the_limit_is_buffered() {
    let mut input = b"ms foo 1024\r\n".to_vec();
    input.extend_from_slice(&[b'v'; 1024]);
    input.extend_from_slice(b"\r\n");
    let (request, consumed) = complete(&input);
    assert_eq!(consumed, input.len());
    assert!(
        matches!(request, MetaRequest::Set { value: SetValue::Data(data), .. } if data == [b'v'; 1024])
    );
}

#[test]
fn ms_accepts_a_32_byte_opaque_and_refuses_bad_plain_keys_swallowing_the_data() {
    let input = b"ms foo 3 O1234567890123456789012345678901\r\nbar\r\n";
    let (request, _) = complete(input);
    let MetaRequest::Set { flags, .. } = request else {
        panic!("not a set");
    };
    assert_eq!(
        flags.opaque,
        Some(b"O1234567890123456789012345678901".as_slice())
    );
    // Keys with a NUL byte are refused, as for `mg`; the data block is swallowed.
    assert_eq!(refused(b"ms a\x00b 3\r\nbar\r\n"), (BAD_FORMAT, 10, 5));
}

#[test]
fn ms_payload_must_end_with_crlf() {
    // memcached reads length + 2 bytes, then checks the last two.
    assert_eq!(refused(b"ms foo 2\r\nbar\r\n"), (BAD_DATA_CHUNK, 14, 0));
    assert_eq!(refused(b"ms foo 3\r\nbarxx"), (BAD_DATA_CHUNK, 15, 0));
}

#[test]
fn oversized_ms_completes_at_its_line() {
    let input = b"ms foo 2000 T0 q\r\nxxxx";
    let (request, consumed) = complete(input);
    assert_eq!(consumed, 18);
    assert!(matches!(
        request,
        MetaRequest::Set {
            value: SetValue::TooLarge {
                swallow_bytes: 2002
            },
            ..
        }
    ));
}

#[test]
fn every_split_point_of_a_request_is_incomplete() {
    let requests: [&[u8]; 8] = [
        b"mg foo v t c k Oxyz\r\n",
        b"ms foo 7 T0 F3 c\r\nab\r\ncde\r\n",
        b"ms Zm9v 0 b\r\n\r\n",
        b"md foo I T30\r\n",
        b"ma foo N0 J5 v\n",
        b"mn\r\n",
        b"me foo\r\n",
        b"ms foo 3 Z\r\nbar\r\n",
    ];
    for request in requests {
        for split in 0..request.len() {
            let prefix = &request[..split];
            let result = parse(prefix, &LIMITS);
            // A refused ms is answered as soon as its line is in: its payload is
            // swallowed later, so it need not be buffered.
            let answered_early = matches!(
                result,
                Parsed::Invalid {
                    swallow_bytes: 5,
                    ..
                }
            );
            assert!(
                result == Parsed::Incomplete || answered_early,
                "{prefix:?} gave {result:?}"
            );
        }
        assert!(!matches!(parse(request, &LIMITS), Parsed::Incomplete));
    }
}

#[test]
fn no_newline_within_2048_bytes_closes() {
    let mut input = b"mg ".to_vec();
    input.resize(2048, b'k');
    assert_eq!(parse(&input, &LIMITS), Parsed::Incomplete);
    input.push(b'k');
    assert!(matches!(
        parse(&input, &LIMITS),
        Parsed::Invalid { close: true, .. }
    ));
}

/// A line longer than 2048 bytes closes the connection whether its newline has
/// arrived or not, so the answer never depends on how the line was read (the
/// `connection` fuzz target found a 14 KB `me` line answered when it came whole and
/// closed when it came in pieces); a line of 2048 bytes and its newline is a line.
#[test]
fn a_line_longer_than_2048_bytes_closes_however_it_arrives() {
    let mut long = b"me ".to_vec();
    long.resize(3000, b'a');
    long.extend_from_slice(b"\r\nmn\r\n");
    let whole = parse(&long, &LIMITS);
    assert!(
        matches!(whole, Parsed::Invalid { close: true, .. }),
        "{whole:?}"
    );
    for cut in [COMMAND_LINE_MAX_BYTES + 1, 2500, 3001, long.len() - 1] {
        assert_eq!(parse(&long[..cut], &LIMITS), whole, "the first {cut} bytes");
    }
    let mut longest = b"mn".to_vec();
    longest.resize(COMMAND_LINE_MAX_BYTES, b' ');
    longest.push(b'\n');
    assert_eq!(
        parse(&longest, &LIMITS),
        Parsed::Complete {
            request: MetaRequest::Noop,
            consumed: COMMAND_LINE_MAX_BYTES + 1,
        }
    );
}

fn check_consumed(input: &[u8]) {
    match parse(input, &LIMITS) {
        Parsed::Complete { consumed, .. } => {
            assert!(consumed > 0 && consumed <= input.len());
        }
        Parsed::Invalid {
            consumed, close, ..
        } => {
            assert!(consumed <= input.len());
            assert!(close || consumed > 0);
        }
        Parsed::Incomplete => {}
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..3000)) {
        check_consumed(&input);
    }

    #[test]
    fn arbitrary_flags_never_panic(
        command in prop::sample::select(vec!["mg", "ms", "md", "ma", "mn", "me"]),
        key in "[a-zA-Z0-9+/=]{0,12}",
        length in prop::option::of(0u32..40),
        flags in proptest::collection::vec("[a-zA-Z+\\-=]{1,2}[0-9a-z\\-]{0,3}", 0..22),
        tail in proptest::collection::vec(any::<u8>(), 0..50),
    ) {
        let mut input = format!("{command} {key}").into_bytes();
        if let Some(length) = length {
            input.extend_from_slice(format!(" {length}").as_bytes());
        }
        for flag in &flags {
            input.push(b' ');
            input.extend_from_slice(flag.as_bytes());
        }
        input.extend_from_slice(b"\r\n");
        input.extend_from_slice(&tail);
        check_consumed(&input);
    }
}
