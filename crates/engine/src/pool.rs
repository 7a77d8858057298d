//! The persistent pool: what makes a slow tier on a file or device survive a restart.
//!
//! A pool file is laid out as a header, then the slow tier's slab pages:
//!
//! ```text
//! 0       magic "FOGCPOOL", format version (0 while a format is in progress), header size
//! 16      generation (random, made when the pool is formatted)
//! 24      clock base: Unix time of the engine's relative time 0
//! 32      checksum of the geometry block
//! 64      clean mark (the last stop wrote everything down and flushed)
//! 72      CAS high-water mark (no CAS below it is ever handed out again)
//! 80      flush_all state: oldest live CAS, and the relative time of a delayed flush
//! 96      geometry block: page size, page count, item size limit, chunk sizes, ...
//! 1024    settings block: checksum, then the flags the chunk sizes were made from (-n, -f,
//!         slab_chunk_max, slab_sizes); read only to say what changed, never to decide
//! 4096    page table: one byte per slab page, its slab class (0: free; LARGE_TAIL: a
//!         page inside a large item's run)
//! header  the slab pages (the engine's slow-tier region)
//! ```
//!
//! What a start does with what it finds (`Pool::open`, and `vet` before the file is
//! touched at all):
//! - nothing (a new or empty file, a file of zeros, a device range of zeros): format it;
//! - something without the magic (another program's file, a mistyped path): refuse,
//!   always, and write nothing (`tier::Region::open_with_header` asks `vet` before it
//!   extends, reserves or maps the file writable);
//! - the magic with format version 0 (a format was interrupted: it held no items yet):
//!   format it;
//! - a pool of another format version, of other settings (its geometry differs), or
//!   whose geometry block does not check out (our magic, so our file, damaged): a cache's
//!   contents are disposable, so by default it is formatted and the start is cold, the
//!   reason on stderr and in `stats` (memcached's restart file does the same);
//!   `--slow-pool-mismatch refuse` refuses instead, in `vet`, before anything changes;
//! - a pool that matches: recover it (or format it, with `--slow-pool-reset`).
//!
//! Records. A slow-tier item is self-describing: its header holds key length, value
//! length, client flags, exptime (relative to the pool's clock base, so it keeps its
//! meaning across restarts), CAS and a checksum (xxh3 over those, the key and the value,
//! seeded with the pool's generation so no record of an earlier format of the same file
//! ever checks out). A chunk is a valid record exactly when its checksum matches.
//!
//! Ordering, so that a crash leaves every record whole and valid or recognisably
//! invalid, and never a stale one:
//! - a record is *sealed* (its checksum written) after every byte it covers; a crash
//!   before that leaves a checksum of 0 or of the chunk's previous, invalidated record;
//! - before a sealed record changes in place (`touch`, `incr`, `md I`) its checksum is
//!   zeroed, and it is sealed again after; a crash in between loses the item, never
//!   serves a torn one;
//! - a slow-tier chunk's checksum is zeroed when the chunk is freed (delete, overwrite,
//!   eviction, expiry, promotion to DRAM, page moves), before anything that depends on
//!   it is acknowledged, so a key deleted or overwritten never comes back with an older
//!   value;
//! - after a crash between an overwrite's new record and the old one's invalidation,
//!   both may check out; recovery keeps the one with the higher CAS (the client had not
//!   been answered yet, so either is a correct outcome).
//!
//! A process crash (`kill -9`) keeps every store made to a shared file mapping (the page
//! cache holds them), so program order is all these rules need. Power loss needs the
//! stores flushed: with `MAP_SYNC` (DAX), `Region::persist` writes the cache lines back
//! where the stores are made; on a plain file, the engine counts invalidations not yet
//! flushed and the server holds replies until `Engine::make_durable` has `msync`ed them
//! (a group commit: one flush per turn of a worker, shared by every connection and
//! worker waiting). That is `--slow-durability power`. The default, `auto`, is `power`
//! on DAX and `crash` (program order only: a process crash is covered, a power loss may
//! bring back what was invalidated just before it) on a plain file, where each flush
//! waits for the disk: `scripts/bench-restart.sh` measures what `power` costs there.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::config::{EngineConfig, PoolMismatch, SLAB_CLASSES_MAX};
use crate::item::{HeaderRead, ITEM_HEADER_BYTES};
use crate::slab::Geometry;

