//! Command line: memcached's flags and defaults, mapped onto [`EngineConfig`] and the
//! runtime's own settings.
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

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::auth::{AuthSettings, SASL_PWDB_ENV};
use crate::tls::{TlsContext, TlsOptions};
use clap::{ArgAction, Parser};
use engine::config::{
    Durability, PlacementPolicy, PoolMismatch, MIGRATION_THREADS_MAX, MOVE_QUEUE_MAX_LIMIT,
};
use engine::{EngineConfig, SLAB_PAGE_SIZE_BYTES};
use std::sync::Arc;
use tier::{CostModel, RegionBacking, RegionSpec};

use crate::worker::{IoEngine, IoUringRecv};

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

/// `--data-dir` default, relative to the working directory.
pub const DATA_DIR_DEFAULT: &str = "fogcached-data";

/// The pool file's name inside the data directory.
pub const POOL_FILE_NAME: &str = "slow-tier.pool";

/// `--slow-size` default: large enough to show both tiers at work, and free until
/// written, since the pool file is sparse.
const SLOW_SIZE_DEFAULT: &str = "1g";

/// Policies of the design (BRIEF.md) that are not built yet: named so that asking for
/// one says "not yet" rather than "unknown".
const POLICIES_PLANNED: &[&str] = &[];

/// memcached's `-o` suboptions that fogcached accepts with a warning, because ignoring
/// them is harmless: fogcached has no such mechanism, or always behaves one way, or
/// bounds the same thing by other means. They are accepted so that memcached command
/// lines keep working; the reason is printed at start-up.
const SUBOPTIONS_WITHOUT_EFFECT: &[(&str, &str)] = &[
    (
        "modern",
        "fogcached always runs memcached's modern defaults",
    ),
    (
        "maxconns_fast",
        "fogcached always rejects connections over -c at once",
    ),
    (
        "tail_repair_time",
        "no tail repair: fogcached never holds an item reference across requests",
    ),
    (
        "hash_algorithm",
        "fogcached hashes keys with its own function",
    ),
    ("slab_automove_ratio", "the automover's rules are fixed"),
    ("slab_automove_window", "the automover's rules are fixed"),
    ("slab_automove_freeratio", "the automover's rules are fixed"),
    ("temporary_ttl", "no temporary-item class"),
    ("lru_segmented", "the LRU is always segmented"),
    ("no_hashexpand", "the index grows as needed"),
    (
        "watcher_logbuf_size",
        "each watcher buffers a fixed 256 KiB",
    ),
    (
        "worker_logbuf_size",
        "the event log is one bounded queue, not a buffer per worker",
    ),
    ("inline_ascii_response", "no inline ASCII responses"),
    ("no_inline_ascii_resp", "no inline ASCII responses"),
    ("inline_ascii_resp", "no inline ASCII responses"),
    (
        "no_chunked_items",
        "items larger than slab_chunk_max take whole pages, never chunk chains",
    ),
    (
        "resp_obj_mem_limit",
        "reply memory is bounded per connection instead",
    ),
    (
        "read_buf_mem_limit",
        "read buffers are bounded per connection instead",
    ),
    ("drop_privileges", "no seccomp sandbox"),
    ("no_drop_privileges", "no seccomp sandbox"),
    ("num_napi_ids", "no NAPI-ID thread affinity"),
];

/// memcached's `-o` suboptions fogcached refuses, because running without what they ask
/// for would lose data or security the operator counts on: the reason says what to use.
const SUBOPTIONS_REFUSED: &[(&str, &str)] = &[
    ("ext_", "extstore: fogcached's slow tier takes its place (--slow-size, --slow-path)"),
    ("memory_file", "memcached's restartable mode: fogcached's slow-tier pool survives restarts instead (--slow-path, --data-dir; see \"Restart\" in the README)"),
    ("proxy_", "memcached's built-in proxy: run it (or nutcracker) in front of fogcached instead"),
];

/// `-i`: memcached prints its and libevent's licenses; fogcached contains neither's code
/// and prints its own.
const LICENSE_TEXT: &str = concat!(
    "fogcached ",
    env!("CARGO_PKG_VERSION"),
    "\n\nLicensed under either of the Apache License, Version 2.0\n\
     (https://www.apache.org/licenses/LICENSE-2.0) or the MIT license\n\
     (https://opensource.org/licenses/MIT), at your option (SPDX: ",
    env!("CARGO_PKG_LICENSE"),
    ").\n\nfogcached speaks memcached's protocols and takes its command line; it \
     contains no\ncode of memcached (BSD-3-Clause) or libevent (BSD-3-Clause).\n"
);

/// The `-o` suboptions fogcached implements, in memcached's words, and what it does
/// with the others (printed after the flags by `--help`).
const EXTENDED_OPTIONS_HELP: &str = "\
-o suboptions (memcached's; most have a 'no_' prefix to disable):
   - hashpower:           an integer multiplier for how large the hash
                          table should be. normally grows at runtime. (default starts at: 0)
   - no_lru_crawler:      disable LRU Crawler background thread.
   - no_lru_maintainer:   disable new LRU system + background thread.
   - no_modern:           memcached's pre-1.5 defaults: no LRU crawler, no LRU
                          maintainer, no slab reassignment, slab_chunk_max at the
                          page size (fogcached: with a slow tier the maintainers
                          keep running, they move items between the tiers)
   - hot_lru_pct:         pct of slab memory to reserve for hot lru. (default pct: 20)
   - warm_lru_pct:        pct of slab memory to reserve for warm lru. (default pct: 40)
   - hot_max_factor:      items idle > cold lru age * drop from hot lru. (default: 0.20)
   - warm_max_factor:     items idle > cold lru age * this drop from warm. (default: 2.00)
   - slab_reassign, slab_automove=<0|1|2>: move slab pages between classes
   - slab_chunk_max:      (EXPERIMENTAL) maximum slab size in kilobytes. (default: 512)
   - slab_sizes:          the classes' chunk sizes, dash separated (100-200-300),
                          instead of the ones -f and -n make
   - no_slab_automove:    slab_automove=0
   - lru_crawler_sleep:   microseconds to sleep between items
                          default is 100. (fogcached: after every 1000 items)
   - lru_crawler_tocrawl: max items to crawl per slab per run
                          default is 0 (unlimited)
   - track_sizes:         enable dynamic reports for 'stats sizes' command.
                          (fogcached counts them when asked, not on every store)
   - idle_timeout:        timeout for idle connections. (default: 0, no timeout)
   - sock_cookie_id:      attributes an ID to a socket for ip filtering/firewalls
                          (SO_MARK on the listening sockets; needs CAP_NET_ADMIN)
  Accepted with a warning (no effect in fogcached): modern, maxconns_fast,
  tail_repair_time, hash_algorithm, slab_automove_ratio, slab_automove_window,
  slab_automove_freeratio, temporary_ttl, lru_segmented, no_hashexpand,
  watcher_logbuf_size, worker_logbuf_size, inline_ascii_resp, no_inline_ascii_resp,
  inline_ascii_response, no_chunked_items, resp_obj_mem_limit, read_buf_mem_limit,
  drop_privileges, no_drop_privileges, num_napi_ids.
   - ssl_*:               TLS settings, with -Z (see -Z above).
  Refused, with the alternative: ext_* (the slow tier replaces extstore), memory_file
  (the slow-tier pool persists), proxy_* (run a proxy in front), no_maxconns_fast.

Environment: MEMCACHED_PORT_FILENAME=<file> writes the bound ports there, as memcached;
NOTIFY_SOCKET (set by systemd for Type=notify) receives READY=1 once the ports accept.
Operators' guide: docs/operations.md.";

