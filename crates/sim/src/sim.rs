//! The simulation run: one engine, one thread, a manual clock, and the engine's own
//! maintenance steps called at a fixed cadence of simulated time.
//!
//! Simulated time: `ops_per_s` requests make one simulated second, split into
//! `ticks_per_s` ticks. After every tick the simulator does what the engine's background
//! threads would have done meanwhile: one pass of each tier's LRU maintainer, then the
//! migration step until both Move queues are empty (bounded), and moves the clock on by
//! its share of a second in 1/32-second ticks (item access times have that resolution;
//! the whole second still changes at the last tick). Once per simulated second it runs
//! the slab automover; the LRU crawler runs every
//! `crawler_interval_s` simulated seconds (0 = never: the workload sets no TTL, so the
//! crawler has nothing to reclaim and would only add header reads to the counters).
//!
//! Nothing here decides placement: every promotion, demotion and eviction is the
//! engine's code, under the policy a run names (`policy.rs`). The simulator only
//! counts, through the engine's `stats`.

use std::sync::Arc;

use engine::clock::TICKS_PER_S;
use engine::{
    ConfigError, Engine, EngineConfig, ManualClock, ReadOptions, ReadOutcome, StoreMode,
    StoreOptions, StoreOutcome,
};

use crate::flash::{FlashConfig, FlashCounters, FlashRun};
use crate::kernel_tiering::KernelTiering;
use crate::policy::{PolicyKind, PolicySetting};
use crate::workload::{
    key_name, value_for, value_matches, Distribution, Op, ValueSizes, Workload, WorkloadError,
    KEYS_MAX, KEY_BYTES,
};

const MIB: u64 = 1024 * 1024;

/// Unix time of the simulated clock's relative second 0 (any fixed value: runs must
/// not depend on the wall clock).
const SIM_START_UNIX_S: u64 = 1_700_000_000;

/// Bound on migration steps per tick (each handles up to a batch per queue; the queues
/// are bounded, so this is only a guard).
const MIGRATION_STEPS_PER_TICK_MAX: usize = 4096;

/// Bytes an item takes beyond key and value (the engine's item header), used only to
/// size the default key count; the real dataset size is measured after the load.
pub const ITEM_OVERHEAD_ESTIMATE_BYTES: u64 = 48;

#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Keys in the dataset.
    pub keys: u64,
    /// Value size of each key.
    pub value_sizes: ValueSizes,
    /// A second dataset that the run phase alternates with the first (HMCached section
    /// 4.6's phase change); `None` for one dataset.
    pub phase_change: Option<PhaseChange>,
    pub dram_mib: u64,
    pub slow_mib: u64,
    /// Requests of the run phase (the load phase adds one `set` per key).
    pub ops: u64,
    /// Measurement windows the run phase is split into.
    pub windows: u32,
    /// How the run phase picks keys.
    pub distribution: Distribution,
    /// Share of run-phase requests that are updates (`set` of the same size).
    pub update_ratio: f64,
    pub seed: u64,
    /// Requests per simulated second.
    pub ops_per_s: u64,
    /// Maintenance ticks per simulated second.
    pub ticks_per_s: u32,
    /// Simulated seconds between LRU crawler passes; 0 = never.
    pub crawler_interval_s: u32,
    /// Engine knobs a run sets over the policy's defaults (tuning sweeps).
    pub engine_overrides: EngineOverrides,
    /// The kernel's knobs for `--policy kernel-tiering`.
    pub kernel: KernelTiering,
    /// `--flash-size`: a flash tier under the engine; `None` (the default) runs the
    /// engine alone, exactly as before the flash model existed.
    pub flash: Option<FlashConfig>,
}

/// HMCached section 4.6: a second dataset (keys after the first one's), and the run
/// phase split into `phases` equal parts that request the first dataset, the second, the
/// first, ... in turn. Both datasets are loaded before the run.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseChange {
    pub keys: u64,
    pub value_sizes: ValueSizes,
    pub phases: u32,
}

/// Engine settings a sweep may override; `None` keeps the engine's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineOverrides {
    pub promotion_margin: Option<u8>,
    pub access_period_requests: Option<u64>,
    /// `false`: `--no-benefit-reassign` (the hotspot policy's DRAM reassignment off).
    pub benefit_reassign: Option<bool>,
    /// The engine's `slab_automove` (0: no page ever changes class, HMCached-Calcific
    /// with `benefit_reassign` off).
    pub slab_automove: Option<u32>,
}

impl SimConfig {
    /// The key count whose items fill `ratio` times the DRAM tier.
    pub fn keys_for_dram_ratio(dram_mib: u64, value_bytes: usize, ratio: u64) -> u64 {
        let item_bytes = ITEM_OVERHEAD_ESTIMATE_BYTES + KEY_BYTES as u64 + value_bytes as u64;
        ratio.saturating_mul(dram_mib).saturating_mul(MIB) / item_bytes.max(1)
    }

