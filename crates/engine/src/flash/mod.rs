//! The engine's flash tier (issue 26), below DRAM and the slow tier: items written in
//! large append-only segments to a device (`tier::flash`) and read back by offset. Built
//! in parts: `segment.rs` (the on-device format) and `index.rs` (the DRAM index, which
//! fogsim's model of the tier uses too) first; the write buffer on the device,
//! placement and reclamation follow (docs/design/flash-tier.md).

pub mod index;
pub(crate) mod segment;
