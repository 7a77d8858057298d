//! Start-up and shutdown: builds the engine, binds the listening sockets, starts the
//! listener and worker threads, and stops them all when a shutdown is requested (the
//! `shutdown` command, SIGTERM or SIGINT).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use crossbeam_channel::{Receiver, Sender};
use engine::{Engine, SystemClock};
use mio::Waker;

use crate::cli::Config;
use crate::connection::Dispatchers;
use crate::listener;
use crate::session::{ServerSettings, ServerStats};
use crate::worker::{
    self, probe_io_uring, probe_multishot_recv, IoEngine, IoUringRecv, WorkerHandle,
};

/// File descriptors kept beyond `-c` for listeners, the engine and the process itself.
const RESERVED_FDS: u64 = 64;

/// What every runtime thread shares.
pub struct Shared {
    pub engine: Arc<Engine>,
    pub settings: ServerSettings,
    pub stats: ServerStats,
    pub config: Config,
    pub dispatchers: Dispatchers,
    /// The thread that streams the event log to `watch` connections (set once, right
    /// after start-up).
    pub logger: std::sync::OnceLock<crate::watch::Logger>,
    /// The Prometheus endpoint (`--metrics-listen`), set once at start-up.
    pub metrics: std::sync::OnceLock<crate::metrics::MetricsServer>,
    shutdown_sender: Sender<()>,
}

impl Shared {
    pub fn verbosity(&self) -> u32 {
        self.settings.verbosity.load(Ordering::Relaxed)
    }

    /// Asks the server to stop; [`Server::wait`] does the stopping.
    pub fn request_shutdown(&self) {
        self.settings
            .shutdown_requested
            .store(true, Ordering::Release);
        // A full channel means a request is already queued.
        let _ = self.shutdown_sender.try_send(());
    }
}

/// Lets another thread (e.g. the signal handler) stop the server.
#[derive(Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    pub fn request(&self) {
        self.shared.request_shutdown();
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    local_addrs: Vec<SocketAddr>,
    udp_addrs: Vec<SocketAddr>,
    listener: (Arc<Waker>, JoinHandle<()>),
    workers: Vec<(WorkerHandle, JoinHandle<()>)>,
    shutdown_receiver: Receiver<()>,
}

impl Server {
    /// Builds the engine, binds every `-l` address and starts all threads.
    pub fn start(config: Config) -> anyhow::Result<Server> {
        Server::start_with(config, Dispatchers::default())
    }