    /// Estimated bytes of `keys` items of `value_sizes` (header + key + mean value).
    pub fn dataset_bytes_estimate(keys: u64, value_sizes: &ValueSizes) -> u64 {
        let item_bytes =
            (ITEM_OVERHEAD_ESTIMATE_BYTES + KEY_BYTES as u64) as f64 + value_sizes.mean_bytes();
        (keys as f64 * item_bytes) as u64
    }

    /// HM-UNI's DRAM share, "the ratio of the DRAM size to the dataset size" (seed 002
    /// section 4.1): the DRAM tier against the items' bytes of every dataset of the run,
    /// at most all of them. Without it the `uniform` policy would home keys by the
    /// tiers' page counts, and the slow tier here is sized with room to spare.
    pub fn uniform_dram_share_ppm(&self) -> u32 {
        let data_bytes = Self::dataset_bytes_estimate(self.keys, &self.value_sizes)
            + self
                .phase_change
                .as_ref()
                .map_or(0, |p| Self::dataset_bytes_estimate(p.keys, &p.value_sizes));
        let dram_bytes = self.dram_mib * MIB;
        if data_bytes == 0 || dram_bytes >= data_bytes {
            return engine::PPM;
        }
        engine::fraction_to_ppm(dram_bytes as f64 / data_bytes as f64)
    }

    /// Keys of both datasets.
    pub fn total_keys(&self) -> u64 {
        self.keys + self.phase_change.as_ref().map_or(0, |p| p.keys)
    }

    /// The value size of key `id` (of the first dataset, or of the second after it).
    pub fn value_bytes_of(&self, id: u32) -> usize {
        match &self.phase_change {
            Some(second) if u64::from(id) >= self.keys => second.value_sizes.size_of(id, self.seed),
            _ => self.value_sizes.size_of(id, self.seed),
        }
    }

    fn check(&self) -> Result<(), SimError> {
        let bad = |what: &str| Err(SimError::Config(what.to_string()));
        if self.keys == 0 {
            return bad("--keys must be at least 1");
        }
        self.value_sizes.check().map_err(SimError::Config)?;
        if let Some(second) = &self.phase_change {
            second.value_sizes.check().map_err(SimError::Config)?;
            if second.keys == 0 || second.phases == 0 {
                return bad("the phase change needs keys and at least one phase");
            }
            if self.ops < u64::from(second.phases) {
                return bad("--ops must be at least the number of phases");
            }
        }
        if self.total_keys() > KEYS_MAX {
            return Err(SimError::Config(format!(
                "at most {KEYS_MAX} keys in all, got {}",
                self.total_keys()
            )));
        }
        self.kernel.check().map_err(SimError::Config)?;
        if self.windows == 0 {
            return bad("--windows must be at least 1");
        }
        if self.ops < u64::from(self.windows) {
            return bad("--ops must be at least --windows");
        }
        if self.ticks_per_s == 0 || self.ops_per_s < u64::from(self.ticks_per_s) {
            return bad("--ticks-per-s must be at least 1 and at most --ops-per-s");
        }
        if let Some(flash) = &self.flash {
            flash.check().map_err(SimError::Config)?;
            if self.phase_change.is_some() {
                return bad("the flash model does not run with --phase-change");
            }
        } else if self.slow_mib == 0 {
            return bad("--slow-mib must be at least 1 (the experiment needs a slow tier)");
        }
        let limit_mib = (usize::MAX as u64) / MIB;
        if self.dram_mib > limit_mib || self.slow_mib > limit_mib {
            return bad("tier size too large for this machine");
        }
        Ok(())
    }
}

#[derive(Debug)]
pub enum SimError {
    Config(String),
    Policy(crate::policy::UnknownPolicy),
    Workload(WorkloadError),
    Engine(ConfigError),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Config(what) => f.write_str(what),
            SimError::Policy(e) => e.fmt(f),
            SimError::Workload(e) => e.fmt(f),
            SimError::Engine(e) => write!(f, "engine: {e}"),
        }
    }
}

impl std::error::Error for SimError {}

