//! Slab page moves: `slabs reassign`, the automover's page moves and a full class
//! taking a page from another (memcached's slab rebalancer). A page is emptied by
//! evacuation; in a tiered engine whose policy migrates, its live items are demoted to
//! the slow tier first (one move each), and a page whose items could not all be demoted
//! does not move: a page move in DRAM never loses an item (a demotion makes room in a
//! full slow tier by that tier's own eviction).

use std::sync::atomic::Ordering;

use crate::config::{ConfigError, SLAB_PAGE_SIZE_BYTES};
use crate::engine::{Engine, ReassignError, SlabTier};
use crate::index::{Index, ShardGuard};
use crate::item::{header_bytes, state, HeaderRead, NIL};
use crate::moves::{Direction, Queued};
use crate::slab::ClassState;

/// Classes a failed allocation tries to take a page from, and how often it waits for
/// busy items in the page before moving to the next class.
const STEAL_VICTIMS_MAX: usize = 3;
const STEAL_RETRIES: usize = 2;
/// Waits (1 ms each) for busy items when the automover or `slabs reassign` moves a page.
const REASSIGN_RETRIES: usize = 100;
/// Passes over a moving DRAM page demoting its items before it is evacuated (an item
/// changed in place during a pass, e.g. by `incr`, is skipped by that pass).
const PAGE_DEMOTE_PASSES: usize = 3;
/// Rounds of demotion passes and an evacuation attempt before a tiered DRAM page move
/// gives up (nothing lost; the automover or `slabs reassign` tries again later).
const PAGE_MOVE_ROUNDS: usize = 10;

