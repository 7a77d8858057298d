//! The command line: memcached's flags and defaults, mapped onto [`EngineConfig`] and the
//! runtime's own settings ([`Config`]). [`parse`] reads no file and touches nothing, so
//! that a refused line costs nothing; the start-up steps that do ([`prepare_storage`],
//! [`load_security`]) come after it, in `main`.
//!
//! One room per job:
//! - `flags.rs`: the clap definitions, every flag with memcached's meaning in its words;
//! - `help.rs`: the text `--help` prints after the flags, and `-i`'s license;
//! - this file: [`Config`], and [`parse`], which turns the flags into it;
//! - `suboptions.rs`: `-o`, memcached's extended options (implemented, accepted with a
//!   warning, or refused with the alternative);
//! - `tiers.rs`: the DRAM and slow tiers, the placement policy, and the storage set-up
//!   before the engine starts ([`prepare_storage`]);
//! - `upstream_flags.rs`: the fog layer's `--upstream*` flags;
//! - `credentials.rs`: `-Y`, `-S` and `-Z`'s files, read after parsing ([`load_security`]);
//! - `checks.rs`: the cross-option refusals memcached makes at start-up, then the
//!   engine's own validation.
//!
//! One deliberate difference from memcached: fogcached listens on 127.0.0.1 unless `-l`
//! says otherwise (memcached listens on every interface). UDP is off unless `-U` names a
//! port, as in memcached since 1.5.6 (`-U -1`: a port the kernel picks, as memcached's
//! test harness asks for one).
//!
//! The memory tiers: `-m`/`--dram` sizes DRAM; `--slow-size` sizes the slow tier, which
//! by default is a sparse pool file `slow-tier.pool` in `--data-dir`
//! (`./fogcached-data`, created at start-up by [`prepare_storage`]), or `--slow-path`
//! (a file or DAX device), or memory bound to `--slow-numa-node`.

mod checks;
mod credentials;
mod flags;
mod help;
mod suboptions;
mod tiers;
mod upstream_flags;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use engine::EngineConfig;
use tier::RegionBacking;

use crate::auth::AuthSettings;
use crate::tls::{TlsContext, TlsOptions};
use crate::worker::{IoEngine, IoUringRecv};

pub use credentials::load_security;
pub use flags::DATA_DIR_DEFAULT;
pub use tiers::{prepare_storage, StorageError, POOL_FILE_NAME};

use flags::Flags;
use help::LICENSE_TEXT;

/// sysexits.h `EX_USAGE`: the command line was wrong.
pub const EXIT_USAGE: u8 = 64;
/// sysexits.h `EX_OSERR`: memcached's exit code when it cannot listen.
pub const EXIT_OS_ERROR: u8 = 71;

/// memcached's `-R` default: requests handled per connection before it yields.
pub const REQS_PER_EVENT_DEFAULT: u32 = 20;

/// memcached's `-b` default: the listen(2) backlog.
pub const LISTEN_BACKLOG_DEFAULT: u32 = 1024;

/// The listen address when `-l` is not given (memcached's is every interface).
pub const LISTEN_DEFAULT: &str = "127.0.0.1";