/// The engine counters a window is computed from (cumulative, as `stats` reports them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    pub cmd_get: u64,
    pub get_misses: u64,
    pub dram_get_hits: u64,
    pub slow_get_hits: u64,
    pub slow_lines_read: u64,
    pub slow_lines_written: u64,
    pub dram_lines_read: u64,
    pub promotions: u64,
    pub demotions: u64,
    pub promotions_failed: u64,
    pub promotions_skipped: u64,
    pub demotions_failed: u64,
    pub move_queue_dropped: u64,
    pub evictions: u64,
    /// Hint faults of the kernel-tiering model (0 for the engine's policies).
    pub hint_faults: u64,
    /// Gauges (not differenced): items and item bytes per tier.
    pub dram_items: u64,
    pub slow_items: u64,
    pub dram_item_bytes: u64,
    pub slow_item_bytes: u64,
    pub dram_limit_bytes: u64,
    /// DRAM bytes of the index (a gauge).
    pub index_bytes: u64,
}

impl EngineCounters {
    /// Reads the counters from the engine's `stats` output, by their stat names.
    pub fn read(engine: &Engine) -> EngineCounters {
        let mut c = EngineCounters::default();
        engine.stats(&mut |name, value| {
            let engine::StatValue::U64(v) = value else {
                return;
            };
            let slot = match name {
                "cmd_get" => &mut c.cmd_get,
                "get_misses" => &mut c.get_misses,
                "tier_dram_get_hits" => &mut c.dram_get_hits,
                "tier_slow_get_hits" => &mut c.slow_get_hits,
                "slow_lines_read" => &mut c.slow_lines_read,
                "slow_lines_written" => &mut c.slow_lines_written,
                "dram_lines_read" => &mut c.dram_lines_read,
                "promotions" => &mut c.promotions,
                "demotions" => &mut c.demotions,
                "promotions_failed" => &mut c.promotions_failed,
                "promotions_skipped" => &mut c.promotions_skipped,
                "demotions_failed" => &mut c.demotions_failed,
                "move_queue_dropped" => &mut c.move_queue_dropped,
                "evictions" => &mut c.evictions,
                "tier_dram_items" => &mut c.dram_items,
                "tier_slow_items" => &mut c.slow_items,
                "tier_dram_bytes" => &mut c.dram_item_bytes,
                "tier_slow_bytes" => &mut c.slow_item_bytes,
                "tier_dram_limit_bytes" => &mut c.dram_limit_bytes,
                "index_bytes" => &mut c.index_bytes,
                _ => return,
            };
            *slot = v;
        });
        c
    }
}

/// One measurement window of the run phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    /// 1-based window number; 0 for the totals of the whole run phase.
    pub index: u32,
    /// Simulated second at the end of the window.
    pub end_s: u64,
    pub requests: u64,
    pub reads: u64,
    pub updates: u64,
    pub dram_hits: u64,
    pub slow_hits: u64,
    pub misses: u64,
    pub slow_lines_read: u64,
    pub slow_lines_written: u64,
    pub promotions: u64,
    pub promotions_failed: u64,
    /// Promotions refused by the engine's admission rule.
    pub promotions_skipped: u64,
    pub demotions: u64,
    pub evictions: u64,
    pub move_queue_dropped: u64,
    /// Hint faults of the kernel-tiering model (0 for the engine's policies).
    pub hint_faults: u64,
    /// Items per tier at the end of the window.
    pub dram_items: u64,
    pub slow_items: u64,
    /// The phase the window's requests were in (1-based; 1 without a phase change: the
    /// first dataset in odd phases, the second in even ones).
    pub phase: u32,
    /// DRAM slab pages per class at the end of the window: (chunk size, pages), classes
    /// with pages only (the engine's `stats slabs`; empty for kernel-tiering).
    pub dram_pages_by_class: Vec<(u64, u64)>,
    /// What the flash tier did in the window (all 0 without one).
    pub flash: FlashCounters,
}

impl Window {
    pub(crate) fn between(
        index: u32,
        end_s: u64,
        a: &EngineCounters,
        b: &EngineCounters,
        reads: u64,
        updates: u64,
    ) -> Window {
        let d = |f: fn(&EngineCounters) -> u64| f(b).saturating_sub(f(a));
        Window {
            index,
            end_s,
            requests: reads + updates,
            reads,
            updates,
            dram_hits: d(|c| c.dram_get_hits),
            slow_hits: d(|c| c.slow_get_hits),
            misses: d(|c| c.get_misses),
            slow_lines_read: d(|c| c.slow_lines_read),
            slow_lines_written: d(|c| c.slow_lines_written),
            promotions: d(|c| c.promotions),
            promotions_failed: d(|c| c.promotions_failed),
            promotions_skipped: d(|c| c.promotions_skipped),
            demotions: d(|c| c.demotions),
            evictions: d(|c| c.evictions),
            move_queue_dropped: d(|c| c.move_queue_dropped),
            hint_faults: d(|c| c.hint_faults),
            dram_items: b.dram_items,
            slow_items: b.slow_items,
            phase: 1,
            dram_pages_by_class: Vec::new(),
            flash: FlashCounters::default(),
        }
    }

