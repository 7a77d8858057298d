//! `stats` output: the runtime's counters and the engine's, under memcached's names.

use std::sync::atomic::Ordering;

use crate::registry::WorkerCounters;
use crate::session::{Session, SERVER_VERSION};

/// The `stats` groups fogcached answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsGroup {
    General,
    Settings,
    Items,
    Slabs,
    Sizes,
    Conns,
    /// `stats upstreams`: the fog layer's latency histogram and per-upstream counters.
    Upstreams,
}

impl StatsGroup {
    /// Maps the argument of `stats <group>` (empty for plain `stats`).
    pub fn from_name(name: &[u8]) -> Option<StatsGroup> {
        match name {
            b"" => Some(StatsGroup::General),
            b"settings" => Some(StatsGroup::Settings),
            b"items" => Some(StatsGroup::Items),
            b"slabs" => Some(StatsGroup::Slabs),
            b"sizes" => Some(StatsGroup::Sizes),
            b"conns" => Some(StatsGroup::Conns),
            b"upstreams" => Some(StatsGroup::Upstreams),
            _ => None,
        }
    }
}

/// Calls `emit` once per statistic of `group`, in memcached's order.
pub fn collect(session: &Session<'_>, group: StatsGroup, emit: &mut dyn FnMut(&str, &str)) {
    let mut engine_emit = |name: &str, value: engine::StatValue| emit(name, &value.to_string());
    match group {
        StatsGroup::General => {
            general(session, &mut engine_emit);
            session.engine.stats(&mut engine_emit);
            if let Some(upstream) = &session.settings.upstream {
                upstream.stats.general(&mut engine_emit);
            }
        }
        StatsGroup::Settings => {
            settings(session, &mut engine_emit);
            session.engine.stats_settings(&mut engine_emit);
            upstream_settings(session, &mut engine_emit);
        }
        StatsGroup::Upstreams => {
            if let Some(upstream) = &session.settings.upstream {
                upstream.stats.detail(&mut engine_emit);
            }
        }
        StatsGroup::Items => session.engine.stats_items(&mut engine_emit),
        StatsGroup::Slabs => session.engine.stats_slabs(&mut engine_emit),
        StatsGroup::Sizes => session.engine.stats_sizes(&mut engine_emit),
        StatsGroup::Conns => conns(session, emit),
    }
}

/// `stats reset`: clears the resettable counters of the runtime and the engine.
pub fn reset(session: &Session<'_>) {
    let stats = session.stats;
    stats.total_connections.store(0, Ordering::Relaxed);
    stats.rejected_connections.store(0, Ordering::Relaxed);
    stats.conn_yields.store(0, Ordering::Relaxed);
    stats.listen_disabled_num.store(0, Ordering::Relaxed);
    stats.bytes_read.store(0, Ordering::Relaxed);
    stats.bytes_written.store(0, Ordering::Relaxed);
    stats.auth_cmds.store(0, Ordering::Relaxed);
    stats.auth_errors.store(0, Ordering::Relaxed);
    // memcached's stats_reset clears `stats detail`'s per-prefix counts too (collection
    // stays on or off as it was).
    stats.prefixes.clear();
    // memcached resets its TLS counters too (not the time since the last refresh).
    if let Some(tls) = &session.settings.tls {
        tls.handshake_errors.store(0, Ordering::Relaxed);
        tls.new_sessions.store(0, Ordering::Relaxed);
    }
    stats.runtime.reset_counters();
    session.engine.reset_stats();
    if let Some(upstream) = &session.settings.upstream {
        upstream.stats.reset();
    }
}

/// The `--upstream*` flags in `stats settings` (`upstream` is `NULL` when off).
fn upstream_settings(session: &Session<'_>, emit: &mut Emit<'_>) {
    use engine::StatValue::{Text, U64};
    let Some(upstream) = &session.settings.upstream else {
        emit("upstream", Text("NULL".to_owned()));
        return;
    };
    let config = &upstream.config;
    emit("upstream", Text(config.servers.join(",")));
    emit("upstream_writes", Text(config.writes.name().to_owned()));
    emit("upstream_ttl_max", U64(u64::from(config.ttl_max_s)));
    emit("upstream_timeout_ms", U64(u64::from(config.timeout_ms)));
    emit("upstream_conns", U64(config.conns_per_server as u64));
    emit("upstream_threads", U64(upstream.threads() as u64));
    emit(
        "upstream_breaker_failures",
        U64(u64::from(config.breaker_failures)),
    );
    emit("upstream_retry_ms", U64(u64::from(config.retry_ms)));
}

type Emit<'e> = dyn FnMut(&str, engine::StatValue) + 'e;

