//! memcached's binary protocol: 24-byte big-endian headers, magic 0x80 on requests and
//! 0x81 on responses, then extras, key and value.
//!
//! [`parse`] looks at the front of a buffer and answers with one [`BinaryRequest`] whose
//! key and value borrow from the buffer. It validates the lengths per opcode exactly as
//! memcached 1.6's `dispatch_bin_command` does: a length that does not fit the opcode is a
//! [`Command::ProtocolError`] (memcached replies and closes the connection), a bad magic
//! byte closes the connection without a reply, and a store whose value is larger than
//! [`BinaryLimits::value_max_bytes`] completes as soon as its key is known
//! ([`Command::StoreTooLarge`]) so that the value is swallowed, never buffered.
//!
//! The `encode_*` functions append responses to an output `Vec` and allocate nothing else.

use crate::common::KEY_LENGTH_MAX_BYTES;
use crate::Parsed;

/// First byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Size of the fixed header of requests and responses.
pub const HEADER_BYTES: usize = 24;
/// `incr`/`decr` with this expiration do not create a missing counter.
pub const ARITH_EXPTIME_NO_CREATE: u32 = 0xffff_ffff;

/// Extras of `set`/`add`/`replace`: flags (4) and expiration (4).
const STORE_EXTRAS_BYTES: usize = 8;
/// Extras of `incr`/`decr`: delta (8), initial value (8), expiration (4).
const ARITH_EXTRAS_BYTES: usize = 20;
/// Extras of `touch`/`gat*` and the optional extras of `flush`: expiration (4).
const EXPTIME_EXTRAS_BYTES: usize = 4;

/// The opcodes fogcached implements (memcached 1.6's set, minus SASL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    Get = 0x00,
    Set = 0x01,
    Add = 0x02,
    Replace = 0x03,
    Delete = 0x04,
    Increment = 0x05,
    Decrement = 0x06,
    Quit = 0x07,
    Flush = 0x08,
    GetQ = 0x09,
    Noop = 0x0a,
    Version = 0x0b,
    GetK = 0x0c,
    GetKQ = 0x0d,
    Append = 0x0e,
    Prepend = 0x0f,
    Stat = 0x10,
    SetQ = 0x11,
    AddQ = 0x12,
    ReplaceQ = 0x13,
    DeleteQ = 0x14,
    IncrementQ = 0x15,
    DecrementQ = 0x16,
    QuitQ = 0x17,
    FlushQ = 0x18,
    AppendQ = 0x19,
    PrependQ = 0x1a,
    Touch = 0x1c,
    Gat = 0x1d,
    GatQ = 0x1e,
    GatK = 0x23,
    GatKQ = 0x24,
}

/// SASL opcodes: memcached without SASL validates their lengths, then answers
/// "Unknown command".
const SASL_LIST_MECHS: u8 = 0x20;
const SASL_AUTH: u8 = 0x21;
const SASL_STEP: u8 = 0x22;

impl Opcode {
    /// Maps a wire opcode. `verbosity` (0x1b) is deliberately absent: memcached 1.6
    /// answers it with "Unknown command".
    pub fn from_u8(byte: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match byte {
            0x00 => Get,
            0x01 => Set,
            0x02 => Add,
            0x03 => Replace,
            0x04 => Delete,
            0x05 => Increment,
            0x06 => Decrement,
            0x07 => Quit,
            0x08 => Flush,
            0x09 => GetQ,
            0x0a => Noop,
            0x0b => Version,
            0x0c => GetK,
            0x0d => GetKQ,
            0x0e => Append,
            0x0f => Prepend,
            0x10 => Stat,
            0x11 => SetQ,
            0x12 => AddQ,
            0x13 => ReplaceQ,
            0x14 => DeleteQ,
            0x15 => IncrementQ,
            0x16 => DecrementQ,
            0x17 => QuitQ,
            0x18 => FlushQ,
            0x19 => AppendQ,
            0x1a => PrependQ,
            0x1c => Touch,
            0x1d => Gat,
            0x1e => GatQ,
            0x23 => GatK,
            0x24 => GatKQ,
            _ => return None,
        })
    }
}