const MAGIC: &[u8; 8] = b"FOGCPOOL";
/// Bumped whenever the header, the page table or the record layout changes.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// The version word while a format is in progress: written with the magic first, and
/// replaced by `FORMAT_VERSION` last, so that a crash mid-format leaves a file that is
/// recognisably ours and recognisably unfinished.
const VERSION_FORMATTING: u32 = 0;

/// Offsets of the header's fields.
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION_AND_SIZE: usize = 8;
    pub const GENERATION: usize = 16;
    pub const CLOCK_BASE: usize = 24;
    pub const GEOMETRY_CHECKSUM: usize = 32;
    pub const CLEAN: usize = 64;
    pub const CAS_HIGH_WATER: usize = 72;
    pub const FLUSH_OLDEST_CAS: usize = 80;
    pub const FLUSH_AT_S: usize = 88;
    pub const GEOMETRY: usize = 96;
    pub const SETTINGS_CHECKSUM: usize = 1024;
    pub const SETTINGS: usize = 1032;
    pub const PAGE_TABLE: usize = 4096;
}

/// The clean mark's value (anything else: the last run did not stop cleanly).
const CLEAN_MARK: u64 = 0x434c_4541_4e53_544f; // "CLEANSTO"

/// Page-table value of a page inside a large item's run (not its first page).
pub(crate) const LARGE_TAIL: u8 = u8::MAX;

/// CAS values reserved at a time: the high-water mark is persisted once per block.
pub(crate) const CAS_BLOCK: u64 = 1 << 20;

/// Header bytes a pool of `page_count` slab pages needs: the fixed part and one
/// page-table byte per page, in whole 4096-byte blocks.
pub(crate) fn header_bytes(page_count: usize) -> usize {
    (at::PAGE_TABLE + page_count).next_multiple_of(4096)
}

/// What a pool must agree on with the engine that opens it; any difference would make
/// its records misread.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PoolGeometry {
    pub page_bytes: u32,
    pub page_count: u32,
    pub item_header_bytes: u32,
    pub item_size_max: u32,
    pub chunk_bytes: Vec<u32>,
}

