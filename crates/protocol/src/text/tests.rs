use super::*;
use proptest::prelude::*;

/// Values up to 1 KiB fit, whatever the key.
fn fits_1k(_key_len: usize, value_len: usize) -> bool {
    value_len <= 1024
}

fn p(buf: &[u8]) -> Parsed<TextRequest<'_>> {
    parse(
        buf,
        &TextLimits {
            item_fits: &fits_1k,
        },
    )
}

fn ok(buf: &[u8]) -> (TextRequest<'_>, usize) {
    match p(buf) {
        Parsed::Complete { request, consumed } => (request, consumed),
        other => panic!("{:?} -> {other:?}", String::from_utf8_lossy(buf)),
    }
}

/// A hit's header line is memcached's, for numbers of every length (flags up to
/// 2^32 - 1, CAS up to 2^64 - 1), and it leaves room for the value after it.
#[test]
fn value_lines_are_formatted_as_memcached_does() {
    let numbers = [
        0u64,
        1,
        9,
        10,
        99,
        100,
        12_345,
        4_294_967_295,
        u64::MAX / 3,
        u64::MAX,
    ];
    for &flags in numbers.iter().filter(|&&n| n <= u64::from(u32::MAX)) {
        for &len in &numbers {
            for cas in [None, Some(0), Some(7), Some(u64::MAX)] {
                let mut out = b"before".to_vec();
                push_value_line(&mut out, b"some:key", flags as u32, len as usize, cas, 100);
                let mut expected = format!("beforeVALUE some:key {flags} {len}");
                if let Some(cas) = cas {
                    expected += &format!(" {cas}");
                }
                expected += "\r\n";
                assert_eq!(String::from_utf8_lossy(&out), expected);
                assert!(out.capacity() - out.len() >= 100, "room for the value");
            }
        }
    }
}

/// Every number below 200 000 and around every power of ten formats as `to_string`
/// does (each two-digit step and each length of a number).
#[test]
fn value_line_numbers_are_their_decimal_digits() {
    let mut numbers: Vec<u64> = (0..200_000).collect();
    for power in 0..20 {
        let p = 10u64.pow(power);
        numbers.extend([p - 1, p, p + 1, p.saturating_mul(9).saturating_add(p - 1)]);
    }
    numbers.push(u64::MAX);
    let mut out = Vec::new();
    for n in numbers {
        out.clear();
        push_value_line(&mut out, b"k", 0, n as usize, Some(n), 0);
        assert_eq!(out, format!("VALUE k 0 {n} {n}\r\n").into_bytes(), "{n}");
    }
}

/// The tokenizer keeps eight tokens and counts up to 23, as memcached's does: every
/// token it hands out (kept or split again), the count and the last token are those
/// of a plain split on spaces, for lines of 0 to 30 tokens with runs of spaces.
#[test]
fn tokens_are_those_of_a_split_on_spaces() {
    for count in 0..30usize {
        for gap in [" ", "   "] {
            let words: Vec<String> = (0..count)
                .map(|i| format!("t{i}{}", "x".repeat(i % 11)))
                .collect();
            let line = format!("{gap}{}{gap}", words.join(gap));
            let tokens = Tokens::new(line.as_bytes());
            let kept = count.min(TOKENS_MAX - 1);
            assert_eq!(tokens.ntokens(), kept + 1, "{line:?}");
            for (i, word) in words.iter().enumerate().take(kept) {
                assert_eq!(tokens.get(i), Some(word.as_bytes()), "{line:?} token {i}");
            }
            assert_eq!(tokens.get(kept), None, "{line:?}");
            assert_eq!(
                tokens.last(),
                words.get(kept.wrapping_sub(1)).map(|w| w.as_bytes()),
                "{line:?}"
            );
        }
    }
}

/// The reply and the number of bytes consumed of a refused request.
fn err(buf: &[u8]) -> (&'static [u8], usize) {
    match p(buf) {
        Parsed::Invalid {
            reply,
            consumed,
            swallow_bytes: 0,
            close: false,
        } => (reply, consumed),
        other => panic!("{:?} -> {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn closes(buf: &[u8]) -> bool {
    matches!(
        p(buf),
        Parsed::Invalid {
            close: true,
            consumed: 0,
            ..
        }
    )
}

fn keys<'a>(request: &TextRequest<'a>) -> Vec<&'a [u8]> {
    match request {
        TextRequest::Get { keys, .. } => keys.iter().collect(),
        other => panic!("not a get: {other:?}"),
    }
}

fn store(command: StoreCommand, key: &'static [u8], value: &'static [u8]) -> TextRequest<'static> {
    TextRequest::Store {
        command,
        key,
        client_flags: 0,
        exptime: 0,
        cas_unique: 0,
        value,
        noreply: false,
    }
}

#[test]
fn set_reads_key_flags_exptime_and_payload() {
    let buf = b"set foo 42 -1 3\r\nbar\r\nget foo\r\n";
    assert_eq!(
        ok(buf),
        (
            TextRequest::Store {
                command: StoreCommand::Set,
                key: b"foo",
                client_flags: 42,
                exptime: -1,
                cas_unique: 0,
                value: b"bar",
                noreply: false,
            },
            22
        )
    );
}

