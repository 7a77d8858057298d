//! `--policy kernel-tiering`: a model of what the kernel would do instead of fogcached.
//!
//! An operator with a CXL machine can run plain memcached with `-m` as large as DRAM and
//! CXL memory together and let Linux's memory tiering move hot 4 KiB pages (NUMA
//! balancing in tiering mode, `kernel.numa_balancing = 2`, Linux 6.1+; TPP before it).
//! This module models that: the engine runs DRAM-only (plain memcached: one tier, its own
//! slab allocator lays the items out), and every 4 KiB page of its memory is placed by
//! the model on a fast or a slow frame, the way the kernel places it:
//!
//! - **first touch**: a page is allocated on the fast node while that node has free
//!   frames above its min watermark, else on the slow node; below the low watermark
//!   kswapd demotes (below) so that new pages keep landing on the fast node (TPP's
//!   "allocate on DRAM, demote in the background");
//! - **hint faults**: every `scan_period_ms` the NUMA-balancing scanner unmaps the next
//!   `scan_mb` of the address space; in tiering mode only pages on the slow node are
//!   unmapped. The first access to an unmapped page is a hint fault; the page is a
//!   promotion candidate when the fault came within `hot_threshold_ms` of the unmapping
//!   (the kernel's hint-fault latency);
//! - **promotion rate limit**: at most `promote_rate_limit_mbps` of candidates per
//!   second (`numa_balancing_promote_rate_limit_MBps`), and the hot threshold is adjusted
//!   every 60 s so that candidates match the limit (`numa_promotion_adjust_threshold`);
//! - **room**: a candidate is promoted only while the fast node has free frames above
//!   its high watermark (`migrate_balanced_pgdat`); otherwise it fails and kswapd is
//!   woken to reclaim up to the promotion watermark;
//! - **demotion by reclaim order**: when the fast node falls below its low watermark, or
//!   a promotion failed for room, kswapd demotes pages from the tail of the fast node's
//!   LRU until it is back at the high (or promotion) watermark. The watermarks are the
//!   kernel's proportions (0.1 % of the node apart). Two simplifications are in the
//!   kernel's favour: kswapd runs at once when woken (the real one is a thread that
//!   takes its time, during which allocations fall back to the slow node), and the LRU
//!   is exact (every access moves a page to its head), better informed than the
//!   kernel's accessed-bit lists.
//!
//! Counting is the item-level policies' (`sim.rs`): every 64-byte line of an item that
//! lies in a slow page counts once per operation that reads or writes it — a get reads
//! the whole item and writes its header's line (the engine's DRAM-only hit rewrites its
//! access word), a set writes the whole new item and the old item's header line (its
//! unlink) — and a page migration reads 64 lines from one tier and writes 64 to the other
//! (a promotion's 64 reads and a demotion's 64 writes are slow-tier lines). LRU neighbour
//! links are not counted (the item-level policies pay for theirs): again in the kernel's
//! favour.
//!
//! Nothing here is a placement policy of the engine's: the engine is plain memcached,
//! the pages are the kernel's.

use std::collections::HashMap;

use engine::{
    Engine, EngineConfig, ItemView, ReadOptions, ReadOutcome, StoreMode, StoreOptions, StoreOutcome,
};

use crate::policy::PolicySetting;
use crate::sim::{
    finish, new_clock, new_driver, window_ops, EngineCounters, LoadSummary, Requests, RunReport,
    SimConfig, SimError, Window,
};
use crate::workload::{key_name, value_for, value_matches, Op};

const MIB: u64 = 1024 * 1024;

/// Bytes of a page the kernel migrates.
pub const PAGE_BYTES: u64 = 4096;
/// Bytes of a cache line, the unit the counts are in.
pub const LINE_BYTES: u64 = 64;
const LINES_PER_PAGE: u64 = PAGE_BYTES / LINE_BYTES;
const NIL: u32 = u32::MAX;
/// How often the kernel re-tunes the hot threshold (`sysctl_numa_balancing_scan_period_max`).
const THRESHOLD_ADJUST_PERIOD_MS: u64 = 60_000;
/// The threshold moves by 1/16 of its default per adjustment (`NUMA_MIGRATION_ADJUST_STEPS`).
const THRESHOLD_ADJUST_STEPS: u64 = 16;
/// The rate limiter's window (`numa_promotion_rate_limit`: one second).
const RATE_WINDOW_MS: u64 = 1000;

