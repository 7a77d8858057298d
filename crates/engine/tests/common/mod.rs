//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

pub use engine::Engine;
use engine::*;

pub const START_UNIX_S: u64 = 1_700_000_000;

pub fn engine_with(config: EngineConfig) -> (Arc<Engine>, Arc<ManualClock>) {
    let clock = ManualClock::new(START_UNIX_S);
    let engine = Engine::new(config, clock.clone()).unwrap();
    (engine, clock)
}

pub fn engine() -> (Arc<Engine>, Arc<ManualClock>) {
    engine_with(EngineConfig::default())
}

pub fn mb(n: u64) -> EngineConfig {
    EngineConfig {
        memory_limit_bytes: n * 1024 * 1024,
        ..EngineConfig::default()
    }
}

#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Got {
    pub value: Vec<u8>,
    pub flags: u32,
    pub cas: u64,
}

pub fn get(e: &Engine, key: &[u8]) -> Option<Got> {
    match e.read(key, &ReadOptions::default(), |v| Got {
        value: v.value.to_vec(),
        flags: v.client_flags,
        cas: v.cas,
    }) {
        ReadOutcome::Hit(g) => Some(g),
        ReadOutcome::Miss { .. } => None,
    }
}

pub fn value(e: &Engine, key: &[u8]) -> Option<Vec<u8>> {
    get(e, key).map(|g| g.value)
}

pub fn set(e: &Engine, key: &[u8], value: &[u8]) -> StoreOutcome {
    e.store(key, value, &StoreOptions::new(StoreMode::Set, 0, 0))
}

pub fn store(
    e: &Engine,
    mode: StoreMode,
    key: &[u8],
    value: &[u8],
    flags: u32,
    exptime: i64,
) -> StoreOutcome {
    e.store(key, value, &StoreOptions::new(mode, flags, exptime))
}

pub fn stats(e: &Engine) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    e.stats(&mut |k, v| {
        m.insert(k.to_string(), v.to_string());
    });
    m
}

pub fn stats_of(f: impl FnOnce(&mut dyn FnMut(&str, StatValue))) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    f(&mut |k, v| {
        m.insert(k.to_string(), v.to_string());
    });
    m
}

pub fn stat(e: &Engine, name: &str) -> u64 {
    stats(e)
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no stat {name}"))
}

pub fn stored(o: StoreOutcome) -> bool {
    matches!(o, StoreOutcome::Stored { .. })
}