#[test]
fn every_store_command_parses_with_noreply() {
    for (name, command) in [
        ("set", StoreCommand::Set),
        ("add", StoreCommand::Add),
        ("replace", StoreCommand::Replace),
        ("append", StoreCommand::Append),
        ("prepend", StoreCommand::Prepend),
    ] {
        let line = format!("{name} k 4294967295 2592001 1 noreply\r\nv\r\n");
        let (request, consumed) = ok(line.as_bytes());
        assert_eq!(consumed, line.len());
        assert_eq!(
            request,
            TextRequest::Store {
                command,
                key: b"k",
                client_flags: u32::MAX,
                exptime: 2_592_001,
                cas_unique: 0,
                value: b"v",
                noreply: true,
            }
        );
    }
    let (request, _) = ok(b"cas k 1 2 1 18446744073709551615\r\nv\r\n");
    assert_eq!(
        request,
        TextRequest::Store {
            command: StoreCommand::Cas,
            key: b"k",
            client_flags: 1,
            exptime: 2,
            cas_unique: u64::MAX,
            value: b"v",
            noreply: false,
        }
    );
    // A last token other than `noreply` is ignored, as memcached ignores it.
    assert_eq!(
        ok(b"set k 0 0 1 junk\r\nv\r\n").0,
        store(StoreCommand::Set, b"k", b"v")
    );
    // memcached's strtol accepts a leading '+'.
    assert_eq!(
        ok(b"set k +0 +0 +1\r\nv\r\n").0,
        store(StoreCommand::Set, b"k", b"v")
    );
}

#[test]
fn payload_is_read_by_length_and_may_hold_crlf() {
    let (request, consumed) = ok(b"set k 0 0 8\r\na\r\nb\r\n\r\n\r\nrest");
    assert_eq!(request, store(StoreCommand::Set, b"k", b"a\r\nb\r\n\r\n"));
    assert_eq!(consumed, 23);
    let (request, _) = ok(b"set k 0 0 0\r\n\r\n");
    assert_eq!(request, store(StoreCommand::Set, b"k", b""));
}

#[test]
fn bare_newline_ends_lines_but_not_payloads() {
    let (request, consumed) = ok(b"set k 0 0 1\nv\r\n");
    assert_eq!(
        (request, consumed),
        (store(StoreCommand::Set, b"k", b"v"), 15)
    );
    let (request, consumed) = ok(b"get k\n");
    assert_eq!((keys(&request), consumed), (vec![&b"k"[..]], 6));
    // The payload must end with \r\n: memcached reads length + 2 bytes, then checks.
    assert_eq!(err(b"set k 0 0 1\nv\nget k\n"), (BAD_DATA_CHUNK, 15));
}

#[test]
fn payload_without_crlf_is_a_bad_data_chunk() {
    assert_eq!(err(b"set k 0 0 2\r\nabc\r\n"), (BAD_DATA_CHUNK, 17));
    assert_eq!(err(b"set k 0 0 1 noreply\r\nvXY"), (&b""[..], 24));
}

#[test]
fn malformed_store_lines_get_memcached_errors() {
    assert_eq!(err(b"set k 0 0\r\n"), (ERROR, 11));
    assert_eq!(err(b"set k 0 0 1 2 3\r\n"), (ERROR, 17));
    assert_eq!(err(b"cas k 0 0 1\r\n"), (ERROR, 13));
    // Only the line is consumed: the payload then reads as a command.
    assert_eq!(err(b"set k 0 0 -1\r\nabc\r\n"), (BAD_FORMAT, 14));
    assert_eq!(err(b"set k -1 0 1\r\nv\r\n"), (BAD_FORMAT, 14));
    assert_eq!(err(b"set k 4294967296 0 1\r\nv\r\n"), (BAD_FORMAT, 22));
    assert_eq!(err(b"set k x 0 1\r\n"), (BAD_FORMAT, 13));
    assert_eq!(err(b"set k 0 x 1\r\n"), (BAD_FORMAT, 13));
    assert_eq!(err(b"set k 0 0 1x\r\n"), (BAD_FORMAT, 14));
    assert_eq!(err(b"set k 0 0 2147483646\r\n"), (BAD_FORMAT, 22));
    assert_eq!(err(b"cas k 0 0 1 x\r\nv\r\n"), (BAD_FORMAT, 15));
    assert_eq!(err(b"cas k 0 0 1 -1\r\nv\r\n"), (BAD_FORMAT, 16));
    let long_key = format!(
        "set {} 0 0 1\r\nv\r\n",
        "k".repeat(KEY_LENGTH_MAX_BYTES + 1)
    );
    assert_eq!(err(long_key.as_bytes()), (BAD_FORMAT, long_key.len() - 3));
    assert_eq!(err(b"set a\x00b 0 0 1\r\nv\r\n"), (BAD_FORMAT, 15));
    assert_eq!(err(b"set a\rb 0 0 1\r\nv\r\n"), (BAD_FORMAT, 15));
    let max_key = format!("set {} 0 0 1\r\nv\r\n", "k".repeat(KEY_LENGTH_MAX_BYTES));
    assert!(matches!(
        ok(max_key.as_bytes()).0,
        TextRequest::Store { .. }
    ));
    // A line with more tokens than the tokenizer keeps is a wrong token count.
    let many = format!("set k 0 0 1{}\r\nv\r\n", " x".repeat(30));
    assert_eq!(err(many.as_bytes()), (ERROR, many.len() - 3));
}

