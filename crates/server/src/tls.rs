//! TLS (`-Z`) as memcached 1.6 has it, on rustls with the `ring` crypto provider.
//!
//! memcached's `-o ssl_*` suboptions map onto rustls as far as rustls allows, and what it
//! cannot honour is refused at start-up with the reason:
//!
//! | suboption | here |
//! |---|---|
//! | `ssl_chain_cert` | PEM chain, server certificate first (required) |
//! | `ssl_key` | the private key (PKCS#8, SEC1 or PKCS#1); default: found in the chain file |
//! | `ssl_keyformat` | 1 (PEM, default) or 2 (DER); memcached's ENGINE keys are refused |
//! | `ssl_verify_mode` | 0 none, 1 request (verified if sent), 2 require, 3 once (= require: TLS 1.3 and rustls have no renegotiation) |
//! | `ssl_ca_cert` | PEM CAs client certificates must chain to (required by modes 1-3) |
//! | `ssl_ciphers` | `:`-separated OpenSSL or IANA names of the suites rustls has (AEAD only); a version whose suites are not named keeps all of them |
//! | `ssl_min_version` | 2 / `tlsv1.2` (default) or 3 / `tlsv1.3`; TLS 1.0 and 1.1 are refused (rustls has neither) |
//! | `ssl_session_cache` | server-side session cache for resumption (off by default, as in memcached) |
//! | `ssl_wbuf_size` | kilobytes of ciphertext a connection buffers for a slow socket (default 16; rustls's buffer limit) |
//! | `ssl_kernel_tls` | refused: encryption stays in user space |
//!
//! A [`TlsContext`] holds the current `rustls::ServerConfig`; `refresh_certs` (and
//! SIGHUP) rebuild it from the same files, and connections accepted afterwards use the new
//! one while established ones keep theirs. [`TlsStream`] is one connection's socket: it
//! reads and writes plaintext like a TCP stream, so the connection code above it only
//! needs to know whether encrypted bytes still wait to be sent ([`TlsStream::wants_write`]).

use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;
use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig, ServerConnection, SupportedCipherSuite};

/// memcached's `ssl_wbuf_size` default, in bytes.
pub const WBUF_SIZE_DEFAULT_BYTES: usize = 16 * 1024;
/// Sessions the server-side cache holds when `ssl_session_cache` is on.
pub const SESSION_CACHE_ENTRIES: usize = 4096;
/// The largest certificate or key file read: a larger one is refused, not read.
pub const PEM_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// `ssl_keyformat`: OpenSSL's `SSL_FILETYPE_*` numbers, as memcached takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    Pem = 1,
    Der = 2,
}

/// `ssl_verify_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyMode {
    /// 0: no client certificate asked for.
    None = 0,
    /// 1: asked for; verified if the client sends one.
    Request = 1,
    /// 2: required.
    Require = 2,
    /// 3: required, asked for once (rustls never renegotiates, so the same as 2).
    Once = 3,
}

/// `ssl_min_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinVersion {
    Tls12,
    Tls13,
}

impl MinVersion {
    /// memcached's name in `stats settings`.
    pub fn name(self) -> &'static str {
        match self {
            MinVersion::Tls12 => "tlsv1.2",
            MinVersion::Tls13 => "tlsv1.3",
        }
    }
}

/// What `-Z` and the `ssl_*` suboptions ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// `-Z`.
    pub enabled: bool,
    pub chain_cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub key_format: KeyFormat,
    pub verify_mode: VerifyMode,
    pub ca_cert: Option<PathBuf>,
    pub ciphers: Option<String>,
    pub min_version: MinVersion,
    pub session_cache: bool,
    pub wbuf_size_bytes: usize,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            enabled: false,
            chain_cert: None,
            key: None,
            key_format: KeyFormat::Pem,
            verify_mode: VerifyMode::None,
            ca_cert: None,
            ciphers: None,
            min_version: MinVersion::Tls12,
            session_cache: false,
            wbuf_size_bytes: WBUF_SIZE_DEFAULT_BYTES,
        }
    }
}