#[derive(Parser, Debug)]
#[command(
    name = "fogcached",
    version,
    about = "fogcached: a memcached-compatible cache server with a DRAM tier and a slow tier",
    after_help = EXTENDED_OPTIONS_HELP
)]
struct Cli {
    /// TCP port to listen on (default: 11211)
    #[arg(
        short = 'p',
        long = "port",
        value_name = "num",
        default_value_t = 11211,
        hide_default_value = true
    )]
    port: u16,
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
    udp_port: i32,
    /// interface to listen on (default: 127.0.0.1, where memcached's is INADDR_ANY);
    /// several may be given, comma separated or with -l again, each with its own :port
    #[arg(short = 'l', long = "listen", value_name = "addr", action = ArgAction::Append)]
    listen: Vec<String>,
    /// UNIX socket to listen on (disables network support)
    #[arg(short = 's', long = "unix-socket", value_name = "file")]
    unix_socket: Option<PathBuf>,
    /// access mask for UNIX socket, in octal (default: 700)
    #[arg(
        short = 'a',
        long = "unix-mask",
        value_name = "mask",
        default_value = "700",
        hide_default_value = true
    )]
    unix_mask: String,
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
    memory_limit: String,
    /// The largest DRAM tier `cache_memlimit` may set at run time (megabytes; suffixes
    /// k, m, g accepted); its address space is reserved at start-up, untouched memory
    /// costs nothing. Default: the -m size.
    #[arg(long = "dram-max", value_name = "SIZE")]
    dram_max: Option<String>,
    /// Slow tier size in megabytes (suffixes k, m, g accepted); 0 = DRAM only.
    #[arg(long = "slow-size", value_name = "SIZE", default_value = SLOW_SIZE_DEFAULT)]
    slow_size: String,
    /// Slow tier backing: a file (tmpfs, disk, DAX mount: MAP_SYNC when supported) or a
    /// DAX device such as /dev/dax0.0, mapped shared. Default: DIR/slow-tier.pool.
    #[arg(
        long = "slow-path",
        value_name = "PATH",
        conflicts_with = "slow_numa_node"
    )]
    slow_path: Option<PathBuf>,
    /// Slow tier backing: memory bound to this NUMA node (e.g. a CPU-less CXL node).
    #[arg(long = "slow-numa-node", value_name = "N")]
    slow_numa_node: Option<u32>,
    /// Emulated slow-tier cost: none (the default: the pool file is real memory), optane,
    /// cxl, hmcached, or read_ns=..,write_ns=..,read_line_ns=..,write_line_ns=..,
    /// read_gbps=..,write_gbps=.. (per access, per 64-byte line, and bandwidth terms)
    #[arg(long = "slow-cost", value_name = "SPEC", default_value = "none")]
    slow_cost: String,
    /// Format the slow tier's pool anew, discarding the items it holds, even when it
    /// would be recovered (never a file that is not a fogcached pool: that is refused).
    #[arg(long = "slow-pool-reset")]
    slow_pool_reset: bool,
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
    slow_pool_mismatch: String,
    /// What the slow-tier pool survives: power (invalidations flushed before the
    /// requests that made them are answered: a power loss never brings back a deleted or
    /// overwritten value; on a plain file every worker turn with such requests waits for
    /// an msync), crash (ordered stores: a process crash never does; a power loss may),
    /// or auto (power on DAX, crash on a plain file).
    #[arg(long = "slow-durability", value_name = "MODE", default_value = "auto")]
    slow_durability: String,
    /// Directory for the slow tier's pool file, created if missing.
    #[arg(long = "data-dir", value_name = "DIR", default_value = DATA_DIR_DEFAULT)]
    data_dir: PathBuf,
    /// Placement policy across the tiers: hotspot (HMCached: access counters, per-class
    /// promotion thresholds, multi-queue DRAM, CLOCK slow tier; the default with a slow
    /// tier: it reads and writes the fewest slow-tier lines, see
    /// docs/results/sim-hmcached.md), dual-lru (Fogcached; memcached's segmented LRU in
    /// each tier, and the default with --slow-size 0, where there is nothing to place and
    /// memcached's replacement keeps new items that a frequency order would evict),
    /// hyperbolic (HM-HC: hotspot with hyperbolic caching as DRAM's replacement), uniform
    /// (HM-UNI: items spread over the tiers by size, never moved), two-level (HM-TLC:
    /// every access pulls the item into DRAM), random (a baseline: keys spread over the
    /// tiers by hash, half to each whatever their sizes, never moved).
    #[arg(long = "policy", value_name = "NAME")]
    policy: Option<String>,
    /// Requests per period of the decayed access counts that promotion admission
    /// compares; 0 = twice the number of items in DRAM.
    #[arg(long = "access-period", value_name = "REQUESTS", default_value_t = 0)]
    access_period: u64,
    /// While DRAM is full, promote an item only if its decayed access count exceeds that
    /// of the DRAM item it would displace by this much (dual-lru); 0 admits every one.
    #[arg(long = "promotion-margin", value_name = "N", default_value_t = 3)]
    promotion_margin: u8,
    /// Queues of the hotspot policy's multi-queue DRAM replacement (1-5; queue i holds
    /// items accessed 2^i to 2^(i+1)-1 times per period).
    #[arg(long = "mq-queues", value_name = "N", default_value_t = engine::MQ_QUEUES_MAX)]
    mq_queues: usize,
    /// Hotspot policy: leave DRAM page moves between slab classes to the slab
    /// automover's rules instead of planning them by the benefit of each class's hottest
    /// items (HMCached's DRAM reassignment).
    #[arg(long = "no-benefit-reassign")]
    no_benefit_reassign: bool,
    /// Uniform policy (HM-UNI): the share of keys homed in DRAM, a fraction such as 0.25
    /// or 1/4 — HMCached's "ratio of the DRAM size to the dataset size". Default: the
    /// share of DRAM in both tiers' sizes.
    #[arg(long = "uniform-dram-share", value_name = "FRACTION")]
    uniform_dram_share: Option<String>,
    /// Keep every item in the tier it was first written to (no promotion or demotion).
    #[arg(long = "no-migration")]
    no_migration: bool,
    /// Demote DRAM items not accessed for this many seconds; 0 = off.
    #[arg(
        long = "dram-residency-max-s",
        value_name = "SECONDS",
        default_value_t = 0
    )]
    dram_residency_max_s: u32,
    /// Threads moving items between the tiers.
    #[arg(long = "migration-threads", value_name = "N", default_value_t = 1)]
    migration_threads: usize,
    /// Capacity of each Move queue; requests beyond it are dropped and counted.
    #[arg(long = "move-queue-max", value_name = "N", default_value_t = 1024)]
    move_queue_max: usize,
    /// max simultaneous connections (default: 1024)
    #[arg(
        short = 'c',
        long = "conn-limit",
        value_name = "num",
        default_value_t = 1024,
        hide_default_value = true
    )]
    conn_limit: u32,
    /// number of threads to use (default: 4)
    #[arg(
        short = 't',
        long = "threads",
        value_name = "num",
        default_value_t = 4,
        hide_default_value = true
    )]
    threads: u32,
    /// adjusts max item size (default: 1m, min: 1k, max: 1024m)
    #[arg(
        short = 'I',
        long = "max-item-size",
        value_name = "num",
        default_value = "1m",
        hide_default_value = true
    )]
    max_item_size: String,
    /// chunk size growth factor (default: 1.25)
    #[arg(
        short = 'f',
        long = "slab-growth-factor",
        value_name = "num",
        default_value_t = 1.25,
        hide_default_value = true
    )]
    growth_factor: f64,
    /// min space used for key+value+flags (default: 48)
    #[arg(
        short = 'n',
        long = "slab-min-size",
        value_name = "bytes",
        default_value_t = 48,
        hide_default_value = true
    )]
    slab_min_size: usize,
    /// verbose (print errors/warnings while in event loop); -vv very verbose (also
    /// print client commands/responses, as memcached prints them: `<fd command line`,
    /// `>fd reply`, binary headers in hex; never payloads, nor anything before a client
    /// authenticated), -vvv extremely verbose (as -vv in fogcached)
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// enable ascii "shutdown" command
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// disable use of CAS
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// return error on memory exhausted instead of evicting
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// maximum number of requests per event, limits the requests processed per
    /// connection to prevent starvation (default: 20)
    #[arg(short = 'R', long = "max-reqs-per-event", value_name = "num", default_value_t = REQS_PER_EVENT_DEFAULT, hide_default_value = true)]
    max_reqs_per_event: u32,
    /// set the backlog queue limit (default: 1024): passed to listen(2) for every
    /// listening socket (the kernel caps it at net.core.somaxconn)
    #[arg(
        short = 'b',
        long = "listen-backlog",
        value_name = "num",
        default_value_t = LISTEN_BACKLOG_DEFAULT,
        hide_default_value = true
    )]
    listen_backlog: u32,
    /// protocol - one of ascii, binary, or auto (default: auto-negotiate); a connection
    /// in the other protocol is read as this one (binary: closed at its first request)
    #[arg(short = 'B', long = "protocol", value_name = "name")]
    protocol: Option<String>,
    /// disable flush_all command (answered CLIENT_ERROR flush_all not allowed, and
    /// "Auth failure." in the binary protocol)
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,
    /// (memcached: mmap a file for item memory, for a restartable cache) refused:
    /// fogcached's slow-tier pool survives restarts instead (--slow-path, --data-dir)
    #[arg(short = 'e', long = "memory-file", value_name = "file")]
    memory_file: Option<PathBuf>,
    /// number of napi ids (accepted with a warning: fogcached assigns connections to
    /// worker threads round-robin, not by NAPI ID)
    #[arg(
        short = 'N',
        long = "napi_ids",
        value_name = "num",
        allow_negative_numbers = true
    )]
    napi_ids: Option<String>,
    /// print memcached and libevent license (fogcached prints its own: it contains
    /// neither), and exit
    #[arg(short = 'i', long = "license")]
    license: bool,
    /// Event loop of the worker threads: io-uring (one system call per loop turn for all
    /// of a worker's connections; Linux 5.19 or later, and a sandbox that allows it),
    /// epoll, or auto (io-uring when the kernel allows it, else epoll). Default: auto, or
    /// the FOGCACHED_IO_ENGINE environment variable.
    #[arg(long = "io-engine", value_name = "ENGINE")]
    io_engine: Option<String>,
    /// How the io-uring loop receives: multishot (one receive stays armed per connection;
    /// Linux 6.0 or later), single (one receive asked for each time a connection wants
    /// input), or auto (multishot when the kernel has it). Default: auto, or the
    /// FOGCACHED_IO_URING_RECV environment variable. No effect under epoll.
    #[arg(long = "io-uring-recv", value_name = "MODE")]
    io_uring_recv: Option<String>,
    /// run as a daemon (the command returns once the server listens, and its exit status
    /// says whether it started; stdin, stdout and stderr go to /dev/null unless -v)
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// save PID in <file> (removed at a clean stop; memcached writes it only with -d,
    /// fogcached always)
    #[arg(short = 'P', long = "pidfile", value_name = "file")]
    pidfile: Option<PathBuf>,
    /// assume identity of <username> (only when run as root), once the ports and the
    /// pool are open; unlike memcached, root without -u keeps running as root
    #[arg(short = 'u', long = "user", value_name = "username")]
    user: Option<String>,
    /// maximize core file limit (and, with -d, stay in the start directory so cores
    /// land there)
    #[arg(short = 'r', long = "enable-coredumps")]
    enable_coredumps: bool,
    /// lock down all paged memory (both tiers' mappings included: a slow tier on a file
    /// is read in whole)
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// try to use large memory pages (if available): transparent huge pages for the
    /// DRAM tier
    #[arg(short = 'L', long = "enable-largepages")]
    enable_largepages: bool,
    /// Use <char> as the delimiter between key prefixes and IDs. This is used for
    /// per-prefix stats reporting. The default is ":" (colon). If this option is
    /// specified, stats collection is turned on automatically; if not, then it may be
    /// turned on by sending the "stats detail on" command to the server.
    #[arg(short = 'D', value_name = "char")]
    prefix_delimiter: Option<String>,
    /// disable stats cachedump and lru_crawler metadump
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,
    /// disable watch commands (live logging)
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,
    /// Serve Prometheus metrics (memcached_exporter's names plus per-tier metrics and
    /// latency histograms) over HTTP at http://<ADDR:PORT>/metrics; off by default.
    #[arg(long = "metrics-listen", value_name = "ADDR:PORT")]
    metrics_listen: Option<String>,
    /// turn on Sasl authentication (binary protocol, mechanism PLAIN; users from the file
    /// named by $MEMCACHED_SASL_PWDB, lines user:password, else from the -Y file)
    #[arg(short = 'S', long = "enable-sasl")]
    enable_sasl: bool,
    /// enable ASCII protocol authentication. format: user:pass\nuser2:pass2\n (a client
    /// authenticates with `set <any> 0 0 <len>` carrying `user pass`)
    #[arg(short = 'Y', long = "auth-file", value_name = "file")]
    auth_file: Option<PathBuf>,
    /// enable TLS/SSL (rustls): -o ssl_chain_cert=<PEM>,ssl_key=<PEM>; also ssl_keyformat
    /// (1 PEM, 2 DER), ssl_verify_mode (0 none, 1 request, 2 require, 3 once) with
    /// ssl_ca_cert=<PEM>, ssl_ciphers, ssl_min_version (2 tlsv1.2, 3 tlsv1.3),
    /// ssl_session_cache, ssl_wbuf_size (KB). A -l entry prefixed notls:
    /// (notls:<ip>:<port>) stays plain
    #[arg(short = 'Z', long = "enable-ssl")]
    enable_ssl: bool,
    /// comma separated list of extended options; most options have a 'no_' prefix to
    /// disable (the list is below)
    #[arg(short = 'o', long = "extended", value_name = "options", action = ArgAction::Append)]
    extended: Vec<String>,
    /// Fog layer: fill misses from these memcached-protocol servers (host:port, comma
    /// separated or repeated; keys spread by ketama) and send writes to them first.
    #[arg(long = "upstream", value_name = "HOST:PORT,...", action = ArgAction::Append)]
    upstream: Vec<String>,
    /// What a write does to the edge copy once the upstream answered: through (store the
    /// written value at the edge too) or invalidate (remove the edge copy).
    #[arg(
        long = "upstream-writes",
        value_name = "MODE",
        default_value = "through"
    )]
    upstream_writes: String,
    /// Longest life of an edge copy in seconds (bounds how stale another edge's copy can
    /// be); 0 = the upstream's TTL.
    #[arg(long = "upstream-ttl-max", value_name = "SECONDS", default_value_t = crate::upstream::TTL_MAX_DEFAULT_S)]
    upstream_ttl_max: u32,
    /// Time an upstream request may take; a read that takes longer is a miss.
    #[arg(long = "upstream-timeout-ms", value_name = "MS", default_value_t = crate::upstream::TIMEOUT_DEFAULT_MS)]
    upstream_timeout_ms: u32,
    /// Pipelined connections to each upstream server, per upstream thread.
    #[arg(long = "upstream-conns", value_name = "N", default_value_t = crate::upstream::CONNS_PER_SERVER_DEFAULT)]
    upstream_conns: usize,
    /// Upstream threads (each with its own connections; keys split among them by hash);
    /// 0 = one per two worker threads (-t), rounded up.
    #[arg(long = "upstream-threads", value_name = "N", default_value_t = 0)]
    upstream_threads: usize,
    /// Consecutive failures of an upstream that open its circuit breaker.
    #[arg(long = "upstream-breaker-failures", value_name = "N", default_value_t = crate::upstream::BREAKER_FAILURES_DEFAULT)]
    upstream_breaker_failures: u32,
    /// How long an open breaker answers at once (reads: miss) before the upstream is
    /// tried again.
    #[arg(long = "upstream-retry-ms", value_name = "MS", default_value_t = crate::upstream::RETRY_DEFAULT_MS)]
    upstream_retry_ms: u32,
}

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
    apply_tier_flags(engine, &cli)?;
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
    config.dram_reserve_default = dram_reserve_default;
    if config.udp_port.is_some() && config.unix_socket.is_some() {
        // memcached opens no UDP socket with -s either, and says nothing.
        config
            .warnings
            .push("-U has no effect with -s: a server on a unix socket speaks no UDP".to_owned());
        config.udp_port = None;
    }
    config.upstream = upstream_config(&cli)?;
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
    check(&config, slab_chunk_max_set)?;
    Ok(config)
}

