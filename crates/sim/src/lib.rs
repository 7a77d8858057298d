//! fogsim: drives the fogcached engine in one process with a seeded YCSB-style workload
//! (no network, no background threads, a manual clock) and measures tier placement by
//! counting: the share of get hits served from DRAM, slow-tier 64-byte lines read and
//! written per request, promotions, demotions, evictions and misses, per window of the
//! run, for each placement policy named. The placement decisions are the engine's own
//! code; nothing of a policy is copied here.
//!
//! Map: `workload.rs` (keys, value sizes, the request stream over the workspace's shared
//! key distributions, `crates/workload`), `policy.rs` (policy names and the engine
//! settings they stand for), `sim.rs` (the run, its windows, HMCached's phase change),
//! `kernel_tiering.rs` (`--policy kernel-tiering`: a model of Linux's page tiering under
//! plain memcached, the one placement here that is not the engine's), `flash.rs`
//! (`--flash-size`: a model of the flash tier under the engine, fed by its evictions),
//! `output.rs`
//! (what a run prints and writes: tables, JSON, CSV).

#![forbid(unsafe_code)]

pub mod flash;
pub mod kernel_tiering;
pub mod output;
pub mod policy;
pub mod sim;
pub mod workload;

pub use policy::PolicySetting;
pub use sim::{
    compare, run, run_policies, Comparison, EngineOverrides, PhaseChange, RunReport, SimConfig,
    SimError, Window,
};
pub use workload::{Distribution, ValueSizes};