    /// [`Server::start`] with a toy protocol in place of memcached's (the runtime's own
    /// tests, `runtime/toy_tests.rs`).
    pub(crate) fn start_with(
        mut config: Config,
        dispatchers: Dispatchers,
    ) -> anyhow::Result<Server> {
        if config.dram_reserve_default {
            config.engine.dram_max_bytes = dram_reserve_bytes(&config);
        }
        raise_fd_limit(
            u64::from(config.max_connections) + RESERVED_FDS,
            config.verbosity,
        );
        let clock = SystemClock::new();
        // Requests read the engine time from the ticker's published value (see
        // `SystemClock`): one load instead of a clock read per request.
        clock
            .start_ticker()
            .context("cannot start the clock thread")?;
        let engine =
            Engine::new(config.engine.clone(), clock).context("invalid engine settings")?;
        say_whether_the_pool_fits(&config, &engine);
        let recovery = engine.recovery_report();
        if let Some(note) = recovery.start.cold_start_note() {
            let pool = match config.engine.slow_tier.as_ref().map(|spec| &spec.backing) {
                Some(tier::RegionBacking::File { path }) => path.display().to_string(),
                _ => "(no file)".to_string(),
            };
            eprintln!("fogcached: slow-tier pool {pool} {note}");
        }
        if recovery.pool && !recovery.formatted {
            eprintln!(
                "fogcached: slow-tier pool recovered: {} items in {} ms ({}); dropped {} expired \
                 or flushed, {} duplicates; {} chunks held no valid record{}",
                recovery.items_recovered,
                recovery.elapsed_us / 1000,
                if recovery.was_clean {
                    "after a clean stop"
                } else {
                    "after a crash: torn or stale records were skipped"
                },
                recovery.items_dropped_dead,
                recovery.items_dropped_duplicate,
                recovery.chunks_not_valid,
                if recovery.pages_damaged > 0 {
                    format!(
                        ", {} damaged page-table entries freed",
                        recovery.pages_damaged
                    )
                } else {
                    String::new()
                }
            );
        }
        // Before the bind: from the bind on, clients can connect while the rest starts.
        let io_engine = resolve_io_engine(config.io_engine, config.verbosity)?;
        let io_uring_recv =
            resolve_io_uring_recv(io_engine, config.io_uring_recv, config.verbosity)?;
        let sockets = match &config.unix_socket {
            Some(path) => listener::bind_unix(path, config.unix_mode)?,
            None => {
                listener::bind_all(&config.listen, config.tcp_port, config.tls_context.as_ref())?
            }
        };
        for socket in &sockets {
            socket.set_backlog(config.listen_backlog)?;
            if let Some(mark) = config.sock_cookie_id {
                // memcached reports a failed setsockopt and serves on (perror).
                if let Err(e) = socket.set_mark(mark) {
                    eprintln!("fogcached: warning: -o sock_cookie_id={mark}: SO_MARK not set: {e}");
                }
            }
        }
        let mut local_addrs = Vec::new();
        for socket in &sockets {
            local_addrs.extend(socket.local_addr()?);
        }
        // Bound before the settings are made, so that `stats settings` names the address
        // it listens on (with the real port when port 0 was asked for).
        let metrics_listener = config
            .metrics_listen
            .as_deref()
            .map(crate::metrics::MetricsServer::bind)
            .transpose()?;
        let metrics_listen = match &metrics_listener {
            Some(listener) => Some(listener.local_addr()?.to_string()),
            None => None,
        };
        // `-U`: beside each TCP address, as memcached (not with `-s`: config drops it).
        let udp_sockets = match config.udp_port {
            Some(port) => crate::udp::bind_all(&config.listen, port)?,
            None => Vec::new(),
        };
        let udp_addrs = udp_sockets
            .iter()
            .map(std::net::UdpSocket::local_addr)
            .collect::<std::io::Result<Vec<_>>>()?;
        let upstream = match &config.upstream {
            Some(upstream_config) => {
                let upstream = crate::upstream::Upstream::new(upstream_config.clone())
                    .context("the fog layer's upstream servers")?;
                upstream.check_not_self(&local_addrs)?;
                Some(Arc::new(upstream))
            }
            None => None,
        };
        let settings = ServerSettings {
            shutdown_enabled: config.shutdown_enabled,
            verbosity: AtomicU32::new(config.verbosity),
            max_connections: config.max_connections,
            worker_threads: config.worker_threads,
            tcp_port: local_addrs
                .first()
                .map_or(config.tcp_port, SocketAddr::port),
            udp_port: udp_addrs.first().map_or(0, SocketAddr::port),
            listen_address: config.listen_spec.clone(),
            domain_socket: config
                .unix_socket
                .as_ref()
                .map(|path| path.display().to_string()),
            unix_mode: config.unix_mode,
            tcp_backlog: config.listen_backlog,
            binding: config.binding,
            flush_enabled: config.flush_enabled,
            shutdown_requested: AtomicBool::new(false),
            dumps_enabled: config.dumps_enabled,
            watch_enabled: config.watch_enabled,
            metrics_listen,
            upstream,
            auth: config.auth.clone(),
            tls_options: config.tls.clone(),
            tls: config.tls_context.clone(),
        };
        let stats = ServerStats::default();
        stats
            .runtime
            .idle_timeout_s
            .store(config.idle_timeout_s, Ordering::Relaxed);
        stats
            .runtime
            .reqs_per_event
            .store(config.reqs_per_event, Ordering::Relaxed);
        let (shutdown_sender, shutdown_receiver) = crossbeam_channel::bounded(1);
        let shared = Arc::new(Shared {
            engine,
            settings,
            stats,
            config,
            dispatchers,
            logger: std::sync::OnceLock::new(),
            metrics: std::sync::OnceLock::new(),
            shutdown_sender,
        });
        shared
            .stats
            .prefixes
            .configure(shared.config.prefix_delimiter, shared.config.detail_enabled);
        let logger = crate::watch::Logger::spawn(Arc::downgrade(&shared))
            .context("starting the logger thread")?;
        let _ = shared.logger.set(logger);
        if let Some(listener) = metrics_listener {
            let metrics = crate::metrics::MetricsServer::start(listener, Arc::downgrade(&shared))?;
            if shared.verbosity() > 0 {
                eprintln!(
                    "fogcached metrics on http://{}/metrics",
                    metrics.local_addr()
                );
            }
            let _ = shared.metrics.set(metrics);
        }

        shared.stats.runtime.set_io_engine(io_engine.name());
        shared.stats.runtime.set_io_uring_recv(match io_engine {
            IoEngine::IoUring => io_uring_recv.name(),
            _ => "none",
        });
        shared.engine.start_background();
        if let Some(upstream) = &shared.settings.upstream {
            upstream
                .start(Arc::clone(&shared.engine))
                .context("starting the upstream thread")?;
        }
        let mut workers = Vec::new();
        for index in 0..shared.config.worker_threads as usize {
            // Each worker its own duplicate of each UDP socket, as memcached's threads.
            let udp = match udp_sockets
                .iter()
                .map(|socket| socket.try_clone().map(mio::net::UdpSocket::from_std))
                .collect::<std::io::Result<Vec<_>>>()
            {
                Ok(udp) => udp,
                Err(e) => {
                    stop_threads(&shared, None, workers);
                    return Err(e).context("duplicating the UDP sockets");
                }
            };
            match worker::spawn(index, Arc::clone(&shared), io_engine, io_uring_recv, udp) {
                Ok(worker) => workers.push(worker),
                Err(e) => {
                    stop_threads(&shared, None, workers);
                    return Err(e).context("starting worker threads");
                }
            }
        }
        let handles = workers.iter().map(|(handle, _)| handle.clone()).collect();
        let listener = match listener::spawn(sockets, handles, Arc::clone(&shared)) {
            Ok(listener) => listener,
            Err(e) => {
                stop_threads(&shared, None, workers);
                return Err(e).context("starting the listener thread");
            }
        };
        if shared.verbosity() > 0 {
            for addr in &local_addrs {
                eprintln!("fogcached listening on tcp {addr}");
            }
            for addr in &udp_addrs {
                eprintln!("fogcached listening on udp {addr} (one socket per worker thread)");
            }
            if let Some(path) = &shared.config.unix_socket {
                eprintln!("fogcached listening on unix socket {}", path.display());
            }
        }
        Ok(Server {
            shared,
            local_addrs,
            udp_addrs,
            listener,
            workers,
            shutdown_receiver,
        })
    }

