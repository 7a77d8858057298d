//! The engine's core: the [`Engine`] struct, its tiers, and the small helpers every part
//! uses (CAS numbers, expiry and flush checks, time conversion). The parts of the engine
//! are `impl Engine` blocks in files named by their job:
//!
//! - `ops.rs`: the request verbs (`read`, `store`, `delete`, `arith`, `touch`,
//!   `flush_all`);
//! - `lifecycle.rs`: allocation, linking, unlinking and freeing of items;
//! - `moves.rs`: the Move queues and `move_item`, the one way an item changes tier;
//! - `pages.rs`: slab page moves (`slabs reassign`, page evacuation);
//! - `crawler.rs`, `automove.rs`, `background.rs`: background work;
//! - `policy/`: every placement decision, behind the [`crate::policy::Policy`] trait.
//!
//! Lock order: index shard -> class (LRU + slab) -> page pool, checked in test and debug
//! builds (`lock.rs`: each lock has a rank, and waiting for one not ranked above every
//! lock the thread holds panics). A thread holding a class lock takes shards only with
//! `try_lock` (the evictor, the maintainer, the crawler and the slab mover skip busy
//! items), and never holds two class locks at once. Reads lock only the key's shard
//! (plus a `try_lock` of the class when an ACTIVE COLD item is bumped to WARM); the copy
//! out of slab memory happens under the shard lock, so no reference counts are needed.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::lock::{Mutex, Rank};

use crate::api::*;
use crate::automove::AutomoveState;
use crate::background::Background;
use crate::clock::Clock;
use crate::config::{ConfigError, EngineConfig, SLAB_PAGE_SIZE_BYTES};
use crate::counters::Counters;
use crate::events::EventLog;
use crate::index::Index;
use crate::item::{HeaderRead, ItemAddr, ItemMemory, ITEM_HEADER_BYTES};
use crate::moves::Migration;
use crate::policy::AnyPolicy;
use crate::pool::{self, PendingFlush, Pool, PoolGeometry, PoolSettings};
use crate::recovery::RecoveryReport;
use crate::slab::{ClassState, Geometry, PagePool};

/// Class state padded to its own cache lines.
#[repr(align(128))]
pub(crate) struct ClassLock(pub Mutex<ClassState>);

/// One memory tier as the engine slabs it: its item memory, page pool and classes
/// (named apart from the `tier` crate, which provides the region under it).
pub(crate) struct SlabTier {
    pub id: TierId,
    /// Pages of the tier's region (0: the tier is absent, e.g. `--dram 0`).
    pub page_count: usize,
    /// Bytes of items linked in the tier at the maintainer's last pass over it (for the
    /// DRAM low-water check of age-based demotion; a snapshot, not a live count).
    pub item_bytes_seen: AtomicU64,
    /// Items linked in the tier at the maintainer's last pass (a snapshot).
    pub items_seen: AtomicU64,
    pub mem: ItemMemory,
    pub pool: Mutex<PagePool>,
    /// `classes[id]`, id 0 unused.
    pub classes: Box<[ClassLock]>,
    /// Chunks in use per page (large class: run length of the run starting here).
    pub page_used: Box<[AtomicU32]>,
    /// The class that owns each page (0: free; `pool::LARGE_TAIL` inside a large run).
    /// An item's class is its page's: it is written when a page joins a class (under
    /// that class lock, with no live item in the page), so a holder of an item's shard
    /// lock reads a stable value. In a persistent pool it is the pool's page table.
    page_classes: PageClasses,
    /// The persistent pool a slow tier on a file or device lives in.
    pub pool_file: Option<Pool>,
}

/// Where a tier keeps its page classes.
enum PageClasses {
    Owned(Box<[AtomicU8]>),
    /// In the pool header's page table (`SlabTier::pool`).
    InPool,
}

