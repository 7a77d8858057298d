//! Arbitrary bytes into the text-protocol parser (`protocol::text::parse`), with the checks
//! of `crates/protocol/tests/support/fuzz_protocol.rs`.
//! Run: `cargo +nightly fuzz run text -- -dict=fuzz/dicts/text.dict` (see docs/testing.md).
#![no_main]

#[path = "../../crates/protocol/tests/support/fuzz_protocol.rs"]
mod fuzz_protocol;

libfuzzer_sys::fuzz_target!(|input: &[u8]| fuzz_protocol::text(input));
