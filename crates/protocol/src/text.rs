//! memcached's classic text protocol: one request at the front of a buffer, parsed without
//! allocating. Keys and payloads borrow from the buffer.
//!
//! The rules follow memcached 1.6's `proto_text.c` (`try_read_command_ascii`,
//! `tokenize_command`, `process_command_ascii` and the `process_*_command` functions):
//!
//! - A line ends at `\n`; one `\r` before it is dropped, so a bare `\n` is accepted.
//! - Tokens are separated by spaces only; runs of spaces collapse. At most
//!   [`TOKENS_MAX`] tokens are looked at, so a line with more tokens than a command allows
//!   is refused with `ERROR` (memcached's `WANT_TOKENS`).
//! - A line with no newline within [`COMMAND_LINE_MAX_BYTES`] closes the connection,
//!   except `get`/`gets`, whose key lists may run to [`GET_COMMAND_LINE_MAX_BYTES`].
//! - A store's payload is read by its declared length and must be followed by `\r\n`;
//!   otherwise the line and `length + 2` bytes are dropped with `CLIENT_ERROR bad data
//!   chunk` (memcached reads exactly that many bytes before checking).
//! - A store whose item could never fit completes at the end of its line as
//!   [`TextRequest::StoreTooLarge`], so the payload is discarded as it arrives instead of
//!   being buffered.
//!
//! - `noreply` (the last token, memcached's `set_noreply_maybe`) silences every reply of
//!   the command, errors included: a `CLIENT_ERROR` found after the command was
//!   recognised becomes a [`Parsed::Invalid`] with an empty `reply` (memcached's
//!   `out_string` drops it). `ERROR` for an unknown command or a wrong token count is
//!   still sent, because memcached refuses those before it reads `noreply`; so are the
//!   errors of commands that have no `noreply` form (`gat`, `shutdown`, `slabs reassign`).
//!   A refused store line is not followed by a swallow of its payload, as in memcached, so
//!   the payload line is read as a command (`ERROR`).
//! - Numbers are read as memcached's `safe_strtoull`/`safe_strtol` read them (see
//!   `common::parse_u64`): an optional sign, leading zeros, and anything after a
//!   whitespace byte inside the token are accepted.
//!
//! Deliberate differences from memcached 1.6.18: keys with a NUL byte are refused
//! (`CLIENT_ERROR bad command line format`; see `common::is_valid_key`), and client flags
//! above 2^32 - 1 are refused instead of truncated.

use crate::common::{
    find_byte, find_byte_near, find_either_byte, is_valid_key, parse_i64, parse_u32, parse_u64,
    COMMAND_LINE_MAX_BYTES, KEY_LENGTH_MAX_BYTES,
};
use crate::Parsed;

/// A `get`/`gets` line may be this long (memcached lets multi-get lines grow without
/// bound; we stop at 1 MiB, about 4000 keys of 250 bytes). Longer lines close the
/// connection.
pub const GET_COMMAND_LINE_MAX_BYTES: usize = 1024 * 1024;

/// memcached's `MAX_TOKENS`: the tokenizer looks at no more than this many tokens,
/// counting the terminal one. Commands other than the gets never need more.
pub const TOKENS_MAX: usize = 24;

/// memcached's `MAX_VERBOSITY_LEVEL`.
pub const VERBOSITY_MAX: u32 = 2;

/// memcached only looks past this many leading spaces of an overlong line to decide that
/// it is not a multi-get.
const LEADING_SPACES_MAX_BYTES: usize = 100;

/// The largest declared payload length memcached accepts before `CLIENT_ERROR`
/// (`vlen > INT_MAX - 2`).
const VALUE_LENGTH_MAX_BYTES: i64 = i32::MAX as i64 - 2;

/// What the parser needs to know about the cache it parses for.
#[derive(Clone, Copy)]
pub struct TextLimits<'a> {
    /// Whether an item with this key length and value length (bytes) could ever be
    /// stored. A store that fails this completes as [`TextRequest::StoreTooLarge`] as
    /// soon as its command line is in, before its payload arrives.
    pub item_fits: &'a dyn Fn(usize, usize) -> bool,
}

impl std::fmt::Debug for TextLimits<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextLimits").finish_non_exhaustive()
    }
}

/// The storage commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCommand {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// `cas`: set only if the item's CAS still equals the one given.
    Cas,
}

/// The space-separated keys of a `get`/`gets`/`gat`/`gats` line, every one already
/// checked to be a valid key. Iterating yields them in order, duplicates included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a> {
    span: &'a [u8],
}

impl<'a> Keys<'a> {
    /// The raw span of the line that holds the keys (spaces included).
    pub fn raw(&self) -> &'a [u8] {
        self.span
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        KeyIter { rest: self.span }
    }
}

