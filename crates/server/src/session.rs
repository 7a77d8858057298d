//! The contract between the connection runtime and the protocol dispatchers.
//!
//! The runtime owns sockets and buffers; a dispatcher turns the bytes at the front of a
//! connection's input into engine calls and reply bytes. One call handles at most one
//! request and says what the runtime should do next with a [`Step`].

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

use engine::Engine;

/// The version reported by `version` and `stats`. It leads with the memcached release
/// whose protocol fogcached speaks, because clients and test tools (libmemcached's
/// `memccapable`, exporters) parse the leading `major.minor.patch` to decide which
/// behaviours to expect; fogcached's own version follows it.
pub const SERVER_VERSION: &str = concat!("1.6.21-fogcached-", env!("CARGO_PKG_VERSION"));

/// Server-wide settings the dispatchers need (the rest of the CLI lives in `config`).
#[derive(Debug)]
pub struct ServerSettings {
    /// `-A`: allow the `shutdown` command.
    pub shutdown_enabled: bool,
    /// `-v`, `-vv`; also set by the `verbosity` command.
    pub verbosity: AtomicU32,
    /// `-c`: the connection limit.
    pub max_connections: u32,
    /// `-t`: worker threads.
    pub worker_threads: u32,
    /// `-p`.
    pub tcp_port: u16,
    /// `-l`.
    pub listen_address: String,
    /// `-s`, for `stats settings` (`domain_socket`).
    pub domain_socket: Option<String>,
    /// `-a`, for `stats settings` (`umask`).
    pub unix_mode: u32,
    /// Set when a shutdown was requested (command or signal).
    pub shutdown_requested: AtomicBool,
    /// `-Y`, `-S`: who may use the server.
    pub auth: crate::auth::AuthSettings,
    /// `-Z` and `-o ssl_*` as given (for `stats settings`).
    pub tls_options: crate::tls::TlsOptions,
    /// The certificates in use when `-Z` is on (`refresh_certs`, TLS statistics).
    pub tls: Option<std::sync::Arc<crate::tls::TlsContext>>,
}

impl Default for ServerSettings {
    /// The command-line defaults (for tests that need settings without a command line).
    fn default() -> Self {
        ServerSettings {
            shutdown_enabled: false,
            verbosity: AtomicU32::new(0),
            max_connections: 1024,
            worker_threads: 4,
            tcp_port: 11211,
            listen_address: "127.0.0.1".to_owned(),
            domain_socket: None,
            unix_mode: 0o700,
            shutdown_requested: AtomicBool::new(false),
            auth: crate::auth::AuthSettings::default(),
            tls_options: crate::tls::TlsOptions::default(),
            tls: None,
        }
    }
}

/// Counters kept by the runtime, reported by `stats` under memcached's names.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub connection_structures: AtomicU64,
    pub conn_yields: AtomicU64,
    pub listen_disabled_num: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub accepting_conns: AtomicBool,
    /// Authentication attempts that completed (memcached's `auth_cmds`) and those that
    /// failed (`auth_errors`).
    pub auth_cmds: AtomicU64,
    pub auth_errors: AtomicU64,
    /// Per-worker counters and the connection table (added by the runtime; `Default`
    /// gives an empty one for dispatcher tests).
    pub runtime: crate::registry::RuntimeState,
}

/// Everything a dispatcher may touch while handling one request.
pub struct Session<'a> {
    pub engine: &'a Engine,
    pub settings: &'a ServerSettings,
    pub stats: &'a ServerStats,
    /// Reply bytes are appended here; the runtime writes them out once per batch.
    pub out: &'a mut Vec<u8>,
    /// Keys of the multi-key retrieval at the front of the input that were already
    /// answered by earlier calls (see [`Step::Partial`]); 0 for a fresh request.
    pub resume_keys: usize,
    /// Once `out` holds this many bytes, a multi-key retrieval stops before its next key
    /// and returns [`Step::Partial`], so that one request cannot make the server buffer
    /// the replies of all its keys at once. `usize::MAX` never stops one.
    pub out_high_water_bytes: usize,
}

/// What the runtime does after a dispatcher call.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// One request was handled; drop `consumed` bytes of input and call again.
    Consumed(usize),
    /// The input holds only part of a request: read more, then call again.
    NeedMore,
    /// Drop `consumed` bytes, then discard the next `bytes` bytes of input as they arrive
    /// (the payload of a refused store), without buffering them.
    Swallow { consumed: usize, bytes: usize },
    /// A multi-key retrieval answered its first `keys_done` keys and stopped because
    /// `out` reached `out_high_water_bytes`: keep the request in the input, write out
    /// what is in `out`, and once it has drained call again with `resume_keys` set to
    /// `keys_done`. Always more than the `resume_keys` of the call.
    Partial { keys_done: usize },
    /// Write out what is in `out`, then close the connection (`quit`, hostile input).
    Close,
    /// Write out what is in `out`, then stop the whole server (`shutdown`).
    Shutdown,
}
