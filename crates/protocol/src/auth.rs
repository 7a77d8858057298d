//! memcached's two authentication exchanges, parsed without I/O:
//!
//! - **The authfile token** (`-Y`, text protocol): until a connection authenticates, its
//!   only accepted request is a `set` whose data is `user pass`
//!   (`set <any key> <any flags> <any exptime> <length>\r\n<user> <pass>\r\n`). This is
//!   memcached 1.6's `try_read_command_asciiauth`: the key, flags and exptime are ignored;
//!   any other line is answered `CLIENT_ERROR unauthenticated`.
//! - **Binary SASL** (`-S`): the opcodes `SASL_LIST_MECHS` (0x20), `SASL_AUTH` (0x21) and
//!   `SASL_STEP` (0x22), with memcached's length rules (`dispatch_bin_command`,
//!   `process_bin_sasl_auth`).
//!
//! Checking the credentials is the caller's business; this module only frames them.

use crate::binary::{RequestHeader, Status, HEADER_BYTES, REQUEST_MAGIC};
use crate::common::{parse_u32, COMMAND_LINE_MAX_BYTES};
use crate::Parsed;

/// The longest authfile token (`user pass`) a connection may declare. memcached's own
/// limit is its 16 KiB read buffer (a longer token is waited for forever); fogcached
/// closes the connection instead, as it does for any junk. An authfile line is at most
/// [`CREDENTIAL_LINE_MAX_BYTES`], so no valid token comes near this.
pub const TEXT_TOKEN_MAX_BYTES: usize = 4096;

/// The longest `user:password` line of an authfile or SASL password file, newline
/// excluded (memcached's `MAX_ENTRY_LEN` is 256 with the newline).
pub const CREDENTIAL_LINE_MAX_BYTES: usize = 1024;

/// memcached's `MAX_SASL_MECH_LEN`: a longer mechanism name is refused with
/// "Invalid arguments" and its data swallowed.
pub const SASL_MECH_MAX_BYTES: usize = 32;

/// The most SASL data (the key excluded) a `SASL_AUTH`/`SASL_STEP` may carry; longer data
/// is swallowed unread and the attempt fails. PLAIN carries `authzid\0user\0password`.
pub const SASL_DATA_MAX_BYTES: usize = 3 * CREDENTIAL_LINE_MAX_BYTES;

/// The only SASL mechanism fogcached offers (the reply to `SASL_LIST_MECHS`).
pub const SASL_MECHANISMS: &[u8] = b"PLAIN";

/// The body of a successful `SASL_AUTH`, as memcached sends it.
pub const SASL_AUTHENTICATED: &[u8] = b"Authenticated";

pub const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
pub const BAD_TERMINATION: &[u8] = b"CLIENT_ERROR bad command line termination\r\n";
pub const BAD_TOKEN_FORMAT: &[u8] = b"CLIENT_ERROR bad authentication token format\r\n";
/// The reply to a token whose user and password match an authfile entry.
pub const AUTH_STORED: &[u8] = b"STORED\r\n";
pub const AUTH_FAILURE: &[u8] = b"CLIENT_ERROR authentication failure\r\n";

/// The credentials of an authfile token, borrowed from the input. Its `Debug` leaves the
/// password out (a debug print of a request must never log a credential).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TextToken<'a> {
    pub user: &'a [u8],
    pub password: &'a [u8],
}

impl std::fmt::Debug for TextToken<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextToken")
            .field("user", &String::from_utf8_lossy(self.user))
            .field("password", &Redacted(self.password.len()))
            .finish()
    }
}

/// What `Debug` shows of a secret: its length only.
struct Redacted(usize);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes redacted>", self.0)
    }
}

