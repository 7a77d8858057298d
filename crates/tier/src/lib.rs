//! Memory regions for the cache tiers. This crate is where `unsafe` lives: each region
//! hands out raw byte ranges, and the invariants it relies on are written above it.
//!
//! A [`Region`] is one contiguous byte range split into fixed-size pages, made from a
//! [`RegionSpec`]: anonymous memory (DRAM), heap (tests), a file or DAX device mapped
//! shared, or memory bound to a NUMA node (CXL). The engine carves slab chunks out of
//! pages; this crate knows nothing about what is stored in them. Every access the engine
//! makes is reported with [`Region::count_and_wait_read`] / [`Region::count_and_wait_write`],
//! which count bytes and 64-byte lines and busy-wait the region's emulated [`CostModel`]
//! (the engine calls them only from `engine::item`, whose views make the charge part of
//! the access).
//!
//! The flash device under a storage tier ([`flash`]) is not mapped: it is read and
//! written by offset, in aligned buffers, through one I/O seam tests can fault.

mod accounting;
mod cost;
mod file_system;
pub mod flash;
mod numa;
mod region;
mod time;

pub use accounting::{lines_touched, AccessCounts, LINE_SIZE_BYTES};
pub use cost::{CostModel, PRESET_NAMES};
pub use file_system::{file_system_at, file_system_of, FileSystem};
pub use numa::{check_node_exists, online_nodes};
pub use region::{
    flush_cache_lines, MapMode, PoolContents, PoolHeader, PoolVet, Region, RegionBacking,
    RegionSpec, TierError, PAGE_SIZE_BYTES,
};
pub use time::monotonic_coarse_ns;