    /// The bound listening addresses (with the real port when `-p 0` was given).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// The bound UDP addresses (`-U`; the real port when `-U -1` was given).
    pub fn udp_addrs(&self) -> &[SocketAddr] {
        &self.udp_addrs
    }

    /// Where the Prometheus endpoint listens, if it is on.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.shared.metrics.get().map(|m| m.local_addr())
    }

    /// The runtime's counters (for tests and embedding).
    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Blocks until a shutdown is requested, then stops every thread and the engine's
    /// background work.
    pub fn wait(self) {
        self.wait_then(|| {});
    }

    /// [`Server::wait`], calling `stopping` once the shutdown was requested, before the
    /// threads stop.
    pub fn wait_then(self, stopping: impl FnOnce()) {
        // recv fails only if every sender is gone, and `shared` holds one.
        let _ = self.shutdown_receiver.recv();
        stopping();
        self.stop();
    }

    /// Stops accepting, closes every connection, joins all threads.
    pub fn stop(self) {
        stop_threads(&self.shared, Some(self.listener), self.workers);
    }
}

fn stop_threads(
    shared: &Shared,
    listener: Option<(Arc<Waker>, JoinHandle<()>)>,
    workers: Vec<(WorkerHandle, JoinHandle<()>)>,
) {
    shared
        .settings
        .shutdown_requested
        .store(true, Ordering::Release);
    // The listener goes first so that no connection arrives at a stopped worker.
    if let Some((waker, thread)) = listener {
        let _ = waker.wake();
        let _ = thread.join();
    }
    for (handle, _) in &workers {
        handle.wake();
    }
    for (_, thread) in workers {
        let _ = thread.join();
    }
    if let Some(upstream) = &shared.settings.upstream {
        upstream.stop();
    }
    if let Some(logger) = shared.logger.get() {
        logger.join();
    }
    if let Some(metrics) = shared.metrics.get() {
        metrics.join();
    }
    // Nothing is served any more: write DRAM's items down to a persistent pool and mark
    // it clean, so a restart serves them.
    match shared.engine.stop_to_pool() {
        Ok(report) if report.pool => eprintln!(
            "fogcached: stopped cleanly: {} DRAM items written down to the slow-tier pool{}",
            report.written_down,
            if report.no_room > 0 {
                format!(", {} without room there (not kept)", report.no_room)
            } else {
                String::new()
            }
        ),
        Ok(_) => {}
        Err(e) => eprintln!("fogcached: the slow-tier pool could not be marked clean: {e}"),
    }
}