/// The space-separated keys of a span, empty ones skipped; `find_byte_near` finds each
/// end, eight bytes per step (keys are short: a vector search's set-up would cost more).
struct KeyIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for KeyIter<'a> {
    type Item = &'a [u8];

    // Always: called once a key (and once more at the end) of every retrieval, and as a
    // call a third of its cost was the call (docs/results/protocol-instruction-costs.md).
    #[inline(always)]
    fn next(&mut self) -> Option<&'a [u8]> {
        while let [b' ', tail @ ..] = self.rest {
            self.rest = tail;
        }
        if self.rest.is_empty() {
            return None;
        }
        let end = find_byte_near(self.rest, b' ').unwrap_or(self.rest.len());
        let (key, tail) = self.rest.split_at(end);
        self.rest = tail;
        Some(key)
    }
}

/// The space-separated arguments of an admin command after its name (and sub-command),
/// e.g. the kinds of `watch` or the class list of `lru_crawler metadump`. Unchecked:
/// the dispatcher knows which words it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Args<'a> {
    span: &'a [u8],
}

impl<'a> Args<'a> {
    /// Arguments over `span` (tests and dispatchers that build requests by hand).
    pub fn new(span: &'a [u8]) -> Self {
        Args { span }
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.span.split(|&b| b == b' ').filter(|k| !k.is_empty())
    }

