//! The Prometheus endpoint (`--metrics-listen <addr:port>`, off by default): a small
//! HTTP/1.1 server on its own thread that answers `GET /metrics` with the Prometheus
//! text format (version 0.0.4).
//!
//! What it exposes:
//! - every metric prometheus/memcached_exporter derives from `stats`, `stats settings`,
//!   `stats items` and `stats slabs`, under the exporter's names and labels
//!   (`memcached_commands_total{command,status}`, `memcached_current_items`,
//!   `memcached_slab_current_items{slab}`, ...), so its dashboards and alerts work
//!   unchanged (DRAM classes are the exporter's `slab` labels);
//! - fogcached's own: per-tier gauges and counters (`fogcached_tier_items{tier}`,
//!   `..._bytes`, `..._hits_total`, slow-tier lines read and written, ...), migrations
//!   (`fogcached_promotions_total`, `fogcached_demotions_total`, Move queue lengths)
//!   and a service-time histogram per command kind
//!   (`fogcached_command_duration_seconds{command}`, see `latency.rs`);
//! - with `--upstream`, the fog layer's: `fogcached_upstream_*` totals (requests, hits,
//!   misses, errors, timeouts, in flight, ...) with a latency histogram
//!   (`fogcached_upstream_request_duration_seconds`), and per upstream server
//!   (`fogcached_upstream_server_*{upstream="host:port"}`) the same with its breaker
//!   state and its own latency histogram.
//!
//! Types: the exporter declares a few counters whose names lack `_total`, which
//! Prometheus' linter (`promtool check metrics`) rejects; fogcached keeps the names and
//! declares `memcached_uptime_seconds` and `memcached_slab_items_evicted_time_seconds` as
//! gauges (which they are) and the per-class `memcached_slab_items_moves_*` as untyped.
//!
//! The server is deliberately small: one connection at a time, a request head of at
//! most [`REQUEST_HEAD_MAX_BYTES`] read within [`CLIENT_TIMEOUT`], `Connection: close`.
//! A scrape builds its reply from the same code paths as `stats`, so a scrape costs what
//! `stats`, `stats items` and `stats slabs` cost together.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::latency::{self, CommandKind, BUCKET_BOUNDS_NS};
use crate::runtime::Shared;
use crate::session::Session;
use crate::stats_reply::{self, StatsGroup};
use crate::upstream::counters::{LatencyHistogram, LATENCY_BOUNDS_US};
use crate::upstream::Upstream;

/// The longest request head accepted (request line and headers).
pub const REQUEST_HEAD_MAX_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request and read the reply.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the accept loop checks for a shutdown while idle.
const ACCEPT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The running endpoint.
pub struct MetricsServer {
    local_addr: SocketAddr,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl MetricsServer {
    /// Binds `addr` (at start-up, so that a bad address fails the start; port 0 takes
    /// one the kernel picks, which `stats settings` then names).
    pub fn bind(addr: &str) -> anyhow::Result<TcpListener> {
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("--metrics-listen {addr}: cannot listen"))?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    }

    /// Starts the serving thread on a listener from [`MetricsServer::bind`]; it ends once
    /// the server is stopping or gone.
    pub fn start(listener: TcpListener, shared: Weak<Shared>) -> anyhow::Result<MetricsServer> {
        let local_addr = listener.local_addr()?;
        latency::enable();
        let thread = std::thread::Builder::new()
            .name("fc-metrics".to_owned())
            .spawn(move || serve(&listener, &shared))
            .context("starting the metrics thread")?;
        Ok(MetricsServer {
            local_addr,
            thread: parking_lot::Mutex::new(Some(thread)),
        })
    }

