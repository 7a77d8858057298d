//! The knobs memcached lets an operator change while it runs: `lru tune` (the segmented
//! LRU's shares and age factors), `lru_crawler enable|disable|sleep|tocrawl` and `stats
//! sizes_enable|disable`. Each is
//! an atomic the LRU maintainer or the crawler reads once per class or per pass, so a
//! change costs the request path nothing. Their start-up values are the command line's
//! (`-o hot_lru_pct`, `-o lru_crawler_sleep`, ...); `stats settings` prints the values in
//! force.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::config::{EngineConfig, CRAWLER_SLEEP_MAX_US};
use crate::engine::Engine;

/// `lru tune <hot_pct> <warm_pct> <hot_max_factor> <warm_max_factor>`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LruTune {
    pub hot_lru_pct: u32,
    pub warm_lru_pct: u32,
    pub hot_max_factor: f64,
    pub warm_max_factor: f64,
}

/// Why `lru tune` refused, in memcached's words (its reply after `ERROR `).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LruTuneError {
    #[error("hot and warm pcts must not exceed 80")]
    Percentages,
    #[error("hot/warm age factors must be greater than 0")]
    Factors,
}

/// Why an `lru_crawler` setting was refused, in memcached's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CrawlerSettingError {
    #[error("sleep must be one second or less")]
    SleepTooLong,
    /// `lru_crawler enable` while it runs (memcached cannot start a second thread).
    #[error("failed to start lru crawler thread")]
    AlreadyEnabled,
}

/// The run-time values (see the module comment).
pub(crate) struct RuntimeSettings {
    /// `stats sizes` lists the size histogram (`stats sizes_enable`, `-o track_sizes`).
    sizes_enabled: AtomicBool,
    crawler_enabled: AtomicBool,
    crawler_sleep_us: AtomicU32,
    crawler_tocrawl: AtomicU32,
    hot_lru_pct: AtomicU32,
    warm_lru_pct: AtomicU32,
    /// `f64::to_bits` of the factor.
    hot_max_factor_bits: AtomicU64,
    warm_max_factor_bits: AtomicU64,
}

impl RuntimeSettings {
    pub fn new(config: &EngineConfig) -> RuntimeSettings {
        RuntimeSettings {
            sizes_enabled: AtomicBool::new(config.track_sizes),
            crawler_enabled: AtomicBool::new(config.lru_crawler),
            crawler_sleep_us: AtomicU32::new(config.lru_crawler_sleep_us),
            crawler_tocrawl: AtomicU32::new(config.lru_crawler_tocrawl),
            hot_lru_pct: AtomicU32::new(config.hot_lru_pct),
            warm_lru_pct: AtomicU32::new(config.warm_lru_pct),
            hot_max_factor_bits: AtomicU64::new(config.hot_max_factor.to_bits()),
            warm_max_factor_bits: AtomicU64::new(config.warm_max_factor.to_bits()),
        }
    }

    pub fn hot_lru_pct(&self) -> u32 {
        self.hot_lru_pct.load(Ordering::Relaxed)
    }

    pub fn warm_lru_pct(&self) -> u32 {
        self.warm_lru_pct.load(Ordering::Relaxed)
    }

    pub fn hot_max_factor(&self) -> f64 {
        f64::from_bits(self.hot_max_factor_bits.load(Ordering::Relaxed))
    }

    pub fn warm_max_factor(&self) -> f64 {
        f64::from_bits(self.warm_max_factor_bits.load(Ordering::Relaxed))
    }

    pub fn crawler_sleep_us(&self) -> u32 {
        self.crawler_sleep_us.load(Ordering::Relaxed)
    }

    pub fn crawler_tocrawl(&self) -> u32 {
        self.crawler_tocrawl.load(Ordering::Relaxed)
    }
}

