//! Arbitrary command lines (arguments separated by NUL bytes) into the server's
//! command-line parser, with the checks of `crates/server/tests/support/fuzz_config.rs`.
//! Run: `scripts/fuzz.sh -t SECONDS config` (see docs/testing.md).
#![no_main]

#[path = "../../crates/server/tests/support/fuzz_config.rs"]
mod fuzz_config;

libfuzzer_sys::fuzz_target!(|input: &[u8]| fuzz_config::drive(input));