/// Everything the server needs from the command line.
#[derive(Clone, Debug)]
pub struct Config {
    pub engine: EngineConfig,
    /// `-p`.
    pub tcp_port: u16,
    /// `-U`: `None` is off (`-U 0`), `Some(0)` a port the kernel picks (`-U -1`).
    pub udp_port: Option<u16>,
    /// `-l` exactly as given (comma-joined), for `stats settings` `inter`.
    pub listen_spec: String,
    /// `-l` split into `host` or `host:port` entries.
    pub listen: Vec<String>,
    /// `-s`: listen on this unix-domain socket instead of TCP, as memcached does.
    pub unix_socket: Option<PathBuf>,
    /// `-a`: the permission bits of the `-s` socket.
    pub unix_mode: u32,
    /// `-b`: the listen(2) backlog of every listening socket.
    pub listen_backlog: u32,
    /// `-o sock_cookie_id`: the `SO_MARK` of the listening sockets.
    pub sock_cookie_id: Option<u32>,
    /// `-B`: the protocol every connection speaks; `Auto` decides by its first byte.
    pub binding: crate::session::BindingProtocol,
    /// Not `-F`: `flush_all` is allowed.
    pub flush_enabled: bool,
    /// `-c`.
    pub max_connections: u32,
    /// `-t`.
    pub worker_threads: u32,
    /// `-v` count.
    pub verbosity: u32,
    /// `-A`.
    pub shutdown_enabled: bool,
    /// `-R`.
    pub reqs_per_event: u32,
    /// `-o idle_timeout`: close connections idle this long; 0 = never.
    pub idle_timeout_s: u32,
    /// `--io-engine` (resolved at start-up when `Auto`).
    pub io_engine: IoEngine,
    /// `--io-uring-recv` (resolved at start-up when `Auto` and the loop is io_uring).
    pub io_uring_recv: IoUringRecv,
    /// `-d`.
    pub daemonize: bool,
    /// `-P`.
    pub pid_file: Option<PathBuf>,
    /// `-u`: the user to switch to when started as root.
    pub user: Option<String>,
    /// `-r`.
    pub enable_coredumps: bool,
    /// `-k`.
    pub lock_memory: bool,
    /// `-L`.
    pub large_pages: bool,
    /// `--dram-max` was not given: the DRAM tier's address space is reserved up to the
    /// machine's memory at start-up (`runtime::dram_reserve`), so that `cache_memlimit`
    /// can grow it as memcached's grows; false with `-k` (which would lock the whole
    /// reserve) and `-m 0` (no DRAM tier).
    pub dram_reserve_default: bool,
    /// What the command line asked for that fogcached accepts but ignores, for `main` to
    /// print at start-up.
    pub warnings: Vec<String>,
    /// `--data-dir`: where the default pool file lives; created by [`prepare_storage`]
    /// when the slow tier uses it.
    pub data_dir: PathBuf,
    /// `-D`: the byte between a key's prefix and its ID for `stats detail`.
    pub prefix_delimiter: u8,
    /// `-D` given: per-prefix stats are collected from the start.
    pub detail_enabled: bool,
    /// Not `-X`.
    pub dumps_enabled: bool,
    /// Not `-W`.
    pub watch_enabled: bool,
    /// `--metrics-listen`: where the Prometheus endpoint listens; None = off.
    pub metrics_listen: Option<String>,
    /// `--upstream*`: the fog layer, off when `None`.
    pub upstream: Option<crate::upstream::UpstreamConfig>,
    /// `-Y`: the text protocol's authfile.
    pub auth_file: Option<PathBuf>,
    /// `-S`: SASL authentication of the binary protocol.
    pub sasl: bool,
    /// The credentials `-Y` and `-S` name, read by [`load_security`] (empty until then).
    pub auth: AuthSettings,
    /// `-Z` and the `ssl_*` suboptions.
    pub tls: TlsOptions,
    /// The certificates `tls` names, loaded by [`load_security`] when `-Z` is given.
    pub tls_context: Option<Arc<TlsContext>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            engine: EngineConfig::default(),
            tcp_port: 11211,
            udp_port: None,
            listen_spec: LISTEN_DEFAULT.to_owned(),
            listen: vec![LISTEN_DEFAULT.to_owned()],
            unix_socket: None,
            unix_mode: 0o700,
            listen_backlog: LISTEN_BACKLOG_DEFAULT,
            sock_cookie_id: None,
            binding: crate::session::BindingProtocol::Auto,
            flush_enabled: true,
            max_connections: 1024,
            worker_threads: 4,
            verbosity: 0,
            shutdown_enabled: false,
            reqs_per_event: REQS_PER_EVENT_DEFAULT,
            idle_timeout_s: 0,
            // In-process test servers honour the variable as the command line does, so
            // the whole suite can run against either loop.
            io_engine: IoEngine::from_env()
                .ok()
                .flatten()
                .unwrap_or(IoEngine::Auto),
            io_uring_recv: IoUringRecv::from_env()
                .ok()
                .flatten()
                .unwrap_or(IoUringRecv::Auto),
            daemonize: false,
            pid_file: None,
            user: None,
            enable_coredumps: false,
            lock_memory: false,
            large_pages: false,
            dram_reserve_default: false,
            warnings: Vec::new(),
            data_dir: PathBuf::from(DATA_DIR_DEFAULT),
            prefix_delimiter: b':',
            detail_enabled: false,
            dumps_enabled: true,
            watch_enabled: true,
            metrics_listen: None,
            upstream: None,
            auth_file: None,
            sasl: false,
            auth: AuthSettings::default(),
            tls: TlsOptions::default(),
            tls_context: None,
        }
    }
}