impl SlabTier {
    fn new(id: TierId, region: tier::Region, geometry: &Geometry, pool: Option<Pool>) -> SlabTier {
        let page_count = region.page_count();
        let tier_number = match id {
            TierId::Dram => 0,
            TierId::Slow => 1,
        };
        SlabTier {
            id,
            page_count,
            item_bytes_seen: AtomicU64::new(0),
            items_seen: AtomicU64::new(0),
            mem: ItemMemory::new(region, tier_number),
            pool: Mutex::new(Rank::Pool, PagePool::new(page_count)),
            classes: (0..=geometry.large)
                .map(|id| {
                    ClassLock(Mutex::new(
                        Rank::Class,
                        ClassState::new(id.max(1), geometry),
                    ))
                })
                .collect(),
            page_used: (0..page_count).map(|_| AtomicU32::new(0)).collect(),
            page_classes: match pool {
                Some(_) => PageClasses::InPool,
                None => PageClasses::Owned((0..page_count).map(|_| AtomicU8::new(0)).collect()),
            },
            pool_file: pool,
        }
    }

    /// The page-class entry of page `page` (in range).
    #[inline]
    pub fn page_class(&self, page: usize) -> &AtomicU8 {
        match (&self.page_classes, &self.pool_file) {
            (PageClasses::Owned(classes), _) => &classes[page],
            (PageClasses::InPool, Some(pool)) => pool.page_class(page),
            (PageClasses::InPool, None) => unreachable!("a tier's page table is in its pool"),
        }
    }

    /// Pages the tier may use now (its size; for DRAM, `cache_memlimit` changes it).
    pub fn limit_pages(&self) -> usize {
        self.pool.lock().limit_pages()
    }

    /// The slab class of the item (or chunk) at `addr`.
    #[inline]
    pub fn class_of(&self, addr: ItemAddr) -> usize {
        let page = ItemMemory::page_of(addr);
        if page >= self.page_count {
            return 0;
        }
        self.page_class(page).load(Ordering::Relaxed) as usize
    }
}

/// Counters of rare events, outside the striped request counters.
#[derive(Default)]
pub(crate) struct RareStats {
    pub lru_maintainer_juggles: AtomicU64,
    pub lru_crawler_starts: AtomicU64,
    pub lru_crawler_running: AtomicBool,
    pub slabs_moved: AtomicU64,
    pub slab_reassign_running: AtomicBool,
    pub slab_reassign_evictions_nomem: AtomicU64,
    pub slab_reassign_busy_items: AtomicU64,
    /// Live items a page move kept: copied to a free chunk of their class (memcached's
    /// rescue) or, from a tiered DRAM page, demoted to the slow tier.
    pub slab_reassign_rescues: AtomicU64,
    /// Free chunks of a moving page that a rescue took off the free list.
    pub slab_reassign_inline_reclaim: AtomicU64,
}

/// Why an item found in the index is not live.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dead {
    Expired,
    Flushed,
}

/// Why [`Engine::set_dram_limit`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DramLimitError {
    #[error("the DRAM tier needs at least one 1 MiB page")]
    TooSmall,
    #[error("above the {max_bytes} bytes reserved for the DRAM tier at start-up (--dram-max)")]
    AboveReserve { max_bytes: u64 },
}

/// Error of [`Engine::slabs_reassign`], one per memcached reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReassignError {
    #[error("BUSY currently processing reassign request")]
    Busy,
    #[error("BADCLASS invalid src or dst class id")]
    BadClass,
    #[error("NOSPARE source class has no spare pages")]
    NoSpare,
    #[error("SAME src and dst class are identical")]
    Same,
    #[error("CLIENT_ERROR slab reassignment disabled")]
    Disabled,
}

