//! Engine settings: every knob has a name (memcached's where one exists), a default and a
//! line in `stats settings`.

use thiserror::Error;

/// Size of one slab page. memcached's `slab_page_size`.
pub const SLAB_PAGE_SIZE_BYTES: usize = 1024 * 1024;

/// memcached's hard ceiling on the number of slab classes.
pub const SLAB_CLASSES_MAX: usize = 63;

/// Keys longer than this are refused (memcached's `KEY_MAX_LENGTH`).
pub const KEY_LENGTH_MAX_BYTES: usize = 250;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// `-m`: bytes of slab memory the cache may use.
    pub memory_limit_bytes: u64,
    /// `--dram-max`: the largest DRAM tier `cache_memlimit` may set at run time; the
    /// tier's address space is reserved for it at start-up (untouched memory costs
    /// nothing). 0 = `memory_limit_bytes`.
    pub dram_max_bytes: u64,
    /// `-I`: the largest item (header + key + value) that can be stored.
    pub item_size_max_bytes: usize,
    /// `-o slab_chunk_max`: the largest slab chunk; larger items are still stored.
    pub slab_chunk_max_bytes: usize,
    /// `-f`: growth factor between slab classes.
    pub growth_factor: f64,
    /// `-n`: minimum space for key + value + flags in the smallest chunk.
    pub chunk_size_min_bytes: usize,
    /// `-C` turns CAS off (CAS values reported as 0).
    pub cas_enabled: bool,
    /// `-M` turns eviction off: stores fail with out-of-memory instead.
    pub evictions_enabled: bool,
    /// `-o hot_lru_pct`: share of a class's items HOT may hold.
    pub hot_lru_pct: u32,
    /// `-o warm_lru_pct`: share of a class's items WARM may hold.
    pub warm_lru_pct: u32,
    /// `-o hot_max_factor`: HOT items older than COLD's tail age times this move on.
    pub hot_max_factor: f64,
    /// `-o warm_max_factor`: WARM items older than COLD's tail age times this move on.
    pub warm_max_factor: f64,
    /// `-o lru_maintainer` / `no_lru_maintainer`.
    pub lru_maintainer: bool,
    /// `-o lru_crawler` / `no_lru_crawler`.
    pub lru_crawler: bool,
    /// `-o slab_reassign` / `no_slab_reassign`.
    pub slab_reassign: bool,
    /// `-o slab_automove=N`: 0 off, 1 conservative, 2 aggressive.
    pub slab_automove: u32,
    /// `-o hashpower`: log2 of the initial number of index buckets.
    pub hashpower_initial: u32,
    /// `-o slab_sizes=<a>-<b>-...`: the chunk sizes of the classes (ascending, each
    /// rounded up to 8 bytes), instead of the ones `-f` and `-n` make; `slab_chunk_max`
    /// is the class after them, as in memcached.
    pub slab_sizes: Option<Vec<usize>>,
    /// `-o lru_crawler_sleep` (and `lru_crawler sleep`): microseconds the crawler
    /// pauses after every [`CRAWLER_ITEMS_PER_SLEEP`] items it walks; 0 = never.
    pub lru_crawler_sleep_us: u32,
    /// `-o lru_crawler_tocrawl` (and `lru_crawler tocrawl`): items a pass walks at most
    /// per LRU segment of a class, from its tail; 0 = all of them.
    pub lru_crawler_tocrawl: u32,
    /// `-o track_sizes` (and `stats sizes_enable`): `stats sizes` lists the histogram of
    /// item sizes.
    pub track_sizes: bool,
    /// `--slow-size`, `--slow-path`, `--slow-numa-node`, `--slow-cost`: the slow tier's
    /// region; `None` (or a size under one slab page) is DRAM only. `memory_limit_bytes`
    /// is the DRAM tier (`--dram`, `-m`); 0 with a slow tier is slow-tier only.
    pub slow_tier: Option<tier::RegionSpec>,
    /// `--policy`: how items are placed across the tiers.
    pub policy: PlacementPolicy,
    /// `--no-migration` sets this to false: every item stays in the tier it was first
    /// written to (the papers' "without dynamic relocation").
    pub migration_enabled: bool,
    /// `--dram-residency-max-s`: a DRAM COLD tail item not accessed for longer than this
    /// is demoted even when DRAM has room (Fogcached's DRAM age limit); 0 = off.
    pub dram_residency_max_s: u32,
    /// Age-based demotion only runs while DRAM holds more than this share (percent) of
    /// its pages, so it can never drain DRAM (the defect of seed 001).
    pub dram_low_water_pct: u32,
    /// `--move-queue-max`: capacity of each Move queue (Move-to-slow, Move-to-DRAM);
    /// requests beyond it are dropped and counted (shed work, not memory).
    pub move_queue_max: usize,
    /// `--migration-threads`: threads draining the Move queues.
    pub migration_threads: usize,
    /// `--access-period`: requests per period of the decayed access counters that
    /// promotion admission compares (HMCached's logical period); 0 = twice the number
    /// of items in DRAM (re-read every maintainer pass).
    pub access_period_requests: u64,
    /// `--slow-pool-reset`: format the slow tier's pool anew, discarding what it holds,
    /// even when it would be recovered. Never a file that is not a fogcached pool.
    pub slow_pool_reset: bool,
    /// `--slow-pool-mismatch`: what a start does with a pool written with other settings
    /// (or another format version, or a damaged header): start cold, or refuse.
    pub slow_pool_mismatch: PoolMismatch,
    /// `--slow-durability`: what a pool on a plain file survives (see `pool.rs`).
    pub slow_durability: Durability,
    /// `--promotion-margin`: while DRAM is full, a promotion is admitted only if the
    /// item's decayed access count exceeds that of the DRAM item it would displace by
    /// at least this much (Dual-LRU). 0 admits every promotion.
    pub promotion_margin: u8,
    /// `--mq-queues`: queues of the hotspot policy's multi-queue replacement in DRAM
    /// (queue i holds items whose access count is in [2^i, 2^(i+1))).
    pub mq_queues: usize,
    /// `--no-benefit-reassign` sets this to false: the hotspot policy leaves DRAM page
    /// moves to the slab automover's rules instead of planning them by benefit
    /// (HMCached section 3.5).
    pub benefit_reassign: bool,
    /// `--uniform-dram-share`: the share of keys the `uniform` policy (HM-UNI) homes in
    /// DRAM, in parts per million. HMCached defines HM-UNI by "the ratio of the DRAM
    /// size to the dataset size", which only the operator knows; `None` takes the
    /// ratio of DRAM's pages to both tiers' pages (exact when the slow tier holds just
    /// the rest of the data, low when it is larger).
    pub uniform_dram_share_ppm: Option<u32>,
}

