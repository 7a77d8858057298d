//! `cache_memlimit` on the engine: the DRAM tier's limit moves within the address space
//! reserved at start-up (`dram_max_bytes`). Lowering it stops classes taking new pages
//! (stores then evict, as in a full cache) and keeps the pages in use, as memcached
//! does; raising it lets them take more.

use engine::{
    DramLimitError, Engine, EngineConfig, ManualClock, StoreMode, StoreOptions, StoreOutcome,
    TierId,
};

const MIB: u64 = 1 << 20;

fn fill(engine: &Engine, from: usize, count: usize) {
    let value = vec![b'v'; 1000];
    for i in from..from + count {
        let stored = engine.store(
            format!("k{i}").as_bytes(),
            &value,
            &StoreOptions::new(StoreMode::Set, 0, 0),
        );
        assert!(
            matches!(stored, StoreOutcome::Stored { .. }),
            "k{i}: {stored:?}"
        );
    }
}

fn pages(engine: &Engine) -> u64 {
    engine.tier_usage(TierId::Dram).pages_in_use
}

#[test]
fn the_dram_limit_moves_within_the_reserve() {
    let engine = Engine::new(
        EngineConfig {
            memory_limit_bytes: 8 * MIB,
            dram_max_bytes: 32 * MIB,
            ..EngineConfig::default()
        },
        ManualClock::new(1_700_000_000),
    )
    .expect("engine");
    assert_eq!(engine.dram_limit_bytes(), 8 * MIB);
    assert_eq!(engine.dram_max_bytes(), 32 * MIB);
    // 20 000 items of 1 KB need about 23 pages: the 8 MiB tier holds 8 and evicts.
    fill(&engine, 0, 20_000);
    assert_eq!(pages(&engine), 8);
    assert_eq!(engine.tier_usage(TierId::Dram).limit_bytes, 8 * MIB);

    engine.set_dram_limit(24 * MIB).expect("within the reserve");
    fill(&engine, 20_000, 20_000);
    let grown = pages(&engine);
    assert!(grown > 8 && grown <= 24, "{grown} pages");

    // Lowered: nothing is taken away, nothing new is taken.
    engine.set_dram_limit(16 * MIB).expect("lowered");
    fill(&engine, 40_000, 20_000);
    assert_eq!(pages(&engine), grown);

    assert_eq!(
        engine.set_dram_limit(33 * MIB),
        Err(DramLimitError::AboveReserve {
            max_bytes: 32 * MIB
        })
    );
    assert_eq!(
        engine.set_dram_limit(MIB / 2),
        Err(DramLimitError::TooSmall)
    );
    assert_eq!(engine.dram_limit_bytes(), 16 * MIB);
}
