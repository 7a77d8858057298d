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

/// `-B`: the protocol connections speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BindingProtocol {
    /// Each connection's first byte decides, as memcached's default.
    #[default]
    Auto,
    /// Everything is read as the text protocol (a binary request is a line of bytes
    /// that ends in `ERROR`, as memcached reads it).
    Ascii,
    /// Everything is read as the binary protocol (a text command fails its magic byte
    /// and the connection closes unanswered, as memcached closes it).
    Binary,
}

impl BindingProtocol {
    /// memcached's `binding_protocol` in `stats settings`.
    pub fn name(&self) -> &'static str {
        match self {
            BindingProtocol::Auto => "auto-negotiate",
            BindingProtocol::Ascii => "ascii",
            BindingProtocol::Binary => "binary",
        }
    }
}

/// Server-wide settings the dispatchers need (the rest of the CLI lives in `cli`).
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
    /// `-U`: the bound UDP port, 0 when UDP is off.
    pub udp_port: u16,
    /// `-l`.
    pub listen_address: String,
    /// `-s`, for `stats settings` (`domain_socket`).
    pub domain_socket: Option<String>,
    /// `-a`, for `stats settings` (`umask`).
    pub unix_mode: u32,
    /// `-b`, for `stats settings` (`tcp_backlog`).
    pub tcp_backlog: u32,
    /// `-B`: `Auto` unless given.
    pub binding: BindingProtocol,
    /// Not `-F`: `flush_all` is allowed.
    pub flush_enabled: bool,
    /// Set when a shutdown was requested (command or signal).
    pub shutdown_requested: AtomicBool,
    /// Not `-X`: `stats cachedump` and `lru_crawler metadump` are allowed.
    pub dumps_enabled: bool,
    /// Not `-W`: `watch` is allowed.
    pub watch_enabled: bool,
    /// `--metrics-listen`, for `stats settings`.
    pub metrics_listen: Option<String>,
    /// `--upstream`: the fog layer (read-through, write-through), off when `None`.
    pub upstream: Option<std::sync::Arc<crate::upstream::Upstream>>,
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
            udp_port: 0,
            listen_address: "127.0.0.1".to_owned(),
            domain_socket: None,
            unix_mode: 0o700,
            tcp_backlog: crate::cli::LISTEN_BACKLOG_DEFAULT,
            binding: BindingProtocol::Auto,
            flush_enabled: true,
            shutdown_requested: AtomicBool::new(false),
            dumps_enabled: true,
            watch_enabled: true,
            metrics_listen: None,
            upstream: None,
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
    /// `stats detail`: per-prefix counts, off until `stats detail on` or `-D`.
    pub prefixes: crate::detail::PrefixStats,
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
    /// The connection's file descriptor, as `watch` lines show it (`cfd=`); -1 when
    /// there is no socket (dispatcher tests).
    pub client_fd: i32,
    /// The upstream's reply to the request this request stopped at with
    /// [`Step::Upstream`] (for the key at `resume_keys` of a multi-key retrieval);
    /// `None` for a fresh request or without the fog layer.
    pub upstream_reply: Option<&'a crate::upstream::Replies>,
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
    /// Drop `consumed` bytes, write out what is in `out` (the `OK`), and turn the
    /// connection into a watcher of the event kinds `kinds` (`watch`): it takes no more
    /// requests and is handed to the logger thread.
    Watch { consumed: usize, kinds: u32 },
    /// The request needs the upstream first (`--upstream`: a miss to fill, a write to
    /// pass on). Keep the request in the input, write out what is in `out` (the replies
    /// of its first `keys_done` keys included), send `request` upstream and, once its
    /// reply came, call again with `resume_keys` = `keys_done` and the reply in
    /// `upstream_reply`.
    Upstream {
        keys_done: usize,
        /// Boxed: a `Step` is returned for every request, and stays two words wide.
        request: Box<crate::upstream::UpstreamRequest>,
    },
    /// Write out what is in `out`, then close the connection (`quit`, hostile input).
    Close,
    /// Write out what is in `out`, then stop the whole server (`shutdown`).
    Shutdown,
}
