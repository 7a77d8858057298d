//! Memory regions for the cache tiers. This crate is where `unsafe` lives: each region
//! hands out raw byte ranges, and the invariants it relies on are written above it.
//!
//! A [`Region`] is one contiguous byte range split into fixed-size pages. The engine
//! carves slab chunks out of pages; this crate knows nothing about what is stored in
//! them.

mod region;

pub use region::{Region, TierError, PAGE_SIZE_BYTES};