    /// The bound address (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits for the thread after a shutdown was requested.
    pub fn join(&self) {
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

fn serve(listener: &TcpListener, shared: &Weak<Shared>) {
    loop {
        engine::fault::panic_point();
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.settings.shutdown_requested.load(Ordering::Acquire) {
            return;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, &shared) {
                    if shared.verbosity() > 0 {
                        eprintln!("fogcached: metrics request failed: {e}");
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                drop(shared);
                std::thread::sleep(ACCEPT_POLL_INTERVAL);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors, typically: wait, as the client listener does.
                if shared.verbosity() > 0 {
                    eprintln!("fogcached: metrics accept failed: {e}");
                }
                drop(shared);
                std::thread::sleep(ACCEPT_POLL_INTERVAL);
            }
        }
    }
}

/// Reads one request head and answers it.
fn answer(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() > REQUEST_HEAD_MAX_BYTES || Instant::now() > deadline {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request head too large\n",
            );
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let request_line = head.split(|&b| b == b'\n').next().unwrap_or(b"");
    let mut parts = request_line.split(|&b| b == b' ');
    let (method, target) = (parts.next().unwrap_or(b""), parts.next().unwrap_or(b""));
    let path = target.split(|&b| b == b'?').next().unwrap_or(b"");
    match (method, path) {
        (b"GET", b"/metrics") => {
            let body = render(shared);
            respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                body.as_bytes(),
            )
        }
        (b"GET", b"/") => respond(
            &mut stream,
            "200 OK",
            "text/html; charset=utf-8",
            b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n",
        ),
        (b"GET", _) => respond(&mut stream, "404 Not Found", "text/plain", b"not found\n"),
        _ => respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"only GET\n",
        ),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

/// The stats groups a scrape reads, by name.
struct Stats {
    general: BTreeMap<String, String>,
    settings: BTreeMap<String, String>,
    /// `stats items`, DRAM classes: class -> field -> value.
    items: BTreeMap<u32, BTreeMap<String, String>>,
    /// `stats slabs`, DRAM classes.
    slabs: BTreeMap<u32, BTreeMap<String, String>>,
    /// `stats slabs` totals (`total_malloced`, ...).
    slab_totals: BTreeMap<String, String>,
}

fn gather(shared: &Shared) -> Stats {
    let mut scratch = Vec::new();
    let session = Session {
        engine: &shared.engine,
        settings: &shared.settings,
        stats: &shared.stats,
        out: &mut scratch,
        resume_keys: 0,
        out_high_water_bytes: usize::MAX,
        client_fd: -1,
        upstream_reply: None,
    };
    let flat = |group| {
        let mut map = BTreeMap::new();
        stats_reply::collect(&session, group, &mut |name, value| {
            map.insert(name.to_owned(), value.to_owned());
        });
        map
    };
    let general = flat(StatsGroup::General);
    let settings = flat(StatsGroup::Settings);
    let mut items: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for (name, value) in flat(StatsGroup::Items) {
        // `items:<class>:<field>`; the slow tier's `slow:items:...` are fogcached's own.
        let Some(rest) = name.strip_prefix("items:") else {
            continue;
        };
        if let Some((class, field)) = rest.split_once(':') {
            if let Ok(class) = class.parse() {
                items
                    .entry(class)
                    .or_default()
                    .insert(field.to_owned(), value);
            }
        }
    }
    let mut slabs: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    let mut slab_totals = BTreeMap::new();
    for (name, value) in flat(StatsGroup::Slabs) {
        match name.split_once(':') {
            Some((class, field)) => {
                if let Ok(class) = class.parse() {
                    slabs
                        .entry(class)
                        .or_default()
                        .insert(field.to_owned(), value);
                }
            }
            None => {
                slab_totals.insert(name, value);
            }
        }
    }
    Stats {
        general,
        settings,
        items,
        slabs,
        slab_totals,
    }
}

/// The Prometheus text of one scrape.
pub fn render(shared: &Shared) -> String {
    let stats = gather(shared);
    let mut out = Exposition::default();
    memcached_metrics(&stats, &mut out);
    slab_metrics(&stats, &mut out);
    fogcached_metrics(&stats, &mut out);
    latency_metrics(&mut out);
    if let Some(upstream) = &shared.settings.upstream {
        upstream_metrics(upstream, &mut out);
    }
    out.text
}

/// A Prometheus text-format writer: one family (HELP, TYPE, samples) at a time.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, label_value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let escaped = label_value
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.text, "{label}=\"{escaped}\"");
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    /// A family with one unlabelled sample, if `value` is there.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: Option<f64>) {
        if let Some(value) = value {
            self.family(name, kind, help);
            self.sample(name, &[], value);
        }
    }
}

fn number(map: &BTreeMap<String, String>, key: &str) -> Option<f64> {
    map.get(key)?.parse().ok()
}

/// `yes`/`no` as 1/0.
fn flag(map: &BTreeMap<String, String>, key: &str) -> Option<f64> {
    match map.get(key)?.as_str() {
        "yes" => Some(1.0),
        "no" => Some(0.0),
        _ => None,
    }
}

