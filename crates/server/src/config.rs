//! Command line: memcached's flags and defaults, mapped onto [`EngineConfig`] and the
//! runtime's own settings.
//!
//! Two deliberate differences from memcached: fogcached listens on 127.0.0.1 unless `-l`
//! says otherwise (memcached listens on every interface), and UDP is not supported
//! (`-U 0` is accepted so that memcached command lines keep working).

use std::ffi::OsString;
use std::fmt;

use clap::{ArgAction, Parser};
use engine::{EngineConfig, SLAB_PAGE_SIZE_BYTES};

/// sysexits.h `EX_USAGE`: the command line was wrong.
pub const EXIT_USAGE: u8 = 64;

/// memcached's `-R` default: requests handled per connection before it yields.
pub const REQS_PER_EVENT_DEFAULT: u32 = 20;

/// The listen address when `-l` is not given (memcached's is every interface).
pub const LISTEN_DEFAULT: &str = "127.0.0.1";

/// The `-o` suboptions fogcached accepts but that change nothing here, because
/// fogcached has no such mechanism or always behaves one way. They are accepted so that
/// memcached command lines keep working.
const SUBOPTIONS_WITHOUT_EFFECT: &[&str] = &[
    "modern",
    "no_modern",
    "maxconns_fast",
    "tail_repair_time",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "hash_algorithm",
    "slab_automove_ratio",
    "slab_automove_window",
    "temporary_ttl",
];

#[derive(Parser, Debug)]
#[command(
    name = "fogcached",
    version,
    about = "fogcached: a memcached-compatible cache server"
)]
struct Cli {
    /// TCP port to listen on.
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,
    /// UDP port: only 0 (off) is accepted; fogcached does not speak UDP.
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u32,
    /// Interfaces to listen on, comma separated; each may carry its own `:port`.
    #[arg(short = 'l', long = "listen", action = ArgAction::Append)]
    listen: Vec<String>,
    /// Item memory in megabytes (suffixes k, m, g accepted).
    #[arg(short = 'm', long = "memory-limit", default_value = "64")]
    memory_limit: String,
    /// Maximum simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    conn_limit: u32,
    /// Worker threads.
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    threads: u32,
    /// Maximum item size (bytes; suffixes k, m, g accepted).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    max_item_size: String,
    /// Chunk size growth factor.
    #[arg(short = 'f', long = "slab-growth-factor", default_value_t = 1.25)]
    growth_factor: f64,
    /// Minimum space for key + value + flags in the smallest chunk.
    #[arg(short = 'n', long = "slab-min-size", default_value_t = 48)]
    slab_min_size: usize,
    /// Verbose: -v errors, -vv also connections, -vvv also internals.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Enable the ASCII `shutdown` command.
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// Disable CAS.
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// Return an error when memory is exhausted instead of evicting.
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// Requests handled per connection before it yields to others.
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = REQS_PER_EVENT_DEFAULT)]
    max_reqs_per_event: u32,
    /// Run as a daemon: not supported (use a service manager).
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// User to run as: accepted for memcached compatibility; fogcached does not switch.
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// Extended options, comma separated (may be repeated).
    #[arg(short = 'o', long = "extended", action = ArgAction::Append)]
    extended: Vec<String>,
}

/// Everything the server needs from the command line.
#[derive(Clone, Debug)]
pub struct Config {
    pub engine: EngineConfig,
    /// `-p`.
    pub tcp_port: u16,
    /// `-l` exactly as given (comma-joined), for `stats settings` `inter`.
    pub listen_spec: String,
    /// `-l` split into `host` or `host:port` entries.
    pub listen: Vec<String>,
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
    /// `-u`: accepted for memcached command lines; fogcached never switches user.
    pub user: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            engine: EngineConfig::default(),
            tcp_port: 11211,
            listen_spec: LISTEN_DEFAULT.to_owned(),
            listen: vec![LISTEN_DEFAULT.to_owned()],
            max_connections: 1024,
            worker_threads: 4,
            verbosity: 0,
            shutdown_enabled: false,
            reqs_per_event: REQS_PER_EVENT_DEFAULT,
            idle_timeout_s: 0,
            user: None,
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
    let cli = match Cli::try_parse_from(args) {
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
    if cli.daemon {
        return Err(usage(
            "fogcached does not daemonize (-d); run it under a service manager instead",
        ));
    }
    if cli.udp_port != 0 {
        return Err(usage(format!(
            "UDP is not supported: -U must be 0, got {}",
            cli.udp_port
        )));
    }
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

    let mut config = Config {
        tcp_port: cli.port,
        max_connections: cli.conn_limit,
        worker_threads: cli.threads,
        verbosity: u32::from(cli.verbose),
        shutdown_enabled: cli.enable_shutdown,
        reqs_per_event: cli.max_reqs_per_event,
        user: cli.user,
        ..Config::default()
    };
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
    if engine.memory_limit_bytes == 0 {
        return Err(usage("memory limit (-m) must be at least 1 megabyte"));
    }
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
            apply_suboption(&mut config, suboption, &mut slab_chunk_max_set)?;
        }
    }
    check(&config, slab_chunk_max_set)?;
    Ok(config)
}

