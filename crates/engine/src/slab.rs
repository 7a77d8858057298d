//! Slab memory of one tier: the class geometry, the page pool, and the per-class state
//! (free chunks, pages, LRU) kept under the class lock.
//!
//! Pages are 1 MiB. A tier's region holds floor(size / 1 MiB) pages (DRAM's may be
//! reserved beyond its limit, for `cache_memlimit`), and the pages handed out are the
//! region's first `limit` ones, so they can never exceed the limit. Classes carve pages
//! into chunks; items larger than the largest chunk go to the *large class*, whose items
//! each take a run of whole contiguous pages (returned to the pool as soon as the item
//! is freed).

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::config::{EngineConfig, CHUNK_ALIGN_BYTES, SLAB_CLASSES_MAX, SLAB_PAGE_SIZE_BYTES};
use crate::counters::ClassStats;
use crate::item::{header_bytes, state, HeaderRead, HeaderWrite, ItemAddr, ItemMemory, NIL};
use crate::lru::Lru;

/// The item header memcached's class sizes start from (`sizeof(item)` on 64-bit).
const MEMCACHED_ITEM_HEADER_BYTES: usize = 48;

/// Chunk sizes of the classes, memcached's `slabs_init`.
#[derive(Debug, Clone)]
pub(crate) struct Geometry {
    /// `chunk_bytes[id]`, index 0 unused (memcached's class 0 is the page pool).
    pub chunk_bytes: Vec<usize>,
    /// The last chunked class (memcached's `power_largest`).
    pub largest: usize,
    /// The class of items larger than the largest chunk.
    pub large: usize,
}

impl Geometry {
    pub fn new(config: &EngineConfig) -> Geometry {
        let mut chunk_bytes = vec![0usize];
        // memcached's chunk sizes, from its 48-byte item header: the classes (and
        // `stats slabs`) match memcached's whatever fogcached's own header size.
        let mut size = MEMCACHED_ITEM_HEADER_BYTES + config.chunk_size_min_bytes;
        let chunk_max = config.slab_chunk_max_bytes;
        let align = |size: usize| size.next_multiple_of(CHUNK_ALIGN_BYTES);
        match &config.slab_sizes {
            // `-o slab_sizes`: the operator's sizes (checked by `EngineConfig::validate`:
            // ascending, at most `SLAB_CLASSES_MAX - 2` of them), aligned as memcached's.
            Some(sizes) => chunk_bytes.extend(sizes.iter().map(|&size| align(size))),
            None => {
                // memcached leaves room for the largest class below its 63-class
                // ceiling; we need one more slot for the large class.
                while chunk_bytes.len() < SLAB_CLASSES_MAX - 1 {
                    if size as f64 >= chunk_max as f64 / config.growth_factor {
                        break;
                    }
                    size = align(size);
                    chunk_bytes.push(size);
                    size = (size as f64 * config.growth_factor) as usize;
                }
            }
        }
        debug_assert!(chunk_bytes.len() < SLAB_CLASSES_MAX);
        chunk_bytes.push(chunk_max);
        let largest = chunk_bytes.len() - 1;
        // The large class's nominal chunk: the biggest item allowed.
        chunk_bytes.push(config.item_size_max_bytes.max(chunk_max));
        Geometry {
            chunk_bytes,
            largest,
            large: largest + 1,
        }
    }

    /// The class for an item of `total_bytes`, memcached's `slabs_clsid`.
    pub fn class_for(&self, total_bytes: usize) -> usize {
        let classes = &self.chunk_bytes[1..=self.largest];
        match classes.binary_search(&total_bytes) {
            Ok(i) => i + 1,
            Err(i) if i < classes.len() => i + 1,
            Err(_) => self.large,
        }
    }

    pub fn chunks_per_page(&self, class_id: usize) -> usize {
        if class_id == self.large {
            1
        } else {
            SLAB_PAGE_SIZE_BYTES / self.chunk_bytes[class_id]
        }
    }