/// The event loop the workers run: `--io-engine auto` is io_uring when [`probe_io_uring`]
/// finds the kernel allows it (said at `-v`, with the reason when it does not), else
/// epoll; an explicit `io-uring` the kernel refuses stops the start with the reason.
fn resolve_io_engine(asked: IoEngine, verbosity: u32) -> anyhow::Result<IoEngine> {
    let engine = match asked {
        IoEngine::Epoll => IoEngine::Epoll,
        IoEngine::IoUring => {
            let task_run = probe_io_uring()
                .map_err(|reason| anyhow::anyhow!("--io-engine io-uring: {reason}"))?;
            say_task_run(task_run, verbosity);
            IoEngine::IoUring
        }
        IoEngine::Auto => match probe_io_uring() {
            Ok(task_run) => {
                say_task_run(task_run, verbosity);
                IoEngine::IoUring
            }
            Err(reason) => {
                if verbosity > 0 {
                    eprintln!("fogcached: io_uring not used ({reason}); the workers run epoll");
                }
                IoEngine::Epoll
            }
        },
    };
    if verbosity > 0 {
        eprintln!("fogcached: I/O engine {}", engine.name());
    }
    Ok(engine)
}

/// At `-v`: how the kernel runs the rings' completion work (`uring::TaskRun`).
fn say_task_run(task_run: worker::TaskRun, verbosity: u32) {
    if verbosity > 0 {
        eprintln!("fogcached: io_uring task work {}", task_run.name());
    }
}

/// How the io_uring loop receives: `--io-uring-recv auto` is multishot when
/// [`probe_multishot_recv`] finds the kernel has it (said at `-v`, with the reason when it
/// does not), else single; an explicit `multishot` the kernel lacks stops the start with
/// the reason. Under epoll it is moot (`Single`, nothing probed or said).
fn resolve_io_uring_recv(
    engine: IoEngine,
    asked: IoUringRecv,
    verbosity: u32,
) -> anyhow::Result<IoUringRecv> {
    if engine != IoEngine::IoUring {
        return Ok(IoUringRecv::Single);
    }
    let recv = match asked {
        IoUringRecv::Single => IoUringRecv::Single,
        IoUringRecv::Multishot => {
            probe_multishot_recv()
                .map_err(|reason| anyhow::anyhow!("--io-uring-recv multishot: {reason}"))?;
            IoUringRecv::Multishot
        }
        IoUringRecv::Auto => match probe_multishot_recv() {
            Ok(()) => IoUringRecv::Multishot,
            Err(reason) => {
                if verbosity > 0 {
                    eprintln!("fogcached: multishot receive not used ({reason})");
                }
                IoUringRecv::Single
            }
        },
    };
    if verbosity > 0 {
        eprintln!("fogcached: io_uring receive {}", recv.name());
    }
    Ok(recv)
}