/// The memcached_exporter metrics from `stats` and `stats settings`.
fn memcached_metrics(stats: &Stats, out: &mut Exposition) {
    let s = &stats.general;
    out.single(
        "memcached_up",
        "gauge",
        "Could the memcached server be reached.",
        Some(1.0),
    );
    if let Some(version) = s.get("version") {
        out.family(
            "memcached_version",
            "gauge",
            "The version of this memcached server.",
        );
        out.sample("memcached_version", &[("version", version)], 1.0);
    }
    const SIMPLE: &[(&str, &str, &str, &str)] = &[
        ("memcached_uptime_seconds", "gauge", "uptime", "Number of seconds since the server started."),
        ("memcached_time_seconds", "gauge", "time", "current UNIX time according to the server."),
        ("memcached_read_bytes_total", "counter", "bytes_read", "Total number of bytes read by this server from network."),
        ("memcached_written_bytes_total", "counter", "bytes_written", "Total number of bytes sent by this server to network."),
        ("memcached_current_connections", "gauge", "curr_connections", "Current number of open connections."),
        ("memcached_connections_total", "counter", "total_connections", "Total number of connections opened since the server started running."),
        ("memcached_connections_rejected_total", "counter", "rejected_connections", "Total number of connections rejected due to hitting the memcached's -c limit in maxconns_fast mode."),
        ("memcached_connections_yielded_total", "counter", "conn_yields", "Total number of connections yielded running due to hitting the memcached's -R limit."),
        ("memcached_connections_listener_disabled_total", "counter", "listen_disabled_num", "Number of times that memcached has hit its connections limit and disabled its listener."),
        ("memcached_current_bytes", "gauge", "bytes", "Current number of bytes used to store items."),
        ("memcached_limit_bytes", "gauge", "limit_maxbytes", "Number of bytes this server is allowed to use for storage."),
        ("memcached_current_items", "gauge", "curr_items", "Current number of items stored by this instance."),
        ("memcached_items_total", "counter", "total_items", "Total number of items stored during the life of this instance."),
        ("memcached_items_evicted_total", "counter", "evictions", "Total number of valid items removed from cache to free memory for new items."),
        ("memcached_items_reclaimed_total", "counter", "reclaimed", "Total number of times an entry was stored using memory from an expired entry."),
        ("memcached_item_too_large_total", "counter", "store_too_large", "The number of times an item exceeded the max-item-size when being stored."),
        ("memcached_item_no_memory_total", "counter", "store_no_memory", "The number of times an item could not be stored due to no more memory."),
        ("memcached_lru_crawler_starts_total", "counter", "lru_crawler_starts", "Times an LRU crawler was started."),
        ("memcached_direct_reclaims_total", "counter", "direct_reclaims", "Times worker threads had to directly reclaim or evict items."),
        ("memcached_lru_crawler_items_checked_total", "counter", "crawler_items_checked", "Total items examined by LRU Crawler."),
        ("memcached_lru_crawler_reclaimed_total", "counter", "crawler_reclaimed", "Total items freed by LRU Crawler."),
        ("memcached_lru_crawler_moves_to_cold_total", "counter", "moves_to_cold", "Total number of items moved from HOT/WARM to COLD LRU's."),
        ("memcached_lru_crawler_moves_to_warm_total", "counter", "moves_to_warm", "Total number of items moved from COLD to WARM LRU."),
        ("memcached_lru_crawler_moves_within_lru_total", "counter", "moves_within_lru", "Total number of items reshuffled within HOT or WARM LRU's."),
        ("memcached_accepting_connections", "gauge", "accepting_conns", "The Memcached server is currently accepting new connections."),
    ];
    for (name, kind, key, help) in SIMPLE {
        out.single(name, kind, help, number(s, key));
    }
    let timeval = |key: &str| -> Option<f64> { s.get(key)?.parse().ok() };
    out.single(
        "memcached_process_user_cpu_seconds_total",
        "counter",
        "Accumulated user time for this process.",
        timeval("rusage_user"),
    );
    out.single(
        "memcached_process_system_cpu_seconds_total",
        "counter",
        "Accumulated system time for this process.",
        timeval("rusage_system"),
    );
    out.single(
        "memcached_max_connections",
        "gauge",
        "Maximum number of clients allowed.",
        number(&stats.settings, "maxconns"),
    );
    out.single(
        "memcached_malloced_bytes",
        "gauge",
        "Number of bytes of memory allocated to slab pages.",
        number(&stats.slab_totals, "total_malloced"),
    );

    out.family(
        "memcached_commands_total",
        "counter",
        "Total number of all requests broken down by command (get, set, etc.) and status.",
    );
    for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
        for (suffix, status) in [("_hits", "hit"), ("_misses", "miss")] {
            if let Some(v) = number(s, &format!("{op}{suffix}")) {
                out.sample(
                    "memcached_commands_total",
                    &[("command", op), ("status", status)],
                    v,
                );
            }
        }
    }
    if let Some(v) = number(s, "cas_badval") {
        out.sample(
            "memcached_commands_total",
            &[("command", "cas"), ("status", "badval")],
            v,
        );
    }
    if let Some(v) = number(s, "cmd_flush") {
        out.sample(
            "memcached_commands_total",
            &[("command", "flush"), ("status", "hit")],
            v,
        );
    }
    // memcached counts `cas` again in `cmd_set`; the exporter takes it out.
    if let (Some(set), Some(a), Some(b), Some(c)) = (
        number(s, "cmd_set"),
        number(s, "cas_misses"),
        number(s, "cas_hits"),
        number(s, "cas_badval"),
    ) {
        out.sample(
            "memcached_commands_total",
            &[("command", "set"), ("status", "hit")],
            set - a - b - c,
        );
    }

    // The exporter reads the crawler's settings only when the crawler is on.
    let settings = &stats.settings;
    if settings.get("lru_crawler").map(String::as_str) == Some("yes") {
        out.single(
            "memcached_lru_crawler_enabled",
            "gauge",
            "Whether the LRU crawler is enabled.",
            flag(settings, "lru_crawler"),
        );
        out.single(
            "memcached_lru_crawler_sleep",
            "gauge",
            "Microseconds to sleep between LRU crawls.",
            number(settings, "lru_crawler_sleep"),
        );
        out.single(
            "memcached_lru_crawler_to_crawl",
            "gauge",
            "Max items to crawl per slab per run.",
            number(settings, "lru_crawler_tocrawl"),
        );
        out.single(
            "memcached_lru_crawler_maintainer_thread",
            "gauge",
            "Split LRU mode and background threads.",
            flag(settings, "lru_maintainer_thread"),
        );
        out.single(
            "memcached_lru_crawler_hot_percent",
            "gauge",
            "Percent of slab memory reserved for HOT LRU.",
            number(settings, "hot_lru_pct"),
        );
        out.single(
            "memcached_lru_crawler_warm_percent",
            "gauge",
            "Percent of slab memory reserved for WARM LRU.",
            number(settings, "warm_lru_pct"),
        );
        out.single(
            "memcached_lru_crawler_hot_max_factor",
            "gauge",
            "Set idle age of HOT LRU to COLD age * this",
            number(settings, "hot_max_factor"),
        );
        out.single(
            "memcached_lru_crawler_warm_max_factor",
            "gauge",
            "Set idle age of WARM LRU to COLD age * this",
            number(settings, "warm_max_factor"),
        );
    }
}

