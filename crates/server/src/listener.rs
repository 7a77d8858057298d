//! The listener thread: accepts connections on every `-l` address (or on the `-s` unix
//! socket), enforces `-c`, and hands each connection to a worker, round-robin.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::registry::{ConnEntry, ConnState};
use crate::runtime::Shared;
use crate::stream::Stream;
use crate::tls::TlsContext;
use crate::worker::{conn_addr, Incoming, WorkerHandle};

/// memcached's reply to a connection over the `-c` limit (its `maxconns_fast` mode).
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";
/// The token of the listener's waker; listening socket `i` uses token `i`.
const WAKER_TOKEN: Token = Token(usize::MAX);
/// Connections accepted per socket before the listener polls again, so that one busy
/// address cannot starve the others or the shutdown check.
const ACCEPT_BATCH_MAX: usize = 64;
/// How long accepting pauses when the process runs out of file descriptors.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);
const EVENTS_CAPACITY: usize = 64;

/// A bound listening socket.
pub struct ListenSocket {
    listener: Listening,
    /// `tcp:<ip>:<port>` or `unix:<path>`, for `stats conns`.
    label: Arc<str>,
    /// `-Z`: connections accepted here speak TLS (not on a `notls:` address).
    tls: Option<Arc<TlsContext>>,
}

/// memcached's prefix of a `-l` address that stays plain when `-Z` is on.
pub const NOTLS_PREFIX: &str = "notls:";

enum Listening {
    Tcp(TcpListener),
    /// The socket and its path, removed when the listener stops.
    Unix(UnixListener, PathBuf),
}

impl ListenSocket {
    /// The bound TCP address; None for the unix socket.
    pub fn local_addr(&self) -> std::io::Result<Option<SocketAddr>> {
        match &self.listener {
            Listening::Tcp(listener) => listener.local_addr().map(Some),
            Listening::Unix(..) => Ok(None),
        }
    }

    /// `-b`: the listen(2) backlog (memcached's default 1024). mio listens with its own
    /// (128 for TCP, the kernel's maximum for a unix socket); Linux takes a second
    /// listen(2) on a listening socket as its new backlog, for TCP and unix sockets
    /// alike, capped at `net.core.somaxconn`.
    pub fn set_backlog(&self, backlog: u32) -> anyhow::Result<()> {
        let backlog = libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX);
        // SAFETY: listen(2) on a socket this struct owns; no memory is passed.
        if unsafe { libc::listen(self.raw_fd(), backlog) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("listen backlog {backlog} on {}", self.label));
        }
        Ok(())
    }

    /// `-o sock_cookie_id`: the socket's `SO_MARK` (firewall mark), which connections
    /// accepted from it inherit, as memcached sets it. Needs `CAP_NET_ADMIN`.
    pub fn set_mark(&self, mark: u32) -> std::io::Result<()> {
        // SAFETY: setsockopt(2) on a socket this struct owns, reading a u32 of the size
        // given.
        let result = unsafe {
            libc::setsockopt(
                self.raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MARK,
                std::ptr::addr_of!(mark).cast(),
                std::mem::size_of::<u32>() as libc::socklen_t,
            )
        };
        if result != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn raw_fd(&self) -> i32 {
        match &self.listener {
            Listening::Tcp(listener) => listener.as_raw_fd(),
            Listening::Unix(listener, _) => listener.as_raw_fd(),
        }
    }

    /// One connection from the backlog, with the peer as `stats conns` shows it and its
    /// address (`None` for a unix socket's).
    fn accept(&self) -> std::io::Result<(Stream, String, Option<SocketAddr>)> {
        match &self.listener {
            Listening::Tcp(listener) => {
                let (stream, peer) = listener.accept()?;
                let stream = match &self.tls {
                    None => Stream::Tcp(stream),
                    // Fails only for a configuration rustls refuses, which loading the
                    // certificates already checked; the client just sees the close.
                    Some(tls) => {
                        Stream::Tls(Box::new(tls.accept(stream).map_err(|e| {
                            std::io::Error::new(ErrorKind::ConnectionAborted, e)
                        })?))
                    }
                };
                Ok((stream, conn_addr(&peer), Some(peer)))
            }
            // A unix client is anonymous (memcached prints `?:<AF 0>` for it); the
            // socket's path says which listener it came through.
            Listening::Unix(listener, _) => {
                let (stream, _) = listener.accept()?;
                Ok((Stream::Unix(stream), self.label.to_string(), None))
            }
        }
    }
}