/// `--policy`: declared by the policy registry (`policy/mod.rs`).
pub use crate::policy::PlacementPolicy;

/// `--slow-pool-mismatch`: what a start does with a pool it cannot read as it is (written
/// with other settings, by another format version, or with a damaged header). A file
/// that is not a fogcached pool at all is refused whatever this says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PoolMismatch {
    /// Format it anew and start with a clean cache, saying why (memcached's restart file
    /// does the same): a changed flag never keeps a cache down.
    #[default]
    Reset,
    /// Refuse to start, leaving the pool as it was, for operators who would rather go
    /// back to the old settings than lose the items.
    Refuse,
}

impl PoolMismatch {
    pub const NAMES: [&'static str; 2] = ["reset", "refuse"];

    pub fn parse(name: &str) -> Option<PoolMismatch> {
        match name {
            "reset" => Some(PoolMismatch::Reset),
            "refuse" => Some(PoolMismatch::Refuse),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            PoolMismatch::Reset => "reset",
            PoolMismatch::Refuse => "refuse",
        }
    }
}

/// `--slow-durability`: how far a persistent pool's records are flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// `power` where it is cheap (a `MAP_SYNC` mapping: DAX, where a flush is a few
    /// cache-line write-backs), `crash` where it would cost an `msync` per turn of the
    /// workers (a plain file, where page-cache write-back is disk-bound).
    #[default]
    Auto,
    /// Stores are ordered so a process crash (`kill -9`) never leaves a torn or stale
    /// record; on a plain file, a power loss may bring back records invalidated by the
    /// last requests.
    Crash,
    /// As `Crash`, and invalidations are flushed before the requests that caused them are
    /// answered, so a power loss never brings back a deleted or overwritten value either:
    /// on DAX by cache-line flushes where the stores are made; on a plain file by an
    /// `msync` the workers' replies wait for, one shared by every connection of a turn.
    Power,
}

