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

/// Whether `value` is the one [`value_for`] writes for key `id` at `value_bytes`: its
/// length, and its first bytes (the key name, as far as the value reaches).
pub fn value_matches(id: u32, value_bytes: usize, value: &[u8], key_buf: &mut Vec<u8>) -> bool {
    if value.len() != value_bytes {
        return false;
    }
    key_name(id, key_buf);
    let n = value.len().min(key_buf.len());
    value[..n] == key_buf[..n]
}

/// The stream of the seed that draws each key's value size (a hash of seed, stream and
/// key id, so the size of a key is known without storing it).
const STREAM_VALUE_SIZES: u64 = 3;

/// How big each key's value is (`--value-sizes`). A key keeps its size for the whole run
/// (an update rewrites the same size), as HMCached's datasets do.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueSizes {
    /// Every value has this many bytes.
    Fixed(usize),
    /// Uniform over [min, max] bytes, both inclusive (HMCached's Uni-X-Y: 1 to Y).
    Uniform { min: usize, max: usize },
    /// Normal with this mean and standard deviation, rounded and clamped to [min, max]
    /// (HMCached section 4.6's dataset A: mean 4 KB, deviation 1 KB).
    Normal {
        mean: f64,
        deviation: f64,
        min: usize,
        max: usize,
    },
}

/// The largest value a run may ask for (the engine's default item size limit is 1 MiB).
pub const VALUE_BYTES_MAX: usize = 512 * 1024;

impl ValueSizes {
    /// Parses `1000` (fixed), `1-8192` (uniform, inclusive) or `normal:4096:1024` (mean,
    /// deviation; clamped to 1..=2 x mean).
    pub fn parse(text: &str) -> Result<ValueSizes, String> {
        let number = |s: &str, what: &str| -> Result<usize, String> {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{what} must be a whole number of bytes, got {s:?}"))
        };
        let sizes = if let Some(rest) = text.strip_prefix("normal:") {
            let (mean, deviation) = rest
                .split_once(':')
                .ok_or_else(|| format!("expected normal:MEAN:DEVIATION, got {text:?}"))?;
            let mean = number(mean, "the mean")?;
            ValueSizes::Normal {
                mean: mean as f64,
                deviation: number(deviation, "the deviation")? as f64,
                min: 1,
                max: mean.saturating_mul(2),
            }
        } else if let Some((min, max)) = text.split_once('-') {
            ValueSizes::Uniform {
                min: number(min, "the minimum")?,
                max: number(max, "the maximum")?,
            }
        } else {
            ValueSizes::Fixed(number(text, "the value size")?)
        };
        sizes.check()?;
        Ok(sizes)
    }

    /// The smallest and largest size.
    pub fn bounds(&self) -> (usize, usize) {
        match *self {
            ValueSizes::Fixed(n) => (n, n),
            ValueSizes::Uniform { min, max } | ValueSizes::Normal { min, max, .. } => (min, max),
        }
    }

    pub fn check(&self) -> Result<(), String> {
        let (min, max) = self.bounds();
        if min == 0 || min > max || max > VALUE_BYTES_MAX {
            return Err(format!(
                "value sizes must satisfy 1 <= min <= max <= {VALUE_BYTES_MAX}, got {}",
                self.describe()
            ));
        }
        Ok(())
    }

    /// The mean size (of the clamped normal: its mean before clamping, close enough for
    /// sizing tiers).
    pub fn mean_bytes(&self) -> f64 {
        match *self {
            ValueSizes::Fixed(n) => n as f64,
            ValueSizes::Uniform { min, max } => (min + max) as f64 / 2.0,
            ValueSizes::Normal { mean, .. } => mean,
        }
    }

    /// `1000`, `1-8192` or `normal:4096:1024`, as `parse` reads them.
    pub fn describe(&self) -> String {
        match *self {
            ValueSizes::Fixed(n) => n.to_string(),
            ValueSizes::Uniform { min, max } => format!("{min}-{max}"),
            ValueSizes::Normal {
                mean, deviation, ..
            } => format!("normal:{mean}:{deviation}"),
        }
    }

    /// The value size of key `id` under `seed`: a function of both, so a read can check
    /// the length it gets and an update rewrites the same size.
    pub fn size_of(&self, id: u32, seed: u64) -> usize {
        match *self {
            ValueSizes::Fixed(n) => n,
            ValueSizes::Uniform { min, max } => {
                let mut rng = key_rng(id, seed);
                min + rng.below((max - min + 1) as u64) as usize
            }
            ValueSizes::Normal {
                mean,
                deviation,
                min,
                max,
            } => {
                // Box-Muller: two uniforms in (0, 1] and [0, 1) give one standard normal.
                let mut rng = key_rng(id, seed);
                let u1 = 1.0 - rng.next_f64();
                let u2 = rng.next_f64();
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                let size = (mean + deviation * z).round();
                (size.max(min as f64).min(max as f64)) as usize
            }
        }
    }
}

fn key_rng(id: u32, seed: u64) -> Rng {
    Rng::new(
        seed ^ u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        STREAM_VALUE_SIZES,
    )
}
