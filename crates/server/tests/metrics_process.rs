//! The Prometheus endpoint (`--metrics-listen`) on the real binary: its output passes
//! `promtool check metrics` (Debian's `prometheus` package), carries memcached_exporter's
//! metric names with the values `stats` shows, and a real Prometheus server started here
//! scrapes it and answers a query about it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::{run_bounded, skip, stat, PortReservation, RawClient, ServerProcess};

const PROMTOOL: &str = "/usr/bin/promtool";
const PROMETHEUS: &str = "/usr/bin/prometheus";

/// `GET path` over HTTP/1.1; the status code and the body.
fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    let reply = String::from_utf8(reply)?;
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no header end in {reply:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status in {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// The value of the sample `name` (exactly this name and label set) in Prometheus text.
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
}

/// fogcached with the endpoint on a loopback port the kernel picks, which `stats
/// settings` names.
fn server_with_metrics(extra: &[&str]) -> anyhow::Result<(ServerProcess, SocketAddr)> {
    let mut args = vec!["--metrics-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = ServerProcess::fogcached(&args)?;
    let settings = RawClient::connect(server.addr())?.stats("settings")?;
    let listen = stat(&settings, "metrics_listen")
        .ok_or_else(|| anyhow::anyhow!("no metrics_listen in {settings:?}"))?;
    let addr: SocketAddr = listen.parse()?;
    anyhow::ensure!(addr.port() != 0, "metrics_listen {listen}");
    Ok((server, addr))
}

#[test]
fn metrics_carry_memcached_exporter_names_and_pass_promtool() -> anyhow::Result<()> {
    let (server, metrics) = server_with_metrics(&[])?;
    let mut client = RawClient::connect(server.addr())?;
    client.request(
        b"set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\n",
        b"STORED\r\nSTORED\r\n",
    )?;
    client.request(b"get a nope\r\n", b"END\r\n")?;
    client.request(b"delete b\r\n", b"\r\n")?;
    client.request(b"incr a 5\r\n", b"\r\n")?;
    let (status, text) = http_get(metrics, "/metrics")?;
    assert_eq!(status, 200);
    // The exporter's names and what `stats` says.
    for (series, expected) in [
        ("memcached_up", 1.0),
        ("memcached_current_items", 1.0),
        ("memcached_items_total", 2.0),
        (
            r#"memcached_commands_total{command="get",status="hit"}"#,
            1.0,
        ),
        (
            r#"memcached_commands_total{command="get",status="miss"}"#,
            1.0,
        ),
        (
            r#"memcached_commands_total{command="set",status="hit"}"#,
            2.0,
        ),
        (
            r#"memcached_commands_total{command="delete",status="hit"}"#,
            1.0,
        ),
        (
            r#"memcached_commands_total{command="incr",status="hit"}"#,
            1.0,
        ),
        ("memcached_items_evicted_total", 0.0),
        ("memcached_limit_bytes", 64.0 * 1024.0 * 1024.0),
        ("memcached_max_connections", 1024.0),
        (r#"fogcached_tier_items{tier="dram"}"#, 1.0),
        (r#"fogcached_tier_items{tier="slow"}"#, 0.0),
        ("fogcached_promotions_total", 0.0),
        (r#"fogcached_move_queue_length{queue="to_dram"}"#, 0.0),
    ] {
        assert_eq!(sample(&text, series), Some(expected), "{series} in\n{text}");
    }
    for name in [
        "memcached_uptime_seconds",
        "memcached_time_seconds",
        "memcached_process_user_cpu_seconds_total",
        "memcached_read_bytes_total",
        "memcached_written_bytes_total",
        "memcached_current_connections",
        "memcached_connections_total",
        "memcached_current_bytes",
        "memcached_malloced_bytes",
        "memcached_items_reclaimed_total",
        "memcached_lru_crawler_enabled",
        "memcached_lru_crawler_hot_percent",
        "memcached_slab_current_items{slab=",
        "memcached_slab_lru_hits_total{slab=",
        "memcached_slab_chunk_size_bytes{slab=",
        "memcached_slab_commands_total{slab=",
        "memcached_version{version=",
        "fogcached_tier_read_lines_total{tier=\"slow\"}",
        "fogcached_tier_written_lines_total{tier=\"slow\"}",
        "fogcached_tier_get_hits_total{tier=\"dram\"}",
        "fogcached_demotions_total",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} missing from\n{text}"
        );
    }
    // The latency histogram counted the requests above (2 sets, 1 get, 1 delete, 1 incr).
    let count = |command: &str| {
        sample(
            &text,
            &format!("fogcached_command_duration_seconds_count{{command=\"{command}\"}}"),
        )
    };
    assert_eq!(count("set"), Some(2.0));
    assert_eq!(count("get"), Some(1.0));
    assert_eq!(count("delete"), Some(1.0));
    assert_eq!(count("incr_decr"), Some(1.0));
    let inf = sample(
        &text,
        r#"fogcached_command_duration_seconds_bucket{command="set",le="+Inf"}"#,
    );
    assert_eq!(inf, Some(2.0));

    assert_eq!(http_get(metrics, "/nothing")?.0, 404);
    let settings = client.stats("settings")?;
    assert_eq!(
        testkit::stat(&settings, "metrics_listen"),
        Some(metrics.to_string().as_str())
    );

    promtool_check(
        "metrics_carry_memcached_exporter_names_and_pass_promtool",
        "plain",
        &text,
    )
}

/// `promtool check metrics` on `text` (skipped, and said so, without promtool).
fn promtool_check(test: &str, name: &str, text: &str) -> anyhow::Result<()> {
    if !Path::new(PROMTOOL).exists() {
        skip!(
            test,
            "promtool (Debian package prometheus) is not installed"
        );
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("fc-metrics-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("metrics.txt");
    std::fs::write(&file, text)?;
    let run = run_bounded(
        Command::new("sh")
            .arg("-c")
            .arg(format!("{PROMTOOL} check metrics < '{}'", file.display())),
        Duration::from_secs(30),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(run.success, "promtool check metrics:\n{}", run.output);
    Ok(())
}

#[test]
fn fog_layer_metrics_count_upstream_requests_per_server_and_pass_promtool() -> anyhow::Result<()> {
    let cloud = ServerProcess::memcached(&[])?;
    RawClient::connect(cloud.addr())?.request(b"set k 3 0 2\r\nhi\r\n", b"\r\n")?;
    let upstream = cloud.addr().to_string();
    let (server, metrics) = server_with_metrics(&[
        "--slow-size",
        "0",
        "--upstream",
        &upstream,
        "--upstream-timeout-ms",
        "5000",
    ])?;
    let mut client = RawClient::connect(server.addr())?;
    // A fill, a cloud miss, then an edge hit and a write.
    client.request(b"get k\r\n", b"END\r\n")?;
    client.request(b"get nope\r\n", b"END\r\n")?;
    client.request(b"get k\r\n", b"END\r\n")?;
    client.request(b"set w 0 0 1\r\nw\r\n", b"\r\n")?;
    let (status, text) = http_get(metrics, "/metrics")?;
    assert_eq!(status, 200);
    let server_label = format!("upstream=\"{upstream}\"");
    for (series, expected) in [
        ("fogcached_upstream_servers".to_owned(), 1.0),
        (
            r#"fogcached_upstream_requests_total{kind="get"}"#.to_owned(),
            2.0,
        ),
        (
            r#"fogcached_upstream_requests_total{kind="write"}"#.to_owned(),
            1.0,
        ),
        ("fogcached_upstream_get_hits_total".to_owned(), 1.0),
        ("fogcached_upstream_get_misses_total".to_owned(), 1.0),
        ("fogcached_upstream_errors_total".to_owned(), 0.0),
        ("fogcached_upstream_timeouts_total".to_owned(), 0.0),
        ("fogcached_upstream_fills_total".to_owned(), 1.0),
        ("fogcached_upstream_in_flight".to_owned(), 0.0),
        (
            "fogcached_upstream_request_duration_seconds_count".to_owned(),
            3.0,
        ),
        (
            r#"fogcached_upstream_request_duration_seconds_bucket{le="+Inf"}"#.to_owned(),
            3.0,
        ),
        (
            format!("fogcached_upstream_server_requests_total{{{server_label}}}"),
            3.0,
        ),
        (
            format!("fogcached_upstream_server_get_hits_total{{{server_label}}}"),
            1.0,
        ),
        (
            format!("fogcached_upstream_server_breaker_open{{{server_label}}}"),
            0.0,
        ),
        (
            format!("fogcached_upstream_server_request_duration_seconds_count{{{server_label}}}"),
            3.0,
        ),
        (
            format!(
                "fogcached_upstream_server_request_duration_seconds_bucket{{{server_label},le=\"+Inf\"}}"
            ),
            3.0,
        ),
    ] {
        assert_eq!(sample(&text, &series), Some(expected), "{series} in\n{text}");
    }
    // The edge's own counters as without an upstream: one edge hit of three gets.
    assert_eq!(
        sample(
            &text,
            r#"memcached_commands_total{command="get",status="hit"}"#
        ),
        Some(1.0)
    );
    promtool_check(
        "fog_layer_metrics_count_upstream_requests_per_server_and_pass_promtool",
        "upstream",
        &text,
    )
}

/// A Prometheus server, killed and its directory removed on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_prometheus(target: SocketAddr) -> anyhow::Result<Prometheus> {
    let dir = std::env::temp_dir().join(format!("fc-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: fogcached\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )?;
    // Prometheus cannot report a port it picked: it is given a reserved one (its Go
    // listener sets SO_REUSEADDR, so it can bind it; nothing else can meanwhile).
    let reservation = PortReservation::new()?;
    let addr = reservation.addr();
    let child = Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log"))?)
        .spawn()?;
    let prometheus = Prometheus { child, dir, addr };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if matches!(http_get(addr, "/-/ready"), Ok((200, _))) {
            return Ok(prometheus);
        }
        if Instant::now() > deadline {
            let log =
                std::fs::read_to_string(prometheus.dir.join("prometheus.log")).unwrap_or_default();
            anyhow::bail!("prometheus did not become ready: {log}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The value of a one-sample instant query, as Prometheus' HTTP API answers it.
fn query(prometheus: SocketAddr, promql: &str) -> anyhow::Result<Option<f64>> {
    let encoded: String = promql
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let (status, body) = http_get(prometheus, &format!("/api/v1/query?query={encoded}"))?;
    anyhow::ensure!(status == 200, "query {promql}: HTTP {status}: {body}");
    let reply: serde_json::Value = serde_json::from_str(&body)?;
    let value = reply["data"]["result"]
        .get(0)
        .and_then(|sample| sample["value"].get(1))
        .and_then(|v| v.as_str())
        .and_then(|v| v.parse().ok());
    Ok(value)
}

#[test]
fn a_prometheus_server_scrapes_the_endpoint_and_answers_a_query() -> anyhow::Result<()> {
    if !Path::new(PROMETHEUS).exists() {
        skip!(
            "a_prometheus_server_scrapes_the_endpoint_and_answers_a_query",
            "prometheus (Debian package prometheus) is not installed"
        );
        return Ok(());
    }
    let (server, metrics) = server_with_metrics(&["--slow-size", "0"])?;
    let prometheus = start_prometheus(metrics)?;
    let mut client = RawClient::connect(server.addr())?;
    for i in 0..7 {
        client.request(
            format!("set key{i} 0 0 1\r\nx\r\n").as_bytes(),
            b"STORED\r\n",
        )?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let items = query(prometheus.addr, "memcached_current_items")?;
        let sets = query(
            prometheus.addr,
            r#"memcached_commands_total{command="set",status="hit"}"#,
        )?;
        let up = query(prometheus.addr, r#"up{job="fogcached"}"#)?;
        if items == Some(7.0) && sets == Some(7.0) && up == Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus never saw 7 items: items {items:?}, sets {sets:?}, up {up:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let dram_items = query(prometheus.addr, r#"fogcached_tier_items{tier="dram"}"#)?;
    assert_eq!(dram_items, Some(7.0));
    Ok(())
}

#[test]
fn a_bad_metrics_address_fails_the_start() -> anyhow::Result<()> {
    let binary = testkit::fogcached_binary()?;
    let dir = std::env::temp_dir().join(format!("fc-metrics-bad-{}", std::process::id()));
    let run = run_bounded(
        Command::new(binary).args([
            "-p",
            "0",
            "--data-dir",
            dir.to_str().unwrap_or("/tmp"),
            "--metrics-listen",
            "256.0.0.1:9150",
        ]),
        Duration::from_secs(30),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!run.success, "{}", run.output);
    assert!(
        run.output.contains("--metrics-listen 256.0.0.1:9150"),
        "{}",
        run.output
    );
    Ok(())
}

/// The TCP ports process `pid` listens on: its sockets (`/proc/<pid>/fd`) that
/// `/proc/net/tcp` and `tcp6` list in state LISTEN.
fn listening_ports(pid: u32) -> anyhow::Result<Vec<u16>> {
    let mut inodes = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        // A descriptor closed since the listing is no socket of interest.
        let Ok(target) = std::fs::read_link(entry?.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_owned());
        }
    }
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is field 1 (hex ip:port), st field 3 (0A = LISTEN), inode 9.
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state != "0A" || !inodes.contains(*inode) {
                continue;
            }
            if let Some(port) = local.rsplit(':').next() {
                ports.push(u16::from_str_radix(port, 16)?);
            }
        }
    }
    ports.sort_unstable();
    Ok(ports)
}

/// Without `--metrics-listen` nothing but the memcached port listens (the endpoint is
/// off by default); with it, its port does too, so the check sees an endpoint.
#[test]
fn the_metrics_endpoint_is_off_by_default() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    let pid = server.pid().expect("running");
    assert_eq!(listening_ports(pid)?, [server.port()]);
    let settings = RawClient::connect(server.addr())?.stats("settings")?;
    assert_eq!(testkit::stat(&settings, "metrics_listen"), Some("none"));

    let (with_metrics, metrics) = server_with_metrics(&[])?;
    let mut expected = vec![with_metrics.port(), metrics.port()];
    expected.sort_unstable();
    // The endpoint's thread binds beside the workers: on a loaded machine it may not
    // listen yet when the memcached port answers (seen once in CI), so wait for it.
    let with_metrics_pid = with_metrics.pid().expect("running");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while listening_ports(with_metrics_pid)? != expected && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(listening_ports(with_metrics_pid)?, expected);
    Ok(())
}
