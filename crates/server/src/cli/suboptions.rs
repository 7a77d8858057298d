//! `-o`, memcached's extended options: each suboption fogcached implements is mapped onto
//! its setting with memcached's checks; the others are accepted with a warning that says
//! why ignoring them is harmless, or refused with the alternative, so that a memcached
//! command line keeps working or says plainly why not (none is "unknown").

use engine::SLAB_PAGE_SIZE_BYTES;

use super::{parse_size, usage, CliExit, Config, SizeUnit};

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

/// Applies one `-o` suboption (`name` or `name=value`) to the configuration.
pub(super) fn apply_suboption(
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{parse_ok, parse_usage};
    use super::super::{parse, CliExit};
    use engine::SLAB_PAGE_SIZE_BYTES;

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
}
