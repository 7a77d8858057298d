//! Pieces shared by the text and meta parsers: key rules and memcached's number parsing.

/// memcached's `KEY_MAX_LENGTH`.
pub const KEY_LENGTH_MAX_BYTES: usize = 250;

/// A command line with no newline within this many bytes closes the connection (except
/// for `get`/`gets`, whose key lists may be long).
pub const COMMAND_LINE_MAX_BYTES: usize = 2048;

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

/// Parses an unsigned decimal number the way memcached's `safe_strtoull` does: digits
/// only, no sign, no overflow.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    if token.is_empty() || token.len() > 20 {
        return None;
    }
    let mut value: u64 = 0;
    for &b in token {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

/// Parses a 32-bit unsigned number (client flags).
pub fn parse_u32(token: &[u8]) -> Option<u32> {
    parse_u64(token).and_then(|v| u32::try_from(v).ok())
}

/// Parses a signed decimal number (exptimes may be negative).
pub fn parse_i64(token: &[u8]) -> Option<i64> {
    match token.split_first() {
        Some((b'-', digits)) => parse_u64(digits)
            .and_then(|v| i64::try_from(v).ok())
            .map(|v| -v),
        _ => parse_u64(token).and_then(|v| i64::try_from(v).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_i64(b"-5"), Some(-5));
        assert_eq!(parse_i64(b"30"), Some(30));
    }
}