    /// The argument at `index`.
    pub fn get(&self, index: usize) -> Option<&'a [u8]> {
        self.iter().nth(index)
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// `lru_crawler <sub-command> ...`: the sub-commands fogcached answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LruCrawlerCommand<'a> {
    /// `lru_crawler metadump <all|hash|class[,class...]>`.
    Metadump { classes: &'a [u8] },
    /// `lru_crawler crawl <all|class[,class...]>`.
    Crawl { classes: &'a [u8] },
    /// `lru_crawler enable`.
    Enable,
    /// `lru_crawler disable`.
    Disable,
    /// `lru_crawler sleep <microseconds>` (memcached's check of at most one second is
    /// the dispatcher's).
    Sleep { sleep_us: u32 },
    /// `lru_crawler tocrawl <items>`.
    Tocrawl { items: u32 },
}

/// An `lru tune` age factor: a number memcached reads with `strtod`, kept as its bits so
/// that requests stay comparable (`Eq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Factor(u64);

impl Factor {
    pub fn new(value: f64) -> Factor {
        Factor(value.to_bits())
    }

    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

/// `lru <sub-command> ...` (memcached 1.6's protocol.txt, "LRU tuning").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LruCommand {
    /// `lru tune <hot_pct> <warm_pct> <hot_max_factor> <warm_max_factor>`.
    Tune {
        hot_lru_pct: u32,
        warm_lru_pct: u32,
        hot_max_factor: Factor,
        warm_max_factor: Factor,
    },
    /// `lru mode flat|segmented`.
    Mode { segmented: bool },
    /// `lru temp_ttl <ttl>`: a negative ttl turns the temporary LRU off.
    TempTtl { ttl_s: i64 },
    /// Anything else, or numbers that do not parse: memcached answers `ERROR` (which
    /// `noreply` silences, as memcached's `set_noreply_maybe` runs first).
    Invalid,
}

/// `shutdown [graceful]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`.
    Immediate,
    /// `shutdown graceful`.
    Graceful,
    /// Any other argument: `CLIENT_ERROR invalid shutdown mode` if shutdown is enabled.
    /// (memcached first says whether shutdown is enabled at all, so the dispatcher
    /// decides which error to send.)
    Invalid,
}

/// One text-protocol request, borrowing keys and payload from the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextRequest<'a> {
    /// `set add replace append prepend cas` with the whole payload in the buffer.
    Store {
        command: StoreCommand,
        key: &'a [u8],
        client_flags: u32,
        exptime: i64,
        /// The CAS to compare (`cas` only; 0 for the other commands).
        cas_unique: u64,
        value: &'a [u8],
        noreply: bool,
    },
    /// A store whose item can never fit. Only the command line was consumed: reply
    /// `SERVER_ERROR object too large for cache`, unlink the old value for `set`, then
    /// discard the next `value_len + 2` bytes of input.
    StoreTooLarge {
        command: StoreCommand,
        key: &'a [u8],
        value_len: usize,
        noreply: bool,
    },
    /// `get gets gat gats`.
    Get {
        keys: Keys<'a>,
        /// `gets`/`gats`: print each item's CAS.
        return_cas: bool,
        /// `gat`/`gats`: the new exptime.
        touch_exptime: Option<i64>,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    /// `incr` / `decr`.
    Arith {
        key: &'a [u8],
        increment: bool,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`; `delay_s` is 0 when absent.
    FlushAll {
        delay_s: i64,
        noreply: bool,
    },
    /// `stats [group ...]`: `group` is the first argument, empty for plain `stats`;
    /// `args` the rest (`stats detail on`, `stats cachedump 1 10`), which most groups
    /// ignore, as memcached does.
    Stats {
        group: &'a [u8],
        args: Args<'a>,
    },
    /// `watch [kind ...]`: turn the connection into a log stream.
    Watch {
        kinds: Args<'a>,
    },
    LruCrawler {
        command: LruCrawlerCommand<'a>,
    },
    /// `lru tune|mode|temp_ttl ... [noreply]`.
    Lru {
        command: LruCommand,
        noreply: bool,
    },
    Version,
    /// `refresh_certs [noreply]`: reload the TLS certificates (`-Z`).
    RefreshCerts {
        noreply: bool,
    },
    /// `verbosity N [noreply]`; `level` is already capped at [`VERBOSITY_MAX`].
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    Shutdown {
        mode: ShutdownMode,
    },
    /// `slabs reassign <src> <dst>`.
    SlabsReassign {
        src_class: i32,
        dst_class: i32,
    },
    /// `slabs automove <0|1|2> [noreply]`.
    SlabsAutomove {
        level: u32,
        noreply: bool,
    },
    /// `cache_memlimit <megabytes> [noreply]`.
    CacheMemlimit {
        megabytes: u32,
        noreply: bool,
    },
}

const ERROR: &[u8] = b"ERROR\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_DATA_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
const BAD_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
/// memcached's reply to an exptime (or `flush_all` delay) that is not a number.
pub const BAD_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
const DELETE_USAGE: &[u8] =
    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";

/// Whether the buffer starts with a meta command (`mg ms md ma mn me`, after optional
/// spaces, followed by a space or the line end). Those lines belong to the meta parser.
pub fn is_meta_command(buf: &[u8]) -> bool {
    let start = buf.iter().take_while(|&&b| b == b' ').count();
    match buf.get(start..start + 3) {
        Some([b'm', second, third]) => {
            matches!(second, b'g' | b's' | b'd' | b'a' | b'n' | b'e')
                && matches!(third, b' ' | b'\r' | b'\n')
        }
        _ => false,
    }
}

/// Parses the request at the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &TextLimits<'_>) -> Parsed<TextRequest<'a>> {
    let newline_at = match find_line_end(buf) {
        LineEnd::Found(index) => index,
        LineEnd::Incomplete => return Parsed::Incomplete,
        LineEnd::TooLong => return close(),
    };
    let line_consumed = newline_at + 1;
    let mut line = &buf[..newline_at];
    if let [rest @ .., b'\r'] = line {
        line = rest;
    }
    // The common retrievals skip the tokenizer: their keys are the rest of the line.
    // (The span keeps the space after the command, as `parse_get`'s does.)
    if line.starts_with(b"get ") {
        return get_request(Keys { span: &line[3..] }, false, None, true, line_consumed);
    }
    if line.starts_with(b"gets ") {
        return get_request(Keys { span: &line[4..] }, true, None, true, line_consumed);
    }
    // So does the common store, in its usual shape.
    if let Some(parsed) = parse_plain_set(buf, line, line_consumed, limits) {
        return parsed;
    }
    let tokens = Tokens::new(line);
    let Some(command) = tokens.get(0).filter(|c| c.len() >= 2) else {
        return invalid(ERROR, line_consumed);
    };
    let ntokens = tokens.ntokens();
    match command {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => {
            parse_get(command, line, &tokens, line_consumed)
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            parse_store(buf, command, &tokens, line_consumed, limits)
        }
        b"delete" => parse_delete(&tokens, line_consumed),
        b"incr" | b"decr" => {
            if ntokens != 4 && ntokens != 5 {
                return invalid(ERROR, line_consumed);
            }
            let noreply = tokens.noreply();
            let Some(key) = tokens.key(1) else {
                return refuse(BAD_FORMAT, noreply, line_consumed);
            };
            let Some(delta) = parse_u64(tokens.get(2).unwrap_or(b"")) else {
                return refuse(BAD_DELTA, noreply, line_consumed);
            };
            complete(
                TextRequest::Arith {
                    key,
                    increment: command == b"incr",
                    delta,
                    noreply,
                },
                line_consumed,
            )
        }
        b"touch" => {
            if ntokens != 4 && ntokens != 5 {
                return invalid(ERROR, line_consumed);
            }
            let noreply = tokens.noreply();
            let Some(key) = tokens.key(1) else {
                return refuse(BAD_FORMAT, noreply, line_consumed);
            };
            let Some(exptime) = parse_i64(tokens.get(2).unwrap_or(b"")) else {
                return refuse(BAD_EXPTIME, noreply, line_consumed);
            };
            complete(
                TextRequest::Touch {
                    key,
                    exptime,
                    noreply,
                },
                line_consumed,
            )
        }
        b"flush_all" => {
            if !(2..=4).contains(&ntokens) {
                return invalid(ERROR, line_consumed);
            }
            let noreply = tokens.noreply();
            let delay_given = ntokens != if noreply { 3 } else { 2 };
            let delay_s = if delay_given {
                match parse_i64(tokens.get(1).unwrap_or(b"")) {
                    Some(delay_s) => delay_s,
                    None => return refuse(BAD_EXPTIME, noreply, line_consumed),
                }
            } else {
                0
            };
            complete(TextRequest::FlushAll { delay_s, noreply }, line_consumed)
        }
        b"stats" => complete(
            TextRequest::Stats {
                group: tokens.get(1).unwrap_or(b""),
                args: Args::new(tokens.get(1).map_or(b"", |group| rest_after(line, group))),
            },
            line_consumed,
        ),
        b"watch" => complete(
            TextRequest::Watch {
                kinds: Args::new(rest_after(line, command)),
            },
            line_consumed,
        ),
        b"lru_crawler" => {
            // memcached: exactly one argument after the sub-command.
            let command = match (tokens.get(1), tokens.get(2), ntokens) {
                (Some(b"metadump"), Some(classes), 4) => LruCrawlerCommand::Metadump { classes },
                (Some(b"crawl"), Some(classes), 4) => LruCrawlerCommand::Crawl { classes },
                (Some(b"enable"), _, 3) => LruCrawlerCommand::Enable,
                (Some(b"disable"), _, 3) => LruCrawlerCommand::Disable,
                (Some(b"sleep"), Some(number), 4) => match parse_u32(number) {
                    Some(sleep_us) => LruCrawlerCommand::Sleep { sleep_us },
                    None => return invalid(BAD_FORMAT, line_consumed),
                },
                (Some(b"tocrawl"), Some(number), 4) => match parse_u32(number) {
                    Some(items) => LruCrawlerCommand::Tocrawl { items },
                    None => return invalid(BAD_FORMAT, line_consumed),
                },
                _ => return invalid(ERROR, line_consumed),
            };
            complete(TextRequest::LruCrawler { command }, line_consumed)
        }
        b"lru" => {
            if ntokens < 3 {
                return invalid(ERROR, line_consumed);
            }
            complete(
                TextRequest::Lru {
                    command: parse_lru(&tokens),
                    noreply: tokens.noreply(),
                },
                line_consumed,
            )
        }
        b"version" => complete(TextRequest::Version, line_consumed),
        b"refresh_certs" => complete(
            TextRequest::RefreshCerts {
                noreply: tokens.noreply(),
            },
            line_consumed,
        ),
        b"quit" => complete(TextRequest::Quit, line_consumed),
        b"verbosity" => {
            if ntokens != 3 && ntokens != 4 {
                return invalid(ERROR, line_consumed);
            }
            let noreply = tokens.noreply();
            // `verbosity noreply` is level 0 without a reply: memcached reads the
            // level with strtoul, and libmemcached's memccapable relies on it.
            let level = match tokens.get(1) {
                Some(b"noreply") if ntokens == 3 => 0,
                token => match parse_u32(token.unwrap_or(b"")) {
                    Some(level) => level,
                    None => return refuse(BAD_FORMAT, noreply, line_consumed),
                },
            };
            complete(
                TextRequest::Verbosity {
                    level: level.min(VERBOSITY_MAX),
                    noreply,
                },
                line_consumed,
            )
        }
        b"shutdown" => {
            let mode = match (ntokens, tokens.get(1)) {
                (2, _) => ShutdownMode::Immediate,
                (3, Some(b"graceful")) => ShutdownMode::Graceful,
                _ => ShutdownMode::Invalid,
            };
            complete(TextRequest::Shutdown { mode }, line_consumed)
        }
        b"slabs" => parse_slabs(&tokens, line_consumed),
        b"cache_memlimit" => {
            if ntokens != 3 && ntokens != 4 {
                return invalid(ERROR, line_consumed);
            }
            let noreply = tokens.noreply();
            match parse_u32(tokens.get(1).unwrap_or(b"")) {
                Some(megabytes) => complete(
                    TextRequest::CacheMemlimit { megabytes, noreply },
                    line_consumed,
                ),
                None => refuse(ERROR, noreply, line_consumed),
            }
        }
        _ => {
            // memcached hangs up on what looks like an HTTP request line.
            if tokens.last().is_some_and(|t| t.starts_with(b"HTTP/")) {
                return close();
            }
            invalid(ERROR, line_consumed)
        }
    }
}

/// Room for ` <flags> <bytes> <cas>\r\n` at their longest (1 + 10 + 1 + 20 + 1 + 20 + 2
/// bytes), rounded up to a whole number of vector moves.
const VALUE_LINE_TAIL_BYTES: usize = 64;

/// Appends a hit's header line, `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, and makes room
/// for `then_bytes` more (the value and its `\r\n`), with one capacity check for all.
///
/// The numbers are formatted backwards into the first half of a stack buffer, ending at
/// its middle, and the tail is appended as the 64 bytes from where it starts (the second
/// half is slack for that copy), then cut back to its length: a copy of a constant size
/// is a few vector moves, where one of each number's length was a call of `memcpy`
/// (two a hit), and writing backwards needs no digit count. Always inlined (once a hit),
/// as the call's set-up cost about as much as the copies (figures:
/// docs/results/protocol-instruction-costs.md).
#[inline(always)]
pub fn push_value_line(
    out: &mut Vec<u8>,
    key: &[u8],
    client_flags: u32,
    value_bytes: usize,
    cas: Option<u64>,
    then_bytes: usize,
) {
    let mut buf = [0u8; 2 * VALUE_LINE_TAIL_BYTES];
    let mut start = VALUE_LINE_TAIL_BYTES - 2;
    buf[start] = b'\r';
    buf[start + 1] = b'\n';
    if let Some(cas) = cas {
        start = put_spaced_decimal_before(&mut buf, start, cas);
    }
    start = put_spaced_decimal_before(&mut buf, start, value_bytes as u64);
    start = put_spaced_decimal_before(&mut buf, start, u64::from(client_flags));
    let tail_len = VALUE_LINE_TAIL_BYTES - start;
    let Some(tail) = buf[start..].first_chunk::<VALUE_LINE_TAIL_BYTES>() else {
        // Unreachable: three numbers of at most 20 digits leave `start` above 0.
        debug_assert!(false, "a value line tail of {tail_len} bytes");
        return;
    };
    out.reserve(b"VALUE ".len() + key.len() + VALUE_LINE_TAIL_BYTES + then_bytes);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    let tail_start = out.len();
    out.extend_from_slice(tail);
    out.truncate(tail_start + tail_len);
}

/// The two digits of every number below 100, in order.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Writes ` <n>` into `buf` just before `end`; returns where it starts. Two digits a step
/// (a 4-digit length took four divisions): a reply's every hit formats two numbers.
#[inline]
fn put_spaced_decimal_before(
    buf: &mut [u8; 2 * VALUE_LINE_TAIL_BYTES],
    end: usize,
    n: u64,
) -> usize {
    let mut at = end;
    let mut rest = n;
    while rest >= 100 {
        let pair = (rest % 100) as usize * 2;
        rest /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if rest >= 10 {
        let pair = rest as usize * 2;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        buf[at] = b'0' + rest as u8;
    }
    at -= 1;
    buf[at] = b' ';
    at
}

/// `lru tune|mode|temp_ttl ...`, read as memcached's `process_lru_command` reads it:
/// extra tokens after the ones it needs are ignored.
fn parse_lru(tokens: &Tokens<'_>) -> LruCommand {
    let ntokens = tokens.ntokens();
    let token = |index| tokens.get(index).unwrap_or(b"");
    match tokens.get(1) {
        Some(b"tune") if ntokens >= 7 => {
            let (Some(hot), Some(warm), Some(hot_factor), Some(warm_factor)) = (
                parse_u32(token(2)),
                parse_u32(token(3)),
                parse_f64(token(4)),
                parse_f64(token(5)),
            ) else {
                return LruCommand::Invalid;
            };
            LruCommand::Tune {
                hot_lru_pct: hot,
                warm_lru_pct: warm,
                hot_max_factor: Factor::new(hot_factor),
                warm_max_factor: Factor::new(warm_factor),
            }
        }
        Some(b"mode") if ntokens >= 4 => match token(2) {
            b"flat" => LruCommand::Mode { segmented: false },
            b"segmented" => LruCommand::Mode { segmented: true },
            _ => LruCommand::Invalid,
        },
        Some(b"temp_ttl") if ntokens >= 4 => match parse_i64(token(2)) {
            Some(ttl_s) => LruCommand::TempTtl { ttl_s },
            None => LruCommand::Invalid,
        },
        _ => LruCommand::Invalid,
    }
}

/// A decimal number as C's `strtod` reads one whole token (`1e-3`, `inf` and `nan`
/// included; hexadecimal floats are not read).
fn parse_f64(token: &[u8]) -> Option<f64> {
    std::str::from_utf8(token).ok()?.parse().ok()
}

/// The part of `line` after `token`, which is a sub-slice of it.
fn rest_after<'a>(line: &'a [u8], token: &'a [u8]) -> &'a [u8] {
    let end = (token.as_ptr() as usize - line.as_ptr() as usize) + token.len();
    line.get(end..).unwrap_or(b"")
}

enum LineEnd {
    /// Index of the `\n`.
    Found(usize),
    Incomplete,
    TooLong,
}

fn find_newline(bytes: &[u8]) -> Option<usize> {
    find_byte(bytes, b'\n')
}

/// Finds the end of the command line, applying memcached's 2048-byte rule.
fn find_line_end(buf: &[u8]) -> LineEnd {
    let window = &buf[..buf.len().min(COMMAND_LINE_MAX_BYTES + 1)];
    if let Some(index) = find_newline(window) {
        return LineEnd::Found(index);
    }
    if buf.len() <= COMMAND_LINE_MAX_BYTES {
        return LineEnd::Incomplete;
    }
    // No newline in the first 2048 bytes: only a long multi-get may go on.
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    if spaces > LEADING_SPACES_MAX_BYTES
        || !(rest.starts_with(b"get ") || rest.starts_with(b"gets "))
    {
        return LineEnd::TooLong;
    }
    let window = &buf[..buf.len().min(GET_COMMAND_LINE_MAX_BYTES + 1)];
    // The first 2048 bytes were already searched.
    match find_newline(&window[COMMAND_LINE_MAX_BYTES + 1..]) {
        Some(index) => LineEnd::Found(COMMAND_LINE_MAX_BYTES + 1 + index),
        None if buf.len() > GET_COMMAND_LINE_MAX_BYTES => LineEnd::TooLong,
        None => LineEnd::Incomplete,
    }
}

/// Tokens a [`Tokens`] keeps at hand; later ones (no command reads one) are found again
/// when asked for.
const TOKENS_KEPT: usize = 8;

/// The first tokens of a line, split on spaces the way memcached's `tokenize_command`
/// does: at most `TOKENS_MAX - 1` of them are counted. The first [`TOKENS_KEPT`] are kept,
/// and the last: a command line has at most eight tokens, and keeping (and initialising,
/// and moving) room for all twenty-three was a measurable share of a SET
/// (docs/results/protocol-instruction-costs.md).
struct Tokens<'a> {
    line: &'a [u8],
    kept: [&'a [u8]; TOKENS_KEPT],
    count: usize,
    last: Option<&'a [u8]>,
}

impl<'a> Tokens<'a> {
    #[inline]
    fn new(line: &'a [u8]) -> Self {
        let mut kept: [&'a [u8]; TOKENS_KEPT] = [b""; TOKENS_KEPT];
        let mut count = 0;
        let mut last = None;
        let mut rest = line;
        loop {
            while let [b' ', tail @ ..] = rest {
                rest = tail;
            }
            if rest.is_empty() || count == TOKENS_MAX - 1 {
                break;
            }
            // Eight bytes a step: tokens are short, and this was a byte-by-byte split.
            let end = find_byte_near(rest, b' ').unwrap_or(rest.len());
            let (token, tail) = rest.split_at(end);
            if let Some(slot) = kept.get_mut(count) {
                *slot = token;
            }
            last = Some(token);
            count += 1;
            rest = tail;
        }
        Tokens {
            line,
            kept,
            count,
            last,
        }
    }

    /// memcached's `ntokens`: the real tokens plus the terminal one.
    fn ntokens(&self) -> usize {
        self.count + 1
    }

    fn get(&self, index: usize) -> Option<&'a [u8]> {
        if index >= self.count {
            return None;
        }
        match self.kept.get(index) {
            Some(token) => Some(token),
            // Beyond the kept ones (no command asks): split the line again.
            None => self
                .line
                .split(|&b| b == b' ')
                .filter(|t| !t.is_empty())
                .nth(index),
        }
    }

    fn last(&self) -> Option<&'a [u8]> {
        self.last
    }

    /// memcached's `set_noreply_maybe`: the last token is `noreply`.
    fn noreply(&self) -> bool {
        self.last() == Some(b"noreply")
    }

    /// The token at `index` if it is a valid key.
    fn key(&self, index: usize) -> Option<&'a [u8]> {
        self.get(index).filter(|k| is_valid_key(k))
    }
}

fn complete(request: TextRequest<'_>, consumed: usize) -> Parsed<TextRequest<'_>> {
    Parsed::Complete { request, consumed }
}

fn invalid<R>(reply: &'static [u8], consumed: usize) -> Parsed<R> {
    Parsed::Invalid {
        reply,
        consumed,
        swallow_bytes: 0,
        close: false,
    }
}

/// An error found after the command was recognised and its `noreply` read: memcached's
/// `out_string` drops every reply of a `noreply` command, errors included.
fn refuse<R>(reply: &'static [u8], noreply: bool, consumed: usize) -> Parsed<R> {
    invalid(if noreply { b"" } else { reply }, consumed)
}

/// Hostile or hopeless input: close without a reply, as memcached does.
fn close<R>() -> Parsed<R> {
    Parsed::Invalid {
        reply: b"",
        consumed: 0,
        swallow_bytes: 0,
        close: true,
    }
}

fn parse_get<'a>(
    command: &[u8],
    line: &'a [u8],
    tokens: &Tokens<'a>,
    line_consumed: usize,
) -> Parsed<TextRequest<'a>> {
    if tokens.ntokens() < 3 {
        return invalid(ERROR, line_consumed);
    }
    let touch = command == b"gat" || command == b"gats";
    let return_cas = command == b"gets" || command == b"gats";
    // Skip the command (and the exptime of gat/gats); the keys are the rest of the line,
    // which may hold far more tokens than the tokenizer kept.
    let skip_tokens = if touch { 2 } else { 1 };
    let mut rest = line;
    for _ in 0..skip_tokens {
        let start = rest.iter().take_while(|&&b| b == b' ').count();
        let end = rest[start..]
            .iter()
            .position(|&b| b == b' ')
            .map_or(rest.len(), |i| start + i);
        rest = &rest[end..];
    }
    let touch_exptime = if touch {
        match parse_i64(tokens.get(1).unwrap_or(b"")) {
            Some(exptime) => Some(exptime),
            None => return invalid(BAD_EXPTIME, line_consumed),
        }
    } else {
        None
    };
    // `ntokens` was checked above (a `gat` with its exptime and no key is valid).
    get_request(
        Keys { span: rest },
        return_cas,
        touch_exptime,
        false,
        line_consumed,
    )
}

/// A retrieval of `keys`: `ERROR` without a key when `key_required` (memcached's
/// `ntokens < 3` for `get`/`gets`), `CLIENT_ERROR bad command line format` if any key is
/// invalid (memcached answers only the error, even when earlier keys were hits), else the
/// request.
fn get_request<'a>(
    keys: Keys<'a>,
    return_cas: bool,
    touch_exptime: Option<i64>,
    key_required: bool,
    line_consumed: usize,
) -> Parsed<TextRequest<'a>> {
    // One pass over the keys for their lengths, one vector search for the bytes no key
    // may hold (`is_valid_key`'s rule: a line holds no `\n`, and keys no space). No key is
    // longer than the span that holds it: a span within the key limit (a `get` of one
    // key or of ten short ones) needs no pass over its keys, only a look for one.
    let mut any_key = false;
    if keys.span.len() <= KEY_LENGTH_MAX_BYTES {
        any_key = keys.span.iter().any(|&b| b != b' ');
    } else {
        for key in keys.iter() {
            if key.len() > KEY_LENGTH_MAX_BYTES {
                return invalid(BAD_FORMAT, line_consumed);
            }
            any_key = true;
        }
    }
    if key_required && !any_key {
        return invalid(ERROR, line_consumed);
    }
    if find_either_byte(keys.span, b'\r', 0).is_some() {
        return invalid(BAD_FORMAT, line_consumed);
    }
    complete(
        TextRequest::Get {
            keys,
            return_cas,
            touch_exptime,
        },
        line_consumed,
    )
}

