//! The slab engine: the request operations of [`Engine`] and the memory management they
//! share with the background threads (allocation with eviction, unlinking, freeing).
//!
//! Lock order: index shard -> class (LRU + slab) -> page pool. A thread holding a class
//! lock takes shards only with `try_lock` (the evictor, the maintainer, the crawler and
//! the slab mover skip busy items), and never holds two class locks at once. Reads lock
//! only the key's shard (plus a `try_lock` of the class when an ACTIVE COLD item is
//! bumped to WARM); the copy out of slab memory happens under the shard lock, so no
//! reference counts are needed.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::api::*;
use crate::clock::Clock;
use crate::config::{ConfigError, EngineConfig, SLAB_PAGE_SIZE_BYTES};
use crate::index::{Index, ShardGuard};
use crate::item::{state, ItemAddr, ItemHeader, ItemMemory, ITEM_HEADER_BYTES, NIL};
use crate::lru::{COLD, HOT, WARM};
use crate::maintainer::{AutomoveState, Background};
use crate::migrate::{Direction, Migration, ShardLocking};
use crate::slab::{ClassState, Geometry, PagePool};
use crate::stats::{Counters, C, G};

/// Allocation attempts (each may evict or demote) before giving up, as memcached's
/// `do_item_alloc_pull`.
const ALLOC_TRIES: usize = 10;

/// Classes a failed allocation tries to take a page from, and how often it waits for
/// busy items in the page before moving to the next class.
const STEAL_VICTIMS_MAX: usize = 3;
const STEAL_RETRIES: usize = 2;
/// Waits (1 ms each) for busy items when the automover or `slabs reassign` moves a page.
const REASSIGN_RETRIES: usize = 100;

/// Class state padded to its own cache lines.
#[repr(align(128))]
pub(crate) struct ClassLock(pub Mutex<ClassState>);

/// One memory tier: its slab memory, page pool and classes.
pub(crate) struct Tier {
    pub id: TierId,
    /// Pages of the tier's region (0: the tier is absent, e.g. `--dram 0`).
    pub page_count: usize,
    /// Bytes of items linked in the tier at the maintainer's last pass over it (for the
    /// DRAM low-water check of age-based demotion; a snapshot, not a live count).
    pub item_bytes_seen: AtomicU64,
    pub mem: ItemMemory,
    pub pool: Mutex<PagePool>,
    /// `classes[id]`, id 0 unused.
    pub classes: Box<[ClassLock]>,
    /// Chunks in use per page (large class: run length of the run starting here).
    pub page_used: Box<[AtomicU32]>,
}

impl Tier {
    fn new(id: TierId, region: tier::Region, geometry: &Geometry) -> Tier {
        let page_count = region.page_count();
        let tier_number = match id {
            TierId::Dram => 0,
            TierId::Slow => 1,
        };
        Tier {
            id,
            page_count,
            item_bytes_seen: AtomicU64::new(0),
            mem: ItemMemory::new(region, tier_number),
            pool: Mutex::new(PagePool::new(page_count)),
            classes: (0..=geometry.large)
                .map(|id| ClassLock(Mutex::new(ClassState::new(id.max(1), geometry))))
                .collect(),
            page_used: (0..page_count).map(|_| AtomicU32::new(0)).collect(),
        }
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
}

/// Why an item found in the index is not live.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dead {
    Expired,
    Flushed,
}

/// How `pull_tail` treats the COLD tail.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pull {
    /// Maintainer juggling: move items between segments, reclaim expired ones.
    Juggle,
    /// Allocation: evict the COLD tail.
    Evict,
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
    pub(crate) geometry: Geometry,
    pub(crate) tiers: Vec<Tier>,
    pub(crate) index: Index,
    pub(crate) counters: Counters,
    pub(crate) rare: RareStats,
    cas_counter: AtomicU64,
    /// Delayed or immediate `flush_all`: items last accessed before this relative time
    /// are dead once it is reached; 0 = none.
    flush_at_s: AtomicU32,
    /// Items with a CAS below this were flushed by an immediate `flush_all`; 0 = none.
    flush_oldest_cas: AtomicU64,
    pub(crate) slab_automove: AtomicU32,
    pub(crate) automove: Mutex<AutomoveState>,
    pub(crate) background: Mutex<Option<Background>>,
    /// The Move queues and migration counters (Dual-LRU).
    pub(crate) moves: Migration,
}

/// What a store does after its checks, decided under the shard lock.
enum Verdict {
    Store { stale: bool },
    Refuse(StoreOutcome),
}