    /// Share of get hits served from DRAM (0 when there were no hits).
    pub fn dram_hit_share(&self) -> f64 {
        ratio(self.dram_hits, self.dram_hits + self.slow_hits)
    }

    /// Slow-tier 64-byte lines read per request (reads and updates).
    pub fn slow_lines_per_request(&self) -> f64 {
        ratio(self.slow_lines_read, self.requests)
    }

    /// Slow-tier 64-byte lines written per request: demotion copies, stores and the
    /// engine's header updates in the slow tier.
    pub fn slow_lines_written_per_request(&self) -> f64 {
        ratio(self.slow_lines_written, self.requests)
    }

    pub fn promotions_per_1k_requests(&self) -> f64 {
        per_1k(self.promotions, self.requests)
    }

    pub fn demotions_per_1k_requests(&self) -> f64 {
        per_1k(self.demotions, self.requests)
    }

    pub fn promotions_skipped_per_1k_requests(&self) -> f64 {
        per_1k(self.promotions_skipped, self.requests)
    }

    pub fn hint_faults_per_1k_requests(&self) -> f64 {
        per_1k(self.hint_faults, self.requests)
    }

    /// Slow-tier lines read and written per request.
    pub fn slow_lines_accessed_per_request(&self) -> f64 {
        ratio(
            self.slow_lines_read + self.slow_lines_written,
            self.requests,
        )
    }

    /// The windows taken together as one: counts add up, the end time and the item
    /// gauges are those of the last window. `index` names it (0 for aggregates).
    pub fn sum(index: u32, windows: &[Window]) -> Window {
        let mut total = Window {
            index,
            ..Window::default()
        };
        for w in windows {
            total.requests += w.requests;
            total.reads += w.reads;
            total.updates += w.updates;
            total.dram_hits += w.dram_hits;
            total.slow_hits += w.slow_hits;
            total.misses += w.misses;
            total.slow_lines_read += w.slow_lines_read;
            total.slow_lines_written += w.slow_lines_written;
            total.promotions += w.promotions;
            total.promotions_failed += w.promotions_failed;
            total.promotions_skipped += w.promotions_skipped;
            total.demotions += w.demotions;
            total.evictions += w.evictions;
            total.move_queue_dropped += w.move_queue_dropped;
            total.hint_faults += w.hint_faults;
            total.end_s = w.end_s;
            total.dram_items = w.dram_items;
            total.slow_items = w.slow_items;
            total.phase = w.phase;
            total.dram_pages_by_class.clone_from(&w.dram_pages_by_class);
            total.flash.add(&w.flash);
        }
        total
    }

    /// Hits of the engine's tiers over reads (flash hits are engine misses).
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.dram_hits + self.slow_hits, self.reads)
    }

    /// Hits of every tier, flash included, over reads.
    pub fn hit_ratio_with_flash(&self) -> f64 {
        ratio(
            self.dram_hits + self.slow_hits + self.flash.hits,
            self.reads,
        )
    }

    /// Share of reads served from flash.
    pub fn flash_share(&self) -> f64 {
        ratio(self.flash.hits, self.reads)
    }

    /// Device bytes read for GETs, per read request.
    pub fn flash_read_bytes_per_get(&self) -> f64 {
        ratio(self.flash.read_bytes, self.reads)
    }

    /// Device bytes written, per read request.
    pub fn flash_write_bytes_per_get(&self) -> f64 {
        ratio(self.flash.write_bytes, self.reads)
    }
}

pub(crate) fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

fn per_1k(count: u64, requests: u64) -> f64 {
    1000.0 * ratio(count, requests)
}

/// The 1-based number of the first window of the steady state: the last half of the
/// windows (the last 5 of 10, the last 3 of 5, the only one of 1).
pub fn steady_first_window(windows: u32) -> u32 {
    windows / 2 + 1
}

/// What the load phase left behind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadSummary {
    pub keys: u64,
    pub stored: u64,
    pub dram_items: u64,
    pub slow_items: u64,
    /// Bytes of all items (header + key + value) over the DRAM tier's size.
    pub dataset_to_dram_ratio: f64,
    pub demotions: u64,
    pub evictions: u64,
    pub end_s: u64,
}

/// The result of one run (one placement setting).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunReport {
    /// The `--policy` name of the run.
    pub policy: &'static str,
    /// The engine's `migration_enabled` under that policy.
    pub migration_enabled: bool,
    pub load: LoadSummary,
    pub windows: Vec<Window>,
    /// The last half of the windows taken together, from [`steady_first_window`] on.
    pub steady: Window,
    /// The whole run phase.
    pub total: Window,
    /// Hits whose value was not the one written for the key (must stay 0).
    pub wrong_values: u64,
    /// Stores the engine refused in the run phase (must stay 0 with default sizes).
    pub failed_stores: u64,
    /// At the end of the run: DRAM bytes of the index, and the items it maps (both
    /// tiers). The index is the only DRAM a slow-tier item costs.
    pub index_bytes: u64,
    pub items: u64,
    /// What the kernel-tiering model did (`--policy kernel-tiering` only).
    pub kernel: Option<crate::kernel_tiering::KernelSummary>,
    /// The flash tier at the end of the run (`--flash-size` only).
    pub flash: Option<FlashSummary>,
}