/// The `--upstream*` flags; `None` without `--upstream`.
fn upstream_config(cli: &Cli) -> Result<Option<crate::upstream::UpstreamConfig>, CliExit> {
    use crate::upstream::{UpstreamConfig, WriteMode};
    let servers: Vec<String> = cli
        .upstream
        .iter()
        .flat_map(|arg| arg.split(','))
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(str::to_owned)
        .collect();
    for server in &servers {
        let port_ok = server.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            return Err(usage(format!(
                "invalid --upstream {server:?}: expected host:port"
            )));
        }
    }
    let writes = match cli.upstream_writes.as_str() {
        "through" => WriteMode::Through,
        "invalidate" => WriteMode::Invalidate,
        other => {
            return Err(usage(format!(
                "invalid --upstream-writes {other:?}: expected through or invalidate"
            )))
        }
    };
    if cli.upstream_conns == 0 || cli.upstream_conns > 64 {
        return Err(usage(format!(
            "--upstream-conns must be between 1 and 64, got {}",
            cli.upstream_conns
        )));
    }
    if cli.upstream_timeout_ms == 0 {
        return Err(usage("--upstream-timeout-ms must be at least 1"));
    }
    let threads = match cli.upstream_threads {
        // A loop's CPU per client get was measured at about half a worker's (read-through,
        // 27 % misses), and each loop added costs batching: one per two workers.
        0 => (cli.threads as usize)
            .div_ceil(2)
            .clamp(1, crate::upstream::THREADS_MAX),
        n if n <= crate::upstream::THREADS_MAX => n,
        n => {
            return Err(usage(format!(
                "--upstream-threads must be between 0 (one per two worker threads) and {}, got {n}",
                crate::upstream::THREADS_MAX
            )))
        }
    };
    if servers.is_empty() {
        return Ok(None);
    }
    Ok(Some(UpstreamConfig {
        servers,
        writes,
        ttl_max_s: cli.upstream_ttl_max,
        timeout_ms: cli.upstream_timeout_ms,
        conns_per_server: cli.upstream_conns,
        threads,
        breaker_failures: cli.upstream_breaker_failures.max(1),
        retry_ms: cli.upstream_retry_ms,
    }))
}

