//! memcached's text-protocol admin commands that look inside the cache or tune it: `stats
//! detail`, `stats cachedump`, `stats sizes_enable|disable`, `lru_crawler
//! metadump|crawl|enable|disable|sleep|tocrawl`, `lru tune|mode|temp_ttl` and `watch`,
//! with memcached 1.6's replies (checked against memcached 1.6.18).
//!
//! Classes: a number names a DRAM slab class, as in memcached; `slow:<n>` names class
//! `n` of the slow tier (as `stats items` and `stats slabs` print them). Listings show
//! slow-tier items with ` tier=slow` after memcached's fields.

use std::io::Write;
use std::sync::atomic::Ordering;

use engine::{ItemDump, LruTune, LruTuneError, TierId, DUMP_CURSOR_START};
use protocol::text::{Args, LruCommand, LruCrawlerCommand};

use crate::detail::PrefixOp;
use crate::session::{Session, Step};
use crate::watch;

const OK: &[u8] = b"OK\r\n";
const END: &[u8] = b"END\r\n";
const ERROR: &[u8] = b"ERROR\r\n";
const DETAIL_USAGE: &[u8] = b"CLIENT_ERROR usage: stats detail on|off|dump\r\n";
const CACHEDUMP_REFUSED: &[u8] = b"CLIENT_ERROR stats cachedump not allowed\r\n";
const CACHEDUMP_USAGE: &[u8] = b"CLIENT_ERROR bad command line\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const ILLEGAL_SLAB_ID: &[u8] = b"CLIENT_ERROR Illegal slab id\r\n";
const METADUMP_REFUSED: &[u8] = b"ERROR metadump not allowed\r\n";
const BAD_CLASS: &[u8] = b"BADCLASS invalid class id\r\n";
const CRAWLER_DISABLED: &[u8] = b"CLIENT_ERROR lru crawler disabled\r\n";
const WATCH_REFUSED: &[u8] = b"CLIENT_ERROR watch commands not allowed\r\n";
const CRAWLER_START_FAILED: &[u8] = b"ERROR failed to start lru crawler thread\r\n";
const CRAWLER_SLEEP_TOO_LONG: &[u8] = b"CLIENT_ERROR sleep must be one second or less\r\n";
const LRU_PCTS_TOO_HIGH: &[u8] = b"ERROR hot and warm pcts must not exceed 80\r\n";
const LRU_FACTORS_NOT_POSITIVE: &[u8] = b"ERROR hot/warm age factors must be greater than 0\r\n";
const SIZES_ENABLED: &[u8] = b"STAT sizes_status enabled\r\n";
const SIZES_DISABLED: &[u8] = b"STAT sizes_status disabled\r\n";

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`: class ids at or above it are illegal.
pub const SLAB_CLASS_ID_LIMIT: u32 = 64;
/// memcached bounds one `stats cachedump` reply to 2 MiB.
pub const CACHEDUMP_REPLY_MAX_BYTES: usize = 2 * 1024 * 1024;

/// `stats detail on|off|dump`.
pub fn stats_detail(session: &mut Session<'_>, args: Args<'_>) {
    let prefixes = &session.stats.prefixes;
    match args.get(0) {
        Some(b"on") => {
            prefixes.set_enabled(true);
            session.out.extend_from_slice(OK);
        }
        Some(b"off") => {
            prefixes.set_enabled(false);
            session.out.extend_from_slice(OK);
        }
        Some(b"dump") => prefixes.dump(session.out),
        _ => session.out.extend_from_slice(DETAIL_USAGE),
    }
}

/// Counts a request on `key` for `stats detail` (one relaxed load while it is off).
#[inline]
pub fn record_prefix(session: &Session<'_>, key: &[u8], op: PrefixOp) {
    session.stats.prefixes.record(key, op);
}

/// A class as an admin command names it: `<n>` (DRAM) or `slow:<n>`.
fn parse_class(word: &[u8]) -> Option<(TierId, u32)> {
    let (tier, number) = match word.strip_prefix(b"slow:") {
        Some(number) => (TierId::Slow, number),
        None => (TierId::Dram, word),
    };
    let text = std::str::from_utf8(number).ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((tier, text.parse().ok()?))
}

/// `stats cachedump <class> <limit>`: up to `limit` items of the class (0: as many as
/// fit), most recent first, in at most 2 MiB, as memcached bounds it.
pub fn stats_cachedump(session: &mut Session<'_>, args: Args<'_>) {
    if !session.settings.dumps_enabled {
        session.out.extend_from_slice(CACHEDUMP_REFUSED);
        return;
    }
    let (Some(class_word), Some(limit_word)) = (args.get(0), args.get(1)) else {
        session.out.extend_from_slice(CACHEDUMP_USAGE);
        return;
    };
    let limit = std::str::from_utf8(limit_word)
        .ok()
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u32>().ok());
    let (Some((tier, class_id)), Some(limit)) = (parse_class(class_word), limit) else {
        session.out.extend_from_slice(BAD_FORMAT);
        return;
    };
    if class_id >= SLAB_CLASS_ID_LIMIT {
        session.out.extend_from_slice(ILLEGAL_SLAB_ID);
        return;
    }
    let limit = if limit == 0 {
        usize::MAX
    } else {
        limit as usize
    };
    let out = &mut *session.out;
    let start = out.len();
    // An unknown (or empty) class lists nothing: memcached answers END.
    let _ = session
        .engine
        .dump_class(tier, class_id as usize, limit, &mut |item| {
            let line_start = out.len();
            out.extend_from_slice(b"ITEM ");
            out.extend_from_slice(item.key);
            let _ = write!(
                out,
                " [{} b; {} s]\r\n",
                item.value_bytes,
                item.exptime_unix_s.unwrap_or(0)
            );
            if out.len() - start + END.len() > CACHEDUMP_REPLY_MAX_BYTES {
                out.truncate(line_start);
                return false;
            }
            true
        });
    out.extend_from_slice(END);
}

/// Which items a metadump lists.
enum Selection {
    Everything,
    Classes(Vec<(TierId, u32)>),
}

fn parse_selection(classes: &[u8], hash_allowed: bool) -> Option<Selection> {
    match classes {
        b"all" => Some(Selection::Everything),
        b"hash" if hash_allowed => Some(Selection::Everything),
        _ => {
            let mut list = Vec::new();
            for word in classes.split(|&b| b == b',') {
                let (tier, id) = parse_class(word)?;
                if id == 0 || id >= SLAB_CLASS_ID_LIMIT {
                    return None;
                }
                list.push((tier, id));
            }
            Some(Selection::Classes(list))
        }
    }
}

/// `lru_crawler metadump|crawl ...`.
///
/// `metadump` streams one line per live item in index order (`all` and `hash` list the
/// same: every item once, in the index's order), bounded by the connection's output
/// high-water mark: when the mark is reached it returns [`Step::Partial`] with its
/// place in the index, and the runtime calls again after the socket drained. So a dump
/// of any size holds at most the mark in memory.
pub fn lru_crawler(
    session: &mut Session<'_>,
    command: LruCrawlerCommand<'_>,
    consumed: usize,
) -> Step {
    match command {
        LruCrawlerCommand::Crawl { classes } => {
            if !session.engine.lru_crawler_enabled() {
                session.out.extend_from_slice(CRAWLER_DISABLED);
            } else if parse_selection(classes, false).is_none() {
                session.out.extend_from_slice(BAD_CLASS);
            } else {
                // A pass walks every class; it runs at the crawler's next tick.
                session.engine.request_crawl();
                session.out.extend_from_slice(OK);
            }
            Step::Consumed(consumed)
        }
        LruCrawlerCommand::Metadump { classes } => metadump(session, classes, consumed),
        LruCrawlerCommand::Enable => {
            let reply = match session.engine.enable_lru_crawler() {
                Ok(()) => OK,
                Err(_) => CRAWLER_START_FAILED,
            };
            session.out.extend_from_slice(reply);
            Step::Consumed(consumed)
        }
        LruCrawlerCommand::Disable => {
            session.engine.disable_lru_crawler();
            session.out.extend_from_slice(OK);
            Step::Consumed(consumed)
        }
        LruCrawlerCommand::Sleep { sleep_us } => {
            let reply = match session.engine.set_lru_crawler_sleep_us(sleep_us) {
                Ok(()) => OK,
                Err(_) => CRAWLER_SLEEP_TOO_LONG,
            };
            session.out.extend_from_slice(reply);
            Step::Consumed(consumed)
        }
        LruCrawlerCommand::Tocrawl { items } => {
            session.engine.set_lru_crawler_tocrawl(items);
            session.out.extend_from_slice(OK);
            Step::Consumed(consumed)
        }
    }
}

/// `lru tune|mode|temp_ttl` (memcached's replies; `noreply` silences them all, errors
/// included, as memcached's). `mode` and `temp_ttl` need the LRU maintainer, as in
/// memcached. fogcached's LRU is always segmented, and it has no temporary LRU: `mode
/// flat` and a `temp_ttl` that would turn one on get memcached's `ERROR`; `mode
/// segmented` and `temp_ttl -1` (off) describe what it does, and are `OK`.
pub fn lru(session: &mut Session<'_>, command: LruCommand, noreply: bool) {
    let engine = session.engine;
    let maintained = engine.config().lru_maintainer;
    let reply: &[u8] = match command {
        LruCommand::Tune {
            hot_lru_pct,
            warm_lru_pct,
            hot_max_factor,
            warm_max_factor,
        } => {
            let tune = LruTune {
                hot_lru_pct,
                warm_lru_pct,
                hot_max_factor: hot_max_factor.get(),
                warm_max_factor: warm_max_factor.get(),
            };
            match engine.lru_tune(tune) {
                Ok(()) => OK,
                Err(LruTuneError::Percentages) => LRU_PCTS_TOO_HIGH,
                Err(LruTuneError::Factors) => LRU_FACTORS_NOT_POSITIVE,
            }
        }
        LruCommand::Mode { segmented: true } if maintained => OK,
        LruCommand::TempTtl { ttl_s } if maintained && ttl_s < 0 => OK,
        _ => ERROR,
    };
    if !noreply {
        session.out.extend_from_slice(reply);
    }
}

