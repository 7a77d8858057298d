//! memcached's meta commands (`mg ms md ma mn me`): parsing and the small encoders their
//! replies are built from.
//!
//! A meta command is one text line, `<cm> <key> [<datalen>] <flag>*`, where each flag is a
//! single character optionally followed by an argument (`T30`, `Oopaque`). `ms` is followed
//! by a data block of `<datalen>` bytes and `\r\n`. The parser follows memcached 1.6.18's
//! `proto_text.c` check by check, so a malformed line gets the same error string, in the
//! same order of precedence, and a refused `ms` swallows its data block as memcached does.
//!
//! Two flags from newer memcached releases are accepted as well, because the engine models
//! them: `E<cas>` (use this CAS value for the new item) and `x` (`md`: drop the value but
//! keep the item). memcached 1.6.18 answers both with `CLIENT_ERROR invalid flag`.
//!
//! The reply is assembled by the server's dispatcher: only it knows the item. The flags are
//! kept in the order the client sent them, since the reply echoes them in that order.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;

use crate::common::{
    is_valid_key, parse_i64, parse_u64, COMMAND_LINE_MAX_BYTES, KEY_LENGTH_MAX_BYTES,
};
use crate::Parsed;

/// memcached's `MFLAG_MAX_OPT_LENGTH` (20) counts the tokenizer's empty terminal token, so a
/// meta line may hold at most 19 real tokens: command, key, and (for `ms`) the length.
const LINE_TOKENS_MAX: usize = 19;

/// Most flags a meta command can carry: the token limit minus command and key.
pub const FLAGS_MAX: usize = LINE_TOKENS_MAX - 2;