/// The flash tier at the end of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct FlashSummary {
    pub config: FlashConfig,
    /// The whole run, load phase included.
    pub counters: FlashCounters,
    /// Index slots allocated, and the bits of tag a lookup compares.
    pub index_slots: u64,
    pub tag_bits: u32,
    /// DRAM of the open segment's write buffer (not per item).
    pub buffer_bytes: u64,
    /// Eviction events the engine's log dropped (0: the model saw every eviction).
    pub events_dropped: u64,
}

impl FlashSummary {
    pub fn dram_bytes_per_item(&self) -> f64 {
        ratio(self.counters.dram_bytes, self.counters.items)
    }
}

impl RunReport {
    /// DRAM bytes of index per item at the end of the run.
    pub fn index_bytes_per_item(&self) -> f64 {
        if self.items == 0 {
            0.0
        } else {
            self.index_bytes as f64 / self.items as f64
        }
    }
}

impl RunReport {
    pub fn first(&self) -> Option<&Window> {
        self.windows.first()
    }
    pub fn last(&self) -> Option<&Window> {
        self.windows.last()
    }
}

/// Drives one engine through simulated time.
pub(crate) struct Driver {
    pub(crate) engine: Arc<Engine>,
    clock: Arc<ManualClock>,
    ops_per_s: u64,
    ops_per_tick: u64,
    ticks_per_s: u32,
    crawler_interval_s: u32,
    ops_in_tick: u64,
    ticks_in_s: u32,
    s_since_crawl: u32,
    pub(crate) sim_s: u64,
    /// Requests of the load and run phases so far.
    requests: u64,
    /// The flash tier under the engine, fed its evictions after every request and
    /// every maintenance step.
    pub(crate) flash: Option<FlashRun>,
}

impl Driver {
    fn new(engine: &Arc<Engine>, clock: Arc<ManualClock>, config: &SimConfig) -> Driver {
        Driver {
            engine: Arc::clone(engine),
            clock,
            ops_per_s: config.ops_per_s,
            ops_per_tick: config.ops_per_s / u64::from(config.ticks_per_s),
            ticks_per_s: config.ticks_per_s,
            crawler_interval_s: config.crawler_interval_s,
            ops_in_tick: 0,
            ticks_in_s: 0,
            s_since_crawl: 0,
            sim_s: 0,
            requests: 0,
            flash: None,
        }
    }

    fn drain_evictions(&mut self) {
        if let Some(flash) = &mut self.flash {
            flash.drain(&self.engine);
        }
    }

    /// Simulated milliseconds since the load began, by the requests made.
    pub(crate) fn now_ms(&self) -> u64 {
        self.requests.saturating_mul(1000) / self.ops_per_s.max(1)
    }

    /// Counts one request and runs the maintenance the elapsed time calls for; true when
    /// a tick ran.
    pub(crate) fn after_request(&mut self) -> bool {
        self.drain_evictions();
        self.requests += 1;
        self.ops_in_tick += 1;
        if self.ops_in_tick < self.ops_per_tick {
            return false;
        }
        self.tick();
        true
    }

    pub(crate) fn tick(&mut self) {
        self.ops_in_tick = 0;
        let e = &self.engine;
        // Each tier's own maintainer (Fogcached), then the migration thread's work.
        e.lru_maintainer_tier_step(0);
        e.lru_maintainer_tier_step(1);
        for _ in 0..MIGRATION_STEPS_PER_TICK_MAX {
            let moved = self.engine.migration_step();
            self.drain_evictions();
            if moved == 0 {
                break;
            }
        }
        let e = &self.engine;
        // The clock moves on in 1/32-second steps (item access times have that
        // resolution), spread over the ticks so that the second still changes exactly
        // at the last tick of each simulated second.
        let per_s = u64::from(self.ticks_per_s);
        let clock_ticks_before = u64::from(self.ticks_in_s) * TICKS_PER_S / per_s;
        self.ticks_in_s += 1;
        if self.ticks_in_s < self.ticks_per_s {
            let clock_ticks_after = u64::from(self.ticks_in_s) * TICKS_PER_S / per_s;
            self.clock
                .advance_ticks(clock_ticks_after - clock_ticks_before);
            return;
        }
        self.ticks_in_s = 0;
        self.clock.advance_ticks(TICKS_PER_S - clock_ticks_before);
        self.sim_s += 1;
        e.slab_automove_step();
        self.drain_evictions();
        let e = &self.engine;
        if self.crawler_interval_s > 0 {
            self.s_since_crawl += 1;
            if self.s_since_crawl >= self.crawler_interval_s {
                self.s_since_crawl = 0;
                e.lru_crawler_step();
                self.drain_evictions();
            }
        }
    }
}