fn parse_store<'a>(
    buf: &'a [u8],
    command_name: &[u8],
    tokens: &Tokens<'a>,
    line_consumed: usize,
    limits: &TextLimits<'_>,
) -> Parsed<TextRequest<'a>> {
    let command = match command_name {
        b"set" => StoreCommand::Set,
        b"add" => StoreCommand::Add,
        b"replace" => StoreCommand::Replace,
        b"append" => StoreCommand::Append,
        b"prepend" => StoreCommand::Prepend,
        _ => StoreCommand::Cas,
    };
    let ntokens = tokens.ntokens();
    let token_counts = if command == StoreCommand::Cas {
        [7, 8]
    } else {
        [6, 7]
    };
    if !token_counts.contains(&ntokens) {
        return invalid(ERROR, line_consumed);
    }
    let noreply = tokens.noreply();
    let Some(key) = tokens.key(1) else {
        return refuse(BAD_FORMAT, noreply, line_consumed);
    };
    let client_flags = parse_u32(tokens.get(2).unwrap_or(b""));
    let exptime = parse_i64(tokens.get(3).unwrap_or(b""));
    let value_len = parse_i64(tokens.get(4).unwrap_or(b""));
    let (Some(client_flags), Some(exptime), Some(value_len)) = (client_flags, exptime, value_len)
    else {
        return refuse(BAD_FORMAT, noreply, line_consumed);
    };
    let cas_unique = if command == StoreCommand::Cas {
        match parse_u64(tokens.get(5).unwrap_or(b"")) {
            Some(cas) => cas,
            None => return refuse(BAD_FORMAT, noreply, line_consumed),
        }
    } else {
        0
    };
    if !(0..=VALUE_LENGTH_MAX_BYTES).contains(&value_len) {
        return refuse(BAD_FORMAT, noreply, line_consumed);
    }
    let Ok(value_len) = usize::try_from(value_len) else {
        return refuse(BAD_FORMAT, noreply, line_consumed);
    };
    let fields = StoreFields {
        command,
        key,
        client_flags,
        exptime,
        cas_unique,
        value_len,
        noreply,
    };
    store_payload(buf, fields, line_consumed, limits)
}

