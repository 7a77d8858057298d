//! The slab automover (memcached's `slab_automove`): moves DRAM pages between classes
//! when one class needs memory and another holds old items. How a class's need for
//! pages is measured is the policy's (`Policy::class_need`); a policy may also plan the
//! moves itself (`Policy::plan_page_move`: the hotspot policy's benefit-aware DRAM
//! reassignment).

use std::sync::atomic::Ordering;

use crate::engine::Engine;
use crate::events::{kind, EventWhat};
use crate::lru::COLD;
use crate::policy::engine_ops::EngineOps;
use crate::policy::Policy;

/// Steps of eviction history the automover looks at (memcached's window of 30 s).
const AUTOMOVE_WINDOW: usize = 30;
/// memcached's `slab_automove_ratio`.
const AUTOMOVE_AGE_RATIO: f64 = 0.8;

/// "Needs memory" history per class, for the automover.
pub(crate) struct AutomoveState {
    /// Evictions + DRAM pressure per class at the last step.
    last_need: Vec<u64>,
    /// Evictions + DRAM pressure per class in each of the last `AUTOMOVE_WINDOW` steps.
    window: Vec<[u64; AUTOMOVE_WINDOW]>,
    cursor: usize,
    steps: usize,
}

impl AutomoveState {
    pub fn new(class_slots: usize) -> AutomoveState {
        AutomoveState {
            last_need: vec![0; class_slots],
            window: vec![[0; AUTOMOVE_WINDOW]; class_slots],
            cursor: 0,
            steps: 0,
        }
    }
}

/// What the automover sees of one DRAM class.
#[derive(Clone, Copy, Default)]
struct ClassInfo {
    /// Evictions + DRAM pressure so far (monotonic; deltas are used).
    need: u64,
    cold_age_s: u32,
    pages: usize,
    /// More than 2.5 pages of free chunks: a page goes back to the pool.
    spare_page: bool,
    /// At least a page's worth of free chunks: a cheap donor.
    free_page_worth: bool,
}

impl Engine {
    /// Moves a DRAM page the automover chose, telling `watch sysevents` first, as
    /// memcached logs its automover's decisions (`type=slab_move src=<c> dst=<c>`, dst 0:
    /// back to the free pool), whether or not the move then finds a page to take.
    fn automove_page(&self, src: usize, dst: usize) -> bool {
        if self.events.wants(kind::SYSTEM) {
            let what = EventWhat::SlabMove {
                src: src as u32,
                dst: dst as u32,
            };
            self.events.record(kind::SYSTEM, b"", what);
        }
        self.move_page(self.dram(), src, dst)
    }

    /// One step of the slab automover (call once per second). Returns whether a page
    /// was moved (at most one per step). Rules (memcached's `slab_automove=1`,
    /// simplified):
    /// - a class with more than 2.5 pages of free chunks gives its emptiest page back
    ///   to the pool;
    /// - over a window of steps, if some class needed memory and its COLD tail is
    ///   younger than `0.8 x` the oldest COLD tail of a class with at least two pages,
    ///   the oldest class gives a page to the needy one. Mode 2 acts on a window of one.
    ///
    /// "Needed memory" is an eviction; with a slow tier also DRAM pressure (a promotion
    /// that found no DRAM chunk, a demotion an allocation forced), because a full DRAM
    /// demotes instead of evicting and would otherwise keep its pages with the classes
    /// of old value sizes forever. With a slow tier a donor may give its last page (its
    /// items are demoted, not lost), and a donor with a page's worth of free chunks is
    /// preferred over the oldest tail, without the age test.
    pub fn slab_automove_step(&self) -> bool {
        let mode = self.slab_automove.load(Ordering::Relaxed);
        if mode == 0 || !self.config.slab_reassign {
            return false;
        }
        let tier = self.dram();
        if let Some(plan) = self.policy.plan_page_move(EngineOps::new(self)) {
            return plan.is_some_and(|(src, dst)| self.automove_page(src, dst));
        }
        let tiered = self.page_moves_demote(tier);
        let now = self.now_s();
        let large = self.geometry.large;
        let mut info = Vec::with_capacity(large + 1);
        info.push(ClassInfo::default());
        for class_id in 1..=large {
            let cs = tier.classes[class_id].0.lock();
            let spare = class_id != large
                && cs.pages.len() > 1
                && cs.free_chunks as f64 > cs.per_page as f64 * 2.5;
            info.push(ClassInfo {
                need: self.policy.class_need(tier, &cs),
                // The COLD tail's access time: a read of its header's access word.
                cold_age_s: crate::lru::age_s(
                    cs.lru
                        .tail_header(&tier.mem, COLD, crate::item::header_bytes::ACCESS),
                    now,
                ),
                pages: cs.pages.len(),
                spare_page: spare,
                free_page_worth: class_id != large
                    && cs.per_page > 0
                    && cs.free_chunks >= cs.per_page as u64,
            });
        }
        if let Some(class_id) = (1..=large).find(|&c| info[c].spare_page) {
            return self.automove_page(class_id, 0);
        }
        let window = if mode == 2 { 1 } else { AUTOMOVE_WINDOW };
        // A donor keeps one page in DRAM-only mode (memcached); with a slow tier its
        // items are demoted, so it may give its last one.
        let donor_pages_min = if tiered { 1 } else { 2 };
        let (youngest, oldest, spare_donor) = {
            let mut am = self.automove.lock();
            am.steps += 1;
            am.cursor = (am.cursor + 1) % AUTOMOVE_WINDOW;
            let cursor = am.cursor;
            for (class_id, c) in info.iter().enumerate().skip(1) {
                let delta = c.need.saturating_sub(am.last_need[class_id]);
                am.last_need[class_id] = c.need;
                am.window[class_id][cursor] = delta;
            }
            if am.steps < window {
                return false;
            }
            let need_in_window = |class_id: usize| -> u64 {
                (0..window)
                    .map(|back| {
                        am.window[class_id][(cursor + AUTOMOVE_WINDOW - back) % AUTOMOVE_WINDOW]
                    })
                    .sum()
            };
            let youngest = (1..=large)
                .filter(|&c| need_in_window(c) > 0)
                .min_by_key(|&c| info[c].cold_age_s);
            let donors = || {
                (1..=large).filter(|&c| info[c].pages >= donor_pages_min && need_in_window(c) == 0)
            };
            let oldest = donors().max_by_key(|&c| info[c].cold_age_s);
            let spare_donor = if tiered {
                donors()
                    .filter(|&c| info[c].free_page_worth)
                    .max_by_key(|&c| info[c].cold_age_s)
            } else {
                None
            };
            (youngest, oldest, spare_donor)
        };
        let Some(dst) = youngest else {
            return false;
        };
        let src = match spare_donor.filter(|&c| c != dst) {
            Some(src) => src,
            None => {
                let Some(src) = oldest else {
                    return false;
                };
                let ratio = if mode == 2 { 1.0 } else { AUTOMOVE_AGE_RATIO };
                if src == dst
                    || f64::from(info[dst].cold_age_s) >= f64::from(info[src].cold_age_s) * ratio
                {
                    return false;
                }
                src
            }
        };
        let moved = self.automove_page(src, dst);
        if moved {
            // Start a new window so one burst of need moves one page per window.
            let mut am = self.automove.lock();
            am.window[dst] = [0; AUTOMOVE_WINDOW];
        }
        moved
    }
}