/// The run phase's requests: one dataset's, or two datasets' in alternating phases
/// (the second dataset's key ids follow the first's).
pub(crate) struct Requests {
    first: Workload,
    second: Option<Workload>,
    second_offset: u32,
    phases: u64,
    ops: u64,
    issued: u64,
}

impl Requests {
    pub(crate) fn new(config: &SimConfig) -> Result<Requests, SimError> {
        let first = Workload::new(
            config.keys,
            &config.distribution,
            config.update_ratio,
            config.seed,
        )
        .map_err(SimError::Workload)?;
        let (second, phases) = match &config.phase_change {
            Some(p) => (
                Some(
                    Workload::new(
                        p.keys,
                        &config.distribution,
                        config.update_ratio,
                        config.seed.wrapping_add(1),
                    )
                    .map_err(SimError::Workload)?,
                ),
                u64::from(p.phases),
            ),
            None => (None, 1),
        };
        Ok(Requests {
            first,
            second,
            // Checked against KEYS_MAX (below u32::MAX) in `SimConfig::check`.
            second_offset: u32::try_from(config.keys).unwrap_or(u32::MAX),
            phases,
            ops: config.ops,
            issued: 0,
        })
    }

    /// The 1-based phase of the next request.
    pub(crate) fn phase(&self) -> u32 {
        let phase = self.issued.saturating_mul(self.phases) / self.ops.max(1);
        u32::try_from(phase.min(self.phases - 1) + 1).unwrap_or(u32::MAX)
    }

    pub(crate) fn next_op(&mut self) -> Op {
        let phase = self.phase();
        self.issued += 1;
        match &mut self.second {
            Some(second) if phase.is_multiple_of(2) => match second.next_op() {
                Op::Read(id) => Op::Read(id + self.second_offset),
                Op::Update(id) => Op::Update(id + self.second_offset),
            },
            _ => self.first.next_op(),
        }
    }
}

/// DRAM slab pages per class from the engine's `stats slabs`: (chunk size, pages).
fn dram_pages_by_class(engine: &Engine) -> Vec<(u64, u64)> {
    let mut chunk: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    engine.stats_slabs(&mut |name, value| {
        let engine::StatValue::U64(v) = value else {
            return;
        };
        // DRAM classes have no tier prefix: "<class>:<field>".
        let Some((class, field)) = name.split_once(':') else {
            return;
        };
        let Ok(class) = class.parse::<u64>() else {
            return;
        };
        let entry = chunk.entry(class).or_default();
        match field {
            "chunk_size" => entry.0 = v,
            "total_pages" => entry.1 = v,
            _ => {}
        }
    });
    chunk
        .into_values()
        .filter(|&(_, pages)| pages > 0)
        .collect()
}

/// The engine configuration of a run: tier sizes, then the policy and the overrides.
fn engine_config(config: &SimConfig, policy: &PolicySetting) -> EngineConfig {
    let mut engine_config = EngineConfig {
        memory_limit_bytes: config.dram_mib * MIB,
        // No slow tier only with flash (DRAM + flash, as memcached + extstore);
        // `SimConfig::check` refuses it otherwise.
        slow_tier: (config.slow_mib > 0).then(|| tier::RegionSpec {
            size_bytes: (config.slow_mib * MIB) as usize,
            backing: tier::RegionBacking::Anonymous,
            // Accounting is always on; a cost model would only spend wall time.
            cost: tier::CostModel::NONE,
        }),
        ..EngineConfig::default()
    };
    engine_config.uniform_dram_share_ppm = Some(config.uniform_dram_share_ppm());
    policy.configure(&mut engine_config);
    if let Some(margin) = config.engine_overrides.promotion_margin {
        engine_config.promotion_margin = margin;
    }
    if let Some(period) = config.engine_overrides.access_period_requests {
        engine_config.access_period_requests = period;
    }
    if let Some(reassign) = config.engine_overrides.benefit_reassign {
        engine_config.benefit_reassign = reassign;
    }
    if let Some(automove) = config.engine_overrides.slab_automove {
        engine_config.slab_automove = automove;
    }
    engine_config
}