pub struct Engine {
    pub(crate) config: EngineConfig,
    pub(crate) clock: Arc<dyn Clock>,
    /// The clock's published `now_s`, if it publishes one (see [`Engine::now_s`]).
    published_now_s: Option<Arc<AtomicU64>>,
    pub(crate) geometry: Geometry,
    pub(crate) tiers: Vec<SlabTier>,
    pub(crate) index: Index,
    pub(crate) counters: Counters,
    pub(crate) rare: RareStats,
    cas_counter: AtomicU64,
    /// Delayed or immediate `flush_all`: items last accessed before this relative time
    /// are dead once it is reached; 0 = none.
    pub(crate) flush_at_s: AtomicU32,
    /// Items with a CAS below this were flushed by an immediate `flush_all`; 0 = none.
    pub(crate) flush_oldest_cas: AtomicU64,
    /// The relative time at which the LRU crawler's next pass is due: the soonest expiry
    /// (or delayed flush) among linked items, as far as known, else an hour after the
    /// last pass. 0 (at start, and after a restart's recovery) runs the first tick's pass.
    pub(crate) crawl_due_s: AtomicU32,
    pub(crate) slab_automove: AtomicU32,
    pub(crate) automove: Mutex<AutomoveState>,
    pub(crate) background: Mutex<Option<Background>>,
    /// The Move queues and migration counters.
    pub(crate) moves: Migration,
    /// Every placement decision (`policy/`), statically dispatched.
    pub(crate) policy: AnyPolicy,
    /// With a persistent pool: every CAS handed out is below this (the pool's persisted
    /// high-water mark), so none repeats after a restart.
    cas_high_water: AtomicU64,
    /// Record changes of a plain-file pool not yet flushed (`make_durable`).
    pub(crate) pending_flush: PendingFlush,
    /// What the last start found in the pool (for the start-up log and `stats`).
    pub(crate) recovery: Mutex<RecoveryReport>,
    /// Fetches, stores, evictions and moves, recorded only while somebody watches.
    pub(crate) events: EventLog,
    /// What `lru tune` and `lru_crawler` change at run time.
    pub(crate) tuning: crate::tuning::RuntimeSettings,
    /// End of the last crawler pass (engine-clock seconds), for its `sysevents` lines.
    pub(crate) crawl_ended_s: AtomicU32,
}

impl Engine {
    pub fn new(config: EngineConfig, clock: Arc<dyn Clock>) -> Result<Arc<Engine>, ConfigError> {
        config.validate()?;
        let geometry = Geometry::new(&config);
        let limit_bytes = usize::try_from(config.memory_limit_bytes).unwrap_or(usize::MAX);
        let limit_pages = limit_bytes / SLAB_PAGE_SIZE_BYTES;
        // The DRAM tier's address space is reserved up to `--dram-max`, so that
        // `cache_memlimit` can raise the limit at run time; pages beyond the limit are
        // never touched.
        let reserve_bytes = usize::try_from(config.dram_max_bytes)
            .unwrap_or(usize::MAX)
            .max(limit_bytes);
        let pages = reserve_bytes / SLAB_PAGE_SIZE_BYTES;
        let region = tier::Region::anonymous(pages * SLAB_PAGE_SIZE_BYTES)
            .map_err(|e| ConfigError::Memory(e.to_string()))?;
        let dram = SlabTier::new(TierId::Dram, region, &geometry, None);
        dram.pool.lock().set_limit_pages(limit_pages);
        let mut tiers = vec![dram];
        if let Some(spec) = &config.slow_tier {
            let pages = spec.size_bytes / SLAB_PAGE_SIZE_BYTES;
            if pages > 0 {
                let settings = PoolSettings::new(&config);
                let describe = match &spec.backing {
                    tier::RegionBacking::File { path } => path.display().to_string(),
                    other => format!("{other:?}"),
                };
                // Before anything is written: the same judgement `Pool::open` makes,
                // with the pages the region will map (a device may round down).
                let vet = |contents: tier::PoolContents<'_>, pages: usize| {
                    pool::vet(
                        contents,
                        &PoolGeometry::new(&geometry, pages, config.item_size_max_bytes),
                        &settings,
                        config.slow_pool_reset,
                        config.slow_pool_mismatch,
                        clock.start_unix_s(),
                        &describe,
                    )
                };
                let (region, header) =
                    tier::Region::open_with_header(spec, pool::header_bytes(pages), &vet)
                        .map_err(|e| ConfigError::SlowTier(e.to_string()))?;
                let pool = match header {
                    Some(header) => {
                        let pool_geometry = PoolGeometry::new(
                            &geometry,
                            region.page_count(),
                            config.item_size_max_bytes,
                        );
                        let now_unix_s = clock.start_unix_s() + u64::from(clock.now_s());
                        let pool = Pool::open(
                            header,
                            &pool_geometry,
                            &settings,
                            config.slow_pool_reset,
                            config.slow_pool_mismatch,
                            now_unix_s,
                            clock.start_unix_s(),
                            &region.describe(),
                        )
                        .map_err(|e| ConfigError::SlowTier(e.to_string()))?;
                        // Relative times in the pool's records count from the pool's
                        // clock base: make it the engine's zero. `Pool::open` formatted
                        // (or refused) a pool whose zero is later than the clock's.
                        if !clock.rebase(pool.clock_base_unix_s()) {
                            return Err(ConfigError::SlowTier(format!(
                                "{}: the pool was made at Unix time {}, later than now: \
                                 the wall clock went back; fix the clock or start with \
                                 --slow-pool-reset",
                                region.describe(),
                                pool.clock_base_unix_s()
                            )));
                        }
                        Some(pool)
                    }
                    None => None,
                };
                tiers.push(SlabTier::new(TierId::Slow, region, &geometry, pool));
            }
        }
        let class_slots = geometry.large + 1;
        let automove = config.slab_automove;
        let moves = Migration::new(config.move_queue_max);
        let policy = AnyPolicy::new(&config);
        let tuning = crate::tuning::RuntimeSettings::new(&config);
        let engine = Arc::new(Engine {
            index: Index::new(config.hashpower_initial),
            config,
            published_now_s: clock.published_now_s(),
            clock,
            geometry,
            tiers,
            moves,
            policy,
            counters: Counters::new(),
            rare: RareStats::default(),
            cas_counter: AtomicU64::new(0),
            flush_at_s: AtomicU32::new(0),
            flush_oldest_cas: AtomicU64::new(0),
            crawl_due_s: AtomicU32::new(0),
            slab_automove: AtomicU32::new(automove),
            automove: Mutex::new(Rank::Automove, AutomoveState::new(class_slots)),
            background: Mutex::new(Rank::Background, None),
            cas_high_water: AtomicU64::new(u64::MAX),
            pending_flush: PendingFlush::default(),
            recovery: Mutex::with_default(Rank::Recovery),
            events: EventLog::default(),
            tuning,
            crawl_ended_s: AtomicU32::new(0),
        });
        engine.open_pool()?;
        Ok(engine)
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// `self.clock().now_s()`: a load of the time a ticking clock publishes, a call
    /// through the clock otherwise (a request reads the time two to four times).
    #[inline]
    pub fn now_s(&self) -> u32 {
        if let Some(published) = &self.published_now_s {
            let now_s = published.load(Ordering::Relaxed);
            if now_s != crate::clock::NOT_TICKING {
                // Published from a u32.
                return now_s as u32;
            }
        }
        self.clock.now_s()
    }

