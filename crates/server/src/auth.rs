//! Authentication as memcached 1.6 has it:
//!
//! - `-Y <authfile>` (text protocol): lines `user:password`; a connection's requests are
//!   refused (`CLIENT_ERROR unauthenticated`) until it sends a `set` whose data is
//!   `user password` (any key, flags and exptime), answered `STORED` or
//!   `CLIENT_ERROR authentication failure`.
//! - `-S` (binary protocol, SASL PLAIN): until a connection authenticates, every opcode but
//!   `SASL_LIST_MECHS`, `SASL_AUTH`, `SASL_STEP` and `VERSION` is answered "Auth failure."
//!   and the connection closed. The password file is memcached's sasl-pwdb
//!   (`MEMCACHED_SASL_PWDB`: lines `user:password[:...]`), or the `-Y` file.
//!
//! With `-Y` alone, memcached speaks only the text protocol; with `-S` alone, only the
//! binary one: a connection of the other protocol is closed. With both, each protocol
//! authenticates its own way.
//!
//! Credentials are compared in constant time (every entry, every byte, whatever matches)
//! and never printed: not in logs, not in errors, not in `Debug` output.
//!
//! The per-connection state is a [`ConnAuth`]; the connection asks [`intercept`] before
//! its dispatcher, which costs one branch when authentication is off.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use protocol::auth::{
    self as wire, SaslCommand, SaslRequest, TextToken, CREDENTIAL_LINE_MAX_BYTES,
};
use protocol::binary::{self, Response, Status, HEADER_BYTES, REQUEST_MAGIC};
use protocol::Parsed;

use crate::session::{Session, Step};

/// The largest credentials file read (memcached issue #805 was an authfile overflow): a
/// larger file is refused at start-up rather than read.
pub const CREDENTIALS_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// The environment variable memcached's SASL password database comes from.
pub const SASL_PWDB_ENV: &str = "MEMCACHED_SASL_PWDB";

/// How a credentials file separates a password from what follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// `-Y`: the password runs to the end of the line (it may contain `:`).
    Authfile,
    /// memcached's sasl-pwdb: the password ends at the next `:` or the end of the line.
    SaslPwdb,
}

/// A loaded credentials file.
pub struct Credentials {
    path: PathBuf,
    entries: Vec<Entry>,
}

struct Entry {
    user: Box<[u8]>,
    password: Box<[u8]>,
}

impl fmt::Debug for Credentials {
    /// The path and the number of users: never a name or a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("path", &self.path)
            .field("users", &self.entries.len())
            .finish()
    }
}

/// Why a credentials file was refused; says where, never what the line held.
#[derive(Debug, PartialEq, Eq)]
pub struct CredentialsError {
    pub message: String,
}

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CredentialsError {}