/// A store's command line, read.
struct StoreFields<'a> {
    command: StoreCommand,
    key: &'a [u8],
    client_flags: u32,
    exptime: i64,
    cas_unique: u64,
    value_len: usize,
    noreply: bool,
}

/// `set <key> <flags> <exptime> <bytes>` with single spaces, a valid key and plain digits
/// (what clients send), read in one pass over the line; `None` for any other line, which
/// the tokenizer and [`parse_store`] read (with the same outcome for the lines this
/// takes: `parse_store` finds six tokens, no `noreply`, a valid key and numbers in
/// range). Tokenizing a SET line and reading its tokens again cost several times this
/// one pass (docs/results/protocol-instruction-costs.md).
#[inline]
fn parse_plain_set<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    line_consumed: usize,
    limits: &TextLimits<'_>,
) -> Option<Parsed<TextRequest<'a>>> {
    let rest = line.strip_prefix(b"set ")?;
    let key_len = find_byte_near(rest, b' ')?;
    let (key, rest) = rest.split_at(key_len);
    // The key has no space (it ends at the first); `is_valid_key`'s other rules.
    if key.is_empty()
        || key.len() > KEY_LENGTH_MAX_BYTES
        || key.iter().any(|&b| b == b'\r' || b == 0)
    {
        return None;
    }
    let (client_flags, rest) = plain_number(&rest[1..])?;
    let (exptime, rest) = plain_number(rest.strip_prefix(b" ")?)?;
    let (value_len, rest) = plain_number(rest.strip_prefix(b" ")?)?;
    if !rest.is_empty() || value_len > VALUE_LENGTH_MAX_BYTES as u64 {
        return None;
    }
    let fields = StoreFields {
        command: StoreCommand::Set,
        key,
        client_flags: u32::try_from(client_flags).ok()?,
        exptime: exptime as i64,
        cas_unique: 0,
        value_len: value_len as usize,
        noreply: false,
    };
    Some(store_payload(buf, fields, line_consumed, limits))
}