    /// The log of what the cache does, for `watch` (records nothing until a kind of
    /// event is wanted).
    pub fn events(&self) -> &EventLog {
        &self.events
    }

    /// Whether an item with this key and value length could ever be stored. The server
    /// asks before reading a payload, so an oversized one is swallowed, not buffered.
    pub fn item_fits(&self, key_len: usize, value_len: usize) -> bool {
        key_len <= u8::MAX as usize
            && ITEM_HEADER_BYTES + key_len + value_len + 2 <= self.config.item_size_max_bytes
    }

    pub(crate) fn dram(&self) -> &SlabTier {
        &self.tiers[0]
    }

    /// The slow tier, when one is configured.
    pub(crate) fn slow(&self) -> Option<&SlabTier> {
        self.tiers.get(1)
    }

    /// Whether both tiers hold pages.
    pub(crate) fn tiered(&self) -> bool {
        self.dram().page_count > 0 && self.slow().is_some_and(|t| t.page_count > 0)
    }

    /// Whether items move between the tiers: both tiers hold pages, `--no-migration`
    /// is off, and the policy migrates at all.
    pub(crate) fn migrating(&self) -> bool {
        self.config.migration_enabled && self.policy.migrates() && self.tiered()
    }

    #[inline]
    pub(crate) fn tier_of(&self, addr: ItemAddr) -> &SlabTier {
        &self.tiers[((addr >> 56) as usize).min(self.tiers.len() - 1)]
    }

    /// The memory of the item at `addr`: what an index look-up reads a descriptor's
    /// item in (its tier is then checked once more by the memory itself,
    /// `ItemMemory::locate`).
    #[inline]
    pub(crate) fn mem_of(&self, addr: ItemAddr) -> &ItemMemory {
        &self.tier_of(addr).mem
    }