impl Config {
    /// Makes every relative path the server will open (data directory, pool file, PID
    /// file) absolute against `cwd`, so that a daemon, which changes to `/`, still finds
    /// them.
    pub fn make_paths_absolute(&mut self, cwd: &std::path::Path) {
        let absolute = |path: &PathBuf| -> PathBuf {
            if path.is_absolute() {
                path.clone()
            } else {
                cwd.join(path)
            }
        };
        self.data_dir = absolute(&self.data_dir);
        self.pid_file = self.pid_file.as_ref().map(absolute);
        self.unix_socket = self.unix_socket.as_ref().map(absolute);
        self.auth_file = self.auth_file.as_ref().map(absolute);
        // `refresh_certs` reads these again, possibly after -d changed to `/`.
        self.tls.chain_cert = self.tls.chain_cert.as_ref().map(absolute);
        self.tls.key = self.tls.key.as_ref().map(absolute);
        self.tls.ca_cert = self.tls.ca_cert.as_ref().map(absolute);
        if let Some(spec) = self.engine.slow_tier.as_mut() {
            if let RegionBacking::File { path } = &mut spec.backing {
                *path = absolute(path);
            }
        }
    }
}

/// Why the command line did not produce a [`Config`].
#[derive(Debug)]
pub enum CliExit {
    /// `-h` or `-V`: print `text` on stdout and exit 0.
    Info(String),
    /// A usage error: print `message` on stderr and exit with [`EXIT_USAGE`].
    Usage(String),
}

impl fmt::Display for CliExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliExit::Info(text) | CliExit::Usage(text) => f.write_str(text),
        }
    }
}

fn usage(message: impl Into<String>) -> CliExit {
    CliExit::Usage(message.into())
}