/// The exporter's per-class metrics (`slab` label: a DRAM slab class).
fn slab_metrics(stats: &Stats, out: &mut Exposition) {
    // (metric, type, `stats items` field, help)
    const ITEMS: &[(&str, &str, &str, &str)] = &[
        ("memcached_slab_current_items", "gauge", "number", "Number of items currently stored in this slab class."),
        ("memcached_slab_items_age_seconds", "gauge", "age", "Number of seconds the oldest item has been in the slab class."),
        ("memcached_slab_items_crawler_reclaimed_total", "counter", "crawler_reclaimed", "Number of items freed by the LRU Crawler."),
        ("memcached_slab_items_evicted_total", "counter", "evicted", "Total number of times an item had to be evicted from the LRU before it expired."),
        ("memcached_slab_items_evicted_nonzero_total", "counter", "evicted_nonzero", "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired."),
        ("memcached_slab_items_evicted_time_seconds", "gauge", "evicted_time", "Seconds since the last access for the most recent item evicted from this class."),
        ("memcached_slab_items_evicted_unfetched_total", "counter", "evicted_unfetched", "Total nmber of items evicted and never fetched."),
        ("memcached_slab_items_expired_unfetched_total", "counter", "expired_unfetched", "Total number of valid items evicted from the LRU which were never touched after being set."),
        ("memcached_slab_items_outofmemory_total", "counter", "outofmemory", "Total number of items for this slab class that have triggered an out of memory error."),
        ("memcached_slab_items_reclaimed_total", "counter", "reclaimed", "Total number of items reclaimed."),
        ("memcached_slab_items_tailrepairs_total", "counter", "tailrepairs", "Total number of times the entries for a particular ID need repairing."),
        ("memcached_slab_items_moves_to_cold", "untyped", "moves_to_cold", "Number of items moved from HOT or WARM into COLD."),
        ("memcached_slab_items_moves_to_warm", "untyped", "moves_to_warm", "Number of items moves from COLD into WARM."),
        ("memcached_slab_items_moves_within_lru", "untyped", "moves_within_lru", "Number of times active items were bumped within HOT or WARM."),
        ("memcached_slab_hot_items", "gauge", "number_hot", "Number of items presently stored in the HOT LRU."),
        ("memcached_slab_warm_items", "gauge", "number_warm", "Number of items presently stored in the WARM LRU."),
        ("memcached_slab_cold_items", "gauge", "number_cold", "Number of items presently stored in the COLD LRU."),
        ("memcached_slab_temporary_items", "gauge", "number_temp", "Number of items presently stored in the TEMPORARY LRU."),
        ("memcached_slab_hot_age_seconds", "gauge", "age_hot", "Age of the oldest item in HOT LRU."),
        ("memcached_slab_warm_age_seconds", "gauge", "age_warm", "Age of the oldest item in HOT LRU."),
    ];
    for (name, kind, field, help) in ITEMS {
        per_class(out, &stats.items, name, kind, help, |fields| {
            number(fields, field)
        });
    }
    out.family(
        "memcached_slab_lru_hits_total",
        "counter",
        "Number of get_hits to the LRU.",
    );
    for (class, fields) in &stats.items {
        let slab = class.to_string();
        for (field, lru) in [
            ("hits_to_hot", "hot"),
            ("hits_to_warm", "warm"),
            ("hits_to_cold", "cold"),
            ("hits_to_temp", "temporary"),
        ] {
            if let Some(v) = number(fields, field) {
                out.sample(
                    "memcached_slab_lru_hits_total",
                    &[("slab", &slab), ("lru", lru)],
                    v,
                );
            }
        }
    }
    // (metric, `stats slabs` field, help): gauges.
    const SLABS: &[(&str, &str, &str)] = &[
        (
            "memcached_slab_chunk_size_bytes",
            "chunk_size",
            "Number of bytes allocated to each chunk within this slab class.",
        ),
        (
            "memcached_slab_chunks_per_page",
            "chunks_per_page",
            "Number of chunks within a single page for this slab class.",
        ),
        (
            "memcached_slab_current_pages",
            "total_pages",
            "Number of pages allocated to this slab class.",
        ),
        (
            "memcached_slab_current_chunks",
            "total_chunks",
            "Number of chunks allocated to this slab class.",
        ),
        (
            "memcached_slab_chunks_used",
            "used_chunks",
            "Number of chunks allocated to an item.",
        ),
        (
            "memcached_slab_chunks_free",
            "free_chunks",
            "Number of chunks not yet allocated items.",
        ),
        (
            "memcached_slab_chunks_free_end",
            "free_chunks_end",
            "Number of free chunks at the end of the last allocated page.",
        ),
        (
            "memcached_slab_mem_requested_bytes",
            "mem_requested",
            "Number of bytes of memory actual items take up within a slab.",
        ),
    ];
    for (name, field, help) in SLABS {
        per_class(out, &stats.slabs, name, "gauge", help, |fields| {
            number(fields, field)
        });
    }
    out.family(
        "memcached_slab_commands_total",
        "counter",
        "Total number of all requests broken down by command (get, set, etc.) and status per slab.",
    );
    for (class, fields) in &stats.slabs {
        let slab = class.to_string();
        for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
            if let Some(v) = number(fields, &format!("{op}_hits")) {
                out.sample(
                    "memcached_slab_commands_total",
                    &[("slab", &slab), ("command", op), ("status", "hit")],
                    v,
                );
            }
        }
        if let Some(v) = number(fields, "cas_badval") {
            out.sample(
                "memcached_slab_commands_total",
                &[("slab", &slab), ("command", "cas"), ("status", "badval")],
                v,
            );
        }
        if let (Some(set), Some(hits), Some(badval)) = (
            number(fields, "cmd_set"),
            number(fields, "cas_hits"),
            number(fields, "cas_badval"),
        ) {
            out.sample(
                "memcached_slab_commands_total",
                &[("slab", &slab), ("command", "set"), ("status", "hit")],
                set - hits - badval,
            );
        }
    }
}

