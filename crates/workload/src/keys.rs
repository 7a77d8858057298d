//! Which key a request names: uniform over the key space, scrambled zipfian, or the
//! alternating hot set of seed 000 (section 5.2). Keys are ids in `0..keys`; each tool
//! names them its own way.
//!
//! "Scrambled" as in YCSB's `ScrambledZipfianGenerator`: popularity ranks are spread
//! over the key space, so the popular keys are not the first ones loaded (which would
//! leave them in DRAM by accident of load order). YCSB scrambles with `fnv64(rank) % n`,
//! which is not a bijection (some keys are never drawn, others take several ranks); here
//! a seeded random permutation does it, so each key's popularity is exactly the zipf
//! probability of its rank.

use std::sync::Arc;

use crate::rng::Rng;
use crate::zipf::{Zipf, ZipfError};

/// The stream of a seed that draws the zipf permutation (see [`Rng::new`]); the tools
/// draw their requests from other streams of the same seed.
pub const STREAM_PERMUTATION: u64 = 1;

/// The largest key count of a scrambled zipfian: ids must fit the `u32` of the
/// rank-to-key table, and the bound is lower so that table (4 bytes a key, 1 GiB here)
/// stays allocatable.
pub const ZIPF_KEYS_MAX: u64 = 1 << 28;

#[derive(Clone, Debug, PartialEq)]
pub enum DistributionError {
    NoKeys,
    Zipf(ZipfError),
    TooManyKeys(u64),
    BadHotRange {
        keys: u64,
        hot_first: u64,
        hot_keys: u64,
    },
}

impl std::fmt::Display for DistributionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DistributionError::NoKeys => f.write_str("the key count must be at least 1"),
            DistributionError::Zipf(e) => e.fmt(f),
            DistributionError::TooManyKeys(n) => {
                write!(f, "a scrambled zipfian takes at most {ZIPF_KEYS_MAX} keys, got {n}")
            }
            DistributionError::BadHotRange {
                keys,
                hot_first,
                hot_keys,
            } => write!(
                f,
                "the hot range [{hot_first}, +{hot_keys}) must be non-empty and inside the {keys} keys"
            ),
        }
    }
}

impl std::error::Error for DistributionError {}

/// Zipf-distributed popularity ranks mapped onto the keys by a seeded permutation.
#[derive(Debug)]
pub struct ScrambledZipfian {
    zipf: Zipf,
    /// `rank_to_key[rank - 1]` is the key id of popularity rank `rank`.
    rank_to_key: Vec<u32>,
}

impl ScrambledZipfian {
    /// The same `seed` gives the same permutation.
    pub fn new(keys: u64, theta: f64, seed: u64) -> Result<ScrambledZipfian, DistributionError> {
        if keys > ZIPF_KEYS_MAX {
            return Err(DistributionError::TooManyKeys(keys));
        }
        let zipf = Zipf::new(keys, theta).map_err(DistributionError::Zipf)?;
        // Fisher-Yates over 0..keys (keys <= ZIPF_KEYS_MAX < u32::MAX, checked above).
        let mut rank_to_key: Vec<u32> = (0..keys as u32).collect();
        let mut rng = Rng::new(seed, STREAM_PERMUTATION);
        for i in (1..rank_to_key.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            rank_to_key.swap(i, j);
        }
        Ok(ScrambledZipfian { zipf, rank_to_key })
    }

    pub fn zipf(&self) -> &Zipf {
        &self.zipf
    }

    /// The key id of popularity rank `rank` (1 = most popular), if in range.
    pub fn key_of_rank(&self, rank: u64) -> Option<u64> {
        let index = usize::try_from(rank.checked_sub(1)?).ok()?;
        self.rank_to_key.get(index).map(|&key| u64::from(key))
    }

    fn sample(&self, rng: &mut Rng) -> u64 {
        // The sampler's ranks are always in 1..=keys, so the fallback never happens.
        self.key_of_rank(self.zipf.sample(rng)).unwrap_or(0)
    }
}

/// How requests pick keys in `0..keys`. Cloning is cheap: the permutation is shared.
#[derive(Clone, Debug)]
pub enum KeyDistribution {
    Uniform {
        keys: u64,
    },
    ScrambledZipfian(Arc<ScrambledZipfian>),
    /// Seed 000 section 5.2: every other request is uniform over all keys, the others
    /// uniform over the fixed hot range [hot_first, hot_first + hot_keys).
    AlternatingHotSet {
        keys: u64,
        hot_first: u64,
        hot_keys: u64,
    },
}

impl KeyDistribution {
    pub fn uniform(keys: u64) -> Result<KeyDistribution, DistributionError> {
        if keys == 0 {
            return Err(DistributionError::NoKeys);
        }
        Ok(KeyDistribution::Uniform { keys })
    }

