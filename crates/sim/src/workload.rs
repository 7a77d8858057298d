//! The YCSB-style workload: a load phase that writes every key once in key order, then
//! a run phase of reads (and an optional share of updates) whose keys follow a
//! scrambled zipfian distribution.
//!
//! "Scrambled" as in YCSB's `ScrambledZipfianGenerator`: popularity ranks are spread
//! over the key space, so the popular keys are not the first ones loaded (which would
//! leave them in DRAM by accident of load order). YCSB scrambles with `fnv64(rank) % n`,
//! which is not a bijection (some keys are never drawn, others take several ranks); the
//! simulator uses a seeded random permutation instead, so each key's popularity is
//! exactly the zipf probability of its rank.

use crate::rng::Rng;
use crate::zipf::{Zipf, ZipfError};

/// Stream ids that separate the seed's independent sequences.
const STREAM_PERMUTATION: u64 = 1;
const STREAM_OPERATIONS: u64 = 2;

/// The key-name prefix YCSB uses.
pub const KEY_PREFIX: &str = "user";
/// Digits of the zero-padded key id: every key has the same length.
pub const KEY_ID_DIGITS: usize = 10;
/// Bytes of every key.
pub const KEY_BYTES: usize = KEY_PREFIX.len() + KEY_ID_DIGITS;
/// The largest key count. Ids must fit a `u32` and the zero-padded digits; the bound is
/// lower so the rank-to-key table (4 bytes a key, 1 GiB here) stays allocatable.
pub const KEYS_MAX: u64 = 1 << 28;

/// One request of the run phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read(u32),
    Update(u32),
}

#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadError {
    Zipf(ZipfError),
    TooManyKeys(u64),
    BadUpdateRatio(f64),
}

impl std::fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkloadError::Zipf(e) => e.fmt(f),
            WorkloadError::TooManyKeys(n) => write!(f, "at most {KEYS_MAX} keys, got {n}"),
            WorkloadError::BadUpdateRatio(r) => {
                write!(f, "update ratio must be between 0 and 1, got {r}")
            }
        }
    }
}

impl std::error::Error for WorkloadError {}

/// The run-phase request generator; the same seed gives the same requests.
#[derive(Clone, Debug)]
pub struct Workload {
    zipf: Zipf,
    /// `rank_to_key[rank - 1]` is the key id of popularity rank `rank`.
    rank_to_key: Vec<u32>,
    update_ratio: f64,
    rng: Rng,
}

impl Workload {
    pub fn new(
        keys: u64,
        theta: f64,
        update_ratio: f64,
        seed: u64,
    ) -> Result<Workload, WorkloadError> {
        if keys > KEYS_MAX {
            return Err(WorkloadError::TooManyKeys(keys));
        }
        if !(0.0..=1.0).contains(&update_ratio) {
            return Err(WorkloadError::BadUpdateRatio(update_ratio));
        }
        let zipf = Zipf::new(keys, theta).map_err(WorkloadError::Zipf)?;
        // Fisher-Yates over 0..keys (keys <= KEYS_MAX < u32::MAX, checked above).
        let mut rank_to_key: Vec<u32> = (0..keys as u32).collect();
        let mut rng = Rng::new(seed, STREAM_PERMUTATION);
        for i in (1..rank_to_key.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            rank_to_key.swap(i, j);
        }
        Ok(Workload {
            zipf,
            rank_to_key,
            update_ratio,
            rng: Rng::new(seed, STREAM_OPERATIONS),
        })
    }

    pub fn keys(&self) -> u64 {
        self.zipf.items()
    }

    /// The key id of popularity rank `rank` (1 = most popular), if in range.
    pub fn key_of_rank(&self, rank: u64) -> Option<u32> {
        let index = usize::try_from(rank.checked_sub(1)?).ok()?;
        self.rank_to_key.get(index).copied()
    }

    pub fn next_op(&mut self) -> Op {
        // The update draw comes first and is always made, so the key sequence does not
        // depend on the update ratio's value in a surprising way.
        let update = self.rng.next_f64() < self.update_ratio;
        let rank = self.zipf.sample(&mut self.rng);
        let key = self.key_of_rank(rank).unwrap_or(0);
        if update {
            Op::Update(key)
        } else {
            Op::Read(key)
        }
    }
}

/// Writes the name of key `id` ("user0000000042") into `buf`, replacing its contents.
pub fn key_name(id: u32, buf: &mut Vec<u8>) {
    use std::io::Write;
    buf.clear();
    // Writing to a Vec cannot fail.
    let _ = write!(buf, "{KEY_PREFIX}{id:0width$}", width = KEY_ID_DIGITS);
}

/// The value stored under key `id`: the key name, '#', then padding to `value_bytes`
/// (truncated when shorter than the key), so a read can check it got its own item.
pub fn value_for(id: u32, value_bytes: usize, buf: &mut Vec<u8>) {
    key_name(id, buf);
    buf.push(b'#');
    buf.resize(value_bytes, b'.');
}