/// Checked against memcached 1.6.18: each of these lines, then `mn`, is answered
/// with `MN` alone; a refused store line does not swallow its payload.
#[test]
fn noreply_silences_errors_found_after_the_command_is_recognised() {
    let long_key = "k".repeat(KEY_LENGTH_MAX_BYTES + 1);
    let silenced = [
        "incr w x noreply\r\n".to_string(),
        "decr k abc noreply\r\n".to_string(),
        format!("incr {long_key} 1 noreply\r\n"),
        "touch k abc noreply\r\n".to_string(),
        "delete k 5 noreply\r\n".to_string(),
        format!("delete {long_key} noreply\r\n"),
        "flush_all abc noreply\r\n".to_string(),
        "verbosity x noreply\r\n".to_string(),
        "set k abc 0 1 noreply\r\n".to_string(),
        "set k 0 abc 1 noreply\r\n".to_string(),
        "set k 0 0 -1 noreply\r\n".to_string(),
        "cas k 0 0 1 abc noreply\r\n".to_string(),
        "slabs automove 9 noreply\r\n".to_string(),
        "slabs automove x noreply\r\n".to_string(),
        "cache_memlimit x noreply\r\n".to_string(),
    ];
    for line in silenced {
        assert_eq!(err(line.as_bytes()), (&b""[..], line.len()), "{line}");
    }
    // The payload of a refused store is left to be read as a command line.
    assert_eq!(err(b"set k abc 0 1 noreply\r\nx\r\n"), (&b""[..], 23));
    assert_eq!(err(b"x\r\n"), (ERROR, 3));
    // Refused before memcached reads `noreply`, or no `noreply` form: still answered.
    assert_eq!(err(b"incr noreply\r\n"), (ERROR, 14));
    assert_eq!(err(b"foo noreply\r\n"), (ERROR, 13));
    assert_eq!(err(b"flush_all 1 2 noreply\r\n"), (ERROR, 23));
    assert_eq!(err(b"touch k 1 2 noreply\r\n"), (ERROR, 21));
    assert_eq!(err(b"gat abc k noreply\r\n"), (BAD_EXPTIME, 19));
    assert_eq!(err(b"slabs reassign 1 x\r\n"), (BAD_FORMAT, 20));
}

/// Numbers as memcached's `safe_strtoull`/`safe_strtol` read them (memcached 1.6.18
/// stores `set f -0 +0 +1` and answers `incr n -0` with the value unchanged).
#[test]
fn numeric_tokens_take_signs_and_leading_zeros() {
    assert_eq!(
        ok(b"set f -0 +0 +1\r\nx\r\n").0,
        TextRequest::Store {
            command: StoreCommand::Set,
            key: b"f",
            client_flags: 0,
            exptime: 0,
            cas_unique: 0,
            value: b"x",
            noreply: false,
        }
    );
    let arith = |delta| TextRequest::Arith {
        key: b"n",
        increment: true,
        delta,
        noreply: false,
    };
    assert_eq!(ok(b"incr n -0\r\n").0, arith(0));
    assert_eq!(ok(b"incr n +2\r\n").0, arith(2));
    assert_eq!(ok(b"incr n 00000000000000000000000000001\r\n").0, arith(1));
    assert_eq!(ok(b"incr n -18446744073709551615\r\n").0, arith(1));
    assert_eq!(ok(b"incr n 5\t\r\n").0, arith(5));
    assert_eq!(err(b"incr n -1\r\n"), (BAD_DELTA, 11));
    assert_eq!(err(b"incr n -9223372036854775808\r\n"), (BAD_DELTA, 29));
    assert_eq!(err(b"incr n 1x\r\n"), (BAD_DELTA, 11));
    assert_eq!(err(b"incr n 18446744073709551616\r\n"), (BAD_DELTA, 29));
}

#[test]
fn oversized_store_completes_at_its_line_without_the_payload() {
    let (request, consumed) = ok(b"set big 7 0 1025\r\n");
    assert_eq!(
        request,
        TextRequest::StoreTooLarge {
            command: StoreCommand::Set,
            key: b"big",
            value_len: 1025,
            noreply: false,
        }
    );
    assert_eq!(consumed, 18);
    let (request, _) = ok(b"append big 0 0 2147483645 noreply\r\n");
    assert_eq!(
        request,
        TextRequest::StoreTooLarge {
            command: StoreCommand::Append,
            key: b"big",
            value_len: 2_147_483_645,
            noreply: true,
        }
    );
    // The size is checked with the key length too.
    let fits_nothing_with_long_keys = |key_len: usize, value_len: usize| key_len + value_len <= 10;
    let limits = TextLimits {
        item_fits: &fits_nothing_with_long_keys,
    };
    assert!(matches!(
        parse(b"set kkkkkkkkkk 0 0 1\r\nv\r\n", &limits),
        Parsed::Complete {
            request: TextRequest::StoreTooLarge { value_len: 1, .. },
            consumed: 22
        }
    ));
}

