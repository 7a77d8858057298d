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

// ----- self-checking values ----------------------------------------------------------
//
// A value is a concatenation of writes (a `set`'s value, then each `append`'s bytes),
// and every write is a run of blocks. Every block names the key, the write's version,
// its own index in the write and the write's block count, and fills its other bytes
// from all four, so a value checks only if it is exactly whole writes of that key: a
// read that mixes two versions (at any byte), bytes of another key, a truncated or a
// stretched value, or bytes of a freed chunk all fail.

/// Bytes of one block.
pub const BLOCK_BYTES: usize = 32;

/// One write of a self-checking value, as found in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub version: u64,
    pub blocks: u32,
}

/// A fixed mix of a block's fields (splitmix64's finaliser): the bytes that no two
/// different blocks share.
fn block_fill(key_id: u32, version: u64, index: u32, blocks: u32) -> [u8; 12] {
    let mut z = version
        ^ (u64::from(key_id) << 32 | u64::from(index)).rotate_left(17)
        ^ u64::from(blocks).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let mut fill = [0u8; 12];
    fill[..8].copy_from_slice(&z.to_le_bytes());
    fill[8..].copy_from_slice(&(z.rotate_left(32) as u32 ^ key_id).to_le_bytes());
    fill
}

fn block(key_id: u32, version: u64, index: u32, blocks: u32) -> [u8; BLOCK_BYTES] {
    let mut b = [0u8; BLOCK_BYTES];
    b[0..4].copy_from_slice(&key_id.to_le_bytes());
    b[4..12].copy_from_slice(&version.to_le_bytes());
    b[12..16].copy_from_slice(&index.to_le_bytes());
    b[16..20].copy_from_slice(&blocks.to_le_bytes());
    b[20..32].copy_from_slice(&block_fill(key_id, version, index, blocks));
    b
}

/// The bytes of one write: `blocks` blocks of `key_id`'s `version`.
pub fn write_bytes(key_id: u32, version: u64, blocks: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(blocks as usize * BLOCK_BYTES);
    for index in 0..blocks {
        v.extend_from_slice(&block(key_id, version, index, blocks));
    }
    v
}

/// Splits a value of `key_id` into its writes. `Err` names the first byte that is not
/// part of a whole write of this key (a torn, foreign, cut or padded value).
pub fn parse_runs(key_id: u32, v: &[u8]) -> Result<Vec<Run>, String> {
    let whole_blocks = v.chunks_exact(BLOCK_BYTES);
    if !whole_blocks.remainder().is_empty() {
        return Err(format!(
            "key {key_id}: length {} is not whole blocks",
            v.len()
        ));
    }
    let field = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut runs: Vec<Run> = Vec::new();
    let mut expected_index = 0;
    for (i, b) in whole_blocks.enumerate() {
        let version = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
        let (index, blocks) = (field(b, 12), field(b, 16));
        let at = i * BLOCK_BYTES;
        if b != block(key_id, version, index, blocks) {
            return Err(format!(
                "key {key_id}: block at byte {at} is torn or another key's \
                 (names key {}, version {version:#x}, block {index} of {blocks})",
                field(b, 0)
            ));
        }
        if index != expected_index {
            return Err(format!(
                "key {key_id}: block at byte {at} is block {index} of version {version:#x}, \
                 expected block {expected_index}"
            ));
        }
        if index == 0 {
            runs.push(Run { version, blocks });
        } else if !matches!(runs.last(), Some(r) if (r.version, r.blocks) == (version, blocks)) {
            return Err(format!(
                "key {key_id}: block at byte {at} of version {version:#x} continues {:?}",
                runs.last()
            ));
        }
        expected_index = if index + 1 == blocks { 0 } else { index + 1 };
    }
    if expected_index != 0 {
        return Err(format!(
            "key {key_id}: the last write is cut short ({:?})",
            runs.last()
        ));
    }
    Ok(runs)
}

/// The key of item `i` in the tests that number their items.
pub fn key(i: u32) -> String {
    format!("key:{i:06}")
}

/// A value of `len` bytes that names its key and a version.
pub fn val(key: &str, version: u32, len: usize) -> Vec<u8> {
    let mut v = format!("{key}#{version}#").into_bytes();
    v.resize(len, b'.');
    v
}

/// Runs every maintainer pass and drains both Move queues (bounded).
pub fn settle(e: &Engine) {
    for _ in 0..100 {
        let moved = e.lru_maintainer_tier_step(0) + e.lru_maintainer_tier_step(1);
        let migrated = e.migration_step();
        if moved == 0 && migrated == 0 {
            break;
        }
    }
}

/// Reads `k` `n` times; the last read's value.
pub fn read_n(e: &Engine, k: &str, n: usize) -> Option<Vec<u8>> {
    let mut last = None;
    for _ in 0..n {
        last = value(e, k.as_bytes());
    }
    last
}

/// Stores `keys` numbered items of `len` bytes, settling as it goes (past a small DRAM
/// tier, with migration, the overflow is demoted, never evicted).
pub fn fill(e: &Engine, keys: u32, len: usize) {
    for i in 0..keys {
        let k = key(i);
        assert!(stored(set(e, k.as_bytes(), &val(&k, 0, len))), "set {k}");
        if i % 64 == 0 {
            settle(e);
        }
    }
    settle(e);
}