impl Engine {
    /// `lru tune`: the HOT and WARM shares of a class's bytes and their age factors,
    /// which the segmented LRU (Dual-LRU, two-level) reads from its next maintainer pass
    /// on. memcached's checks: the shares together at most 80 %, both factors above 0.
    pub fn lru_tune(&self, tune: LruTune) -> Result<(), LruTuneError> {
        if tune.hot_lru_pct.saturating_add(tune.warm_lru_pct) > 80 {
            return Err(LruTuneError::Percentages);
        }
        // NaN compares false: refused as memcached's `<= 0` test would not, but a NaN
        // factor would make every age comparison false.
        if !(tune.hot_max_factor > 0.0 && tune.warm_max_factor > 0.0) {
            return Err(LruTuneError::Factors);
        }
        let t = &self.tuning;
        t.hot_lru_pct.store(tune.hot_lru_pct, Ordering::Relaxed);
        t.warm_lru_pct.store(tune.warm_lru_pct, Ordering::Relaxed);
        t.hot_max_factor_bits
            .store(tune.hot_max_factor.to_bits(), Ordering::Relaxed);
        t.warm_max_factor_bits
            .store(tune.warm_max_factor.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    /// The `lru tune` values in force.
    pub fn lru_tuning(&self) -> LruTune {
        let t = &self.tuning;
        LruTune {
            hot_lru_pct: t.hot_lru_pct(),
            warm_lru_pct: t.warm_lru_pct(),
            hot_max_factor: t.hot_max_factor(),
            warm_max_factor: t.warm_max_factor(),
        }
    }

    /// Whether the LRU crawler runs its passes (`-o no_lru_crawler`, `lru_crawler
    /// enable|disable`).
    pub fn lru_crawler_enabled(&self) -> bool {
        self.tuning.crawler_enabled.load(Ordering::Relaxed)
    }

    /// `lru_crawler enable`: refused while it is enabled already, as memcached refuses
    /// to start its crawler thread twice.
    pub fn enable_lru_crawler(&self) -> Result<(), CrawlerSettingError> {
        if self.tuning.crawler_enabled.swap(true, Ordering::Relaxed) {
            return Err(CrawlerSettingError::AlreadyEnabled);
        }
        Ok(())
    }

    /// `lru_crawler disable`: no pass starts until it is enabled again (a pass under way
    /// finishes).
    pub fn disable_lru_crawler(&self) {
        self.tuning.crawler_enabled.store(false, Ordering::Relaxed);
    }

    /// `lru_crawler sleep <us>`: the crawler's pause after every
    /// [`crate::config::CRAWLER_ITEMS_PER_SLEEP`] items, at most one second.
    pub fn set_lru_crawler_sleep_us(&self, sleep_us: u32) -> Result<(), CrawlerSettingError> {
        if sleep_us > CRAWLER_SLEEP_MAX_US {
            return Err(CrawlerSettingError::SleepTooLong);
        }
        self.tuning
            .crawler_sleep_us
            .store(sleep_us, Ordering::Relaxed);
        Ok(())
    }

    /// `lru_crawler tocrawl <n>`: items a pass walks at most per LRU segment of a class
    /// (0: all).
    pub fn set_lru_crawler_tocrawl(&self, items: u32) {
        self.tuning.crawler_tocrawl.store(items, Ordering::Relaxed);
    }

    /// `stats sizes_enable` / `stats sizes_disable`: whether `stats sizes` lists the
    /// histogram of item sizes (see `Engine::stats_sizes` for its cost).
    pub fn set_size_histogram(&self, enabled: bool) {
        self.tuning.sizes_enabled.store(enabled, Ordering::Relaxed);
    }

    pub fn size_histogram_enabled(&self) -> bool {
        self.tuning.sizes_enabled.load(Ordering::Relaxed)
    }

    /// The crawler's pause and per-segment bound in force (for `stats settings`).
    pub fn lru_crawler_pace(&self) -> (u32, u32) {
        (
            self.tuning.crawler_sleep_us(),
            self.tuning.crawler_tocrawl(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn lru_tune_checks_as_memcached_and_takes_effect() {
        let e = Engine::new(EngineConfig::default(), ManualClock::new(1_700_000_000)).unwrap();
        let tune = |hot, warm, hot_f, warm_f| LruTune {
            hot_lru_pct: hot,
            warm_lru_pct: warm,
            hot_max_factor: hot_f,
            warm_max_factor: warm_f,
        };
        assert_eq!(e.lru_tune(tune(10, 40, 0.5, 3.0)), Ok(()));
        assert_eq!(e.lru_tuning(), tune(10, 40, 0.5, 3.0));
        assert_eq!(
            e.lru_tune(tune(50, 40, 0.2, 2.0)),
            Err(LruTuneError::Percentages)
        );
        assert_eq!(
            e.lru_tune(tune(10, 40, 0.0, 2.0)),
            Err(LruTuneError::Factors)
        );
        assert_eq!(
            e.lru_tune(tune(10, 40, 0.2, f64::NAN)),
            Err(LruTuneError::Factors)
        );
        // A refused tune changes nothing.
        assert_eq!(e.lru_tuning(), tune(10, 40, 0.5, 3.0));
        // 80 % together is memcached's limit, inclusive.
        assert_eq!(e.lru_tune(tune(40, 40, 0.2, 2.0)), Ok(()));
    }

    #[test]
    fn the_crawler_is_enabled_once_and_paced_within_a_second() {
        let e = Engine::new(EngineConfig::default(), ManualClock::new(1_700_000_000)).unwrap();
        assert!(e.lru_crawler_enabled());
        assert_eq!(
            e.enable_lru_crawler(),
            Err(CrawlerSettingError::AlreadyEnabled)
        );
        e.disable_lru_crawler();
        e.disable_lru_crawler();
        assert!(!e.lru_crawler_enabled());
        assert_eq!(e.enable_lru_crawler(), Ok(()));
        assert_eq!(e.lru_crawler_pace(), (100, 0));
        assert_eq!(e.set_lru_crawler_sleep_us(1_000_000), Ok(()));
        assert_eq!(
            e.set_lru_crawler_sleep_us(1_000_001),
            Err(CrawlerSettingError::SleepTooLong)
        );
        e.set_lru_crawler_tocrawl(5);
        assert_eq!(e.lru_crawler_pace(), (1_000_000, 5));
    }

    /// `stats sizes` answers `disabled` until the histogram is enabled, then counts live
    /// items by size in 32-byte buckets.
    #[test]
    fn the_size_histogram_is_counted_only_once_enabled() {
        use crate::api::{StoreMode, StoreOptions};
        let e = Engine::new(EngineConfig::default(), ManualClock::new(1_700_000_000)).unwrap();
        for (key, value) in [(&b"a"[..], &b"1"[..]), (b"b", b"2"), (b"c", &[b'x'; 100])] {
            e.store(key, value, &StoreOptions::new(StoreMode::Set, 0, 0));
        }
        let sizes = |e: &Engine| {
            let mut lines = Vec::new();
            e.stats_sizes(&mut |name, value| lines.push(format!("{name} {value}")));
            lines
        };
        assert_eq!(sizes(&e), ["sizes_status disabled"]);
        e.set_size_histogram(true);
        let lines = sizes(&e);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].ends_with(" 2") && lines[1].ends_with(" 1"),
            "{lines:?}"
        );
        for line in &lines {
            let bucket: u64 = line.split(' ').next().unwrap().parse().unwrap();
            assert_eq!(bucket % 32, 0, "{line}");
        }
        e.set_size_histogram(false);
        assert_eq!(sizes(&e), ["sizes_status disabled"]);
    }
}