fn apply_suboption(
    config: &mut Config,
    suboption: &str,
    slab_chunk_max_set: &mut bool,
) -> Result<(), CliExit> {
    let (name, value) = match suboption.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (suboption, None),
    };
    let engine = &mut config.engine;
    match name {
        "hashpower" => engine.hashpower_initial = number(name, value)?,
        "lru_crawler" => engine.lru_crawler = true,
        "no_lru_crawler" => engine.lru_crawler = false,
        "lru_maintainer" => engine.lru_maintainer = true,
        "no_lru_maintainer" => engine.lru_maintainer = false,
        "hot_lru_pct" => engine.hot_lru_pct = number(name, value)?,
        "warm_lru_pct" => engine.warm_lru_pct = number(name, value)?,
        "hot_max_factor" => engine.hot_max_factor = number(name, value)?,
        "warm_max_factor" => engine.warm_max_factor = number(name, value)?,
        "slab_reassign" => engine.slab_reassign = true,
        "no_slab_reassign" => engine.slab_reassign = false,
        "slab_automove" => {
            // memcached accepts a bare `slab_automove` as "on" (mode 1).
            engine.slab_automove = match value {
                None => 1,
                Some(_) => number(name, value)?,
            }
        }
        "slab_chunk_max" => {
            let text = required(name, value)?;
            // memcached 1.6 takes this in kilobytes; a suffix makes the unit explicit.
            let bytes = parse_size(text, SizeUnit::Kilobytes).map_err(|e| {
                usage(format!(
                    "could not parse argument to slab_chunk_max {text:?}: {e}"
                ))
            })?;
            engine.slab_chunk_max_bytes = usize::try_from(bytes)
                .map_err(|_| usage(format!("slab_chunk_max too large: {text}")))?;
            *slab_chunk_max_set = true;
        }
        "idle_timeout" => config.idle_timeout_s = number(name, value)?,
        "no_maxconns_fast" => {
            // fogcached always refuses over-limit connections at once, as memcached's
            // default maxconns_fast does; the slow mode (stop accepting) is not offered.
            return Err(usage(
                "Illegal suboption \"no_maxconns_fast\": fogcached always rejects connections over -c at once",
            ));
        }
        _ if SUBOPTIONS_WITHOUT_EFFECT.contains(&name) => {}
        _ => {
            return Err(usage(format!(
                "Illegal suboption \"{suboption}\" (unknown -o option \"{name}\")"
            )))
        }
    }
    Ok(())
}

fn required<'a>(name: &str, value: Option<&'a str>) -> Result<&'a str, CliExit> {
    match value {
        Some(text) if !text.is_empty() => Ok(text),
        _ => Err(usage(format!("Missing {name} argument"))),
    }
}

fn number<T: std::str::FromStr>(name: &str, value: Option<&str>) -> Result<T, CliExit> {
    let text = required(name, value)?;
    text.trim()
        .parse()
        .map_err(|_| usage(format!("could not parse argument to {name}: {text:?}")))
}