impl Drop for ListenSocket {
    fn drop(&mut self) {
        // The socket file would otherwise outlive the server; the next start would
        // remove it anyway, but a stale path misleads an operator (and `ls`).
        if let Listening::Unix(_, path) = &self.listener {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds the `-s` unix-domain socket with permissions `-a` (octal, as memcached's
/// `umask`-based default 0700). A socket file left by a server that died is replaced;
/// any other file at the path is refused, never removed.
pub fn bind_unix(path: &Path, mode: u32) -> anyhow::Result<Vec<ListenSocket>> {
    debug_assert!(mode <= 0o777, "the unix socket mode is validated by config");
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)
            .with_context(|| format!("cannot remove the old unix socket {}", path.display()))?,
        Ok(_) => bail!(
            "failed to listen on unix socket {}: a file that is not a socket is in the way",
            path.display()
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("cannot inspect {}", path.display()));
        }
    }
    let listener = UnixListener::bind(path)
        .with_context(|| format!("failed to listen on unix socket {}", path.display()))?;
    // memcached sets its umask around bind(2); chmod after bind has the same result
    // without touching the process-wide umask while other threads may create files.
    // Connecting needs write permission on the socket, so until the chmod the socket
    // may be wider or narrower than asked only for a client that races start-up.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).with_context(|| {
        format!(
            "cannot set the mode {mode:o} of unix socket {}",
            path.display()
        )
    })?;
    Ok(vec![ListenSocket {
        listener: Listening::Unix(listener, path.to_path_buf()),
        label: format!("unix:{}", path.display()).into(),
        tls: None,
    }])
}

/// Resolves one `-l` entry (`host`, `ip`, `host:port`, `[v6]:port`) with `-p` as the
/// default port.
pub fn resolve(entry: &str, default_port: u16) -> anyhow::Result<Vec<SocketAddr>> {
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    if let Ok(ip) = entry.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, default_port)]);
    }
    let addrs: Vec<SocketAddr> = if entry.contains(':') {
        entry.to_socket_addrs()
    } else {
        (entry, default_port).to_socket_addrs()
    }
    .with_context(|| format!("cannot resolve listen address {entry:?}"))?
    .collect();
    if addrs.is_empty() {
        bail!("listen address {entry:?} resolves to nothing");
    }
    Ok(addrs)
}

/// Binds every `-l` address; fails if any cannot be bound, as memcached does. With `tls`
/// (`-Z`), connections are TLS except on addresses prefixed `notls:`.
pub fn bind_all(
    entries: &[String],
    default_port: u16,
    tls: Option<&Arc<TlsContext>>,
) -> anyhow::Result<Vec<ListenSocket>> {
    let mut sockets = Vec::new();
    for entry in entries {
        let (entry, tls) = match entry.strip_prefix(NOTLS_PREFIX) {
            Some(plain) => (plain, None),
            None => (entry.as_str(), tls),
        };
        for addr in resolve(entry, default_port)? {
            // mio binds with SO_REUSEADDR; the backlog is `-b`'s (`set_backlog`).
            let listener = TcpListener::bind(addr)
                .with_context(|| format!("failed to listen on TCP {addr}"))?;
            let bound = listener.local_addr()?;
            sockets.push(ListenSocket {
                listener: Listening::Tcp(listener),
                label: conn_addr(&bound).into(),
                tls: tls.cloned(),
            });
        }
    }
    if sockets.is_empty() {
        bail!("no listen address");
    }
    Ok(sockets)
}

/// Starts the listener thread. Returns its waker (to notice shutdown) and its handle.
pub fn spawn(
    mut sockets: Vec<ListenSocket>,
    workers: Vec<WorkerHandle>,
    shared: Arc<Shared>,
) -> std::io::Result<(Arc<Waker>, JoinHandle<()>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
    let now_s = shared.engine.clock().now_s();
    for (index, socket) in sockets.iter_mut().enumerate() {
        let token = Token(index);
        match &mut socket.listener {
            Listening::Tcp(listener) => {
                poll.registry()
                    .register(listener, token, Interest::READABLE)?;
            }
            Listening::Unix(listener, _) => {
                poll.registry()
                    .register(listener, token, Interest::READABLE)?;
            }
        }
        shared.stats.runtime.connections.insert(
            socket.raw_fd(),
            Arc::new(ConnEntry::new(
                socket.label.to_string(),
                None,
                ConnState::Listening,
                now_s,
            )),
        );
    }
    shared.stats.accepting_conns.store(true, Ordering::Relaxed);
    let thread = std::thread::Builder::new()
        .name("fc-listener".to_owned())
        .spawn(move || {
            let mut listener = Listener {
                pending: vec![true; sockets.len()],
                sockets,
                workers,
                shared,
                next_worker: 0,
            };
            listener.run(poll);
        })?;
    Ok((waker, thread))
}

struct Listener {
    sockets: Vec<ListenSocket>,
    /// Socket `i` may have connections waiting (edge-triggered: cleared on WouldBlock).
    pending: Vec<bool>,
    workers: Vec<WorkerHandle>,
    shared: Arc<Shared>,
    next_worker: usize,
}

