//! Pieces shared by the text and meta parsers: key rules and memcached's number parsing.

/// memcached's `KEY_MAX_LENGTH`.
pub const KEY_LENGTH_MAX_BYTES: usize = 250;

/// A command line with no newline within this many bytes closes the connection (except
/// for `get`/`gets`, whose key lists may be long).
pub const COMMAND_LINE_MAX_BYTES: usize = 2048;

/// Below this many bytes a search reads eight bytes per step in plain integer code; from
/// here on `memchr`'s vector search, whose set-up costs more than a short line's scan
/// (a `get` line is usually 10 to 40 bytes; measured with scripts/callgrind-per-request.sh).
const VECTOR_SEARCH_MIN_BYTES: usize = 64;
const LOW_BITS: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// The bytes of `word` that are zero, as their high bits. Exact for the lowest zero byte
/// (a borrow can only mark bytes above a true zero), which is the one searches want.
#[inline]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(LOW_BITS) & !word & HIGH_BITS
}

/// Position of the first byte of `hay` for which `matches(word)` (applied to eight bytes
/// at a time, little-endian) marks a high bit; `is` tests the bytes after the last whole
/// word.
#[inline]
fn find_by_words(
    hay: &[u8],
    matches: impl Fn(u64) -> u64,
    is: impl Fn(u8) -> bool,
) -> Option<usize> {
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        if let Ok(bytes) = <[u8; 8]>::try_from(chunk) {
            let found = matches(u64::from_le_bytes(bytes));
            if found != 0 {
                return Some(offset + (found.trailing_zeros() / 8) as usize);
            }
        }
        offset += 8;
    }
    if chunks.remainder().is_empty() {
        return None;
    }
    // The bytes after the last whole word: read as the last eight bytes of the hay, which
    // overlap bytes already searched. Those hold no match, and a word search marks a
    // false match only above a true one, so the lowest marked byte is the first match
    // (a byte at a time cost a loop step a byte, up to seven a search; figures:
    // docs/results/protocol-instruction-costs.md).
    if let Some(last) = hay.last_chunk::<8>() {
        let found = matches(u64::from_le_bytes(*last));
        return (found != 0).then(|| hay.len() - 8 + (found.trailing_zeros() / 8) as usize);
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| is(b))
        .map(|i| offset + i)
}

/// Position of the first `needle` in `hay` (the request parsers' line and key search).
#[inline]
pub fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    if hay.len() >= VECTOR_SEARCH_MIN_BYTES {
        return memchr::memchr(needle, hay);
    }
    let pattern = LOW_BITS.wrapping_mul(u64::from(needle));
    find_by_words(hay, |word| zero_bytes(word ^ pattern), |b| b == needle)
}

/// Position of the first `needle` in `hay` when it is most likely near the start (the
/// space after a key, in a multi-key line that runs on): the first
/// [`VECTOR_SEARCH_MIN_BYTES`] are read eight bytes per step and only the rest, if the
/// needle is not among them, by `memchr`. [`find_byte`] hands any hay of that length or
/// more to `memchr`, whose set-up costs about what the word steps over a short key do
/// (docs/results/protocol-instruction-costs.md).
#[inline]
pub fn find_byte_near(hay: &[u8], needle: u8) -> Option<usize> {
    let head = &hay[..hay.len().min(VECTOR_SEARCH_MIN_BYTES)];
    let pattern = LOW_BITS.wrapping_mul(u64::from(needle));
    if let Some(index) = find_by_words(head, |word| zero_bytes(word ^ pattern), |b| b == needle) {
        return Some(index);
    }
    let tail = hay.get(VECTOR_SEARCH_MIN_BYTES..)?;
    memchr::memchr(needle, tail).map(|index| VECTOR_SEARCH_MIN_BYTES + index)
}

/// Position of the first `a` or `b` in `hay`.
#[inline]
pub fn find_either_byte(hay: &[u8], a: u8, b: u8) -> Option<usize> {
    if hay.len() >= VECTOR_SEARCH_MIN_BYTES {
        return memchr::memchr2(a, b, hay);
    }
    let (pattern_a, pattern_b) = (
        LOW_BITS.wrapping_mul(u64::from(a)),
        LOW_BITS.wrapping_mul(u64::from(b)),
    );
    find_by_words(
        hay,
        |word| zero_bytes(word ^ pattern_a) | zero_bytes(word ^ pattern_b),
        |byte| byte == a || byte == b,
    )
}