/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`: an `O` token, its `O` included, is at most this long.
pub const OPAQUE_LENGTH_MAX_BYTES: usize = 32;

/// Limits the dispatcher imposes on a request before its payload is buffered.
#[derive(Clone, Copy, Debug)]
pub struct MetaLimits {
    /// An `ms` data block longer than this is not buffered: the request completes at its
    /// command line with [`SetValue::TooLarge`], and the dispatcher swallows the payload.
    pub value_max_bytes: usize,
}

/// One parsed meta request. Borrowed slices point into the input buffer.
#[derive(Debug, PartialEq)]
pub enum MetaRequest<'a> {
    /// `mg <key> <flags>*`
    Get {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
    },
    /// `ms <key> <datalen> <flags>*\r\n<data>\r\n`
    Set {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
        mode: SetMode,
        value: SetValue<'a>,
    },
    /// `md <key> <flags>*`
    Delete {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
    },
    /// `ma <key> <flags>*`
    Arith {
        key: MetaKey<'a>,
        flags: MetaFlags<'a>,
        mode: ArithMode,
    },
    /// `mn`: answers `MN`, whatever follows it.
    Noop,
    /// `me <key> [b]`
    Debug { key: MetaKey<'a> },
}

/// The `ms` mode switch (`M` flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetMode {
    /// `MS`, or no `M` flag.
    Set,
    /// `ME`
    Add,
    /// `MR`
    Replace,
    /// `MA`
    Append,
    /// `MP`
    Prepend,
}

/// The `ma` mode switch (`M` flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithMode {
    /// `MI`, `M+`, or no `M` flag.
    Increment,
    /// `MD`, `M-`.
    Decrement,
}

/// The data block of an `ms`.
#[derive(Debug, PartialEq)]
pub enum SetValue<'a> {
    /// The payload, without its trailing `\r\n`.
    Data(&'a [u8]),
    /// The payload exceeds [`MetaLimits::value_max_bytes`]. The request was consumed up to
    /// the end of its command line; the next `swallow_bytes` bytes (payload and `\r\n`)
    /// must be discarded.
    TooLarge { swallow_bytes: usize },
}

/// A request key: the token as sent, or its base64 decoding when the `b` flag is present.
#[derive(Clone, Debug, PartialEq)]
pub struct MetaKey<'a> {
    bytes: KeyBytes<'a>,
    /// The client sent the key base64-encoded (`b`); echoes must encode it again.
    pub binary: bool,
}

// The inline buffer keeps base64 keys allocation-free; a request lives briefly on the
// stack, so its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
enum KeyBytes<'a> {
    Borrowed(&'a [u8]),
    /// A decoded key is never longer than its encoding, so 250 bytes always suffice.
    Decoded {
        buf: [u8; KEY_LENGTH_MAX_BYTES],
        len: usize,
    },
}

impl<'a> MetaKey<'a> {
    fn plain(token: &'a [u8]) -> Self {
        MetaKey {
            bytes: KeyBytes::Borrowed(token),
            binary: false,
        }
    }

    /// Decodes a base64 key the way memcached's decoder does: padding is required (length a
    /// multiple of four), stray low bits in the last symbol are tolerated, and an empty
    /// result is an error.
    fn decode_base64(token: &[u8]) -> Option<Self> {
        let mut buf = [0u8; KEY_LENGTH_MAX_BYTES];
        let len = BASE64_KEYS.decode_slice(token, &mut buf).ok()?;
        if len == 0 {
            return None;
        }
        Some(MetaKey {
            bytes: KeyBytes::Decoded { buf, len },
            binary: true,
        })
    }

    /// The key the cache is asked about (decoded when it was sent in base64).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.bytes {
            KeyBytes::Borrowed(key) => key,
            KeyBytes::Decoded { buf, len } => &buf[..*len],
        }
    }
}

const BASE64_KEYS: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// The flags of one meta request, parsed, plus the order in which they were sent.
///
/// Every command accepts every known flag (memcached parses them all with one function);
/// a command simply ignores the flags that mean nothing to it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetaFlags<'a> {
    order: [u8; FLAGS_MAX],
    count: usize,
    /// `b`: the key is base64.
    pub base64_key: bool,
    /// `c`: return the CAS value.
    pub return_cas: bool,
    /// `f`: return the client flags.
    pub return_client_flags: bool,
    /// `h`: return whether the item was hit before.
    pub return_hit_before: bool,
    /// `k`: return the key.
    pub return_key: bool,
    /// `l`: return seconds since the last access.
    pub return_last_access: bool,
    /// `s`: return the value size.
    pub return_size: bool,
    /// `t`: return the remaining TTL.
    pub return_ttl: bool,
    /// `u`: do not bump the item in the LRU.
    pub no_bump: bool,
    /// `v`: return the value.
    pub return_value: bool,
    /// `q`: suppress the nominal reply (see each command for which one).
    pub quiet: bool,
    /// `I`: invalidate (mark stale) instead of failing or removing.
    pub invalidate: bool,
    /// `x`: `md` removes the value but keeps the item.
    pub remove_value: bool,
    /// `O<opaque>`: the whole token, `O` included, echoed verbatim.
    pub opaque: Option<&'a [u8]>,
    /// `N<ttl>`: vivify on miss with this exptime.
    pub vivify_exptime: Option<i64>,
    /// `R<ttl>`: win the recache token when the remaining TTL is below this.
    pub recache_below_s: Option<i64>,
    /// `T<ttl>`: the exptime to set.
    pub exptime: Option<i64>,
    /// `F<flags>`: the client flags to store.
    pub client_flags: Option<u32>,
    /// `C<cas>`: compare this CAS value.
    pub compare_cas: Option<u64>,
    /// `E<cas>`: give the new item this CAS value.
    pub new_cas: Option<u64>,
    /// `M<mode>`: the raw mode character (checked by the command that uses it).
    pub mode: Option<u8>,
    /// `J<n>`: `ma`'s initial value on vivify.
    pub initial: Option<u64>,
    /// `D<n>`: `ma`'s delta.
    pub delta: Option<u64>,
}

impl MetaFlags<'_> {
    /// The flag characters in the order the client sent them.
    pub fn in_order(&self) -> &[u8] {
        &self.order[..self.count]
    }
}

const ERROR: &[u8] = b"ERROR\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_TOKEN: &[u8] = b"CLIENT_ERROR bad token in command line format\r\n";
const BAD_DATA_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
const DUPLICATE_FLAG: &[u8] = b"CLIENT_ERROR duplicate flag\r\n";
const INVALID_FLAG: &[u8] = b"CLIENT_ERROR invalid flag\r\n";
const INVALID_OR_DUPLICATE_FLAG: &[u8] = b"CLIENT_ERROR invalid or duplicate flag\r\n";
const DECODING_KEY: &[u8] = b"CLIENT_ERROR error decoding key\r\n";
const M_TOKEN_LENGTH: &[u8] = b"CLIENT_ERROR incorrect length for M token\r\n";
const BAD_INITIAL: &[u8] = b"CLIENT_ERROR invalid numeric initial value\r\n";
const BAD_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta value\r\n";
const OPAQUE_TOO_LONG: &[u8] = b"CLIENT_ERROR opaque token too long\r\n";
const MG_FLAGS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags are too long\r\n";
const FLAGS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags too long\r\n";
const MS_BAD_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ms M token\r\n";
const MA_BAD_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ma M token\r\n";

/// Parses the meta request at the front of `buf`.
///
/// `buf` must start with a meta command line (the text dispatcher routes `mg ms md ma mn
/// me` here); any other command word is answered with `ERROR`.
pub fn parse<'a>(buf: &'a [u8], limits: &MetaLimits) -> Parsed<MetaRequest<'a>> {
    // The newline is looked for in the first 2049 bytes only, as the text parser does
    // (`text::find_line_end`): memcached drops a client that sends 2048 bytes without a
    // newline, so a longer line closes the connection however its bytes arrive. Looking
    // further would answer it when it arrived in one read and close when it arrived in
    // pieces (found by the `connection` fuzz target: a 14 KB `me` line).
    let window = &buf[..buf.len().min(COMMAND_LINE_MAX_BYTES + 1)];
    let Some(newline_at) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() > COMMAND_LINE_MAX_BYTES {
            return Parsed::Invalid {
                reply: b"",
                consumed: 0,
                swallow_bytes: 0,
                close: true,
            };
        }
        return Parsed::Incomplete;
    };
    let line_end = newline_at + 1;
    let mut line = &buf[..newline_at];
    if line.len() > 1 && line.ends_with(b"\r") {
        line = &line[..line.len() - 1];
    }

    let mut tokens: [&[u8]; LINE_TOKENS_MAX + 1] = [&[]; LINE_TOKENS_MAX + 1];
    let token_count = tokenize(line, &mut tokens);
    let tokens = &tokens[..token_count];
    let command: &[u8] = tokens.first().copied().unwrap_or(&[]);

    match command {
        b"mn" => Parsed::Complete {
            request: MetaRequest::Noop,
            consumed: line_end,
        },
        b"me" => parse_debug(tokens, line_end),
        b"mg" | b"md" | b"ma" => parse_keyed(command, tokens, line_end),
        b"ms" => parse_set(buf, tokens, line_end, limits),
        _ => invalid(ERROR, line_end),
    }
}