impl TlsOptions {
    /// Applies one `ssl_*` suboption; `Ok(false)` if `name` is not one.
    pub fn apply_suboption(&mut self, name: &str, value: Option<&str>) -> Result<bool, String> {
        let required = || match value {
            Some(text) if !text.is_empty() => Ok(text),
            _ => Err(format!("Missing {name} argument")),
        };
        match name {
            "ssl_chain_cert" => self.chain_cert = Some(PathBuf::from(required()?)),
            "ssl_key" => self.key = Some(PathBuf::from(required()?)),
            "ssl_ca_cert" => self.ca_cert = Some(PathBuf::from(required()?)),
            "ssl_ciphers" => self.ciphers = Some(required()?.to_owned()),
            "ssl_keyformat" => {
                self.key_format = match required()?.to_ascii_lowercase().as_str() {
                    "1" | "pem" => KeyFormat::Pem,
                    "2" | "der" | "asn1" => KeyFormat::Der,
                    other => {
                        return Err(format!(
                            "ssl_keyformat {other:?} is not supported: 1 (PEM) or 2 (DER); \
                             OpenSSL ENGINE keys are not available with rustls"
                        ))
                    }
                }
            }
            "ssl_verify_mode" => {
                self.verify_mode = match required()? {
                    "0" => VerifyMode::None,
                    "1" => VerifyMode::Request,
                    "2" => VerifyMode::Require,
                    "3" => VerifyMode::Once,
                    other => {
                        return Err(format!(
                            "Invalid ssl_verify_mode {other:?}: valid values are 0(None), \
                             1(Request), 2(Require) or 3(Once)"
                        ))
                    }
                }
            }
            "ssl_min_version" => {
                self.min_version =
                    match required()?.to_ascii_lowercase().as_str() {
                        "2" | "tlsv1.2" => MinVersion::Tls12,
                        "3" | "tlsv1.3" => MinVersion::Tls13,
                        "0" | "1" | "tlsv1.0" | "tlsv1.1" => return Err(
                            "ssl_min_version below 2 (tlsv1.2) is not supported: rustls speaks \
                             only TLS 1.2 and 1.3"
                                .to_owned(),
                        ),
                        other => {
                            return Err(format!(
                                "Invalid ssl_min_version {other:?}: valid values are 2 (tlsv1.2) \
                             or 3 (tlsv1.3)"
                            ))
                        }
                    }
            }
            "ssl_session_cache" => self.session_cache = true,
            "ssl_wbuf_size" => {
                let kilobytes: usize = required()?
                    .trim()
                    .parse()
                    .ok()
                    .filter(|kb| (1..=1024 * 1024).contains(kb))
                    .ok_or_else(|| {
                        format!("could not parse argument to ssl_wbuf_size: {value:?}")
                    })?;
                self.wbuf_size_bytes = kilobytes * 1024;
            }
            "ssl_kernel_tls" => {
                return Err(
                    "ssl_kernel_tls is not supported: fogcached encrypts in user space (rustls)"
                        .to_owned(),
                )
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Cross-option checks that need no file.
    pub fn check(&self) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if self.chain_cert.is_none() {
            return Err("-Z needs a certificate: -o ssl_chain_cert=<PEM file>".to_owned());
        }
        if self.verify_mode != VerifyMode::None && self.ca_cert.is_none() {
            return Err(format!(
                "ssl_verify_mode {} checks client certificates: it needs -o ssl_ca_cert=<PEM \
                 file of the CAs they must chain to>",
                self.verify_mode as u8
            ));
        }
        Ok(())
    }
}

/// The server's TLS state: the current configuration and memcached's TLS counters.
pub struct TlsContext {
    options: TlsOptions,
    config: RwLock<Arc<ServerConfig>>,
    /// Serialises refreshes, so two `refresh_certs` cannot interleave their reads.
    refreshing: Mutex<()>,
    last_refresh: Mutex<Instant>,
    /// memcached's `ssl_handshake_errors`.
    pub handshake_errors: AtomicU64,
    /// memcached's `ssl_new_sessions` (sessions stored for resumption, with
    /// `ssl_session_cache`); shared with the session cache, which survives refreshes.
    pub new_sessions: Arc<AtomicU64>,
    /// The session cache when `ssl_session_cache` is on, kept across refreshes so that
    /// a reload does not end every client's resumption.
    sessions: Option<Arc<CountingSessionCache>>,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl TlsContext {
    /// Reads the certificate, key and CA files and builds the first configuration.
    pub fn load(options: TlsOptions) -> Result<TlsContext, String> {
        options.check()?;
        let new_sessions = Arc::new(AtomicU64::new(0));
        let sessions = options.session_cache.then(|| {
            Arc::new(CountingSessionCache {
                inner: ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES),
                new_sessions: Arc::clone(&new_sessions),
            })
        });
        let config = build_config(&options, sessions.as_ref())?;
        Ok(TlsContext {
            options,
            config: RwLock::new(Arc::new(config)),
            refreshing: Mutex::new(()),
            last_refresh: Mutex::new(Instant::now()),
            handshake_errors: AtomicU64::new(0),
            new_sessions,
            sessions,
        })
    }

    pub fn options(&self) -> &TlsOptions {
        &self.options
    }

    /// memcached's `refresh_certs`: reads the files again; on success, connections
    /// accepted from now on use them. On failure nothing changes and the error says
    /// which file and why (memcached's wording: `Error loading the key: <file> : ...`).
    pub fn refresh(&self) -> Result<(), String> {
        let _one_at_a_time = self.refreshing.lock();
        let config = build_config(&self.options, self.sessions.as_ref())?;
        *self.config.write() = Arc::new(config);
        *self.last_refresh.lock() = Instant::now();
        Ok(())
    }

    /// memcached's `time_since_server_cert_refresh`: seconds since the certificates were
    /// last (re)loaded.
    pub fn seconds_since_refresh(&self) -> u64 {
        self.last_refresh.lock().elapsed().as_secs()
    }

    /// Wraps an accepted TCP connection; the handshake happens as the connection reads.
    pub fn accept(self: &Arc<Self>, tcp: TcpStream) -> io::Result<TlsStream> {
        let config = Arc::clone(&self.config.read());
        let mut connection = ServerConnection::new(config).map_err(io::Error::other)?;
        // memcached's `ssl_wbuf_size` is the connection's TLS output buffer: rustls takes
        // no more plaintext while this much ciphertext waits for the socket.
        connection.set_buffer_limit(Some(self.options.wbuf_size_bytes));
        Ok(TlsStream {
            tcp,
            tls: connection,
            context: Arc::clone(self),
            handshake_failed: false,
        })
    }
}

fn read_limited(path: &Path) -> io::Result<Vec<u8>> {
    let metadata = std::fs::metadata(path)?;
    if metadata.len() > PEM_FILE_MAX_BYTES {
        return Err(io::Error::new(
            ErrorKind::InvalidData,
            format!("larger than the {PEM_FILE_MAX_BYTES} bytes allowed"),
        ));
    }
    std::fs::read(path)
}

/// The server-side session cache, counting the sessions it stores.
#[derive(Debug)]
struct CountingSessionCache {
    inner: Arc<ServerSessionMemoryCache>,
    new_sessions: Arc<AtomicU64>,
}

impl rustls::server::StoresServerSessions for CountingSessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let stored = self.inner.put(key, value);
        if stored {
            self.new_sessions.fetch_add(1, Ordering::Relaxed);
        }
        stored
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.take(key)
    }

    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

fn build_config(
    options: &TlsOptions,
    sessions: Option<&Arc<CountingSessionCache>>,
) -> Result<ServerConfig, String> {
    let chain_path = options
        .chain_cert
        .as_deref()
        .ok_or("-Z needs -o ssl_chain_cert=<PEM file>")?;
    let chain_error = |reason: String| {
        format!(
            "Error loading the certificate chain: {} : {reason}",
            chain_path.display()
        )
    };
    let chain_pem = read_limited(chain_path).map_err(|e| chain_error(e.to_string()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| chain_error(format!("{e:?}")))?;
    if chain.is_empty() {
        return Err(chain_error("no PEM CERTIFICATE in it".to_owned()));
    }

    let key_path = options.key.as_deref().unwrap_or(chain_path);
    let key_error =
        |reason: String| format!("Error loading the key: {} : {reason}", key_path.display());
    let key_bytes = read_limited(key_path).map_err(|e| key_error(e.to_string()))?;
    let key = match options.key_format {
        KeyFormat::Pem => PrivateKeyDer::from_pem_slice(&key_bytes)
            .map_err(|e| key_error(format!("no usable PEM private key ({e:?})")))?,
        KeyFormat::Der => {
            PrivateKeyDer::try_from(key_bytes).map_err(|e| key_error(e.to_owned()))?
        }
    };

    let provider = Arc::new(provider(options)?);
    let versions: &[&rustls::SupportedProtocolVersion] = match options.min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS settings refused: {e}"))?;
    let builder = match options.verify_mode {
        VerifyMode::None => builder.with_no_client_auth(),
        mode => {
            let ca_path = options
                .ca_cert
                .as_deref()
                .ok_or("ssl_verify_mode above 0 needs -o ssl_ca_cert")?;
            let ca_error = |reason: String| {
                format!(
                    "Error loading the CA certificate: {} : {reason}",
                    ca_path.display()
                )
            };
            let ca_pem = read_limited(ca_path).map_err(|e| ca_error(e.to_string()))?;
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&ca_pem) {
                let cert = cert.map_err(|e| ca_error(format!("{e:?}")))?;
                roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(ca_error("no PEM CERTIFICATE in it".to_owned()));
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
            let verifier = if mode == VerifyMode::Request {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier.build().map_err(|e| ca_error(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| key_error(format!("does not fit the certificate: {e}")))?;
    config.session_storage = match sessions {
        Some(cache) => Arc::clone(cache) as Arc<dyn rustls::server::StoresServerSessions>,
        None => Arc::new(NoServerSessionStorage {}),
    };
    Ok(config)
}

/// OpenSSL's names for the TLS 1.2 suites rustls has (TLS 1.3 names are the IANA ones).
const OPENSSL_SUITE_NAMES: &[(&str, &str)] = &[
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    ("TLS_AES_256_GCM_SHA384", "TLS13_AES_256_GCM_SHA384"),
    ("TLS_AES_128_GCM_SHA256", "TLS13_AES_128_GCM_SHA256"),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS13_CHACHA20_POLY1305_SHA256",
    ),
];

fn suite_name(suite: &SupportedCipherSuite) -> String {
    format!("{:?}", suite.suite())
}

/// The ring provider, its suites narrowed to `ssl_ciphers` when given.
fn provider(options: &TlsOptions) -> Result<CryptoProvider, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    let Some(list) = &options.ciphers else {
        return Ok(provider);
    };
    let available: Vec<String> = provider.cipher_suites.iter().map(suite_name).collect();
    let mut wanted = Vec::new();
    for entry in list.split(':').map(str::trim).filter(|e| !e.is_empty()) {
        let iana = OPENSSL_SUITE_NAMES
            .iter()
            .find(|(openssl, _)| openssl.eq_ignore_ascii_case(entry))
            .map(|(_, iana)| (*iana).to_owned())
            .unwrap_or_else(|| entry.to_ascii_uppercase());
        if !available.contains(&iana) {
            return Err(format!(
                "ssl_ciphers: {entry:?} is not a cipher suite fogcached can offer (rustls has \
                 no cipher-string keywords such as HIGH or !aNULL); name suites from: {}",
                OPENSSL_SUITE_NAMES
                    .iter()
                    .map(|(openssl, _)| *openssl)
                    .collect::<Vec<_>>()
                    .join(":")
            ));
        }
        wanted.push(iana);
    }
    if wanted.is_empty() {
        return Err("ssl_ciphers names no cipher suite".to_owned());
    }
    let is_tls13 = |name: &str| name.starts_with("TLS13_");
    let names_tls13 = wanted.iter().any(|name| is_tls13(name));
    let names_tls12 = wanted.iter().any(|name| !is_tls13(name));
    // As with OpenSSL's cipher list: a version whose suites are not named keeps them all.
    provider.cipher_suites.retain(|suite| {
        let name = suite_name(suite);
        if is_tls13(&name) {
            !names_tls13 || wanted.contains(&name)
        } else {
            !names_tls12 || wanted.contains(&name)
        }
    });
    Ok(provider)
}

/// A TLS connection over a non-blocking TCP socket. `read` and `write` move plaintext;
/// ciphertext rustls could not send yet stays in it ([`TlsStream::wants_write`]) until
/// the socket has room.
pub struct TlsStream {
    tcp: TcpStream,
    tls: ServerConnection,
    context: Arc<TlsContext>,
    /// This connection's failed handshake was counted (once).
    handshake_failed: bool,
}

impl TlsStream {
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    pub fn tcp_mut(&mut self) -> &mut TcpStream {
        &mut self.tcp
    }

    /// Encrypted bytes wait to be sent (handshake messages, an alert, reply records).
    pub fn wants_write(&self) -> bool {
        self.tls.wants_write()
    }

    /// Sends pending ciphertext until it is all sent or the socket is full.
    fn send_pending(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Counts a connection that ends before its handshake completed, once.
    fn note_failure(&mut self) {
        if self.tls.is_handshaking() && !self.handshake_failed {
            self.handshake_failed = true;
            self.context
                .handshake_errors
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Read for TlsStream {
    /// Fills `buf` with plaintext until it is full, the socket is drained (then
    /// `WouldBlock` if nothing was read) or the peer closed (`Ok(0)`). A short read thus
    /// means what it means for TCP — nothing more to read until the next readiness
    /// event — which edge-triggered polling needs: rustls may hold decrypted bytes that
    /// no socket event would announce.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        loop {
            if filled == buf.len() {
                return Ok(filled);
            }
            match self.tls.reader().read(&mut buf[filled..]) {
                // The peer's close_notify.
                Ok(0) => return Ok(filled),
                Ok(read) => {
                    filled += read;
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: an end of stream like TCP's.
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(filled),
                Err(e) => return if filled > 0 { Ok(filled) } else { Err(e) },
            }
            match self.tls.read_tls(&mut self.tcp) {
                Ok(0) => {
                    self.note_failure();
                    return Ok(filled);
                }
                Ok(_) => {
                    if let Err(error) = self.tls.process_new_packets() {
                        self.note_failure();
                        // rustls queued an alert for the peer; best effort.
                        let _ = self.send_pending();
                        return Err(io::Error::new(ErrorKind::InvalidData, error));
                    }
                    // Handshake messages go out now: a handshake must not wait for the
                    // connection to have a reply to write.
                    self.send_pending()?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    return if filled > 0 { Ok(filled) } else { Err(e) };
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.note_failure();
                    return if filled > 0 { Ok(filled) } else { Err(e) };
                }
            }
        }
    }
}

impl Write for TlsStream {
    /// Encrypts as much of `buf` as the socket takes: ciphertext already pending goes
    /// first, then `buf`, at most `ssl_wbuf_size` bytes of ciphertext waiting at a time
    /// (rustls's buffer limit), each batch sent before the next is made. Returns the
    /// plaintext taken (`WouldBlock` if none and the socket is full); ciphertext of taken
    /// bytes may still be pending ([`TlsStream::wants_write`]). `write(&[])` just sends
    /// pending ciphertext.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut taken = 0;
        loop {
            self.send_pending()?;
            if self.tls.wants_write() || taken == buf.len() {
                break;
            }
            let accepted = self.tls.writer().write(&buf[taken..])?;
            if accepted == 0 {
                break;
            }
            taken += accepted;
        }
        if taken == 0 && !buf.is_empty() && self.tls.wants_write() {
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_pending()
    }
}

impl Drop for TlsStream {
    /// Says goodbye properly (close_notify) if the socket takes it at once.
    fn drop(&mut self) {
        if !self.tls.is_handshaking() {
            self.tls.send_close_notify();
            let _ = self.send_pending();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream as StdTcpStream};
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use rcgen::{CertificateParams, KeyPair};
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

    /// A self-signed certificate for "localhost" written to a scratch directory, and the
    /// options naming it.
    fn options(dir: &Path) -> (TlsOptions, CertificateDer<'static>) {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        std::fs::create_dir_all(dir).expect("scratch dir");
        let chain = dir.join("cert.pem");
        let key_path = dir.join("key.pem");
        std::fs::write(&chain, cert.pem()).expect("write cert");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        let options = TlsOptions {
            enabled: true,
            chain_cert: Some(chain),
            key: Some(key_path),
            ..TlsOptions::default()
        };
        (options, cert.der().clone())
    }

    fn set_send_buffer(socket: &StdTcpStream, bytes: i32) {
        // SAFETY: a valid socket descriptor and a pointer to an int of the size given.
        let result = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        assert_eq!(result, 0, "setsockopt: {}", io::Error::last_os_error());
    }

    /// The contract the connection relies on: `write` may take all the plaintext while
    /// part of its ciphertext still waits for the socket; `wants_write` says so, and
    /// `write(&[])` sends the rest once the peer reads. (A connection that forgot to ask
    /// would leave the client waiting for the end of its reply.)
    #[test]
    fn ciphertext_the_socket_cannot_take_waits_and_is_reported() {
        let dir = std::env::temp_dir().join(format!("fogcached-tls-unit-{}", std::process::id()));
        let (mut options, cert) = options(&dir);
        // One record batch larger than what the socket pair can hold.
        options.wbuf_size_bytes = 4 << 20;
        let context = Arc::new(TlsContext::load(options).expect("load"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");

        const REPLY_BYTES: usize = 1 << 20;
        let (start_reading, reading) = std::sync::mpsc::channel::<()>();
        let client = std::thread::spawn(move || -> Vec<u8> {
            let mut roots = RootCertStore::empty();
            roots.add(cert).expect("root");
            let config = ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
            let name = ServerName::try_from("localhost").expect("name");
            let connection = ClientConnection::new(Arc::new(config), name).expect("client");
            let tcp = StdTcpStream::connect(addr).expect("connect");
            tcp.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut stream = StreamOwned::new(connection, tcp);
            while stream.conn.is_handshaking() {
                stream
                    .conn
                    .complete_io(&mut stream.sock)
                    .expect("handshake");
            }
            let _ = reading.recv();
            let mut reply = vec![0u8; REPLY_BYTES];
            stream.read_exact(&mut reply).expect("reply");
            reply
        });

        let (accepted, _) = listener.accept().expect("accept");
        // A small send buffer, and a client that does not read yet: 1 MiB cannot go out
        // at once.
        set_send_buffer(&accepted, 4096);
        accepted.set_nonblocking(true).expect("nonblocking");
        let mut stream = context.accept(TcpStream::from_std(accepted)).expect("wrap");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut scratch = [0u8; 64];
        while stream.tls.is_handshaking() {
            assert!(Instant::now() < deadline, "handshake did not finish");
            match stream.read(&mut scratch) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("handshake failed: {e}"),
                Ok(0) => panic!("client closed"),
                Ok(_) => panic!("no data expected"),
            }
        }
        let reply: Vec<u8> = (0..REPLY_BYTES).map(|i| (i % 251) as u8).collect();
        let taken = stream.write(&reply).expect("write");
        assert_eq!(taken, REPLY_BYTES, "all plaintext taken in one batch");
        assert!(
            stream.wants_write(),
            "part of the record waits for the socket"
        );

        start_reading.send(()).expect("client gone");
        while stream.wants_write() {
            assert!(Instant::now() < deadline, "ciphertext never drained");
            match stream.write(&[]) {
                Ok(0) => {}
                Ok(n) => panic!("write(&[]) took {n} bytes"),
                Err(e) => panic!("flush failed: {e}"),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(client.join().expect("client thread"), reply);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn suboptions_map_onto_options_and_refuse_what_rustls_lacks() {
        let mut options = TlsOptions::default();
        for (name, value) in [
            ("ssl_verify_mode", "3"),
            ("ssl_min_version", "tlsv1.3"),
            ("ssl_keyformat", "2"),
            ("ssl_wbuf_size", "32"),
        ] {
            assert_eq!(
                options.apply_suboption(name, Some(value)),
                Ok(true),
                "{name}"
            );
        }
        assert_eq!(options.apply_suboption("ssl_session_cache", None), Ok(true));
        assert_eq!(options.verify_mode, VerifyMode::Once);
        assert_eq!(options.min_version, MinVersion::Tls13);
        assert_eq!(options.key_format, KeyFormat::Der);
        assert_eq!(options.wbuf_size_bytes, 32 * 1024);
        assert!(options.session_cache);
        assert_eq!(options.apply_suboption("ssl_bogus", Some("1")), Ok(false));
        for (name, value) in [
            ("ssl_min_version", "0"),
            ("ssl_min_version", "tlsv1.1"),
            ("ssl_verify_mode", "4"),
            ("ssl_keyformat", "3"),
            ("ssl_kernel_tls", ""),
            ("ssl_chain_cert", ""),
            ("ssl_wbuf_size", "0"),
        ] {
            assert!(
                options.apply_suboption(name, Some(value)).is_err(),
                "{name}={value}"
            );
        }
        let enabled = TlsOptions {
            enabled: true,
            ..TlsOptions::default()
        };
        assert!(enabled.check().unwrap_err().contains("ssl_chain_cert"));
        let unverifiable = TlsOptions {
            enabled: true,
            chain_cert: Some(PathBuf::from("c.pem")),
            verify_mode: VerifyMode::Require,
            ..TlsOptions::default()
        };
        assert!(unverifiable.check().unwrap_err().contains("ssl_ca_cert"));
    }

    #[test]
    fn ssl_ciphers_accepts_openssl_and_iana_names_of_rustls_suites() {
        let named = |list: &str| {
            provider(&TlsOptions {
                ciphers: Some(list.to_owned()),
                ..TlsOptions::default()
            })
            .map(|p| p.cipher_suites.iter().map(suite_name).collect::<Vec<_>>())
        };
        let only_one_tls12 = named("ECDHE-RSA-AES128-GCM-SHA256").expect("known suite");
        assert!(only_one_tls12.contains(&"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_owned()));
        assert_eq!(
            only_one_tls12
                .iter()
                .filter(|n| !n.starts_with("TLS13_"))
                .count(),
            1
        );
        assert_eq!(
            only_one_tls12
                .iter()
                .filter(|n| n.starts_with("TLS13_"))
                .count(),
            3,
            "TLS 1.3 suites are kept when none is named"
        );
        let tls13 = named("TLS_AES_256_GCM_SHA384:tls_ecdhe_ecdsa_with_aes_256_gcm_sha384")
            .expect("known suites");
        assert_eq!(
            tls13,
            vec![
                "TLS13_AES_256_GCM_SHA384".to_owned(),
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".to_owned()
            ]
        );
        assert!(named("HIGH:!aNULL").is_err());
        assert!(named("RC4-SHA").is_err());
        assert!(named(":").is_err());
    }
}
