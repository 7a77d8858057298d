//! fogsim: drives the fogcached engine in one process with a seeded YCSB-style workload
//! (no network, no background threads, a manual clock) and measures tier placement by
//! counting: the share of get hits served from DRAM, slow-tier 64-byte lines read per
//! request, promotions and demotions, per window of the run. The placement decisions
//! are the engine's own Dual-LRU code; nothing of the policy is copied here.
//!
//! Map: `rng.rs` (seeded generator), `zipf.rs` (exact zipf sampler), `workload.rs`
//! (keys, values, the scrambled zipfian request stream), `sim.rs` (the run and its
//! windows), `report.rs` (table, JSON, CSV).

pub mod report;
pub mod rng;
pub mod sim;
pub mod workload;
pub mod zipf;

pub use sim::{compare, run, Comparison, RunReport, SimConfig, SimError, Window};