/// Splits `line` on spaces (only spaces, as memcached does), skipping empty tokens. Stores
/// at most `tokens.len()` tokens; a count equal to that length means "too many".
fn tokenize<'a>(line: &'a [u8], tokens: &mut [&'a [u8]]) -> usize {
    let mut count = 0;
    for token in line.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        if count == tokens.len() {
            break;
        }
        tokens[count] = token;
        count += 1;
    }
    count
}

fn invalid<R>(reply: &'static [u8], consumed: usize) -> Parsed<R> {
    Parsed::Invalid {
        reply,
        consumed,
        swallow_bytes: 0,
        close: false,
    }
}

fn invalid_swallowing<R>(reply: &'static [u8], consumed: usize, swallow_bytes: usize) -> Parsed<R> {
    Parsed::Invalid {
        reply,
        consumed,
        swallow_bytes,
        close: false,
    }
}

fn parse_debug<'a>(tokens: &[&'a [u8]], line_end: usize) -> Parsed<MetaRequest<'a>> {
    let Some(&key_token) = tokens.get(1) else {
        return invalid(BAD_FORMAT, line_end);
    };
    if key_token.len() > KEY_LENGTH_MAX_BYTES {
        return invalid(BAD_FORMAT, line_end);
    }
    // `me` knows a single option: a literal `b` right after the key.
    let key = if tokens.get(2).copied() == Some(b"b".as_slice()) {
        match MetaKey::decode_base64(key_token) {
            Some(key) => key,
            None => return invalid(BAD_FORMAT, line_end),
        }
    } else if is_valid_key(key_token) {
        MetaKey::plain(key_token)
    } else {
        return invalid(BAD_FORMAT, line_end);
    };
    Parsed::Complete {
        request: MetaRequest::Debug { key },
        consumed: line_end,
    }
}