fn general(session: &Session<'_>, emit: &mut Emit<'_>) {
    use engine::StatValue::{Text, U64};
    let stats = session.stats;
    let runtime = &stats.runtime;
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let clock = session.engine.clock();
    let now_s = clock.now_s();
    // Uptime counts from the process start, as memcached's does (the engine clock's
    // zero may be a persistent pool's creation).
    let uptime_s = clock.uptime_s();
    let (user, system) = rusage();

    emit("pid", U64(u64::from(std::process::id())));
    emit("uptime", U64(u64::from(uptime_s)));
    emit("time", U64(clock.start_unix_s() + u64::from(now_s)));
    emit("version", Text(SERVER_VERSION.to_owned()));
    emit("pointer_size", U64(usize::BITS.into()));
    emit("rusage_user", Text(user));
    emit("rusage_system", Text(system));
    emit(
        "max_connections",
        U64(u64::from(session.settings.max_connections)),
    );
    emit("curr_connections", U64(load(&stats.curr_connections)));
    emit("total_connections", U64(load(&stats.total_connections)));
    emit(
        "rejected_connections",
        U64(load(&stats.rejected_connections)),
    );
    emit(
        "connection_structures",
        U64(load(&stats.connection_structures)),
    );
    emit(
        "conn_yields",
        U64(load(&stats.conn_yields).wrapping_add(runtime.sum(|w: &WorkerCounters| &w.conn_yields))),
    );
    emit("listen_disabled_num", U64(load(&stats.listen_disabled_num)));
    // memcached prints this one as a number, not yes/no.
    emit(
        "accepting_conns",
        U64(u64::from(stats.accepting_conns.load(Ordering::Relaxed))),
    );
    emit("threads", U64(u64::from(session.settings.worker_threads)));
    emit("auth_cmds", U64(load(&stats.auth_cmds)));
    emit("auth_errors", U64(load(&stats.auth_errors)));
    // memcached prints these two only when TLS is on.
    if let Some(tls) = &session.settings.tls {
        if tls.options().session_cache {
            emit(
                "ssl_new_sessions",
                U64(tls.new_sessions.load(Ordering::Relaxed)),
            );
        }
        emit(
            "ssl_handshake_errors",
            U64(tls.handshake_errors.load(Ordering::Relaxed)),
        );
        emit(
            "time_since_server_cert_refresh",
            U64(tls.seconds_since_refresh()),
        );
    }
    emit(
        "bytes_read",
        U64(load(&stats.bytes_read).wrapping_add(runtime.sum(|w: &WorkerCounters| &w.bytes_read))),
    );
    emit(
        "bytes_written",
        U64(load(&stats.bytes_written)
            .wrapping_add(runtime.sum(|w: &WorkerCounters| &w.bytes_written))),
    );
    emit(
        "idle_kicks",
        U64(runtime.sum(|w: &WorkerCounters| &w.idle_kicks)),
    );
    // `watch`: the event log and its watchers, under memcached's names.
    let (written, dropped) = session.engine.events().totals();
    emit("log_worker_dropped", U64(dropped));
    emit("log_worker_written", U64(written));
    emit(
        "log_watcher_skipped",
        U64(load(&runtime.watcher_lines_skipped)),
    );
    emit("log_watcher_sent", U64(load(&runtime.watcher_lines_sent)));
    emit(
        "log_watchers",
        U64(u64::from(runtime.watchers.load(Ordering::Relaxed))),
    );
}