/// Where `cache_memlimit` may take the DRAM tier when `--dram-max` was not given: up to
/// the machine's memory (`MemTotal`), as memcached's `-m` is a limit it can raise to
/// anything. The tier's region is anonymous `MAP_NORESERVE` memory, so the reserve is
/// address space only; its pages cost memory when a class first takes them, and the
/// page pool never takes more than the limit in force. A kernel that counts the
/// reserve anyway (`vm.overcommit_memory=2`) may refuse the mapping: then the tier
/// keeps `-m` as its ceiling (said at `-v`), where an explicit `--dram-max` that cannot
/// be mapped stops the start.
fn dram_reserve_bytes(config: &Config) -> u64 {
    let limit_bytes = config.engine.memory_limit_bytes;
    let Some(memory_bytes) = crate::slow_tier_fit::memory_total_bytes() else {
        return limit_bytes;
    };
    let page = engine::SLAB_PAGE_SIZE_BYTES as u64;
    let reserve_bytes = (memory_bytes / page * page).max(limit_bytes);
    if reserve_bytes == limit_bytes {
        return limit_bytes;
    }
    // The engine maps it again at once; this mapping only asks the kernel whether it
    // would (dropped, it is unmapped).
    match usize::try_from(reserve_bytes)
        .map_err(|e| e.to_string())
        .and_then(|bytes| tier::Region::anonymous(bytes).map_err(|e| e.to_string()))
    {
        Ok(_probe) => reserve_bytes,
        Err(reason) => {
            if config.verbosity > 0 {
                eprintln!(
                    "fogcached: cache_memlimit can raise the DRAM tier only up to -m: \
                     {reserve_bytes} bytes of address space were refused ({reason}); \
                     --dram-max sets the ceiling"
                );
            }
            limit_bytes
        }
    }
}

/// A slow tier on a pool file that the memory left after the DRAM tier cannot keep
/// cached is named at start (a warning), and `-v` says what the pool is on
/// (`slow_tier_fit.rs`).
fn say_whether_the_pool_fits(config: &Config, engine: &Engine) {
    use crate::slow_tier_fit as fit;
    let Some(spec) = config.engine.slow_tier.as_ref() else {
        return;
    };
    let tier::RegionBacking::File { path } = &spec.backing else {
        return;
    };
    let file_system = tier::file_system_at(path);
    let is_char_device = std::fs::metadata(path)
        .map(|meta| std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type()))
        .unwrap_or(false);
    let pool = fit::PoolFacts {
        path: path.clone(),
        pool_bytes: spec.size_bytes as u64,
        dram_bytes: config.engine.memory_limit_bytes,
        fs_name: file_system.name,
        is_memory: file_system.is_memory || is_char_device || engine.slow_tier_on_dax(),
    };
    let budget = fit::memory_budget();
    if config.verbosity > 0 {
        eprintln!("fogcached: {}", fit::verbose_line(&pool, budget.as_ref()));
    }
    if let Some(warning) = budget
        .as_ref()
        .and_then(|budget| fit::warning(&pool, budget))
    {
        eprintln!("fogcached: warning: {warning}");
    }
}

/// Raises the open-file limit to hold `-c` connections, as memcached does.
fn raise_fd_limit(wanted: u64, verbosity: u32) {
    // SAFETY: an all-zero rlimit is a valid value of this plain C struct.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    if limit.rlim_cur >= wanted {
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: wanted.min(limit.rlim_max),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: `raised` is a valid rlimit that stays within the hard limit.
    let ok = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
    if (!ok || raised.rlim_cur < wanted) && verbosity > 0 {
        eprintln!(
            "warning: open-file limit {} is below the {wanted} that -c needs; extra connections will be refused",
            raised.rlim_cur
        );
    }
}

#[cfg(test)]
mod toy_tests;