impl Engine {
    pub fn new(config: EngineConfig, clock: Arc<dyn Clock>) -> Result<Arc<Engine>, ConfigError> {
        config.validate()?;
        let geometry = Geometry::new(&config);
        let limit_bytes = usize::try_from(config.memory_limit_bytes).unwrap_or(usize::MAX);
        let pages = limit_bytes / SLAB_PAGE_SIZE_BYTES;
        let region = tier::Region::anonymous(pages * SLAB_PAGE_SIZE_BYTES)
            .map_err(|e| ConfigError::Memory(e.to_string()))?;
        let mut tiers = vec![Tier::new(TierId::Dram, region, &geometry)];
        if let Some(spec) = &config.slow_tier {
            if spec.size_bytes >= SLAB_PAGE_SIZE_BYTES {
                let region =
                    tier::Region::open(spec).map_err(|e| ConfigError::SlowTier(e.to_string()))?;
                tiers.push(Tier::new(TierId::Slow, region, &geometry));
            }
        }
        let class_slots = geometry.large + 1;
        let automove = config.slab_automove;
        let moves = Migration::new(config.move_queue_max);
        Ok(Arc::new(Engine {
            index: Index::new(config.hashpower_initial),
            config,
            clock,
            geometry,
            tiers,
            moves,
            counters: Counters::new(),
            rare: RareStats::default(),
            cas_counter: AtomicU64::new(0),
            flush_at_s: AtomicU32::new(0),
            flush_oldest_cas: AtomicU64::new(0),
            slab_automove: AtomicU32::new(automove),
            automove: Mutex::new(AutomoveState::new(class_slots)),
            background: Mutex::new(None),
        }))
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// Whether an item with this key and value length could ever be stored. The server
    /// asks before reading a payload, so an oversized one is swallowed, not buffered.
    pub fn item_fits(&self, key_len: usize, value_len: usize) -> bool {
        key_len <= u8::MAX as usize
            && ITEM_HEADER_BYTES + key_len + value_len + 2 <= self.config.item_size_max_bytes
    }

    pub(crate) fn dram(&self) -> &Tier {
        &self.tiers[0]
    }

    /// The slow tier, when one is configured.
    pub(crate) fn slow(&self) -> Option<&Tier> {
        self.tiers.get(1)
    }

    /// Whether items move between the tiers: both tiers hold pages and `--no-migration`
    /// is off.
    pub(crate) fn migrating(&self) -> bool {
        self.config.migration_enabled
            && self.dram().page_count > 0
            && self.slow().is_some_and(|t| t.page_count > 0)
    }

    pub(crate) fn tier_of(&self, addr: ItemAddr) -> &Tier {
        &self.tiers[((addr >> 56) as usize).min(self.tiers.len() - 1)]
    }

    fn next_cas(&self) -> u64 {
        self.cas_counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The CAS a client sees: 0 when CAS is disabled (`-C`).
    fn visible_cas(&self, cas: u64) -> u64 {
        if self.config.cas_enabled {
            cas
        } else {
            0
        }
    }

    /// The clock read once as (ticks, seconds): the request paths that bump an item use
    /// both, and one clock read per request is all they pay for.
    fn now_ticks_and_s(&self) -> (u64, u32) {
        let now_ticks = self.clock.now_ticks();
        let now_s = u32::try_from(now_ticks / crate::clock::TICKS_PER_S).unwrap_or(u32::MAX);
        (now_ticks, now_s)
    }

    /// The clock in 1/32-second ticks, kept within the second `now_s` a caller already
    /// read (the clock may have moved on since; whole seconds decide expiry and flush).
    pub(crate) fn ticks_at(&self, now_s: u32) -> u64 {
        let ticks = self.clock.now_ticks();
        if ticks / crate::clock::TICKS_PER_S == u64::from(now_s) {
            ticks
        } else {
            u64::from(now_s) * crate::clock::TICKS_PER_S
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
        let now = self.clock.now_s();
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

    pub(crate) fn dead_reason(&self, h: &ItemHeader, now_s: u32) -> Option<Dead> {
        let exptime = h.exptime_rel_s.load(Ordering::Relaxed);
        if exptime != 0 && exptime <= now_s {
            return Some(Dead::Expired);
        }
        let oldest_cas = self.flush_oldest_cas.load(Ordering::Relaxed);
        if oldest_cas != 0 {
            let cas = h.cas.load(Ordering::Relaxed);
            if cas != 0 && cas < oldest_cas {
                return Some(Dead::Flushed);
            }
        }
        let flush_at = self.flush_at_s.load(Ordering::Relaxed);
        if flush_at != 0 && now_s >= flush_at && h.last_access_s.load(Ordering::Relaxed) < flush_at
        {
            return Some(Dead::Flushed);
        }
        None
    }

    fn ttl_remaining(h: &ItemHeader, now_s: u32) -> Option<u32> {
        match h.exptime_rel_s.load(Ordering::Relaxed) {
            0 => None,
            e => Some(e.saturating_sub(now_s)),
        }
    }

    // ----- memory: allocation, freeing, unlinking -------------------------------------

    /// Takes a chunk (or a page run) for an item of `total_bytes` without evicting.
    pub(crate) fn take_chunk(
        &self,
        tier: &Tier,
        cs: &mut ClassState,
        total_bytes: usize,
    ) -> Option<ItemAddr> {
        if cs.id == self.geometry.large {
            let run = Geometry::large_run_pages(total_bytes);
            let first = tier.pool.lock().alloc_run(cs.id, run)?;
            cs.pages.push(first as u32);
            tier.page_used[first].store(run as u32, Ordering::Relaxed);
            let addr = tier.mem.addr_at(first * SLAB_PAGE_SIZE_BYTES);
            let h = tier.mem.header(addr);
            h.state.store(state::ALLOCATED, Ordering::Relaxed);
            h.class_id.store(cs.id as u8, Ordering::Relaxed);
            return Some(addr);
        }
        if cs.free_head == NIL {
            let page = tier.pool.lock().alloc_run(cs.id, 1)?;
            cs.add_page(&tier.mem, page, &tier.page_used);
        }
        let addr = cs.pop_free(&tier.mem)?;
        let page = ItemMemory::page_of(addr);
        tier.page_used[page].fetch_add(1, Ordering::Relaxed);
        Some(addr)
    }

    /// Returns a chunk that is in no LRU and no index to its class (or the pool).
    pub(crate) fn free_chunk(&self, tier: &Tier, cs: &mut ClassState, addr: ItemAddr) {
        let h = tier.mem.header(addr);
        let page = ItemMemory::page_of(addr);
        if cs.id == self.geometry.large {
            let run = tier.page_used[page].swap(0, Ordering::Relaxed) as usize;
            h.state.store(0, Ordering::Relaxed);
            if let Some(pos) = cs.pages.iter().position(|&p| p as usize == page) {
                cs.pages.swap_remove(pos);
            }
            tier.pool.lock().free_run(page, run.max(1));
            return;
        }
        let _ = tier.page_used[page].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
            Some(u.saturating_sub(1))
        });
        if cs.moving_page == Some(page as u32) {
            // The slab mover is emptying this page: keep the chunk off the free list.
            h.state.store(0, Ordering::Relaxed);
        } else {
            cs.push_free(&tier.mem, addr);
        }
    }

    /// Allocates a chunk for an item of `total_bytes` in `class_id`, evicting from the
    /// class's COLD tail (memcached's `do_item_alloc_pull`) or, if the class holds
    /// nothing at all, taking a page from another class.
    pub(crate) fn alloc(
        &self,
        tier: &Tier,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<ItemAddr> {
        if tier.page_count == 0 {
            return None;
        }
        let now = self.clock.now_s();
        for attempt in 0..ALLOC_TRIES {
            let mut cs = tier.classes[class_id].0.lock();
            if let Some(addr) = self.take_chunk(tier, &mut cs, total_bytes) {
                cs.stats.direct_reclaims += attempt as u64;
                return Some(addr);
            }
            if cs.lru.items() == 0 {
                break;
            }
            if self.pull_tail(tier, &mut cs, COLD, 0, 0, Pull::Evict, now) == 0
                && self.pull_tail(tier, &mut cs, HOT, 0, 0, Pull::Juggle, now) == 0
                && self.pull_tail(tier, &mut cs, WARM, 0, 0, Pull::Juggle, now) == 0
            {
                break;
            }
        }
        // Nothing to evict here (the class is empty, or its tail is busy): take a page
        // from another class. Never with `-M`, where nothing may be evicted.
        if self.config.slab_reassign
            && self.config.evictions_enabled
            && self.steal_page(tier, class_id)
        {
            let mut cs = tier.classes[class_id].0.lock();
            if let Some(addr) = self.take_chunk(tier, &mut cs, total_bytes) {
                return Some(addr);
            }
        }
        tier.classes[class_id].0.lock().stats.outofmemory += 1;
        None
    }

    /// Takes a free chunk (or a free page) of `class_id` in `tier`, evicting nothing.
    pub(crate) fn take_free(
        &self,
        tier: &Tier,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<ItemAddr> {
        if tier.page_count == 0 {
            return None;
        }
        let mut cs = tier.classes[class_id].0.lock();
        self.take_chunk(tier, &mut cs, total_bytes)
    }

    /// Where a new item is written (Dual-LRU placement):
    /// 1. a free DRAM chunk;
    /// 2. with migration on, ONE synchronous demotion of the class's DRAM COLD tail to
    ///    the slow tier (one item copy), then the chunk it freed;
    /// 3. the slow tier, evicting from its own COLD tail (with `--no-migration` this is
    ///    "DRAM until full, then the slow tier");
    /// 4. DRAM with eviction of its COLD tail (also the DRAM-only path, unchanged).
    ///
    /// The caller may hold a shard lock: the demotion only `try_lock`s shards.
    fn alloc_new_item(&self, class_id: usize, total_bytes: usize) -> Option<ItemAddr> {
        let dram = self.dram();
        let Some(slow) = self.slow() else {
            return self.alloc(dram, class_id, total_bytes);
        };
        if dram.page_count == 0 {
            return self.alloc(slow, class_id, total_bytes);
        }
        if let Some(addr) = self.take_free(dram, class_id, total_bytes) {
            return Some(addr);
        }
        if self.migrating() && self.demote_cold_tail_now(class_id, ShardLocking::Try) {
            if let Some(addr) = self.take_free(dram, class_id, total_bytes) {
                return Some(addr);
            }
        }
        self.alloc(slow, class_id, total_bytes)
            .or_else(|| self.alloc(dram, class_id, total_bytes))
    }

    /// Frees a chunk that was allocated but never linked (a refused store).
    pub(crate) fn free_unlinked(&self, addr: ItemAddr) {
        let tier = self.tier_of(addr);
        let class_id = tier.mem.header(addr).class();
        let mut cs = tier.classes[class_id].0.lock();
        self.free_chunk(tier, &mut cs, addr);
    }

    /// Removes a linked item from the LRU and frees it. The caller holds the item's
    /// shard lock and has already removed it from the index.
    pub(crate) fn unlink_from_class(&self, addr: ItemAddr) {
        let tier = self.tier_of(addr);
        let h = tier.mem.header(addr);
        h.clear(state::LINKED);
        let mut cs = tier.classes[h.class()].0.lock();
        cs.lru.unlink(&tier.mem, addr);
        self.free_chunk(tier, &mut cs, addr);
    }

    /// Unlinks the item at `addr` from index and LRU and frees it (shard lock held).
    fn unlink(&self, table: &mut ShardGuard<'_>, key_hash: u32, addr: ItemAddr) {
        crate::index::Index::remove(table, key_hash, addr);
        self.unlink_from_class(addr);
    }

    /// Publishes a freshly written item: index (replacing `old`), HOT head, then frees
    /// `old`. The caller holds the shard lock.
    fn link(
        &self,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        addr: ItemAddr,
        old: Option<ItemAddr>,
    ) {
        let tier = self.tier_of(addr);
        let h = tier.mem.header(addr);
        h.key_hash.store(key_hash, Ordering::Relaxed);
        h.set(state::LINKED);
        match old {
            Some(old_addr) => {
                crate::index::Index::replace(table, key_hash, old_addr, addr);
            }
            None => {
                crate::index::Index::insert_new(table, |a| &self.tier_of(a).mem, key_hash, addr)
            }
        }
        {
            let mut cs = tier.classes[h.class()].0.lock();
            cs.lru.link_head(&tier.mem, HOT, addr);
        }
        if let Some(old_addr) = old {
            self.unlink_from_class(old_addr);
        }
        self.counters.add(G::TotalItems, 1);
    }

    /// Looks up `key` under its shard lock; a dead item found is unlinked and counted.
    fn find_live(
        &self,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        key: &[u8],
        now_s: u32,
        count_reads: bool,
    ) -> Option<ItemAddr> {
        let addr = crate::index::Index::find(table, |a| &self.tier_of(a).mem, key_hash, key)?;
        let h = self.tier_of(addr).mem.header(addr);
        match self.dead_reason(h, now_s) {
            None => Some(addr),
            Some(reason) => {
                if count_reads {
                    match reason {
                        Dead::Expired => self.counters.add(G::GetExpired, 1),
                        Dead::Flushed => self.counters.add(G::GetFlushed, 1),
                    }
                }
                self.unlink(table, key_hash, addr);
                None
            }
        }
    }

    /// Allocates and writes a new item (not yet linked). `None`: out of memory.
    fn new_item(
        &self,
        key: &[u8],
        value_parts: &[&[u8]],
        client_flags: u32,
        exptime_rel_s: u32,
        now_s: u32,
    ) -> Result<ItemAddr, StoreOutcome> {
        let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
        let total = ITEM_HEADER_BYTES + key.len() + value_len;
        if !self.item_fits(key.len(), value_len) {
            return Err(StoreOutcome::TooLarge);
        }
        let class_id = self.geometry.class_for(total);
        let Some(addr) = self.alloc_new_item(class_id, total) else {
            return Err(StoreOutcome::OutOfMemory);
        };
        let tier = self.tier_of(addr);
        let capacity = if class_id == self.geometry.large {
            Geometry::large_run_pages(total) * SLAB_PAGE_SIZE_BYTES
        } else {
            self.geometry.chunk_bytes[class_id]
        };
        // SAFETY: the chunk was just allocated for at least `total` bytes and is not
        // published (item.rs invariant 3 (a)).
        unsafe { tier.mem.write_item(addr, capacity, key, value_parts) };
        let h = tier.mem.header(addr);
        h.client_flags.store(client_flags, Ordering::Relaxed);
        h.exptime_rel_s.store(exptime_rel_s, Ordering::Relaxed);
        h.set_last_access_ticks(self.ticks_at(now_s));
        h.next.store(NIL, Ordering::Relaxed);
        h.prev.store(NIL, Ordering::Relaxed);
        h.cas.store(0, Ordering::Relaxed);
        Ok(addr)
    }

    /// memcached's `do_item_bump`: first read sets FETCHED, the second ACTIVE; an item
    /// turning ACTIVE in COLD is moved to WARM if the class lock is free.
    fn bump(&self, addr: ItemAddr, now_ticks: u64) {
        let tier = self.tier_of(addr);
        let h = tier.mem.header(addr);
        // The gap between this access and the previous one (promotion admission).
        let reuse_gap_ticks = now_ticks.saturating_sub(h.last_access_ticks());
        h.set_last_access_ticks(now_ticks);
        if h.has(state::ACTIVE) {
            // Fogcached's Promote state: a slow-tier item referenced again while
            // ACTIVE. It is offered to the Move-to-DRAM queue at once (never waiting
            // for the queue's lock), and the slow tier's maintainer offers it again at
            // its HOT/WARM tails if the queue was busy or full.
            if tier.id == TierId::Slow && !h.has(state::QUEUED) && self.migrating() {
                h.set(state::PROMOTE);
                self.moves
                    .offer(Direction::ToDram, &tier.mem, addr, false, reuse_gap_ticks);
            }
            return;
        }
        if !h.has(state::FETCHED) {
            h.set(state::FETCHED);
            return;
        }
        h.set(state::ACTIVE);
        if h.segment() == COLD {
            if let Some(mut cs) = tier.classes[h.class()].0.try_lock() {
                if h.has(state::LINKED) && h.segment() == COLD {
                    h.clear(state::ACTIVE);
                    cs.lru.move_to(&tier.mem, addr, WARM);
                    cs.stats.moves_to_warm += 1;
                }
            }
        }
    }

    // ----- request operations --------------------------------------------------------

    pub fn read<R>(
        &self,
        key: &[u8],
        opts: &ReadOptions,
        on_hit: impl FnOnce(&ItemView<'_>) -> R,
    ) -> ReadOutcome<R> {
        let count = !opts.no_stats;
        // Converted before the lock: it may read the clock.
        let touch_rel = opts.touch_exptime.map(|e| self.exptime_to_rel(e));
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let (now_ticks, now) = self.now_ticks_and_s();
        let Some(addr) = self.find_live(&mut table, key_hash, key, now, count) else {
            if count {
                if opts.is_touch_command && !opts.miss_counts_as_get {
                    self.counters.add(G::CmdTouch, 1);
                    self.counters.add(G::TouchMisses, 1);
                } else {
                    self.counters.add(G::CmdGet, 1);
                    self.counters.add(G::GetMisses, 1);
                }
            }
            let vivified = match opts.vivify_exptime.map(|e| self.exptime_to_rel(e)) {
                Some(Some(rel)) => self.vivify(&mut table, key_hash, key, rel, now),
                _ => false,
            };
            return ReadOutcome::Miss { vivified };
        };
        let tier = self.tier_of(addr);
        let h = tier.mem.header(addr);
        if let Some(rel) = touch_rel {
            // A negative touch time still returns the item (memcached): it expires now.
            h.exptime_rel_s.store(rel.unwrap_or(1), Ordering::Relaxed);
        }
        let state_bits = h.state.load(Ordering::Relaxed);
        let ttl_remaining_s = Self::ttl_remaining(h, now);
        let mut win = false;
        let mut win_token_already_sent = false;
        if state_bits & state::TOKEN_SENT != 0 {
            win_token_already_sent = true;
        } else if opts.claim_recache_token
            && (state_bits & state::STALE != 0
                || opts
                    .recache_below_s
                    .is_some_and(|r| ttl_remaining_s.is_some_and(|t| i64::from(t) < r)))
        {
            h.set(state::TOKEN_SENT);
            win = true;
        }
        let class_id = h.class();
        let segment = h.segment();
        // SAFETY: we hold the item's shard lock (item.rs invariant 3).
        let (item_key, value) = unsafe { (tier.mem.key(addr), tier.mem.value(addr)) };
        tier.mem
            .charge_read(addr, ITEM_HEADER_BYTES + item_key.len(), value.len());
        let view = ItemView {
            key: item_key,
            value,
            client_flags: h.client_flags.load(Ordering::Relaxed),
            cas: self.visible_cas(h.cas.load(Ordering::Relaxed)),
            ttl_remaining_s,
            last_access_ago_s: now.saturating_sub(h.last_access_s.load(Ordering::Relaxed)),
            fetched_before: state_bits & state::FETCHED != 0,
            stale: state_bits & state::STALE != 0,
            win,
            win_token_already_sent,
            slab_class: class_id as u8,
            total_size_bytes: h.total_bytes(),
            tier: tier.id,
        };
        let result = on_hit(&view);
        if !opts.no_bump {
            self.bump(addr, now_ticks);
        }
        if count {
            if opts.is_touch_command {
                self.counters.add(G::CmdTouch, 1);
                self.counters.add_class(class_id, C::TouchHits, 1);
            } else {
                self.counters.add(G::CmdGet, 1);
                self.counters.add(
                    if tier.id == TierId::Dram {
                        G::DramGetHits
                    } else {
                        G::SlowGetHits
                    },
                    1,
                );
                let c = match segment {
                    HOT => C::HitsToHot,
                    WARM => C::HitsToWarm,
                    _ => C::HitsToCold,
                };
                self.counters.add_class(class_id, c, 1);
            }
        }
        if touch_rel == Some(None) {
            self.unlink(&mut table, key_hash, addr);
        }
        ReadOutcome::Hit(result)
    }

    /// `mg N`: stores an empty placeholder whose recache token the caller holds.
    fn vivify(
        &self,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        key: &[u8],
        rel: u32,
        now: u32,
    ) -> bool {
        let Ok(addr) = self.new_item(key, &[], 0, rel, now) else {
            return false;
        };
        let h = self.tier_of(addr).mem.header(addr);
        h.cas.store(self.next_cas(), Ordering::Relaxed);
        h.set(state::TOKEN_SENT);
        self.link(table, key_hash, addr, None);
        true
    }

    pub fn store(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        // memcached unlinks the old value when a plain `set` (not `cas`) cannot allocate
        // its item, so a reader never keeps seeing the value the client replaced.
        let unlink_on_failure = opts.mode == StoreMode::Set && opts.compare_cas.is_none();
        if !self.item_fits(key.len(), value.len()) {
            self.refuse_too_large(key, unlink_on_failure);
            return StoreOutcome::TooLarge;
        }
        let outcome = match opts.mode {
            StoreMode::Append | StoreMode::Prepend => self.store_concat(key, value, opts),
            _ => self.store_whole(key, value, opts),
        };
        match outcome {
            StoreOutcome::OutOfMemory => {
                self.counters.add(G::StoreNoMemory, 1);
                if unlink_on_failure {
                    self.unlink_key(key);
                }
            }
            StoreOutcome::TooLarge => self.counters.add(G::StoreTooLarge, 1),
            _ => {}
        }
        outcome
    }

    /// A store refused because its item can never fit, typically before the server has
    /// read the payload (memcached's failed `item_alloc`): counts `store_too_large` and,
    /// with `unlink_old`, removes the current value of `key` without counting a delete.
    pub fn refuse_too_large(&self, key: &[u8], unlink_old: bool) {
        self.counters.add(G::StoreTooLarge, 1);
        if unlink_old {
            self.unlink_key(key);
        }
    }

    /// Removes `key` without counting a delete, as memcached does when a store fails to
    /// allocate (meta `ms` in every mode). Returns whether a live item was removed.
    pub fn unlink_key(&self, key: &[u8]) -> bool {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.clock.now_s();
        match self.find_live(&mut table, key_hash, key, now, false) {
            Some(addr) => {
                self.unlink(&mut table, key_hash, addr);
                true
            }
            None => false,
        }
    }

    /// CAS and mode checks shared by every store, under the shard lock.
    fn verdict(
        &self,
        opts: &StoreOptions,
        existing: Option<&ItemHeader>,
        class_id: usize,
    ) -> Verdict {
        let mut stale = false;
        if let Some(expected) = opts.compare_cas {
            match existing {
                None => {
                    self.counters.add(G::CasMisses, 1);
                    return Verdict::Refuse(StoreOutcome::NotFound);
                }
                Some(h) => {
                    let current = self.visible_cas(h.cas.load(Ordering::Relaxed));
                    if current != expected {
                        if opts.invalidate && expected < current {
                            stale = true;
                        } else {
                            self.counters.add_class(h.class(), C::CasBadval, 1);
                            return Verdict::Refuse(StoreOutcome::Exists);
                        }
                    }
                    self.counters.add_class(class_id, C::CasHits, 1);
                }
            }
        }
        match (opts.mode, existing) {
            (StoreMode::Add, Some(_)) | (StoreMode::Replace, None) => {
                Verdict::Refuse(StoreOutcome::NotStored)
            }
            _ => Verdict::Store { stale },
        }
    }

    /// `set`, `add`, `replace`, `cas`: the new item is written before the shard lock.
    fn store_whole(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        let exptime_rel = self.exptime_to_rel(opts.exptime);
        let now = self.clock.now_s();
        let total = ITEM_HEADER_BYTES + key.len() + value.len();
        let class_id = self.geometry.class_for(total);
        self.counters.add_class(class_id, C::CmdSet, 1);
        // An already-expired item is never allocated: the checks still run and the old
        // value is removed, as if the item was stored and expired at once.
        let new_addr = match exptime_rel {
            Some(rel) => match self.new_item(key, &[value], opts.client_flags, rel, now) {
                Ok(addr) => Some(addr),
                Err(outcome) => return outcome,
            },
            None => None,
        };
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.clock.now_s();
        let existing = self.find_live(&mut table, key_hash, key, now, false);
        let existing_header = existing.map(|a| self.tier_of(a).mem.header(a));
        let stale = match self.verdict(opts, existing_header, class_id) {
            Verdict::Refuse(outcome) => {
                if outcome == StoreOutcome::NotStored && opts.mode == StoreMode::Add {
                    // memcached bumps the item an `add` collided with.
                    if let Some(a) = existing {
                        self.tier_of(a)
                            .mem
                            .header(a)
                            .set_last_access_ticks(self.ticks_at(now));
                    }
                }
                drop(table);
                if let Some(addr) = new_addr {
                    self.free_unlinked(addr);
                }
                return outcome;
            }
            Verdict::Store { stale } => stale,
        };
        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
        match new_addr {
            Some(addr) => {
                let h = self.tier_of(addr).mem.header(addr);
                h.cas.store(cas, Ordering::Relaxed);
                if stale {
                    h.set(state::STALE);
                }
                self.link(&mut table, key_hash, addr, existing);
            }
            None => {
                if let Some(old) = existing {
                    self.unlink(&mut table, key_hash, old);
                }
            }
        }
        StoreOutcome::Stored {
            cas: self.visible_cas(cas),
        }
    }

    /// `append`/`prepend`: the new item is built from the old one under the shard lock.
    fn store_concat(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.clock.now_s();
        let existing = self.find_live(&mut table, key_hash, key, now, false);
        let Some(old) = existing else {
            if let Some(vivify) = opts.vivify_exptime {
                // `ms` with N: an append to a missing item creates it.
                let total = ITEM_HEADER_BYTES + key.len() + value.len();
                let class_id = self.geometry.class_for(total);
                self.counters.add_class(class_id, C::CmdSet, 1);
                if let Verdict::Refuse(outcome) = self.verdict(opts, None, class_id) {
                    return outcome;
                }
                let Some(rel) = self.exptime_to_rel(vivify) else {
                    return StoreOutcome::Stored {
                        cas: self.visible_cas(self.next_cas()),
                    };
                };
                return match self.new_item(key, &[value], opts.client_flags, rel, now) {
                    Ok(addr) => {
                        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
                        self.tier_of(addr)
                            .mem
                            .header(addr)
                            .cas
                            .store(cas, Ordering::Relaxed);
                        self.link(&mut table, key_hash, addr, None);
                        StoreOutcome::Stored {
                            cas: self.visible_cas(cas),
                        }
                    }
                    Err(outcome) => outcome,
                };
            }
            if opts.compare_cas.is_some() {
                self.counters.add(G::CasMisses, 1);
                return StoreOutcome::NotFound;
            }
            return StoreOutcome::NotStored;
        };
        let old_tier = self.tier_of(old);
        let old_h = old_tier.mem.header(old);
        let class_id = old_h.class();
        self.counters.add_class(class_id, C::CmdSet, 1);
        let stale = match self.verdict(opts, Some(old_h), class_id) {
            Verdict::Refuse(outcome) => return outcome,
            Verdict::Store { stale } => stale,
        };
        // SAFETY: we hold the old item's shard lock (item.rs invariant 3).
        let old_value = unsafe { old_tier.mem.value(old) };
        if !self.item_fits(key.len(), old_value.len() + value.len()) {
            // memcached 1.6 answers NOT_STORED when the result would be too large.
            return StoreOutcome::NotStored;
        }
        let parts: [&[u8]; 2] = if opts.mode == StoreMode::Append {
            [old_value, value]
        } else {
            [value, old_value]
        };
        let flags = old_h.client_flags.load(Ordering::Relaxed);
        let exptime = old_h.exptime_rel_s.load(Ordering::Relaxed);
        let addr = match self.new_item(key, &parts, flags, exptime, now) {
            Ok(addr) => addr,
            Err(outcome) => return outcome,
        };
        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
        let h = self.tier_of(addr).mem.header(addr);
        h.cas.store(cas, Ordering::Relaxed);
        if stale {
            h.set(state::STALE);
        }
        // The allocation may have evicted the old item (only if its shard was free,
        // which it is not: we hold it), so `old` is still linked here.
        self.link(&mut table, key_hash, addr, Some(old));
        StoreOutcome::Stored {
            cas: self.visible_cas(cas),
        }
    }

    pub fn delete(&self, key: &[u8], opts: &DeleteOptions) -> DeleteOutcome {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.clock.now_s();
        let Some(addr) = self.find_live(&mut table, key_hash, key, now, false) else {
            self.counters.add(G::DeleteMisses, 1);
            return DeleteOutcome::NotFound;
        };
        let tier = self.tier_of(addr);
        let h = tier.mem.header(addr);
        if let Some(expected) = opts.compare_cas {
            if expected != self.visible_cas(h.cas.load(Ordering::Relaxed)) {
                return DeleteOutcome::Exists;
            }
        }
        self.counters.add_class(h.class(), C::DeleteHits, 1);
        if opts.invalidate {
            // memcached: mark stale, let the next reader win the token, bump the CAS.
            h.set(state::STALE);
            h.clear(state::TOKEN_SENT);
            if let Some(e) = opts.new_exptime {
                h.exptime_rel_s
                    .store(self.exptime_to_rel(e).unwrap_or(1), Ordering::Relaxed);
            }
            let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
            h.cas.store(cas, Ordering::Relaxed);
            return DeleteOutcome::Deleted;
        }
        if opts.remove_value_only {
            let exptime = h.exptime_rel_s.load(Ordering::Relaxed);
            let cas = h.cas.load(Ordering::Relaxed);
            let bits = h.state.load(Ordering::Relaxed) & (state::STALE | state::TOKEN_SENT);
            match self.new_item(key, &[], 0, exptime, now) {
                Ok(new_addr) => {
                    let nh = self.tier_of(new_addr).mem.header(new_addr);
                    nh.cas.store(cas, Ordering::Relaxed);
                    nh.set(bits);
                    self.link(&mut table, key_hash, new_addr, Some(addr));
                }
                // No memory even for an empty item: removing it entirely is the
                // closest outcome that never serves the old value.
                Err(_) => self.unlink(&mut table, key_hash, addr),
            }
            return DeleteOutcome::Deleted;
        }
        self.unlink(&mut table, key_hash, addr);
        DeleteOutcome::Deleted
    }

    pub fn arith(&self, key: &[u8], opts: &ArithOptions) -> ArithOutcome {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.clock.now_s();
        let miss_counter = if opts.increment {
            G::IncrMisses
        } else {
            G::DecrMisses
        };
        let Some(addr) = self.find_live(&mut table, key_hash, key, now, false) else {
            self.counters.add(miss_counter, 1);
            let Some((initial, exptime)) = opts.vivify else {
                return ArithOutcome::NotFound;
            };
            let rel = self.exptime_to_rel(exptime).unwrap_or(1);
            let digits = DecimalBuf::new(initial);
            return match self.new_item(key, &[digits.as_bytes()], 0, rel, now) {
                Ok(new_addr) => {
                    let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
                    self.tier_of(new_addr)
                        .mem
                        .header(new_addr)
                        .cas
                        .store(cas, Ordering::Relaxed);
                    self.link(&mut table, key_hash, new_addr, None);
                    ArithOutcome::Value {
                        value: initial,
                        cas: self.visible_cas(cas),
                        ttl_remaining_s: if rel == 0 {
                            None
                        } else {
                            Some(rel.saturating_sub(now))
                        },
                    }
                }
                Err(_) => ArithOutcome::OutOfMemory,
            };
        };
        let tier = self.tier_of(addr);
        let h = tier.mem.header(addr);
        if let Some(expected) = opts.compare_cas {
            if expected != self.visible_cas(h.cas.load(Ordering::Relaxed)) {
                return ArithOutcome::Exists;
            }
        }
        // SAFETY: we hold the item's shard lock (item.rs invariant 3).
        let old_value = unsafe { tier.mem.value(addr) };
        let Some(current) = parse_counter(old_value) else {
            return ArithOutcome::NonNumeric;
        };
        let value = if opts.increment {
            current.wrapping_add(opts.delta)
        } else {
            current.saturating_sub(opts.delta)
        };
        self.counters.add_class(
            h.class(),
            if opts.increment {
                C::IncrHits
            } else {
                C::DecrHits
            },
            1,
        );
        let digits = DecimalBuf::new(value);
        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
        let target = if digits.len() <= old_value.len() {
            // memcached rewrites in place, padding with spaces, when the number fits.
            // SAFETY: shard lock held (item.rs invariant 3 (b)); the digits fit.
            unsafe { tier.mem.overwrite_value_padded(addr, digits.as_bytes()) };
            h.cas.store(cas, Ordering::Relaxed);
            addr
        } else {
            let flags = h.client_flags.load(Ordering::Relaxed);
            let exptime = h.exptime_rel_s.load(Ordering::Relaxed);
            match self.new_item(key, &[digits.as_bytes()], flags, exptime, now) {
                Ok(new_addr) => {
                    self.tier_of(new_addr)
                        .mem
                        .header(new_addr)
                        .cas
                        .store(cas, Ordering::Relaxed);
                    self.link(&mut table, key_hash, new_addr, Some(addr));
                    new_addr
                }
                Err(_) => return ArithOutcome::OutOfMemory,
            }
        };
        let th = self.tier_of(target).mem.header(target);
        if let Some(e) = opts.touch_exptime {
            th.exptime_rel_s
                .store(self.exptime_to_rel(e).unwrap_or(1), Ordering::Relaxed);
        }
        th.set_last_access_ticks(self.ticks_at(now));
        ArithOutcome::Value {
            value,
            cas: self.visible_cas(cas),
            ttl_remaining_s: Self::ttl_remaining(th, now),
        }
    }

    pub fn touch(&self, key: &[u8], exptime: ClientExptime) -> TouchOutcome {
        self.counters.add(G::CmdTouch, 1);
        let rel = self.exptime_to_rel(exptime);
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let (now_ticks, now) = self.now_ticks_and_s();
        let Some(addr) = self.find_live(&mut table, key_hash, key, now, false) else {
            self.counters.add(G::TouchMisses, 1);
            return TouchOutcome::NotFound;
        };
        let h = self.tier_of(addr).mem.header(addr);
        self.counters.add_class(h.class(), C::TouchHits, 1);
        match rel {
            Some(rel) => {
                h.exptime_rel_s.store(rel, Ordering::Relaxed);
                self.bump(addr, now_ticks);
            }
            None => self.unlink(&mut table, key_hash, addr),
        }
        TouchOutcome::Touched
    }

    /// `flush_all [delay]`: invalidates every item now, or `delay_s` seconds from now
    /// (an absolute Unix time above 30 days). Items are removed lazily and by the
    /// crawler, as memcached does.
    pub fn flush_all(&self, delay_s: i64) {
        self.counters.add(G::CmdFlush, 1);
        let now = self.clock.now_s();
        if delay_s <= 0 {
            // memcached takes a CAS value for the flush (`get_cas_id`): every item stored
            // before it has a smaller CAS, and the next store's CAS skips one value.
            self.flush_oldest_cas
                .store(self.next_cas(), Ordering::Relaxed);
            self.flush_at_s.store(now.max(1), Ordering::Relaxed);
        } else {
            let when = self.exptime_to_rel(delay_s).unwrap_or(now).max(1);
            self.flush_at_s.store(when, Ordering::Relaxed);
        }
    }

    // ----- slab page moves -----------------------------------------------------------

    /// Empties `page` of class `src` (evicting its items) and returns it to the pool.
    /// `retries`: how many times to wait for busy items before giving up.
    /// With `keep`, the emptied page stays reserved (not back in the pool) for the
    /// caller to hand to a class with [`Engine::adopt_page`].
    pub(crate) fn evacuate_page(
        &self,
        tier: &Tier,
        src: usize,
        page: usize,
        retries: usize,
        keep: bool,
    ) -> bool {
        for attempt in 0..=retries {
            let mut cs = tier.classes[src].0.lock();
            if !cs.pages.contains(&(page as u32)) {
                return false;
            }
            if src == self.geometry.large {
                let addr = tier.mem.addr_at(page * SLAB_PAGE_SIZE_BYTES);
                let h = tier.mem.header(addr);
                if h.has(state::LINKED) {
                    let key_hash = h.key_hash.load(Ordering::Relaxed);
                    if let Some(mut table) = self.index.shard(key_hash).table.try_lock() {
                        crate::index::Index::remove(&mut table, key_hash, addr);
                        h.clear(state::LINKED);
                        cs.lru.unlink(&tier.mem, addr);
                        self.free_chunk(tier, &mut cs, addr);
                        self.rare
                            .slab_reassign_evictions_nomem
                            .fetch_add(1, Ordering::Relaxed);
                        self.rare.slabs_moved.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                }
                self.rare
                    .slab_reassign_busy_items
                    .fetch_add(1, Ordering::Relaxed);
            } else {
                if cs.moving_page.is_some_and(|p| p as usize != page) {
                    return false;
                }
                cs.moving_page = Some(page as u32);
                let base = page * SLAB_PAGE_SIZE_BYTES;
                let mut busy = 0u64;
                for i in 0..cs.per_page {
                    let addr = tier.mem.addr_at(base + i * cs.chunk_bytes);
                    let h = tier.mem.header(addr);
                    let bits = h.state.load(Ordering::Relaxed);
                    if bits & state::FREE != 0 {
                        cs.unlink_free(&tier.mem, addr);
                    } else if bits & state::LINKED != 0 {
                        let key_hash = h.key_hash.load(Ordering::Relaxed);
                        match self.index.shard(key_hash).table.try_lock() {
                            Some(mut table) => {
                                crate::index::Index::remove(&mut table, key_hash, addr);
                                h.clear(state::LINKED);
                                cs.lru.unlink(&tier.mem, addr);
                                self.free_chunk(tier, &mut cs, addr);
                                self.rare
                                    .slab_reassign_evictions_nomem
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                            None => busy += 1,
                        }
                    } else if bits & state::ALLOCATED != 0 {
                        // Being written by a store that has not linked it yet.
                        busy += 1;
                    }
                }
                if busy == 0 {
                    cs.moving_page = None;
                    if let Some(pos) = cs.pages.iter().position(|&p| p as usize == page) {
                        cs.pages.swap_remove(pos);
                    }
                    tier.page_used[page].store(0, Ordering::Relaxed);
                    if !keep {
                        tier.pool.lock().free_run(page, 1);
                    }
                    self.rare.slabs_moved.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                self.rare
                    .slab_reassign_busy_items
                    .fetch_add(busy, Ordering::Relaxed);
                if attempt == retries {
                    // Give up: put the chunks already emptied back on the free list.
                    cs.moving_page = None;
                    for i in 0..cs.per_page {
                        let addr = tier.mem.addr_at(base + i * cs.chunk_bytes);
                        if tier.mem.header(addr).state.load(Ordering::Relaxed) == 0 {
                            cs.push_free(&tier.mem, addr);
                        }
                    }
                    return false;
                }
            }
            drop(cs);
            if retries <= STEAL_RETRIES {
                // Foreground (a store is waiting): only let the busy writers finish.
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        false
    }

    /// The page of `class_id` with the fewest chunks in use.
    pub(crate) fn emptiest_page(&self, tier: &Tier, class_id: usize) -> Option<usize> {
        let cs = tier.classes[class_id].0.lock();
        cs.pages
            .iter()
            .map(|&p| p as usize)
            .min_by_key(|&p| tier.page_used[p].load(Ordering::Relaxed))
    }

    /// A class that could neither allocate nor evict takes a page from the classes
    /// with the most pages (memcached would exceed `-m` here; we stay within it).
    fn steal_page(&self, tier: &Tier, class_id: usize) -> bool {
        let mut victims: Vec<(usize, usize)> = (1..=self.geometry.large)
            .filter(|&c| c != class_id)
            .map(|c| (c, tier.classes[c].0.lock().pages.len()))
            .filter(|&(_, pages)| pages > 0)
            .collect();
        victims.sort_by_key(|&(_, pages)| std::cmp::Reverse(pages));
        victims.iter().take(STEAL_VICTIMS_MAX).any(|&(victim, _)| {
            self.emptiest_page(tier, victim).is_some_and(|page| {
                let keep = victim != self.geometry.large && class_id != self.geometry.large;
                let moved = self.evacuate_page(tier, victim, page, STEAL_RETRIES, keep);
                if moved && keep {
                    self.adopt_page(tier, class_id, page);
                }
                moved
            })
        })
    }

    /// Gives a page reserved by `evacuate_page(.., keep = true)` to class `dst`.
    fn adopt_page(&self, tier: &Tier, dst: usize, page: usize) {
        let mut cs = tier.classes[dst].0.lock();
        tier.pool.lock().set_owner(page, dst);
        cs.add_page(&tier.mem, page, &tier.page_used);
    }

    /// `slabs reassign <src> <dst>`: moves one page from class `src` (-1: any class
    /// with a spare page) to class `dst` (0: the free page pool).
    pub fn slabs_reassign(&self, src_class: i32, dst_class: i32) -> Result<(), ReassignError> {
        if !self.config.slab_reassign {
            return Err(ReassignError::Disabled);
        }
        // memcached's order of checks (`do_slabs_reassign`): running, same, pick a
        // source for -1, class range, spare pages.
        if self.rare.slab_reassign_running.load(Ordering::Acquire) {
            return Err(ReassignError::Busy);
        }
        if src_class == dst_class {
            return Err(ReassignError::Same);
        }
        let tier = self.dram();
        let largest = self.geometry.largest as i32;
        let src_class = if src_class == -1 {
            // Any class with a spare page; none found is BADCLASS, as in memcached.
            (1..=self.geometry.largest)
                .filter(|&c| c as i32 != dst_class)
                .map(|c| (c, tier.classes[c].0.lock().pages.len()))
                .filter(|&(_, pages)| pages > 1)
                .max_by_key(|&(_, pages)| pages)
                .map_or(-1, |(c, _)| c as i32)
        } else {
            src_class
        };
        if src_class < 0 || src_class > largest || dst_class < 0 || dst_class > largest {
            return Err(ReassignError::BadClass);
        }
        let src = src_class as usize;
        // Class 0 is the free page pool, which is never a source here.
        if src == 0 || tier.classes[src].0.lock().pages.len() < 2 {
            return Err(ReassignError::NoSpare);
        }
        if self.rare.slab_reassign_running.swap(true, Ordering::AcqRel) {
            return Err(ReassignError::Busy);
        }
        let moved = self.move_page(tier, src, dst_class as usize);
        self.rare
            .slab_reassign_running
            .store(false, Ordering::Release);
        if moved {
            Ok(())
        } else {
            Err(ReassignError::Busy)
        }
    }

    /// Moves the emptiest page of `src` to `dst` (0: leave it in the pool). In DRAM
    /// with a slow tier the page's items are demoted first, so none is lost.
    pub(crate) fn move_page(&self, tier: &Tier, src: usize, dst: usize) -> bool {
        let Some(page) = self.emptiest_page(tier, src) else {
            return false;
        };
        let keep = dst != 0 && dst != self.geometry.large && src != self.geometry.large;
        if self.page_moves_demote(tier) {
            // Tiered: the page's items go to the slow tier; only what cannot be
            // demoted (the slow tier is full) is evicted below. A few passes: an item
            // changed in place during a pass (its CAS moved on) is taken by the next.
            for _ in 0..crate::migrate::PAGE_DEMOTE_PASSES {
                if !self.demote_page_items(tier, src, page) {
                    break;
                }
            }
            if src == self.geometry.large
                && !tier.classes[src].0.lock().pages.contains(&(page as u32))
            {
                // The large item's demotion already returned its run to the pool.
                self.rare.slabs_moved.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        if !self.evacuate_page(tier, src, page, REASSIGN_RETRIES, keep) {
            return false;
        }
        if keep {
            self.adopt_page(tier, dst, page);
        }
        true
    }

    /// `slabs automove <0|1|2>`.
    pub fn set_slab_automove(&self, mode: u32) -> Result<(), ConfigError> {
        if mode > 2 {
            return Err(ConfigError::SlabAutomove(mode));
        }
        self.slab_automove.store(mode, Ordering::Relaxed);
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
            limit_bytes: (tier.page_count * SLAB_PAGE_SIZE_BYTES) as u64,
            pages_in_use: tier.pool.lock().pages_in_use() as u64,
            get_hits: self.counters.get(if which == TierId::Dram {
                G::DramGetHits
            } else {
                G::SlowGetHits
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
        usage
    }

    /// The slab class an item of this key and value length goes to.
    pub fn slab_class_for(&self, key_len: usize, value_len: usize) -> u8 {
        self.geometry
            .class_for(ITEM_HEADER_BYTES + key_len + value_len) as u8
    }
}

/// Reads a stored counter as memcached's `do_add_delta` does, with `safe_strtoull` on
/// the value: leading whitespace (C `isspace`) is skipped, then an optional `+` or `-`,
/// then at least one digit (any number of leading zeros); the digits must be followed by
/// the end of the value, a NUL or a whitespace byte, and whatever follows is ignored
/// (so `"9 0"` reads as 9 and `"12\r\nab"` as 12). A `-` number is negated modulo 2^64
/// by `strtoull` and kept only if the result is not negative as an i64 (`"-0"` is 0).
/// Overflow is refused.
fn parse_counter(value: &[u8]) -> Option<u64> {
    let is_c_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let skipped = value.iter().take_while(|&&b| is_c_space(b)).count();
    let rest = &value[skipped..];
    let (negative, rest) = match rest.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, rest),
    };
    let digit_count = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digit_count == 0 {
        return None;
    }
    match rest.get(digit_count) {
        None | Some(0) => {}
        Some(&b) if is_c_space(b) => {}
        Some(_) => return None,
    }
    let magnitude = rest[..digit_count].iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    if !negative {
        return Some(magnitude);
    }
    let wrapped = magnitude.wrapping_neg();
    (i64::try_from(wrapped).is_ok()).then_some(wrapped)
}

/// A u64 formatted in decimal on the stack.
struct DecimalBuf {
    buf: [u8; 20],
    start: usize,
}

impl DecimalBuf {
    fn new(mut v: u64) -> DecimalBuf {
        let mut buf = [0u8; 20];
        let mut start = buf.len();
        loop {
            start -= 1;
            buf[start] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        DecimalBuf { buf, start }
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
    fn len(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_parsing_follows_memcached() {
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"42  "), Some(42));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b"000000000000000000000000042"), Some(42));
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"  "), None);
        assert_eq!(parse_counter(b"\t\n"), None);
        assert_eq!(parse_counter(b"1a"), None);
        assert_eq!(parse_counter(b"a1"), None);
        assert_eq!(parse_counter(b"+"), None);
        // Checked against memcached 1.6.18 (`incr k 1` on each value): `+3` -> 4,
        // ` 7` -> 8, `12 abc` -> 13, `12\r\nab` -> 13, `-0` -> 1, `1\0a` -> 2,
        // `1\t` -> 2, `9 0` (decr 0) -> 9; `-1 ` and `1a` are non-numeric.
        assert_eq!(parse_counter(b"+3"), Some(3));
        assert_eq!(parse_counter(b" 7"), Some(7));
        assert_eq!(parse_counter(b"12 abc"), Some(12));
        assert_eq!(parse_counter(b"12\r\nab"), Some(12));
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"1\0a"), Some(1));
        assert_eq!(parse_counter(b"1\t"), Some(1));
        assert_eq!(parse_counter(b"9 0"), Some(9));
        assert_eq!(parse_counter(b"-1 "), None);
        assert_eq!(parse_counter(b"-18446744073709551615"), Some(1));
        assert_eq!(DecimalBuf::new(0).as_bytes(), b"0");
        assert_eq!(
            DecimalBuf::new(u64::MAX).as_bytes(),
            b"18446744073709551615"
        );
    }
}