impl PoolGeometry {
    pub fn new(geometry: &Geometry, page_count: usize, item_size_max: usize) -> PoolGeometry {
        PoolGeometry {
            page_bytes: crate::config::SLAB_PAGE_SIZE_BYTES as u32,
            page_count: page_count as u32,
            item_header_bytes: ITEM_HEADER_BYTES as u32,
            item_size_max: item_size_max as u32,
            chunk_bytes: geometry.chunk_bytes[1..]
                .iter()
                .map(|&c| c as u32)
                .collect(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 4 * (SLAB_CLASSES_MAX + 1));
        for v in [
            self.page_bytes,
            self.page_count,
            self.item_header_bytes,
            self.item_size_max,
            self.chunk_bytes.len() as u32,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for &c in &self.chunk_bytes {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<PoolGeometry> {
        let word = |i: usize| -> Option<u32> {
            Some(u32::from_le_bytes(
                bytes.get(4 * i..4 * i + 4)?.try_into().ok()?,
            ))
        };
        let classes = word(4)? as usize;
        if classes > SLAB_CLASSES_MAX + 1 {
            return None;
        }
        Some(PoolGeometry {
            page_bytes: word(0)?,
            page_count: word(1)?,
            item_header_bytes: word(2)?,
            item_size_max: word(3)?,
            chunk_bytes: (0..classes).map(|c| word(5 + c)).collect::<Option<_>>()?,
        })
    }

    /// What differs in `pool` (as written in a pool's header) from `self` (what this
    /// start needs), as settings with their old and new values (empty when they agree).
    /// A change of the chunk sizes is put down to the flags they were made from, as the
    /// pool's settings block recorded them (`pool_settings`); when that says nothing (an
    /// older pool, or a build that computes classes differently) the classes themselves
    /// are named.
    fn changes(
        &self,
        pool: &PoolGeometry,
        settings: &PoolSettings,
        pool_settings: Option<&PoolSettings>,
    ) -> Vec<SettingChange> {
        let mut out = Vec::new();
        let mut field = |name: &'static str, flag: &'static str, now: u64, was: u64| {
            if now != was {
                out.push(SettingChange::new(name, flag, was, now));
            }
        };
        let slow_bytes = |g: &PoolGeometry| u64::from(g.page_count) * u64::from(g.page_bytes);
        field(
            "slow_size",
            "--slow-size",
            slow_bytes(self),
            slow_bytes(pool),
        );
        field(
            "slab_page_size",
            "a build constant",
            self.page_bytes.into(),
            pool.page_bytes.into(),
        );
        field(
            "item_header_bytes",
            "a build constant",
            self.item_header_bytes.into(),
            pool.item_header_bytes.into(),
        );
        field(
            "item_size_max",
            "-I",
            self.item_size_max.into(),
            pool.item_size_max.into(),
        );
        if self.chunk_bytes != pool.chunk_bytes {
            let explained = pool_settings.map_or_else(Vec::new, |p| settings.changes(p));
            if !explained.is_empty() {
                out.extend(explained);
            } else if self.item_size_max == pool.item_size_max {
                // -I sets the large class's nominal chunk: its change explains that one.
                let list = |c: &[u32]| {
                    let sizes: Vec<String> = c.iter().map(u32::to_string).collect();
                    format!("{} classes {}", c.len(), sizes.join("-"))
                };
                out.push(SettingChange {
                    name: "slab_classes",
                    flag: "-n, -f, -o slab_chunk_max, -o slab_sizes",
                    pool: list(&pool.chunk_bytes),
                    now: list(&self.chunk_bytes),
                });
            }
        }
        debug_assert!(
            (self == pool) == out.is_empty(),
            "every geometry difference is named"
        );
        out
    }
}

/// The flags the chunk sizes were made from, recorded in the header's settings block so
/// that a start with other chunk sizes can say which flag changed. Never compared to
/// decide anything: only the geometry decides whether records can be read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PoolSettings {
    pub chunk_size_min_bytes: u64,
    pub growth_factor: f64,
    pub slab_chunk_max_bytes: u64,
    /// Empty: not set (the classes come from `-n` and `-f`).
    pub slab_sizes: Vec<u64>,
}

impl PoolSettings {
    pub fn new(config: &EngineConfig) -> PoolSettings {
        PoolSettings {
            chunk_size_min_bytes: config.chunk_size_min_bytes as u64,
            growth_factor: config.growth_factor,
            slab_chunk_max_bytes: config.slab_chunk_max_bytes as u64,
            slab_sizes: config
                .slab_sizes
                .iter()
                .flatten()
                .map(|&s| s as u64)
                .collect(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for v in [
            self.chunk_size_min_bytes,
            self.growth_factor.to_bits(),
            self.slab_chunk_max_bytes,
            self.slab_sizes.len() as u64,
        ]
        .into_iter()
        .chain(self.slab_sizes.iter().copied())
        {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// The settings block at the start of `bytes` whose checksum is `checksum`; `None`
    /// when it does not check out (a pool written before the block existed, or damaged).
    fn decode(bytes: &[u8], checksum: u64) -> Option<PoolSettings> {
        let word = |i: usize| le_u64(bytes, 8 * i);
        let count = usize::try_from(word(3)?).ok()?;
        if count > SLAB_CLASSES_MAX {
            return None;
        }
        let settings = PoolSettings {
            chunk_size_min_bytes: word(0)?,
            growth_factor: f64::from_bits(word(1)?),
            slab_chunk_max_bytes: word(2)?,
            slab_sizes: (0..count).map(|i| word(4 + i)).collect::<Option<_>>()?,
        };
        (xxhash_rust::xxh3::xxh3_64(&settings.encode()) == checksum).then_some(settings)
    }

    /// What differs in `pool` from `self`.
    fn changes(&self, pool: &PoolSettings) -> Vec<SettingChange> {
        let mut out = Vec::new();
        if self.chunk_size_min_bytes != pool.chunk_size_min_bytes {
            out.push(SettingChange::new(
                "chunk_size",
                "-n",
                pool.chunk_size_min_bytes,
                self.chunk_size_min_bytes,
            ));
        }
        if self.growth_factor.to_bits() != pool.growth_factor.to_bits() {
            out.push(SettingChange::new(
                "growth_factor",
                "-f",
                pool.growth_factor,
                self.growth_factor,
            ));
        }
        if self.slab_chunk_max_bytes != pool.slab_chunk_max_bytes {
            out.push(SettingChange::new(
                "slab_chunk_max",
                "-o slab_chunk_max",
                pool.slab_chunk_max_bytes,
                self.slab_chunk_max_bytes,
            ));
        }
        if self.slab_sizes != pool.slab_sizes {
            let list = |sizes: &[u64]| {
                if sizes.is_empty() {
                    "none".to_string()
                } else {
                    let sizes: Vec<String> = sizes.iter().map(u64::to_string).collect();
                    sizes.join("-")
                }
            };
            out.push(SettingChange {
                name: "slab_sizes",
                flag: "-o slab_sizes",
                pool: list(&pool.slab_sizes),
                now: list(&self.slab_sizes),
            });
        }
        out
    }
}

/// One setting a pool was written with that differs from this start's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingChange {
    /// The name `stats settings` gives it (memcached's where memcached has one).
    pub name: &'static str,
    /// The flag that sets it.
    pub flag: &'static str,
    /// Its value when the pool was written.
    pub pool: String,
    /// Its value now.
    pub now: String,
}

impl SettingChange {
    fn new(
        name: &'static str,
        flag: &'static str,
        pool: impl std::fmt::Display,
        now: impl std::fmt::Display,
    ) -> SettingChange {
        SettingChange {
            name,
            flag,
            pool: pool.to_string(),
            now: now.to_string(),
        }
    }
}

impl std::fmt::Display for SettingChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}) was {}, now {}",
            self.name, self.flag, self.pool, self.now
        )
    }
}

/// Why a pool of ours cannot be read as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Written with other settings (its geometry differs from this start's).
    Settings(Vec<SettingChange>),
    /// Written by another pool format version.
    FormatVersion { pool: u32, now: u32 },
    /// Our magic, but a geometry block that does not check out.
    HeaderDamaged,
    /// Made at a Unix time later than this start's clock zero: the wall clock went back
    /// between the two runs (a bad real-time clock at boot, an NTP step), so the records'
    /// relative times (their TTLs) cannot be read.
    ClockWentBack {
        pool_zero_unix_s: u64,
        now_zero_unix_s: u64,
    },
}

