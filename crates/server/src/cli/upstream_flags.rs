//! The fog layer's flags (`--upstream*`): which servers, what a write does to the edge
//! copy, the timeouts, connections, loops and circuit breaker, checked and made into an
//! [`UpstreamConfig`] (`None` without `--upstream`).

use crate::upstream::{UpstreamConfig, WriteMode};

use super::flags::Flags;
use super::{usage, CliExit};

/// The `--upstream*` flags; `None` without `--upstream`.
pub(super) fn upstream_config(cli: &Flags) -> Result<Option<UpstreamConfig>, CliExit> {
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{parse_ok, parse_usage};

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
