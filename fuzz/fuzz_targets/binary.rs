//! Arbitrary bytes into the binary-protocol parser (`protocol::binary::parse`), with the checks
//! of `crates/protocol/tests/support/fuzz_protocol.rs`.
//! Run: `cargo +nightly fuzz run binary -- -dict=fuzz/dicts/binary.dict` (see docs/testing.md).
#![no_main]

#[path = "../../crates/protocol/tests/support/fuzz_protocol.rs"]
mod fuzz_protocol;

libfuzzer_sys::fuzz_target!(|input: &[u8]| fuzz_protocol::binary(input));
