//! Restart from the slow tier: recovering a persistent pool's records at start-up, and
//! writing DRAM's items down to it at a clean stop (the format and the rules are in
//! `pool.rs`).
//!
//! Recovery walks the pool's page table. A page of a chunked class is split at that
//! class's chunk size and every chunk is checked: a record whose checksum matches, whose
//! size belongs to the page's class, and which is neither expired nor flushed is indexed
//! and linked at its class's COLD head; every other chunk goes on the free list, its
//! checksum zeroed. A large item's first page is checked the same way and claims its
//! run. A key found twice (a crash between an overwrite and the old record's
//! invalidation) keeps the record with the higher CAS. Recovered items start in the slow
//! tier; the policy promotes what turns out hot, as after a cold start. The flush state
//! and the CAS high-water mark come back from the header, so nothing flushed returns and
//! no CAS repeats.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::config::ConfigError;
use crate::config::SLAB_PAGE_SIZE_BYTES;
use crate::engine::{Engine, SlabTier};
use crate::index::Index;
use crate::item::{header_bytes, state, HeaderRead, ItemAddr, ItemMemory, ItemRead, Written, NIL};
use crate::lru::{COLD, SEGMENTS};
use crate::pool::{record_checksum, LARGE_TAIL};
use crate::slab::{ClassState, Geometry};

/// What the last start found in the slow tier's pool (`stats`: `pool_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The slow tier is a persistent pool.
    pub pool: bool,
    /// The pool was formatted by this start (see `start` for why).
    pub formatted: bool,
    /// What this start did with the pool: recovered it, or formatted it and why.
    pub start: crate::pool::PoolStart,
    /// The previous run stopped cleanly.
    pub was_clean: bool,
    /// Records indexed and served.
    pub items_recovered: u64,
    /// Valid records dropped because they had expired or were flushed.
    pub items_dropped_dead: u64,
    /// Second records of a key (a crash mid-overwrite); the higher CAS was kept.
    pub items_dropped_duplicate: u64,
    /// Chunks of class pages that held no valid record (free, torn, or damaged).
    pub chunks_not_valid: u64,
    /// Page-table entries that could not be right (an unknown class, a large run that
    /// does not fit): those pages were freed.
    pub pages_damaged: u64,
    pub elapsed_us: u64,
}

/// Threads that check a pool's pages at start-up.
const RECOVERY_THREADS_MAX: usize = 8;

/// A valid record recovery found, with the view of its read (phase 1 paid to read the
/// whole record; the later phases read its key and rewrite its header through it).
#[derive(Clone, Copy)]
struct Found<'m> {
    addr: ItemAddr,
    key_hash: u32,
    cas: u64,
    class_id: usize,
    read: ItemRead<'m>,
}

/// Pages a recovery thread gives to a class.
#[derive(Clone, Copy, Debug)]
struct Claim {
    class_id: usize,
    page: usize,
    run: usize,
}

/// What one recovery thread found in its share of the pages.
#[derive(Default)]
struct PageScan<'m> {
    records: Vec<Found<'m>>,
    claims: Vec<Claim>,
    free_chunks: Vec<(usize, ItemAddr)>,
    dead: u64,
    not_valid: u64,
    damaged: u64,
}

/// What a clean stop wrote down.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopReport {
    /// DRAM items copied to the slow tier.
    pub written_down: u64,
    /// DRAM items that found no free slow-tier chunk (lost at the stop).
    pub no_room: u64,
    /// The slow tier is a persistent pool (otherwise nothing is kept).
    pub pool: bool,
}

