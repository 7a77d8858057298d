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
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_limit_bytes: 64 * 1024 * 1024,
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
    #[error("cannot reserve the cache memory: {0}")]
    Memory(String),
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
        Ok(())
    }
}