/// The kernel's knobs, with its defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelTiering {
    /// `numa_balancing_scan_period_min_ms`: the scanner's period (the kernel lengthens it
    /// up to 60 s when faults are few; the model keeps the shortest, in its favour).
    pub scan_period_ms: u64,
    /// `numa_balancing_scan_size_mb`: address space unmapped per period.
    pub scan_mb: u64,
    /// `numa_balancing_hot_threshold_ms`: a hint fault this soon after the unmapping
    /// makes the page a promotion candidate.
    pub hot_threshold_ms: u64,
    /// `numa_balancing_promote_rate_limit_MBps`: candidates per second, in MB.
    pub promote_rate_limit_mbps: u64,
}

impl Default for KernelTiering {
    fn default() -> Self {
        KernelTiering {
            scan_period_ms: 1000,
            scan_mb: 256,
            hot_threshold_ms: 1000,
            promote_rate_limit_mbps: 65_536,
        }
    }
}

impl KernelTiering {
    pub fn check(&self) -> Result<(), String> {
        if self.scan_period_ms == 0 || self.scan_mb == 0 || self.hot_threshold_ms == 0 {
            return Err(
                "kernel-tiering scan period, scan size and hot threshold must be at least 1".into(),
            );
        }
        if self.promote_rate_limit_mbps == 0 {
            return Err("kernel-tiering promotion rate limit must be at least 1 MB/s".into());
        }
        Ok(())
    }

    fn rate_limit_pages(&self) -> u64 {
        self.promote_rate_limit_mbps.saturating_mul(1 << 20) / PAGE_BYTES
    }

    fn scan_pages(&self) -> u64 {
        self.scan_mb.saturating_mul(1 << 20) / PAGE_BYTES
    }
}

/// Read or write, for the counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// The model's counters (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCounters {
    pub slow_lines_read: u64,
    pub slow_lines_written: u64,
    /// Pages moved from the slow to the fast node, and back.
    pub promotions: u64,
    pub demotions: u64,
    /// Hint faults taken (each costs the faulting thread a trap in the real kernel).
    pub hint_faults: u64,
    /// Promotion candidates refused: over the rate limit, or no room above the high
    /// watermark.
    pub promotions_rate_limited: u64,
    pub promotions_no_room: u64,
    /// Pages first touched on the fast and on the slow node.
    pub allocated_fast: u64,
    pub allocated_slow: u64,
}

#[derive(Clone, Copy, Debug)]
struct Page {
    fast: bool,
    /// When the scanner last unmapped the page (slow pages only); `None` while mapped.
    unmapped_at_ms: Option<u64>,
    /// Fast-node LRU links (page indices), NIL at the ends and for slow pages.
    prev: u32,
    next: u32,
}

/// The pages of one process's memory and where the kernel keeps them.
pub struct PageModel {
    params: KernelTiering,
    fast_frames: u64,
    fast_used: u64,
    /// Watermarks of the fast node, in free frames.
    wmark_min: u64,
    wmark_low: u64,
    wmark_high: u64,
    wmark_promo: u64,
    /// Virtual page number → index in `pages` (first-touch order).
    index: HashMap<u64, u32>,
    pages: Vec<Page>,
    /// Fast-node LRU: head is the most recently used page.
    lru_head: u32,
    lru_tail: u32,
    /// The scanner's position in `pages` and when it runs next.
    scan_cursor: usize,
    next_scan_ms: u64,
    /// Rate limiter: candidates in the current window.
    rate_window_start_ms: u64,
    rate_window_candidates: u64,
    /// Hot-threshold adjustment.
    hot_threshold_ms: u64,
    adjust_window_start_ms: u64,
    adjust_window_candidates: u64,
    pub counters: PageCounters,
}

impl PageModel {
    /// A model whose fast node has `fast_bytes` of frames.
    pub fn new(params: KernelTiering, fast_bytes: u64) -> PageModel {
        let fast_frames = fast_bytes / PAGE_BYTES;
        // The kernel's watermarks are a few per mille of the node (watermark_scale_factor
        // 10 = 0.1 % between them); the promotion watermark lies one gap above high.
        let gap = (fast_frames / 1000).max(1);
        PageModel {
            params,
            fast_frames,
            fast_used: 0,
            wmark_min: gap,
            wmark_low: 2 * gap,
            wmark_high: 3 * gap,
            wmark_promo: 4 * gap,
            index: HashMap::new(),
            pages: Vec::new(),
            lru_head: NIL,
            lru_tail: NIL,
            scan_cursor: 0,
            next_scan_ms: params.scan_period_ms,
            rate_window_start_ms: 0,
            rate_window_candidates: 0,
            hot_threshold_ms: params.hot_threshold_ms,
            adjust_window_start_ms: 0,
            adjust_window_candidates: 0,
            counters: PageCounters::default(),
        }
    }