impl Engine {
    /// Empties `page` of class `src` (evicting its items) and returns it to the pool.
    /// `retries`: how many times to wait for busy items before giving up.
    /// With `keep`, the emptied page stays reserved (not back in the pool) for the
    /// caller to hand to a class with [`Engine::adopt_page`].
    pub(crate) fn evacuate_page(
        &self,
        tier: &SlabTier,
        src: usize,
        page: usize,
        retries: usize,
        keep: bool,
    ) -> bool {
        // A live item of a tiered DRAM page is never evicted here: `move_page` demotes
        // it first, and one it could not demote (a write raced the copy) keeps the
        // page from moving this time. Evicting it would lose an item while the slow
        // tier has room (an `incr`ed counter changes in place on every increment, so
        // it can lose every race with its demotion).
        let evict_live = !self.page_moves_demote(tier);
        for attempt in 0..=retries {
            let mut cs = tier.classes[src].0.lock();
            if !cs.pages.contains(&(page as u32)) {
                return false;
            }
            if src == self.geometry.large {
                let addr = tier.mem.addr_at(page * SLAB_PAGE_SIZE_BYTES);
                let h = tier.mem.read_header(addr, header_bytes::ALL);
                if h.has(state::LINKED) && evict_live {
                    let key_hash = h.key_hash();
                    if let Some(mut table) = self.index.shard(key_hash).table.try_lock() {
                        self.remove_locked(tier, &mut cs, &mut table, h);
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
                    let h = tier.mem.read_header(addr, header_bytes::ALL);
                    let bits = h.state();
                    if bits & state::FREE != 0 {
                        // Off the free list: its state is rewritten (kept off it while
                        // the page moves).
                        cs.unlink_free(&tier.mem, h.charge_write(header_bytes::STATE));
                    } else if bits & state::LINKED != 0 {
                        let key_hash = h.key_hash();
                        match self.index.shard(key_hash).table.try_lock() {
                            Some(mut table) => {
                                if self.rescue_item(tier, &mut cs, &mut table, h, page) {
                                    // Kept, in a free chunk of its class elsewhere.
                                } else if evict_live {
                                    self.remove_locked(tier, &mut cs, &mut table, h);
                                    self.rare
                                        .slab_reassign_evictions_nomem
                                        .fetch_add(1, Ordering::Relaxed);
                                } else {
                                    // A tiered DRAM page: left for its demotion.
                                    busy += 1;
                                }
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
                        tier.page_class(page).store(0, Ordering::Relaxed);
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
                        let h = tier.mem.read_header(addr, header_bytes::STATE);
                        if h.state() == 0 {
                            cs.push_free(&tier.mem, h.charge_write(header_bytes::LINKS));
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
    pub(crate) fn emptiest_page(&self, tier: &SlabTier, class_id: usize) -> Option<usize> {
        let cs = tier.classes[class_id].0.lock();
        cs.pages
            .iter()
            .map(|&p| p as usize)
            .min_by_key(|&p| tier.page_used[p].load(Ordering::Relaxed))
    }

    /// A class that could neither allocate nor evict takes a page from the classes
    /// with the most pages (memcached would exceed `-m` here; we stay within it).
    pub(crate) fn steal_page(&self, tier: &SlabTier, class_id: usize) -> bool {
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
    fn adopt_page(&self, tier: &SlabTier, dst: usize, page: usize) {
        let mut cs = tier.classes[dst].0.lock();
        tier.pool.lock().set_owner(page, dst);
        cs.add_page(&tier.mem, page, &tier.page_used, tier.page_class(page));
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
    pub(crate) fn move_page(&self, tier: &SlabTier, src: usize, dst: usize) -> bool {
        let Some(page) = self.emptiest_page(tier, src) else {
            return false;
        };
        let keep = dst != 0 && dst != self.geometry.large && src != self.geometry.large;
        let moved = if self.page_moves_demote(tier) {
            self.demote_and_evacuate_page(tier, src, page, keep)
        } else {
            self.evacuate_page(tier, src, page, REASSIGN_RETRIES, keep)
        };
        if moved && keep {
            self.adopt_page(tier, dst, page);
        }
        moved
    }

    /// A tiered DRAM page's move: its items go to the slow tier (a few passes: an item
    /// changed in place during a pass, its CAS moved on, is taken by the next), then the
    /// emptied page is evacuated, which evicts nothing. Rounds of both until the page is
    /// empty, bounded: a page whose items keep losing the race (a counter incremented
    /// all the time) stays where it is this time, and the caller tries again later.
    fn demote_and_evacuate_page(
        &self,
        tier: &SlabTier,
        src: usize,
        page: usize,
        keep: bool,
    ) -> bool {
        for _ in 0..PAGE_MOVE_ROUNDS {
            for _ in 0..PAGE_DEMOTE_PASSES {
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
            if self.evacuate_page(tier, src, page, STEAL_RETRIES, keep) {
                return true;
            }
        }
        false
    }

    /// `slabs automove <0|1|2>`.
    pub fn set_slab_automove(&self, mode: u32) -> Result<(), ConfigError> {
        if mode > 2 {
            return Err(ConfigError::SlabAutomove(mode));
        }
        self.slab_automove.store(mode, Ordering::Relaxed);
        Ok(())
    }

    /// Before a DRAM page of class `src` is emptied by the slab mover: demotes every
    /// live item in it to the slow tier (one copy each), so a page move loses no item.
    /// The page is marked as moving first, so freed chunks (and the free ones already
    /// in it) stay off the free list; `evacuate_page` then finishes the move once no
    /// live item is left (it evicts none in a tiered DRAM). Bounded by the chunks of one
    /// page.
    /// The caller holds no lock (demotions wait for shard locks). Returns whether some
    /// item was looked at but did not move (another pass may take it).
    pub(crate) fn demote_page_items(&self, tier: &SlabTier, src: usize, page: usize) -> bool {
        let reqs: Vec<Queued> = {
            let mut cs = tier.classes[src].0.lock();
            if !cs.pages.contains(&(page as u32))
                || cs.moving_page.is_some_and(|p| p as usize != page)
            {
                return false;
            }
            let now = self.now_s();
            let base = page * SLAB_PAGE_SIZE_BYTES;
            let chunks = if src == self.geometry.large {
                // A large item's run starts at its first page; nothing to reserve.
                1
            } else {
                cs.moving_page = Some(page as u32);
                cs.per_page
            };
            let mut reqs = Vec::with_capacity(chunks);
            for i in 0..chunks {
                let addr = tier.mem.addr_at(base + i * cs.chunk_bytes);
                let h = tier.mem.read_header(addr, header_bytes::ALL);
                let bits = h.state();
                if bits & state::FREE != 0 && src != self.geometry.large {
                    cs.unlink_free(&tier.mem, h.charge_write(header_bytes::STATE));
                } else if bits & state::LINKED != 0 && self.dead_reason(h, now).is_none() {
                    // A free chunk of the class in DRAM first, as memcached's mover
                    // rescues items (a large item's run has no such chunk).
                    let key_hash = h.key_hash();
                    if src != self.geometry.large {
                        if let Some(mut table) = self.index.shard(key_hash).table.try_lock() {
                            if self.rescue_item(tier, &mut cs, &mut table, h, page) {
                                continue;
                            }
                        }
                    }
                    // Even if already queued: a second entry for the same item is
                    // harmless (the address + CAS check of `move_item`). The mark is a
                    // write of its state.
                    reqs.push(Queued::mark(h.charge_write(header_bytes::STATE), &*cs));
                }
            }
            reqs
        };
        let mut left_behind = false;
        for queued in reqs {
            if self.move_item(queued, Direction::ToSlow) {
                // Kept, in the slow tier: memcached's page mover would have had to evict it.
                self.rare
                    .slab_reassign_rescues
                    .fetch_add(1, Ordering::Relaxed);
            } else {
                left_behind = true;
            }
        }
        left_behind
    }

    /// memcached's page-mover rescue (`slab_rebalance_move`): copies the live item at
    /// `addr`, in `page` (the class's moving page), to a free chunk of its class outside
    /// that page and frees its chunk there. The caller holds the class lock (`cs`) and the
    /// item's shard (`table`). Returns whether the item moved (false: no such free chunk,
    /// or the item's page is not the one being emptied).
    fn rescue_item(
        &self,
        tier: &SlabTier,
        cs: &mut ClassState,
        table: &mut ShardGuard<'_>,
        h: HeaderRead<'_>,
        page: usize,
    ) -> bool {
        if cs.moving_page != Some(page as u32) || cs.id == self.geometry.large {
            return false;
        }
        let mem = &tier.mem;
        let addr = h.addr();
        let key_hash = h.key_hash();
        let Some(item) = Index::held(table, key_hash, addr) else {
            return false;
        };
        let Some(fresh) = self.take_free_outside(tier, cs, page) else {
            return false;
        };
        // The copy reads the whole item (charged once; the caller paid for the header)
        // and writes it (charged by the write).
        let whole = mem.read_item(addr);
        let (key, value) = whole.key_and_value_parts(&item);
        let copy = fresh.write_item(cs.chunk_bytes, key, &[value]);
        let ch = copy.view();
        ch.set_client_flags(h.client_flags());
        ch.set_exptime_rel_s(h.exptime_rel_s());
        ch.set_last_access_s(h.last_access_s());
        ch.set_key_hash(key_hash);
        ch.set_access(h.access());
        ch.set_cas(h.cas());
        ch.set_next(NIL);
        ch.set_prev(NIL);
        // The same item in another chunk of its tier: every bit a client or the policy
        // can observe, and its place (segment or queue) in the class's lists.
        let keep = state::CARRIED_BY_MIGRATION | state::ACTIVE | state::PROMOTE;
        ch.set((h.state() & keep) | state::LINKED);
        let segment = h.segment();
        // A persistent pool: the old record goes before the copy becomes valid, as a
        // store replacing an item does (`Engine::link`).
        self.unseal(tier, h, header_bytes::LINKS);
        self.seal(&copy);
        let replaced = Index::replace(table, key_hash, addr, copy);
        debug_assert!(replaced, "the rescued item left its shard under its lock");
        cs.lru.link_head(mem, segment, ch.header());
        let old = h.charge_write(header_bytes::LINKS);
        old.clear(state::LINKED);
        cs.lru.unlink(mem, old);
        // The moving page's chunk stays off the free list (`free_chunk`).
        self.free_chunk(tier, cs, old);
        self.rare
            .slab_reassign_rescues
            .fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether a DRAM page being moved can hand its items to the slow tier instead of
    /// evicting them: the policy migrates and both tiers are present.
    pub(crate) fn page_moves_demote(&self, tier: &SlabTier) -> bool {
        tier.id == crate::api::TierId::Dram && self.migrating()
    }
}