    /// `seed` draws the permutation of ranks onto keys.
    pub fn scrambled_zipfian(
        keys: u64,
        theta: f64,
        seed: u64,
    ) -> Result<KeyDistribution, DistributionError> {
        let scrambled = ScrambledZipfian::new(keys, theta, seed)?;
        Ok(KeyDistribution::ScrambledZipfian(Arc::new(scrambled)))
    }

    pub fn alternating_hot_set(
        keys: u64,
        hot_first: u64,
        hot_keys: u64,
    ) -> Result<KeyDistribution, DistributionError> {
        let hot_end = hot_first.checked_add(hot_keys);
        if keys == 0 || hot_keys == 0 || !matches!(hot_end, Some(end) if end <= keys) {
            return Err(DistributionError::BadHotRange {
                keys,
                hot_first,
                hot_keys,
            });
        }
        Ok(KeyDistribution::AlternatingHotSet {
            keys,
            hot_first,
            hot_keys,
        })
    }

    pub fn keys(&self) -> u64 {
        match self {
            KeyDistribution::Uniform { keys } | KeyDistribution::AlternatingHotSet { keys, .. } => {
                *keys
            }
            KeyDistribution::ScrambledZipfian(scrambled) => scrambled.zipf.items(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            KeyDistribution::Uniform { .. } => "uniform",
            KeyDistribution::ScrambledZipfian(_) => "zipf",
            KeyDistribution::AlternatingHotSet { .. } => "hotset",
        }
    }

    /// The share of requests that name one of the `k` most popular keys: what a cache
    /// holding exactly those keys would serve (O(keys) for the zipfian).
    pub fn head_probability(&self, k: u64) -> f64 {
        match self {
            KeyDistribution::Uniform { keys } => k.min(*keys) as f64 / *keys as f64,
            KeyDistribution::ScrambledZipfian(scrambled) => scrambled.zipf.head_probability(k),
            KeyDistribution::AlternatingHotSet { keys, hot_keys, .. } => {
                // A hot key is named by both halves, any other key by the uniform half.
                let per_key_uniform = 0.5 / *keys as f64;
                let per_key_hot = 0.5 / *hot_keys as f64 + per_key_uniform;
                let hot_held = k.min(*hot_keys);
                let others_held = k.min(*keys) - hot_held;
                hot_held as f64 * per_key_hot + others_held as f64 * per_key_uniform
            }
        }
    }
}

/// One stream of key ids: the distribution plus the state of its alternation.
#[derive(Debug, Clone)]
pub struct KeyGenerator {
    distribution: KeyDistribution,
    draws: u64,
}

impl KeyGenerator {
    pub fn new(distribution: KeyDistribution) -> KeyGenerator {
        KeyGenerator {
            distribution,
            draws: 0,
        }
    }

    pub fn distribution(&self) -> &KeyDistribution {
        &self.distribution
    }