/// Response status codes, with the text memcached puts in the body of an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    NoError = 0x0000,
    KeyNotFound = 0x0001,
    KeyExists = 0x0002,
    TooLarge = 0x0003,
    InvalidArguments = 0x0004,
    NotStored = 0x0005,
    NonNumeric = 0x0006,
    /// SASL (`-S`): authentication failed, or a command came before it succeeded.
    AuthError = 0x0020,
    /// SASL: the mechanism needs another step (`SASL_STEP`).
    AuthContinue = 0x0021,
    UnknownCommand = 0x0081,
    OutOfMemory = 0x0082,
    /// memcached's `PROTOCOL_BINARY_RESPONSE_ETMPFAIL`: fogcached's edge sends it for a
    /// write its upstream did not answer (`--upstream`).
    TemporaryFailure = 0x0086,
}

impl Status {
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The body memcached's `write_bin_error` sends with this status.
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::NoError => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::AuthContinue => b"",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
            Status::TemporaryFailure => b"Temporary failure",
        }
    }
}

/// Limits the parser needs from the server's configuration.
#[derive(Clone, Copy, Debug)]
pub struct BinaryLimits {
    /// A store whose value is longer than this can never fit (memcached's `-I`), so it
    /// completes at its key with [`Command::StoreTooLarge`] instead of being buffered.
    pub value_max_bytes: usize,
}

/// The fixed request header, in host byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// The raw opcode byte (echoed in the response, even when unknown).
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub data_type: u8,
    pub vbucket: u16,
    pub body_len: u32,
    /// Echoed unchanged in every response to this request.
    pub opaque: u32,
    /// Compare-and-swap value; 0 means "no CAS".
    pub cas: u64,
}

impl RequestHeader {
    pub(crate) fn decode(bytes: &[u8; HEADER_BYTES]) -> RequestHeader {
        RequestHeader {
            opcode: bytes[1],
            key_len: u16::from_be_bytes([bytes[2], bytes[3]]),
            extras_len: bytes[4],
            data_type: bytes[5],
            vbucket: u16::from_be_bytes([bytes[6], bytes[7]]),
            body_len: u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
            opaque: u32::from_be_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
            cas: u64::from_be_bytes([
                bytes[16], bytes[17], bytes[18], bytes[19], bytes[20], bytes[21], bytes[22],
                bytes[23],
            ]),
        }
    }
}

/// How a store treats an existing item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// One parsed request: the header (for opaque, CAS and the opcode to echo) and what to do.
#[derive(Debug, PartialEq)]
pub struct BinaryRequest<'a> {
    pub header: RequestHeader,
    pub command: Command<'a>,
}

/// What a request asks for. `quiet` is set for the `*Q` opcodes, which send no reply on
/// success (and, for the gets, none on a miss either).
#[derive(Debug, PartialEq)]
pub enum Command<'a> {
    /// `get getq getk getkq`.
    Get {
        key: &'a [u8],
        return_key: bool,
        quiet: bool,
    },
    /// `gat gatq gatk gatkq`: get and update the expiration time.
    GetAndTouch {
        key: &'a [u8],
        exptime: u32,
        return_key: bool,
        quiet: bool,
    },
    /// `touch`: update the expiration time; the reply carries the flags but no value.
    Touch {
        key: &'a [u8],
        exptime: u32,
    },
    /// `set add replace append prepend` and their quiet forms. Append and prepend carry
    /// no extras, so their flags and exptime are 0.
    Store {
        kind: StoreKind,
        key: &'a [u8],
        value: &'a [u8],
        flags: u32,
        exptime: u32,
        quiet: bool,
    },
    /// A store whose value can never fit. Only the header, extras and key were consumed;
    /// the next `value_len` bytes must be discarded as they arrive.
    StoreTooLarge {
        kind: StoreKind,
        key: &'a [u8],
        value_len: usize,
        quiet: bool,
    },
    /// `delete deleteq`.
    Delete {
        key: &'a [u8],
        quiet: bool,
    },
    /// `incr decr incrq decrq`. `exptime == ARITH_EXPTIME_NO_CREATE` means a missing
    /// counter is not created.
    Arith {
        increment: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
        quiet: bool,
    },
    /// `flush flushq`; `exptime` is 0 when no extras were sent.
    Flush {
        exptime: u32,
        quiet: bool,
    },
    Noop,
    Version,
    /// `stat [group]`; the key names the group (empty for the general statistics).
    Stat {
        group: &'a [u8],
    },
    /// `quit quitq`: reply (unless quiet), then close.
    Quit {
        quiet: bool,
    },
    /// An opcode memcached does not implement. Only the header was consumed; the next
    /// `swallow_bytes` bytes (the body) must be discarded.
    Unknown {
        swallow_bytes: usize,
    },
    /// Lengths that do not fit the opcode: reply with `status`, then close the
    /// connection, as memcached does.
    ProtocolError {
        status: Status,
    },
}

