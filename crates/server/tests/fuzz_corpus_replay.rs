//! Replays the committed fuzz corpora of the server's targets (`fuzz/corpus/dispatch`,
//! `connection`, `config`) and their findings (`fuzz/regressions/<target>`, when there
//! are any) through the checks the targets make, as ordinary tests, so CI checks every
//! input the fuzzer ever kept (and every crash it found) without running it.

#[path = "support/fuzz_config.rs"]
mod fuzz_config;
#[path = "support/fuzz_connection.rs"]
mod fuzz_connection;
#[path = "support/fuzz_driver.rs"]
mod fuzz_driver;

use testkit::{fuzz_dir, replay_fuzz_corpus as replay};

#[test]
fn every_committed_connection_input_is_served_alike_whole_or_in_pieces() -> std::io::Result<()> {
    let replayed = replay("connection", fuzz_connection::drive)?;
    assert!(
        replayed >= 20,
        "only {replayed} inputs in fuzz/corpus/connection"
    );
    Ok(())
}

#[test]
fn every_committed_command_line_is_parsed_without_harm() -> std::io::Result<()> {
    let replayed = replay("config", fuzz_config::drive)?;
    assert!(
        replayed >= 20,
        "only {replayed} inputs in fuzz/corpus/config"
    );
    Ok(())
}

#[test]
fn every_committed_fuzz_input_is_handled_without_harm() -> std::io::Result<()> {
    let replayed = replay("dispatch", fuzz_driver::drive)?;
    assert!(
        replayed >= 20,
        "only {replayed} inputs in fuzz/corpus/dispatch"
    );
    Ok(())
}

/// Every directory of `fuzz/regressions` is named after a target whose replay reads it
/// (these tests, and `crates/protocol/tests/fuzz_corpus_replay.rs` for the parsers), so
/// no kept finding goes unreplayed.
#[test]
fn every_regressions_directory_belongs_to_a_replayed_target() -> std::io::Result<()> {
    const REPLAYED: [&str; 6] = ["text", "meta", "binary", "dispatch", "connection", "config"];
    let regressions = fuzz_dir().join("regressions");
    for entry in std::fs::read_dir(&regressions)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        assert!(
            REPLAYED.contains(&name.as_ref()),
            "fuzz/regressions/{name} is replayed by no test"
        );
    }
    Ok(())
}

#[test]
fn hand_written_hostile_inputs_are_handled_without_harm() {
    let inputs: &[&[u8]] = &[
        b"set k 0 0 4294967295\r\n",
        b"set k 0 0 -1\r\nxx\r\n",
        b"get \r\n",
        b"incr k 99999999999999999999999\r\n",
        b"ms k 18446744073709551615 T-1\r\n",
        b"mg k N-5 R99999999999 T-9\r\n",
        b"\x80\x01\x00\xff\x08\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
        b"\x80\x05\x00\x01\x14\x00\x00\x00\x00\x00\x00\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
        &[b'x'; 5000],
    ];
    for input in inputs {
        fuzz_driver::drive(input);
    }
}

/// The connection harness is worth its name only if items do move between the tiers
/// while requests are half-read: over a few control seeds (each picks a policy), a
/// payload that reads slow-tier items repeatedly must see promotions and demotions.
#[test]
fn the_connection_harness_migrates_items_while_requests_are_in_flight() {
    let mut payload = Vec::new();
    for round in 0..3 {
        for i in (60..100).step_by(2) {
            payload.extend_from_slice(format!("get a{i} a{}\r\n", i - round).as_bytes());
        }
    }
    let (mut promotions, mut demotions) = (0, 0);
    for seed in 0u64..16 {
        let mut input = seed.to_le_bytes().to_vec();
        input.extend_from_slice(&payload);
        let counts = fuzz_connection::drive_counting_migrations(&input);
        promotions += counts.promotions;
        demotions += counts.demotions;
    }
    assert!(
        promotions > 0 && demotions > 0,
        "{promotions} promotions and {demotions} demotions"
    );
}