/// The digits at the front of `bytes` (one to [`PLAIN_DIGITS_MAX`], so no overflow) and
/// what follows them.
#[inline]
fn plain_number(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let digits = bytes
        .iter()
        .take(PLAIN_DIGITS_MAX + 1)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || digits > PLAIN_DIGITS_MAX {
        return None;
    }
    let value = bytes[..digits]
        .iter()
        .fold(0u64, |value, &d| value * 10 + u64::from(d - b'0'));
    Some((value, &bytes[digits..]))
}

/// Digits [`plain_number`] reads: any such number fits an i64.
const PLAIN_DIGITS_MAX: usize = 18;

/// The rest of a store once its command line is read: refused if the item could never
/// fit (its payload is swallowed as it comes), incomplete until the payload and its
/// `\r\n` are in, refused if they are not followed by `\r\n`.
#[inline]
fn store_payload<'a>(
    buf: &'a [u8],
    fields: StoreFields<'a>,
    line_consumed: usize,
    limits: &TextLimits<'_>,
) -> Parsed<TextRequest<'a>> {
    let StoreFields {
        command,
        key,
        client_flags,
        exptime,
        cas_unique,
        value_len,
        noreply,
    } = fields;
    if !(limits.item_fits)(key.len(), value_len) {
        return complete(
            TextRequest::StoreTooLarge {
                command,
                key,
                value_len,
                noreply,
            },
            line_consumed,
        );
    }
    let value_end = line_consumed + value_len;
    let Some(terminator) = buf.get(value_end..value_end + 2) else {
        return Parsed::Incomplete;
    };
    if terminator != b"\r\n" {
        return refuse(BAD_DATA_CHUNK, noreply, value_end + 2);
    }
    complete(
        TextRequest::Store {
            command,
            key,
            client_flags,
            exptime,
            cas_unique,
            value: &buf[line_consumed..value_end],
            noreply,
        },
        value_end + 2,
    )
}