    /// The slab class of the item at `addr`.
    pub(crate) fn class_of(&self, addr: ItemAddr) -> usize {
        self.tier_of(addr).class_of(addr)
    }

    pub(crate) fn next_cas(&self) -> u64 {
        let cas = self.cas_counter.fetch_add(1, Ordering::Relaxed) + 1;
        if cas >= self.cas_high_water.load(Ordering::Relaxed) {
            self.raise_cas_high_water(cas);
        }
        cas
    }

    /// A persistent pool's CAS high-water mark was reached: reserve the next block of
    /// CAS values (persisted before any of them is handed out).
    #[cold]
    fn raise_cas_high_water(&self, cas: u64) {
        let Some(pool) = self.slow().and_then(|t| t.pool_file.as_ref()) else {
            return;
        };
        let to = cas.saturating_add(pool::CAS_BLOCK);
        if pool.raise_cas_high_water(to).is_err() {
            // The header could not be flushed: the values are still unique for this run,
            // and the mark is in the page cache for a process crash.
            eprintln!("fogcached: cannot flush the pool's CAS high-water mark");
        }
        self.cas_high_water.fetch_max(to, Ordering::Relaxed);
    }

    /// Starts CAS numbering above `floor` (recovery) and below a fresh high-water mark.
    pub(crate) fn resume_cas_above(&self, floor: u64) {
        self.cas_counter.fetch_max(floor, Ordering::Relaxed);
        if let Some(pool) = self.slow().and_then(|t| t.pool_file.as_ref()) {
            let next = self
                .cas_counter
                .load(Ordering::Relaxed)
                .max(pool.cas_high_water());
            self.cas_counter.store(next, Ordering::Relaxed);
            self.cas_high_water.store(next, Ordering::Relaxed);
        }
    }

    /// The CAS a client sees: 0 when CAS is disabled (`-C`).
    pub(crate) fn visible_cas(&self, cas: u64) -> u64 {
        if self.config.cas_enabled {
            cas
        } else {
            0
        }
    }

    /// Converts a client exptime to relative time; `None` means already expired.
    pub(crate) fn exptime_to_rel(&self, exptime: ClientExptime) -> Option<u32> {
        if exptime == 0 {
            return Some(0);
        }
        if exptime < 0 {
            return None;
        }
        let now = self.now_s();
        if exptime > RELATIVE_EXPTIME_MAX_S {
            let start = i64::try_from(self.clock.start_unix_s()).unwrap_or(i64::MAX);
            if exptime <= start {
                return None;
            }
            let rel = (exptime - start).min(i64::from(u32::MAX)) as u32;
            return Some(rel.max(1));
        }
        Some(now.saturating_add(exptime as u32).max(1))
    }

    /// The TTL meta `t` reports for an item just given `exptime` (`None`: it never
    /// expires; 0: it already has), for a reply that shows an expiry its request set
    /// before replacing it with another (`mg k N100 t T50` reports 100).
    pub fn ttl_for_exptime(&self, exptime: ClientExptime) -> Option<u32> {
        match self.exptime_to_rel(exptime) {
            Some(0) => None,
            Some(rel) => Some(rel.saturating_sub(self.now_s())),
            None => Some(0),
        }
    }

    /// Why the item with header `h` is dead at `now_s`, if it is (expired or flushed).
    /// Reads header fields only, through the view the caller paid for.
    #[inline]
    pub(crate) fn dead_reason(&self, h: HeaderRead<'_>, now_s: u32) -> Option<Dead> {
        let exptime = h.exptime_rel_s();
        if exptime != 0 && exptime <= now_s {
            return Some(Dead::Expired);
        }
        let oldest_cas = self.flush_oldest_cas.load(Ordering::Relaxed);
        if oldest_cas != 0 {
            let cas = h.cas();
            if cas != 0 && cas < oldest_cas {
                return Some(Dead::Flushed);
            }
        }
        let flush_at = self.flush_at_s.load(Ordering::Relaxed);
        if flush_at != 0 && now_s >= flush_at && h.last_access_s() < flush_at {
            return Some(Dead::Flushed);
        }
        None
    }