/// Runs the load phase and the run phase once, under `policy`.
pub fn run(config: &SimConfig, policy: &PolicySetting) -> Result<RunReport, SimError> {
    config.check()?;
    if policy.kind == PolicyKind::KernelTiering {
        if config.flash.is_some() {
            return Err(SimError::Config(
                "the flash model runs under the engine's policies, not kernel-tiering".into(),
            ));
        }
        return crate::kernel_tiering::run(config, policy);
    }
    let mut requests = Requests::new(config)?;
    let engine_config = engine_config(config, policy);
    let migration_enabled = engine_config.migration_enabled;
    let clock = ManualClock::new(SIM_START_UNIX_S);
    let engine = Engine::new(engine_config, clock.clone()).map_err(SimError::Engine)?;
    let mut driver = Driver::new(&engine, clock, config);
    if let Some(flash) = &config.flash {
        let item_bytes = crate::flash::RECORD_HEADER_BYTES
            + KEY_BYTES as u64
            + config.value_sizes.mean_bytes().round() as u64;
        driver.flash = Some(FlashRun::new(flash, item_bytes, &engine).map_err(SimError::Config)?);
    }
    let set_opts = StoreOptions::new(StoreMode::Set, 0, 0);
    let read_opts = ReadOptions::default();
    let mut key = Vec::with_capacity(KEY_BYTES);
    let mut check_key = Vec::with_capacity(KEY_BYTES);
    let mut value = Vec::new();

    // Load phase: every key once, in key order (YCSB's load).
    let mut stored = 0;
    for id in 0..config.total_keys() as u32 {
        key_name(id, &mut key);
        value_for(id, config.value_bytes_of(id), &mut value);
        if matches!(
            engine.store(&key, &value, &set_opts),
            StoreOutcome::Stored { .. }
        ) {
            stored += 1;
        }
        driver.after_request();
    }
    // Let the maintenance catch up before measuring, as a pause after a load would.
    driver.tick();
    let after_load = EngineCounters::read(&engine);
    let mut flash_before = flash_counters(&driver);
    let load = LoadSummary {
        keys: config.total_keys(),
        stored,
        dram_items: after_load.dram_items,
        slow_items: after_load.slow_items,
        dataset_to_dram_ratio: ratio(
            after_load.dram_item_bytes + after_load.slow_item_bytes,
            after_load.dram_limit_bytes,
        ),
        demotions: after_load.demotions,
        evictions: after_load.evictions,
        end_s: driver.sim_s,
    };

    // Run phase, in windows.
    let mut report = RunReport {
        policy: policy.name,
        migration_enabled,
        load,
        ..RunReport::default()
    };
    let mut before = after_load;
    for w in 0..config.windows {
        let phase = requests.phase();
        let (mut reads, mut updates) = (0, 0);
        for _ in 0..window_ops(config, w) {
            match requests.next_op() {
                Op::Read(id) => {
                    reads += 1;
                    key_name(id, &mut key);
                    let bytes = config.value_bytes_of(id);
                    let ok = match engine.read(&key, &read_opts, |v| {
                        value_matches(id, bytes, v.value, &mut check_key)
                    }) {
                        ReadOutcome::Hit(ok) => ok,
                        ReadOutcome::Miss { .. } => match &mut driver.flash {
                            // The flash hit's value is the key's (the model keeps its
                            // size and a stamp; a stale stamp is counted apart).
                            Some(flash) => flash
                                .get(&key, |value_bytes| {
                                    value_for(id, value_bytes as usize, &mut value);
                                    matches!(
                                        engine.store(&key, &value, &set_opts),
                                        StoreOutcome::Stored { .. }
                                    )
                                })
                                .is_none_or(|value_bytes| value_bytes as usize == bytes),
                            None => true,
                        },
                    };
                    if !ok {
                        report.wrong_values += 1;
                    }
                }
                Op::Update(id) => {
                    updates += 1;
                    key_name(id, &mut key);
                    value_for(id, config.value_bytes_of(id), &mut value);
                    if let Some(flash) = &mut driver.flash {
                        flash.before_store(&key);
                    }
                    if !matches!(
                        engine.store(&key, &value, &set_opts),
                        StoreOutcome::Stored { .. }
                    ) {
                        report.failed_stores += 1;
                    }
                }
            }
            driver.after_request();
        }
        let now = EngineCounters::read(&engine);
        let mut window = Window::between(w + 1, driver.sim_s, &before, &now, reads, updates);
        window.phase = phase;
        window.dram_pages_by_class = dram_pages_by_class(&engine);
        let flash_now = flash_counters(&driver);
        window.flash = FlashCounters::between(&flash_before, &flash_now);
        flash_before = flash_now;
        report.windows.push(window);
        before = now;
    }
    finish(config, &mut report);
    report.flash = driver.flash.as_ref().map(|f| FlashSummary {
        config: f.flash.config().clone(),
        counters: f.flash.counters,
        index_slots: f.flash.index().slots(),
        tag_bits: engine::flash::index::TAG_BITS,
        buffer_bytes: f.flash.config().segment_bytes,
        events_dropped: f.events_dropped,
    });
    report.index_bytes = before.index_bytes;
    report.items = before.dram_items + before.slow_items;
    Ok(report)
}

