//! An item's life in memory: taking and returning chunks, writing a new item,
//! publishing it (index + LRU), finding it, and taking it away again. Which tier a new
//! item goes to and what is removed when a class is full are the policy's decisions
//! (`policy/`); this file is the mechanism they use.
//!
//! Accounting of an item's own header: every operation that rewrites an item's links or
//! state charges that header write once (`header_bytes::LINKS`), and hands the
//! `HeaderWrite` view the charge made to the list functions that rewrite it; the
//! neighbours' link updates are charged by `lru.rs` and `slab.rs`. A freshly written
//! item's header was charged with the whole item by `Fresh::write_item`.

use std::sync::atomic::Ordering;

use crate::api::StoreOutcome;
use crate::counters::G;
use crate::engine::{Dead, Engine, SlabTier};
use crate::events::{kind, EventWhat, ItemFacts};
use crate::index::{Held, Index, ShardEntry, ShardGuard};
use crate::item::{
    header_bytes, state, Fresh, HeaderRead, HeaderWrite, ItemAddr, ItemMemory, ItemRef, Written,
    ITEM_HEADER_BYTES, NIL,
};
use crate::policy::engine_ops::EngineOps;
use crate::policy::Policy;
use crate::pool::LARGE_TAIL;
use crate::slab::{ClassState, Geometry};

/// A live item a look-up found: its tier, and the item with its header located and the
/// proof to read it (which borrows the shard's guard for `'g`).
pub(crate) struct Found<'e, 'g> {
    pub tier: &'e SlabTier,
    pub item: ItemRef<'e, Held<'g>>,
}

/// Allocation attempts (each may evict or demote) before giving up, as memcached's
/// `do_item_alloc_pull`.
const ALLOC_TRIES: usize = 10;

/// Items looked at from each LRU segment's tail for dead ones before a class takes a
/// fresh page (memcached's `lru_pull_tail` looks at five).
pub(crate) const TAIL_RECLAIM_TRIES: usize = 5;

/// How far [`Engine::reclaim_dead_at_tails`] looks along each LRU tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TailScan {
    /// Past live items: every dead one among the last [`TAIL_RECLAIM_TRIES`] (a class
    /// out of free chunks, before it takes a fresh page).
    PastLive,
    /// Up to the first live item (every store without the LRU maintainer, memcached's
    /// unsegmented LRU).
    UntilLive,
}