/// Whether `key` is a valid text-protocol key: 1..=250 bytes with no space, CR, LF or NUL.
///
/// Other control bytes are accepted because memcached accepts them (it splits command
/// lines on spaces only) and real clients send them: `memcaslap` prefixes its keys with
/// 0x10 bytes. NUL is refused because memcached's C string handling cuts a key there.
pub fn is_valid_key(key: &[u8]) -> bool {
    !key.is_empty()
        && key.len() <= KEY_LENGTH_MAX_BYTES
        && key.iter().all(|&b| !matches!(b, b' ' | b'\r' | b'\n' | 0))
}

/// Whether C's `isspace` is true for `b` (space, `\t`, `\n`, `\v`, `\f`, `\r`).
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A decimal number as C's `strtoull`/`strtol` read it, with the end check of memcached's
/// `safe_strto*` helpers: leading whitespace is skipped, one optional sign, then at least
/// one digit (any number of leading zeros), and the digits must be followed by the end,
/// a NUL byte (where a C string ends) or a whitespace byte; whatever comes after that is
/// ignored. Returns whether a `-` was given and the magnitude; `None` when the magnitude
/// overflows a u64 (`ERANGE`).
///
/// Public for the engine, which reads stored values for `incr`/`decr` the same way.
pub fn parse_c_decimal(bytes: &[u8]) -> Option<(bool, u64)> {
    // What clients send: a token of plain digits, too short to overflow. One pass (the
    // general parse below scans such a token three times, and a SET line has three
    // numbers; docs/results/protocol-instruction-costs.md has the count); same result,
    // as every byte is a digit.
    if !bytes.is_empty() && bytes.len() <= U64_DIGITS_SAFE {
        let mut magnitude = 0u64;
        let mut all_digits = true;
        for &b in bytes {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                all_digits = false;
                break;
            }
            magnitude = magnitude * 10 + u64::from(digit);
        }
        if all_digits {
            return Some((false, magnitude));
        }
    }
    parse_c_decimal_general(bytes)
}

/// [`parse_c_decimal`] for any token (spaces, a sign, a NUL, overflow).
fn parse_c_decimal_general(bytes: &[u8]) -> Option<(bool, u64)> {
    let skipped = bytes.iter().take_while(|&&b| is_c_space(b)).count();
    let rest = &bytes[skipped..];
    let (negative, rest) = match rest.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, rest),
    };
    let digit_count = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digit_count == 0 {
        return None;
    }
    match rest.get(digit_count) {
        None | Some(0) => {}
        Some(&b) if is_c_space(b) => {}
        Some(_) => return None,
    }
    let magnitude = rest[..digit_count].iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    Some((negative, magnitude))
}

/// Digits of a number that cannot overflow a u64 (10^19 - 1 < 2^64).
const U64_DIGITS_SAFE: usize = 19;

/// Parses an unsigned number exactly as memcached's `safe_strtoull` does (see
/// [`parse_c_decimal`]). `strtoull` negates a `-` number modulo 2^64 and memcached then
/// refuses a result that is negative as an i64 when a `-` was given: so `-0` is 0, `-5`
/// is refused, and `-18446744073709551615` is 1, as real memcached 1.6 answers.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let (negative, magnitude) = parse_c_decimal(token)?;
    if !negative {
        return Some(magnitude);
    }
    let value = magnitude.wrapping_neg();
    (i64::try_from(value).is_ok()).then_some(value)
}

/// Parses a 32-bit unsigned number (client flags) as memcached's `safe_strtoul`, except
/// that values above 2^32 - 1 are refused instead of truncated.
pub fn parse_u32(token: &[u8]) -> Option<u32> {
    parse_u64(token).and_then(|v| u32::try_from(v).ok())
}