/// `mg`, `md` and `ma`: `<cm> <key> <flags>*`.
fn parse_keyed<'a>(
    command: &[u8],
    tokens: &[&'a [u8]],
    line_end: usize,
) -> Parsed<MetaRequest<'a>> {
    let Some(&key_token) = tokens.get(1) else {
        return invalid(ERROR, line_end);
    };
    if key_token.len() > KEY_LENGTH_MAX_BYTES {
        return invalid(BAD_FORMAT, line_end);
    }
    let is_get = command == b"mg";
    if tokens.len() > LINE_TOKENS_MAX {
        return invalid(
            if is_get {
                MG_FLAGS_TOO_LONG
            } else {
                FLAGS_TOO_LONG
            },
            line_end,
        );
    }
    let (key, flags) = match parse_flags(&tokens[2..], key_token) {
        Ok(parsed) => parsed,
        // `md` and `ma` answer every flag error with one generic message.
        Err(reply) if is_get => return invalid(reply, line_end),
        Err(_) => return invalid(INVALID_OR_DUPLICATE_FLAG, line_end),
    };
    if flags
        .opaque
        .is_some_and(|o| o.len() > OPAQUE_LENGTH_MAX_BYTES)
    {
        return invalid(OPAQUE_TOO_LONG, line_end);
    }
    if !key.binary && !is_valid_key(key.as_bytes()) {
        return invalid(BAD_FORMAT, line_end);
    }
    let request = match command {
        b"mg" => MetaRequest::Get { key, flags },
        b"md" => MetaRequest::Delete { key, flags },
        _ => {
            let mode = match flags.mode {
                None | Some(b'I') | Some(b'+') => ArithMode::Increment,
                Some(b'D') | Some(b'-') => ArithMode::Decrement,
                Some(_) => return invalid(MA_BAD_MODE, line_end),
            };
            MetaRequest::Arith { key, flags, mode }
        }
    };
    Parsed::Complete {
        request,
        consumed: line_end,
    }
}

