//! Replays the committed fuzz corpus (`fuzz/corpus/dispatch`) through the dispatchers as
//! an ordinary test, so CI checks every input the fuzzer ever kept without running it.

#[path = "support/fuzz_driver.rs"]
mod fuzz_driver;

use std::path::PathBuf;

#[test]
fn every_committed_fuzz_input_is_handled_without_harm() -> std::io::Result<()> {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dispatch");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&corpus)? {
        let path = entry?.path();
        let input = std::fs::read(&path)?;
        fuzz_driver::drive(&input);
        replayed += 1;
    }
    assert!(
        replayed >= 20,
        "the corpus at {} is missing",
        corpus.display()
    );
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