/// Parses the authentication `set` at the front of `buf` of a connection that has not
/// authenticated yet. `Invalid` replies are memcached's; only a line with no newline
/// within 2048 bytes, or a token longer than [`TEXT_TOKEN_MAX_BYTES`], closes.
pub fn parse_text_token(buf: &[u8]) -> Parsed<TextToken<'_>> {
    // memcached: "impossible for the auth command to be this short".
    if buf.len() < 2 {
        return Parsed::Incomplete;
    }
    let window = &buf[..buf.len().min(COMMAND_LINE_MAX_BYTES + 1)];
    let Some(newline) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() > COMMAND_LINE_MAX_BYTES {
            return close();
        }
        return Parsed::Incomplete;
    };
    let line_consumed = newline + 1;
    let line = &buf[..newline];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // memcached looks at `set` and the length (the fifth token) only: the key, flags and
    // exptime may be anything, and tokens after the length are ignored.
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let command = tokens.next();
    let length = tokens.nth(3).and_then(parse_u32);
    let (Some(b"set"), Some(length)) = (command, length) else {
        return invalid(UNAUTHENTICATED, line_consumed, false);
    };
    let length = length as usize;
    if length > TEXT_TOKEN_MAX_BYTES {
        return close();
    }
    let end = line_consumed + length + 2;
    let Some(data) = buf.get(line_consumed..end) else {
        return Parsed::Incomplete;
    };
    let Some(token) = data.strip_suffix(b"\r\n") else {
        return invalid(BAD_TERMINATION, end, false);
    };
    let mut words = token.split(|&b| b == b' ').filter(|t| !t.is_empty());
    match (words.next(), words.next()) {
        (Some(user), Some(password)) => Parsed::Complete {
            request: TextToken { user, password },
            consumed: end,
        },
        _ => invalid(BAD_TOKEN_FORMAT, end, false),
    }
}

fn invalid<R>(reply: &'static [u8], consumed: usize, close: bool) -> Parsed<R> {
    Parsed::Invalid {
        reply,
        consumed,
        swallow_bytes: 0,
        close,
    }
}

fn close<R>() -> Parsed<R> {
    invalid(b"", 0, true)
}

/// `SASL_LIST_MECHS`.
pub const OPCODE_SASL_LIST_MECHS: u8 = 0x20;
/// `SASL_AUTH`: start an exchange with the mechanism named by the key.
pub const OPCODE_SASL_AUTH: u8 = 0x21;
/// `SASL_STEP`: continue a multi-step exchange.
pub const OPCODE_SASL_STEP: u8 = 0x22;
/// `VERSION`, which memcached answers before authentication too.
pub const OPCODE_VERSION: u8 = 0x0b;

/// Whether `opcode` is one of the three SASL opcodes.
pub fn is_sasl_opcode(opcode: u8) -> bool {
    matches!(
        opcode,
        OPCODE_SASL_LIST_MECHS | OPCODE_SASL_AUTH | OPCODE_SASL_STEP
    )
}

/// A SASL request.
#[derive(Debug, PartialEq, Eq)]
pub struct SaslRequest<'a> {
    pub header: RequestHeader,
    pub command: SaslCommand<'a>,
}

/// `Debug` shows an `Auth`'s data (a PLAIN message: the password) by its length only.
#[derive(PartialEq, Eq)]
pub enum SaslCommand<'a> {
    ListMechs,
    /// `SASL_AUTH` (`step == false`) or `SASL_STEP`, the mechanism in the key and its
    /// data in the value.
    Auth {
        step: bool,
        mechanism: &'a [u8],
        data: &'a [u8],
    },
    /// A mechanism name longer than [`SASL_MECH_MAX_BYTES`]: reply "Invalid arguments",
    /// then discard `swallow_bytes` (the data), as memcached does. Only the header and the
    /// key were consumed.
    MechanismTooLong {
        swallow_bytes: usize,
    },
    /// Data longer than [`SASL_DATA_MAX_BYTES`]: the attempt fails without reading it.
    /// Only the header and the key were consumed; discard `swallow_bytes`.
    DataTooLong {
        swallow_bytes: usize,
    },
    /// Lengths that do not fit the opcode: reply with `status`, then close.
    ProtocolError {
        status: Status,
    },
}