/// `ms <key> <datalen> <flags>*` and its data block. Once the length is known, every error
/// swallows the data block, as memcached does.
fn parse_set<'a>(
    buf: &'a [u8],
    tokens: &[&'a [u8]],
    line_end: usize,
    limits: &MetaLimits,
) -> Parsed<MetaRequest<'a>> {
    let Some(&key_token) = tokens.get(1) else {
        return invalid(ERROR, line_end);
    };
    if key_token.len() > KEY_LENGTH_MAX_BYTES {
        return invalid(BAD_FORMAT, line_end);
    }
    let Some(&length_token) = tokens.get(2) else {
        return invalid(BAD_FORMAT, line_end);
    };
    if tokens.len() > LINE_TOKENS_MAX {
        return invalid(FLAGS_TOO_LONG, line_end);
    }
    // memcached reads the length as a 32-bit int and refuses negatives and INT_MAX - 1 up.
    let value_bytes = match parse_i32(length_token) {
        Some(n) if (0..=i32::MAX - 2).contains(&n) => n as usize,
        _ => return invalid(BAD_FORMAT, line_end),
    };
    let swallow_bytes = value_bytes + 2;
    let (key, flags) = match parse_flags(&tokens[3..], key_token) {
        Ok(parsed) => parsed,
        Err(reply) => return invalid_swallowing(reply, line_end, swallow_bytes),
    };
    if flags
        .opaque
        .is_some_and(|o| o.len() > OPAQUE_LENGTH_MAX_BYTES)
    {
        return invalid_swallowing(OPAQUE_TOO_LONG, line_end, swallow_bytes);
    }
    let mode = match flags.mode {
        None | Some(b'S') => SetMode::Set,
        Some(b'E') => SetMode::Add,
        Some(b'A') => SetMode::Append,
        Some(b'P') => SetMode::Prepend,
        Some(b'R') => SetMode::Replace,
        Some(_) => return invalid_swallowing(MS_BAD_MODE, line_end, swallow_bytes),
    };
    if !key.binary && !is_valid_key(key.as_bytes()) {
        return invalid_swallowing(BAD_FORMAT, line_end, swallow_bytes);
    }
    if value_bytes > limits.value_max_bytes {
        return Parsed::Complete {
            request: MetaRequest::Set {
                key,
                flags,
                mode,
                value: SetValue::TooLarge { swallow_bytes },
            },
            consumed: line_end,
        };
    }
    let data_end = line_end + value_bytes;
    let block_end = data_end + 2;
    if buf.len() < block_end {
        return Parsed::Incomplete;
    }
    if &buf[data_end..block_end] != b"\r\n" {
        return invalid(BAD_DATA_CHUNK, block_end);
    }
    Parsed::Complete {
        request: MetaRequest::Set {
            key,
            flags,
            mode,
            value: SetValue::Data(&buf[line_end..data_end]),
        },
        consumed: block_end,
    }
}

/// memcached's `_meta_flag_preparse`: a duplicate or unknown flag stops at once; a bad
/// argument is remembered (the last message wins) and parsing goes on.
fn parse_flags<'a>(
    flag_tokens: &[&'a [u8]],
    key_token: &'a [u8],
) -> Result<(MetaKey<'a>, MetaFlags<'a>), &'static [u8]> {
    let mut flags = MetaFlags::default();
    let mut key = MetaKey::plain(key_token);
    let mut seen = [false; 127];
    let mut error: Option<&'static [u8]> = None;
    let mut has_error = false;
    for &token in flag_tokens {
        let Some((&flag, argument)) = token.split_first() else {
            continue;
        };
        let Some(already_seen) = seen.get_mut(usize::from(flag)) else {
            // memcached reports bytes past ASCII as duplicates.
            return Err(DUPLICATE_FLAG);
        };
        if *already_seen {
            return Err(DUPLICATE_FLAG);
        }
        *already_seen = true;
        if flags.count < FLAGS_MAX {
            flags.order[flags.count] = flag;
            flags.count += 1;
        }
        let mut fail = |reply: Option<&'static [u8]>| {
            has_error = true;
            if reply.is_some() {
                error = reply;
            }
        };
        match flag {
            b'b' => match MetaKey::decode_base64(key_token) {
                Some(decoded) => {
                    key = decoded;
                    flags.base64_key = true;
                }
                None => fail(Some(DECODING_KEY)),
            },
            b'N' => match parse_i32(argument) {
                Some(n) => flags.vivify_exptime = Some(i64::from(n)),
                None => fail(Some(BAD_TOKEN)),
            },
            b'T' => match parse_i32(argument) {
                Some(n) => flags.exptime = Some(i64::from(n)),
                None => fail(Some(BAD_TOKEN)),
            },
            b'R' => match parse_i32(argument) {
                Some(n) => flags.recache_below_s = Some(i64::from(n)),
                None => fail(Some(BAD_TOKEN)),
            },
            b'O' => flags.opaque = Some(token),
            // Proxy hints: accepted and ignored.
            b'P' | b'L' => {}
            b'c' => flags.return_cas = true,
            b'f' => flags.return_client_flags = true,
            b'h' => flags.return_hit_before = true,
            b'k' => flags.return_key = true,
            b'l' => flags.return_last_access = true,
            b's' => flags.return_size = true,
            b't' => flags.return_ttl = true,
            b'u' => flags.no_bump = true,
            b'v' => flags.return_value = true,
            b'q' => flags.quiet = true,
            b'I' => flags.invalidate = true,
            b'x' => flags.remove_value = true,
            // A bad client-flags number keeps whatever message came before.
            b'F' => match parse_unsigned(argument).and_then(|n| u32::try_from(n).ok()) {
                Some(n) => flags.client_flags = Some(n),
                None => fail(None),
            },
            b'C' => match parse_unsigned(argument) {
                Some(n) => flags.compare_cas = Some(n),
                None => fail(Some(BAD_TOKEN)),
            },
            b'E' => match parse_unsigned(argument) {
                Some(n) => flags.new_cas = Some(n),
                None => fail(Some(BAD_TOKEN)),
            },
            b'M' => match argument {
                [mode] => flags.mode = Some(*mode),
                _ => fail(Some(M_TOKEN_LENGTH)),
            },
            b'J' => match parse_unsigned(argument) {
                Some(n) => flags.initial = Some(n),
                None => fail(Some(BAD_INITIAL)),
            },
            b'D' => match parse_unsigned(argument) {
                Some(n) => flags.delta = Some(n),
                None => fail(Some(BAD_DELTA)),
            },
            _ => return Err(INVALID_FLAG),
        }
    }
    if has_error {
        return Err(error.unwrap_or(BAD_FORMAT));
    }
    Ok((key, flags))
}