impl Mismatch {
    /// The `stats` token for it (`pool_format_reason`).
    pub fn reason(&self) -> &'static str {
        match self {
            Mismatch::Settings(_) => "settings_changed",
            Mismatch::FormatVersion { .. } => "format_version",
            Mismatch::HeaderDamaged => "header_damaged",
            Mismatch::ClockWentBack { .. } => "clock_went_back",
        }
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Settings(changes) => {
                let changes: Vec<String> = changes.iter().map(ToString::to_string).collect();
                write!(f, "was written with other settings: {}", changes.join("; "))
            }
            Mismatch::FormatVersion { pool, now } => write!(
                f,
                "was written by pool format version {pool}; this fogcached reads version {now}"
            ),
            Mismatch::HeaderDamaged => {
                write!(
                    f,
                    "has a damaged header (its geometry block does not check out)"
                )
            }
            Mismatch::ClockWentBack {
                pool_zero_unix_s,
                now_zero_unix_s,
            } => write!(
                f,
                "counts time from Unix time {pool_zero_unix_s}, later than this start's \
                 {now_zero_unix_s}: the wall clock went back, so its items' expiry times \
                 cannot be read"
            ),
        }
    }
}

/// What the last start did with the pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PoolStart {
    /// It matched: its records were recovered.
    #[default]
    Recovered,
    /// It held nothing (a new or empty file, zeros): formatted.
    New,
    /// `--slow-pool-reset`: formatted anew.
    ResetRequested,
    /// A format of it had been interrupted (it held no items yet): formatted again.
    FormatInterrupted,
    /// It could not be read as it was (`--slow-pool-mismatch reset`): formatted, a cold
    /// start.
    Mismatch(Mismatch),
}

impl PoolStart {
    /// The `stats` token for it (`pool_format_reason`).
    pub fn reason(&self) -> &'static str {
        match self {
            PoolStart::Recovered => "none",
            PoolStart::New => "new_pool",
            PoolStart::ResetRequested => "slow_pool_reset",
            PoolStart::FormatInterrupted => "format_interrupted",
            PoolStart::Mismatch(m) => m.reason(),
        }
    }

    /// The settings whose change made the start cold, comma-separated (`stats`
    /// `pool_settings_changed`), or `none`.
    pub fn settings_changed(&self) -> String {
        match self {
            PoolStart::Mismatch(Mismatch::Settings(changes)) => {
                changes.iter().map(|c| c.name).collect::<Vec<_>>().join(",")
            }
            _ => "none".to_string(),
        }
    }

    pub fn formatted(&self) -> bool {
        *self != PoolStart::Recovered
    }

    /// The start-up log's words, after the pool's name, about a pool that had something
    /// in it and was formatted (`None` for a recovered or a new pool): what it was and
    /// what became of it.
    pub fn cold_start_note(&self) -> Option<String> {
        match self {
            PoolStart::Recovered | PoolStart::New => None,
            PoolStart::ResetRequested => {
                Some("was formatted anew (--slow-pool-reset): its items were discarded".to_string())
            }
            PoolStart::FormatInterrupted => Some(
                "had a format interrupted before it held any items: formatted again".to_string(),
            ),
            PoolStart::Mismatch(m) => Some(format!(
                "{m}: starting with a clean cache (the pool was formatted anew and its items \
                 discarded; --slow-pool-mismatch refuse refuses such a start instead)"
            )),
        }
    }
}