impl Credentials {
    /// Reads and checks a credentials file: at most [`CREDENTIALS_FILE_MAX_BYTES`], lines
    /// of at most [`CREDENTIAL_LINE_MAX_BYTES`] (a `\r` before the newline is dropped,
    /// blank lines are skipped), each `user:password` with neither part empty.
    pub fn load(
        path: &Path,
        format: FileFormat,
        what: &str,
    ) -> Result<Credentials, CredentialsError> {
        let fail = |reason: String| CredentialsError {
            message: format!("{what} {}: {reason}", path.display()),
        };
        let metadata = std::fs::metadata(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
        if !metadata.is_file() {
            return Err(fail("not a regular file".to_owned()));
        }
        if metadata.len() > CREDENTIALS_FILE_MAX_BYTES {
            return Err(fail(format!(
                "{} bytes is larger than the {CREDENTIALS_FILE_MAX_BYTES} bytes allowed",
                metadata.len()
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
        // The file may have grown between the two calls.
        if bytes.len() as u64 > CREDENTIALS_FILE_MAX_BYTES {
            return Err(fail(format!(
                "larger than the {CREDENTIALS_FILE_MAX_BYTES} bytes allowed"
            )));
        }
        let entries = parse_entries(&bytes, format).map_err(fail)?;
        if entries.is_empty() {
            return Err(fail(
                "no user:password line: no client could ever authenticate".to_owned(),
            ));
        }
        Ok(Credentials {
            path: path.to_path_buf(),
            entries,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn user_count(&self) -> usize {
        self.entries.len()
    }

    /// Whether `user` and `password` match an entry. Every entry is compared in full,
    /// whether or not an earlier one matched, so the time taken says nothing about which
    /// user exists or how much of a password was right.
    pub fn verify(&self, user: &[u8], password: &[u8]) -> bool {
        let mut matched = false;
        for entry in &self.entries {
            // `&`, not `&&`: both comparisons always run.
            matched |=
                constant_time_eq(user, &entry.user) & constant_time_eq(password, &entry.password);
        }
        matched
    }
}

fn parse_entries(bytes: &[u8], format: FileFormat) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let number = index + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        if line.len() > CREDENTIAL_LINE_MAX_BYTES {
            return Err(format!(
                "line {number} is longer than {CREDENTIAL_LINE_MAX_BYTES} bytes"
            ));
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(format!(
                "line {number} is malformed: it should be 'user:password'"
            ));
        };
        let user = &line[..colon];
        let rest = &line[colon + 1..];
        let password = match format {
            FileFormat::Authfile => rest,
            FileFormat::SaslPwdb => rest.split(|&b| b == b':').next().unwrap_or(rest),
        };
        if user.is_empty() || password.is_empty() {
            return Err(format!(
                "line {number} has an empty user or password: it could never authenticate"
            ));
        }
        entries.push(Entry {
            user: user.into(),
            password: password.into(),
        });
    }
    Ok(entries)
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut difference = u8::from(a.len() != b.len());
    for index in 0..a.len().max(b.len()) {
        let x = a.get(index).copied().unwrap_or(0);
        let y = b.get(index).copied().unwrap_or(0);
        difference |= x ^ y;
    }
    // Keeps the optimiser from turning the loop into an early exit.
    std::hint::black_box(difference) == 0
}

/// The server's authentication settings (`-Y`, `-S`).
#[derive(Clone, Debug, Default)]
pub struct AuthSettings {
    /// `-Y`: the text protocol's authfile.
    pub ascii: Option<Arc<Credentials>>,
    /// `-S`: the users SASL PLAIN checks against.
    pub sasl: Option<Arc<Credentials>>,
}

impl AuthSettings {
    /// Whether any authentication is on.
    pub fn enabled(&self) -> bool {
        self.ascii.is_some() || self.sasl.is_some()
    }

    /// memcached's `binding_protocol` in `stats settings`.
    pub fn binding_protocol(&self) -> &'static str {
        match (&self.ascii, &self.sasl) {
            (Some(_), None) => "ascii",
            (None, Some(_)) => "binary",
            _ => "auto-negotiate",
        }
    }

    /// Loads what `-Y` and `-S` ask for. With `-S`, the users come from the file named by
    /// `MEMCACHED_SASL_PWDB` (`sasl_pwdb`), else from the `-Y` file.
    pub fn load(
        auth_file: Option<&Path>,
        sasl: bool,
        sasl_pwdb: Option<&Path>,
    ) -> Result<AuthSettings, CredentialsError> {
        let ascii = auth_file
            .map(|path| Credentials::load(path, FileFormat::Authfile, "authfile (-Y)"))
            .transpose()?
            .map(Arc::new);
        let sasl = if !sasl {
            None
        } else if let Some(path) = sasl_pwdb {
            Some(Arc::new(Credentials::load(
                path,
                FileFormat::SaslPwdb,
                &format!("SASL password file ({SASL_PWDB_ENV})"),
            )?))
        } else if let Some(ascii) = &ascii {
            Some(Arc::clone(ascii))
        } else {
            return Err(CredentialsError {
                message: format!(
                    "-S needs a password file: set {SASL_PWDB_ENV} to a file of \
                     user:password lines (memcached's sasl-pwdb format), or give -Y <file>; \
                     cyrus-sasl's sasldb and /etc/sasl2/memcached.conf are not read"
                ),
            });
        };
        Ok(AuthSettings { ascii, sasl })
    }
}

/// A connection's authentication state.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnAuth {
    authenticated: bool,
    /// A SASL `PLAIN` exchange started without data and waits for its `SASL_STEP`.
    plain_awaits_step: bool,
}

impl ConnAuth {
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }
}

/// Handles the request at the front of `input` when authentication decides what happens
/// to it; `None` hands it to the protocol's dispatcher. `binary` is the connection's
/// protocol (decided by its first byte).
#[inline]
pub fn intercept(
    state: &mut ConnAuth,
    binary: bool,
    session: &mut Session<'_>,
    input: &[u8],
) -> Option<Step> {
    // A copy of the shared reference, so that the settings stay borrowed while the
    // session is borrowed mutably below.
    let server_settings = session.settings;
    let settings = &server_settings.auth;
    if !settings.enabled() {
        return None;
    }
    match (binary, settings.ascii.as_deref(), settings.sasl.as_deref()) {
        // The protocol without authentication of a server that authenticates the other
        // one: memcached binds to one protocol, and closes such a connection unanswered.
        (false, None, Some(_)) => Some(Step::Close),
        (true, Some(ascii), None) => {
            // memcached reads every connection as text here: a binary request never
            // completes a line, so it ends in `CLIENT_ERROR unauthenticated` or a close.
            (!state.authenticated).then(|| text_gate(state, session, ascii, input))
        }
        (false, Some(ascii), _) => {
            (!state.authenticated).then(|| text_gate(state, session, ascii, input))
        }
        (true, _, Some(users)) => sasl_gate(state, session, users, input),
        (_, None, None) => None,
    }
}

fn text_gate(
    state: &mut ConnAuth,
    session: &mut Session<'_>,
    users: &Credentials,
    input: &[u8],
) -> Step {
    match wire::parse_text_token(input) {
        Parsed::Incomplete => Step::NeedMore,
        Parsed::Invalid {
            reply,
            consumed,
            close,
            ..
        } => {
            session.out.extend_from_slice(reply);
            if close {
                Step::Close
            } else {
                Step::Consumed(consumed)
            }
        }
        Parsed::Complete {
            request: TextToken { user, password },
            consumed,
        } => {
            let ok = users.verify(user, password);
            count_attempt(session, ok);
            if ok {
                state.authenticated = true;
                session.out.extend_from_slice(wire::AUTH_STORED);
            } else {
                session.out.extend_from_slice(wire::AUTH_FAILURE);
            }
            Step::Consumed(consumed)
        }
    }
}

fn sasl_gate(
    state: &mut ConnAuth,
    session: &mut Session<'_>,
    users: &Credentials,
    input: &[u8],
) -> Option<Step> {
    if let Some(parsed) = wire::parse_sasl(input) {
        return Some(match parsed {
            Parsed::Incomplete => Step::NeedMore,
            Parsed::Complete { request, consumed } => {
                sasl_request(state, session, users, &request, consumed)
            }
            // parse_sasl never refuses: malformed requests are `ProtocolError`s.
            Parsed::Invalid { .. } => Step::Close,
        });
    }
    if state.authenticated || input.first() != Some(&REQUEST_MAGIC) {
        // A bad magic byte is the binary dispatcher's to refuse (it closes).
        return None;
    }
    let Some(header) = input.get(..HEADER_BYTES) else {
        return Some(Step::NeedMore);
    };
    if header[1] == wire::OPCODE_VERSION {
        return None;
    }
    // memcached answers anything else "Auth failure." and closes, counting nothing.
    let opaque = u32::from_be_bytes([header[12], header[13], header[14], header[15]]);
    binary::encode_error(session.out, header[1], opaque, Status::AuthError);
    Some(Step::Close)
}

fn sasl_request(
    state: &mut ConnAuth,
    session: &mut Session<'_>,
    users: &Credentials,
    request: &SaslRequest<'_>,
    consumed: usize,
) -> Step {
    let header = &request.header;
    let reply = |session: &mut Session<'_>, status: Status, value: &[u8]| {
        binary::encode_response(
            session.out,
            &Response {
                opcode: header.opcode,
                status,
                opaque: header.opaque,
                cas: 0,
                extras: b"",
                key: b"",
                value,
            },
        );
    };
    let verified = match request.command {
        SaslCommand::ProtocolError { status } => {
            binary::encode_error(session.out, header.opcode, header.opaque, status);
            return Step::Close;
        }
        SaslCommand::MechanismTooLong { swallow_bytes } => {
            binary::encode_error(
                session.out,
                header.opcode,
                header.opaque,
                Status::InvalidArguments,
            );
            return Step::Swallow {
                consumed,
                bytes: swallow_bytes,
            };
        }
        // memcached starts every SASL request by forgetting an earlier authentication
        // (`init_sasl_conn`): a failed re-authentication leaves the connection
        // unauthenticated, and so does listing the mechanisms.
        SaslCommand::ListMechs => {
            state.authenticated = false;
            reply(session, Status::NoError, wire::SASL_MECHANISMS);
            return Step::Consumed(consumed);
        }
        SaslCommand::DataTooLong { swallow_bytes } => {
            state.authenticated = false;
            state.plain_awaits_step = false;
            count_attempt(session, false);
            binary::encode_error(session.out, header.opcode, header.opaque, Status::AuthError);
            return Step::Swallow {
                consumed,
                bytes: swallow_bytes,
            };
        }
        SaslCommand::Auth {
            step: false,
            mechanism,
            data,
        } => {
            state.authenticated = false;
            state.plain_awaits_step = false;
            if !mechanism.eq_ignore_ascii_case(b"PLAIN") {
                false
            } else if data.is_empty() {
                // PLAIN without an initial response: ask for it, as cyrus-sasl does.
                state.plain_awaits_step = true;
                reply(session, Status::AuthContinue, b"");
                return Step::Consumed(consumed);
            } else {
                verify_plain(users, data)
            }
        }
        SaslCommand::Auth {
            step: true, data, ..
        } => {
            state.authenticated = false;
            let awaited = std::mem::take(&mut state.plain_awaits_step);
            awaited && verify_plain(users, data)
        }
    };
    count_attempt(session, verified);
    if verified {
        state.authenticated = true;
        reply(session, Status::NoError, wire::SASL_AUTHENTICATED);
    } else {
        binary::encode_error(session.out, header.opcode, header.opaque, Status::AuthError);
    }
    Step::Consumed(consumed)
}

/// A PLAIN message's user and password against the users; an authorization identity
/// other than the user itself is refused (no proxy authorization).
fn verify_plain(users: &Credentials, data: &[u8]) -> bool {
    let Some(plain) = wire::parse_plain(data) else {
        return false;
    };
    let password_ok = users.verify(plain.user, plain.password);
    password_ok && (plain.authzid.is_empty() || plain.authzid == plain.user)
}

/// memcached's `auth_cmds` (every completed attempt) and `auth_errors` (failed ones).
fn count_attempt(session: &Session<'_>, ok: bool) {
    session.stats.auth_cmds.fetch_add(1, Ordering::Relaxed);
    if !ok {
        session.stats.auth_errors.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(text: &str, format: FileFormat) -> Result<Vec<(String, String)>, String> {
        parse_entries(text.as_bytes(), format).map(|entries| {
            entries
                .iter()
                .map(|e| {
                    (
                        String::from_utf8_lossy(&e.user).into_owned(),
                        String::from_utf8_lossy(&e.password).into_owned(),
                    )
                })
                .collect()
        })
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(u, p)| ((*u).to_owned(), (*p).to_owned()))
            .collect()
    }

    #[test]
    fn authfile_lines_are_user_colon_password() {
        assert_eq!(
            entries(
                "alice:secret\r\nbob:pa:ss word\n\n  \ncarol:x",
                FileFormat::Authfile
            ),
            Ok(pairs(&[
                ("alice", "secret"),
                ("bob", "pa:ss word"),
                ("carol", "x")
            ]))
        );
        // memcached's sasl-pwdb ends the password at the next colon.
        assert_eq!(
            entries("bob:pass:extra\n", FileFormat::SaslPwdb),
            Ok(pairs(&[("bob", "pass")]))
        );
    }

    #[test]
    fn malformed_lines_are_named_by_number_and_never_quoted() {
        let error = entries("alice:secret\nhunter2\n", FileFormat::Authfile).unwrap_err();
        assert!(error.contains("line 2"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
        let error = entries(":nouser\n", FileFormat::Authfile).unwrap_err();
        assert!(
            error.contains("line 1") && error.contains("empty"),
            "{error}"
        );
        let error = entries("nopassword:\n", FileFormat::Authfile).unwrap_err();
        assert!(error.contains("empty"), "{error}");
        let long = format!("u:{}\n", "p".repeat(CREDENTIAL_LINE_MAX_BYTES));
        let error = entries(&long, FileFormat::Authfile).unwrap_err();
        assert!(error.contains("longer than"), "{error}");
    }

    #[test]
    fn verify_needs_both_exact_user_and_password() {
        let users = Credentials {
            path: PathBuf::from("test"),
            entries: parse_entries(b"alice:secret\nbob:pw2\n", FileFormat::Authfile)
                .unwrap_or_default(),
        };
        assert!(users.verify(b"alice", b"secret"));
        assert!(users.verify(b"bob", b"pw2"));
        assert!(!users.verify(b"alice", b"pw2"));
        assert!(!users.verify(b"alice", b"secre"));
        assert!(!users.verify(b"alice", b"secret "));
        assert!(!users.verify(b"alic", b"secret"));
        assert!(!users.verify(b"", b""));
        let debug = format!("{users:?}");
        assert!(
            !debug.contains("secret") && !debug.contains("alice"),
            "{debug}"
        );
    }

    #[test]
    fn constant_time_eq_compares_lengths_and_bytes() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"ab\0", b"ab"));
    }
}