/// Parses a command line (including the program name) into a validated [`Config`].
pub fn parse<I, T>(args: I) -> Result<Config, CliExit>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Flags::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => {
            let text = error.render().to_string();
            return Err(match error.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    CliExit::Info(text)
                }
                _ => CliExit::Usage(text.trim_end().to_owned()),
            });
        }
    };
    if cli.license {
        return Err(CliExit::Info(LICENSE_TEXT.to_owned()));
    }
    if let Some(file) = &cli.memory_file {
        return Err(usage(format!(
            "-e {}: fogcached does not offer memcached's restartable memory file: its slow-tier \
             pool survives restarts instead (--slow-path FILE, or --data-dir DIR; a clean stop \
             writes DRAM's items down to it)",
            file.display()
        )));
    }
    let mut warnings = Vec::new();
    if let Some(text) = &cli.napi_ids {
        // memcached's check: a count above zero.
        if !text.trim().parse::<u32>().is_ok_and(|n| n > 0) {
            return Err(usage("Maximum number of NAPI IDs must be greater than 0"));
        }
        warnings.push(
            "-N has no effect: fogcached hands connections to its worker threads \
             round-robin, not by NAPI ID"
                .to_owned(),
        );
    }
    let binding = match cli.protocol.as_deref() {
        None | Some("auto") => crate::session::BindingProtocol::Auto,
        Some("ascii") => crate::session::BindingProtocol::Ascii,
        Some("binary") => crate::session::BindingProtocol::Binary,
        Some(other) => {
            return Err(usage(format!(
                "Invalid value for binding protocol: {other} -- should be one of auto, binary, or ascii"
            )))
        }
    };
    let udp_port = match cli.udp_port {
        0 => None,
        // memcached's "any port" (its server_socket binds port 0 for -1).
        -1 => Some(0),
        port => Some(u16::try_from(port).ok().filter(|p| *p > 0).ok_or_else(|| {
            usage(format!(
                "invalid UDP port (-U) {port}: expected 0 (off), -1 (any) or 1-65535"
            ))
        })?),
    };
    if cli.conn_limit == 0 {
        return Err(usage("connection limit (-c) must be at least 1"));
    }
    if cli.threads == 0 || cli.threads > 256 {
        return Err(usage(format!(
            "number of threads (-t) must be between 1 and 256, got {}",
            cli.threads
        )));
    }
    if cli.max_reqs_per_event == 0 {
        return Err(usage("max requests per event (-R) must be at least 1"));
    }
    let io_engine = match &cli.io_engine {
        Some(name) => IoEngine::parse(name).ok_or_else(|| {
            usage(format!(
                "unknown --io-engine {name:?} (valid: auto, io-uring, epoll)"
            ))
        })?,
        None => IoEngine::from_env()
            .map_err(usage)?
            .unwrap_or(IoEngine::Auto),
    };
    let io_uring_recv = match &cli.io_uring_recv {
        Some(name) => IoUringRecv::parse(name).ok_or_else(|| {
            usage(format!(
                "unknown --io-uring-recv {name:?} (valid: auto, multishot, single)"
            ))
        })?,
        None => IoUringRecv::from_env()
            .map_err(usage)?
            .unwrap_or(IoUringRecv::Auto),
    };

    let mut config = Config {
        tcp_port: cli.port,
        udp_port,
        max_connections: cli.conn_limit,
        worker_threads: cli.threads,
        verbosity: u32::from(cli.verbose),
        shutdown_enabled: cli.enable_shutdown,
        reqs_per_event: cli.max_reqs_per_event,
        io_engine,
        io_uring_recv,
        daemonize: cli.daemon,
        pid_file: cli.pidfile.clone(),
        user: cli.user.clone(),
        enable_coredumps: cli.enable_coredumps,
        lock_memory: cli.lock_memory,
        large_pages: cli.enable_largepages,
        data_dir: cli.data_dir.clone(),
        dumps_enabled: !cli.disable_dumping,
        watch_enabled: !cli.disable_watch,
        metrics_listen: cli.metrics_listen.clone(),
        unix_socket: cli.unix_socket.clone(),
        listen_backlog: cli.listen_backlog,
        binding,
        flush_enabled: !cli.disable_flush_all,
        warnings,
        auth_file: cli.auth_file.clone(),
        sasl: cli.enable_sasl,
        tls: TlsOptions {
            enabled: cli.enable_ssl,
            ..TlsOptions::default()
        },
        unix_mode: u32::from_str_radix(&cli.unix_mask, 8)
            .ok()
            .filter(|mode| *mode <= 0o777)
            .ok_or_else(|| {
                usage(format!(
                    "invalid unix socket mask (-a) {:?}: expected octal permission bits such as 700",
                    cli.unix_mask
                ))
            })?,
        ..Config::default()
    };
    if let Some(delimiter) = &cli.prefix_delimiter {
        // memcached takes the first character of the argument.
        match delimiter.as_bytes() {
            [byte, ..] if byte.is_ascii_graphic() => config.prefix_delimiter = *byte,
            _ => {
                return Err(usage(format!(
                    "-D needs a printable ASCII delimiter character, got {delimiter:?}"
                )))
            }
        }
        config.detail_enabled = true;
    }
    if cli.listen.is_empty() {
        config.listen = vec![LISTEN_DEFAULT.to_owned()];
    } else {
        config.listen = cli
            .listen
            .iter()
            .flat_map(|arg| arg.split(','))
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(str::to_owned)
            .collect();
    }
    if config.listen.is_empty() {
        return Err(usage("-l needs at least one address"));
    }
    config.listen_spec = config.listen.join(",");

    let engine = &mut config.engine;
    engine.memory_limit_bytes =
        parse_size(&cli.memory_limit, SizeUnit::Megabytes).map_err(|e| {
            usage(format!(
                "invalid memory limit (-m) {:?}: {e}",
                cli.memory_limit
            ))
        })?;
    if let Some(text) = &cli.dram_max {
        engine.dram_max_bytes = parse_size(text, SizeUnit::Megabytes)
            .map_err(|e| usage(format!("invalid --dram-max {text:?}: {e}")))?;
        if engine.dram_max_bytes < engine.memory_limit_bytes {
            return Err(usage(format!(
                "--dram-max {text} is below the DRAM tier's size (-m/--dram)"
            )));
        }
    }
    let dram_reserve_default =
        cli.dram_max.is_none() && !cli.lock_memory && engine.memory_limit_bytes > 0;
    tiers::apply_tier_flags(engine, &cli)?;
    let item_size_max = parse_size(&cli.max_item_size, SizeUnit::Bytes).map_err(|e| {
        usage(format!(
            "invalid max item size (-I) {:?}: {e}",
            cli.max_item_size
        ))
    })?;
    engine.item_size_max_bytes = usize::try_from(item_size_max)
        .map_err(|_| usage(format!("max item size (-I) too large: {item_size_max}")))?;
    engine.growth_factor = cli.growth_factor;
    engine.chunk_size_min_bytes = cli.slab_min_size;
    engine.cas_enabled = !cli.disable_cas;
    engine.evictions_enabled = !cli.disable_evictions;

    let mut slab_chunk_max_set = false;
    for group in &cli.extended {
        for suboption in group.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            suboptions::apply_suboption(&mut config, suboption, &mut slab_chunk_max_set)?;
        }
    }
    config.dram_reserve_default = dram_reserve_default;
    if config.udp_port.is_some() && config.unix_socket.is_some() {
        // memcached opens no UDP socket with -s either, and says nothing.
        config
            .warnings
            .push("-U has no effect with -s: a server on a unix socket speaks no UDP".to_owned());
        config.udp_port = None;
    }
    config.upstream = upstream_flags::upstream_config(&cli)?;
    if !config.tls.enabled
        && config.tls
            != (TlsOptions {
                enabled: false,
                ..TlsOptions::default()
            })
    {
        config
            .warnings
            .push("-o ssl_* options have no effect without -Z (TLS is off)".to_owned());
    }
    checks::check(&config, slab_chunk_max_set)?;
    Ok(config)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SizeUnit {
    Bytes,
    Kilobytes,
    Megabytes,
}