/// What a pool's fixed header (its first 4096 bytes) says, against what this start
/// needs.
#[derive(Debug, PartialEq)]
enum Assessment {
    /// No magic: not a fogcached pool (and not blank, or it would not be asked).
    Foreign,
    /// The magic and version 0: a format never finished.
    Interrupted,
    Mismatch(Mismatch),
    /// Readable as it is; `settings_current`: its settings block says what this start's
    /// settings are (else it is rewritten, so later messages are right).
    Matches {
        settings_current: bool,
    },
}

fn assess(
    fixed: &[u8],
    geometry: &PoolGeometry,
    settings: &PoolSettings,
    clock_zero_unix_s: u64,
) -> Assessment {
    if fixed.get(at::MAGIC..at::MAGIC + 8) != Some(&MAGIC[..]) {
        return Assessment::Foreign;
    }
    let version = le_u64(fixed, at::VERSION_AND_SIZE).unwrap_or(0) as u32;
    if version == VERSION_FORMATTING {
        return Assessment::Interrupted;
    }
    if version != FORMAT_VERSION {
        return Assessment::Mismatch(Mismatch::FormatVersion {
            pool: version,
            now: FORMAT_VERSION,
        });
    }
    let stored = fixed
        .get(at::GEOMETRY..at::SETTINGS_CHECKSUM)
        .and_then(PoolGeometry::decode)
        .filter(|g| {
            le_u64(fixed, at::GEOMETRY_CHECKSUM) == Some(xxhash_rust::xxh3::xxh3_64(&g.encode()))
        });
    let Some(stored) = stored else {
        return Assessment::Mismatch(Mismatch::HeaderDamaged);
    };
    let stored_settings = le_u64(fixed, at::SETTINGS_CHECKSUM).and_then(|checksum| {
        PoolSettings::decode(fixed.get(at::SETTINGS..at::PAGE_TABLE)?, checksum)
    });
    let changes = geometry.changes(&stored, settings, stored_settings.as_ref());
    if !changes.is_empty() {
        return Assessment::Mismatch(Mismatch::Settings(changes));
    }
    // Records keep times relative to the pool's zero, which becomes the engine's: a zero
    // later than the engine's own cannot be (`Clock::rebase`).
    let pool_zero_unix_s = le_u64(fixed, at::CLOCK_BASE).unwrap_or(0);
    if pool_zero_unix_s > clock_zero_unix_s {
        return Assessment::Mismatch(Mismatch::ClockWentBack {
            pool_zero_unix_s,
            now_zero_unix_s: clock_zero_unix_s,
        });
    }
    Assessment::Matches {
        settings_current: stored_settings.as_ref() == Some(settings),
    }
}

/// What to do with a pool, from what it holds and the flags.
#[derive(Debug, PartialEq)]
enum Decision {
    Recover {
        settings_current: bool,
    },
    Format(PoolStart),
    /// The operator's message.
    Refuse(String),
}

fn decide(assessment: Assessment, reset: bool, policy: PoolMismatch, describe: &str) -> Decision {
    match assessment {
        // Whatever the flags: a file of someone else's is never formatted.
        Assessment::Foreign => Decision::Refuse(format!(
            "{describe} is not a fogcached pool (it holds data and no pool header): refused, \
             and left as it was. fogcached formats only a new or empty file, a file of \
             zeros, or a pool of its own, whatever --slow-pool-reset or \
             --slow-pool-mismatch say: check --slow-path/--data-dir, or remove the file if \
             its data is not wanted"
        )),
        _ if reset => Decision::Format(PoolStart::ResetRequested),
        Assessment::Interrupted => Decision::Format(PoolStart::FormatInterrupted),
        Assessment::Mismatch(m) => match policy {
            PoolMismatch::Reset => Decision::Format(PoolStart::Mismatch(m)),
            PoolMismatch::Refuse => Decision::Refuse(format!(
                "{describe} {m}; refused (--slow-pool-mismatch refuse), the pool left as it \
                 was: start with the settings it was written with to serve its items, or \
                 with --slow-pool-mismatch reset (or --slow-pool-reset once) to start with a \
                 clean cache, or point --slow-path/--data-dir elsewhere"
            )),
        },
        Assessment::Matches { settings_current } => Decision::Recover { settings_current },
    }
}