    /// Pages an item of `total_bytes` takes in the large class.
    pub fn large_run_pages(total_bytes: usize) -> usize {
        total_bytes.div_ceil(SLAB_PAGE_SIZE_BYTES).max(1)
    }
}

/// The tier's free pages. Leaf lock: taken under a class lock, never the reverse.
pub(crate) struct PagePool {
    /// Owner class of each page; 0 = free.
    owner: Vec<u8>,
    free_pages: usize,
    cursor: usize,
    /// Pages that may be in use at once (`cache_memlimit`); at most `owner.len()`.
    limit_pages: usize,
}

impl PagePool {
    pub fn new(page_count: usize) -> PagePool {
        PagePool {
            owner: vec![0; page_count],
            free_pages: page_count,
            cursor: 0,
            limit_pages: page_count,
        }
    }

    pub fn pages_in_use(&self) -> usize {
        self.owner.len() - self.free_pages
    }

    /// Pages that can still be taken: free ones under the limit.
    pub fn free_pages(&self) -> usize {
        self.limit_pages.saturating_sub(self.pages_in_use())
    }

    pub fn limit_pages(&self) -> usize {
        self.limit_pages
    }

    /// Sets how many pages may be in use (capped at the pool's size). Pages in use
    /// beyond a lowered limit stay with their items, as memcached's memory does; no
    /// new page is taken until use falls below the limit.
    pub fn set_limit_pages(&mut self, pages: usize) {
        self.limit_pages = pages.min(self.owner.len());
    }

    /// Takes a run of `run` contiguous free pages for `class_id`, among the first
    /// `limit_pages` pages: a region reserved beyond the limit (`--dram-max`) is touched
    /// only as far as the limit ever went, however often pages are freed and taken
    /// again (a freed page stays resident; a new one would add to the memory used).
    pub fn alloc_run(&mut self, class_id: usize, run: usize) -> Option<usize> {
        let n = self.limit_pages.min(self.owner.len());
        if run == 0 || self.free_pages() < run || run > n {
            return None;
        }
        // First fit, starting after the last allocation; bounded by two sweeps.
        let mut start = self.cursor % n;
        let mut scanned = 0;
        while scanned < 2 * n {
            if start + run > n {
                scanned += n - start;
                start = 0;
                continue;
            }
            match (start..start + run).find(|&p| self.owner[p] != 0) {
                None => {
                    for p in start..start + run {
                        self.owner[p] = class_id as u8;
                    }
                    self.free_pages -= run;
                    self.cursor = start + run;
                    return Some(start);
                }
                Some(busy) => {
                    scanned += busy + 1 - start;
                    start = busy + 1;
                }
            }
        }
        None
    }

    /// Re-labels a page that stays in use (moved between classes).
    pub fn set_owner(&mut self, page: usize, class_id: usize) {
        if let Some(o) = self.owner.get_mut(page) {
            *o = class_id as u8;
        }
    }

    /// Takes the free pages `[first, first + run)` for `class_id` (recovery: the pool's
    /// page table says they hold its items). Returns false if one is taken already.
    pub fn claim_run(&mut self, class_id: usize, first: usize, run: usize) -> bool {
        let Some(pages) = self.owner.get(first..first + run) else {
            return false;
        };
        if run == 0 || pages.iter().any(|&o| o != 0) {
            return false;
        }
        for p in first..first + run {
            self.owner[p] = class_id as u8;
        }
        self.free_pages -= run;
        true
    }

    /// Whether `page` belongs to a class.
    pub fn is_taken(&self, page: usize) -> bool {
        self.owner.get(page).is_some_and(|&o| o != 0)
    }

    pub fn free_run(&mut self, first_page: usize, run: usize) {
        for p in first_page..(first_page + run).min(self.owner.len()) {
            if self.owner[p] != 0 {
                self.owner[p] = 0;
                self.free_pages += 1;
            }
        }
    }
}