/// memcached's `safe_strtol`: C decimal rules (see `common::parse_c_decimal`), 32 bits.
fn parse_i32(token: &[u8]) -> Option<i32> {
    parse_i64(token).and_then(|v| i32::try_from(v).ok())
}

/// memcached's `safe_strtoull` (see `common::parse_u64`).
fn parse_unsigned(token: &[u8]) -> Option<u64> {
    parse_u64(token)
}

// ---- Reply encoding -------------------------------------------------------------------

/// Appends the decimal digits of `n` (every number of every reply goes through here or
/// [`push_i64`]; `itoa` writes two digits per step from a table, without `fmt`).
#[inline]
pub fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends a signed decimal number.
pub fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}

/// Appends ` <flag><n>`, as in ` c42`.
pub fn push_numeric_flag(out: &mut Vec<u8>, flag: u8, n: u64) {
    out.push(b' ');
    out.push(flag);
    push_u64(out, n);
}

/// Appends a TTL flag (` t<seconds>`), `-1` meaning "never expires".
pub fn push_ttl_flag(out: &mut Vec<u8>, ttl_remaining_s: Option<u32>) {
    out.extend_from_slice(b" t");
    match ttl_remaining_s {
        Some(ttl_s) => push_u64(out, u64::from(ttl_s)),
        None => out.extend_from_slice(b"-1"),
    }
}

/// Appends the opaque token exactly as the client sent it (its `O` included).
pub fn push_opaque_flag(out: &mut Vec<u8>, opaque: &[u8]) {
    out.push(b' ');
    out.extend_from_slice(opaque);
}

/// Appends the key echo: ` k<key>`, or ` k<base64> b` for a binary key.
pub fn push_key_flag(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    push_key(out, key, binary);
    if binary {
        out.extend_from_slice(b" b");
    }
}

/// Appends a key, base64-encoded when `binary` (used by `k` and by `me`).
pub fn push_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    if binary {
        let start = out.len();
        out.resize(start + base64::encoded_len(key.len(), true).unwrap_or(0), 0);
        let written = BASE64_KEYS
            .encode_slice(key, &mut out[start..])
            .unwrap_or(0);
        out.truncate(start + written);
    } else {
        out.extend_from_slice(key);
    }
}

#[cfg(test)]
mod tests {
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
        assert!(
            matches!(request, MetaRequest::Get { ref flags, .. } if flags.in_order().is_empty())
        );
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
        assert!(
            matches!(request, MetaRequest::Set { ref key, .. } if key.as_bytes() == [b'k'; 250])
        );

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
}
