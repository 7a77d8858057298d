//! The `random` placement baseline: each key's home tier is drawn from its hash, half
//! of the hash space to each tier whatever their sizes (`uniform` without the sizes),
//! and items never move. It is the floor a placement by heat has to beat: what a tier
//! serves when nothing about the keys is known. Inside each tier memcached's segmented
//! LRU orders the items (the `Policy` defaults); a DRAM-homed key whose class has no
//! free DRAM chunk goes to the slow tier rather than evicting, as under `uniform`.

use super::engine_ops::EngineOps;
use crate::api::TierId;
use crate::config::EngineConfig;

use super::{NewItemPlan, Policy, Registered};

pub(crate) struct Random;

impl Random {
    /// Whether a key is homed in DRAM: the low bit of its hash (the index picks shards
    /// by the top bits, so a shard's keys are spread over both tiers).
    fn homed_in_dram(key_hash: u32) -> bool {
        key_hash & 1 == 0
    }
}

impl Registered for Random {
    const MOVES_ITEMS: bool = false;

    fn new(_config: &EngineConfig) -> Random {
        Random
    }
}

impl Policy for Random {
    fn new_item_plan(&self, _e: EngineOps<'_>, key_hash: u32) -> NewItemPlan {
        if Self::homed_in_dram(key_hash) {
            NewItemPlan::Home(TierId::Dram)
        } else {
            NewItemPlan::Home(TierId::Slow)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::api::{StoreMode, StoreOptions, StoreOutcome, TierId};
    use crate::config::{EngineConfig, PlacementPolicy};
    use crate::engine::Engine;

    /// Half of the keys are homed in each tier whatever the tiers' sizes (`uniform`
    /// would home 8 / 72 of them in DRAM here), a DRAM that has room for its half
    /// evicts nothing, and nothing moves when the keys are read.
    #[test]
    fn half_of_the_keys_live_in_each_tier_whatever_their_sizes() {
        const KEYS: u32 = 3000;
        let mib = 1024 * 1024;
        let e = Engine::new(
            EngineConfig {
                policy: PlacementPolicy::Random,
                memory_limit_bytes: 8 * mib,
                slow_tier: Some(tier::RegionSpec {
                    size_bytes: 64 * mib as usize,
                    backing: tier::RegionBacking::Anonymous,
                    cost: tier::CostModel::NONE,
                }),
                ..EngineConfig::default()
            },
            crate::clock::ManualClock::new(1_700_000_000),
        )
        .unwrap();
        let key = |i: u32| format!("key:{i:06}");
        for i in 0..KEYS {
            let stored = e.store(
                key(i).as_bytes(),
                &[b'v'; 1000],
                &StoreOptions::new(StoreMode::Set, 0, 0),
            );
            assert!(matches!(stored, StoreOutcome::Stored { .. }), "set {i}");
        }
        let in_dram = |e: &Engine| e.tier_usage(TierId::Dram).items;
        let dram_items = in_dram(&e);
        assert_eq!(
            dram_items + e.tier_usage(TierId::Slow).items,
            u64::from(KEYS)
        );
        let share = dram_items as f64 / f64::from(KEYS);
        assert!((0.45..0.55).contains(&share), "DRAM share {share:.3}");
        for _ in 0..3 {
            for i in 0..KEYS {
                let read = e.read(key(i).as_bytes(), &Default::default(), |_| ());
                assert!(matches!(read, crate::api::ReadOutcome::Hit(())), "get {i}");
            }
            e.lru_maintainer_tier_step(0);
            e.lru_maintainer_tier_step(1);
            e.migration_step();
        }
        assert_eq!(in_dram(&e), dram_items, "nothing moved");
        assert_eq!(e.migration_counts().promotions, 0);
    }
}