/// One slab class of one tier: free chunks, pages and the LRU. Guarded by the class lock.
pub(crate) struct ClassState {
    pub id: usize,
    pub chunk_bytes: usize,
    pub per_page: usize,
    /// Head of the free list (threaded through `next`/`prev` of free chunks).
    pub free_head: ItemAddr,
    pub free_chunks: u64,
    /// Pages owned by the class (for the large class: first pages of runs).
    pub pages: Vec<u32>,
    /// The page being emptied by the slab mover: its chunks never re-enter the free list.
    pub moving_page: Option<u32>,
    /// DRAM only: times this class needed a DRAM chunk and found none free (a store or
    /// promotion that had to demote, a promotion that failed). DRAM rarely evicts in a
    /// tiered engine (it demotes), so this is the automover's "needs memory" signal
    /// next to evictions. Monotonic; the automover looks at deltas.
    pub dram_pressure: u64,
    pub lru: Lru,
    pub stats: ClassStats,
}

impl ClassState {
    pub fn new(id: usize, geometry: &Geometry) -> ClassState {
        ClassState {
            id,
            chunk_bytes: geometry.chunk_bytes[id],
            per_page: geometry.chunks_per_page(id),
            free_head: NIL,
            free_chunks: 0,
            pages: Vec::new(),
            moving_page: None,
            dram_pressure: 0,
            lru: Lru::new(),
            stats: ClassStats::default(),
        }
    }

    pub fn used_chunks(&self) -> u64 {
        (self.pages.len() * self.per_page) as u64 - self.free_chunks
    }

    /// Puts a chunk on the free list. The caller paid for the chunk's own header write
    /// (`chunk`: it has just unlinked it, or is giving back a chunk it took); the old
    /// head's link update is charged here.
    pub fn push_free(&mut self, mem: &ItemMemory, chunk: HeaderWrite<'_>) {
        let addr = chunk.addr();
        chunk.store_state(state::FREE);
        chunk.set_prev(NIL);
        chunk.set_next(self.free_head);
        if self.free_head != NIL {
            mem.write_neighbour_prev(self.free_head, addr);
        }
        self.free_head = addr;
        self.free_chunks += 1;
    }

    /// Removes a specific free chunk from the free list (page evacuation): its
    /// neighbours' links are charged here, and its own state is cleared through
    /// `chunk`, whose write the caller paid for.
    pub fn unlink_free(&mut self, mem: &ItemMemory, chunk: HeaderWrite<'_>) {
        self.detach_free(mem, chunk.read());
        chunk.store_state(0);
    }

    /// Takes the free chunk `chunk` out of the list: its neighbours' links are charged
    /// here; the chunk's own header is the caller's.
    fn detach_free(&mut self, mem: &ItemMemory, chunk: HeaderRead<'_>) {
        let prev = chunk.prev();
        let next = chunk.next();
        if prev != NIL {
            mem.write_neighbour_next(prev, next);
        } else {
            self.free_head = next;
        }
        if next != NIL {
            mem.write_neighbour_prev(next, prev);
        }
        debug_assert!(self.free_chunks > 0, "free list and free_chunks disagree");
        self.free_chunks -= 1;
    }

    /// Takes a chunk from the free list. Reading the head's links is a read of its
    /// header; the chunk's own header is rewritten by whoever takes it (`Engine::take_chunk`
    /// marks it allocated, as a `Fresh` chunk, which its item's write pays for).
    pub fn pop_free(&mut self, mem: &ItemMemory) -> Option<ItemAddr> {
        let addr = self.free_head;
        if addr == NIL {
            return None;
        }
        let head = mem.read_header(addr, header_bytes::LINKS);
        self.detach_free(mem, head);
        Some(addr)
    }