    pub(crate) fn ttl_remaining(h: HeaderRead<'_>, now_s: u32) -> Option<u32> {
        match h.exptime_rel_s() {
            0 => None,
            e => Some(e.saturating_sub(now_s)),
        }
    }

    /// The largest item the chunk of an item of `total_bytes` in `class_id` can hold.
    pub(crate) fn chunk_capacity(&self, class_id: usize, total_bytes: usize) -> usize {
        if class_id == self.geometry.large {
            Geometry::large_run_pages(total_bytes) * SLAB_PAGE_SIZE_BYTES
        } else {
            self.geometry.chunk_bytes[class_id]
        }
    }

    /// The DRAM tier's current size (`-m`, then `cache_memlimit`).
    pub fn dram_limit_bytes(&self) -> u64 {
        (self.dram().limit_pages() * SLAB_PAGE_SIZE_BYTES) as u64
    }

    /// The most `cache_memlimit` can give the DRAM tier (`--dram-max`, default `-m`).
    pub fn dram_max_bytes(&self) -> u64 {
        (self.dram().page_count * SLAB_PAGE_SIZE_BYTES) as u64
    }

    /// `cache_memlimit`: resizes the DRAM tier to `bytes` (whole 1 MiB pages), up to
    /// [`Engine::dram_max_bytes`]. Raising it lets classes take more pages at once;
    /// lowering it stops them from taking new ones until use falls below it, and pages
    /// in use keep their items (memcached's behaviour). The slow tier is not resized.
    pub fn set_dram_limit(&self, bytes: u64) -> Result<(), DramLimitError> {
        let pages = usize::try_from(bytes / SLAB_PAGE_SIZE_BYTES as u64).unwrap_or(usize::MAX);
        let dram = self.dram();
        if pages == 0 {
            return Err(DramLimitError::TooSmall);
        }
        if pages > dram.page_count {
            return Err(DramLimitError::AboveReserve {
                max_bytes: self.dram_max_bytes(),
            });
        }
        dram.pool.lock().set_limit_pages(pages);
        Ok(())
    }

    /// Pages of DRAM slab memory in use (for tests and `total_malloced`).
    pub fn pages_in_use(&self) -> usize {
        self.dram().pool.lock().pages_in_use()
    }

    /// Occupancy and hits of one tier (zeros for an absent tier).
    pub fn tier_usage(&self, which: TierId) -> TierUsage {
        let Some(tier) = self.tiers.iter().find(|t| t.id == which) else {
            return TierUsage::default();
        };
        let mut usage = TierUsage {
            limit_bytes: (tier.limit_pages() * SLAB_PAGE_SIZE_BYTES) as u64,
            pages_in_use: tier.pool.lock().pages_in_use() as u64,
            get_hits: self.counters.get(if which == TierId::Dram {
                crate::counters::G::DramGetHits
            } else {
                crate::counters::G::SlowGetHits
            }),
            ..TierUsage::default()
        };
        for class in tier.classes.iter().skip(1) {
            let cs = class.0.lock();
            usage.items += cs.lru.items();
            usage.item_bytes += cs.lru.total_bytes();
        }
        let access = tier.mem.region().access_counts();
        usage.bytes_read = access.bytes_read;
        usage.bytes_written = access.bytes_written;
        usage.lines_read = access.lines_read;
        usage.lines_written = access.lines_written;
        usage.emulated_wait_us = tier.mem.region().emulated_wait_ns() / 1000;
        usage
    }

    /// Asks the kernel to back the DRAM tier with transparent huge pages (`-L`).
    pub fn advise_dram_huge_pages(&self) -> std::io::Result<()> {
        self.dram().mem.region().advise_huge_pages()
    }

    /// The slab class an item of this key and value length goes to.
    pub fn slab_class_for(&self, key_len: usize, value_len: usize) -> u8 {
        self.geometry
            .class_for(ITEM_HEADER_BYTES + key_len + value_len) as u8
    }

    /// Which tier a key's item is in now (tests, `me`-style debugging); `None` if absent.
    pub fn tier_of_key(&self, key: &[u8]) -> Option<TierId> {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        Index::find(&mut table, |a| self.mem_of(a), key_hash, key)
            .map(|item| self.tier_of(item.addr()).id)
    }
}