impl Command<'_> {
    /// Whether the connection must be closed after this request's reply.
    pub fn closes_connection(&self) -> bool {
        matches!(self, Command::Quit { .. } | Command::ProtocolError { .. })
    }
}

/// Parses the request at the front of `buf`.
///
/// Returns `Incomplete` until the header, extras and key (and, for a store that fits, the
/// value) are all buffered. A first byte other than 0x80 is `Invalid` with an empty reply
/// and `close`, since memcached drops such a connection without answering.
pub fn parse<'a>(buf: &'a [u8], limits: &BinaryLimits) -> Parsed<BinaryRequest<'a>> {
    let Some(header_bytes) = buf.first_chunk::<HEADER_BYTES>() else {
        return Parsed::Incomplete;
    };
    if header_bytes[0] != REQUEST_MAGIC {
        return Parsed::Invalid {
            reply: b"",
            consumed: 0,
            swallow_bytes: 0,
            close: true,
        };
    }
    let header = RequestHeader::decode(header_bytes);
    let key_len = usize::from(header.key_len);
    let extras_len = usize::from(header.extras_len);
    // u32 always fits usize on the 64-bit targets fogcached supports; saturating keeps a
    // hypothetical 16-bit build from wrapping.
    let body_len = usize::try_from(header.body_len).unwrap_or(usize::MAX);

    // memcached checks these two before looking at the opcode, and closes after replying.
    // It would first wait for the extras and key to arrive; the reply is the same.
    if key_len + extras_len > body_len {
        return complete_at_header(
            header,
            Command::ProtocolError {
                status: Status::UnknownCommand,
            },
        );
    }
    if key_len > KEY_LENGTH_MAX_BYTES {
        return complete_at_header(
            header,
            Command::ProtocolError {
                status: Status::InvalidArguments,
            },
        );
    }

    let Some(opcode) = Opcode::from_u8(header.opcode) else {
        return parse_unknown(header, key_len, extras_len, body_len);
    };
    if !lengths_fit(opcode, key_len, extras_len, body_len) {
        return complete_at_header(
            header,
            Command::ProtocolError {
                status: Status::InvalidArguments,
            },
        );
    }

    // Every command below except the stores uses only the extras and key: for the ones
    // memcached does not check `body_len` on (stat, touch, gat), bytes beyond the key are
    // read as the next request, exactly as memcached reads them.
    let key_end = HEADER_BYTES + extras_len + key_len;
    if buf.len() < key_end {
        return Parsed::Incomplete;
    }
    let extras = &buf[HEADER_BYTES..HEADER_BYTES + extras_len];
    let key = &buf[HEADER_BYTES + extras_len..key_end];

    use Opcode::*;
    let command = match opcode {
        Get | GetQ | GetK | GetKQ => Command::Get {
            key,
            return_key: matches!(opcode, GetK | GetKQ),
            quiet: matches!(opcode, GetQ | GetKQ),
        },
        Gat | GatQ | GatK | GatKQ => Command::GetAndTouch {
            key,
            exptime: be_u32(extras, 0),
            return_key: matches!(opcode, GatK | GatKQ),
            quiet: matches!(opcode, GatQ | GatKQ),
        },
        Touch => Command::Touch {
            key,
            exptime: be_u32(extras, 0),
        },
        Set | SetQ | Add | AddQ | Replace | ReplaceQ | Append | AppendQ | Prepend | PrependQ => {
            let (kind, quiet) = match opcode {
                Set => (StoreKind::Set, false),
                SetQ => (StoreKind::Set, true),
                Add => (StoreKind::Add, false),
                AddQ => (StoreKind::Add, true),
                Replace => (StoreKind::Replace, false),
                ReplaceQ => (StoreKind::Replace, true),
                Append => (StoreKind::Append, false),
                AppendQ => (StoreKind::Append, true),
                Prepend => (StoreKind::Prepend, false),
                _ => (StoreKind::Prepend, true),
            };
            let value_len = body_len - extras_len - key_len;
            if value_len > limits.value_max_bytes {
                return Parsed::Complete {
                    request: BinaryRequest {
                        header,
                        command: Command::StoreTooLarge {
                            kind,
                            key,
                            value_len,
                            quiet,
                        },
                    },
                    consumed: key_end,
                };
            }
            let Some(value) = buf.get(key_end..key_end + value_len) else {
                return Parsed::Incomplete;
            };
            let (flags, exptime) = if extras.len() == STORE_EXTRAS_BYTES {
                (be_u32(extras, 0), be_u32(extras, 4))
            } else {
                (0, 0)
            };
            return Parsed::Complete {
                request: BinaryRequest {
                    header,
                    command: Command::Store {
                        kind,
                        key,
                        value,
                        flags,
                        exptime,
                        quiet,
                    },
                },
                consumed: key_end + value_len,
            };
        }
        Delete | DeleteQ => Command::Delete {
            key,
            quiet: opcode == DeleteQ,
        },
        Increment | IncrementQ | Decrement | DecrementQ => Command::Arith {
            increment: matches!(opcode, Increment | IncrementQ),
            key,
            delta: be_u64(extras, 0),
            initial: be_u64(extras, 8),
            exptime: be_u32(extras, 16),
            quiet: matches!(opcode, IncrementQ | DecrementQ),
        },
        Flush | FlushQ => Command::Flush {
            exptime: if extras.len() == EXPTIME_EXTRAS_BYTES {
                be_u32(extras, 0)
            } else {
                0
            },
            quiet: opcode == FlushQ,
        },
        Noop => Command::Noop,
        Version => Command::Version,
        Stat => Command::Stat { group: key },
        Quit | QuitQ => Command::Quit {
            quiet: opcode == QuitQ,
        },
    };
    Parsed::Complete {
        request: BinaryRequest { header, command },
        consumed: key_end,
    }
}