impl Durability {
    pub const NAMES: [&'static str; 3] = ["auto", "crash", "power"];

    pub fn parse(name: &str) -> Option<Durability> {
        match name {
            "auto" => Some(Durability::Auto),
            "crash" => Some(Durability::Crash),
            "power" => Some(Durability::Power),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Durability::Auto => "auto",
            Durability::Crash => "crash",
            Durability::Power => "power",
        }
    }

    /// The mode in force on a mapping that does (`synced`) or does not have `MAP_SYNC`.
    pub fn effective(&self, synced: bool) -> Durability {
        match self {
            Durability::Auto if synced => Durability::Power,
            Durability::Auto => Durability::Crash,
            other => *other,
        }
    }
}

/// Most queues the hotspot policy's multi-queue can have: its access counters
/// saturate at 31, so a sixth queue ([32, 64)) would never hold an item.
pub const MQ_QUEUES_MAX: usize = 5;

/// Items the crawler walks between two pauses of `lru_crawler_sleep_us` (memcached's
/// `crawls_persleep`).
pub const CRAWLER_ITEMS_PER_SLEEP: u64 = 1000;
/// The longest crawler pause memcached accepts: one second.
pub const CRAWLER_SLEEP_MAX_US: u32 = 1_000_000;
/// memcached aligns every chunk size to this.
pub const CHUNK_ALIGN_BYTES: usize = 8;

/// Bounds of the migration knobs (a queue or thread count outside them is a typo).
pub const MOVE_QUEUE_MAX_LIMIT: usize = 1 << 20;
pub const MIGRATION_THREADS_MAX: usize = 64;
/// Parts per million: the unit of [`EngineConfig::uniform_dram_share_ppm`].
pub const PPM: u32 = 1_000_000;

/// `1/4` or `0.25`: a fraction in (0, 1] (a share of memory or of keys, as the command
/// lines of the server and the simulator give it); `None` for anything else.
pub fn parse_fraction(text: &str) -> Option<f64> {
    let value = match text.split_once('/') {
        Some((num, den)) => num.trim().parse::<f64>().ok()? / den.trim().parse::<f64>().ok()?,
        None => text.trim().parse::<f64>().ok()?,
    };
    (value > 0.0 && value <= 1.0).then_some(value)
}

/// A fraction in (0, 1] as parts per million (at least 1).
pub fn fraction_to_ppm(fraction: f64) -> u32 {
    debug_assert!(fraction > 0.0 && fraction <= 1.0, "{fraction}");
    ((fraction * f64::from(PPM)).round() as u32).clamp(1, PPM)
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_limit_bytes: 64 * 1024 * 1024,
            dram_max_bytes: 0,
            item_size_max_bytes: 1024 * 1024,
            slab_chunk_max_bytes: SLAB_PAGE_SIZE_BYTES / 2,
            growth_factor: 1.25,
            chunk_size_min_bytes: 48,
            cas_enabled: true,
            evictions_enabled: true,
            hot_lru_pct: 20,
            warm_lru_pct: 40,
            hot_max_factor: 0.2,
            warm_max_factor: 2.0,
            lru_maintainer: true,
            lru_crawler: true,
            slab_reassign: true,
            slab_automove: 1,
            hashpower_initial: 16,
            slab_sizes: None,
            lru_crawler_sleep_us: 100,
            lru_crawler_tocrawl: 0,
            track_sizes: false,
            slow_tier: None,
            policy: PlacementPolicy::DualLru,
            migration_enabled: true,
            dram_residency_max_s: 0,
            dram_low_water_pct: 50,
            move_queue_max: 1024,
            migration_threads: 1,
            access_period_requests: 0,
            slow_pool_reset: false,
            slow_pool_mismatch: PoolMismatch::Reset,
            slow_durability: Durability::Auto,
            promotion_margin: 3,
            mq_queues: MQ_QUEUES_MAX,
            benefit_reassign: true,
            uniform_dram_share_ppm: None,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    #[error("growth factor (-f) must be greater than 1.0, got {0}")]
    GrowthFactor(f64),
    #[error("item size max (-I) must be between 1024 bytes and 1 GiB, got {0}")]
    ItemSizeMax(usize),
    #[error(
        "slab_chunk_max must be between 1024 bytes and the slab page size ({page}), got {got}"
    )]
    SlabChunkMax { got: usize, page: usize },
    #[error("hot_lru_pct + warm_lru_pct must be below 80, got {hot} + {warm}")]
    LruPercentages { hot: u32, warm: u32 },
    #[error("chunk size minimum (-n) must be at least 1, got {0}")]
    ChunkSizeMin(usize),
    #[error("slab_automove must be 0, 1 or 2, got {0}")]
    SlabAutomove(u32),
    #[error("hashpower must be between 12 and 32, got {0}")]
    Hashpower(u32),
    /// `-o slab_sizes`, in memcached's words.
    #[error("{0}")]
    SlabSizes(String),
    #[error("LRU crawler sleep must be between 0 and 1 second")]
    CrawlerSleep(u32),
    #[error("cannot reserve the cache memory: {0}")]
    Memory(String),
    #[error("cannot open the slow tier: {0}")]
    SlowTier(String),
    #[error("move queue max must be between 1 and {MOVE_QUEUE_MAX_LIMIT}, got {0}")]
    MoveQueueMax(usize),
    #[error("migration threads must be between 1 and {MIGRATION_THREADS_MAX}, got {0}")]
    MigrationThreads(usize),
    #[error("dram low-water percentage must be at most 100, got {0}")]
    DramLowWater(u32),
    #[error("mq queues must be between 1 and {MQ_QUEUES_MAX}, got {0}")]
    MqQueues(usize),
    #[error("the uniform policy's DRAM share must be in (0, 1], got {0} parts per million")]
    UniformDramShare(u32),
    #[error(
        "a tier may hold at most {limit} bytes (the index addresses 2 TiB per tier), got {got}"
    )]
    TierTooLarge { got: u64, limit: u64 },
}

