//! Memory regions for the cache tiers. This crate is where `unsafe` lives: each region
//! hands out raw byte ranges, and the invariants it relies on are written above it.
