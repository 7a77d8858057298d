//! The engine's flash tier (issue 26), below DRAM and the slow tier: items written in
//! large append-only segments to a device (`tier::flash`) and read back by offset. Built
//! in parts: `segment.rs`, the on-device format, comes first; the write buffer, the
//! index, placement and reclamation follow (docs/design/flash-tier.md).

pub(crate) mod segment;