impl std::fmt::Debug for SaslCommand<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SaslCommand::ListMechs => f.write_str("ListMechs"),
            SaslCommand::Auth {
                step,
                mechanism,
                data,
            } => f
                .debug_struct("Auth")
                .field("step", step)
                .field("mechanism", &String::from_utf8_lossy(mechanism))
                .field("data", &Redacted(data.len()))
                .finish(),
            SaslCommand::MechanismTooLong { swallow_bytes } => f
                .debug_struct("MechanismTooLong")
                .field("swallow_bytes", swallow_bytes)
                .finish(),
            SaslCommand::DataTooLong { swallow_bytes } => f
                .debug_struct("DataTooLong")
                .field("swallow_bytes", swallow_bytes)
                .finish(),
            SaslCommand::ProtocolError { status } => f
                .debug_struct("ProtocolError")
                .field("status", status)
                .finish(),
        }
    }
}

/// Parses the SASL request at the front of `buf`. Returns `None` when the buffer does not
/// start with a SASL request (another opcode, or a bad magic byte), so the caller hands
/// it to the ordinary binary parser; `Some(Incomplete)` until the header, and then the
/// key and data, are in.
pub fn parse_sasl(buf: &[u8]) -> Option<Parsed<SaslRequest<'_>>> {
    let Some(header_bytes) = buf.first_chunk::<HEADER_BYTES>() else {
        return match buf.first() {
            Some(&REQUEST_MAGIC) => match buf.get(1) {
                Some(&opcode) if !is_sasl_opcode(opcode) => None,
                _ => Some(Parsed::Incomplete),
            },
            _ => None,
        };
    };
    if header_bytes[0] != REQUEST_MAGIC || !is_sasl_opcode(header_bytes[1]) {
        return None;
    }
    let header = RequestHeader::decode(header_bytes);
    let key_len = usize::from(header.key_len);
    let extras_len = usize::from(header.extras_len);
    let body_len = usize::try_from(header.body_len).unwrap_or(usize::MAX);
    let at_header = |command| {
        Some(Parsed::Complete {
            request: SaslRequest { header, command },
            consumed: HEADER_BYTES,
        })
    };
    // The checks every binary request gets first, then the SASL opcodes' own.
    if key_len + extras_len > body_len {
        return at_header(SaslCommand::ProtocolError {
            status: Status::UnknownCommand,
        });
    }
    let lengths_fit = if header.opcode == OPCODE_SASL_LIST_MECHS {
        extras_len == 0 && key_len == 0 && body_len == 0
    } else {
        extras_len == 0 && key_len != 0
    };
    if key_len > crate::common::KEY_LENGTH_MAX_BYTES || !lengths_fit {
        return at_header(SaslCommand::ProtocolError {
            status: Status::InvalidArguments,
        });
    }
    if header.opcode == OPCODE_SASL_LIST_MECHS {
        return at_header(SaslCommand::ListMechs);
    }
    let key_end = HEADER_BYTES + key_len;
    let Some(mechanism) = buf.get(HEADER_BYTES..key_end) else {
        return Some(Parsed::Incomplete);
    };
    let data_len = body_len - key_len;
    let at_key = |command| {
        Some(Parsed::Complete {
            request: SaslRequest { header, command },
            consumed: key_end,
        })
    };
    if key_len > SASL_MECH_MAX_BYTES {
        return at_key(SaslCommand::MechanismTooLong {
            swallow_bytes: data_len,
        });
    }
    if data_len > SASL_DATA_MAX_BYTES {
        return at_key(SaslCommand::DataTooLong {
            swallow_bytes: data_len,
        });
    }
    let Some(data) = buf.get(key_end..key_end + data_len) else {
        return Some(Parsed::Incomplete);
    };
    Some(Parsed::Complete {
        request: SaslRequest {
            header,
            command: SaslCommand::Auth {
                step: header.opcode == OPCODE_SASL_STEP,
                mechanism,
                data,
            },
        },
        consumed: key_end + data_len,
    })
}

/// The three fields of a SASL PLAIN message (RFC 4616): `authzid NUL authcid NUL passwd`.
/// Its `Debug` leaves the password out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PlainCredentials<'a> {
    /// The identity to act as; empty means "the user itself".
    pub authzid: &'a [u8],
    pub user: &'a [u8],
    pub password: &'a [u8],
}

