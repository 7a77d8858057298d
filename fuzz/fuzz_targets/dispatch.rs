//! Arbitrary bytes into the text/meta/binary dispatchers over a real engine.
//! Run: `cargo +nightly fuzz run dispatch` from the repository root.
#![no_main]

#[path = "../../crates/server/tests/support/fuzz_driver.rs"]
mod fuzz_driver;

libfuzzer_sys::fuzz_target!(|input: &[u8]| fuzz_driver::drive(input));
