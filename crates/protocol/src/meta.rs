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
mod tests;