/// The tier and placement flags, onto the engine's slow tier spec and policy knobs.
fn apply_tier_flags(engine: &mut EngineConfig, cli: &Cli) -> Result<(), CliExit> {
    let page_mb = SLAB_PAGE_SIZE_BYTES >> 20;
    if engine.memory_limit_bytes != 0 && engine.memory_limit_bytes < SLAB_PAGE_SIZE_BYTES as u64 {
        return Err(usage(format!(
            "memory limit (-m/--dram) must be 0 (slow tier only) or at least {page_mb} megabyte"
        )));
    }
    let slow_size_bytes = parse_size(&cli.slow_size, SizeUnit::Megabytes).map_err(|e| {
        usage(format!(
            "invalid slow tier size (--slow-size) {:?}: {e}",
            cli.slow_size
        ))
    })?;
    if slow_size_bytes != 0 && slow_size_bytes < SLAB_PAGE_SIZE_BYTES as u64 {
        return Err(usage(format!(
            "slow tier size (--slow-size) must be 0 (DRAM only) or at least {page_mb} megabyte"
        )));
    }
    let slow_size_bytes = usize::try_from(slow_size_bytes).map_err(|_| {
        usage(format!(
            "slow tier size (--slow-size) too large: {}",
            cli.slow_size
        ))
    })?;
    if engine.memory_limit_bytes == 0 && slow_size_bytes == 0 {
        return Err(usage(
            "-m/--dram and --slow-size are both 0: at least one tier needs memory",
        ));
    }
    let cost = CostModel::parse(&cli.slow_cost)
        .map_err(|e| usage(format!("invalid --slow-cost {:?}: {e}", cli.slow_cost)))?;
    engine.slow_tier = if slow_size_bytes == 0 {
        if cli.slow_path.is_some() || cli.slow_numa_node.is_some() {
            return Err(usage(
                "--slow-path and --slow-numa-node need a slow tier (--slow-size is 0)",
            ));
        }
        None
    } else {
        let backing = match (&cli.slow_path, cli.slow_numa_node) {
            // clap refuses an empty PATH/DIR ("a value is required").
            (Some(path), _) => RegionBacking::File { path: path.clone() },
            (None, Some(node)) => RegionBacking::Numa { node },
            (None, None) => RegionBacking::File {
                path: cli.data_dir.join(POOL_FILE_NAME),
            },
        };
        Some(RegionSpec {
            size_bytes: slow_size_bytes,
            backing,
            cost,
        })
    };

    // Without a slow tier the policy only replaces: the hotspot policy's multi-queue
    // evicts a new item (count 1, lowest queue) before an old working set whose counts
    // are still decaying, and lost 81 to 97 % of memcaslap's gets once each new run's
    // keys met the last run's (docs/results/speed.md); memcached's LRU does not.
    let policy_name = cli.policy.as_deref().unwrap_or(if slow_size_bytes == 0 {
        "dual-lru"
    } else {
        "hotspot"
    });
    engine.policy = match PlacementPolicy::parse(policy_name) {
        Some(policy) => policy,
        None => {
            let valid = PlacementPolicy::NAMES.join(", ");
            return Err(usage(if POLICIES_PLANNED.contains(&policy_name) {
                format!("policy {policy_name:?} is not implemented yet (valid: {valid})")
            } else {
                format!("unknown policy {policy_name:?} (valid: {valid})")
            }));
        }
    };
    engine.migration_enabled = !cli.no_migration;
    engine.slow_pool_reset = cli.slow_pool_reset;
    engine.slow_pool_mismatch = PoolMismatch::parse(&cli.slow_pool_mismatch).ok_or_else(|| {
        usage(format!(
            "invalid --slow-pool-mismatch {:?} (valid: {})",
            cli.slow_pool_mismatch,
            PoolMismatch::NAMES.join(", ")
        ))
    })?;
    engine.slow_durability = Durability::parse(&cli.slow_durability).ok_or_else(|| {
        usage(format!(
            "invalid --slow-durability {:?} (valid: {})",
            cli.slow_durability,
            Durability::NAMES.join(", ")
        ))
    })?;
    engine.access_period_requests = cli.access_period;
    engine.promotion_margin = cli.promotion_margin;
    engine.mq_queues = cli.mq_queues;
    engine.benefit_reassign = !cli.no_benefit_reassign;
    if let Some(text) = &cli.uniform_dram_share {
        engine.uniform_dram_share_ppm = Some(engine::parse_fraction(text).map(engine::fraction_to_ppm).ok_or_else(|| {
            usage(format!(
                "invalid --uniform-dram-share {text:?}: expected a fraction in (0, 1] such as 0.25 or 1/4"
            ))
        })?);
    }
    engine.dram_residency_max_s = cli.dram_residency_max_s;
    if cli.migration_threads == 0 || cli.migration_threads > MIGRATION_THREADS_MAX {
        return Err(usage(format!(
            "--migration-threads must be between 1 and {MIGRATION_THREADS_MAX}, got {}",
            cli.migration_threads
        )));
    }
    engine.migration_threads = cli.migration_threads;
    if cli.move_queue_max == 0 || cli.move_queue_max > MOVE_QUEUE_MAX_LIMIT {
        return Err(usage(format!(
            "--move-queue-max must be between 1 and {MOVE_QUEUE_MAX_LIMIT}, got {}",
            cli.move_queue_max
        )));
    }
    engine.move_queue_max = cli.move_queue_max;
    Ok(())
}

/// Why the storage the configuration names could not be made ready.
#[derive(Debug, PartialEq, Eq)]
pub enum StorageError {
    /// The configuration asks for something this machine lacks (a NUMA node): a usage
    /// error.
    Usage(String),
    /// The operating system refused (e.g. the data directory cannot be created).
    Os(String),
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Usage(message) | StorageError::Os(message) => f.write_str(message),
        }
    }
}

/// Start-up checks and preparation before the engine opens its regions: creates the
/// data directory when the slow tier's pool file lives in it, and checks a NUMA node
/// exists. Separate from [`parse`] so that parsing has no side effects.
pub fn prepare_storage(config: &Config) -> Result<(), StorageError> {
    let Some(spec) = &config.engine.slow_tier else {
        return Ok(());
    };
    match &spec.backing {
        RegionBacking::File { path } if path.starts_with(&config.data_dir) => {
            create_data_dir(&config.data_dir)
        }
        RegionBacking::Numa { node } => {
            tier::check_node_exists(*node).map_err(|e| StorageError::Usage(e.to_string()))
        }
        _ => Ok(()),
    }
}