#[test]
fn gets_take_many_keys() {
    let (request, consumed) = ok(b"get a  bb ccc \r\n");
    assert_eq!(keys(&request), vec![&b"a"[..], b"bb", b"ccc"]);
    assert_eq!(consumed, 16);
    assert!(matches!(
        request,
        TextRequest::Get {
            return_cas: false,
            touch_exptime: None,
            ..
        }
    ));
    let (request, _) = ok(b"gets a a\r\n");
    assert_eq!(keys(&request), vec![&b"a"[..], b"a"]);
    assert!(matches!(
        request,
        TextRequest::Get {
            return_cas: true,
            touch_exptime: None,
            ..
        }
    ));
    let (request, _) = ok(b"gat -1 a b\r\n");
    assert_eq!(keys(&request), vec![&b"a"[..], b"b"]);
    assert!(matches!(
        request,
        TextRequest::Get {
            return_cas: false,
            touch_exptime: Some(-1),
            ..
        }
    ));
    let (request, _) = ok(b"gats 100 a\r\n");
    assert!(matches!(
        request,
        TextRequest::Get {
            return_cas: true,
            touch_exptime: Some(100),
            ..
        }
    ));
    // memcached answers a gat without keys with a bare END.
    assert!(keys(&ok(b"gat 10\r\n").0).is_empty());
    // Far more keys than the tokenizer keeps.
    let line = format!(
        "get{}\r\n",
        (0..100).map(|i| format!(" k{i}")).collect::<String>()
    );
    let (request, consumed) = ok(line.as_bytes());
    assert_eq!(consumed, line.len());
    let parsed = keys(&request);
    assert_eq!(parsed.len(), 100);
    assert_eq!(parsed[99], b"k99");
    if let TextRequest::Get { keys, .. } = request {
        assert_eq!(keys.raw(), &line.as_bytes()[3..line.len() - 2]);
    }
}

#[test]
fn malformed_gets_get_memcached_errors() {
    assert_eq!(err(b"get\r\n"), (ERROR, 5));
    assert_eq!(err(b"get \r\n"), (ERROR, 6));
    assert_eq!(err(b"gets\r\n"), (ERROR, 6));
    assert_eq!(err(b"gat\r\n"), (ERROR, 5));
    assert_eq!(err(b"gat x a\r\n"), (BAD_EXPTIME, 9));
    let long_key = format!("get a {} b\r\n", "k".repeat(KEY_LENGTH_MAX_BYTES + 1));
    assert_eq!(err(long_key.as_bytes()), (BAD_FORMAT, long_key.len()));
    assert_eq!(err(b"get a\x00b\r\n"), (BAD_FORMAT, 9));
    assert_eq!(err(b"get a\rb\r\n"), (BAD_FORMAT, 9));
    assert_eq!(err(b"gex a\r\n"), (ERROR, 7));
}

#[test]
fn delete_accepts_memcached_forms_only() {
    let delete = |noreply| TextRequest::Delete { key: b"k", noreply };
    assert_eq!(ok(b"delete k\r\n"), (delete(false), 10));
    assert_eq!(ok(b"delete k 0\r\n").0, delete(false));
    assert_eq!(ok(b"delete k noreply\r\n").0, delete(true));
    assert_eq!(ok(b"delete k 0 noreply\r\n").0, delete(true));
    for line in [
        &b"delete k 1\r\n"[..],
        b"delete k 0 0\r\n",
        b"delete k noreply 0\r\n",
    ] {
        assert_eq!(err(line), (DELETE_USAGE, line.len()));
    }
    assert_eq!(err(b"delete\r\n"), (ERROR, 8));
    assert_eq!(err(b"delete a b c d\r\n"), (ERROR, 16));
    assert_eq!(err(b"delete a\x00\r\n"), (BAD_FORMAT, 11));
}

#[test]
fn incr_decr_and_touch() {
    assert_eq!(
        ok(b"incr n 18446744073709551615\r\n").0,
        TextRequest::Arith {
            key: b"n",
            increment: true,
            delta: u64::MAX,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"decr n 5 noreply\r\n").0,
        TextRequest::Arith {
            key: b"n",
            increment: false,
            delta: 5,
            noreply: true
        }
    );
    assert!(matches!(
        ok(b"incr n 1 x\r\n").0,
        TextRequest::Arith { noreply: false, .. }
    ));
    for line in [
        &b"incr n x\r\n"[..],
        b"incr n -1\r\n",
        b"decr n 18446744073709551616\r\n",
    ] {
        assert_eq!(err(line), (BAD_DELTA, line.len()));
    }
    assert_eq!(err(b"incr n\r\n"), (ERROR, 8));
    assert_eq!(err(b"incr n 1 2 3\r\n"), (ERROR, 14));
    assert_eq!(
        ok(b"touch k -5 noreply\r\n").0,
        TextRequest::Touch {
            key: b"k",
            exptime: -5,
            noreply: true
        }
    );
    assert_eq!(err(b"touch k x\r\n"), (BAD_EXPTIME, 11));
    assert_eq!(err(b"touch k\r\n"), (ERROR, 9));
    assert_eq!(err(b"touch k 1 2 3\r\n"), (ERROR, 15));
}

#[test]
fn flush_all_forms() {
    let flush = |delay_s, noreply| TextRequest::FlushAll { delay_s, noreply };
    assert_eq!(ok(b"flush_all\r\n"), (flush(0, false), 11));
    assert_eq!(ok(b"flush_all noreply\r\n").0, flush(0, true));
    assert_eq!(ok(b"flush_all 10\r\n").0, flush(10, false));
    assert_eq!(ok(b"flush_all -5 noreply\r\n").0, flush(-5, true));
    // memcached reads the delay and ignores a second argument.
    assert_eq!(ok(b"flush_all 10 20\r\n").0, flush(10, false));
    assert_eq!(err(b"flush_all x\r\n"), (BAD_EXPTIME, 13));
    assert_eq!(err(b"flush_all x noreply\r\n"), (&b""[..], 21));
    assert_eq!(err(b"flush_all 1 2 3\r\n"), (ERROR, 17));
}