impl Engine {
    /// Takes a chunk (or a page run) for an item of `total_bytes` without evicting: the
    /// only place a [`Fresh`] chunk comes from (recovery aside).
    pub(crate) fn take_chunk<'t>(
        &self,
        tier: &'t SlabTier,
        cs: &mut ClassState,
        total_bytes: usize,
    ) -> Option<Fresh<'t>> {
        if cs.id == self.geometry.large {
            let run = Geometry::large_run_pages(total_bytes);
            let first = tier.pool.lock().alloc_run(cs.id, run)?;
            cs.pages.push(first as u32);
            tier.page_used[first].store(run as u32, Ordering::Relaxed);
            for tail in first + 1..first + run {
                tier.page_class(tail).store(LARGE_TAIL, Ordering::Relaxed);
            }
            tier.page_class(first).store(cs.id as u8, Ordering::Relaxed);
            let addr = tier
                .mem
                .addr_at(first * crate::config::SLAB_PAGE_SIZE_BYTES);
            // SAFETY: the page run was just given to this class (the pool handed it out
            // under its lock, and the class's lock is held): nothing else names it.
            let chunk = unsafe { Fresh::claim(&tier.mem, addr) };
            chunk.mark_allocated();
            return Some(chunk);
        }
        // Expired items' chunks before fresh memory, as memcached's LRU maintainer
        // reclaims them: a cache of short-lived items reuses their chunks instead of
        // growing to its limit (and then evicting live items for room it had).
        if cs.free_head == NIL {
            self.reclaim_dead_at_tails(tier, cs, TailScan::PastLive);
        } else if !self.config.lru_maintainer {
            // Without the LRU maintainer nothing else looks at the tails, so every
            // allocation does, as memcached's does when its LRU is not segmented
            // (`do_item_alloc_pull`'s `lru_pull_tail` before `slabs_alloc`): a store
            // reuses the memory of what expired or was flushed, counted as `reclaimed`.
            self.reclaim_dead_at_tails(tier, cs, TailScan::UntilLive);
        }
        if cs.free_head == NIL {
            let page = tier.pool.lock().alloc_run(cs.id, 1)?;
            cs.add_page(&tier.mem, page, &tier.page_used, tier.page_class(page));
        }
        let addr = cs.pop_free(&tier.mem)?;
        let page = ItemMemory::page_of(addr);
        tier.page_used[page].fetch_add(1, Ordering::Relaxed);
        // SAFETY: the chunk just left its class's free list under the class lock: a free
        // chunk is in no index and no LRU list, and only the allocator pops it.
        let chunk = unsafe { Fresh::claim(&tier.mem, addr) };
        chunk.mark_allocated();
        Some(chunk)
    }

    /// A free chunk of `cs`'s class outside `page`, the page the slab mover is emptying;
    /// never a fresh page (memcached's `slab_rebalance_alloc`). A free chunk of `page`
    /// met on the way leaves the free list for good, as the mover would take it anyway
    /// (memcached's `slab_reassign_inline_reclaim`). Bounded by the free list.
    pub(crate) fn take_free_outside<'t>(
        &self,
        tier: &'t SlabTier,
        cs: &mut ClassState,
        page: usize,
    ) -> Option<Fresh<'t>> {
        debug_assert_eq!(cs.moving_page, Some(page as u32));
        debug_assert_ne!(cs.id, self.geometry.large);
        let chunk_bytes = cs.chunk_bytes;
        while cs.free_head != NIL {
            // The free list is not empty, so this pops its head and takes no page.
            let chunk = self.take_chunk(tier, cs, chunk_bytes)?;
            if ItemMemory::page_of(chunk.addr()) != page {
                return Some(chunk);
            }
            // Back to what the mover makes of a free chunk of its page: emptied, and not
            // a chunk in use.
            tier.page_used[page].fetch_sub(1, Ordering::Relaxed);
            chunk.into_freed().store_state(0);
            self.rare
                .slab_reassign_inline_reclaim
                .fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// Returns a chunk that is in no LRU and no index to its class (or the pool). The
    /// caller paid for the chunk's header write (`h`, `LINKS`). In a persistent pool the
    /// chunk's record is invalidated first, so it can never come back.
    pub(crate) fn free_chunk(&self, tier: &SlabTier, cs: &mut ClassState, h: HeaderWrite<'_>) {
        let addr = h.addr();
        self.unseal(tier, h.read(), header_bytes::LINKS);
        // item.rs, invariant 3 (b): a chunk leaves the index and its LRU before it is freed.
        debug_assert!(
            !h.has(state::LINKED),
            "freeing chunk {addr:#x}, which is still linked"
        );
        let page = ItemMemory::page_of(addr);
        if cs.id == self.geometry.large {
            let run = tier.page_used[page].swap(0, Ordering::Relaxed) as usize;
            h.store_state(0);
            if let Some(pos) = cs.pages.iter().position(|&p| p as usize == page) {
                cs.pages.swap_remove(pos);
            }
            for run_page in page..(page + run.max(1)).min(tier.page_count) {
                tier.page_class(run_page).store(0, Ordering::Relaxed);
            }
            tier.pool.lock().free_run(page, run.max(1));
            return;
        }
        let used = tier.page_used[page].fetch_sub(1, Ordering::Relaxed);
        debug_assert!(used > 0, "page {page} frees more chunks than it handed out");
        if cs.moving_page == Some(page as u32) {
            // The slab mover is emptying this page: keep the chunk off the free list.
            h.store_state(0);
        } else {
            cs.push_free(&tier.mem, h);
        }
    }

    /// Allocates a chunk for an item of `total_bytes` in `class_id` of `tier`. When the
    /// class has no free chunk, the policy makes room (memcached evicts its COLD tail,
    /// `do_item_alloc_pull`); if the class holds nothing at all, a page is taken from
    /// another class.
    pub(crate) fn alloc<'t>(
        &self,
        tier: &'t SlabTier,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh<'t>> {
        if tier.page_count == 0 {
            return None;
        }
        let now = self.now_s();
        for attempt in 0..ALLOC_TRIES {
            let mut cs = tier.classes[class_id].0.lock();
            if let Some(chunk) = self.take_chunk(tier, &mut cs, total_bytes) {
                cs.stats.direct_reclaims += attempt as u64;
                return Some(chunk);
            }
            if cs.lru.items() == 0 || self.make_room(tier, &mut cs, now) == 0 {
                break;
            }
            // The room just made is this allocation's: taken before the lock goes, or
            // another thread's store could take it, again and again under load, until
            // this one gave up with "out of memory".
            if let Some(chunk) = self.take_chunk(tier, &mut cs, total_bytes) {
                cs.stats.direct_reclaims += attempt as u64 + 1;
                return Some(chunk);
            }
        }
        // Nothing to evict here (the class is empty, or its tail is busy): take a page
        // from another class. Never with `-M`, where nothing may be evicted.
        if self.config.slab_reassign
            && self.config.evictions_enabled
            && self.steal_page(tier, class_id)
        {
            let mut cs = tier.classes[class_id].0.lock();
            if let Some(chunk) = self.take_chunk(tier, &mut cs, total_bytes) {
                return Some(chunk);
            }
        }
        tier.classes[class_id].0.lock().stats.outofmemory += 1;
        None
    }

    /// Takes a free chunk (or a free page) of `class_id` in `tier`, evicting nothing.
    pub(crate) fn take_free<'t>(
        &self,
        tier: &'t SlabTier,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh<'t>> {
        if tier.page_count == 0 {
            return None;
        }
        let mut cs = tier.classes[class_id].0.lock();
        self.take_chunk(tier, &mut cs, total_bytes)
    }

    /// Frees an item that was written but never linked (a store refused under the lock, a
    /// write-down that raced). Its header was charged when the item was written.
    pub(crate) fn free_unlinked(&self, item: Written<'_>) {
        self.free_chunk_of(item.addr(), item.into_freed());
    }

    /// Frees a chunk that was allocated but never written (a migration that lost its
    /// race): the rewrite of its header is charged now (`Fresh::into_freed`).
    pub(crate) fn free_unwritten(&self, chunk: Fresh<'_>) {
        self.free_chunk_of(chunk.addr(), chunk.into_freed());
    }

    fn free_chunk_of(&self, addr: ItemAddr, h: HeaderWrite<'_>) {
        let tier = self.tier_of(addr);
        let class_id = tier.class_of(addr);
        let mut cs = tier.classes[class_id].0.lock();
        self.free_chunk(tier, &mut cs, h);
    }

    /// Removes a linked item from its LRU and frees it. The caller holds the item's
    /// shard lock and has already removed it from the index.
    pub(crate) fn unlink_from_class(&self, addr: ItemAddr) {
        let tier = self.tier_of(addr);
        let h = tier.mem.write_header(addr, header_bytes::LINKS);
        h.clear(state::LINKED);
        let mut cs = tier.classes[tier.class_of(addr)].0.lock();
        cs.lru.unlink(&tier.mem, h);
        self.free_chunk(tier, &mut cs, h);
    }

    /// Removes a linked item from index, LRU and memory when the caller already holds
    /// its class lock (`cs`) and its shard (`table`): eviction, reclaim of dead items,
    /// page evacuation. `item`: its header, which the caller's scan paid to read; the
    /// header's rewrite is charged here. Counting why is the caller's business.
    pub(crate) fn remove_locked(
        &self,
        tier: &SlabTier,
        cs: &mut ClassState,
        table: &mut ShardGuard<'_>,
        item: HeaderRead<'_>,
    ) {
        Index::remove(table, item.key_hash(), item.addr());
        let h = item.charge_write(header_bytes::LINKS);
        h.clear(state::LINKED);
        cs.lru.unlink(&tier.mem, h);
        self.free_chunk(tier, cs, h);
    }

    /// Reclaims a dead (expired or flushed) item found by a scan under the class lock
    /// (`h`: its header, which the scan paid to read), if its shard is free. Returns
    /// whether it was removed.
    pub(crate) fn reclaim_dead(
        &self,
        tier: &SlabTier,
        cs: &mut ClassState,
        h: HeaderRead<'_>,
        by_crawler: bool,
    ) -> bool {
        let key_hash = h.key_hash();
        let Some(mut table) = self.index.shard(key_hash).table.try_lock() else {
            cs.stats.lrutail_reflocked += 1;
            return false;
        };
        if by_crawler {
            cs.stats.crawler_reclaimed += 1;
        } else {
            cs.stats.reclaimed += 1;
        }
        if !h.has(state::FETCHED) {
            cs.stats.expired_unfetched += 1;
        }
        self.remove_locked(tier, cs, &mut table, h);
        true
    }

    /// Reclaims the dead (expired or flushed) items among the last
    /// [`TAIL_RECLAIM_TRIES`] of each LRU segment of the class (the caller holds its
    /// lock), so their chunks go to the free list; with [`TailScan::UntilLive`] only those
    /// behind the first live item, as memcached's `lru_pull_tail` with no flags. A dead
    /// item whose shard is busy is passed over, as memcached passes over one it cannot
    /// lock. Returns how many were reclaimed (counted as memcached's `reclaimed`).
    /// Bounded: it looks at a few headers, once per page's worth of allocations when
    /// nothing is dead.
    pub(crate) fn reclaim_dead_at_tails(
        &self,
        tier: &SlabTier,
        cs: &mut ClassState,
        scan: TailScan,
    ) -> usize {
        let now = self.now_s();
        let mut reclaimed = 0;
        for segment in 0..crate::lru::SEGMENTS {
            let mut addr = cs.lru.tail[segment];
            for _ in 0..TAIL_RECLAIM_TRIES {
                if addr == NIL {
                    break;
                }
                let h = tier.mem.read_header(addr, header_bytes::ALL);
                let prev = h.prev();
                if self.dead_reason(h, now).is_none() {
                    if scan == TailScan::UntilLive {
                        break;
                    }
                } else if self.reclaim_dead(tier, cs, h, false) {
                    reclaimed += 1;
                }
                addr = prev;
            }
        }
        reclaimed
    }

    /// Evicts the live item `h` (found at a COLD tail by the policy, whose search paid to
    /// read its header) if its shard is free, with memcached's eviction statistics.
    /// Returns whether it was evicted.
    pub(crate) fn evict_item(
        &self,
        tier: &SlabTier,
        cs: &mut ClassState,
        h: HeaderRead<'_>,
        now_s: u32,
    ) -> bool {
        let addr = h.addr();
        let key_hash = h.key_hash();
        let Some(mut table) = self.index.shard(key_hash).table.try_lock() else {
            cs.stats.lrutail_reflocked += 1;
            return false;
        };
        cs.stats.evicted += 1;
        cs.stats.evicted_time_s = now_s.saturating_sub(h.last_access_s());
        if h.exptime_rel_s() != 0 {
            cs.stats.evicted_nonzero += 1;
        }
        if !h.has(state::FETCHED) {
            cs.stats.evicted_unfetched += 1;
        }
        if h.has(state::ACTIVE) {
            cs.stats.evicted_active += 1;
        }
        if self.events.wants(kind::EVICTIONS) {
            // Linked (we hold its class lock), so its shard holds it: a probe for the
            // proof, on this watched path only. The key's read continues the search's
            // read of the header.
            let item = Index::held(&mut table, key_hash, addr);
            debug_assert!(
                item.is_some(),
                "evicting {addr:#x}, which its shard does not hold"
            );
            let key = item.as_ref().map_or(&[][..], |item| h.read_key(item));
            let what = EventWhat::Evicted {
                item: ItemFacts {
                    tier: tier.id,
                    class_id: cs.id as u8,
                    value_bytes: h.value_len(),
                },
                fetched: h.has(state::FETCHED),
                ttl_s: Self::ttl_remaining(h, now_s),
                idle_s: cs.stats.evicted_time_s,
            };
            self.events.record(kind::EVICTIONS, key, what);
        }
        self.remove_locked(tier, cs, &mut table, h);
        true
    }

    /// Unlinks the item at `addr` from index and LRU and frees it (shard lock held).
    pub(crate) fn unlink(&self, table: &mut ShardGuard<'_>, key_hash: u32, addr: ItemAddr) {
        Index::remove(table, key_hash, addr);
        self.unlink_from_class(addr);
    }

    /// Publishes a freshly written item: index (replacing `old`, the live item of the
    /// same key the caller's look-up found), the LRU segment the policy names, then frees
    /// `old`. The caller holds the shard lock.
    pub(crate) fn link(
        &self,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        item: Written<'_>,
        old: Option<HeaderRead<'_>>,
    ) {
        let addr = item.addr();
        let tier = self.tier_of(addr);
        let h = item.view().header();
        h.set_key_hash(key_hash);
        h.set(state::LINKED);
        // A persistent pool: the record being replaced is invalidated before the new one
        // is sealed, so a crash never leaves the old value valid and the new one not
        // (both valid is possible only before the client is answered; see pool.rs).
        if let Some(old) = old {
            self.unseal(self.tier_of(old.addr()), old, header_bytes::LINKS);
        }
        self.seal(&item);
        match old {
            Some(old) => {
                let replaced = Index::replace(table, key_hash, old.addr(), item);
                debug_assert!(
                    replaced,
                    "linking over {:#x}, which is not indexed",
                    old.addr()
                );
            }
            None => Index::insert_new(table, key_hash, item),
        }
        {
            let segment = self.policy.on_link(
                EngineOps::new(self),
                &mut ShardEntry::new(table, key_hash),
                tier,
                h,
                old,
            );
            let mut cs = tier.classes[tier.class_of(addr)].0.lock();
            cs.lru.link_head(&tier.mem, segment, h);
        }
        self.note_expiry(h.exptime_rel_s());
        if let Some(old) = old {
            self.unlink_from_class(old.addr());
        }
        self.counters.add(G::TotalItems, 1);
    }

    /// Looks up `key` under its shard lock; a dead item found is unlinked and counted.
    /// A live one comes with the proof to read it, which borrows the guard.
    pub(crate) fn find_live<'g>(
        &self,
        table: &'g mut ShardGuard<'_>,
        key_hash: u32,
        key: &[u8],
        now_s: u32,
        count_reads: bool,
    ) -> Option<Held<'g>> {
        self.find_live_item(table, key_hash, key, now_s, count_reads)
            .map(|found| found.item.into_proof())
    }

    /// [`Engine::find_live`], handing back the item's tier and the item with its header
    /// located (a read goes on to a dozen of its fields) and its proof. Always inlined:
    /// as a call its set-up is paid on every look-up, and a 10-key `get` makes ten
    /// (docs/results/engine-hot-path-figures.md).
    #[inline(always)]
    pub(crate) fn find_live_item<'e, 'g>(
        &'e self,
        table: &'g mut ShardGuard<'_>,
        key_hash: u32,
        key: &[u8],
        now_s: u32,
        count_reads: bool,
    ) -> Option<Found<'e, 'g>> {
        // The tier of the last item the probe read is the found item's (the probe stops
        // at the match): kept rather than looked up again.
        let last_tier = std::cell::Cell::new(None);
        let item = Index::find_item_unless(
            table,
            |a| {
                let tier = self.tier_of(a);
                last_tier.set(Some(tier));
                &tier.mem
            },
            key_hash,
            key,
            |table, at| {
                let Some(reason) = self.dead_reason(at.header(), now_s) else {
                    return false;
                };
                if count_reads {
                    match reason {
                        Dead::Expired => self.counters.add(G::GetExpired, 1),
                        Dead::Flushed => self.counters.add(G::GetFlushed, 1),
                    }
                }
                self.unlink(table, key_hash, at.addr());
                true
            },
        )?;
        Some(Found {
            tier: last_tier.get().unwrap_or_else(|| self.tier_of(item.addr())),
            item,
        })
    }

    /// Allocates (where the policy places it) and writes a new item, not yet linked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_item(
        &self,
        key: &[u8],
        key_hash: u32,
        value_parts: &[&[u8]],
        client_flags: u32,
        exptime_rel_s: u32,
        now_s: u32,
    ) -> Result<Written<'_>, StoreOutcome> {
        let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
        let class_id = self
            .geometry
            .class_for(ITEM_HEADER_BYTES + key.len() + value_len);
        self.new_item_in_class(
            class_id,
            key,
            key_hash,
            value_parts,
            client_flags,
            exptime_rel_s,
            now_s,
        )
    }

    /// [`Engine::new_item`] when the caller has the item's slab class at hand (a store
    /// counts it before): the class is a binary search over the class sizes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_item_in_class(
        &self,
        class_id: usize,
        key: &[u8],
        key_hash: u32,
        value_parts: &[&[u8]],
        client_flags: u32,
        exptime_rel_s: u32,
        now_s: u32,
    ) -> Result<Written<'_>, StoreOutcome> {
        let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
        let total = ITEM_HEADER_BYTES + key.len() + value_len;
        if !self.item_fits(key.len(), value_len) {
            return Err(StoreOutcome::TooLarge);
        }
        debug_assert_eq!(class_id, self.geometry.class_for(total));
        let Some(chunk) = self.alloc_new_item(key_hash, class_id, total) else {
            return Err(StoreOutcome::OutOfMemory);
        };
        let capacity = self.chunk_capacity(class_id, total);
        let item = chunk.write_item(capacity, key, value_parts);
        let h = item.view();
        h.set_client_flags(client_flags);
        h.set_exptime_rel_s(exptime_rel_s);
        h.set_last_access_s(now_s);
        h.set_access(self.policy.new_item_access(now_s));
        h.set_next(NIL);
        h.set_prev(NIL);
        h.set_cas(0);
        Ok(item)
    }
}