/// Reads the credentials (`-Y`, `-S` with `$MEMCACHED_SASL_PWDB`) the configuration names
/// into `config.auth`. Separate from [`parse`] so that parsing reads no file; a file that
/// is missing, unreadable, too large or malformed is a usage error naming the file.
pub fn load_security(config: &mut Config) -> Result<(), String> {
    let sasl_pwdb = std::env::var_os(SASL_PWDB_ENV)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    config.auth = AuthSettings::load(
        config.auth_file.as_deref(),
        config.sasl,
        sasl_pwdb.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    if config.tls.enabled {
        // `refresh_certs` reads the files again later, perhaps after -d moved to `/`.
        let mut options = config.tls.clone();
        if let Ok(cwd) = std::env::current_dir() {
            for path in [
                &mut options.chain_cert,
                &mut options.key,
                &mut options.ca_cert,
            ]
            .into_iter()
            .flatten()
            {
                if path.is_relative() {
                    *path = cwd.join(&*path);
                }
            }
        }
        config.tls_context = Some(Arc::new(TlsContext::load(options)?));
    }
    Ok(())
}

fn create_data_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        StorageError::Os(format!(
            "cannot create the data directory {}: {e}",
            dir.display()
        ))
    })
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
        "no_modern" => no_modern(config, slab_chunk_max_set),
        "hot_lru_pct" => engine.hot_lru_pct = number(name, value)?,
        "warm_lru_pct" => engine.warm_lru_pct = number(name, value)?,
        "hot_max_factor" => engine.hot_max_factor = number(name, value)?,
        "warm_max_factor" => engine.warm_max_factor = number(name, value)?,
        "slab_reassign" => engine.slab_reassign = true,
        "no_slab_reassign" => engine.slab_reassign = false,
        "no_slab_automove" => engine.slab_automove = 0,
        "slab_sizes" => {
            let text = required(name, value)?;
            let sizes = text
                .split('-')
                .map(|size| {
                    size.trim().parse::<usize>().map_err(|_| {
                        usage(format!("could not parse argument to slab_sizes: {size:?}"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            // Range and order are the engine's checks, once -n and slab_chunk_max are
            // known (memcached's order too: it reads slab_sizes after every option).
            engine.slab_sizes = Some(sizes);
        }
        "lru_crawler_sleep" => {
            let sleep_us: i64 = number(name, value)?;
            engine.lru_crawler_sleep_us = u32::try_from(sleep_us)
                .ok()
                .filter(|us| *us <= engine::CRAWLER_SLEEP_MAX_US)
                .ok_or_else(|| usage("LRU crawler sleep must be between 0 and 1 second"))?;
        }
        "lru_crawler_tocrawl" => {
            let text = required(name, value)?;
            engine.lru_crawler_tocrawl = text
                .trim()
                .parse()
                .map_err(|_| usage("lru_crawler_tocrawl takes a numeric 32bit value"))?;
        }
        "track_sizes" => {
            engine.track_sizes = true;
            config.warnings.push(
                "-o track_sizes: `stats sizes` counts the items when asked (walking the \
                 cache), where memcached keeps the histogram up to date on every store"
                    .to_owned(),
            );
        }
        "sock_cookie_id" => config.sock_cookie_id = Some(number(name, value)?),
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
        _ if name.starts_with("ssl_") => {
            let known = config.tls.apply_suboption(name, value).map_err(usage)?;
            if !known {
                return Err(usage(format!(
                    "Illegal suboption \"{suboption}\" (unknown -o option \"{name}\")"
                )));
            }
        }
        "no_maxconns_fast" => {
            // fogcached always refuses over-limit connections at once, as memcached's
            // default maxconns_fast does; the slow mode (stop accepting) is not offered.
            return Err(usage(
                "Illegal suboption \"no_maxconns_fast\": fogcached always rejects connections over -c at once",
            ));
        }
        _ => {
            if let Some((_, reason)) = SUBOPTIONS_WITHOUT_EFFECT
                .iter()
                .find(|(known, _)| *known == name)
            {
                config
                    .warnings
                    .push(format!("-o {name} has no effect: {reason}"));
                return Ok(());
            }
            if let Some((_, reason)) = SUBOPTIONS_REFUSED
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix))
            {
                return Err(usage(format!(
                    "Illegal suboption \"{suboption}\": fogcached does not offer {reason}"
                )));
            }
            return Err(usage(format!(
                "Illegal suboption \"{suboption}\" (unknown -o option \"{name}\")"
            )));
        }
    }
    Ok(())
}

/// `-o no_modern`: what memcached 1.6.18's `no_modern` turns off (memcached.c), each
/// as its own suboption would, so that a later suboption on the line overrides it as in
/// memcached (`no_modern,lru_crawler` runs the crawler). Two parts stay fogcached's and
/// are said at start-up: with a slow tier the LRU maintainers keep running (they are
/// what moves items between the tiers; `-o no_lru_maintainer` stops them anyway), and
/// memcached's other two changes have no counterpart (connections over `-c` are always
/// refused at once, keys keep fogcached's hash).
fn no_modern(config: &mut Config, slab_chunk_max_set: &mut bool) {
    let engine = &mut config.engine;
    if !*slab_chunk_max_set {
        engine.slab_chunk_max_bytes = SLAB_PAGE_SIZE_BYTES;
        // Checked against -I as an explicit one is (memcached refuses `-I 512k` here).
        *slab_chunk_max_set = true;
    }
    engine.slab_reassign = false;
    engine.slab_automove = 0;
    engine.lru_crawler = false;
    if engine.slow_tier.is_none() {
        engine.lru_maintainer = false;
    } else {
        config.warnings.push(
            "-o no_modern: the LRU maintainers keep running, because with a slow tier they \
             move items between DRAM and the slow tier (with --slow-size 0 they stop, as \
             memcached's maintainer does; -o no_lru_maintainer stops them anyway)"
                .to_owned(),
        );
    }
    config.warnings.push(
        "-o no_modern: connections over -c are still refused at once (memcached's \
         maxconns_fast) and keys keep fogcached's hash (memcached's jenkins)"
            .to_owned(),
    );
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
    config.tls.check().map_err(usage)?;
    // memcached binds `-Y` to the text protocol and `-S` to the binary one; a `-B` that
    // allows the other protocol is refused with its words.
    match (config.binding, config.auth_file.is_some(), config.sasl) {
        (crate::session::BindingProtocol::Ascii, _, true) => {
            return Err(usage(
                "You cannot allow the ASCII protocol while using SASL.",
            ))
        }
        (crate::session::BindingProtocol::Binary, true, _) => {
            return Err(usage(
                "You cannot allow the BINARY protocol while using ascii authentication tokens.",
            ))
        }
        _ => {}
    }
    // memcached's refusals, in its words: a datagram cannot carry an authentication.
    if config.udp_port.is_some() {
        if config.upstream.is_some() {
            return Err(usage(
                "-U with --upstream: the fog layer's requests wait for the upstream, which a \
                 datagram's request cannot (serve the edge over TCP)",
            ));
        }
        if config.auth_file.is_some() {
            return Err(usage(
                "Cannot use UDP with ascii authentication enabled (-U 0 to disable)",
            ));
        }
        if config.sasl {
            return Err(usage(
                "ERROR: Cannot enable UDP while using binary SASL authentication.",
            ));
        }
    }
    if config.tls.enabled && config.unix_socket.is_some() {
        return Err(usage(
            "TLS (-Z) needs TCP: connections to a unix socket (-s) are never encrypted",
        ));
    }
    let engine = &config.engine;
    // An item must fit in every tier that can hold it (new items go to DRAM, demoted
    // ones to the slow tier); a tier of size 0 holds nothing.
    if engine.memory_limit_bytes != 0
        && engine.item_size_max_bytes as u64 > engine.memory_limit_bytes / 2
    {
        return Err(usage(format!(
            "Cannot set item size limit (-I {}) higher than 1/2 of memory max (-m {} bytes)",
            engine.item_size_max_bytes, engine.memory_limit_bytes
        )));
    }
    if let Some(slow) = &engine.slow_tier {
        if engine.item_size_max_bytes > slow.size_bytes / 2 {
            return Err(usage(format!(
                "Cannot set item size limit (-I {}) higher than 1/2 of the slow tier (--slow-size {} bytes)",
                engine.item_size_max_bytes, slow.size_bytes
            )));
        }
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
    fn no_modern_turns_off_what_memcached_s_does_and_keeps_the_tiers_maintained() {
        let dram_only = parse_ok(&["--slow-size", "0", "-o", "no_modern"]).engine;
        assert!(!dram_only.lru_crawler && !dram_only.lru_maintainer);
        assert!(!dram_only.slab_reassign);
        assert_eq!(dram_only.slab_automove, 0);
        assert_eq!(dram_only.slab_chunk_max_bytes, SLAB_PAGE_SIZE_BYTES);
        // With a slow tier the maintainers move items between the tiers: they stay.
        let tiered = parse_ok(&["-o", "no_modern"]);
        assert!(!tiered.engine.lru_crawler && tiered.engine.lru_maintainer);
        assert!(tiered.warnings.iter().any(|w| w.contains("keep running")));
        // Later suboptions override it, earlier ones are overridden, as in memcached.
        let later = parse_ok(&[
            "--slow-size",
            "0",
            "-o",
            "no_modern,lru_crawler,slab_reassign",
        ]);
        assert!(later.engine.lru_crawler && later.engine.slab_reassign);
        let earlier = parse_ok(&["--slow-size", "0", "-o", "lru_crawler,no_modern"]);
        assert!(!earlier.engine.lru_crawler);
        let chunk = parse_ok(&["--slow-size", "0", "-o", "slab_chunk_max=64,no_modern"]);
        assert_eq!(chunk.engine.slab_chunk_max_bytes, 64 * 1024);
        // memcached refuses a page-sized chunk above -I.
        assert!(
            parse_usage(&["--slow-size", "0", "-I", "512k", "-o", "no_modern"])
                .contains("slab_chunk_max")
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
    fn tls_flag_and_suboptions() {
        let config = parse_ok(&[
            "-Z",
            "-o",
            "ssl_chain_cert=c.pem,ssl_key=k.pem,ssl_verify_mode=2,ssl_ca_cert=ca.pem",
        ]);
        assert!(config.tls.enabled);
        assert_eq!(config.tls.chain_cert.as_deref(), Some(Path::new("c.pem")));
        assert_eq!(config.tls.ca_cert.as_deref(), Some(Path::new("ca.pem")));
        assert!(config.tls_context.is_none(), "parsing reads no file");
        assert!(parse_usage(&["-Z"]).contains("ssl_chain_cert"));
        assert!(
            parse_usage(&["-Z", "-o", "ssl_chain_cert=c.pem", "-s", "/tmp/s"])
                .contains("unix socket")
        );
        assert!(parse_usage(&["-o", "ssl_min_version=1"]).contains("TLS 1.2"));
        assert!(parse_usage(&["-o", "ssl_nonsense=1"]).contains("Illegal suboption"));
        let without_z = parse_ok(&["-o", "ssl_chain_cert=c.pem"]);
        assert!(
            without_z.warnings.iter().any(|w| w.contains("without -Z")),
            "{:?}",
            without_z.warnings
        );
        let mut missing = parse_ok(&["-Z", "-o", "ssl_chain_cert=/nonexistent/fogcached.pem"]);
        let error = load_security(&mut missing).unwrap_err();
        assert!(
            error.starts_with("Error loading the certificate chain: /nonexistent/fogcached.pem"),
            "{error}"
        );
    }

    #[test]
    fn auth_flags_name_the_files_and_loading_checks_them() {
        let config = parse_ok(&["-Y", "users.txt", "-S"]);
        assert_eq!(config.auth_file.as_deref(), Some(Path::new("users.txt")));
        assert!(config.sasl);
        assert!(!config.auth.enabled(), "parsing reads no file");
        let mut sasl_only = parse_ok(&["-S"]);
        if std::env::var_os(SASL_PWDB_ENV).is_none() {
            let error = load_security(&mut sasl_only).unwrap_err();
            assert!(error.contains("-S needs a password file"), "{error}");
        }
        let mut missing = parse_ok(&["-Y", "/nonexistent/fogcached-users"]);
        let error = load_security(&mut missing).unwrap_err();
        assert!(error.contains("/nonexistent/fogcached-users"), "{error}");
        let mut none = parse_ok(&[]);
        assert_eq!(load_security(&mut none), Ok(()));
        assert!(!none.auth.enabled());
    }

    #[test]
    fn unknown_suboption_is_named() {
        let message = parse_usage(&["-o", "modern,frobnicate=3"]);
        assert!(message.contains("\"frobnicate=3\""), "{message}");
        assert!(message.contains("Illegal suboption"), "{message}");
    }

    #[test]
    fn harmless_memcached_suboptions_warn_and_harmful_ones_are_refused() {
        let config = parse_ok(&["-o", "modern,tail_repair_time=5,track_sizes"]);
        assert_eq!(config.warnings.len(), 3, "{:?}", config.warnings);
        assert!(
            config.warnings[1].contains("tail_repair_time has no effect"),
            "{:?}",
            config.warnings
        );
        assert!(parse_ok(&["-o", "hashpower=20"]).warnings.is_empty());
        for (suboption, names) in [
            ("ext_path=/tmp/x:1g", "--slow-size"),
            ("memory_file=/dev/shm/mc", "survives restarts"),
            ("proxy_config=/etc/p.lua", "proxy"),
        ] {
            let message = parse_usage(&["-o", suboption]);
            assert!(message.contains("Illegal suboption"), "{message}");
            assert!(message.contains(names), "{suboption}: {message}");
        }
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

    /// A unique scratch directory under the system temp dir, removed on drop.
    struct ScratchDir(PathBuf);

    impl ScratchDir {
        fn new(tag: &str) -> ScratchDir {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("fogcached-config-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            ScratchDir(dir)
        }
    }

    impl Drop for ScratchDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn slow_spec(config: &Config) -> &RegionSpec {
        match &config.engine.slow_tier {
            Some(spec) => spec,
            None => panic!("expected a slow tier"),
        }
    }

    #[test]
    fn default_is_dram_plus_a_pool_file_in_the_data_dir() {
        let config = parse_ok(&[]);
        assert_eq!(config.data_dir, PathBuf::from("fogcached-data"));
        assert_eq!(
            config.engine.slow_tier,
            Some(RegionSpec {
                size_bytes: 1 << 30,
                backing: RegionBacking::File {
                    path: PathBuf::from("fogcached-data/slow-tier.pool")
                },
                cost: CostModel::NONE,
            })
        );
        assert_eq!(config.engine.memory_limit_bytes, 64 << 20);
        assert_eq!(config.engine.policy, PlacementPolicy::Hotspot);
        assert!(config.engine.migration_enabled);
        // DRAM only: memcached's LRU unless a policy is named.
        assert_eq!(
            parse_ok(&["--slow-size", "0"]).engine.policy,
            PlacementPolicy::DualLru
        );
        assert_eq!(
            parse_ok(&["--slow-size", "0", "--policy", "hotspot"])
                .engine
                .policy,
            PlacementPolicy::Hotspot
        );
        assert_eq!(config.engine.dram_residency_max_s, 0);
        assert_eq!(config.engine.migration_threads, 1);
        assert_eq!(config.engine.move_queue_max, 1024);
    }

    #[test]
    fn dram_is_the_memory_limit() {
        assert_eq!(
            parse_ok(&["--dram", "128"]).engine.memory_limit_bytes,
            128 << 20
        );
        assert_eq!(
            parse_ok(&["--dram", "2g"]).engine.memory_limit_bytes,
            2 << 30
        );
        assert_eq!(
            parse_ok(&["--memory-limit", "8"]).engine.memory_limit_bytes,
            8 << 20
        );
        // 0 = slow tier only.
        let config = parse_ok(&["--dram", "0"]);
        assert_eq!(config.engine.memory_limit_bytes, 0);
        assert_eq!(slow_spec(&config).size_bytes, 1 << 30);
        assert_eq!(parse_ok(&["-m", "0"]).engine.memory_limit_bytes, 0);
        assert_eq!(
            parse_usage(&["--dram", "512k"]),
            "memory limit (-m/--dram) must be 0 (slow tier only) or at least 1 megabyte"
        );
        assert!(parse_usage(&["--dram", "lots"]).starts_with("invalid memory limit (-m) \"lots\""));
        assert!(parse_usage(&["--dram", "1", "-m", "2"]).contains("--memory-limit"));
    }

    #[test]
    fn slow_size_sets_the_slow_tier() {
        assert_eq!(
            slow_spec(&parse_ok(&["--slow-size", "256"])).size_bytes,
            256 << 20
        );
        assert_eq!(
            slow_spec(&parse_ok(&["--slow-size", "4g"])).size_bytes,
            4 << 30
        );
        // 0 = DRAM only.
        assert_eq!(parse_ok(&["--slow-size", "0"]).engine.slow_tier, None);
        assert_eq!(
            parse_usage(&["--slow-size", "100k"]),
            "slow tier size (--slow-size) must be 0 (DRAM only) or at least 1 megabyte"
        );
        assert_eq!(
            parse_usage(&["--slow-size", "big"]),
            "invalid slow tier size (--slow-size) \"big\": expected a number with an optional k/m/g suffix"
        );
        assert_eq!(
            parse_usage(&["--slow-size", "0", "--dram", "0"]),
            "-m/--dram and --slow-size are both 0: at least one tier needs memory"
        );
    }

    #[test]
    fn slow_path_maps_the_given_file_or_device() {
        let config = parse_ok(&["--slow-path", "/dev/dax0.0", "--slow-size", "2g"]);
        assert_eq!(
            slow_spec(&config).backing,
            RegionBacking::File {
                path: PathBuf::from("/dev/dax0.0")
            }
        );
        assert_eq!(slow_spec(&config).size_bytes, 2 << 30);
        assert!(parse_usage(&["--slow-path", ""])
            .contains("a value is required for '--slow-path <PATH>'"));
        assert_eq!(
            parse_usage(&["--slow-path", "/mnt/pmem/pool", "--slow-size", "0"]),
            "--slow-path and --slow-numa-node need a slow tier (--slow-size is 0)"
        );
        let message = parse_usage(&["--slow-path", "/x", "--slow-numa-node", "1"]);
        assert!(
            message.contains("'--slow-path <PATH>' cannot be used with '--slow-numa-node <N>'"),
            "{message}"
        );
    }

    #[test]
    fn slow_numa_node_binds_the_slow_tier() {
        let config = parse_ok(&["--slow-numa-node", "2"]);
        assert_eq!(slow_spec(&config).backing, RegionBacking::Numa { node: 2 });
        assert!(parse_usage(&["--slow-numa-node", "x"]).contains("--slow-numa-node <N>"));
        assert!(parse_usage(&["--slow-numa-node", "-1"]).contains("-1"));
        assert_eq!(
            parse_usage(&["--slow-numa-node", "0", "--slow-size", "0"]),
            "--slow-path and --slow-numa-node need a slow tier (--slow-size is 0)"
        );
    }

    #[test]
    fn slow_cost_takes_presets_and_explicit_figures() {
        assert_eq!(
            slow_spec(&parse_ok(&["--slow-cost", "optane"])).cost,
            CostModel::OPTANE
        );
        assert_eq!(
            slow_spec(&parse_ok(&["--slow-cost", "cxl"])).cost,
            CostModel::CXL
        );
        let hm = slow_spec(&parse_ok(&["--slow-cost", "hmcached"])).cost;
        assert_eq!(hm, CostModel::HMCACHED);
        assert_eq!(
            slow_spec(&parse_ok(&["--slow-cost", "none"])).cost,
            CostModel::NONE
        );
        let explicit = slow_spec(&parse_ok(&[
            "--slow-cost",
            "read_ns=200,write_ns=500,read_gbps=8,write_gbps=2",
        ]))
        .cost;
        assert_eq!(
            explicit,
            CostModel {
                read_latency_ns: 200,
                write_latency_ns: 500,
                read_line_ns: 0,
                write_line_ns: 0,
                read_bandwidth_gbps: 8.0,
                write_bandwidth_gbps: 2.0
            }
        );
        assert_eq!(
            parse_usage(&["--slow-cost", "fast"]),
            "invalid --slow-cost \"fast\": bad slow-tier cost: unknown cost preset \"fast\" (presets: none, optane, cxl, hmcached; or read_ns=..,write_ns=..,read_line_ns=..,write_line_ns=..,read_gbps=..,write_gbps=..)"
        );
        assert!(
            parse_usage(&["--slow-cost", "read_ns=x"]).contains("read_ns must be a whole number")
        );
        assert!(parse_usage(&["--slow-cost", "speed=1"]).contains("unknown cost key \"speed\""));
    }

    #[test]
    fn data_dir_holds_the_pool_file() {
        let config = parse_ok(&["--data-dir", "/var/lib/fogcached"]);
        assert_eq!(config.data_dir, PathBuf::from("/var/lib/fogcached"));
        assert_eq!(
            slow_spec(&config).backing,
            RegionBacking::File {
                path: PathBuf::from("/var/lib/fogcached/slow-tier.pool")
            }
        );
        assert!(
            parse_usage(&["--data-dir", ""]).contains("a value is required for '--data-dir <DIR>'")
        );
    }

    #[test]
    fn policy_names_the_implemented_policies_and_refuses_the_rest() {
        for (name, policy) in [
            ("dual-lru", PlacementPolicy::DualLru),
            ("hotspot", PlacementPolicy::Hotspot),
            ("hyperbolic", PlacementPolicy::Hyperbolic),
            ("uniform", PlacementPolicy::Uniform),
            ("two-level", PlacementPolicy::TwoLevel),
        ] {
            assert_eq!(parse_ok(&["--policy", name]).engine.policy, policy);
        }
        assert_eq!(
            parse_usage(&["--policy", "lfu"]),
            "unknown policy \"lfu\" (valid: dual-lru, hotspot, hyperbolic, uniform, two-level, random)"
        );
        assert_eq!(parse_ok(&["--mq-queues", "3"]).engine.mq_queues, 3);
        assert!(parse_ok(&[]).engine.benefit_reassign);
        assert!(!parse_ok(&["--no-benefit-reassign"]).engine.benefit_reassign);
        assert!(parse_usage(&["--mq-queues", "6"]).contains("mq queues must be between 1 and 5"));
        let tuned = parse_ok(&["--access-period", "50000", "--promotion-margin", "0"]).engine;
        assert_eq!(
            (tuned.access_period_requests, tuned.promotion_margin),
            (50000, 0)
        );
        assert!(parse_usage(&["--promotion-margin", "300"]).contains("--promotion-margin"));
    }

    #[test]
    fn migration_knobs() {
        let config = parse_ok(&[
            "--no-migration",
            "--dram-residency-max-s",
            "30",
            "--migration-threads",
            "4",
            "--move-queue-max",
            "64",
        ]);
        assert!(!config.engine.migration_enabled);
        assert_eq!(config.engine.dram_residency_max_s, 30);
        assert_eq!(config.engine.migration_threads, 4);
        assert_eq!(config.engine.move_queue_max, 64);
        assert!(parse_usage(&["--dram-residency-max-s", "-1"]).contains("-1"));
        assert!(parse_usage(&["--dram-residency-max-s", "soon"]).contains("--dram-residency-max-s"));
        assert_eq!(
            parse_usage(&["--migration-threads", "0"]),
            "--migration-threads must be between 1 and 64, got 0"
        );
        assert_eq!(
            parse_usage(&["--migration-threads", "65"]),
            "--migration-threads must be between 1 and 64, got 65"
        );
        assert_eq!(
            parse_usage(&["--move-queue-max", "0"]),
            "--move-queue-max must be between 1 and 1048576, got 0"
        );
        assert_eq!(
            parse_usage(&["--move-queue-max", "1048577"]),
            "--move-queue-max must be between 1 and 1048576, got 1048577"
        );
        assert!(parse_usage(&["--no-migration=yes"]).contains("--no-migration"));
    }

    #[test]
    fn item_size_must_fit_half_of_each_tier() {
        // Slow tier only: -I is checked against the slow tier, not the empty DRAM.
        assert_eq!(
            parse_ok(&["--dram", "0", "--slow-size", "2", "-I", "1m"])
                .engine
                .memory_limit_bytes,
            0
        );
        assert_eq!(
            parse_usage(&["--dram", "0", "--slow-size", "1", "-I", "1m"]),
            "Cannot set item size limit (-I 1048576) higher than 1/2 of the slow tier (--slow-size 1048576 bytes)"
        );
        assert!(parse_usage(&["--dram", "1", "-I", "1m"]).contains("1/2 of memory max"));
    }

    #[test]
    fn prepare_storage_creates_the_data_dir_only_when_the_pool_is_in_it() {
        let scratch = ScratchDir::new("prepare");
        let data_dir = scratch.0.join("nested").join("data");
        let dir_arg = data_dir.to_str().unwrap();
        let config = parse_ok(&["--data-dir", dir_arg]);
        assert!(!data_dir.exists(), "parsing must not touch the file system");
        prepare_storage(&config).unwrap();
        assert!(data_dir.is_dir());
        // Idempotent.
        prepare_storage(&config).unwrap();

        let elsewhere = scratch.0.join("other");
        let elsewhere_arg = elsewhere.to_str().unwrap();
        let pool = scratch.0.join("pool");
        let config = parse_ok(&[
            "--data-dir",
            elsewhere_arg,
            "--slow-path",
            pool.to_str().unwrap(),
        ]);
        prepare_storage(&config).unwrap();
        let config = parse_ok(&["--data-dir", elsewhere_arg, "--slow-size", "0"]);
        prepare_storage(&config).unwrap();
        assert!(!elsewhere.exists());

        // A data dir that cannot be created (a file is in the way).
        std::fs::write(scratch.0.join("file"), b"x").unwrap();
        let blocked = scratch.0.join("file").join("data");
        let config = parse_ok(&["--data-dir", blocked.to_str().unwrap()]);
        match prepare_storage(&config) {
            Err(StorageError::Os(message)) => assert!(
                message.starts_with(&format!(
                    "cannot create the data directory {}: ",
                    blocked.display()
                )),
                "{message}"
            ),
            other => panic!("expected an OS error, got {other:?}"),
        }
    }

    #[test]
    fn prepare_storage_refuses_a_missing_numa_node() {
        let nodes = tier::online_nodes();
        let absent = nodes.iter().max().map_or(0, |n| n + 1);
        let config = parse_ok(&["--slow-numa-node", &absent.to_string()]);
        match prepare_storage(&config) {
            Err(StorageError::Usage(message)) => assert!(
                message.starts_with(&format!("NUMA node {absent} does not exist (nodes: ")),
                "{message}"
            ),
            other => panic!("expected a usage error, got {other:?}"),
        }
        if nodes.contains(&0) {
            prepare_storage(&parse_ok(&["--slow-numa-node", "0"])).unwrap();
        } else {
            testkit::skip!(
                "prepare_storage_refuses_a_missing_numa_node",
                "sysfs lists no NUMA node 0 (nodes: {nodes:?}): accepting an existing node is untested"
            );
        }
    }

    #[test]
    fn help_lists_the_tier_flags() {
        let Err(CliExit::Info(text)) = parse(["fogcached", "--help"]) else {
            panic!("--help is information");
        };
        for flag in [
            "--dram",
            "--slow-size",
            "--slow-path",
            "--slow-numa-node",
            "--slow-cost",
            "--data-dir",
            "--policy",
            "--no-migration",
            "--dram-residency-max-s",
            "--migration-threads",
            "--move-queue-max",
        ] {
            assert!(text.contains(flag), "{flag} missing from --help");
        }
        assert!(text.contains("none (the default"), "{text}");
    }

    /// Every memcached flag fogcached takes is described in memcached 1.6.18's words
    /// (`memcached -h`), whatever fogcached adds after them.
    #[test]
    fn help_describes_memcached_s_flags_in_memcached_s_words() {
        let Err(CliExit::Info(text)) = parse(["fogcached", "--help"]) else {
            panic!("--help is information");
        };
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for (flag, words) in [
            ("-p, --port", "TCP port to listen on (default: 11211)"),
            ("-U, --udp-port", "UDP port to listen on (default: 0, off)"),
            ("-s, --unix-socket", "UNIX socket to listen on (disables network support)"),
            ("-a, --unix-mask", "access mask for UNIX socket, in octal (default: 700)"),
            ("-A, --enable-shutdown", "enable ascii \"shutdown\" command"),
            ("-l, --listen", "interface to listen on"),
            ("-d, --daemon", "run as a daemon"),
            ("-r, --enable-coredumps", "maximize core file limit"),
            ("-u, --user", "assume identity of <username> (only when run as root)"),
            ("-m, --memory-limit", "item memory in megabytes (default: 64)"),
            ("-M, --disable-evictions", "return error on memory exhausted instead of evicting"),
            ("-c, --conn-limit", "max simultaneous connections (default: 1024)"),
            ("-k, --lock-memory", "lock down all paged memory"),
            ("-v, --verbose", "verbose (print errors/warnings while in event loop)"),
            ("-P, --pidfile", "save PID in <file>"),
            ("-f, --slab-growth-factor", "chunk size growth factor (default: 1.25)"),
            ("-n, --slab-min-size", "min space used for key+value+flags (default: 48)"),
            ("-L, --enable-largepages", "try to use large memory pages (if available)"),
            ("-D <char>", "Use <char> as the delimiter between key prefixes and IDs."),
            ("-t, --threads", "number of threads to use (default: 4)"),
            ("-R, --max-reqs-per-event", "maximum number of requests per event, limits the requests processed per connection to prevent starvation (default: 20)"),
            ("-C, --disable-cas", "disable use of CAS"),
            ("-I, --max-item-size", "adjusts max item size (default: 1m, min: 1k, max: 1024m)"),
            ("-X, --disable-dumping", "disable stats cachedump and lru_crawler metadump"),
            ("-W, --disable-watch", "disable watch commands (live logging)"),
            ("-o, --extended", "comma separated list of extended options"),
            ("-S, --enable-sasl", "turn on Sasl authentication"),
            ("-Y, --auth-file", "enable ASCII protocol authentication. format: user:pass"),
            ("-Z, --enable-ssl", "enable TLS/SSL"),
        ] {
            assert!(text.contains(flag), "{flag} missing from --help");
            assert!(text.contains(words), "{flag}: {words:?} missing from --help:\n{text}");
        }
        for suboption in ["hashpower", "hot_lru_pct", "slab_chunk_max", "idle_timeout"] {
            assert!(
                text.contains(&format!("- {suboption}")),
                "-o {suboption} not listed"
            );
        }
        assert!(text.contains("--metrics-listen"));
        assert!(text.contains("--dram-max"));
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

    /// Every `-o` suboption memcached 1.6.18 accepts (its binary's list) is implemented,
    /// accepted with a warning that gives the reason, or refused with the reason: none is
    /// "unknown".
    #[test]
    fn every_memcached_suboption_is_implemented_warned_or_refused() {
        for (suboption, outcome) in MEMCACHED_SUBOPTIONS {
            let line = ["-o", suboption];
            let mut full = vec!["fogcached"];
            full.extend_from_slice(&line);
            match (parse(full), outcome) {
                (Ok(config), Outcome::Implemented) => assert!(
                    config.warnings.is_empty()
                        || *suboption == "track_sizes"
                        || *suboption == "no_modern",
                    "{suboption}: {:?}",
                    config.warnings
                ),
                (Ok(config), Outcome::Warned) => {
                    let name = suboption.split('=').next().unwrap_or("");
                    assert!(
                        config
                            .warnings
                            .iter()
                            .any(|w| w.starts_with(&format!("-o {name} has no effect: "))),
                        "{suboption}: {:?}",
                        config.warnings
                    );
                }
                (Err(CliExit::Usage(message)), Outcome::Refused) => {
                    assert!(
                        message.contains("fogcached does not offer")
                            || message.contains("fogcached always"),
                        "{suboption}: {message}"
                    );
                }
                (other, _) => panic!("{suboption}: expected {outcome:?}, got {other:?}"),
            }
        }
    }

    #[derive(Debug)]
    enum Outcome {
        Implemented,
        Warned,
        Refused,
    }

    /// memcached 1.6.18's `-o` names (every name its binary accepts; `ssl_*` need `-Z`
    /// to matter and are checked in `tls_flag_and_suboptions`), each with a value.
    const MEMCACHED_SUBOPTIONS: &[(&str, Outcome)] = &[
        ("maxconns_fast", Outcome::Warned),
        ("no_maxconns_fast", Outcome::Refused),
        ("hashpower=20", Outcome::Implemented),
        ("no_hashexpand", Outcome::Warned),
        ("slab_reassign", Outcome::Implemented),
        ("no_slab_reassign", Outcome::Implemented),
        ("slab_automove=2", Outcome::Implemented),
        ("no_slab_automove", Outcome::Implemented),
        ("slab_automove_ratio=0.5", Outcome::Warned),
        ("slab_automove_window=10", Outcome::Warned),
        ("slab_automove_freeratio=0.02", Outcome::Warned),
        ("tail_repair_time=10", Outcome::Warned),
        ("hash_algorithm=murmur3", Outcome::Warned),
        ("lru_crawler", Outcome::Implemented),
        ("no_lru_crawler", Outcome::Implemented),
        ("lru_crawler_sleep=50", Outcome::Implemented),
        ("lru_crawler_tocrawl=100", Outcome::Implemented),
        ("lru_maintainer", Outcome::Implemented),
        ("no_lru_maintainer", Outcome::Implemented),
        ("hot_lru_pct=10", Outcome::Implemented),
        ("warm_lru_pct=30", Outcome::Implemented),
        ("hot_max_factor=0.3", Outcome::Implemented),
        ("warm_max_factor=3", Outcome::Implemented),
        ("temporary_ttl=30", Outcome::Warned),
        ("idle_timeout=60", Outcome::Implemented),
        ("watcher_logbuf_size=128", Outcome::Warned),
        ("worker_logbuf_size=32", Outcome::Warned),
        ("slab_sizes=100-200-300", Outcome::Implemented),
        ("slab_chunk_max=256", Outcome::Implemented),
        ("track_sizes", Outcome::Implemented),
        ("no_inline_ascii_resp", Outcome::Warned),
        ("inline_ascii_resp", Outcome::Warned),
        ("modern", Outcome::Warned),
        ("no_modern", Outcome::Implemented),
        ("no_chunked_items", Outcome::Warned),
        ("drop_privileges", Outcome::Warned),
        ("no_drop_privileges", Outcome::Warned),
        ("resp_obj_mem_limit=10", Outcome::Warned),
        ("read_buf_mem_limit=10", Outcome::Warned),
        ("sock_cookie_id=7", Outcome::Implemented),
        ("ext_path=/mnt/d1/extstore:1G", Outcome::Refused),
        ("ext_page_size=64", Outcome::Refused),
        ("ext_wbuf_size=4", Outcome::Refused),
        ("ext_threads=1", Outcome::Refused),
        ("ext_io_depth=1", Outcome::Refused),
        ("ext_item_size=512", Outcome::Refused),
        ("ext_item_age=10", Outcome::Refused),
        ("ext_low_ttl=10", Outcome::Refused),
        ("ext_drop_unread", Outcome::Refused),
        ("ext_recache_rate=2000", Outcome::Refused),
        ("ext_compact_under=10", Outcome::Refused),
        ("ext_drop_under=10", Outcome::Refused),
        ("ext_max_frag=0.8", Outcome::Refused),
        ("ext_max_sleep=1000", Outcome::Refused),
    ];

    /// The suboptions fogcached now implements map onto its settings, with memcached's
    /// checks.
    #[test]
    fn slab_sizes_crawler_pace_sizes_and_socket_mark() {
        let config = parse_ok(&[
            "-o",
            "slab_sizes=100-200-300,no_slab_automove,lru_crawler_sleep=50",
            "-o",
            "lru_crawler_tocrawl=7,sock_cookie_id=9",
        ]);
        assert_eq!(config.engine.slab_sizes, Some(vec![100, 200, 300]));
        assert_eq!(config.engine.slab_automove, 0);
        assert_eq!(config.engine.lru_crawler_sleep_us, 50);
        assert_eq!(config.engine.lru_crawler_tocrawl, 7);
        assert_eq!(config.sock_cookie_id, Some(9));
        assert!(parse_ok(&["-o", "track_sizes"]).engine.track_sizes);
        assert!(!parse_ok(&[]).engine.track_sizes);
        assert_eq!(
            parse_usage(&["-o", "slab_sizes=10-200"]),
            "slab size 10 is out of valid range"
        );
        assert_eq!(
            parse_usage(&["-o", "slab_sizes=200-100"]),
            "slab size 100 cannot be lower than or equal to a previous class size"
        );
        assert!(parse_usage(&["-o", "slab_sizes=100-x"]).contains("slab_sizes"));
        // memcached reads slab_sizes after every option: slab_chunk_max bounds them
        // wherever it is on the line.
        assert_eq!(
            parse_usage(&["-o", "slab_sizes=100-200000,slab_chunk_max=128"]),
            "slab size 200000 is out of valid range"
        );
        for bad in ["lru_crawler_sleep=1000001", "lru_crawler_sleep=-1"] {
            assert_eq!(
                parse_usage(&["-o", bad]),
                "LRU crawler sleep must be between 0 and 1 second"
            );
        }
        assert_eq!(
            parse_usage(&["-o", "lru_crawler_tocrawl=x"]),
            "lru_crawler_tocrawl takes a numeric 32bit value"
        );
    }

    /// `--help` describes memcached's flags that were missing, in memcached's words.
    #[test]
    fn help_describes_the_flags_memcached_has_in_its_words() {
        let Err(CliExit::Info(text)) = parse(["fogcached", "--help"]) else {
            panic!("--help is information");
        };
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for (flag, words) in [
            (
                "-b, --listen-backlog",
                "set the backlog queue limit (default: 1024)",
            ),
            (
                "-B, --protocol",
                "protocol - one of ascii, binary, or auto (default: auto-negotiate)",
            ),
            ("-F, --disable-flush-all", "disable flush_all command"),
            ("-e, --memory-file", "mmap a file for item memory"),
            ("-N, --napi_ids", "number of napi ids"),
            ("-i, --license", "print memcached and libevent license"),
            (
                "-v, --verbose",
                "very verbose (also print client commands/responses",
            ),
        ] {
            assert!(text.contains(flag), "{flag} missing from --help");
            assert!(
                text.contains(words),
                "{flag}: {words:?} missing from --help:\n{text}"
            );
        }
        for suboption in [
            "slab_sizes",
            "no_slab_automove",
            "sock_cookie_id",
            "track_sizes",
        ] {
            assert!(
                text.contains(&format!("- {suboption}")),
                "-o {suboption} not listed"
            );
        }
    }

    #[test]
    fn unknown_flag_is_a_usage_error() {
        let message = parse_usage(&["-Q"]);
        assert!(message.contains("-Q"), "{message}");
    }

    #[test]
    fn upstream_flags_make_the_fog_layer_and_are_checked() {
        assert_eq!(parse_ok(&[]).upstream, None, "off by default");
        let config = parse_ok(&[
            "--upstream",
            "cloud-a:11211, cloud-b:11311",
            "--upstream",
            "127.0.0.1:9",
            "--upstream-writes",
            "invalidate",
            "--upstream-ttl-max",
            "0",
        ]);
        let upstream = config.upstream.expect("on");
        assert_eq!(
            upstream.servers,
            ["cloud-a:11211", "cloud-b:11311", "127.0.0.1:9"]
        );
        assert_eq!(upstream.writes, crate::upstream::WriteMode::Invalidate);
        assert_eq!(upstream.ttl_max_s, 0);
        assert_eq!(upstream.timeout_ms, crate::upstream::TIMEOUT_DEFAULT_MS);
        for bad in ["cloud", "cloud:", ":11211", "cloud:0", "cloud:70000"] {
            let message = parse_usage(&["--upstream", bad]);
            assert!(message.contains("host:port"), "{bad}: {message}");
        }
        let message = parse_usage(&["--upstream", "a:1", "--upstream-writes", "back"]);
        assert!(message.contains("through or invalidate"), "{message}");
        let message = parse_usage(&["--upstream", "a:1", "--upstream-conns", "0"]);
        assert!(message.contains("--upstream-conns"), "{message}");
        // One upstream thread per two worker threads unless told.
        assert_eq!(upstream.threads, 2, "-t 4 by default");
        let threads = |args: &[&str]| {
            let mut all = vec!["--upstream", "a:1"];
            all.extend_from_slice(args);
            parse_ok(&all).upstream.expect("on").threads
        };
        assert_eq!(threads(&["-t", "1"]), 1);
        assert_eq!(threads(&["-t", "2"]), 1);
        assert_eq!(threads(&["-t", "3"]), 2);
        assert_eq!(threads(&["-t", "2", "--upstream-threads", "4"]), 4);
        let message = parse_usage(&["--upstream", "a:1", "--upstream-threads", "65"]);
        assert!(message.contains("--upstream-threads"), "{message}");
    }
}