/// `lru tune|mode|temp_ttl`, read as memcached 1.6.18 reads them (its replies to the
/// same lines: `ERROR` for `lru`, `lru bogus`, bad numbers; nothing with `noreply`).
#[test]
fn lru_commands() {
    let lru = |command, noreply| TextRequest::Lru { command, noreply };
    let tune = |hot, warm, hot_f, warm_f| LruCommand::Tune {
        hot_lru_pct: hot,
        warm_lru_pct: warm,
        hot_max_factor: Factor::new(hot_f),
        warm_max_factor: Factor::new(warm_f),
    };
    assert_eq!(
        ok(b"lru tune 10 40 0.2 2.0\r\n").0,
        lru(tune(10, 40, 0.2, 2.0), false)
    );
    assert_eq!(
        ok(b"lru tune 10 40 1e-3 2 noreply\r\n").0,
        lru(tune(10, 40, 0.001, 2.0), true)
    );
    // Extra tokens are ignored, as memcached ignores them.
    assert_eq!(
        ok(b"lru tune 10 40 0.2 2.0 extra\r\n").0,
        lru(tune(10, 40, 0.2, 2.0), false)
    );
    for invalid in [
        &b"lru tune 10 40 0.2\r\n"[..],
        b"lru tune -10 40 0.2 2.0\r\n",
        b"lru tune 10 40 x 2.0\r\n",
        b"lru mode\r\n",
        b"lru mode bogus\r\n",
        b"lru temp_ttl x\r\n",
        b"lru bogus\r\n",
    ] {
        assert_eq!(
            ok(invalid).0,
            lru(LruCommand::Invalid, false),
            "{}",
            String::from_utf8_lossy(invalid)
        );
    }
    assert_eq!(ok(b"lru noreply\r\n").0, lru(LruCommand::Invalid, true));
    assert_eq!(err(b"lru\r\n").0, ERROR);
    assert_eq!(
        ok(b"lru mode flat\r\n").0,
        lru(LruCommand::Mode { segmented: false }, false)
    );
    assert_eq!(
        ok(b"lru mode segmented noreply\r\n").0,
        lru(LruCommand::Mode { segmented: true }, true)
    );
    assert_eq!(
        ok(b"lru temp_ttl -1\r\n").0,
        lru(LruCommand::TempTtl { ttl_s: -1 }, false)
    );
}