    pub fn fast_frames(&self) -> u64 {
        self.fast_frames
    }

    pub fn fast_free(&self) -> u64 {
        self.fast_frames - self.fast_used
    }

    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// The kernel's current hot threshold (it moves when the rate limit binds).
    pub fn hot_threshold_ms(&self) -> u64 {
        self.hot_threshold_ms
    }

    /// Whether the page holding byte `addr` is on the fast node (`None`: never touched).
    pub fn is_fast(&self, addr: u64) -> Option<bool> {
        let idx = *self.index.get(&(addr / PAGE_BYTES))?;
        Some(self.pages[idx as usize].fast)
    }

    /// Whether every page of [addr, addr + len) is on the fast node.
    pub fn all_fast(&self, addr: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let (first, last) = (addr / PAGE_BYTES, (addr + len - 1) / PAGE_BYTES);
        (first..=last).all(|vpage| {
            self.index
                .get(&vpage)
                .is_some_and(|&idx| self.pages[idx as usize].fast)
        })
    }

    /// An access by the application to bytes [addr, addr + len) at `now_ms`: counts the
    /// lines of slow pages, takes hint faults (and promotes), first-touches new pages and
    /// keeps the fast LRU. Returns whether every page was fast before the access.
    pub fn access(&mut self, addr: u64, len: u64, kind: Access, now_ms: u64) -> bool {
        if len == 0 {
            return true;
        }
        let end = addr + len;
        let mut all_fast = true;
        let (first, last) = (addr / PAGE_BYTES, (end - 1) / PAGE_BYTES);
        for vpage in first..=last {
            let page_start = vpage * PAGE_BYTES;
            let from = addr.max(page_start);
            let to = end.min(page_start + PAGE_BYTES);
            // Lines are 64-byte aligned and pages 4096-byte aligned: each line is in one
            // page, so lines of the range in this page are counted once.
            let lines = (to - 1) / LINE_BYTES - from / LINE_BYTES + 1;
            let idx = self.page_index(vpage);
            let page = self.pages[idx as usize];
            if page.fast {
                self.lru_move_to_head(idx);
            } else {
                all_fast = false;
                match kind {
                    Access::Read => self.counters.slow_lines_read += lines,
                    Access::Write => self.counters.slow_lines_written += lines,
                }
                if let Some(unmapped_at) = page.unmapped_at_ms {
                    self.hint_fault(idx, now_ms.saturating_sub(unmapped_at), now_ms);
                }
            }
        }
        all_fast
    }

    /// The index of a page, allocating it at first touch.
    fn page_index(&mut self, vpage: u64) -> u32 {
        if let Some(&idx) = self.index.get(&vpage) {
            return idx;
        }
        let idx = u32::try_from(self.pages.len()).unwrap_or(NIL - 1);
        let fast = self.fast_free() > self.wmark_min;
        self.pages.push(Page {
            fast: false,
            unmapped_at_ms: None,
            prev: NIL,
            next: NIL,
        });
        self.index.insert(vpage, idx);
        if fast {
            self.counters.allocated_fast += 1;
            self.make_fast(idx);
        } else {
            self.counters.allocated_slow += 1;
        }
        if self.fast_free() < self.wmark_low {
            self.reclaim_to(self.wmark_high);
        }
        idx
    }

    fn hint_fault(&mut self, idx: u32, latency_ms: u64, now_ms: u64) {
        self.counters.hint_faults += 1;
        self.pages[idx as usize].unmapped_at_ms = None;
        if latency_ms >= self.hot_threshold_ms {
            return;
        }
        // A candidate: the rate limiter counts it whether or not it is promoted.
        if now_ms >= self.rate_window_start_ms + RATE_WINDOW_MS {
            self.rate_window_start_ms = now_ms;
            self.rate_window_candidates = 0;
        }
        self.adjust_window_candidates += 1;
        if self.rate_window_candidates >= self.params.rate_limit_pages() {
            self.counters.promotions_rate_limited += 1;
            return;
        }
        self.rate_window_candidates += 1;
        if self.fast_free() <= self.wmark_high {
            // This fault's promotion fails; kswapd, woken, makes room for the next ones.
            self.counters.promotions_no_room += 1;
            self.reclaim_to(self.wmark_promo);
            return;
        }
        self.counters.promotions += 1;
        // The copy: 64 lines read from the slow page (and written to the fast frame).
        self.counters.slow_lines_read += LINES_PER_PAGE;
        self.make_fast(idx);
    }