/// `stats sizes_enable` / `stats sizes_disable`: memcached 1.6.18's replies, which end
/// without `END` (its `process_stat` adds none for these two).
pub fn stats_sizes_toggle(session: &mut Session<'_>, enable: bool) {
    session.engine.set_size_histogram(enable);
    session.out.extend_from_slice(if enable {
        SIZES_ENABLED
    } else {
        SIZES_DISABLED
    });
}

fn metadump(session: &mut Session<'_>, classes: &[u8], consumed: usize) -> Step {
    // memcached's order: the crawler first (it walks the items), then -X.
    if !session.engine.lru_crawler_enabled() {
        session.out.extend_from_slice(CRAWLER_DISABLED);
        return Step::Consumed(consumed);
    }
    if !session.settings.dumps_enabled {
        session.out.extend_from_slice(METADUMP_REFUSED);
        return Step::Consumed(consumed);
    }
    let Some(selection) = parse_selection(classes, true) else {
        session.out.extend_from_slice(BAD_CLASS);
        return Step::Consumed(consumed);
    };
    // `resume_keys` carries the index cursor (plus one, so that 0 is a fresh request).
    let mut cursor = match session.resume_keys {
        0 => DUMP_CURSOR_START,
        resumed => resumed as u64 - 1,
    };
    let high_water = session.out_high_water_bytes;
    let out = &mut *session.out;
    loop {
        let next = session.engine.dump_items(cursor, &mut |item| {
            let wanted = match &selection {
                Selection::Everything => true,
                Selection::Classes(list) => list
                    .iter()
                    .any(|&(tier, id)| tier == item.tier && id == u32::from(item.class_id)),
            };
            if wanted {
                push_metadump_line(out, item);
            }
            out.len() < high_water
        });
        match next {
            None => {
                out.extend_from_slice(END);
                return Step::Consumed(consumed);
            }
            Some(next) if out.len() >= high_water => {
                return Step::Partial {
                    keys_done: next as usize + 1,
                };
            }
            Some(next) => cursor = next,
        }
    }
}