impl Engine {
    /// At start-up: restores what a persistent pool keeps besides its records (flush
    /// state, CAS high-water mark) and recovers its records, unless it was just
    /// formatted.
    pub(crate) fn open_pool(&self) -> Result<(), ConfigError> {
        let Some(slow) = self.slow() else {
            return Ok(());
        };
        let Some(pool) = &slow.pool_file else {
            return Ok(());
        };
        let (oldest_cas, flush_at_s) = pool.flush_state();
        self.flush_oldest_cas.store(oldest_cas, Ordering::Relaxed);
        self.flush_at_s.store(flush_at_s, Ordering::Relaxed);
        let mut report = RecoveryReport {
            pool: true,
            formatted: pool.formatted(),
            start: pool.start().clone(),
            was_clean: pool.was_clean(),
            ..RecoveryReport::default()
        };
        let mut max_cas = 0;
        if !pool.formatted() {
            let started = Instant::now();
            max_cas = self.recover_records(slow, &mut report);
            report.elapsed_us = started.elapsed().as_micros() as u64;
        }
        self.resume_cas_above(max_cas.max(oldest_cas));
        *self.recovery.lock() = report;
        Ok(())
    }

    /// What the last start found in the pool.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.recovery.lock().clone()
    }

    /// Walks the page table and rebuilds index, LRU lists, free lists and page pool
    /// from the records, in three phases: the pages are checked by a few threads at
    /// once (each takes a share of the page table and only reads), the valid records
    /// are indexed shard by shard with each shard sized for its count first (no table
    /// grows and rehashes during recovery), and the survivors are linked and the rest
    /// freed class by class. Returns the highest CAS kept.
    fn recover_records(&self, tier: &SlabTier, report: &mut RecoveryReport) -> u64 {
        let Some(pool) = &tier.pool_file else {
            return 0;
        };
        let now_s = self.now_s();
        // Phase 1: which pages belong to which class, which chunks are records.
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, RECOVERY_THREADS_MAX);
        let per_thread = tier.page_count.div_ceil(threads).max(1);
        let scans: Vec<PageScan> = std::thread::scope(|scope| {
            let started: Vec<_> = (0..threads)
                .map(|t| {
                    let pages = t * per_thread..((t + 1) * per_thread).min(tier.page_count);
                    let share = pages.clone();
                    std::thread::Builder::new()
                        .name(format!("fc-recover-{t}"))
                        .spawn_scoped(scope, move || self.scan_pages(tier, share, now_s))
                        .map_err(|_| pages)
                })
                .collect();
            started
                .into_iter()
                .map(|started| match started {
                    Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    // A thread the system would not start: this one scans its share.
                    Err(pages) => self.scan_pages(tier, pages, now_s),
                })
                .collect()
        });
        let mut records: Vec<Vec<Found>> = vec![Vec::new(); self.index.shard_count()];
        let mut claims = Vec::new();
        let mut free_chunks = Vec::new();
        for scan in scans {
            report.items_dropped_dead += scan.dead;
            report.chunks_not_valid += scan.not_valid;
            report.pages_damaged += scan.damaged;
            for found in scan.records {
                records[self.index.shard_index(found.key_hash)].push(found);
            }
            claims.extend(scan.claims);
            free_chunks.extend(scan.free_chunks);
        }
        // Pages: claimed in the pool and given to their classes.
        {
            let mut pages = tier.pool.lock();
            for claim in &claims {
                let claimed = pages.claim_run(claim.class_id, claim.page, claim.run);
                debug_assert!(claimed, "page {} claimed twice", claim.page);
            }
        }
        for claim in &claims {
            let mut cs = tier.classes[claim.class_id].0.lock();
            cs.pages.push(claim.page as u32);
            if claim.run > 1 || claim.class_id == self.geometry.large {
                tier.page_used[claim.page].store(claim.run as u32, Ordering::Relaxed);
                for tail in claim.page + 1..claim.page + claim.run {
                    pool.page_class(tail).store(LARGE_TAIL, Ordering::Relaxed);
                }
            }
        }
        // Phase 2: the index, shard by shard, sized first; a key found twice keeps the
        // higher CAS.
        let mut losers = Vec::new();
        let mut kept: Vec<Vec<Found>> = vec![Vec::new(); self.geometry.large + 1];
        let mut max_cas = 0;
        for (shard, found) in records.into_iter().enumerate() {
            if found.is_empty() {
                continue;
            }
            let mut table = self.index.shard_at(shard).table.lock();
            Index::reserve(&mut table, found.len());
            let mut indexed: Vec<Found> = Vec::with_capacity(found.len());
            for record in found {
                // SAFETY: nothing is served during recovery, and this thread is the only
                // one handling this record (each record is in one shard's list); its
                // chunk lies in the region and was read whole (`check_record`).
                let item = unsafe { Written::recovered(record.read) };
                let key = item.key();
                let found_other = Index::find(&mut table, |a| self.mem_of(a), record.key_hash, key)
                    .map(|other| other.addr());
                match found_other {
                    Some(other) => {
                        report.items_dropped_duplicate += 1;
                        let Some(pos) = indexed.iter().position(|f| f.addr == other) else {
                            losers.push(record);
                            continue;
                        };
                        if indexed[pos].cas >= record.cas {
                            losers.push(record);
                        } else {
                            Index::replace(&mut table, record.key_hash, other, item);
                            losers.push(std::mem::replace(&mut indexed[pos], record));
                        }
                    }
                    None => {
                        Index::insert_new(&mut table, record.key_hash, item);
                        indexed.push(record);
                    }
                }
            }
            for record in indexed {
                max_cas = max_cas.max(record.cas);
                kept[record.class_id].push(record);
            }
        }
        // Phase 3: the survivors linked at their class's COLD head, the rest freed.
        for (class_id, records) in kept.into_iter().enumerate() {
            if records.is_empty() {
                continue;
            }
            let mut cs = tier.classes[class_id].0.lock();
            for record in records {
                // Key hash, state, access byte and links: one header write. How the key
                // was given (meta `b`) is part of the item; the rest of the state is the
                // last process's.
                let key_binary = record.read.state() & state::KEY_BINARY;
                let h = record.read.charge_write(header_bytes::LINKS);
                h.set_key_hash(record.key_hash);
                h.store_state(state::LINKED | key_binary);
                h.set_access(0);
                cs.lru.link_head(&tier.mem, COLD, h);
                if class_id != self.geometry.large {
                    tier.page_used[ItemMemory::page_of(record.addr)]
                        .fetch_add(1, Ordering::Relaxed);
                }
                report.items_recovered += 1;
            }
        }
        for loser in losers {
            if loser.class_id == self.geometry.large {
                let mut cs = tier.classes[loser.class_id].0.lock();
                let h = loser.read.charge_write(header_bytes::LINKS);
                // Its state is whatever the previous process left: it was never linked
                // in this one.
                h.clear(state::LINKED);
                self.free_chunk(tier, &mut cs, h);
            } else {
                free_chunks.push((loser.class_id, loser.addr));
            }
        }
        free_chunks.sort_unstable_by_key(|&(class_id, _)| class_id);
        for group in free_chunks.chunk_by(|a, b| a.0 == b.0) {
            let mut cs = tier.classes[group[0].0].0.lock();
            for &(_, addr) in group {
                self.free_recovered_chunk(tier, &mut cs, addr);
            }
        }
        // Tails of runs whose first page did not check out.
        let owned = tier.pool.lock();
        for page in 0..tier.page_count {
            let slot = pool.page_class(page);
            if slot.load(Ordering::Relaxed) == LARGE_TAIL && !owned.is_taken(page) {
                slot.store(0, Ordering::Relaxed);
            }
        }
        max_cas
    }

    /// Phase 1 of recovery for the pages `pages`: reads only (the page table may be
    /// corrected for pages that cannot be right).
    fn scan_pages<'t>(
        &self,
        tier: &'t SlabTier,
        pages: std::ops::Range<usize>,
        now_s: u32,
    ) -> PageScan<'t> {
        let mut scan = PageScan::default();
        let Some(pool) = &tier.pool_file else {
            return scan;
        };
        for page in pages {
            let class_id = pool.page_class(page).load(Ordering::Relaxed) as usize;
            if class_id == 0 || class_id == usize::from(LARGE_TAIL) {
                continue;
            }
            if class_id > self.geometry.large {
                pool.page_class(page).store(0, Ordering::Relaxed);
                scan.damaged += 1;
                continue;
            }
            let base = page * SLAB_PAGE_SIZE_BYTES;
            if class_id == self.geometry.large {
                let addr = tier.mem.addr_at(base);
                let h = tier.mem.read_header(addr, header_bytes::ALL);
                let run = Geometry::large_run_pages(h.total_bytes());
                match self.check_record(tier, class_id, h, now_s, &mut scan) {
                    Some(found) if page + run <= tier.page_count => {
                        scan.claims.push(Claim {
                            class_id,
                            page,
                            run,
                        });
                        scan.records.push(found);
                    }
                    found => {
                        scan.damaged += u64::from(found.is_some());
                        if h.checksum(Ordering::Relaxed) != 0 {
                            h.charge_write(header_bytes::CHECKSUM)
                                .set_checksum(0, Ordering::Release);
                        }
                        pool.page_class(page).store(0, Ordering::Relaxed);
                    }
                }
                continue;
            }
            scan.claims.push(Claim {
                class_id,
                page,
                run: 1,
            });
            let chunk_bytes = self.geometry.chunk_bytes[class_id];
            for i in 0..self.geometry.chunks_per_page(class_id) {
                let addr = tier.mem.addr_at(base + i * chunk_bytes);
                let h = tier.mem.read_header(addr, header_bytes::ALL);
                match self.check_record(tier, class_id, h, now_s, &mut scan) {
                    Some(found) => scan.records.push(found),
                    None => scan.free_chunks.push((class_id, addr)),
                }
            }
        }
        scan
    }

    /// Whether the chunk whose header `h` the caller read (a page of class `class_id`)
    /// holds a valid, live record (what recovery needs of it if so). A valid but dead
    /// record is counted and dropped.
    fn check_record<'m>(
        &self,
        tier: &SlabTier,
        class_id: usize,
        h: HeaderRead<'m>,
        now_s: u32,
        scan: &mut PageScan<'m>,
    ) -> Option<Found<'m>> {
        let pool = tier.pool_file.as_ref()?;
        let addr = h.addr();
        let checksum = h.checksum(Ordering::Acquire);
        let key_len = usize::from(h.key_len());
        let total = h.total_bytes();
        let capacity = self.chunk_capacity(class_id, total);
        let offset = ItemMemory::offset_of(addr);
        let page_end = (offset / SLAB_PAGE_SIZE_BYTES + 1) * SLAB_PAGE_SIZE_BYTES;
        let fits_region = if class_id == self.geometry.large {
            offset + total <= tier.page_count * SLAB_PAGE_SIZE_BYTES
        } else {
            offset + capacity <= page_end
        };
        if checksum == 0
            || key_len == 0
            || total > self.config.item_size_max_bytes
            || self.geometry.class_for(total) != class_id
            || !fits_region
        {
            scan.not_valid += 1;
            return None;
        }
        let read = h.read_rest();
        // SAFETY: recovery runs before the engine serves anyone, and each page is scanned
        // by one thread; the chunk lies in the region (checked just above) and was just
        // read whole.
        let record = unsafe { Written::recovered(read) };
        let key_value = record.key_and_value();
        if record_checksum(pool.generation(), h, key_value) != checksum {
            scan.not_valid += 1;
            return None;
        }
        if self.dead_reason(h, now_s).is_some() {
            scan.dead += 1;
            return None;
        }
        Some(Found {
            addr,
            key_hash: self.index.hash(&key_value[..key_len]),
            cas: h.cas(),
            class_id,
            read,
        })
    }

    /// A chunk recovery does not keep: invalidated and put on the free list.
    fn free_recovered_chunk(&self, tier: &SlabTier, cs: &mut ClassState, addr: ItemAddr) {
        let h = tier.mem.write_header(addr, header_bytes::ALL);
        if h.checksum(Ordering::Relaxed) != 0 {
            h.set_checksum(0, Ordering::Release);
        }
        cs.push_free(&tier.mem, h);
    }

    /// A clean stop (SIGTERM, SIGUSR1, `shutdown`), after the server stopped serving:
    /// stops the background threads, writes DRAM's items down to the slow tier's pool as
    /// far as it has free chunks (the most recently used first, nothing evicted for
    /// them), flushes the pool and marks it clean, so a restart serves them all.
    /// Without a persistent pool it only stops the background threads.
    pub fn stop_to_pool(&self) -> Result<StopReport, tier::TierError> {
        self.stop_background();
        let mut report = StopReport::default();
        let Some(slow) = self.slow() else {
            return Ok(report);
        };
        let Some(pool) = &slow.pool_file else {
            return Ok(report);
        };
        report.pool = true;
        let dram = self.dram();
        // Every DRAM item, most recently used first.
        let mut items: Vec<(u32, ItemAddr)> = Vec::new();
        for class in dram.classes.iter().skip(1) {
            let cs = class.0.lock();
            // Every list: memcached's three segments, or the hotspot policy's queues.
            for segment in 0..SEGMENTS {
                let mut addr = cs.lru.head[segment];
                while addr != NIL {
                    // The walk reads each header's links and access time.
                    let h = dram.mem.read_header(addr, header_bytes::LINKS);
                    items.push((h.last_access_s(), addr));
                    addr = h.next();
                }
            }
        }
        items.sort_unstable_by_key(|&(last_access, _)| std::cmp::Reverse(last_access));
        for (_, addr) in items {
            if self.write_down(addr) {
                report.written_down += 1;
            } else {
                report.no_room += 1;
            }
        }
        slow.mem.region().flush()?;
        pool.persist_page_table()
            .and_then(|()| pool.mark_clean())
            .map_err(|e| tier::TierError::File {
                path: slow.mem.region().describe().into(),
                reason: e.to_string(),
            })?;
        Ok(report)
    }

    /// Copies the DRAM item at `addr` to a free slow-tier chunk (no eviction), seals it
    /// and swaps it in. Returns whether it moved.
    fn write_down(&self, addr: ItemAddr) -> bool {
        let dram = self.dram();
        let Some(slow) = self.slow() else {
            return false;
        };
        let h = dram.mem.read_header(addr, header_bytes::ALL);
        let key_hash = h.key_hash();
        let mut table = self.index.shard(key_hash).table.lock();
        if !h.has(state::LINKED) {
            return true;
        }
        let Some(item) = Index::held(&mut table, key_hash, addr) else {
            return true;
        };
        let total = h.total_bytes();
        let class_id = dram.class_of(addr);
        let Some(dst_chunk) = self.take_free(slow, class_id, total) else {
            return false;
        };
        let capacity = self.chunk_capacity(class_id, total);
        let (key, value) = h.read_rest().key_and_value_parts(&item);
        let copy = dst_chunk.write_item(capacity, key, &[value]);
        let dh = copy.view();
        dh.set_client_flags(h.client_flags());
        dh.set_exptime_rel_s(h.exptime_rel_s());
        dh.set_last_access_s(h.last_access_s());
        dh.set_key_hash(h.key_hash());
        dh.set_cas(h.cas());
        dh.set_next(NIL);
        dh.set_prev(NIL);
        dh.set(state::LINKED | (h.state() & state::KEY_BINARY));
        self.seal(&copy);
        Index::replace(&mut table, key_hash, addr, copy);
        {
            let mut cs = slow.classes[class_id].0.lock();
            cs.lru.link_head(&slow.mem, COLD, dh.header());
        }
        self.unlink_from_class(addr);
        true
    }
}
