//! Arbitrary bytes into the meta-protocol parser (`protocol::meta::parse`), with the checks
//! of `crates/protocol/tests/support/fuzz_protocol.rs`.
//! Run: `cargo +nightly fuzz run meta -- -dict=fuzz/dicts/meta.dict` (see docs/testing.md).
#![no_main]

#[path = "../../crates/protocol/tests/support/fuzz_protocol.rs"]
mod fuzz_protocol;

libfuzzer_sys::fuzz_target!(|input: &[u8]| fuzz_protocol::meta(input));