/// One family with a sample per class that has the field.
fn per_class(
    out: &mut Exposition,
    classes: &BTreeMap<u32, BTreeMap<String, String>>,
    name: &str,
    kind: &str,
    help: &str,
    value: impl Fn(&BTreeMap<String, String>) -> Option<f64>,
) {
    let samples: Vec<(String, f64)> = classes
        .iter()
        .filter_map(|(class, fields)| Some((class.to_string(), value(fields)?)))
        .collect();
    if samples.is_empty() {
        return;
    }
    out.family(name, kind, help);
    for (slab, v) in samples {
        out.sample(name, &[("slab", &slab)], v);
    }
}

/// fogcached's tiers and migrations.
fn fogcached_metrics(stats: &Stats, out: &mut Exposition) {
    let s = &stats.general;
    let tiers = [
        ("dram", "tier_dram_", "dram_"),
        ("slow", "tier_slow_", "slow_"),
    ];
    // (metric, type, stat suffix, which prefix, help)
    const PER_TIER: &[(&str, &str, &str, bool, &str)] = &[
        (
            "fogcached_tier_items",
            "gauge",
            "items",
            true,
            "Items stored in the tier.",
        ),
        (
            "fogcached_tier_item_bytes",
            "gauge",
            "bytes",
            true,
            "Bytes of the items stored in the tier (header, key and value).",
        ),
        (
            "fogcached_tier_limit_bytes",
            "gauge",
            "limit_bytes",
            true,
            "Size of the tier.",
        ),
        (
            "fogcached_tier_pages_in_use",
            "gauge",
            "pages_in_use",
            true,
            "1 MiB slab pages of the tier given to slab classes.",
        ),
        (
            "fogcached_tier_get_hits_total",
            "counter",
            "get_hits",
            true,
            "Gets answered from the tier.",
        ),
        (
            "fogcached_tier_read_bytes_total",
            "counter",
            "bytes_read",
            false,
            "Bytes the engine read from the tier.",
        ),
        (
            "fogcached_tier_written_bytes_total",
            "counter",
            "bytes_written",
            false,
            "Bytes the engine wrote to the tier.",
        ),
        (
            "fogcached_tier_read_lines_total",
            "counter",
            "lines_read",
            false,
            "64-byte lines the engine read from the tier.",
        ),
        (
            "fogcached_tier_written_lines_total",
            "counter",
            "lines_written",
            false,
            "64-byte lines the engine wrote to the tier.",
        ),
    ];
    for (name, kind, suffix, tier_prefixed, help) in PER_TIER {
        let samples: Vec<(&str, f64)> = tiers
            .iter()
            .filter_map(|(tier, tier_prefix, access_prefix)| {
                let prefix = if *tier_prefixed {
                    tier_prefix
                } else {
                    access_prefix
                };
                Some((*tier, number(s, &format!("{prefix}{suffix}"))?))
            })
            .collect();
        if samples.is_empty() {
            continue;
        }
        out.family(name, kind, help);
        for (tier, v) in samples {
            out.sample(name, &[("tier", tier)], v);
        }
    }
    out.family(
        "fogcached_emulated_wait_seconds_total",
        "counter",
        "Time threads spent in the emulated slow-tier cost (--slow-cost).",
    );
    for (tier, _, access_prefix) in tiers {
        if let Some(us) = number(s, &format!("{access_prefix}emulated_wait_us")) {
            out.sample(
                "fogcached_emulated_wait_seconds_total",
                &[("tier", tier)],
                us / 1e6,
            );
        }
    }
    const MIGRATION: &[(&str, &str, &str, &str)] = &[
        (
            "fogcached_promotions_total",
            "counter",
            "promotions",
            "Items moved from the slow tier to DRAM.",
        ),
        (
            "fogcached_demotions_total",
            "counter",
            "demotions",
            "Items moved from DRAM to the slow tier.",
        ),
        (
            "fogcached_promotions_failed_total",
            "counter",
            "promotions_failed",
            "Promotions that found no DRAM room.",
        ),
        (
            "fogcached_promotions_skipped_total",
            "counter",
            "promotions_skipped",
            "Promotions refused by the admission rule.",
        ),
        (
            "fogcached_demotions_failed_total",
            "counter",
            "demotions_failed",
            "Demotions that found no slow-tier room.",
        ),
        (
            "fogcached_migrations_raced_total",
            "counter",
            "migrations_raced",
            "Moves abandoned because a request changed the item first.",
        ),
        (
            "fogcached_move_queue_dropped_total",
            "counter",
            "move_queue_dropped",
            "Move requests dropped because their queue was full.",
        ),
        (
            "fogcached_index_bytes",
            "gauge",
            "index_bytes",
            "DRAM bytes of the hash index.",
        ),
        (
            "fogcached_pool_items_recovered",
            "gauge",
            "pool_items_recovered",
            "Items recovered from the slow-tier pool at start-up.",
        ),
        (
            "fogcached_pool_formatted",
            "gauge",
            "pool_formatted",
            "1 when this start formatted the slow-tier pool (new, reset, or written with other settings: a cold start).",
        ),
    ];
    for (name, kind, key, help) in MIGRATION {
        out.single(name, kind, help, number(s, key));
    }
    out.family(
        "fogcached_move_queue_length",
        "gauge",
        "Entries waiting in a Move queue.",
    );
    for (queue, key) in [
        ("to_dram", "move_to_dram_queue_len"),
        ("to_slow", "move_to_slow_queue_len"),
    ] {
        if let Some(v) = number(s, key) {
            out.sample("fogcached_move_queue_length", &[("queue", queue)], v);
        }
    }
}

