//! The YCSB-style workload: a load phase that writes every key once in key order, then
//! a run phase of reads (and an optional share of updates) whose keys follow one of the
//! workspace's key distributions (`crates/workload`): scrambled zipfian (the default),
//! seed 000's alternating hot set, or uniform.
//!
//! This file only adds what is the simulator's own: key names and values, the share of
//! updates, and which random streams of the seed draw what.

use workload::{DistributionError, KeyDistribution, KeyGenerator, Rng};

/// The stream of the seed that draws the run phase's requests (the zipf permutation
/// takes `workload::keys::STREAM_PERMUTATION`).
const STREAM_OPERATIONS: u64 = 2;

/// The key-name prefix YCSB uses.
pub const KEY_PREFIX: &str = "user";
/// Digits of the zero-padded key id: every key has the same length.
pub const KEY_ID_DIGITS: usize = 10;
/// Bytes of every key.
pub const KEY_BYTES: usize = KEY_PREFIX.len() + KEY_ID_DIGITS;
/// The largest key count: ids are `u32` and must fit the zero-padded digits; the shared
/// zipfian's bound is lower than both.
pub const KEYS_MAX: u64 = workload::keys::ZIPF_KEYS_MAX;

/// One request of the run phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read(u32),
    Update(u32),
}

/// How the run phase picks keys (`--distribution`).
#[derive(Clone, Debug, PartialEq)]
pub enum Distribution {
    /// Scrambled zipfian with exponent `theta`; the seed draws the scramble.
    Zipf {
        theta: f64,
    },
    /// Seed 000: every other request uniform over [hot_first, hot_first + hot_keys), the
    /// others uniform over all keys.
    HotSet {
        hot_first: u64,
        hot_keys: u64,
    },
    Uniform,
}

impl Distribution {
    pub fn name(&self) -> &'static str {
        match self {
            Distribution::Zipf { .. } => "zipf",
            Distribution::HotSet { .. } => "hotset",
            Distribution::Uniform => "uniform",
        }
    }

    /// The shared generator's distribution over `keys` keys.
    pub fn build(&self, keys: u64, seed: u64) -> Result<KeyDistribution, DistributionError> {
        match *self {
            Distribution::Zipf { theta } => KeyDistribution::scrambled_zipfian(keys, theta, seed),
            Distribution::HotSet {
                hot_first,
                hot_keys,
            } => KeyDistribution::alternating_hot_set(keys, hot_first, hot_keys),
            Distribution::Uniform => KeyDistribution::uniform(keys),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadError {
    Distribution(DistributionError),
    TooManyKeys(u64),
    BadUpdateRatio(f64),
}

impl std::fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkloadError::Distribution(e) => e.fmt(f),
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
    keys: KeyGenerator,
    update_ratio: f64,
    rng: Rng,
}

impl Workload {
    pub fn new(
        keys: u64,
        distribution: &Distribution,
        update_ratio: f64,
        seed: u64,
    ) -> Result<Workload, WorkloadError> {
        if keys > KEYS_MAX {
            return Err(WorkloadError::TooManyKeys(keys));
        }
        if !(0.0..=1.0).contains(&update_ratio) {
            return Err(WorkloadError::BadUpdateRatio(update_ratio));
        }
        let distribution = distribution
            .build(keys, seed)
            .map_err(WorkloadError::Distribution)?;
        Ok(Workload {
            keys: KeyGenerator::new(distribution),
            update_ratio,
            rng: Rng::new(seed, STREAM_OPERATIONS),
        })
    }

    pub fn keys(&self) -> u64 {
        self.keys.distribution().keys()
    }

    pub fn distribution(&self) -> &KeyDistribution {
        self.keys.distribution()
    }

    /// The key id of popularity rank `rank` (1 = most popular) of a zipfian workload.
    pub fn key_of_rank(&self, rank: u64) -> Option<u32> {
        match self.keys.distribution() {
            KeyDistribution::ScrambledZipfian(scrambled) => {
                u32::try_from(scrambled.key_of_rank(rank)?).ok()
            }
            _ => None,
        }
    }

    pub fn next_op(&mut self) -> Op {
        // The update draw comes first and is always made, so the key sequence does not
        // depend on the update ratio's value in a surprising way.
        let update = self.rng.next_f64() < self.update_ratio;
        // Keys are below KEYS_MAX (checked in `new`), so they fit a u32.
        let key = u32::try_from(self.keys.next_key(&mut self.rng)).unwrap_or(0);
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