/// Parses `N` or `N` followed by one of `k m g` (either case; an optional trailing `b`),
/// a bare number counting `default_unit`s.
fn parse_size(text: &str, default_unit: SizeUnit) -> Result<u64, String> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    let without_b = lower.strip_suffix('b').unwrap_or(&lower);
    let (digits, multiplier) = match without_b.as_bytes().last() {
        Some(b'k') => (&without_b[..without_b.len() - 1], 1u64 << 10),
        Some(b'm') => (&without_b[..without_b.len() - 1], 1u64 << 20),
        Some(b'g') => (&without_b[..without_b.len() - 1], 1u64 << 30),
        _ if lower.ends_with('b') => (without_b, 1),
        _ => (
            without_b,
            match default_unit {
                SizeUnit::Bytes => 1,
                SizeUnit::Kilobytes => 1 << 10,
                SizeUnit::Megabytes => 1 << 20,
            },
        ),
    };
    let count: u64 = digits
        .parse()
        .map_err(|_| "expected a number with an optional k/m/g suffix".to_owned())?;
    count
        .checked_mul(multiplier)
        .ok_or_else(|| "size overflows 64 bits".to_owned())
}

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests {
    use super::test_support::{parse_ok, parse_usage};
    use super::*;

    #[test]
    fn defaults_match_memcached_except_listen_address() {
        let config = parse_ok(&[]);
        assert_eq!(config.tcp_port, 11211);
        assert_eq!(config.listen, vec!["127.0.0.1"]);
        assert_eq!(config.max_connections, 1024);
        assert_eq!(config.worker_threads, 4);
        assert_eq!(config.verbosity, 0);
        assert!(!config.shutdown_enabled);
        assert_eq!(config.reqs_per_event, 20);
        assert_eq!(config.idle_timeout_s, 0);
        assert_eq!(config.engine.memory_limit_bytes, 64 << 20);
        assert_eq!(config.engine.item_size_max_bytes, 1 << 20);
        assert_eq!(config.engine.growth_factor, 1.25);
        assert_eq!(config.engine.chunk_size_min_bytes, 48);
        assert!(config.engine.cas_enabled);
        assert!(config.engine.evictions_enabled);
    }

    #[test]
    fn basic_flags() {
        let config = parse_ok(&[
            "-p", "22122", "-U", "0", "-l", "0.0.0.0", "-m", "128", "-c", "10", "-t", "2", "-I",
            "2m", "-f", "1.5", "-n", "64", "-vv", "-A", "-C", "-M", "-R", "5",
        ]);
        assert_eq!(config.tcp_port, 22122);
        assert_eq!(config.listen, vec!["0.0.0.0"]);
        assert_eq!(config.engine.memory_limit_bytes, 128 << 20);
        assert_eq!(config.max_connections, 10);
        assert_eq!(config.worker_threads, 2);
        assert_eq!(config.engine.item_size_max_bytes, 2 << 20);
        assert_eq!(config.engine.growth_factor, 1.5);
        assert_eq!(config.engine.chunk_size_min_bytes, 64);
        assert_eq!(config.verbosity, 2);
        assert!(config.shutdown_enabled);
        assert!(!config.engine.cas_enabled);
        assert!(!config.engine.evictions_enabled);
        assert_eq!(config.reqs_per_event, 5);
        assert_eq!(parse_ok(&["-vvv"]).verbosity, 3);
        assert_eq!(parse_ok(&["-v", "-v"]).verbosity, 2);
    }

    #[test]
    fn sizes_take_suffixes() {
        assert_eq!(parse_ok(&["-m", "1g"]).engine.memory_limit_bytes, 1 << 30);
        assert_eq!(
            parse_ok(&["-m", "512M"]).engine.memory_limit_bytes,
            512 << 20
        );
        assert_eq!(
            parse_ok(&["-m", "65536k"]).engine.memory_limit_bytes,
            64 << 20
        );
        assert_eq!(
            parse_ok(&["-I", "512k"]).engine.item_size_max_bytes,
            512 << 10
        );
        assert_eq!(parse_ok(&["-I", "4096"]).engine.item_size_max_bytes, 4096);
        assert!(parse_usage(&["-m", "lots"]).contains("-m"));
        assert!(parse_usage(&["-I", "1x"]).contains("-I"));
    }

    #[test]
    fn listen_takes_comma_separated_and_repeated_addresses() {
        let config = parse_ok(&["-l", "127.0.0.1,::1", "-l", "127.0.0.2:11311"]);
        assert_eq!(config.listen, vec!["127.0.0.1", "::1", "127.0.0.2:11311"]);
        assert_eq!(config.listen_spec, "127.0.0.1,::1,127.0.0.2:11311");
    }

    #[test]
    fn udp_port_is_off_by_default_and_taken_as_memcached_takes_it() {
        assert_eq!(parse_ok(&[]).udp_port, None);
        assert_eq!(parse_ok(&["-U", "0"]).udp_port, None);
        assert_eq!(parse_ok(&["-U", "11211"]).udp_port, Some(11211));
        assert_eq!(parse_ok(&["-U", "-1"]).udp_port, Some(0));
        // getopt's rule: the last one wins.
        assert_eq!(parse_ok(&["-U", "0", "-U", "9"]).udp_port, Some(9));
        for bad in ["65536", "-2", "x"] {
            assert!(!parse_usage(&["-U", bad]).is_empty(), "-U {bad} accepted");
        }
        let with_socket = parse_ok(&["-U", "9", "-s", "/tmp/fc.sock"]);
        assert_eq!(with_socket.udp_port, None);
        assert!(with_socket
            .warnings
            .iter()
            .any(|w| w.starts_with("-U has no effect")));
        assert_eq!(
            parse_usage(&["-U", "9", "-Y", "/etc/fc-auth"]),
            "Cannot use UDP with ascii authentication enabled (-U 0 to disable)"
        );
        assert_eq!(
            parse_usage(&["-U", "9", "-S"]),
            "ERROR: Cannot enable UDP while using binary SASL authentication."
        );
    }

    #[test]
    fn the_dram_reserve_defaults_to_the_machine_s_memory_except_with_k_or_no_dram() {
        assert!(parse_ok(&["-m", "8"]).dram_reserve_default);
        assert!(!parse_ok(&["-m", "8", "--dram-max", "16"]).dram_reserve_default);
        // -k locks every mapping: the reserve would be locked in whole.
        assert!(!parse_ok(&["-m", "8", "-k"]).dram_reserve_default);
        assert!(!parse_ok(&["-m", "0"]).dram_reserve_default);
    }

    #[test]
    fn a_daemon_gets_absolute_paths() {
        let mut config = parse_ok(&["-P", "fc.pid", "--data-dir", "data"]);
        config.make_paths_absolute(std::path::Path::new("/srv/cache"));
        assert_eq!(config.pid_file, Some(PathBuf::from("/srv/cache/fc.pid")));
        assert_eq!(config.data_dir, PathBuf::from("/srv/cache/data"));
        match &config.engine.slow_tier.as_ref().unwrap().backing {
            RegionBacking::File { path } => {
                assert_eq!(path, &PathBuf::from("/srv/cache/data/slow-tier.pool"))
            }
            other => panic!("default backing is the pool file, got {other:?}"),
        }
        let mut absolute = parse_ok(&["-P", "/run/fc.pid"]);
        absolute.make_paths_absolute(std::path::Path::new("/srv/cache"));
        assert_eq!(absolute.pid_file, Some(PathBuf::from("/run/fc.pid")));
    }

    #[test]
    fn process_options_are_parsed() {
        let config = parse_ok(&["-d", "-P", "/run/fc.pid", "-u", "nobody", "-r", "-k", "-L"]);
        assert!(config.daemonize && config.enable_coredumps);
        assert!(config.lock_memory && config.large_pages);
        assert_eq!(config.pid_file, Some(PathBuf::from("/run/fc.pid")));
        assert_eq!(config.user.as_deref(), Some("nobody"));
        let plain = parse_ok(&[]);
        assert!(!plain.daemonize && !plain.enable_coredumps);
        assert!(!plain.lock_memory && !plain.large_pages);
        assert_eq!((plain.pid_file, plain.user), (None, None));
    }

    /// The flags of memcached 1.6.18 that fogcached lacked: `-b`, `-B`, `-F` are
    /// implemented, `-N` is accepted with a warning, `-e` refused naming the
    /// alternative, `-i` prints a license.
    #[test]
    fn backlog_protocol_flush_napi_memory_file_and_license() {
        assert_eq!(parse_ok(&[]).listen_backlog, 1024);
        assert_eq!(parse_ok(&["-b", "77"]).listen_backlog, 77);
        assert_eq!(parse_ok(&["--listen-backlog", "8"]).listen_backlog, 8);
        assert!(parse_usage(&["-b", "x"]).contains("-b"));
        use crate::session::BindingProtocol;
        assert_eq!(parse_ok(&[]).binding, BindingProtocol::Auto);
        for (name, binding) in [
            ("auto", BindingProtocol::Auto),
            ("ascii", BindingProtocol::Ascii),
            ("binary", BindingProtocol::Binary),
        ] {
            assert_eq!(parse_ok(&["-B", name]).binding, binding);
        }
        assert_eq!(
            parse_usage(&["-B", "bogus"]),
            "Invalid value for binding protocol: bogus -- should be one of auto, binary, or ascii"
        );
        // memcached's refusals of a -B that allows the protocol authentication forbids.
        assert_eq!(
            parse_usage(&["-Y", "users", "-B", "binary"]),
            "You cannot allow the BINARY protocol while using ascii authentication tokens."
        );
        assert_eq!(
            parse_usage(&["-S", "-B", "ascii"]),
            "You cannot allow the ASCII protocol while using SASL."
        );
        assert_eq!(
            parse_ok(&["-Y", "users", "-B", "ascii"]).binding,
            BindingProtocol::Ascii
        );
        assert!(parse_ok(&[]).flush_enabled);
        assert!(!parse_ok(&["-F"]).flush_enabled);
        assert!(!parse_ok(&["--disable-flush-all"]).flush_enabled);
        let napi = parse_ok(&["-N", "4"]);
        assert!(
            napi.warnings
                .iter()
                .any(|w| w.starts_with("-N has no effect")),
            "{:?}",
            napi.warnings
        );
        for bad in ["0", "x", "-1"] {
            assert_eq!(
                parse_usage(&["-N", bad]),
                "Maximum number of NAPI IDs must be greater than 0"
            );
        }
        let refused = parse_usage(&["-e", "/dev/shm/memcached"]);
        assert!(
            refused.starts_with("-e /dev/shm/memcached: fogcached does not offer")
                && refused.contains("--slow-path"),
            "{refused}"
        );
        let Err(CliExit::Info(license)) = parse(["fogcached", "-i"]) else {
            panic!("-i is information");
        };
        assert!(
            license.contains("MIT") && license.contains("Apache"),
            "{license}"
        );
    }

    #[test]
    fn unknown_flag_is_a_usage_error() {
        let message = parse_usage(&["-Q"]);
        assert!(message.contains("-Q"), "{message}");
    }
}