impl std::fmt::Debug for PlainCredentials<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainCredentials")
            .field("authzid", &String::from_utf8_lossy(self.authzid))
            .field("user", &String::from_utf8_lossy(self.user))
            .field("password", &Redacted(self.password.len()))
            .finish()
    }
}

/// Splits a PLAIN message; `None` if it does not have exactly three fields.
pub fn parse_plain(data: &[u8]) -> Option<PlainCredentials<'_>> {
    let mut fields = data.splitn(3, |&b| b == 0);
    let authzid = fields.next()?;
    let user = fields.next()?;
    let password = fields.next()?;
    if password.contains(&0) {
        return None;
    }
    Some(PlainCredentials {
        authzid,
        user,
        password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A debug print of a parsed token, SASL request or PLAIN message (what a log line
    /// or a test's failure message would show) names the user, never the password.
    #[test]
    fn debug_output_never_shows_a_password() {
        let password = b"hunter2-Secret";
        let token_line = [&b"set a 0 0 20\r\nalice "[..], password, b"\r\n"].concat();
        let (token, _) = complete(&token_line);
        let plain_message = [&b"\0alice\0"[..], password].concat();
        let plain = parse_plain(&plain_message).expect("a PLAIN message");
        let mut sasl = vec![0x80, OPCODE_SASL_AUTH, 0, 5, 0, 0, 0, 0];
        sasl.extend_from_slice(&((5 + plain_message.len()) as u32).to_be_bytes());
        sasl.extend_from_slice(&[0; 12]);
        sasl.extend_from_slice(b"PLAIN");
        sasl.extend_from_slice(&plain_message);
        let parsed = parse_sasl(&sasl).expect("a SASL request");
        let printed = [
            format!("{token:?}"),
            format!("{:?}", parse_text_token(&token_line)),
            format!("{plain:?}"),
            format!("{parsed:?}"),
        ];
        let secret = String::from_utf8_lossy(password);
        for text in &printed {
            assert!(!text.contains(&*secret), "a password in {text}");
            assert!(!text.contains("hunter2"), "part of a password in {text}");
        }
        assert!(printed[0].contains("alice") && printed[2].contains("alice"));
        assert!(
            printed.iter().all(|t| t.contains("bytes redacted")),
            "{printed:?}"
        );
    }

    fn complete(buf: &[u8]) -> (TextToken<'_>, usize) {
        match parse_text_token(buf) {
            Parsed::Complete { request, consumed } => (request, consumed),
            other => panic!("{:?}: expected a token, got {other:?}", buf),
        }
    }

    fn refused(buf: &[u8]) -> (&'static [u8], usize, bool) {
        match parse_text_token(buf) {
            Parsed::Invalid {
                reply,
                consumed,
                close,
                ..
            } => (reply, consumed, close),
            other => panic!("{:?}: expected a refusal, got {other:?}", buf),
        }
    }

    #[test]
    fn a_set_carries_the_token_and_its_key_flags_and_exptime_are_ignored() {
        let buf = b"set anything 123 -5 12\r\nalice secret\r\nget a\r\n";
        let (token, consumed) = complete(buf);
        assert_eq!(token.user, b"alice");
        assert_eq!(token.password, b"secret");
        assert_eq!(&buf[consumed..], b"get a\r\n");
        // Extra tokens on the line and in the data are ignored, spaces collapse, a bare
        // newline ends the line, and `noreply` silences nothing (memcached answers).
        let (token, _) = complete(b"set a 0 0 17 noreply more\n  alice  secret x\r\n");
        assert_eq!(
            (token.user, token.password),
            (&b"alice"[..], &b"secret"[..])
        );
    }

    #[test]
    fn anything_but_a_set_with_a_length_is_unauthenticated() {
        for line in [
            &b"get foo\r\n"[..],
            b"version\r\n",
            b"sEt a 0 0 12\r\n",
            b"set a 0 0\r\n",
            b"set a 0 0 -1\r\n",
            b"set a 0 0 abc\r\n",
            b"set a 0 0 4294967296\r\n",
            b"\r\n",
        ] {
            assert_eq!(
                refused(line),
                (UNAUTHENTICATED, line.len(), false),
                "{line:?}"
            );
        }
    }

    #[test]
    fn waits_for_the_whole_line_and_data() {
        for buf in [
            &b""[..],
            b"s",
            b"set a 0 0 12",
            b"set a 0 0 12\r\n",
            b"set a 0 0 12\r\nalice secret",
            b"set a 0 0 12\r\nalice secret\r",
        ] {
            assert_eq!(parse_text_token(buf), Parsed::Incomplete, "{buf:?}");
        }
    }

    #[test]
    fn malformed_data_gets_memcached_errors() {
        let buf = b"set a 0 0 12\r\nalice secretXX";
        assert_eq!(refused(buf), (BAD_TERMINATION, buf.len(), false));
        let buf = b"set a 0 0 5\r\nalice\r\n";
        assert_eq!(refused(buf), (BAD_TOKEN_FORMAT, buf.len(), false));
        let buf = b"set a 0 0 0\r\n\r\n";
        assert_eq!(refused(buf), (BAD_TOKEN_FORMAT, buf.len(), false));
    }

    #[test]
    fn junk_closes_the_connection() {
        let no_newline = vec![b'x'; COMMAND_LINE_MAX_BYTES + 1];
        assert_eq!(refused(&no_newline), (&b""[..], 0, true));
        assert_eq!(
            parse_text_token(&no_newline[..COMMAND_LINE_MAX_BYTES]),
            Parsed::Incomplete
        );
        let huge = format!("set a 0 0 {}\r\n", TEXT_TOKEN_MAX_BYTES + 1);
        assert_eq!(refused(huge.as_bytes()), (&b""[..], 0, true));
    }

    fn sasl_bytes(opcode: u8, key: &[u8], value: &[u8], extras: &[u8]) -> Vec<u8> {
        let mut out = vec![REQUEST_MAGIC, opcode];
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.push(extras.len() as u8);
        out.push(0);
        out.extend_from_slice(&[0, 0]);
        let body = (extras.len() + key.len() + value.len()) as u32;
        out.extend_from_slice(&body.to_be_bytes());
        out.extend_from_slice(&0xdead_beef_u32.to_be_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    }

    fn sasl(buf: &[u8]) -> (SaslCommand<'_>, usize) {
        match parse_sasl(buf) {
            Some(Parsed::Complete { request, consumed }) => {
                assert_eq!(request.header.opaque, 0xdead_beef);
                (request.command, consumed)
            }
            other => panic!("{buf:?}: {other:?}"),
        }
    }

    #[test]
    fn sasl_requests_are_framed_with_memcached_length_rules() {
        let list = sasl_bytes(OPCODE_SASL_LIST_MECHS, b"", b"", b"");
        assert_eq!(sasl(&list), (SaslCommand::ListMechs, HEADER_BYTES));
        let auth = sasl_bytes(OPCODE_SASL_AUTH, b"PLAIN", b"\0alice\0secret", b"");
        assert_eq!(
            sasl(&auth),
            (
                SaslCommand::Auth {
                    step: false,
                    mechanism: b"PLAIN",
                    data: b"\0alice\0secret"
                },
                auth.len()
            )
        );
        let step = sasl_bytes(OPCODE_SASL_STEP, b"PLAIN", b"", b"");
        assert!(matches!(
            sasl(&step).0,
            SaslCommand::Auth { step: true, .. }
        ));
        for (name, bytes, status) in [
            (
                "list with a key",
                sasl_bytes(OPCODE_SASL_LIST_MECHS, b"k", b"", b""),
                Status::InvalidArguments,
            ),
            (
                "auth without a key",
                sasl_bytes(OPCODE_SASL_AUTH, b"", b"x", b""),
                Status::InvalidArguments,
            ),
            (
                "auth with extras",
                sasl_bytes(OPCODE_SASL_AUTH, b"PLAIN", b"", b"1234"),
                Status::InvalidArguments,
            ),
        ] {
            assert_eq!(
                sasl(&bytes),
                (SaslCommand::ProtocolError { status }, HEADER_BYTES),
                "{name}"
            );
        }
        let mut key_longer_than_body = sasl_bytes(OPCODE_SASL_AUTH, b"PLAIN", b"", b"");
        key_longer_than_body[11] = 1;
        assert_eq!(
            sasl(&key_longer_than_body).0,
            SaslCommand::ProtocolError {
                status: Status::UnknownCommand
            }
        );
    }

    #[test]
    fn oversized_sasl_fields_are_swallowed_not_buffered() {
        let long_mech = sasl_bytes(OPCODE_SASL_AUTH, &[b'M'; 33], b"data", b"");
        assert_eq!(
            sasl(&long_mech[..HEADER_BYTES + 33]),
            (
                SaslCommand::MechanismTooLong { swallow_bytes: 4 },
                HEADER_BYTES + 33
            )
        );
        let mut huge = sasl_bytes(OPCODE_SASL_AUTH, b"PLAIN", b"", b"");
        huge[8..12].copy_from_slice(&(5 + 1_000_000u32).to_be_bytes());
        assert_eq!(
            sasl(&huge),
            (
                SaslCommand::DataTooLong {
                    swallow_bytes: 1_000_000
                },
                HEADER_BYTES + 5
            )
        );
    }

    #[test]
    fn other_requests_are_left_to_the_binary_parser() {
        assert_eq!(parse_sasl(b"get foo\r\n"), None);
        assert_eq!(parse_sasl(&sasl_bytes(0x00, b"foo", b"", b"")), None);
        assert_eq!(parse_sasl(&[REQUEST_MAGIC, 0x00]), None);
        assert_eq!(parse_sasl(&[REQUEST_MAGIC]), Some(Parsed::Incomplete));
        let auth = sasl_bytes(OPCODE_SASL_AUTH, b"PLAIN", b"\0a\0b", b"");
        for cut in 1..auth.len() {
            assert_eq!(parse_sasl(&auth[..cut]), Some(Parsed::Incomplete), "{cut}");
        }
    }

    proptest::proptest! {
        /// Whatever an unauthenticated client sends, the parsers answer without
        /// panicking, never claim bytes they were not given, and a cut-off request only
        /// ever asks for more.
        #[test]
        fn parsers_stay_within_their_input(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            cut in 0usize..600,
        ) {
            let check = |consumed: usize, len: usize| {
                proptest::prop_assert!(consumed <= len, "consumed {} of {}", consumed, len);
                Ok(())
            };
            match parse_text_token(&bytes) {
                Parsed::Complete { consumed, .. } | Parsed::Invalid { consumed, .. } => {
                    check(consumed, bytes.len())?
                }
                Parsed::Incomplete => {}
            }
            let mut framed = sasl_bytes(bytes.first().copied().unwrap_or(0) % 3 + 0x20, &bytes[..bytes.len().min(40)], &bytes[bytes.len().min(40)..], b"");
            framed.truncate(cut.max(1).min(framed.len()));
            if let Some(Parsed::Complete { consumed, request }) = parse_sasl(&framed) {
                check(consumed, framed.len())?;
                if let SaslCommand::Auth { mechanism, data, .. } = request.command {
                    proptest::prop_assert_eq!(HEADER_BYTES + mechanism.len() + data.len(), consumed);
                }
            }
            let _ = parse_sasl(&bytes);
            let _ = parse_plain(&bytes);
        }
    }

    #[test]
    fn plain_messages_have_three_fields() {
        assert_eq!(
            parse_plain(b"\0alice\0secret"),
            Some(PlainCredentials {
                authzid: b"",
                user: b"alice",
                password: b"secret"
            })
        );
        assert_eq!(
            parse_plain(b"admin\0alice\0").map(|p| p.authzid),
            Some(&b"admin"[..])
        );
        assert_eq!(parse_plain(b"alice\0secret"), None);
        assert_eq!(parse_plain(b"\0alice\0sec\0ret"), None);
        assert_eq!(parse_plain(b""), None);
    }
}