/// Judges what a pool's file or device holds before the open writes anything to it
/// (`tier::Region::open_with_header`'s vet): refuses a file that is not a pool, and,
/// under `--slow-pool-mismatch refuse`, a pool that would be formatted, so that both
/// are left exactly as they were.
pub(crate) fn vet(
    contents: tier::PoolContents<'_>,
    geometry: &PoolGeometry,
    settings: &PoolSettings,
    reset: bool,
    policy: PoolMismatch,
    clock_zero_unix_s: u64,
    describe: &str,
) -> Result<(), String> {
    let tier::PoolContents::Data(bytes) = contents else {
        return Ok(());
    };
    let assessment = assess(bytes, geometry, settings, clock_zero_unix_s);
    match decide(assessment, reset, policy, describe) {
        Decision::Refuse(message) => Err(message),
        Decision::Recover { .. } | Decision::Format(_) => Ok(()),
    }
}

/// The little-endian u64 at `offset` of `bytes`, if it is there.
fn le_u64(bytes: &[u8], offset: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        bytes.get(offset..offset + 8)?.try_into().ok()?,
    ))
}

/// Why a pool cannot be used as it is.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{0}")]
    Refused(String),
    #[error("cannot write the pool header: {0}")]
    Io(String),
}

/// An open pool: its header, through which the page table and the persistent state are
/// read and written.
pub(crate) struct Pool {
    header: tier::PoolHeader,
    page_count: usize,
    generation: u64,
    /// The last run stopped cleanly (read at open; the mark is cleared right after).
    was_clean: bool,
    /// What this open did: recovered the pool, or formatted it and why.
    start: PoolStart,
}