/// memcached's per-opcode length rules (`dispatch_bin_command`); a mismatch is EINVAL.
fn lengths_fit(opcode: Opcode, key_len: usize, extras_len: usize, body_len: usize) -> bool {
    use Opcode::*;
    match opcode {
        Version | Noop | Quit | QuitQ => extras_len == 0 && key_len == 0 && body_len == 0,
        Flush | FlushQ => {
            key_len == 0
                && body_len == extras_len
                && (extras_len == 0 || extras_len == EXPTIME_EXTRAS_BYTES)
        }
        Set | SetQ | Add | AddQ | Replace | ReplaceQ => {
            extras_len == STORE_EXTRAS_BYTES
                && key_len != 0
                && body_len >= key_len + STORE_EXTRAS_BYTES
        }
        Get | GetQ | GetK | GetKQ | Delete | DeleteQ => {
            extras_len == 0 && key_len > 0 && body_len == key_len
        }
        Increment | IncrementQ | Decrement | DecrementQ => {
            key_len > 0 && extras_len == ARITH_EXTRAS_BYTES && body_len == key_len + extras_len
        }
        Append | AppendQ | Prepend | PrependQ => key_len > 0 && extras_len == 0,
        Stat => extras_len == 0,
        Touch | Gat | GatQ | GatK | GatKQ => extras_len == EXPTIME_EXTRAS_BYTES && key_len != 0,
    }
}