    /// What happens between requests at `now_ms`: the scanner's periods and the hot
    /// threshold's adjustment.
    pub fn tick(&mut self, now_ms: u64) {
        while now_ms >= self.next_scan_ms {
            self.scan(self.next_scan_ms);
            self.next_scan_ms += self.params.scan_period_ms;
        }
        if now_ms >= self.adjust_window_start_ms + THRESHOLD_ADJUST_PERIOD_MS {
            self.adjust_threshold(now_ms);
        }
    }

    /// `numa_promotion_adjust_threshold`: candidates over the last period against what
    /// the rate limit lets through; the threshold steps by 1/16 of its default.
    fn adjust_threshold(&mut self, now_ms: u64) {
        let period_s = (now_ms - self.adjust_window_start_ms) / 1000;
        let reference = self
            .params
            .rate_limit_pages()
            .saturating_mul(period_s.max(1));
        let step = (self.params.hot_threshold_ms / THRESHOLD_ADJUST_STEPS).max(1);
        let candidates = self.adjust_window_candidates;
        if candidates > reference.saturating_mul(11) / 10 {
            self.hot_threshold_ms = self.hot_threshold_ms.saturating_sub(step).max(1);
        } else if candidates < reference.saturating_mul(9) / 10 {
            self.hot_threshold_ms =
                (self.hot_threshold_ms + step).min(self.params.hot_threshold_ms);
        }
        self.adjust_window_start_ms = now_ms;
        self.adjust_window_candidates = 0;
    }

    /// One scanner period: unmap the next `scan_mb` of pages (slow ones only: tiering
    /// mode leaves the fast node's pages mapped).
    fn scan(&mut self, now_ms: u64) {
        let n = self.pages.len();
        if n == 0 {
            return;
        }
        let count = (self.params.scan_pages() as usize).min(n);
        for _ in 0..count {
            if self.scan_cursor >= n {
                self.scan_cursor = 0;
            }
            let page = &mut self.pages[self.scan_cursor];
            if !page.fast {
                page.unmapped_at_ms = Some(now_ms);
            }
            self.scan_cursor += 1;
        }
    }

    /// kswapd: demote from the fast LRU's tail until `target` frames are free.
    fn reclaim_to(&mut self, target: u64) {
        while self.fast_free() < target && self.lru_tail != NIL {
            let victim = self.lru_tail;
            self.lru_unlink(victim);
            self.pages[victim as usize].fast = false;
            self.fast_used -= 1;
            self.counters.demotions += 1;
            // The copy: 64 lines written to the slow frame.
            self.counters.slow_lines_written += LINES_PER_PAGE;
        }
    }

    fn make_fast(&mut self, idx: u32) {
        let page = &mut self.pages[idx as usize];
        page.fast = true;
        page.unmapped_at_ms = None;
        self.fast_used += 1;
        self.lru_push_head(idx);
    }

    fn lru_push_head(&mut self, idx: u32) {
        let old_head = self.lru_head;
        {
            let page = &mut self.pages[idx as usize];
            page.prev = NIL;
            page.next = old_head;
        }
        if old_head != NIL {
            self.pages[old_head as usize].prev = idx;
        } else {
            self.lru_tail = idx;
        }
        self.lru_head = idx;
    }

    fn lru_unlink(&mut self, idx: u32) {
        let Page { prev, next, .. } = self.pages[idx as usize];
        if prev != NIL {
            self.pages[prev as usize].next = next;
        } else {
            self.lru_head = next;
        }
        if next != NIL {
            self.pages[next as usize].prev = prev;
        } else {
            self.lru_tail = prev;
        }
        let page = &mut self.pages[idx as usize];
        page.prev = NIL;
        page.next = NIL;
    }

    fn lru_move_to_head(&mut self, idx: u32) {
        if self.lru_head == idx {
            return;
        }
        self.lru_unlink(idx);
        self.lru_push_head(idx);
    }