impl EngineConfig {
    /// Checks the settings the way memcached does at start-up.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.growth_factor.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater) {
            return Err(ConfigError::GrowthFactor(self.growth_factor));
        }
        if self.item_size_max_bytes < 1024 || self.item_size_max_bytes > 1024 * 1024 * 1024 {
            return Err(ConfigError::ItemSizeMax(self.item_size_max_bytes));
        }
        if self.slab_chunk_max_bytes < 1024 || self.slab_chunk_max_bytes > SLAB_PAGE_SIZE_BYTES {
            return Err(ConfigError::SlabChunkMax {
                got: self.slab_chunk_max_bytes,
                page: SLAB_PAGE_SIZE_BYTES,
            });
        }
        if self.hot_lru_pct + self.warm_lru_pct >= 80 {
            return Err(ConfigError::LruPercentages {
                hot: self.hot_lru_pct,
                warm: self.warm_lru_pct,
            });
        }
        if self.chunk_size_min_bytes == 0 {
            return Err(ConfigError::ChunkSizeMin(self.chunk_size_min_bytes));
        }
        if self.slab_automove > 2 {
            return Err(ConfigError::SlabAutomove(self.slab_automove));
        }
        if !(12..=32).contains(&self.hashpower_initial) {
            return Err(ConfigError::Hashpower(self.hashpower_initial));
        }
        if let Some(sizes) = &self.slab_sizes {
            self.check_slab_sizes(sizes)?;
        }
        if self.lru_crawler_sleep_us > CRAWLER_SLEEP_MAX_US {
            return Err(ConfigError::CrawlerSleep(self.lru_crawler_sleep_us));
        }
        if self.move_queue_max == 0 || self.move_queue_max > MOVE_QUEUE_MAX_LIMIT {
            return Err(ConfigError::MoveQueueMax(self.move_queue_max));
        }
        if self.migration_threads == 0 || self.migration_threads > MIGRATION_THREADS_MAX {
            return Err(ConfigError::MigrationThreads(self.migration_threads));
        }
        if self.dram_low_water_pct > 100 {
            return Err(ConfigError::DramLowWater(self.dram_low_water_pct));
        }
        if self.mq_queues == 0 || self.mq_queues > MQ_QUEUES_MAX {
            return Err(ConfigError::MqQueues(self.mq_queues));
        }
        if let Some(ppm) = self.uniform_dram_share_ppm {
            if ppm == 0 || ppm > PPM {
                return Err(ConfigError::UniformDramShare(ppm));
            }
        }
        let limit = crate::index::OFFSET_LIMIT_BYTES;
        let slow_bytes = self.slow_tier.as_ref().map_or(0, |s| s.size_bytes as u64);
        for got in [self.memory_limit_bytes, self.dram_max_bytes, slow_bytes] {
            if got > limit {
                return Err(ConfigError::TierTooLarge { got, limit });
            }
        }
        Ok(())
    }

    /// memcached's checks of `-o slab_sizes` (`_parse_slab_sizes`): each size between
    /// `-n` and `slab_chunk_max`, each at least 8 bytes above the one before.
    fn check_slab_sizes(&self, sizes: &[usize]) -> Result<(), ConfigError> {
        let refuse = |message: String| Err(ConfigError::SlabSizes(message));
        // One slot stays for the `slab_chunk_max` class and one for the large class.
        if sizes.is_empty() {
            return refuse("slab_sizes needs at least one size".to_owned());
        }
        if sizes.len() > SLAB_CLASSES_MAX - 2 {
            return refuse("too many slab classes specified".to_owned());
        }
        let mut last = 0;
        for &size in sizes {
            if size < self.chunk_size_min_bytes || size > self.slab_chunk_max_bytes {
                return refuse(format!("slab size {size} is out of valid range"));
            }
            if last >= size {
                return refuse(format!(
                    "slab size {size} cannot be lower than or equal to a previous class size"
                ));
            }
            if size <= last + CHUNK_ALIGN_BYTES {
                return refuse(format!(
                    "slab size {size} must be at least {CHUNK_ALIGN_BYTES} bytes larger than previous class"
                ));
            }
            last = size;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_parse_as_decimals_or_ratios() {
        assert_eq!(parse_fraction("1/4"), Some(0.25));
        assert_eq!(parse_fraction(" 0.5 "), Some(0.5));
        assert_eq!(parse_fraction("1"), Some(1.0));
        for bad in ["0", "1.5", "2/1", "-1/4", "1/0", "x", "", "1/x", "nan"] {
            assert_eq!(parse_fraction(bad), None, "{bad:?}");
        }
        assert_eq!(fraction_to_ppm(0.0625), 62_500);
        assert_eq!(fraction_to_ppm(1.0), PPM);
    }

    /// The index addresses 2 TiB per tier: a tier one byte larger is refused at start,
    /// with the limit in the message; 2 TiB itself is accepted.
    #[test]
    fn a_tier_beyond_what_the_index_addresses_is_refused() {
        const TIB: u64 = 1 << 40;
        let dram = |bytes: u64| EngineConfig {
            memory_limit_bytes: bytes,
            ..EngineConfig::default()
        };
        assert_eq!(dram(2 * TIB).validate(), Ok(()));
        let err = dram(2 * TIB + 1).validate().unwrap_err();
        assert_eq!(
            err,
            ConfigError::TierTooLarge {
                got: 2 * TIB + 1,
                limit: 2 * TIB
            }
        );
        assert!(
            err.to_string().contains("at most 2199023255552 bytes"),
            "{err}"
        );
        let slow = EngineConfig {
            slow_tier: Some(tier::RegionSpec {
                size_bytes: (2 * TIB + 4096) as usize,
                backing: tier::RegionBacking::Anonymous,
                cost: tier::CostModel::NONE,
            }),
            ..EngineConfig::default()
        };
        assert!(matches!(
            slow.validate(),
            Err(ConfigError::TierTooLarge { .. })
        ));
    }
}