#[test]
fn admin_commands() {
    let stats = |group, args| TextRequest::Stats {
        group,
        args: Args::new(args),
    };
    assert_eq!(ok(b"stats\r\n"), (stats(b"", b""), 7));
    let TextRequest::Stats { group, args } = ok(b"stats items extra\r\n").0 else {
        panic!("stats");
    };
    assert_eq!(group, b"items");
    assert_eq!(args.iter().collect::<Vec<_>>(), [&b"extra"[..]]);
    let TextRequest::Stats { group, args } = ok(b"stats  cachedump  1 10\r\n").0 else {
        panic!("stats");
    };
    assert_eq!(group, b"cachedump");
    assert_eq!(
        (args.get(0), args.get(1), args.len()),
        (Some(&b"1"[..]), Some(&b"10"[..]), 2)
    );
    let TextRequest::Watch { kinds } = ok(b"watch fetchers evictions\r\n").0 else {
        panic!("watch");
    };
    assert_eq!(
        kinds.iter().collect::<Vec<_>>(),
        [&b"fetchers"[..], b"evictions"]
    );
    let TextRequest::Watch { kinds } = ok(b"watch\r\n").0 else {
        panic!("watch");
    };
    assert!(kinds.is_empty());
    assert_eq!(
        ok(b"lru_crawler metadump all\r\n").0,
        TextRequest::LruCrawler {
            command: LruCrawlerCommand::Metadump { classes: b"all" }
        }
    );
    assert_eq!(
        ok(b"lru_crawler crawl 1,2\r\n").0,
        TextRequest::LruCrawler {
            command: LruCrawlerCommand::Crawl { classes: b"1,2" }
        }
    );
    for refused in [
        &b"lru_crawler\r\n"[..],
        b"lru_crawler metadump\r\n",
        b"lru_crawler metadump all 5\r\n",
        b"lru_crawler crawl\r\n",
        b"lru_crawler mgdump 1\r\n",
    ] {
        assert_eq!(
            err(refused).0,
            ERROR,
            "{}",
            String::from_utf8_lossy(refused)
        );
    }
    let crawler = |command| TextRequest::LruCrawler { command };
    assert_eq!(
        ok(b"lru_crawler enable\r\n").0,
        crawler(LruCrawlerCommand::Enable)
    );
    assert_eq!(
        ok(b"lru_crawler disable\r\n").0,
        crawler(LruCrawlerCommand::Disable)
    );
    assert_eq!(
        ok(b"lru_crawler sleep 100\r\n").0,
        crawler(LruCrawlerCommand::Sleep { sleep_us: 100 })
    );
    assert_eq!(
        ok(b"lru_crawler tocrawl 0\r\n").0,
        crawler(LruCrawlerCommand::Tocrawl { items: 0 })
    );
    // memcached 1.6.18's replies.
    assert_eq!(err(b"lru_crawler sleep x\r\n").0, BAD_FORMAT);
    assert_eq!(err(b"lru_crawler sleep -1\r\n").0, BAD_FORMAT);
    assert_eq!(err(b"lru_crawler tocrawl 0x10\r\n").0, BAD_FORMAT);
    assert_eq!(err(b"lru_crawler tocrawl\r\n").0, ERROR);
    assert_eq!(err(b"lru_crawler sleep 5 noreply\r\n").0, ERROR);
    assert_eq!(err(b"lru_crawler enable noreply\r\n").0, ERROR);
    assert_eq!(ok(b"version\r\n").0, TextRequest::Version);
    assert_eq!(
        ok(b"refresh_certs\r\n").0,
        TextRequest::RefreshCerts { noreply: false }
    );
    assert_eq!(
        ok(b"refresh_certs noreply\r\n").0,
        TextRequest::RefreshCerts { noreply: true }
    );
    assert_eq!(ok(b"quit\r\n").0, TextRequest::Quit);
    assert_eq!(
        ok(b"verbosity 1\r\n").0,
        TextRequest::Verbosity {
            level: 1,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"verbosity 9 noreply\r\n").0,
        TextRequest::Verbosity {
            level: 2,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"verbosity noreply\r\n").0,
        TextRequest::Verbosity {
            level: 0,
            noreply: true
        }
    );
    assert_eq!(err(b"verbosity\r\n"), (ERROR, 11));
    assert_eq!(err(b"verbosity x\r\n"), (BAD_FORMAT, 13));
    assert_eq!(err(b"verbosity 1 2 3\r\n"), (ERROR, 17));
    let shutdown = |mode| TextRequest::Shutdown { mode };
    assert_eq!(ok(b"shutdown\r\n").0, shutdown(ShutdownMode::Immediate));
    assert_eq!(
        ok(b"shutdown graceful\r\n").0,
        shutdown(ShutdownMode::Graceful)
    );
    assert_eq!(ok(b"shutdown now\r\n").0, shutdown(ShutdownMode::Invalid));
    assert_eq!(
        ok(b"slabs reassign -1 5\r\n").0,
        TextRequest::SlabsReassign {
            src_class: -1,
            dst_class: 5
        }
    );
    assert_eq!(err(b"slabs reassign x 2\r\n"), (BAD_FORMAT, 20));
    assert_eq!(err(b"slabs reassign 1 2 3\r\n"), (ERROR, 22));
    assert_eq!(err(b"slabs reassign\r\n"), (ERROR, 16));
    assert_eq!(err(b"slabs\r\n"), (ERROR, 7));
    assert_eq!(
        ok(b"slabs automove 2\r\n").0,
        TextRequest::SlabsAutomove {
            level: 2,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"slabs automove 0 noreply\r\n").0,
        TextRequest::SlabsAutomove {
            level: 0,
            noreply: true
        }
    );
    assert_eq!(err(b"slabs automove 3\r\n"), (ERROR, 18));
    assert_eq!(err(b"slabs automove x\r\n"), (BAD_FORMAT, 18));
    assert_eq!(err(b"slabs automove\r\n"), (ERROR, 16));
    assert_eq!(
        ok(b"cache_memlimit 64\r\n").0,
        TextRequest::CacheMemlimit {
            megabytes: 64,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"cache_memlimit 64 noreply\r\n").0,
        TextRequest::CacheMemlimit {
            megabytes: 64,
            noreply: true
        }
    );
    assert_eq!(err(b"cache_memlimit x\r\n"), (ERROR, 18));
    assert_eq!(err(b"cache_memlimit\r\n"), (ERROR, 16));
}

#[test]
fn unknown_empty_and_short_lines_are_errors() {
    assert_eq!(err(b"\r\n"), (ERROR, 2));
    assert_eq!(err(b"\n"), (ERROR, 1));
    assert_eq!(err(b"   \r\n"), (ERROR, 5));
    assert_eq!(err(b"x\r\n"), (ERROR, 3));
    assert_eq!(err(b"ab\r\n"), (ERROR, 4));
    assert_eq!(err(b"GET a\r\n"), (ERROR, 7));
    assert_eq!(err(b"bogus a b c\r\n"), (ERROR, 13));
    assert!(closes(b"GET / HTTP/1.1\r\n"));
    // Leading and repeated spaces are skipped.
    assert_eq!(
        ok(b"   set  k  0  0  1\r\nv\r\n").0,
        store(StoreCommand::Set, b"k", b"v")
    );
}