    /// Adds a fresh page, labels it with the class, and splits it into free chunks
    /// (memcached 1.6 splits whole pages at once, so `free_chunks_end` is always 0).
    /// Writing the chunk headers is charged as one burst.
    pub fn add_page(
        &mut self,
        mem: &ItemMemory,
        page: usize,
        used: &[AtomicU32],
        page_class: &AtomicU8,
    ) {
        self.pages.push(page as u32);
        if let Some(u) = used.get(page) {
            u.store(0, Ordering::Relaxed);
        }
        page_class.store(self.id as u8, Ordering::Relaxed);
        let base = page * SLAB_PAGE_SIZE_BYTES;
        let (chunk_bytes, per_page) = (self.chunk_bytes, self.per_page);
        let chunk_addr = |i: usize| mem.addr_at(base + i * chunk_bytes);
        // The page's chunks go in front of the free list in address order, so allocation
        // walks the page upwards. Each chunk header is written once, back to back: one
        // burst. (Zeroing the checksum keeps a record the page held in another life from
        // ever checking out.)
        let old_head = self.free_head;
        let mut i = 0;
        mem.write_headers_burst((0..per_page).map(chunk_addr), header_bytes::ALL, |h| {
            h.set_checksum(0, Ordering::Relaxed);
            h.store_state(state::FREE);
            let prev = if i == 0 { NIL } else { chunk_addr(i - 1) };
            let next = if i + 1 == per_page {
                old_head
            } else {
                chunk_addr(i + 1)
            };
            h.set_prev(prev);
            h.set_next(next);
            i += 1;
        });
        if per_page > 0 {
            if old_head != NIL {
                mem.write_neighbour_prev(old_head, chunk_addr(per_page - 1));
            }
            self.free_head = chunk_addr(0);
            self.free_chunks += per_page as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool larger than its limit (DRAM reserved for `cache_memlimit`) hands out only
    /// pages below the limit, so the memory it touches is the limit's however pages
    /// churn; raising the limit opens the pages above it.
    #[test]
    fn pages_are_taken_below_the_limit_however_they_churn() {
        let mut pool = PagePool::new(1024);
        pool.set_limit_pages(8);
        for round in 0..100 {
            let page = pool
                .alloc_run(1, 1)
                .unwrap_or_else(|| panic!("round {round}"));
            assert!(page < 8, "round {round}: page {page}");
            pool.free_run(page, 1);
        }
        let taken: Vec<usize> = (0..8).filter_map(|_| pool.alloc_run(1, 1)).collect();
        assert_eq!(taken.len(), 8);
        assert!(taken.iter().all(|&page| page < 8), "{taken:?}");
        assert_eq!(pool.alloc_run(1, 1), None);
        pool.set_limit_pages(16);
        let page = pool.alloc_run(1, 1);
        assert!(page.is_some_and(|page| (8..16).contains(&page)), "{page:?}");
    }

    #[test]
    fn default_geometry_matches_memcached() {
        let g = Geometry::new(&EngineConfig::default());
        // memcached 1.6 -f 1.25 -n 48: 96, 120, 152, 192, 240, ... 524288.
        assert_eq!(&g.chunk_bytes[1..6], &[96, 120, 152, 192, 240]);
        assert_eq!(g.chunk_bytes[g.largest], 512 * 1024);
        assert_eq!(g.largest, 39);
        assert_eq!(g.class_for(96), 1);
        assert_eq!(g.class_for(97), 2);
        assert_eq!(g.class_for(512 * 1024), g.largest);
        assert_eq!(g.class_for(512 * 1024 + 1), g.large);
        assert_eq!(g.chunks_per_page(1), 10922);
    }

    /// `-o slab_sizes=100-200-300`: memcached 1.6.18 -vv prints the classes 104, 200,
    /// 304 and 524288 (the sizes aligned to 8 bytes, then `slab_chunk_max`).
    #[test]
    fn slab_sizes_replace_the_growth_factor_s_classes() {
        let g = Geometry::new(&EngineConfig {
            slab_sizes: Some(vec![100, 200, 300]),
            ..EngineConfig::default()
        });
        assert_eq!(
            &g.chunk_bytes[1..],
            &[104, 200, 304, 512 * 1024, 1024 * 1024]
        );
        assert_eq!((g.largest, g.large), (4, 5));
        assert_eq!(g.class_for(105), 2);
        assert_eq!(g.class_for(305), 4);
        let refused = |sizes: Vec<usize>| {
            EngineConfig {
                slab_sizes: Some(sizes),
                ..EngineConfig::default()
            }
            .validate()
            .map_err(|e| e.to_string())
        };
        assert_eq!(
            refused(vec![10, 200]),
            Err("slab size 10 is out of valid range".to_owned())
        );
        assert_eq!(
            refused(vec![100, 104]),
            Err("slab size 104 must be at least 8 bytes larger than previous class".to_owned())
        );
        assert_eq!(
            refused(vec![200, 100]),
            Err("slab size 100 cannot be lower than or equal to a previous class size".to_owned())
        );
        assert_eq!(
            refused(vec![100, 600_000]),
            Err("slab size 600000 is out of valid range".to_owned())
        );
        assert_eq!(
            refused((1..=62).map(|i| 48 + 16 * i).collect()),
            Err("too many slab classes specified".to_owned())
        );
        assert_eq!(refused((1..=61).map(|i| 48 + 16 * i).collect()), Ok(()));
    }

    #[test]
    fn pool_hands_out_runs_and_never_more_than_it_has() {
        let mut pool = PagePool::new(4);
        assert_eq!(pool.alloc_run(1, 1), Some(0));
        assert_eq!(pool.alloc_run(2, 2), Some(1));
        assert_eq!(pool.alloc_run(2, 2), None);
        assert_eq!(pool.alloc_run(3, 1), Some(3));
        assert_eq!(pool.alloc_run(3, 1), None);
        assert_eq!(pool.pages_in_use(), 4);
        pool.free_run(1, 2);
        assert_eq!(pool.free_pages(), 2);
        assert_eq!(pool.alloc_run(5, 2), Some(1));
    }

    /// Every class boundary: an item of exactly a chunk's size takes that class, one
    /// byte more the next; past the largest chunk, the large class.
    #[test]
    fn class_for_takes_the_smallest_chunk_that_fits() {
        let g = Geometry::new(&EngineConfig::default());
        for class_id in 1..=g.largest {
            let chunk = g.chunk_bytes[class_id];
            assert_eq!(g.class_for(chunk), class_id, "{chunk} bytes");
            let next = if class_id == g.largest {
                g.large
            } else {
                class_id + 1
            };
            assert_eq!(g.class_for(chunk + 1), next, "{} bytes", chunk + 1);
        }
        assert_eq!(g.class_for(1), 1);
        assert_eq!(g.class_for(usize::MAX / 2), g.large);
    }

    /// Runs never overlap, are contiguous and labelled with their class; a pool with
    /// enough free pages but no run long enough refuses; the search wraps from where
    /// the last run ended; freeing is idempotent.
    #[test]
    fn runs_are_contiguous_disjoint_and_found_after_wrapping() {
        let mut pool = PagePool::new(8);
        assert_eq!(pool.alloc_run(1, 0), None);
        assert_eq!(pool.alloc_run(1, 9), None);
        assert_eq!(pool.alloc_run(1, 3), Some(0));
        assert_eq!(pool.alloc_run(2, 3), Some(3));
        assert_eq!(&pool.owner, &[1, 1, 1, 2, 2, 2, 0, 0]);
        // Free pages 1-2 and 4: five free with 6-7, but no run of three.
        pool.free_run(1, 2);
        pool.free_run(4, 1);
        pool.free_run(4, 1);
        assert_eq!(pool.free_pages(), 5);
        assert_eq!(pool.alloc_run(3, 3), None);
        assert_eq!(pool.free_pages(), 5, "a refused run takes nothing");
        // Two pages: the first fit after the cursor (page 6), not the hole at page 1.
        assert_eq!(pool.alloc_run(3, 2), Some(6));
        // The cursor is at the end: the next search wraps to the start.
        assert_eq!(pool.alloc_run(4, 1), Some(1));
        assert_eq!(pool.alloc_run(4, 1), Some(2));
        assert_eq!(pool.alloc_run(4, 1), Some(4));
        assert_eq!(pool.alloc_run(4, 1), None);
        assert_eq!(&pool.owner, &[1, 4, 4, 2, 4, 2, 3, 3]);
        assert_eq!((pool.free_pages(), pool.pages_in_use()), (0, 8));
        // A page moving between classes keeps being in use under its new owner.
        pool.set_owner(5, 7);
        assert_eq!(pool.owner[5], 7);
        assert!(pool.is_taken(5));
        pool.free_run(5, 1);
        assert!(!pool.is_taken(5));
        assert!(!pool.is_taken(99));
        assert_eq!(pool.free_pages(), 1);
    }

    /// Recovery claims the pages its page table names: free ones only, within the pool.
    #[test]
    fn claim_run_takes_free_pages_only() {
        let mut pool = PagePool::new(6);
        assert!(pool.claim_run(2, 1, 2));
        assert_eq!(&pool.owner, &[0, 2, 2, 0, 0, 0]);
        assert_eq!(pool.free_pages(), 4);
        assert!(!pool.claim_run(3, 2, 2), "page 2 is taken");
        assert!(!pool.claim_run(3, 5, 2), "beyond the pool");
        assert!(!pool.claim_run(3, 3, 0), "an empty run");
        assert_eq!(&pool.owner, &[0, 2, 2, 0, 0, 0]);
        assert_eq!(pool.free_pages(), 4);
        assert!(pool.claim_run(3, 3, 3));
        assert_eq!(pool.free_pages(), 1);
        assert_eq!(pool.alloc_run(4, 1), Some(0));
    }

    /// A fresh page's chunks form a free list in address order, doubly linked, in front
    /// of what was free before; unlinking one from the middle (a page evacuation) keeps
    /// both directions consistent, and the used count follows.
    #[test]
    fn a_fresh_pages_free_list_is_doubly_linked_in_address_order() {
        let mem = ItemMemory::new(tier::Region::heap(3 * SLAB_PAGE_SIZE_BYTES).unwrap(), 0);
        let g = Geometry::new(&EngineConfig::default());
        let class_id = g.class_for(9000);
        let mut cs = ClassState::new(class_id, &g);
        let used: Vec<AtomicU32> = (0..3).map(|_| AtomicU32::new(0)).collect();
        let classes: Vec<AtomicU8> = (0..3).map(|_| AtomicU8::new(0)).collect();
        cs.add_page(&mem, 2, &used, &classes[2]);
        cs.add_page(&mem, 0, &used, &classes[0]);
        let per_page = cs.per_page;
        assert_eq!(cs.free_chunks, 2 * per_page as u64);
        assert_eq!(cs.used_chunks(), 0);
        let chunk_bytes = cs.chunk_bytes;
        let chunk =
            |page: usize, i: usize| mem.addr_at(page * SLAB_PAGE_SIZE_BYTES + i * chunk_bytes);
        let walk = |cs: &ClassState| {
            let mut forward = Vec::new();
            let mut at = cs.free_head;
            let mut prev = NIL;
            while at != NIL {
                let h = mem.read_header(at, header_bytes::LINKS);
                assert_eq!(h.prev(), prev, "prev of {at:#x}");
                forward.push(at);
                prev = at;
                at = h.next();
            }
            forward
        };
        let expected: Vec<ItemAddr> = (0..per_page)
            .map(|i| chunk(0, i))
            .chain((0..per_page).map(|i| chunk(2, i)))
            .collect();
        assert_eq!(walk(&cs), expected);
        for at in [chunk(0, per_page / 2), chunk(2, 0)] {
            cs.unlink_free(&mem, mem.write_header(at, header_bytes::STATE));
        }
        let left: Vec<ItemAddr> = expected
            .iter()
            .copied()
            .filter(|&a| a != chunk(0, per_page / 2) && a != chunk(2, 0))
            .collect();
        assert_eq!(walk(&cs), left);
        assert_eq!(cs.pop_free(&mem), Some(chunk(0, 0)));
        assert_eq!(cs.used_chunks(), 3);
        assert_eq!(classes[0].load(Ordering::Relaxed), class_id as u8);
    }
}