/// Cross-option checks memcached makes at start-up, then the engine's own.
fn check(config: &Config, slab_chunk_max_set: bool) -> Result<(), CliExit> {
    let engine = &config.engine;
    if engine.item_size_max_bytes as u64 > engine.memory_limit_bytes / 2 {
        return Err(usage(format!(
            "Cannot set item size limit (-I {}) higher than 1/2 of memory max (-m {} bytes)",
            engine.item_size_max_bytes, engine.memory_limit_bytes
        )));
    }
    if slab_chunk_max_set {
        let chunk = engine.slab_chunk_max_bytes;
        if chunk == 0 || chunk > engine.item_size_max_bytes {
            return Err(usage(format!(
                "slab_chunk_max ({chunk} bytes) cannot be larger than the max item size (-I {} bytes)",
                engine.item_size_max_bytes
            )));
        }
        if SLAB_PAGE_SIZE_BYTES.checked_rem(chunk) != Some(0) {
            return Err(usage(format!(
                "slab_chunk_max ({chunk} bytes) must divide the slab page size ({SLAB_PAGE_SIZE_BYTES} bytes)"
            )));
        }
    }
    engine.validate().map_err(|e| usage(e.to_string()))
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
mod tests {
    use super::*;

    fn parse_ok(args: &[&str]) -> Config {
        let mut full = vec!["fogcached"];
        full.extend_from_slice(args);
        match parse(full) {
            Ok(config) => config,
            Err(e) => panic!("{args:?} refused: {e}"),
        }
    }

    fn parse_usage(args: &[&str]) -> String {
        let mut full = vec!["fogcached"];
        full.extend_from_slice(args);
        match parse(full) {
            Err(CliExit::Usage(message)) => message,
            other => panic!("{args:?} expected a usage error, got {other:?}"),
        }
    }

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
    fn udp_is_refused_unless_zero() {
        let message = parse_usage(&["-U", "11211"]);
        assert!(message.contains("UDP is not supported"), "{message}");
    }

    #[test]
    fn daemon_is_refused() {
        assert!(parse_usage(&["-d"]).contains("daemon"));
    }

    #[test]
    fn extended_options_map_onto_engine_config() {
        let config = parse_ok(&[
            "-o",
            "hashpower=20,no_lru_crawler,no_lru_maintainer,hot_lru_pct=10,warm_lru_pct=30",
            "-o",
            "hot_max_factor=0.5,warm_max_factor=3,no_slab_reassign,slab_automove=2",
            "-o",
            "slab_chunk_max=256,idle_timeout=30,modern,maxconns_fast,tail_repair_time=0",
        ]);
        let engine = &config.engine;
        assert_eq!(engine.hashpower_initial, 20);
        assert!(!engine.lru_crawler);
        assert!(!engine.lru_maintainer);
        assert_eq!(engine.hot_lru_pct, 10);
        assert_eq!(engine.warm_lru_pct, 30);
        assert_eq!(engine.hot_max_factor, 0.5);
        assert_eq!(engine.warm_max_factor, 3.0);
        assert!(!engine.slab_reassign);
        assert_eq!(engine.slab_automove, 2);
        assert_eq!(engine.slab_chunk_max_bytes, 256 << 10);
        assert_eq!(config.idle_timeout_s, 30);
        let config = parse_ok(&[
            "-o",
            "lru_crawler,lru_maintainer,slab_reassign,slab_automove",
        ]);
        assert!(config.engine.lru_crawler && config.engine.lru_maintainer);
        assert_eq!(config.engine.slab_automove, 1);
    }

    #[test]
    fn unknown_suboption_is_named() {
        let message = parse_usage(&["-o", "modern,frobnicate=3"]);
        assert!(message.contains("\"frobnicate=3\""), "{message}");
        assert!(message.contains("Illegal suboption"), "{message}");
    }

    #[test]
    fn bad_suboption_values_are_refused() {
        assert!(parse_usage(&["-o", "hashpower"]).contains("Missing hashpower argument"));
        assert!(parse_usage(&["-o", "hot_lru_pct=lots"]).contains("hot_lru_pct"));
        // Engine validation: memcached's limits.
        assert!(parse_usage(&["-o", "hot_lru_pct=50,warm_lru_pct=40"]).contains("hot_lru_pct"));
        assert!(parse_usage(&["-o", "hashpower=40"]).contains("hashpower"));
        assert!(parse_usage(&["-f", "1.0"]).contains("growth factor"));
        assert!(parse_usage(&["-o", "slab_chunk_max=3"]).contains("slab_chunk_max"));
    }

    #[test]
    fn item_size_must_fit_half_the_memory() {
        let message = parse_usage(&["-m", "1", "-I", "1m"]);
        assert!(message.contains("1/2 of memory max"), "{message}");
    }

    #[test]
    fn help_and_version_are_information() {
        assert!(
            matches!(parse(["fogcached", "-h"]), Err(CliExit::Info(text)) if text.contains("-p"))
        );
        assert!(
            matches!(parse(["fogcached", "-V"]), Err(CliExit::Info(text)) if text.contains("fogcached"))
        );
    }

    #[test]
    fn unknown_flag_is_a_usage_error() {
        let message = parse_usage(&["-Q"]);
        assert!(message.contains("-Q"), "{message}");
    }
}
