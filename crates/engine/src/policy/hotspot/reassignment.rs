//! The hotspot policy's benefit-aware DRAM reassignment (HMCached section 3.5): the
//! per-class histograms of each period's access counts, and the dynamic program that
//! splits DRAM's pages among the classes for the largest benefit.

use std::sync::atomic::Ordering;

use super::super::engine_ops::EngineOps;

use super::super::access::{CountStep, COUNT_MAX};
use super::Hotspot;

/// Counter values the reassignment histogram distinguishes (0..=COUNT_MAX).
pub(super) const COUNT_VALUES: usize = COUNT_MAX as usize + 1;
/// The dynamic program splits DRAM in at most this many units of whole pages.
const DP_UNITS_MAX: usize = 256;

/// A class's histogram of one period: `reached[c]` items were accessed at least c times.
pub(super) type Reached = [u32; COUNT_VALUES];

/// What the benefit-aware reassignment keeps between periods.
#[derive(Default)]
pub(super) struct Reassignment {
    /// Per class, the histogram of the last complete period.
    pub(super) last_period: Vec<Reached>,
    /// Bumped at every period end: the plan below is stale when it differs.
    pub(super) generation: u64,
    /// The page split planned from `last_period`, per class, and its generation.
    target_pages: Vec<usize>,
    planned_generation: u64,
}

impl Hotspot {
    /// An access moved the counter of an item of `class_id` by `step`: at most two
    /// relaxed adds, none for a saturated counter that stays. Inlined: it runs on every
    /// hit (`dram_hit`) and store (`on_link`), and out of its file it was made a call.
    #[inline(always)]
    pub(super) fn record_reached(&self, class_id: usize, step: CountStep) {
        let Some(class) = self.classes.get(class_id) else {
            return;
        };
        if step.first_in_period {
            class.started_at[usize::from(step.before)].fetch_add(1, Ordering::Relaxed);
        }
        if step.after > step.before {
            class.rose_to[usize::from(step.after)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// End of a period: this period's histograms become the last complete one.
    pub(super) fn close_period(&self) {
        let snapshot: Vec<Reached> = self
            .classes
            .iter()
            .map(|c| {
                let started: [u32; COUNT_VALUES] =
                    std::array::from_fn(|v| c.started_at[v].swap(0, Ordering::Relaxed));
                let rose: [u32; COUNT_VALUES] =
                    std::array::from_fn(|v| c.rose_to[v].swap(0, Ordering::Relaxed));
                let mut reached = [0u32; COUNT_VALUES];
                let mut started_at_or_above = 0u32;
                for v in (0..COUNT_VALUES).rev() {
                    started_at_or_above = started_at_or_above.saturating_add(started[v]);
                    reached[v] = started_at_or_above.saturating_add(rose[v]);
                }
                reached
            })
            .collect();
        let mut r = self.reassignment.lock();
        r.last_period = snapshot;
        r.generation += 1;
    }

    /// The page split of DRAM that maximises the benefit of the last complete period,
    /// per class (the large class, whose items span pages, keeps what it has).
    pub(super) fn plan_split(
        &self,
        e: EngineOps<'_>,
        last_period: &[Reached],
        current: &[usize],
    ) -> Vec<usize> {
        let geometry = &e.geometry();
        let large = geometry.large;
        let classes: Vec<usize> = (1..large).collect();
        let pages_total: usize =
            classes.iter().map(|&c| current[c]).sum::<usize>() + e.dram().pool.lock().free_pages();
        let unit = pages_total.div_ceil(DP_UNITS_MAX).max(1);
        let units = pages_total / unit;
        let benefit = |class_id: usize, units_given: usize| -> f64 {
            let Some(reached) = last_period.get(class_id) else {
                return 0.0;
            };
            let per_page = geometry.chunks_per_page(class_id) as u64;
            let mut room = (units_given * unit) as u64 * per_page;
            let mut sum = 0u64;
            for value in (1..COUNT_VALUES).rev() {
                if room == 0 {
                    break;
                }
                let above = reached.get(value + 1).copied().unwrap_or(0);
                let exactly = u64::from(reached[value].saturating_sub(above));
                let taken = exactly.min(room);
                sum += taken * value as u64;
                room -= taken;
            }
            sum as f64 * geometry.chunk_bytes[class_id] as f64
        };
        let split = benefit_split(classes.len(), units, |i, u| benefit(classes[i], u));
        let mut target = current.to_vec();
        for (i, &class_id) in classes.iter().enumerate() {
            target[class_id] = split[i] * unit;
        }
        target
    }

    /// The page move of this automover step toward the benefit-maximising split:
    /// `Some(None)` for none, `None` to leave it to the automover's rules.
    pub(super) fn benefit_page_move(&self, e: EngineOps<'_>) -> Option<Option<(usize, usize)>> {
        // HM-HC's DRAM counts accesses since an item entered DRAM, not HMCached's decayed
        // counter the plan needs (one byte holds one or the other): its pages move by
        // the automover's rules.
        if !self.benefit_reassign || self.hyperbolic || e.slow().is_none() {
            return None;
        }
        let dram = e.dram();
        if dram.pool.lock().free_pages() > 0 {
            // DRAM has free pages: classes take them as they need them.
            return Some(None);
        }
        let current: Vec<usize> = (0..=e.geometry().large)
            .map(|c| dram.classes[c].0.lock().pages.len())
            .collect();
        let mut r = self.reassignment.lock();
        if r.generation == 0 {
            return Some(None);
        }
        if r.planned_generation != r.generation {
            r.target_pages = self.plan_split(e, &r.last_period, &current);
            r.planned_generation = r.generation;
        }
        let target = &r.target_pages;
        let gap = |c: usize| target.get(c).map_or(0, |&t| t as i64 - current[c] as i64);
        let dst = (1..e.geometry().large).max_by_key(|&c| gap(c))?;
        let src = (1..e.geometry().large).min_by_key(|&c| gap(c))?;
        Some((gap(dst) > 0 && gap(src) < 0 && current[src] > 0).then_some((src, dst)))
    }
}

/// The dynamic program of HMCached's equations 3-4: `units` of DRAM split among
/// `classes` to maximise the sum of `benefit(class, units_given)`. Returns the units per
/// class. O(classes x units^2).
pub(crate) fn benefit_split(
    classes: usize,
    units: usize,
    benefit: impl Fn(usize, usize) -> f64,
) -> Vec<usize> {
    // best[u]: the largest benefit of the classes so far with u units; choice[i][u]: the
    // units class i takes in that optimum.
    let mut best = vec![0.0f64; units + 1];
    let mut choice = vec![vec![0usize; units + 1]; classes];
    for (i, class_choice) in choice.iter_mut().enumerate() {
        let gains: Vec<f64> = (0..=units).map(|u| benefit(i, u)).collect();
        let mut next = vec![f64::MIN; units + 1];
        for u in 0..=units {
            for (given, gain) in gains.iter().enumerate().take(u + 1) {
                let total = best[u - given] + gain;
                if total > next[u] {
                    next[u] = total;
                    class_choice[u] = given;
                }
            }
        }
        best = next;
    }
    let mut split = vec![0; classes];
    let mut left = units;
    for i in (0..classes).rev() {
        split[i] = choice[i][left];
        left -= split[i];
    }
    split
}