impl Pool {
    /// Opens the pool whose header is `header` (already past `vet`): formats it when it
    /// held nothing, when `reset`, when a format was interrupted, or when it cannot be
    /// read as it is and `policy` is `Reset`; refuses it with what differs when `policy`
    /// is `Refuse`; else recovers it. `now_unix_s`: the clock base of a new pool;
    /// `clock_zero_unix_s`: the engine clock's zero, which a recovered pool's may not follow.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        header: tier::PoolHeader,
        geometry: &PoolGeometry,
        settings: &PoolSettings,
        reset: bool,
        policy: PoolMismatch,
        now_unix_s: u64,
        clock_zero_unix_s: u64,
        describe: &str,
    ) -> Result<Pool, PoolError> {
        let page_count = geometry.page_count as usize;
        let mut pool = Pool {
            header,
            page_count,
            generation: 0,
            was_clean: false,
            start: PoolStart::Recovered,
        };
        if pool.header.len() < header_bytes(page_count) {
            return Err(PoolError::Refused(format!(
                "{describe}: the pool header holds {} bytes, a pool of {page_count} pages needs {}",
                pool.header.len(),
                header_bytes(page_count)
            )));
        }
        if pool.header.blank() {
            pool.format(geometry, settings, now_unix_s, PoolStart::New)?;
            return Ok(pool);
        }
        let fixed = pool.read_bytes(0, at::PAGE_TABLE);
        let assessment = assess(&fixed, geometry, settings, clock_zero_unix_s);
        let settings_current = match decide(assessment, reset, policy, describe) {
            Decision::Refuse(message) => return Err(PoolError::Refused(message)),
            Decision::Format(start) => {
                pool.format(geometry, settings, now_unix_s, start)?;
                return Ok(pool);
            }
            Decision::Recover { settings_current } => settings_current,
        };
        if !settings_current {
            pool.write_settings(settings);
            pool.persist(
                at::SETTINGS_CHECKSUM,
                at::PAGE_TABLE - at::SETTINGS_CHECKSUM,
            )?;
        }
        pool.generation = pool.word(at::GENERATION);
        pool.was_clean = pool.word(at::CLEAN) == CLEAN_MARK;
        // From now until a clean stop, a restart must treat the pool as crashed.
        pool.set_word(at::CLEAN, 0);
        pool.persist(at::CLEAN, 8)?;
        Ok(pool)
    }

    /// Formats the pool, so that a crash at any point leaves either a pool that is
    /// formatted again at the next start (the magic with version 0) or a complete one:
    /// the magic and version 0 first, then the header's fields, then the version.
    fn format(
        &mut self,
        geometry: &PoolGeometry,
        settings: &PoolSettings,
        now_unix_s: u64,
        start: PoolStart,
    ) -> Result<(), PoolError> {
        // The generation seeds every record checksum: records left in the file by an
        // earlier format never check out.
        let generation = random_u64() | 1;
        self.generation = generation;
        self.start = start;
        for (i, &b) in MAGIC.iter().enumerate() {
            self.header.bytes()[at::MAGIC + i].store(b, Ordering::Relaxed);
        }
        self.set_word(at::VERSION_AND_SIZE, u64::from(VERSION_FORMATTING));
        self.persist(0, 16)?;
        for byte in &self.header.bytes()[at::GENERATION..] {
            byte.store(0, Ordering::Relaxed);
        }
        let encoded = geometry.encode();
        for (i, &b) in encoded.iter().enumerate() {
            self.header.bytes()[at::GEOMETRY + i].store(b, Ordering::Relaxed);
        }
        self.set_word(at::GEOMETRY_CHECKSUM, xxhash_rust::xxh3::xxh3_64(&encoded));
        self.write_settings(settings);
        self.set_word(at::GENERATION, generation);
        // memcached's relative clock starts two seconds in the past (see clock.rs).
        self.set_word(at::CLOCK_BASE, now_unix_s.saturating_sub(2));
        self.set_word(at::CAS_HIGH_WATER, 0);
        self.persist(0, self.header.len())?;
        // The version last: until it is on the medium, the pool reads as unfinished.
        self.set_word(
            at::VERSION_AND_SIZE,
            u64::from(FORMAT_VERSION) | ((self.header.len() as u64) << 32),
        );
        self.persist(at::VERSION_AND_SIZE, 8)
    }

    /// Writes the settings block (not persisted: the caller does).
    fn write_settings(&self, settings: &PoolSettings) {
        let encoded = settings.encode();
        debug_assert!(at::SETTINGS + encoded.len() <= at::PAGE_TABLE);
        for (i, &b) in encoded.iter().enumerate() {
            self.header.bytes()[at::SETTINGS + i].store(b, Ordering::Relaxed);
        }
        self.set_word(at::SETTINGS_CHECKSUM, xxhash_rust::xxh3::xxh3_64(&encoded));
    }

    fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        self.header.bytes()[offset..offset + len]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    fn word(&self, offset: usize) -> u64 {
        self.header.u64_at(offset).load(Ordering::Acquire)
    }

    fn set_word(&self, offset: usize, value: u64) {
        self.header.u64_at(offset).store(value, Ordering::Release);
    }

    fn persist(&self, offset: usize, len: usize) -> Result<(), PoolError> {
        self.header
            .persist(offset, len)
            .map_err(|e| PoolError::Io(e.to_string()))
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn was_clean(&self) -> bool {
        self.was_clean
    }

    /// Whether this open formatted the pool (there is nothing to recover).
    pub fn formatted(&self) -> bool {
        self.start.formatted()
    }

    /// What this open did with the pool.
    pub fn start(&self) -> &PoolStart {
        &self.start
    }

    pub fn clock_base_unix_s(&self) -> u64 {
        self.word(at::CLOCK_BASE)
    }

    /// The page-table entry of slab page `page`.
    pub fn page_class(&self, page: usize) -> &AtomicU8 {
        debug_assert!(page < self.page_count, "page {page} beyond the pool");
        &self.header.bytes()[at::PAGE_TABLE + page]
    }

    /// The CAS high-water mark: every CAS handed out so far is below it.
    pub fn cas_high_water(&self) -> u64 {
        self.word(at::CAS_HIGH_WATER)
    }

    /// Raises the CAS high-water mark to `to` and persists it (once per `CAS_BLOCK`).
    pub fn raise_cas_high_water(&self, to: u64) -> Result<(), PoolError> {
        self.header
            .u64_at(at::CAS_HIGH_WATER)
            .fetch_max(to, Ordering::AcqRel);
        self.persist(at::CAS_HIGH_WATER, 8)
    }

    /// The persisted `flush_all` state: (oldest live CAS, relative time of a delayed
    /// flush).
    pub fn flush_state(&self) -> (u64, u32) {
        (
            self.word(at::FLUSH_OLDEST_CAS),
            self.word(at::FLUSH_AT_S) as u32,
        )
    }

    /// Persists the `flush_all` state before the flush is acknowledged.
    pub fn store_flush_state(&self, oldest_cas: u64, flush_at_s: u32) -> Result<(), PoolError> {
        self.set_word(at::FLUSH_OLDEST_CAS, oldest_cas);
        self.set_word(at::FLUSH_AT_S, u64::from(flush_at_s));
        self.persist(at::FLUSH_OLDEST_CAS, 16)
    }

    /// Persists the page table (before the clean mark, at a clean stop).
    pub fn persist_page_table(&self) -> Result<(), PoolError> {
        self.persist(at::PAGE_TABLE, self.page_count)
    }

    /// Marks the pool cleanly stopped (everything it holds is flushed).
    pub fn mark_clean(&self) -> Result<(), PoolError> {
        self.set_word(at::CLEAN, CLEAN_MARK);
        self.persist(at::CLEAN, 8)
    }
}