fn parse_delete<'a>(tokens: &Tokens<'a>, line_consumed: usize) -> Parsed<TextRequest<'a>> {
    let ntokens = tokens.ntokens();
    if !(3..=5).contains(&ntokens) {
        return invalid(ERROR, line_consumed);
    }
    let mut noreply = false;
    if ntokens > 3 {
        // memcached still accepts the old `delete <key> 0` (a zero hold time).
        let hold_is_zero = tokens.get(2) == Some(b"0");
        noreply = tokens.noreply();
        let valid = (ntokens == 4 && (hold_is_zero || noreply))
            || (ntokens == 5 && hold_is_zero && noreply);
        if !valid {
            return refuse(DELETE_USAGE, noreply, line_consumed);
        }
    }
    let Some(key) = tokens.key(1) else {
        return refuse(BAD_FORMAT, noreply, line_consumed);
    };
    complete(TextRequest::Delete { key, noreply }, line_consumed)
}

fn parse_slabs<'a>(tokens: &Tokens<'a>, line_consumed: usize) -> Parsed<TextRequest<'a>> {
    let ntokens = tokens.ntokens();
    match tokens.get(1) {
        Some(b"reassign") if ntokens == 5 => {
            let src = parse_i64(tokens.get(2).unwrap_or(b"")).and_then(|v| i32::try_from(v).ok());
            let dst = parse_i64(tokens.get(3).unwrap_or(b"")).and_then(|v| i32::try_from(v).ok());
            match (src, dst) {
                (Some(src_class), Some(dst_class)) => complete(
                    TextRequest::SlabsReassign {
                        src_class,
                        dst_class,
                    },
                    line_consumed,
                ),
                _ => invalid(BAD_FORMAT, line_consumed),
            }
        }
        Some(b"automove") if ntokens >= 4 => {
            let noreply = tokens.noreply();
            match parse_u32(tokens.get(2).unwrap_or(b"")) {
                Some(level @ 0..=2) => {
                    complete(TextRequest::SlabsAutomove { level, noreply }, line_consumed)
                }
                // `slabs automove ratio <r>` tunes a knob fogcached does not have.
                Some(_) => refuse(ERROR, noreply, line_consumed),
                None if tokens.get(2) == Some(b"ratio") => refuse(ERROR, noreply, line_consumed),
                None => refuse(BAD_FORMAT, noreply, line_consumed),
            }
        }
        _ => invalid(ERROR, line_consumed),
    }
}

#[cfg(test)]
mod tests;
