//! The command line's flags (clap): memcached's, described in memcached 1.6.18's words
//! (`memcached -h`) with what fogcached does differently after them, then fogcached's own
//! (the tiers, the placement policy, the fog layer, the I/O engine). Only what each flag
//! is and its default live here; `parse` (in `mod.rs`) and the other rooms of `cli/`
//! turn the values into a [`Config`](super::Config) and check them.

use std::path::PathBuf;

use clap::{ArgAction, Parser};
use engine::PlacementPolicy;

use super::help::EXTENDED_OPTIONS_HELP;
use super::{LISTEN_BACKLOG_DEFAULT, REQS_PER_EVENT_DEFAULT};

/// `--data-dir` default, relative to the working directory.
pub const DATA_DIR_DEFAULT: &str = "fogcached-data";

/// `--slow-size` default: large enough to show both tiers at work, and free until
/// written, since the pool file is sparse.
pub(super) const SLOW_SIZE_DEFAULT: &str = "1g";

/// `--policy` default with a slow tier: it reads and writes the fewest slow-tier lines
/// (docs/results/sim-hmcached.md).
pub(super) const POLICY_DEFAULT: PlacementPolicy = PlacementPolicy::Hotspot;
/// `--policy` default with `--slow-size 0`: there is nothing to place, and memcached's
/// replacement keeps new items that a frequency order would evict.
pub(super) const POLICY_DEFAULT_DRAM_ONLY: PlacementPolicy = PlacementPolicy::DualLru;

/// `--policy`'s help: every policy of the engine's registry with its one-line summary,
/// in the registry's order, then the defaults.
fn policy_help() -> String {
    let policies: Vec<String> = PlacementPolicy::ALL
        .iter()
        .map(|policy| format!("{} ({})", policy.name(), policy.summary()))
        .collect();
    format!(
        "Placement policy across the tiers: {}. Default: {} with a slow tier (it reads and \
         writes the fewest slow-tier lines, see docs/results/sim-hmcached.md), {} with \
         --slow-size 0 (there is nothing to place, and memcached's replacement keeps new \
         items that a frequency order would evict)",
        policies.join(", "),
        POLICY_DEFAULT.name(),
        POLICY_DEFAULT_DRAM_ONLY.name()
    )
}

