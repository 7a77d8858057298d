//! memcached's wire protocols as pure functions over byte buffers: no I/O, no knowledge of
//! tiers or storage. Each parser looks at the front of a buffer and answers with a
//! [`Parsed`]: a whole request and how many bytes it used, a need for more bytes, or a
//! malformed request with the error reply memcached would send.
//!
//! - [`text`]: the classic ASCII commands (`get`, `set`, `incr`, `stats`, ...).
//! - [`meta`]: the meta commands (`mg ms md ma mn me`), which share the text framing.
//! - [`binary`]: the binary protocol (magic byte 0x80).
//! - [`auth`]: memcached's authentication exchanges (the `-Y` authfile token, binary SASL).

pub mod auth;
pub mod binary;
pub mod common;
pub mod meta;
pub mod text;

/// Outcome of parsing one request from the front of a buffer.
#[derive(Debug, PartialEq)]
pub enum Parsed<R> {
    /// A whole request; the first `consumed` bytes of the buffer belong to it.
    Complete { request: R, consumed: usize },
    /// The buffer holds only part of a request; nothing was consumed.
    Incomplete,
    /// The request is malformed. Send `reply`, drop `consumed` bytes, then discard the
    /// next `swallow_bytes` bytes as they arrive (the payload of a refused store). When
    /// `close` is set, the connection is closed after the reply is written.
    Invalid {
        reply: &'static [u8],
        consumed: usize,
        swallow_bytes: usize,
        close: bool,
    },
}