#[test]
fn lines_without_newline_close_after_2048_bytes_except_gets() {
    let junk = vec![b'x'; COMMAND_LINE_MAX_BYTES];
    assert_eq!(p(&junk), Parsed::Incomplete);
    let junk = vec![b'x'; COMMAND_LINE_MAX_BYTES + 1];
    assert!(closes(&junk));
    // A newline as byte 2049 still ends the line in time.
    let mut line = vec![b'x'; COMMAND_LINE_MAX_BYTES];
    line.push(b'\n');
    assert_eq!(err(&line), (ERROR, COMMAND_LINE_MAX_BYTES + 1));
    let mut set = b"set k 0 0 1".to_vec();
    set.resize(COMMAND_LINE_MAX_BYTES + 1, b' ');
    assert!(closes(&set));

    let mut get = b"get".to_vec();
    while get.len() < 3 * COMMAND_LINE_MAX_BYTES {
        get.extend_from_slice(b" key");
    }
    assert_eq!(p(&get), Parsed::Incomplete);
    let mut spaced = vec![b' '; 50];
    spaced.extend_from_slice(&get);
    assert_eq!(p(&spaced), Parsed::Incomplete);
    let mut gets = b"gets".to_vec();
    gets.extend_from_slice(&get[3..]);
    assert_eq!(p(&gets), Parsed::Incomplete);
    let mut gat = b"gat 0".to_vec();
    gat.extend_from_slice(&get[3..]);
    assert!(closes(&gat));
    let mut complete_get = get.clone();
    complete_get.extend_from_slice(b"\r\n");
    let (request, consumed) = ok(&complete_get);
    assert_eq!(consumed, complete_get.len());
    assert_eq!(keys(&request).len(), (get.len() - 3) / 4);
    let mut huge = b"get".to_vec();
    while huge.len() <= GET_COMMAND_LINE_MAX_BYTES {
        huge.extend_from_slice(b" key");
    }
    assert!(closes(&huge));
    let mut far_spaces = vec![b' '; LEADING_SPACES_MAX_BYTES + 1];
    far_spaces.extend_from_slice(&get);
    assert!(closes(&far_spaces));
}

/// The 1 MiB bound of a multi-get line is exact, as the 2048-byte bound of other
/// lines is: a line of exactly 1 MiB may still get its newline, one byte more closes.
#[test]
fn multi_get_line_bound_is_exactly_one_mebibyte() {
    let mut get = b"get".to_vec();
    while get.len() + 4 <= GET_COMMAND_LINE_MAX_BYTES {
        get.extend_from_slice(b" key");
    }
    get.resize(GET_COMMAND_LINE_MAX_BYTES, b' ');
    assert_eq!(p(&get), Parsed::Incomplete);
    let mut one_more = get.clone();
    one_more.push(b' ');
    assert!(closes(&one_more));
    // The newline as byte 1 MiB + 1 still ends the line.
    let mut line = get.clone();
    line.push(b'\n');
    let (request, consumed) = ok(&line);
    assert_eq!(consumed, GET_COMMAND_LINE_MAX_BYTES + 1);
    assert_eq!(keys(&request).len(), (line.len() - 4) / 4);
}

/// memcached looks past at most 100 leading spaces of an overlong line for `get `.
#[test]
fn an_overlong_get_may_follow_exactly_100_spaces() {
    let mut get = b"get".to_vec();
    while get.len() < 3 * COMMAND_LINE_MAX_BYTES {
        get.extend_from_slice(b" key");
    }
    let mut spaced = vec![b' '; LEADING_SPACES_MAX_BYTES];
    spaced.extend_from_slice(&get);
    assert_eq!(p(&spaced), Parsed::Incomplete);
    spaced.insert(0, b' ');
    assert!(closes(&spaced));
}

/// `verbosity noreply` alone is level 0; `noreply` followed by a level is not a number.
#[test]
fn verbosity_noreply_is_a_level_only_as_the_sole_argument() {
    assert_eq!(err(b"verbosity noreply 1\r\n"), (BAD_FORMAT, 21));
    assert_eq!(err(b"verbosity noreply noreply\r\n"), (&b""[..], 27));
}

/// `slabs automove ratio <r>` tunes a knob fogcached lacks: `ERROR`, as for an
/// unknown command, not the bad-format error of an unreadable level.
#[test]
fn slabs_automove_ratio_is_refused_as_unknown() {
    assert_eq!(err(b"slabs automove ratio 0.8\r\n"), (ERROR, 26));
    assert_eq!(err(b"slabs automove ratio 0.8 noreply\r\n"), (&b""[..], 34));
    assert_eq!(err(b"slabs automove rati 0.8\r\n"), (BAD_FORMAT, 25));
}

/// Servers embed the limits in structs they log: Debug must name the type without
/// trying to print the closure.
#[test]
fn text_limits_debug_names_the_type() {
    let limits = TextLimits {
        item_fits: &fits_1k,
    };
    assert_eq!(format!("{limits:?}"), "TextLimits { .. }");
}

#[test]
fn every_prefix_of_a_request_is_incomplete() {
    let requests: [&[u8]; 12] = [
        b"set k 1 2 5\r\nab\r\nc\r\n",
        b"cas k 1 2 3 99 noreply\r\nabc\r\n",
        b"set k 0 0 1\nv\r\n",
        b"get a b c\r\n",
        b"gats 10 a b\n",
        b"delete k noreply\r\n",
        b"incr k 1\r\n",
        b"touch k 1\r\n",
        b"flush_all 5\r\n",
        b"stats settings\r\n",
        b"verbosity 1\r\n",
        b"set big 0 0 2000\r\n",
    ];
    for request in requests {
        for split in 0..request.len() {
            assert_eq!(
                p(&request[..split]),
                Parsed::Incomplete,
                "{:?} cut at {split}",
                String::from_utf8_lossy(request)
            );
        }
        let (_, consumed) = ok(request);
        assert_eq!(
            consumed,
            request.len(),
            "{:?}",
            String::from_utf8_lossy(request)
        );
    }
}