/// `key=<key> exp=<unix|-1> la=<unix> cas=<n> fetch=yes|no cls=<n> size=<bytes>\n`, as
/// memcached's metadump prints it (key URI-encoded).
fn push_metadump_line(out: &mut Vec<u8>, item: &ItemDump<'_>) {
    out.extend_from_slice(b"key=");
    watch::uri_encode(item.key, out);
    let exp = item.exptime_unix_s.map_or(-1, |s| s as i64);
    let _ = writeln!(
        out,
        " exp={exp} la={} cas={} fetch={} cls={} size={}{}",
        item.last_access_unix_s,
        item.cas,
        if item.fetched { "yes" } else { "no" },
        item.class_id,
        item.total_bytes,
        if item.tier == TierId::Slow {
            " tier=slow"
        } else {
            ""
        }
    );
}

/// `watch [kinds]`: `OK`, then the connection streams the event log.
pub fn watch(session: &mut Session<'_>, kinds: Args<'_>, consumed: usize) -> Step {
    if !session.settings.watch_enabled {
        session.out.extend_from_slice(WATCH_REFUSED);
        return Step::Consumed(consumed);
    }
    let Some(kinds) = watch::parse_kinds(kinds.iter()) else {
        session.out.extend_from_slice(ERROR);
        return Step::Consumed(consumed);
    };
    let watchers = &session.stats.runtime.watchers;
    if watchers.fetch_add(1, Ordering::Relaxed) as usize >= watch::WATCHERS_MAX {
        watchers.fetch_sub(1, Ordering::Relaxed);
        session.out.extend_from_slice(watch::WATCHERS_FULL);
        return Step::Consumed(consumed);
    }
    // Recording starts now, before the `OK`: an event that follows it is not missed while
    // the connection travels to the logger thread. The runtime gives the count back if
    // the connection closes before it gets there.
    session.engine.events().add_wanted(kinds);
    session.out.extend_from_slice(OK);
    Step::Watch { consumed, kinds }
}