/// The checksum that makes the item with header `h` and key-and-value bytes `key_value`
/// a valid record of the pool of `generation`. Never 0 (0 marks "not a record").
pub(crate) fn record_checksum(generation: u64, h: HeaderRead<'_>, key_value: &[u8]) -> u64 {
    let mut fixed = [0u8; 21];
    fixed[0] = h.key_len();
    fixed[1..5].copy_from_slice(&h.value_len().to_le_bytes());
    fixed[5..9].copy_from_slice(&h.client_flags().to_le_bytes());
    fixed[9..13].copy_from_slice(&h.exptime_rel_s().to_le_bytes());
    fixed[13..21].copy_from_slice(&h.cas().to_le_bytes());
    let fields = xxhash_rust::xxh3::xxh3_64_with_seed(&fixed, generation);
    match xxhash_rust::xxh3::xxh3_64_with_seed(key_value, fields) {
        0 => 1,
        sum => sum,
    }
}

/// A random 64-bit value (the pool generation): the standard library's per-process
/// random hash keys, mixed with the time.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(nanos);
    hasher.finish()
}

/// Group commit of a pool on a plain file (`--slow-durability power`): record
/// invalidations are counted as they are made; a flush covers every change counted
/// before it began, and callers whose changes an earlier or concurrent flush covered do
/// not flush again, so all the connections of all the workers share each `msync`.
pub(crate) struct PendingFlush {
    /// Invalidations made so far (monotonic).
    pub changes: AtomicU64,
    /// `changes` as it was when the last completed flush began: everything up to it is
    /// on the file.
    pub durable: AtomicU64,
    /// One flush at a time; the others wait for it and usually find themselves covered.
    pub flushing: crate::lock::Mutex<()>,
}

impl Default for PendingFlush {
    fn default() -> PendingFlush {
        PendingFlush {
            changes: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            flushing: crate::lock::Mutex::new(crate::lock::Rank::Flushing, ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry_of(config: &EngineConfig) -> (PoolGeometry, PoolSettings) {
        let geometry = Geometry::new(config);
        (
            PoolGeometry::new(&geometry, 8, config.item_size_max_bytes),
            PoolSettings::new(config),
        )
    }

    /// A change of the chunk sizes is named by the flag that made it when the pool
    /// recorded its settings, by the classes themselves when it did not (a pool written
    /// before the settings block), and not at all when `-I` explains it (it sets the
    /// large class's nominal chunk).
    #[test]
    fn a_changed_geometry_is_put_down_to_the_flag_that_changed() {
        let base = EngineConfig::default();
        let (pool, pool_settings) = geometry_of(&base);
        let (now, settings) = geometry_of(&EngineConfig {
            growth_factor: 1.5,
            ..base.clone()
        });
        let names = |changes: Vec<SettingChange>| -> Vec<&'static str> {
            changes.iter().map(|c| c.name).collect()
        };
        assert_eq!(
            now.changes(&pool, &settings, Some(&pool_settings))
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["growth_factor (-f) was 1.25, now 1.5"]
        );
        assert_eq!(names(now.changes(&pool, &settings, None)), ["slab_classes"]);
        let (bigger_items, settings) = geometry_of(&EngineConfig {
            item_size_max_bytes: 2 << 20,
            ..base.clone()
        });
        assert_eq!(
            names(bigger_items.changes(&pool, &settings, None)),
            ["item_size_max"]
        );
        assert!(pool.changes(&pool, &pool_settings, None).is_empty());
        // The settings block reads back, and only with its checksum.
        let encoded = pool_settings.encode();
        let checksum = xxhash_rust::xxh3::xxh3_64(&encoded);
        assert_eq!(
            PoolSettings::decode(&encoded, checksum),
            Some(pool_settings.clone())
        );
        assert_eq!(PoolSettings::decode(&encoded, checksum ^ 1), None);
    }
}