fn flash_counters(driver: &Driver) -> FlashCounters {
    driver
        .flash
        .as_ref()
        .map_or(FlashCounters::default(), |f| f.flash.counters)
}

/// Requests of window `w` (0-based): the remainder is spread over the first windows so
/// the total is exact.
pub(crate) fn window_ops(config: &SimConfig, w: u32) -> u64 {
    let windows = u64::from(config.windows);
    config.ops / windows + u64::from(u64::from(w) < config.ops % windows)
}

/// The steady state and the totals of a finished run.
pub(crate) fn finish(config: &SimConfig, report: &mut RunReport) {
    let steady_from = steady_first_window(config.windows) as usize - 1;
    report.steady = Window::sum(0, &report.windows[steady_from..]);
    report.total = Window::sum(0, &report.windows);
}

/// The simulated clock's start (shared with the kernel-tiering model's engine).
pub(crate) fn new_clock() -> Arc<ManualClock> {
    ManualClock::new(SIM_START_UNIX_S)
}

pub(crate) fn new_driver(
    engine: &Arc<Engine>,
    clock: Arc<ManualClock>,
    config: &SimConfig,
) -> Driver {
    Driver::new(engine, clock, config)
}

/// One run per policy, in order, on the same seeded workload.
pub fn run_policies(
    config: &SimConfig,
    policies: &[PolicySetting],
) -> Result<Vec<RunReport>, SimError> {
    policies.iter().map(|policy| run(config, policy)).collect()
}

/// Both runs of a comparison: the same seeded workload with and without migration.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub with_migration: RunReport,
    pub without_migration: RunReport,
}

/// `--policy-compare`: dual-lru, then no-migration.
pub fn compare(config: &SimConfig) -> Result<Comparison, SimError> {
    let policies = PolicySetting::parse_list(&crate::policy::COMPARE).map_err(SimError::Policy)?;
    let mut runs = run_policies(config, &policies)?.into_iter();
    match (runs.next(), runs.next()) {
        (Some(with_migration), Some(without_migration)) => Ok(Comparison {
            with_migration,
            without_migration,
        }),
        _ => Err(SimError::Config(
            "--policy-compare runs two policies".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(slow_lines_read: u64, slow_lines_written: u64, moves: u64) -> EngineCounters {
        EngineCounters {
            slow_lines_read,
            slow_lines_written,
            promotions: moves,
            demotions: 2 * moves,
            promotions_skipped: 3 * moves,
            ..EngineCounters::default()
        }
    }

    #[test]
    fn window_rates_come_from_the_engine_counter_differences() {
        let before = counters(1_000, 5_000, 10);
        let after = counters(4_000, 6_000, 30);
        let w = Window::between(1, 7, &before, &after, 400, 100);
        assert_eq!((w.slow_lines_read, w.slow_lines_written), (3_000, 1_000));
        assert_eq!(w.slow_lines_per_request(), 6.0);
        assert_eq!(w.slow_lines_written_per_request(), 2.0);
        // 20 promotions, 40 demotions, 60 skipped over 500 requests.
        assert_eq!(w.promotions_per_1k_requests(), 40.0);
        assert_eq!(w.demotions_per_1k_requests(), 80.0);
        assert_eq!(w.promotions_skipped_per_1k_requests(), 120.0);
        let empty = Window::between(2, 7, &after, &after, 0, 0);
        assert_eq!(empty.slow_lines_written_per_request(), 0.0);
        assert_eq!(empty.promotions_per_1k_requests(), 0.0);
    }

    #[test]
    fn the_steady_state_is_the_last_half_of_the_windows() {
        assert_eq!(steady_first_window(10), 6);
        assert_eq!(steady_first_window(5), 3);
        assert_eq!(steady_first_window(1), 1);
        let windows: Vec<Window> = (1..=4u64)
            .map(|i| Window {
                index: i as u32,
                end_s: 10 * i,
                requests: 100 * i,
                slow_lines_written: i,
                dram_items: i,
                ..Window::default()
            })
            .collect();
        let steady = Window::sum(0, &windows[2..]);
        assert_eq!(
            (steady.requests, steady.slow_lines_written),
            (700, 7),
            "windows 3 and 4"
        );
        assert_eq!((steady.end_s, steady.dram_items), (40, 4));
    }
}