    /// The fast pages from most to least recently used (for tests and reports).
    pub fn fast_lru_addrs(&self) -> Vec<u64> {
        let mut by_index = vec![0u64; self.pages.len()];
        for (&vpage, &idx) in &self.index {
            by_index[idx as usize] = vpage * PAGE_BYTES;
        }
        let mut out = Vec::new();
        let mut cursor = self.lru_head;
        while cursor != NIL {
            out.push(by_index[cursor as usize]);
            cursor = self.pages[cursor as usize].next;
        }
        out
    }
}

/// Where an item lies in the engine's memory: its first byte's address and its size
/// (header + key + value), from the view a read lends (the key follows the header, so
/// the header starts `total - key - value` bytes before the key).
fn extent(view: &ItemView<'_>) -> (u64, u64) {
    let header_bytes = view
        .total_size_bytes
        .saturating_sub(view.key.len() + view.value.len());
    let start = (view.key.as_ptr() as u64).saturating_sub(header_bytes as u64);
    (start, view.total_size_bytes as u64)
}

/// `--policy kernel-tiering`: the load and run phases of `config` against plain memcached
/// (the engine DRAM-only, `-m` = both tiers of the other runs) whose pages this model
/// places; the windows carry the model's counts.
pub fn run(config: &SimConfig, policy: &PolicySetting) -> Result<RunReport, SimError> {
    let mut requests = Requests::new(config)?;
    let engine_config = EngineConfig {
        memory_limit_bytes: (config.dram_mib + config.slow_mib) * MIB,
        slow_tier: None,
        ..EngineConfig::default()
    };
    let clock = new_clock();
    let engine = Engine::new(engine_config, clock.clone()).map_err(SimError::Engine)?;
    let mut driver = new_driver(&engine, clock, config);
    let mut model = PageModel::new(config.kernel, config.dram_mib * MIB);
    let total_keys = usize::try_from(config.total_keys()).unwrap_or(usize::MAX);
    // Each key's item: (first byte, bytes); bytes 0 = not stored.
    let mut places: Vec<(u64, u64)> = vec![(0, 0); total_keys];
    let read_opts = ReadOptions::default();
    let mut key = Vec::new();
    let mut check_key = Vec::new();
    let mut setter = Setter {
        engine: &engine,
        config,
        key: Vec::new(),
        value: Vec::new(),
    };
    let mut tally = Tally::default();

    let mut stored = 0;
    for id in 0..config.total_keys() as u32 {
        if setter.store(id, &mut model, &mut places, driver.now_ms()) {
            stored += 1;
        }
        if driver.after_request() {
            model.tick(driver.now_ms());
        }
    }
    driver.tick();
    model.tick(driver.now_ms());
    let evictions = |engine: &Engine| {
        let mut evictions = 0;
        engine.stats(&mut |name, value| {
            if let ("evictions", engine::StatValue::U64(v)) = (name, value) {
                evictions = v;
            }
        });
        evictions
    };
    let mut before = tally.counters(&model, &places, evictions(&engine));
    let load = LoadSummary {
        keys: config.total_keys(),
        stored,
        dram_items: before.dram_items,
        slow_items: before.slow_items,
        dataset_to_dram_ratio: places.iter().map(|&(_, bytes)| bytes).sum::<u64>() as f64
            / (config.dram_mib * MIB).max(1) as f64,
        demotions: model.counters.demotions,
        evictions: before.evictions,
        end_s: driver.sim_s,
    };
    let mut report = RunReport {
        policy: policy.name,
        migration_enabled: true,
        load,
        ..RunReport::default()
    };
    for w in 0..config.windows {
        let phase = requests.phase();
        let (mut reads, mut updates) = (0, 0);
        for _ in 0..window_ops(config, w) {
            let now_ms = driver.now_ms();
            match requests.next_op() {
                Op::Read(id) => {
                    reads += 1;
                    key_name(id, &mut key);
                    let bytes = config.value_bytes_of(id);
                    let outcome = engine.read(&key, &read_opts, |v| {
                        let (start, total) = extent(v);
                        // The engine's hit rewrites the header's access word when the
                        // item is fetched for the first time or in a new second.
                        let writes_header = !v.fetched_before || v.last_access_ago_s > 0;
                        (
                            value_matches(id, bytes, v.value, &mut check_key),
                            start,
                            total,
                            writes_header,
                        )
                    });
                    match outcome {
                        ReadOutcome::Hit((ok, start, total, writes_header)) => {
                            if !ok {
                                report.wrong_values += 1;
                            }
                            if model.access(start, total, Access::Read, now_ms) {
                                tally.dram_hits += 1;
                            } else {
                                tally.slow_hits += 1;
                            }
                            if writes_header {
                                model.access(start, 1, Access::Write, now_ms);
                            }
                        }
                        ReadOutcome::Miss { .. } => tally.misses += 1,
                    }
                }
                Op::Update(id) => {
                    updates += 1;
                    if !setter.store(id, &mut model, &mut places, now_ms) {
                        report.failed_stores += 1;
                    }
                }
            }
            if driver.after_request() {
                model.tick(driver.now_ms());
            }
        }
        let now = tally.counters(&model, &places, evictions(&engine));
        let mut window = Window::between(w + 1, driver.sim_s, &before, &now, reads, updates);
        window.phase = phase;
        report.windows.push(window);
        before = now;
    }
    finish(config, &mut report);
    report.items = before.dram_items + before.slow_items;
    report.index_bytes = {
        let mut index_bytes = 0;
        engine.stats(&mut |name, value| {
            if let ("index_bytes", engine::StatValue::U64(v)) = (name, value) {
                index_bytes = v;
            }
        });
        index_bytes
    };
    report.kernel = Some(KernelSummary {
        counters: model.counters,
        hot_threshold_ms: model.hot_threshold_ms(),
        fast_frames: model.fast_frames(),
        pages: model.pages() as u64,
    });
    Ok(report)
}