/// `fogcached_command_duration_seconds{command}`: the dispatchers' service time.
fn latency_metrics(out: &mut Exposition) {
    const NAME: &str = "fogcached_command_duration_seconds";
    out.family(
        NAME,
        "histogram",
        "Time the server spent on a request, from its parsed form to its reply bytes.",
    );
    let bucket_name = format!("{NAME}_bucket");
    for kind in CommandKind::ALL {
        let (buckets, sum_ns) = latency::snapshot(kind);
        let command = kind.label();
        let mut cumulative = 0u64;
        for (i, count) in buckets.iter().enumerate() {
            cumulative = cumulative.wrapping_add(*count);
            let le = match BUCKET_BOUNDS_NS.get(i) {
                Some(bound_ns) => format!("{}", *bound_ns as f64 / 1e9),
                None => "+Inf".to_owned(),
            };
            out.sample(
                &bucket_name,
                &[("command", command), ("le", &le)],
                cumulative as f64,
            );
        }
        out.sample(
            &format!("{NAME}_sum"),
            &[("command", command)],
            sum_ns as f64 / 1e9,
        );
        out.sample(
            &format!("{NAME}_count"),
            &[("command", command)],
            cumulative as f64,
        );
    }
}

/// The fog layer's counters (`--upstream`), read from its statistics directly.
fn upstream_metrics(upstream: &Upstream, out: &mut Exposition) {
    let stats = &upstream.stats;
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed) as f64;
    out.single(
        "fogcached_upstream_servers",
        "gauge",
        "Upstream servers (--upstream).",
        Some(stats.servers.len() as f64),
    );
    out.single(
        "fogcached_upstream_threads",
        "gauge",
        "Upstream threads, each with its own connections (--upstream-threads).",
        Some(upstream.threads() as f64),
    );
    out.family(
        "fogcached_upstream_requests_total",
        "counter",
        "Requests sent upstream: reads (one per single flight) and writes.",
    );
    out.sample(
        "fogcached_upstream_requests_total",
        &[("kind", "get")],
        load(&stats.gets),
    );
    out.sample(
        "fogcached_upstream_requests_total",
        &[("kind", "write")],
        load(&stats.writes),
    );
    const TOTALS: &[(&str, &str)] = &[
        ("get_hits", "Upstream reads that found the key."),
        ("get_misses", "Upstream reads that did not find the key."),
        (
            "get_joined",
            "Edge misses that joined a read of the same key already in flight.",
        ),
        (
            "errors",
            "Upstream requests that failed: refused or lost connections, garbage, an open breaker, a value too large.",
        ),
        (
            "timeouts",
            "Upstream requests that got no reply within --upstream-timeout-ms.",
        ),
        (
            "late_replies",
            "Replies that came after their request had timed out (read and dropped).",
        ),
        (
            "stuck_closes",
            "Upstream connections closed because no reply came for a timeout after a request was abandoned.",
        ),
        (
            "breaker_rejects",
            "Upstream requests failed at once because the server's circuit breaker was open.",
        ),
        (
            "breaker_opens",
            "Times a circuit breaker opened after its server had answered.",
        ),
        (
            "queue_full",
            "Upstream requests refused because the queue to their upstream thread was full.",
        ),
        ("fills", "Items fetched upstream and stored at the edge."),
        (
            "fills_skipped",
            "Items fetched upstream and not stored at the edge (a write overtook the read, the edge had a copy, no TTL left).",
        ),
    ];
    let counters = [
        &stats.hits,
        &stats.misses,
        &stats.joined,
        &stats.errors,
        &stats.timeouts,
        &stats.late_replies,
        &stats.stuck_closes,
        &stats.breaker_rejects,
        &stats.breaker_opens,
        &stats.queue_full,
        &stats.fills,
        &stats.fills_skipped,
    ];
    for ((name, help), counter) in TOTALS.iter().zip(counters) {
        out.single(
            &format!("fogcached_upstream_{name}_total"),
            "counter",
            help,
            Some(load(counter)),
        );
    }
    out.single(
        "fogcached_upstream_in_flight",
        "gauge",
        "Single flights (reads) and writes waiting for an upstream now.",
        Some(load(&stats.in_flight)),
    );
    const DURATION: &str = "fogcached_upstream_request_duration_seconds";
    out.family(
        DURATION,
        "histogram",
        "Time from a request's submission to its upstream reply (completed requests).",
    );
    upstream_histogram(out, DURATION, &[], &stats.latency);

    // Per server, labelled with its address as given.
    const PER_SERVER: &[(&str, &str, &str)] = &[
        (
            "requests_total",
            "counter",
            "Requests sent to the upstream server (reads and writes).",
        ),
        (
            "get_hits_total",
            "counter",
            "Reads the upstream server answered with a value.",
        ),
        (
            "get_misses_total",
            "counter",
            "Reads the upstream server answered with a miss.",
        ),
        (
            "errors_total",
            "counter",
            "Requests to the upstream server that failed (timeouts apart).",
        ),
        (
            "timeouts_total",
            "counter",
            "Requests to the upstream server that timed out.",
        ),
        (
            "in_flight",
            "gauge",
            "Requests waiting for the upstream server now.",
        ),
        (
            "connections",
            "gauge",
            "Open connections to the upstream server.",
        ),
        (
            "connects_total",
            "counter",
            "Connections opened to the upstream server.",
        ),
        (
            "breaker_open",
            "gauge",
            "1 while the upstream server's circuit breaker is open.",
        ),
        (
            "breaker_opens_total",
            "counter",
            "Times the upstream server's circuit breaker opened after it had answered.",
        ),
    ];
    for (suffix, kind, help) in PER_SERVER {
        let name = format!("fogcached_upstream_server_{suffix}");
        out.family(&name, kind, help);
        for server in &stats.servers {
            let value = match *suffix {
                "requests_total" => load(&server.requests),
                "get_hits_total" => load(&server.hits),
                "get_misses_total" => load(&server.misses),
                "errors_total" => load(&server.errors),
                "timeouts_total" => load(&server.timeouts),
                "in_flight" => load(&server.in_flight),
                "connections" => load(&server.connections),
                "connects_total" => load(&server.connects),
                "breaker_open" => f64::from(u8::from(server.breaker_open.load(Ordering::Relaxed))),
                _ => load(&server.breaker_opens),
            };
            out.sample(&name, &[("upstream", &server.name)], value);
        }
    }
    const SERVER_DURATION: &str = "fogcached_upstream_server_request_duration_seconds";
    out.family(
        SERVER_DURATION,
        "histogram",
        "Time from a request's submission to the upstream server's reply (completed requests).",
    );
    for server in &stats.servers {
        upstream_histogram(
            out,
            SERVER_DURATION,
            &[("upstream", &server.name)],
            &server.latency,
        );
    }
}

/// The samples of one upstream latency histogram (cumulative buckets in seconds).
fn upstream_histogram(
    out: &mut Exposition,
    name: &str,
    labels: &[(&str, &str)],
    histogram: &LatencyHistogram,
) {
    let bucket_name = format!("{name}_bucket");
    let mut cumulative = 0u64;
    for (i, count) in histogram.buckets().iter().enumerate() {
        cumulative = cumulative.wrapping_add(*count);
        let le = match LATENCY_BOUNDS_US.get(i) {
            Some(bound_us) => format!("{}", *bound_us as f64 / 1e6),
            None => "+Inf".to_owned(),
        };
        let mut with_le = labels.to_vec();
        with_le.push(("le", &le));
        out.sample(&bucket_name, &with_le, cumulative as f64);
    }
    out.sample(
        &format!("{name}_sum"),
        labels,
        histogram.sum_us() as f64 / 1e6,
    );
    out.sample(&format!("{name}_count"), labels, cumulative as f64);
}