    pub fn next_key(&mut self, rng: &mut Rng) -> u64 {
        let draw = self.draws;
        self.draws = self.draws.wrapping_add(1);
        match &self.distribution {
            KeyDistribution::Uniform { keys } => rng.below(*keys),
            KeyDistribution::ScrambledZipfian(scrambled) => scrambled.sample(rng),
            KeyDistribution::AlternatingHotSet {
                keys,
                hot_first,
                hot_keys,
            } => {
                if draw & 1 == 0 {
                    rng.below(*keys)
                } else {
                    hot_first + rng.below(*hot_keys)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrambled(keys: u64, theta: f64, seed: u64) -> Arc<ScrambledZipfian> {
        match KeyDistribution::scrambled_zipfian(keys, theta, seed).unwrap() {
            KeyDistribution::ScrambledZipfian(s) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn zipf_frequencies_match_the_exact_probabilities() {
        let zipf = Zipf::new(1000, 0.99).unwrap();
        let mut rng = Rng::new(42, 0);
        let draws = 400_000u64;
        let mut counts = vec![0u64; 1001];
        for _ in 0..draws {
            counts[zipf.sample(&mut rng) as usize] += 1;
        }
        // The sampler is exact for every rank: single ranks and groups of ranks both
        // stay within 5 standard deviations of their expected counts.
        let within = |p: f64, seen: u64, what: &str| {
            let expected = p * draws as f64;
            let sigma = (draws as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (seen as f64 - expected).abs() <= 5.0 * sigma,
                "{what}: {seen} vs {expected:.0} +- {sigma:.0}"
            );
        };
        for rank in 1..=5u64 {
            within(zipf.probability(rank), counts[rank as usize], "rank");
        }
        for (first, last) in [(6u64, 10u64), (10, 100), (100, 1001)] {
            let p: f64 = (first..last).map(|r| zipf.probability(r)).sum();
            let seen: u64 = counts[first as usize..last as usize].iter().sum();
            within(p, seen, &format!("ranks {first}..{last}"));
        }
    }

    #[test]
    fn scrambled_zipf_spreads_popular_keys_but_keeps_the_skew() {
        let keys = 10_000;
        let dist = KeyDistribution::scrambled_zipfian(keys, 0.99, 7).unwrap();
        let mut generator = KeyGenerator::new(dist);
        let mut rng = Rng::new(7, 0);
        let mut counts = vec![0u64; keys as usize];
        let draws = 200_000;
        for _ in 0..draws {
            let key = generator.next_key(&mut rng);
            assert!(key < keys);
            counts[key as usize] += 1;
        }
        // The hottest key is where rank 1 is mapped to, not key 0.
        let hottest = (0..keys as usize).max_by_key(|&k| counts[k]).unwrap() as u64;
        let permutation = scrambled(keys, 0.99, 7);
        assert_eq!(Some(hottest), permutation.key_of_rank(1));
        assert_ne!(hottest, 0);
        // Its share is rank 1's probability: the permutation gives it no other rank.
        let p = permutation.zipf().probability(1);
        let sigma = (draws as f64 * p * (1.0 - p)).sqrt();
        let expected = p * draws as f64;
        let seen = counts[hottest as usize] as f64;
        assert!(
            (seen - expected).abs() <= 5.0 * sigma,
            "{seen} vs {expected:.0}"
        );
    }

    #[test]
    fn scrambled_zipf_scatters_the_hottest_ranks_over_the_key_space() {
        // The 100 most popular ranks land all over the key space, not in its first 1%:
        // each tenth of the key space gets some, none gets a large share.
        let keys = 100_000u64;
        let permutation = scrambled(keys, 0.99, 11);
        let mut per_tenth = [0u32; 10];
        for rank in 1..=100u64 {
            per_tenth[(permutation.key_of_rank(rank).unwrap() * 10 / keys) as usize] += 1;
        }
        assert!(
            per_tenth.iter().all(|&n| (2..=25).contains(&n)),
            "{per_tenth:?}"
        );
        // The same holds for the keys a generator actually draws most often.
        let mut generator =
            KeyGenerator::new(KeyDistribution::ScrambledZipfian(Arc::clone(&permutation)));
        let mut rng = Rng::new(11, 0);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..300_000 {
            *counts.entry(generator.next_key(&mut rng)).or_insert(0u64) += 1;
        }
        let mut by_count: Vec<(u64, u64)> = counts.into_iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let hottest: Vec<u64> = by_count.iter().take(20).map(|&(key, _)| key).collect();
        let top_ranks: Vec<u64> = (1..=5)
            .map(|r| permutation.key_of_rank(r).unwrap())
            .collect();
        // The 5 hottest keys are exactly where ranks 1..=5 are mapped to.
        for key in &hottest[..5] {
            assert!(top_ranks.contains(key), "{hottest:?} vs {top_ranks:?}");
        }
        let spread = hottest.iter().max().unwrap() - hottest.iter().min().unwrap();
        assert!(spread > keys / 2, "hot keys bunched together: {hottest:?}");
    }

    #[test]
    fn the_permutation_is_a_function_of_the_seed_and_a_bijection() {
        let a = scrambled(10_000, 0.99, 5);
        let b = scrambled(10_000, 0.99, 5);
        let c = scrambled(10_000, 0.99, 6);
        let keys = |s: &ScrambledZipfian| -> Vec<u64> {
            (1..=10_000).map(|r| s.key_of_rank(r).unwrap()).collect()
        };
        assert_eq!(keys(&a), keys(&b));
        assert_ne!(keys(&a), keys(&c));
        let mut sorted = keys(&a);
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10_000).collect::<Vec<u64>>());
        assert_eq!(a.key_of_rank(0), None);
        assert_eq!(a.key_of_rank(10_001), None);
    }

    #[test]
    fn hot_set_alternates_every_other_request() {
        let dist = KeyDistribution::alternating_hot_set(100_000, 20_000, 5_000).unwrap();
        let mut generator = KeyGenerator::new(dist);
        let mut rng = Rng::new(3, 0);
        let draws = 100_000;
        let mut in_hot_on_even = 0u64;
        for i in 0..draws {
            let key = generator.next_key(&mut rng);
            assert!(key < 100_000);
            let hot = (20_000..25_000).contains(&key);
            if i % 2 == 1 {
                assert!(hot, "draw {i} ({key}) must come from the hot range");
            } else if hot {
                in_hot_on_even += 1;
            }
        }
        // The uniform half lands in the hot range with probability 5%.
        let share = in_hot_on_even as f64 / (draws / 2) as f64;
        assert!((share - 0.05).abs() < 0.005, "share {share}");
    }

    #[test]
    fn hot_set_alternates_exactly_and_the_cold_draws_cover_the_rest() {
        let (keys, hot_first, hot_keys) = (2_000u64, 500u64, 200u64);
        let dist = KeyDistribution::alternating_hot_set(keys, hot_first, hot_keys).unwrap();
        let mut generator = KeyGenerator::new(dist);
        let mut rng = Rng::new(9, 0);
        let mut cold_seen = vec![false; keys as usize];
        let mut hot_counts = vec![0u64; hot_keys as usize];
        for i in 0..100_000u64 {
            let key = generator.next_key(&mut rng);
            assert!(key < keys);
            let hot = (hot_first..hot_first + hot_keys).contains(&key);
            if i % 2 == 1 {
                assert!(hot, "draw {i} ({key}) must come from the hot range");
                hot_counts[(key - hot_first) as usize] += 1;
            } else {
                cold_seen[key as usize] = true;
            }
        }
        // The other half is uniform over all keys: every key outside the hot range is
        // drawn (25 times each on average).
        let outside_missed: Vec<usize> = (0..keys as usize)
            .filter(|&k| !(hot_first..hot_first + hot_keys).contains(&(k as u64)))
            .filter(|&k| !cold_seen[k])
            .collect();
        assert!(outside_missed.is_empty(), "never drawn: {outside_missed:?}");
        // And the hot half is uniform over the hot range (250 each on average).
        assert!(
            hot_counts.iter().all(|&n| (150..350).contains(&n)),
            "{hot_counts:?}"
        );
    }

    #[test]
    fn uniform_covers_the_key_space_evenly() {
        let mut generator = KeyGenerator::new(KeyDistribution::uniform(10).unwrap());
        let mut rng = Rng::new(1, 0);
        let mut counts = [0u64; 10];
        for _ in 0..100_000 {
            counts[generator.next_key(&mut rng) as usize] += 1;
        }
        for count in counts {
            assert!((9_500..10_500).contains(&count), "{counts:?}");
        }
    }

    #[test]
    fn head_probability_is_the_share_of_the_most_popular_keys() {
        let uniform = KeyDistribution::uniform(1_000).unwrap();
        assert_eq!(uniform.head_probability(250), 0.25);
        assert_eq!(uniform.head_probability(5_000), 1.0);
        // Hot set of 100 in 1000 keys: each hot key takes 0.5/100 + 0.5/1000 of the
        // requests, so the hot range alone serves 55%, and every key serves all.
        let hot = KeyDistribution::alternating_hot_set(1_000, 400, 100).unwrap();
        assert!((hot.head_probability(100) - 0.55).abs() < 1e-12);
        assert!((hot.head_probability(50) - 0.275).abs() < 1e-12);
        assert!((hot.head_probability(550) - 0.775).abs() < 1e-12);
        assert!((hot.head_probability(1_000) - 1.0).abs() < 1e-12);
        assert!((hot.head_probability(2_000) - 1.0).abs() < 1e-12);
        let zipf = KeyDistribution::scrambled_zipfian(100, 0.99, 1).unwrap();
        let top3: f64 = {
            let z = Zipf::new(100, 0.99).unwrap();
            (1..=3).map(|k| z.probability(k)).sum()
        };
        assert!((zipf.head_probability(3) - top3).abs() < 1e-12);
    }

    #[test]
    fn invalid_distributions_are_refused() {
        assert_eq!(
            KeyDistribution::scrambled_zipfian(0, 0.99, 1).unwrap_err(),
            DistributionError::Zipf(ZipfError::NoItems)
        );
        assert!(matches!(
            KeyDistribution::scrambled_zipfian(100, -0.5, 1),
            Err(DistributionError::Zipf(ZipfError::BadTheta(_)))
        ));
        assert_eq!(
            KeyDistribution::scrambled_zipfian(ZIPF_KEYS_MAX + 1, 0.99, 1).unwrap_err(),
            DistributionError::TooManyKeys(ZIPF_KEYS_MAX + 1)
        );
        assert!(KeyDistribution::alternating_hot_set(100, 90, 20).is_err());
        assert!(KeyDistribution::alternating_hot_set(100, 10, 0).is_err());
        assert!(KeyDistribution::alternating_hot_set(100, u64::MAX, 2).is_err());
        assert!(KeyDistribution::alternating_hot_set(100, 90, 10).is_ok());
        assert_eq!(
            KeyDistribution::uniform(0).unwrap_err(),
            DistributionError::NoKeys
        );
    }
}