/// Sets, with their accesses to the pages.
struct Setter<'a> {
    engine: &'a Engine,
    config: &'a SimConfig,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Setter<'_> {
    /// A set of key `id`: the old item's header line (its unlink), then the whole new
    /// item written. False when the engine refused it.
    fn store(
        &mut self,
        id: u32,
        model: &mut PageModel,
        places: &mut [(u64, u64)],
        now_ms: u64,
    ) -> bool {
        key_name(id, &mut self.key);
        value_for(id, self.config.value_bytes_of(id), &mut self.value);
        let slot = id as usize;
        let (old_start, old_bytes) = places[slot];
        if old_bytes > 0 {
            model.access(old_start, 1, Access::Write, now_ms);
        }
        places[slot] = (0, 0);
        let set_opts = StoreOptions::new(StoreMode::Set, 0, 0);
        if !matches!(
            self.engine.store(&self.key, &self.value, &set_opts),
            StoreOutcome::Stored { .. }
        ) {
            return false;
        }
        // Where the allocator put it: a read that neither bumps nor marks it fetched.
        let locate = ReadOptions {
            no_bump: true,
            ..ReadOptions::default()
        };
        match self.engine.read(&self.key, &locate, extent) {
            ReadOutcome::Hit((start, bytes)) => {
                places[slot] = (start, bytes);
                model.access(start, bytes, Access::Write, now_ms);
                true
            }
            ReadOutcome::Miss { .. } => false,
        }
    }
}

/// The model's hits and misses, which the engine cannot split by tier.
#[derive(Default)]
struct Tally {
    dram_hits: u64,
    slow_hits: u64,
    misses: u64,
}

impl Tally {
    /// The counters a window is the difference of; an item is in DRAM when all its
    /// pages are.
    fn counters(&self, model: &PageModel, places: &[(u64, u64)], evictions: u64) -> EngineCounters {
        let (mut dram_items, mut slow_items) = (0, 0);
        for &(start, bytes) in places {
            if bytes == 0 {
                continue;
            }
            if model.all_fast(start, bytes) {
                dram_items += 1;
            } else {
                slow_items += 1;
            }
        }
        let c = &model.counters;
        EngineCounters {
            cmd_get: self.dram_hits + self.slow_hits + self.misses,
            get_misses: self.misses,
            dram_get_hits: self.dram_hits,
            slow_get_hits: self.slow_hits,
            slow_lines_read: c.slow_lines_read,
            slow_lines_written: c.slow_lines_written,
            promotions: c.promotions,
            demotions: c.demotions,
            promotions_failed: c.promotions_rate_limited + c.promotions_no_room,
            evictions,
            hint_faults: c.hint_faults,
            dram_items,
            slow_items,
            ..EngineCounters::default()
        }
    }
}

