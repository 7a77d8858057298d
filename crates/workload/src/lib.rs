//! Seeded key-popularity generators, shared by fogbench (`crates/bench`) and fogsim
//! (`crates/sim`) so that both tools name the same workload with the same words and the
//! same code: a seed gives the same keys on every machine.
//!
//! Pure: no engine, no network, no clock, no files, so every distribution is tested by
//! counting draws from a fixed seed.
//!
//! Map: `rng.rs` (xoshiro256** seeded through SplitMix64, with independent streams per
//! seed), `zipf.rs` (exact zipf sampler over ranks), `keys.rs` (uniform, scrambled
//! zipfian, alternating hot set over key ids, and the generator that draws them).

#![forbid(unsafe_code)]

pub mod keys;
pub mod rng;
pub mod zipf;

pub use keys::{DistributionError, KeyDistribution, KeyGenerator, ScrambledZipfian};
pub use rng::Rng;
pub use zipf::{Zipf, ZipfError};