/// An opcode fogcached does not implement: "Unknown command", and the body is discarded.
/// memcached discards `body_len` bytes *after* the extras and key, eating the start of
/// the next request; fogcached discards exactly the body so pipelining stays in step.
fn parse_unknown<'a>(
    header: RequestHeader,
    key_len: usize,
    extras_len: usize,
    body_len: usize,
) -> Parsed<BinaryRequest<'a>> {
    // Without SASL, memcached still checks the SASL opcodes' lengths first.
    let sasl_lengths_fit = match header.opcode {
        SASL_LIST_MECHS => extras_len == 0 && key_len == 0 && body_len == 0,
        SASL_AUTH | SASL_STEP => extras_len == 0 && key_len != 0,
        _ => true,
    };
    let command = if sasl_lengths_fit {
        Command::Unknown {
            swallow_bytes: body_len,
        }
    } else {
        Command::ProtocolError {
            status: Status::InvalidArguments,
        }
    };
    complete_at_header(header, command)
}

fn complete_at_header<'a>(
    header: RequestHeader,
    command: Command<'a>,
) -> Parsed<BinaryRequest<'a>> {
    Parsed::Complete {
        request: BinaryRequest { header, command },
        consumed: HEADER_BYTES,
    }
}

/// Reads a big-endian u32 at `at`; callers have checked the extras length, and a short
/// slice reads as 0 rather than panicking.
fn be_u32(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

fn be_u64(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// One response, ready to encode. `opcode` is the request's raw opcode byte.
#[derive(Clone, Copy, Debug)]
pub struct Response<'a> {
    pub opcode: u8,
    pub status: Status,
    pub opaque: u32,
    pub cas: u64,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Appends a response: header, extras, key, value.
pub fn encode_response(out: &mut Vec<u8>, response: &Response<'_>) {
    let body_len = response.extras.len() + response.key.len() + response.value.len();
    out.reserve(HEADER_BYTES + body_len);
    out.push(RESPONSE_MAGIC);
    out.push(response.opcode);
    // Keys are at most 250 bytes and extras at most 8; values are bounded by the item
    // size limit (at most 1 GiB), so these conversions never saturate in practice.
    out.extend_from_slice(
        &u16::try_from(response.key.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    out.push(u8::try_from(response.extras.len()).unwrap_or(u8::MAX));
    out.push(0); // data type: raw bytes
    out.extend_from_slice(&response.status.code().to_be_bytes());
    out.extend_from_slice(&u32::try_from(body_len).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&response.opaque.to_be_bytes());
    out.extend_from_slice(&response.cas.to_be_bytes());
    out.extend_from_slice(response.extras);
    out.extend_from_slice(response.key);
    out.extend_from_slice(response.value);
}

/// Appends a success response with no extras, key or value (stores, delete, flush, noop,
/// quit), carrying `cas`.
pub fn encode_success(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64) {
    encode_response(
        out,
        &Response {
            opcode,
            status: Status::NoError,
            opaque,
            cas,
            extras: b"",
            key: b"",
            value: b"",
        },
    );
}

/// Appends an error response whose body is memcached's text for `status`, CAS 0.
pub fn encode_error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: Status) {
    encode_response(
        out,
        &Response {
            opcode,
            status,
            opaque,
            cas: 0,
            extras: b"",
            key: b"",
            value: status.message(),
        },
    );
}

/// Appends the reply to a get-family hit: flags as extras, optionally the key and value.
pub fn encode_item(
    out: &mut Vec<u8>,
    header: &RequestHeader,
    flags: u32,
    cas: u64,
    key: &[u8],
    value: &[u8],
) {
    encode_response(
        out,
        &Response {
            opcode: header.opcode,
            status: Status::NoError,
            opaque: header.opaque,
            cas,
            extras: &flags.to_be_bytes(),
            key,
            value,
        },
    );
}

/// Appends the reply to a successful `incr`/`decr`: the new value as 8 big-endian bytes.
pub fn encode_counter(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64, value: u64) {
    encode_response(
        out,
        &Response {
            opcode,
            status: Status::NoError,
            opaque,
            cas,
            extras: b"",
            key: b"",
            value: &value.to_be_bytes(),
        },
    );
}

/// Appends one `stat` reply: the statistic's name as key, its value as body. An empty
/// name and value make the terminator that ends a `stat` answer.
pub fn encode_stat(out: &mut Vec<u8>, opcode: u8, opaque: u32, name: &[u8], value: &[u8]) {
    encode_response(
        out,
        &Response {
            opcode,
            status: Status::NoError,
            opaque,
            cas: 0,
            extras: b"",
            key: name,
            value,
        },
    );
}

#[cfg(test)]
mod tests;