fn settings(session: &Session<'_>, emit: &mut Emit<'_>) {
    use engine::StatValue::{Text, U64};
    let settings = session.settings;
    let runtime = &session.stats.runtime;
    let yes_no = |on: bool| Text(if on { "yes" } else { "no" }.to_owned());
    emit("maxconns", U64(u64::from(settings.max_connections)));
    emit("tcpport", U64(u64::from(settings.tcp_port)));
    emit("udpport", U64(u64::from(settings.udp_port)));
    emit("inter", Text(settings.listen_address.clone()));
    emit(
        "domain_socket",
        Text(
            settings
                .domain_socket
                .clone()
                .unwrap_or_else(|| "NULL".to_owned()),
        ),
    );
    emit("umask", Text(format!("{:o}", settings.unix_mode)));
    emit("tcp_backlog", U64(u64::from(settings.tcp_backlog)));
    emit("flush_enabled", yes_no(settings.flush_enabled));
    emit(
        "verbosity",
        U64(u64::from(settings.verbosity.load(Ordering::Relaxed))),
    );
    emit("shutdown_command", yes_no(settings.shutdown_enabled));
    emit("num_threads", U64(u64::from(settings.worker_threads)));
    // memcached gives every worker thread a UDP connection, with or without -U.
    emit(
        "num_threads_per_udp",
        U64(u64::from(settings.worker_threads)),
    );
    let prefixes = &session.stats.prefixes;
    emit(
        "stat_key_prefix",
        Text(char::from(prefixes.delimiter()).to_string()),
    );
    emit("detail_enabled", yes_no(prefixes.enabled()));
    emit("dump_enabled", yes_no(settings.dumps_enabled));
    emit("watch_enabled", yes_no(settings.watch_enabled));
    emit(
        "metrics_listen",
        Text(
            settings
                .metrics_listen
                .clone()
                .unwrap_or_else(|| "none".to_owned()),
        ),
    );
    emit(
        "watcher_logbuf_size",
        U64(crate::watch::WATCHER_BUFFER_BYTES as u64),
    );
    emit(
        "worker_logbuf_size",
        U64((engine::events::EVENT_LOG_CAPACITY * std::mem::size_of::<engine::Event>()) as u64),
    );
    emit(
        "reqs_per_event",
        U64(u64::from(runtime.reqs_per_event.load(Ordering::Relaxed))),
    );
    emit(
        "binding_protocol",
        Text(
            match settings.binding {
                // Without -B, -Y binds to the text protocol and -S to the binary one.
                crate::session::BindingProtocol::Auto => settings.auth.binding_protocol(),
                forced => forced.name(),
            }
            .to_owned(),
        ),
    );
    emit("auth_enabled_sasl", yes_no(settings.auth.sasl.is_some()));
    // memcached prints the authfile's path, or "no".
    emit(
        "auth_enabled_ascii",
        Text(settings.auth.ascii.as_ref().map_or_else(
            || "no".to_owned(),
            |users| users.path().display().to_string(),
        )),
    );
    emit("maxconns_fast", yes_no(true));
    emit(
        "idle_timeout",
        U64(u64::from(runtime.idle_timeout_s.load(Ordering::Relaxed))),
    );
    emit("io_engine", Text(runtime.io_engine().to_owned()));
    emit("io_uring_recv", Text(runtime.io_uring_recv().to_owned()));
    tls_settings(&settings.tls_options, emit);
}

/// memcached's `ssl_*` lines of `stats settings`, with its spellings of "not set".
fn tls_settings(tls: &crate::tls::TlsOptions, emit: &mut Emit<'_>) {
    use engine::StatValue::{Text, U64};
    let yes_no = |on: bool| Text(if on { "yes" } else { "no" }.to_owned());
    let path = |path: &Option<std::path::PathBuf>, unset: &str| {
        Text(
            path.as_ref()
                .map_or_else(|| unset.to_owned(), |path| path.display().to_string()),
        )
    };
    emit("ssl_enabled", yes_no(tls.enabled));
    emit("ssl_chain_cert", path(&tls.chain_cert, "(null)"));
    emit("ssl_key", path(&tls.key, "(null)"));
    emit("ssl_verify_mode", U64(tls.verify_mode as u64));
    emit("ssl_keyformat", U64(tls.key_format as u64));
    emit(
        "ssl_ciphers",
        Text(tls.ciphers.clone().unwrap_or_else(|| "NULL".to_owned())),
    );
    emit("ssl_ca_cert", path(&tls.ca_cert, "NULL"));
    emit("ssl_wbuf_size", U64(tls.wbuf_size_bytes as u64));
    emit("ssl_session_cache", yes_no(tls.session_cache));
    emit("ssl_kernel_tls", yes_no(false));
    emit("ssl_min_version", Text(tls.min_version.name().to_owned()));
}

fn conns(session: &Session<'_>, emit: &mut dyn FnMut(&str, &str)) {
    let now_s = session.engine.clock().now_s();
    for (fd, entry) in session.stats.runtime.connections.snapshot() {
        if entry.addr.starts_with("udp") {
            // memcached's marker of a UDP connection.
            emit(&format!("{fd}:UDP"), "UDP");
        }
        emit(&format!("{fd}:addr"), &entry.addr);
        if let Some(listen_addr) = &entry.listen_addr {
            emit(&format!("{fd}:listen_addr"), listen_addr);
        }
        emit(&format!("{fd}:state"), entry.state().name());
        let idle_s = now_s.saturating_sub(entry.last_cmd_s());
        emit(&format!("{fd}:secs_since_last_cmd"), &idle_s.to_string());
    }
}

