//! The words `fogcached --help` prints after the flags (the `-o` suboptions, what is
//! accepted without effect or refused, the environment), and `-i`'s license text. The
//! flags' own descriptions are their doc comments in `flags.rs`; the tests here read the
//! whole `--help` as an operator sees it.

/// `-i`: memcached prints its and libevent's licenses; fogcached contains neither's code
/// and prints its own.
pub(super) const LICENSE_TEXT: &str = concat!(
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
pub(super) const EXTENDED_OPTIONS_HELP: &str = "\
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

#[cfg(test)]
mod tests {
    use super::super::{parse, CliExit};

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

    /// `--policy`'s help names every policy of the engine's registry and what it is (a
    /// new policy included, with no edit to the help), and says the defaults.
    #[test]
    fn help_lists_every_policy_with_what_it_is_and_the_defaults() {
        for flag in ["-h", "--help"] {
            let Err(CliExit::Info(text)) = parse(["fogcached", flag]) else {
                panic!("{flag} is information");
            };
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            for policy in engine::PlacementPolicy::ALL {
                let entry = format!("{} ({})", policy.name(), policy.summary());
                assert!(
                    text.contains(&entry),
                    "{entry:?} missing from {flag}:\n{text}"
                );
            }
            for default in [
                "Default: hotspot with a slow tier",
                "dual-lru with --slow-size 0",
            ] {
                assert!(
                    text.contains(default),
                    "{default:?} missing from {flag}:\n{text}"
                );
            }
        }
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
}
