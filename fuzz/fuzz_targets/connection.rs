//! A whole connection over a unix socket pair, fed in pieces the input chooses, against
//! an engine whose items migrate between a DRAM and a slow tier meanwhile; the checks are
//! those of `crates/server/tests/support/fuzz_connection.rs`.
//! Run: `scripts/fuzz.sh -t SECONDS connection` (see docs/testing.md).
#![no_main]

#[path = "../../crates/server/tests/support/fuzz_connection.rs"]
mod fuzz_connection;

libfuzzer_sys::fuzz_target!(
    init: {
        // libFuzzer's C main does not ignore SIGPIPE as a Rust main does: a write to a
        // socket whose peer is gone must fail with EPIPE, not kill the fuzzer.
        // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    },
    |input: &[u8]| fuzz_connection::drive(input)
);