/// `getrusage(RUSAGE_SELF)` user and system time as memcached prints them
/// (`seconds.microseconds`, six digits).
fn rusage() -> (String, String) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_SELF is always accepted.
    let result = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if result != 0 {
        return ("0.000000".to_owned(), "0.000000".to_owned());
    }
    let format = |tv: libc::timeval| format!("{}.{:06}", tv.tv_sec, tv.tv_usec);
    (format(usage.ru_utime), format(usage.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{ConnEntry, ConnState};
    use crate::session::{ServerSettings, ServerStats};
    use std::sync::Arc;

    fn collect_all(group: StatsGroup, stats: &ServerStats) -> Vec<(String, String)> {
        let engine = engine::Engine::new(
            engine::EngineConfig::default(),
            engine::ManualClock::new(1_700_000_000),
        );
        let engine = match engine {
            Ok(engine) => engine,
            Err(e) => panic!("engine: {e}"),
        };
        let settings = ServerSettings::default();
        let mut out = Vec::new();
        let session = Session {
            engine: &engine,
            settings: &settings,
            stats,
            out: &mut out,
            resume_keys: 0,
            out_high_water_bytes: usize::MAX,
            client_fd: -1,
            upstream_reply: None,
        };
        let mut pairs = Vec::new();
        collect(&session, group, &mut |name, value| {
            pairs.push((name.to_owned(), value.to_owned()))
        });
        pairs
    }

    fn value<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
        pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn general_has_runtime_keys_and_sums_workers() {
        let stats = ServerStats::default();
        let worker = stats.runtime.add_worker();
        WorkerCounters::add(&worker.bytes_read, 7);
        WorkerCounters::add(&worker.bytes_written, 9);
        stats.total_connections.store(3, Ordering::Relaxed);
        let pairs = collect_all(StatsGroup::General, &stats);
        let names: Vec<&str> = pairs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(&names[..4], ["pid", "uptime", "time", "version"]);
        assert_eq!(value(&pairs, "uptime"), Some("0"));
        assert_eq!(value(&pairs, "time"), Some("1700000002"));
        assert_eq!(value(&pairs, "bytes_read"), Some("7"));
        assert_eq!(value(&pairs, "bytes_written"), Some("9"));
        assert_eq!(value(&pairs, "total_connections"), Some("3"));
        assert_eq!(value(&pairs, "accepting_conns"), Some("0"));
        let rusage_user = value(&pairs, "rusage_user").unwrap_or("");
        let (secs, micros) = rusage_user.split_once('.').unwrap_or(("", ""));
        assert!(
            secs.parse::<u64>().is_ok() && micros.len() == 6,
            "{rusage_user}"
        );
        for required in [
            "curr_connections",
            "rejected_connections",
            "conn_yields",
            "listen_disabled_num",
            "threads",
            "limit_maxbytes",
            "curr_items",
            "bytes",
        ] {
            assert!(value(&pairs, required).is_some(), "missing {required}");
        }
    }

    #[test]
    fn reset_clears_runtime_counters() {
        let stats = ServerStats::default();
        let worker = stats.runtime.add_worker();
        WorkerCounters::add(&worker.bytes_read, 7);
        stats.total_connections.store(3, Ordering::Relaxed);
        stats.curr_connections.store(2, Ordering::Relaxed);
        {
            let engine =
                engine::Engine::new(engine::EngineConfig::default(), engine::ManualClock::new(0));
            let Ok(engine) = engine else { panic!("engine") };
            let settings = ServerSettings::default();
            let mut out = Vec::new();
            let session = Session {
                engine: &engine,
                settings: &settings,
                stats: &stats,
                out: &mut out,
                resume_keys: 0,
                out_high_water_bytes: usize::MAX,
                client_fd: -1,
                upstream_reply: None,
            };
            reset(&session);
        }
        let pairs = collect_all(StatsGroup::General, &stats);
        assert_eq!(value(&pairs, "bytes_read"), Some("0"));
        assert_eq!(value(&pairs, "total_connections"), Some("0"));
        // curr_connections is a gauge, not a counter: reset leaves it.
        assert_eq!(value(&pairs, "curr_connections"), Some("2"));
    }

    #[test]
    fn settings_and_conns() {
        let stats = ServerStats::default();
        stats.runtime.connections.insert(
            12,
            Arc::new(ConnEntry::new(
                "tcp:127.0.0.1:5000".into(),
                Some("tcp:127.0.0.1:11211".into()),
                ConnState::ParseCmd,
                2,
            )),
        );
        let pairs = collect_all(StatsGroup::Conns, &stats);
        let expected: Vec<(String, String)> = [
            ("12:addr", "tcp:127.0.0.1:5000"),
            ("12:listen_addr", "tcp:127.0.0.1:11211"),
            ("12:state", "conn_parse_cmd"),
            ("12:secs_since_last_cmd", "0"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(pairs, expected);
        let pairs = collect_all(StatsGroup::Settings, &stats);
        assert_eq!(value(&pairs, "maxconns"), Some("1024"));
        assert_eq!(value(&pairs, "udpport"), Some("0"));
        assert_eq!(value(&pairs, "inter"), Some("127.0.0.1"));
        assert_eq!(value(&pairs, "num_threads"), Some("4"));
        assert_eq!(value(&pairs, "maxbytes"), Some("67108864"));
    }
}
