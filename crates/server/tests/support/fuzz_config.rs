//! Arbitrary command lines into `server::cli::parse`: shared by the cargo-fuzz target
//! `config` (`fuzz/fuzz_targets/config.rs`) and the test that replays its corpus.
//!
//! The input is the arguments after the program name, separated by NUL bytes (so an
//! argument may hold any other byte, invalid UTF-8 included). What must hold: no panic;
//! a refusal says why in one message; an accepted line gives a configuration the engine
//! accepts (`EngineConfig::validate`) with tiers that can hold an item of `-I`; and the
//! same line always gives the same answer.

#![allow(dead_code)]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use server::cli::{self, CliExit};

/// More arguments than any real command line; the rest of the input is ignored.
const ARGS_MAX: usize = 64;

pub fn args_of(input: &[u8]) -> Vec<OsString> {
    let mut args = vec![OsString::from("fogcached")];
    args.extend(
        input
            .split(|&b| b == 0)
            .take(ARGS_MAX)
            .map(|arg| OsString::from_vec(arg.to_vec())),
    );
    args
}

pub fn drive(input: &[u8]) {
    let args = args_of(input);
    let first = cli::parse(args.clone());
    match &first {
        Ok(config) => {
            let engine = &config.engine;
            if let Err(error) = engine.validate() {
                panic!("accepted a configuration the engine refuses: {error}");
            }
            assert!(
                engine.memory_limit_bytes > 0 || engine.slow_tier.is_some(),
                "accepted a cache without memory"
            );
            if engine.memory_limit_bytes > 0 {
                assert!(
                    engine.item_size_max_bytes as u64 <= engine.memory_limit_bytes / 2,
                    "-I {} against -m {}",
                    engine.item_size_max_bytes,
                    engine.memory_limit_bytes
                );
            }
            if let Some(slow) = &engine.slow_tier {
                assert!(engine.item_size_max_bytes <= slow.size_bytes / 2);
            }
            assert!(config.worker_threads >= 1 && config.max_connections >= 1);
            assert!(config.reqs_per_event >= 1);
            assert!(!config.listen.is_empty());
        }
        Err(CliExit::Usage(message)) => {
            assert!(!message.trim().is_empty(), "a refusal without a reason");
        }
        Err(CliExit::Info(text)) => assert!(!text.is_empty()),
    }
    // The same line, the same answer.
    let second = cli::parse(args);
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
}