#[test]
fn meta_commands_are_recognised_for_the_meta_parser() {
    for line in [
        &b"mg foo v\r\n"[..],
        b"ms foo 2\r\n",
        b"md foo\r\n",
        b"ma foo\r\n",
        b"mn\r\n",
        b"me foo\n",
        b"  mg foo\r\n",
    ] {
        assert!(is_meta_command(line), "{:?}", String::from_utf8_lossy(line));
    }
    for line in [
        &b"mz foo\r\n"[..],
        b"mget foo\r\n",
        b"mg",
        b"get foo\r\n",
        b"m",
        b"",
    ] {
        assert!(
            !is_meta_command(line),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
    // Not a meta command, so the text parser answers it.
    assert_eq!(err(b"mz foo\r\n"), (ERROR, 8));
}

const TOKENS: &[&str] = &[
    "get",
    "gets",
    "gat",
    "gats",
    "set",
    "add",
    "replace",
    "append",
    "prepend",
    "cas",
    "delete",
    "incr",
    "decr",
    "touch",
    "flush_all",
    "stats",
    "version",
    "verbosity",
    "quit",
    "shutdown",
    "slabs",
    "reassign",
    "automove",
    "cache_memlimit",
    "noreply",
    "k",
    "0",
    "1",
    "5",
    "-1",
    "4294967296",
    "18446744073709551616",
    " ",
    "  ",
    "\r\n",
    "\n",
    "\r",
    "\x00",
    "x",
];

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_consume_at_most_the_buffer(
        buf in proptest::collection::vec(any::<u8>(), 0..3000)
    ) {
        check_consumed(&buf)?;
    }

    #[test]
    fn token_soup_never_panics_and_consumes_at_most_the_buffer(
        parts in proptest::collection::vec(proptest::sample::select(TOKENS), 0..40)
    ) {
        check_consumed(parts.concat().as_bytes())?;
    }
}

/// Keys, numbers, separators and line ends of store lines for
/// [`plain_sets_parse_as_the_tokenizer_does`]: valid and not, plain and not, at and
/// past every limit.
const SET_KEYS: &[&str] = &["k", "key:1", "a\x00b", "k\rx", "", "noreply"];
const SET_NUMBERS: &[&str] = &[
    "0",
    "007",
    "1",
    "100",
    "1025",
    "4294967295",
    "4294967296",
    "999999999999999999",
    "9999999999999999999",
    "2147483645",
    "2147483646",
    "-1",
    "+5",
    "12a",
    "",
];
const SET_GAPS: &[&str] = &[" ", " ", " ", " ", " ", " ", " ", " ", "  ", "\t"];
const SET_ENDS: &[&str] = &["", "", "", "", "", "", " ", " noreply", " 5", "\r"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The one-pass reading of a plain `set` line gives exactly what the tokenizer
    /// and `parse_store` give, for every line it takes (and it takes plain ones).
    #[test]
    fn plain_sets_parse_as_the_tokenizer_does(
        key in proptest::sample::select(SET_KEYS),
        long_key in proptest::option::of(249usize..=252),
        numbers in proptest::collection::vec(proptest::sample::select(SET_NUMBERS), 3),
        gaps in proptest::collection::vec(proptest::sample::select(SET_GAPS), 4),
        end in proptest::sample::select(SET_ENDS),
        payload_len in 0usize..120,
        terminated in any::<bool>(),
    ) {
        let key = long_key.map_or(key.to_owned(), |len| "k".repeat(len));
        let line = format!(
            "set{}{key}{}{}{}{}{}{}{end}",
            gaps[0], gaps[1], numbers[0], gaps[2], numbers[1], gaps[3], numbers[2]
        );
        let mut buf = line.clone().into_bytes();
        buf.extend_from_slice(b"\r\n");
        buf.extend(std::iter::repeat_n(b'v', payload_len));
        if terminated {
            buf.extend_from_slice(b"\r\n");
        }
        let limits = TextLimits { item_fits: &fits_1k };
        let line_consumed = line.len() + 2;
        if let Some(fast) = parse_plain_set(&buf, line.as_bytes(), line_consumed, &limits) {
            let tokens = Tokens::new(line.as_bytes());
            let general = parse_store(&buf, b"set", &tokens, line_consumed, &limits);
            prop_assert_eq!(fast, general);
        }
    }
}

#[test]
fn plain_sets_take_the_one_pass_reading() {
    let limits = TextLimits {
        item_fits: &fits_1k,
    };
    for line in [
        "set k 0 0 1",
        "set fixed:12 4294967295 999999999999999999 1024",
    ] {
        let buf = format!("{line}\r\nv\r\n");
        assert!(
            parse_plain_set(buf.as_bytes(), line.as_bytes(), line.len() + 2, &limits).is_some(),
            "{line}"
        );
    }
    for line in [
        "set k 0 0 1 noreply",
        "set  k 0 0 1",
        "set k 0 0 -1",
        "set k 0 0 1 ",
    ] {
        let buf = format!("{line}\r\nv\r\n");
        assert!(
            parse_plain_set(buf.as_bytes(), line.as_bytes(), line.len() + 2, &limits).is_none(),
            "{line}"
        );
    }
}

fn check_consumed(buf: &[u8]) -> Result<(), TestCaseError> {
    match p(buf) {
        Parsed::Complete { consumed, .. } => {
            prop_assert!(consumed > 0 && consumed <= buf.len());
        }
        Parsed::Invalid {
            consumed, close, ..
        } => {
            prop_assert!(consumed <= buf.len());
            prop_assert!(close || consumed > 0);
        }
        Parsed::Incomplete => {}
    }
    Ok(())
}