#[derive(Parser, Debug)]
#[command(
    name = "fogcached",
    version,
    about = "fogcached: a memcached-compatible cache server with a DRAM tier and a slow tier",
    after_help = EXTENDED_OPTIONS_HELP
)]
pub(super) struct Flags {
    /// TCP port to listen on (default: 11211)
    #[arg(
        short = 'p',
        long = "port",
        value_name = "num",
        default_value_t = 11211,
        hide_default_value = true
    )]
    pub(super) port: u16,
    /// UDP port to listen on (default: 0, off); -1: a port the kernel picks (written to
    /// the MEMCACHED_PORT_FILENAME file)
    #[arg(
        short = 'U',
        long = "udp-port",
        value_name = "num",
        default_value_t = 0,
        hide_default_value = true,
        allow_negative_numbers = true,
        // memcached reads its flags with getopt, where the last -U wins; harnesses that
        // add their own -U to a command line rely on it.
        overrides_with = "udp_port"
    )]
    pub(super) udp_port: i32,
    /// interface to listen on (default: 127.0.0.1, where memcached's is INADDR_ANY);
    /// several may be given, comma separated or with -l again, each with its own :port
    #[arg(short = 'l', long = "listen", value_name = "addr", action = ArgAction::Append)]
    pub(super) listen: Vec<String>,
    /// UNIX socket to listen on (disables network support)
    #[arg(short = 's', long = "unix-socket", value_name = "file")]
    pub(super) unix_socket: Option<PathBuf>,
    /// access mask for UNIX socket, in octal (default: 700)
    #[arg(
        short = 'a',
        long = "unix-mask",
        value_name = "mask",
        default_value = "700",
        hide_default_value = true
    )]
    pub(super) unix_mask: String,
    /// item memory in megabytes (default: 64): the DRAM tier (suffixes k, m, g
    /// accepted; 0 = slow tier only)
    #[arg(
        short = 'm',
        long = "memory-limit",
        visible_alias = "dram",
        value_name = "num",
        default_value = "64",
        hide_default_value = true
    )]
    pub(super) memory_limit: String,
    /// The largest DRAM tier `cache_memlimit` may set at run time (megabytes; suffixes
    /// k, m, g accepted); its address space is reserved at start-up, untouched memory
    /// costs nothing. Default: the -m size.
    #[arg(long = "dram-max", value_name = "SIZE")]
    pub(super) dram_max: Option<String>,
    /// Slow tier size in megabytes (suffixes k, m, g accepted); 0 = DRAM only.
    #[arg(long = "slow-size", value_name = "SIZE", default_value = SLOW_SIZE_DEFAULT)]
    pub(super) slow_size: String,
    /// Slow tier backing: a file (tmpfs, disk, DAX mount: MAP_SYNC when supported) or a
    /// DAX device such as /dev/dax0.0, mapped shared. Default: DIR/slow-tier.pool.
    #[arg(
        long = "slow-path",
        value_name = "PATH",
        conflicts_with = "slow_numa_node"
    )]
    pub(super) slow_path: Option<PathBuf>,
    /// Slow tier backing: memory bound to this NUMA node (e.g. a CPU-less CXL node).
    #[arg(long = "slow-numa-node", value_name = "N")]
    pub(super) slow_numa_node: Option<u32>,
    /// Emulated slow-tier cost: none (the default: the pool file is real memory), optane,
    /// cxl, hmcached, or read_ns=..,write_ns=..,read_line_ns=..,write_line_ns=..,
    /// read_gbps=..,write_gbps=.. (per access, per 64-byte line, and bandwidth terms)
    #[arg(long = "slow-cost", value_name = "SPEC", default_value = "none")]
    pub(super) slow_cost: String,
    /// Format the slow tier's pool anew, discarding the items it holds, even when it
    /// would be recovered (never a file that is not a fogcached pool: that is refused).
    #[arg(long = "slow-pool-reset")]
    pub(super) slow_pool_reset: bool,
    /// What a start does with a pool written with other settings (-I, -n, -f,
    /// slab_chunk_max, slab_sizes, --slow-size), by another format version, or with a
    /// damaged header: reset (format it and start with a clean cache, saying why on
    /// stderr and in stats, as memcached's restart file does) or refuse (stop, leaving
    /// the pool as it was). A file that is not a fogcached pool is refused either way.
    #[arg(
        long = "slow-pool-mismatch",
        value_name = "MODE",
        default_value = "reset"
    )]
    pub(super) slow_pool_mismatch: String,
    /// What the slow-tier pool survives: power (invalidations flushed before the
    /// requests that made them are answered: a power loss never brings back a deleted or
    /// overwritten value; on a plain file every worker turn with such requests waits for
    /// an msync), crash (ordered stores: a process crash never does; a power loss may),
    /// or auto (power on DAX, crash on a plain file).
    #[arg(long = "slow-durability", value_name = "MODE", default_value = "auto")]
    pub(super) slow_durability: String,
    /// Directory for the slow tier's pool file, created if missing.
    #[arg(long = "data-dir", value_name = "DIR", default_value = DATA_DIR_DEFAULT)]
    pub(super) data_dir: PathBuf,
    // The help lists the engine's registry (`policy_help`, above): no edit here for a
    // new policy.
    #[arg(long = "policy", value_name = "NAME", help = policy_help())]
    pub(super) policy: Option<String>,
    /// Requests per period of the decayed access counts that promotion admission
    /// compares; 0 = twice the number of items in DRAM.
    #[arg(long = "access-period", value_name = "REQUESTS", default_value_t = 0)]
    pub(super) access_period: u64,
    /// While DRAM is full, promote an item only if its decayed access count exceeds that
    /// of the DRAM item it would displace by this much (dual-lru); 0 admits every one.
    #[arg(long = "promotion-margin", value_name = "N", default_value_t = 3)]
    pub(super) promotion_margin: u8,
    /// Queues of the hotspot policy's multi-queue DRAM replacement (1-5; queue i holds
    /// items accessed 2^i to 2^(i+1)-1 times per period).
    #[arg(long = "mq-queues", value_name = "N", default_value_t = engine::MQ_QUEUES_MAX)]
    pub(super) mq_queues: usize,
    /// Hotspot policy: leave DRAM page moves between slab classes to the slab
    /// automover's rules instead of planning them by the benefit of each class's hottest
    /// items (HMCached's DRAM reassignment).
    #[arg(long = "no-benefit-reassign")]
    pub(super) no_benefit_reassign: bool,
    /// Uniform policy (HM-UNI): the share of keys homed in DRAM, a fraction such as 0.25
    /// or 1/4 — HMCached's "ratio of the DRAM size to the dataset size". Default: the
    /// share of DRAM in both tiers' sizes.
    #[arg(long = "uniform-dram-share", value_name = "FRACTION")]
    pub(super) uniform_dram_share: Option<String>,
    /// Keep every item in the tier it was first written to (no promotion or demotion).
    #[arg(long = "no-migration")]
    pub(super) no_migration: bool,
    /// Demote DRAM items not accessed for this many seconds; 0 = off.
    #[arg(
        long = "dram-residency-max-s",
        value_name = "SECONDS",
        default_value_t = 0
    )]
    pub(super) dram_residency_max_s: u32,
    /// Threads moving items between the tiers.
    #[arg(long = "migration-threads", value_name = "N", default_value_t = 1)]
    pub(super) migration_threads: usize,
    /// Capacity of each Move queue; requests beyond it are dropped and counted.
    #[arg(long = "move-queue-max", value_name = "N", default_value_t = 1024)]
    pub(super) move_queue_max: usize,
    /// max simultaneous connections (default: 1024)
    #[arg(
        short = 'c',
        long = "conn-limit",
        value_name = "num",
        default_value_t = 1024,
        hide_default_value = true
    )]
    pub(super) conn_limit: u32,
    /// number of threads to use (default: 4)
    #[arg(
        short = 't',
        long = "threads",
        value_name = "num",
        default_value_t = 4,
        hide_default_value = true
    )]
    pub(super) threads: u32,
    /// adjusts max item size (default: 1m, min: 1k, max: 1024m)
    #[arg(
        short = 'I',
        long = "max-item-size",
        value_name = "num",
        default_value = "1m",
        hide_default_value = true
    )]
    pub(super) max_item_size: String,
    /// chunk size growth factor (default: 1.25)
    #[arg(
        short = 'f',
        long = "slab-growth-factor",
        value_name = "num",
        default_value_t = 1.25,
        hide_default_value = true
    )]
    pub(super) growth_factor: f64,
    /// min space used for key+value+flags (default: 48)
    #[arg(
        short = 'n',
        long = "slab-min-size",
        value_name = "bytes",
        default_value_t = 48,
        hide_default_value = true
    )]
    pub(super) slab_min_size: usize,
    /// verbose (print errors/warnings while in event loop); -vv very verbose (also
    /// print client commands/responses, as memcached prints them: `<fd command line`,
    /// `>fd reply`, binary headers in hex; never payloads, nor anything before a client
    /// authenticated), -vvv extremely verbose (as -vv in fogcached)
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub(super) verbose: u8,
    /// enable ascii "shutdown" command
    #[arg(short = 'A', long = "enable-shutdown")]
    pub(super) enable_shutdown: bool,
    /// disable use of CAS
    #[arg(short = 'C', long = "disable-cas")]
    pub(super) disable_cas: bool,
    /// return error on memory exhausted instead of evicting
    #[arg(short = 'M', long = "disable-evictions")]
    pub(super) disable_evictions: bool,
    /// maximum number of requests per event, limits the requests processed per
    /// connection to prevent starvation (default: 20)
    #[arg(short = 'R', long = "max-reqs-per-event", value_name = "num", default_value_t = REQS_PER_EVENT_DEFAULT, hide_default_value = true)]
    pub(super) max_reqs_per_event: u32,
    /// set the backlog queue limit (default: 1024): passed to listen(2) for every
    /// listening socket (the kernel caps it at net.core.somaxconn)
    #[arg(
        short = 'b',
        long = "listen-backlog",
        value_name = "num",
        default_value_t = LISTEN_BACKLOG_DEFAULT,
        hide_default_value = true
    )]
    pub(super) listen_backlog: u32,
    /// protocol - one of ascii, binary, or auto (default: auto-negotiate); a connection
    /// in the other protocol is read as this one (binary: closed at its first request)
    #[arg(short = 'B', long = "protocol", value_name = "name")]
    pub(super) protocol: Option<String>,
    /// disable flush_all command (answered CLIENT_ERROR flush_all not allowed, and
    /// "Auth failure." in the binary protocol)
    #[arg(short = 'F', long = "disable-flush-all")]
    pub(super) disable_flush_all: bool,
    /// (memcached: mmap a file for item memory, for a restartable cache) refused:
    /// fogcached's slow-tier pool survives restarts instead (--slow-path, --data-dir)
    #[arg(short = 'e', long = "memory-file", value_name = "file")]
    pub(super) memory_file: Option<PathBuf>,
    /// number of napi ids (accepted with a warning: fogcached assigns connections to
    /// worker threads round-robin, not by NAPI ID)
    #[arg(
        short = 'N',
        long = "napi_ids",
        value_name = "num",
        allow_negative_numbers = true
    )]
    pub(super) napi_ids: Option<String>,
    /// print memcached and libevent license (fogcached prints its own: it contains
    /// neither), and exit
    #[arg(short = 'i', long = "license")]
    pub(super) license: bool,
    /// Event loop of the worker threads: io-uring (one system call per loop turn for all
    /// of a worker's connections; Linux 5.19 or later, and a sandbox that allows it),
    /// epoll, or auto (io-uring when the kernel allows it, else epoll). Default: auto, or
    /// the FOGCACHED_IO_ENGINE environment variable.
    #[arg(long = "io-engine", value_name = "ENGINE")]
    pub(super) io_engine: Option<String>,
    /// How the io-uring loop receives: multishot (one receive stays armed per connection;
    /// Linux 6.0 or later), single (one receive asked for each time a connection wants
    /// input), or auto (multishot when the kernel has it). Default: auto, or the
    /// FOGCACHED_IO_URING_RECV environment variable. No effect under epoll.
    #[arg(long = "io-uring-recv", value_name = "MODE")]
    pub(super) io_uring_recv: Option<String>,
    /// run as a daemon (the command returns once the server listens, and its exit status
    /// says whether it started; stdin, stdout and stderr go to /dev/null unless -v)
    #[arg(short = 'd', long = "daemon")]
    pub(super) daemon: bool,
    /// save PID in <file> (removed at a clean stop; memcached writes it only with -d,
    /// fogcached always)
    #[arg(short = 'P', long = "pidfile", value_name = "file")]
    pub(super) pidfile: Option<PathBuf>,
    /// assume identity of <username> (only when run as root), once the ports and the
    /// pool are open; unlike memcached, root without -u keeps running as root
    #[arg(short = 'u', long = "user", value_name = "username")]
    pub(super) user: Option<String>,
    /// maximize core file limit (and, with -d, stay in the start directory so cores
    /// land there)
    #[arg(short = 'r', long = "enable-coredumps")]
    pub(super) enable_coredumps: bool,
    /// lock down all paged memory (both tiers' mappings included: a slow tier on a file
    /// is read in whole)
    #[arg(short = 'k', long = "lock-memory")]
    pub(super) lock_memory: bool,
    /// try to use large memory pages (if available): transparent huge pages for the
    /// DRAM tier
    #[arg(short = 'L', long = "enable-largepages")]
    pub(super) enable_largepages: bool,
    /// Use <char> as the delimiter between key prefixes and IDs. This is used for
    /// per-prefix stats reporting. The default is ":" (colon). If this option is
    /// specified, stats collection is turned on automatically; if not, then it may be
    /// turned on by sending the "stats detail on" command to the server.
    #[arg(short = 'D', value_name = "char")]
    pub(super) prefix_delimiter: Option<String>,
    /// disable stats cachedump and lru_crawler metadump
    #[arg(short = 'X', long = "disable-dumping")]
    pub(super) disable_dumping: bool,
    /// disable watch commands (live logging)
    #[arg(short = 'W', long = "disable-watch")]
    pub(super) disable_watch: bool,
    /// Serve Prometheus metrics (memcached_exporter's names plus per-tier metrics and
    /// latency histograms) over HTTP at http://<ADDR:PORT>/metrics; off by default.
    #[arg(long = "metrics-listen", value_name = "ADDR:PORT")]
    pub(super) metrics_listen: Option<String>,
    /// turn on Sasl authentication (binary protocol, mechanism PLAIN; users from the file
    /// named by $MEMCACHED_SASL_PWDB, lines user:password, else from the -Y file)
    #[arg(short = 'S', long = "enable-sasl")]
    pub(super) enable_sasl: bool,
    /// enable ASCII protocol authentication. format: user:pass\nuser2:pass2\n (a client
    /// authenticates with `set <any> 0 0 <len>` carrying `user pass`)
    #[arg(short = 'Y', long = "auth-file", value_name = "file")]
    pub(super) auth_file: Option<PathBuf>,
    /// enable TLS/SSL (rustls): -o ssl_chain_cert=<PEM>,ssl_key=<PEM>; also ssl_keyformat
    /// (1 PEM, 2 DER), ssl_verify_mode (0 none, 1 request, 2 require, 3 once) with
    /// ssl_ca_cert=<PEM>, ssl_ciphers, ssl_min_version (2 tlsv1.2, 3 tlsv1.3),
    /// ssl_session_cache, ssl_wbuf_size (KB). A -l entry prefixed notls:
    /// (notls:<ip>:<port>) stays plain
    #[arg(short = 'Z', long = "enable-ssl")]
    pub(super) enable_ssl: bool,
    /// comma separated list of extended options; most options have a 'no_' prefix to
    /// disable (the list is below)
    #[arg(short = 'o', long = "extended", value_name = "options", action = ArgAction::Append)]
    pub(super) extended: Vec<String>,
    /// Fog layer: fill misses from these memcached-protocol servers (host:port, comma
    /// separated or repeated; keys spread by ketama) and send writes to them first.
    #[arg(long = "upstream", value_name = "HOST:PORT,...", action = ArgAction::Append)]
    pub(super) upstream: Vec<String>,
    /// What a write does to the edge copy once the upstream answered: through (store the
    /// written value at the edge too) or invalidate (remove the edge copy).
    #[arg(
        long = "upstream-writes",
        value_name = "MODE",
        default_value = "through"
    )]
    pub(super) upstream_writes: String,
    /// Longest life of an edge copy in seconds (bounds how stale another edge's copy can
    /// be); 0 = the upstream's TTL.
    #[arg(long = "upstream-ttl-max", value_name = "SECONDS", default_value_t = crate::upstream::TTL_MAX_DEFAULT_S)]
    pub(super) upstream_ttl_max: u32,
    /// Time an upstream request may take; a read that takes longer is a miss.
    #[arg(long = "upstream-timeout-ms", value_name = "MS", default_value_t = crate::upstream::TIMEOUT_DEFAULT_MS)]
    pub(super) upstream_timeout_ms: u32,
    /// Pipelined connections to each upstream server, per upstream thread.
    #[arg(long = "upstream-conns", value_name = "N", default_value_t = crate::upstream::CONNS_PER_SERVER_DEFAULT)]
    pub(super) upstream_conns: usize,
    /// Upstream threads (each with its own connections; keys split among them by hash);
    /// 0 = one per two worker threads (-t), rounded up.
    #[arg(long = "upstream-threads", value_name = "N", default_value_t = 0)]
    pub(super) upstream_threads: usize,
    /// Consecutive failures of an upstream that open its circuit breaker.
    #[arg(long = "upstream-breaker-failures", value_name = "N", default_value_t = crate::upstream::BREAKER_FAILURES_DEFAULT)]
    pub(super) upstream_breaker_failures: u32,
    /// How long an open breaker answers at once (reads: miss) before the upstream is
    /// tried again.
    #[arg(long = "upstream-retry-ms", value_name = "MS", default_value_t = crate::upstream::RETRY_DEFAULT_MS)]
    pub(super) upstream_retry_ms: u32,
}