/// Parses a signed number as memcached's `safe_strtol` (a 64-bit `strtol`): exptimes and
/// lengths may be negative; values outside the i64 range are refused (`ERANGE`).
pub fn parse_i64(token: &[u8]) -> Option<i64> {
    let (negative, magnitude) = parse_c_decimal(token)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_digit_tokens_parse_as_the_general_parser_does() {
        let mut tokens: Vec<Vec<u8>> = vec![
            b"0".to_vec(),
            b"007".to_vec(),
            b"4294967295".to_vec(),
            b"4294967296".to_vec(),
            b"9223372036854775807".to_vec(),
            b"9999999999999999999".to_vec(),
            b"18446744073709551615".to_vec(),
            b"18446744073709551616".to_vec(),
            b"99999999999999999999".to_vec(),
            b"12a".to_vec(),
            b"1:".to_vec(),
            b"/".to_vec(),
        ];
        for digits in 1..=21 {
            tokens.push(vec![b'9'; digits]);
            tokens.push(
                std::iter::once(b'1')
                    .chain(vec![b'0'; digits - 1])
                    .collect(),
            );
        }
        for token in &tokens {
            assert_eq!(
                parse_c_decimal(token),
                parse_c_decimal_general(token),
                "{:?}",
                String::from_utf8_lossy(token)
            );
        }
    }

    #[test]
    fn byte_searches_find_the_first_match_at_every_length_and_position() {
        for len in 0..150 {
            for at in 0..len {
                let mut hay = vec![b'k'; len];
                hay[at] = b' ';
                // A later match and bytes whose borrow could fool a word search.
                if at + 2 < len {
                    hay[at + 1] = 0;
                    hay[at + 2] = b' ';
                }
                assert_eq!(find_byte(&hay, b' '), Some(at), "len {len} at {at}");
                assert_eq!(find_byte_near(&hay, b' '), Some(at), "len {len} at {at}");
                assert_eq!(
                    find_either_byte(&hay, b'\r', b' '),
                    Some(at),
                    "len {len} at {at}"
                );
            }
            let hay = vec![0x80u8; len];
            assert_eq!(find_byte(&hay, b' '), None, "len {len}");
            assert_eq!(find_byte_near(&hay, b' '), None, "len {len}");
            assert_eq!(find_either_byte(&hay, b'\r', 0), None, "len {len}");
            assert_eq!(find_byte(&hay, 0x80), (len > 0).then_some(0));
        }
        // A byte one above the needle just after a zero byte.
        assert_eq!(find_byte(b"\x00\x21 ", b' '), Some(2));
        assert_eq!(find_byte(b"ab\x01\x00", 0), Some(3));
    }

    #[test]
    fn keys_with_spaces_line_ends_nul_or_over_250_bytes_are_refused() {
        assert!(is_valid_key(b"foo"));
        assert!(is_valid_key(&[b'k'; 250]));
        assert!(!is_valid_key(&[b'k'; 251]));
        assert!(!is_valid_key(b""));
        assert!(!is_valid_key(b"a b"));
        assert!(!is_valid_key(b"a\rb"));
        assert!(!is_valid_key(b"a\nb"));
        assert!(!is_valid_key(b"a\x00b"));
        // memcaslap's keys start with 0x10 bytes; memcached accepts them.
        assert!(is_valid_key(b"\x10\x10key"));
        assert!(is_valid_key(b"a\x7fb"));
    }

    #[test]
    fn numbers_parse_like_safe_strtoull() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        // No length cap: memcached reads any number of leading zeros.
        assert_eq!(parse_u64(b"00000000000000000000005"), Some(5));
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"\t 7"), Some(7));
        // Anything after a whitespace or NUL byte is ignored, as after strtoull's end.
        assert_eq!(parse_u64(b"9 0"), Some(9));
        assert_eq!(parse_u64(b"12\tabc"), Some(12));
        assert_eq!(parse_u64(b"12\0ab"), Some(12));
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"-9223372036854775808"), None);
        // strtoull negates modulo 2^64; memcached keeps results that are not negative as
        // an i64 (checked against memcached 1.6.18: `incr n -18446744073709551615` adds 1).
        assert_eq!(parse_u64(b"-18446744073709551615"), Some(1));
        assert_eq!(
            parse_u64(b"-9223372036854775809"),
            Some(9_223_372_036_854_775_807)
        );
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b" "), None);
        assert_eq!(parse_u64(b"+"), None);
        assert_eq!(parse_u64(b"++1"), None);
        assert_eq!(parse_u64(b"+-1"), None);
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_u32(b"-0"), Some(0));
        assert_eq!(parse_i64(b"-5"), Some(-5));
        assert_eq!(parse_i64(b"+30"), Some(30));
        assert_eq!(parse_i64(b"0030"), Some(30));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"-9223372036854775809"), None);
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"--5"), None);
        assert_eq!(parse_i64(b"5x"), None);
    }
}