enum Accepted {
    /// The backlog is empty.
    Drained,
    /// The batch limit stopped accepting; more may be waiting.
    More,
    /// Out of file descriptors: pause.
    Pause,
}

impl Listener {
    fn run(&mut self, mut poll: Poll) {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut paused_until: Option<Instant> = None;
        loop {
            engine::fault::panic_point();
            let timeout = if paused_until.is_some() {
                Some(ACCEPT_PAUSE)
            } else if self.pending.iter().any(|p| *p) {
                Some(Duration::ZERO)
            } else {
                None
            };
            if let Err(e) = poll.poll(&mut events, timeout) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                if self.shared.verbosity() > 0 {
                    eprintln!("listener poll failed: {e}");
                }
                break;
            }
            if self
                .shared
                .settings
                .shutdown_requested
                .load(Ordering::Acquire)
            {
                break;
            }
            for event in events.iter() {
                if let Some(pending) = self.pending.get_mut(event.token().0) {
                    *pending = true;
                }
            }
            if let Some(until) = paused_until {
                if Instant::now() < until {
                    continue;
                }
                paused_until = None;
                self.shared
                    .stats
                    .accepting_conns
                    .store(true, Ordering::Relaxed);
            }
            for index in 0..self.sockets.len() {
                if !self.pending[index] {
                    continue;
                }
                match self.accept_batch(index) {
                    Accepted::Drained => self.pending[index] = false,
                    Accepted::More => {}
                    Accepted::Pause => {
                        self.shared
                            .stats
                            .accepting_conns
                            .store(false, Ordering::Relaxed);
                        self.shared
                            .stats
                            .listen_disabled_num
                            .fetch_add(1, Ordering::Relaxed);
                        paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                        break;
                    }
                }
            }
        }
        self.shared
            .stats
            .accepting_conns
            .store(false, Ordering::Relaxed);
        for socket in &self.sockets {
            self.shared
                .stats
                .runtime
                .connections
                .remove(socket.raw_fd());
        }
    }

    fn accept_batch(&mut self, index: usize) -> Accepted {
        for _ in 0..ACCEPT_BATCH_MAX {
            match self.sockets[index].accept() {
                Ok((stream, peer, peer_addr)) => self.admit(index, stream, peer, peer_addr),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Accepted::Drained,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                    ) => {}
                Err(e) => {
                    let out_of_fds = matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    );
                    if self.shared.verbosity() > 0 {
                        eprintln!("accept failed: {e}");
                    }
                    if out_of_fds {
                        return Accepted::Pause;
                    }
                    return Accepted::Drained;
                }
            }
        }
        Accepted::More
    }

    fn admit(
        &mut self,
        index: usize,
        mut stream: Stream,
        peer: String,
        peer_addr: Option<SocketAddr>,
    ) {
        let stats = &self.shared.stats;
        let max_connections = u64::from(self.shared.settings.max_connections);
        if stats.curr_connections.load(Ordering::Relaxed) >= max_connections {
            reject(&mut stream);
            stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
            return;
        }
        stats.curr_connections.fetch_add(1, Ordering::Relaxed);
        stats.total_connections.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay();
        let mut incoming = Incoming {
            stream,
            peer,
            peer_addr,
            listen_addr: Arc::clone(&self.sockets[index].label),
        };
        let worker_count = self.workers.len();
        for attempt in 0..worker_count {
            let worker = &self.workers[(self.next_worker + attempt) % worker_count];
            match worker.hand_off(incoming) {
                Ok(()) => {
                    self.next_worker = (self.next_worker + attempt + 1) % worker_count;
                    return;
                }
                Err(returned) => incoming = returned,
            }
        }
        // Every worker's queue is full: the server is overloaded, refuse like -c.
        reject(&mut incoming.stream);
        stats.curr_connections.fetch_sub(1, Ordering::Relaxed);
        stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
    }
}

/// Tells a refused client why, then closes (by dropping the stream).
fn reject(stream: &mut Stream) {
    stream.refuse(TOO_MANY_CONNECTIONS);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_listen_entries() -> anyhow::Result<()> {
        assert_eq!(
            resolve("127.0.0.1", 11211)?,
            vec!["127.0.0.1:11211".parse()?]
        );
        assert_eq!(resolve("127.0.0.1:9", 11211)?, vec!["127.0.0.1:9".parse()?]);
        assert_eq!(resolve("::1", 5)?, vec!["[::1]:5".parse()?]);
        assert_eq!(resolve("[::1]:7", 5)?, vec!["[::1]:7".parse()?]);
        assert!(resolve("localhost", 5)?.iter().all(|a| a.port() == 5));
        Ok(())
    }
}