/// What the kernel-tiering model did over the whole run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSummary {
    pub counters: PageCounters,
    /// The hot threshold at the end (the default unless the rate limit made it fall).
    pub hot_threshold_ms: u64,
    pub fast_frames: u64,
    /// 4 KiB pages the engine touched.
    pub pages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = PAGE_BYTES;

    /// A fast node of `frames` frames (watermarks 1, 2, 3, 4 frames below 1000).
    fn model(frames: u64, params: KernelTiering) -> PageModel {
        PageModel::new(params, frames * P)
    }

    #[test]
    fn first_touch_lands_on_the_fast_node_and_kswapd_demotes_the_coldest_to_keep_room() {
        let mut m = model(10, KernelTiering::default());
        for page in 0..12 {
            m.access(page * P, 1, Access::Write, 0);
        }
        // Watermarks min 1, low 2, high 3. The 9th page leaves 1 frame free: kswapd
        // demotes pages 0 and 1 (least recently used); the 11th, pages 2 and 3.
        assert_eq!(m.counters.allocated_fast, 12);
        assert_eq!(m.counters.allocated_slow, 0);
        assert_eq!(m.counters.demotions, 4);
        let fast: Vec<Option<bool>> = (0..12).map(|page| m.is_fast(page * P)).collect();
        assert_eq!(fast[..4], [Some(false); 4]);
        assert_eq!(fast[4..], [Some(true); 8]);
        assert_eq!(m.is_fast(100 * P), None);
        assert_eq!(m.fast_free(), 2);
        // Each demotion wrote a page to the slow node; nothing was read from it.
        assert_eq!(m.counters.slow_lines_written, 4 * 64);
        assert_eq!(m.counters.slow_lines_read, 0);
    }

    /// Pages 0..4 slow, 4..12 fast (the test above).
    fn twelve_pages() -> PageModel {
        let mut m = model(10, KernelTiering::default());
        for page in 0..12 {
            m.access(page * P, 1, Access::Write, 0);
        }
        m
    }

    #[test]
    fn an_item_spanning_a_page_boundary_counts_only_the_lines_in_the_slow_page() {
        let mut m = twelve_pages();
        let before = m.counters;
        // 1000 bytes from 800 bytes before the end of page 3 (slow) into page 4 (fast):
        // 800 bytes = 13 lines of page 3 (its last 12.5), 200 bytes of page 4 not counted.
        let start = 4 * P - 800;
        assert!(!m.access(start, 1000, Access::Read, 0));
        assert_eq!(m.counters.slow_lines_read - before.slow_lines_read, 13);
        assert_eq!(m.counters.slow_lines_written, before.slow_lines_written);
        // Written, the same lines count as written.
        m.access(start, 1000, Access::Write, 0);
        assert_eq!(
            m.counters.slow_lines_written - before.slow_lines_written,
            13
        );
        // Wholly in fast pages: nothing counted, and the access says so.
        assert!(m.access(5 * P + 10, 3000, Access::Read, 0));
        assert_eq!(m.counters.slow_lines_read - before.slow_lines_read, 13);
        assert!(m.all_fast(4 * P, 8 * P) && !m.all_fast(4 * P - 1, 10));
    }

    /// A fast node of 1000 frames after 1000 first touches: pages 0 and 1 demoted to
    /// make room, 2 frames free.
    fn thousand_pages(params: KernelTiering) -> PageModel {
        let mut m = model(1000, params);
        for page in 0..1000 {
            m.access(page * P, 1, Access::Write, 0);
        }
        assert_eq!(m.fast_free(), 2);
        assert_eq!(
            (m.is_fast(0), m.is_fast(P), m.is_fast(2 * P)),
            (Some(false), Some(false), Some(true))
        );
        m
    }

    #[test]
    fn a_hot_page_is_promoted_a_cold_one_is_not() {
        let params = KernelTiering {
            scan_period_ms: 1000,
            hot_threshold_ms: 500,
            ..KernelTiering::default()
        };
        let mut m = thousand_pages(params);
        let (a, b) = (0, P);
        // Room, then the scanner unmaps the slow pages at 1 s.
        m.reclaim_to(10);
        m.tick(1000);
        assert_eq!(m.fast_free(), 10);
        let reads = m.counters.slow_lines_read;
        // A is touched 100 ms after the unmapping (hot), B 700 ms after (cold).
        m.access(a, 64, Access::Read, 1100);
        m.access(b, 64, Access::Read, 1700);
        assert_eq!(m.counters.hint_faults, 2);
        assert_eq!(m.counters.promotions, 1);
        assert_eq!((m.is_fast(a), m.is_fast(b)), (Some(true), Some(false)));
        // The promotion copied a page: 64 slow lines read, plus the 1 + 1 lines accessed.
        assert_eq!(m.counters.slow_lines_read - reads, 64 + 2);
        // A second access to B without a new scan takes no fault.
        m.access(b, 64, Access::Read, 1750);
        assert_eq!(m.counters.hint_faults, 2);
    }

    #[test]
    fn promotions_respect_the_rate_limit_per_second() {
        // 1 MB/s = 256 pages per second.
        let params = KernelTiering {
            promote_rate_limit_mbps: 1,
            scan_mb: 64,
            ..KernelTiering::default()
        };
        let mut m = model(4000, params);
        for page in 0..4996 {
            m.access(page * P, 1, Access::Write, 0);
        }
        // Empty the fast node: every page slow, 4000 frames free.
        m.reclaim_to(4000);
        assert_eq!(m.fast_free(), 4000);
        assert!((0..4996).all(|p| m.is_fast(p * P) == Some(false)));
        // The scanner unmaps 64 MB = 16384 pages per period: all of them at 1 s.
        m.tick(1000);
        // Every page faults within the hot threshold, in the same second.
        for page in 0..4996 {
            m.access(page * P, 1, Access::Read, 1001);
        }
        assert_eq!(m.counters.promotions, 256, "one second's worth");
        assert_eq!(m.counters.promotions_rate_limited, 4996 - 256);
        // The next second lets another 256 through.
        m.tick(2000);
        for page in 0..4996 {
            m.access(page * P, 1, Access::Read, 2001);
        }
        assert_eq!(m.counters.promotions, 512);
    }

    #[test]
    fn reclaim_demotes_the_least_recently_used_fast_pages_first() {
        let mut m = thousand_pages(KernelTiering::default());
        // Fast: pages 2..1000 in first-touch order. Touch 2..12 again: they become the
        // most recent, and page 12 the least recent.
        for page in 2..12 {
            m.access(page * P, 1, Access::Read, 10);
        }
        let lru = m.fast_lru_addrs();
        assert_eq!(lru.len(), 998);
        assert_eq!(lru[0], 11 * P);
        assert_eq!(*lru.last().unwrap(), 12 * P);
        let written = m.counters.slow_lines_written;
        m.reclaim_to(4);
        assert_eq!(m.counters.demotions, 4);
        assert_eq!(
            (m.is_fast(12 * P), m.is_fast(13 * P)),
            (Some(false), Some(false))
        );
        assert_eq!(
            (m.is_fast(14 * P), m.is_fast(2 * P)),
            (Some(true), Some(true))
        );
        // Each demotion wrote a page to the slow node.
        assert_eq!(m.counters.slow_lines_written - written, 2 * 64);
    }

    #[test]
    fn a_failed_promotion_wakes_kswapd_to_the_promotion_watermark() {
        let mut m = thousand_pages(KernelTiering::default());
        // The scan at 1 s unmaps the slow pages 0 and 1.
        m.tick(1000);
        // Free frames (2) are not above the high watermark (3): no room; kswapd
        // reclaims to the promotion watermark (4 free).
        m.access(0, 1, Access::Read, 1001);
        assert_eq!(m.counters.promotions_no_room, 1);
        assert_eq!(m.counters.promotions, 0);
        assert_eq!(m.fast_free(), 4);
        // Now a hot fault finds room above high.
        m.access(P, 1, Access::Read, 1003);
        assert_eq!(m.counters.promotions, 1);
        assert_eq!(m.is_fast(P), Some(true));
    }

    #[test]
    fn the_hot_threshold_falls_while_candidates_exceed_the_rate_limit() {
        let params = KernelTiering {
            promote_rate_limit_mbps: 1,
            ..KernelTiering::default()
        };
        let mut m = model(100, params);
        m.adjust_window_candidates = 10 * 256 * 60;
        m.tick(60_000);
        assert_eq!(m.hot_threshold_ms(), 1000 - 1000 / 16);
        // Few candidates: it climbs back, never above the default.
        m.tick(120_000);
        m.tick(180_000);
        assert_eq!(m.hot_threshold_ms(), 1000);
    }
}
