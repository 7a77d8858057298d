//! Drives hostile bytes through the dispatchers over a real engine, as the runtime would,
//! and checks what must hold whatever the input: no panic, every step within the input,
//! bounded output, and a server that still answers afterwards. Shared by the cargo-fuzz
//! target (`fuzz/fuzz_targets/dispatch.rs`) and the corpus replay test.

use engine::{Engine, EngineConfig, ManualClock};
use server::dispatch;
use server::session::{ServerSettings, ServerStats, Session, Step};

/// Reply bytes a single input may produce: replies are bounded by what was stored.
const OUTPUT_MAX_BYTES: usize = 64 * 1024 * 1024;
/// A small high-water mark, so that multi-key retrievals stream and resume here too.
const OUT_HIGH_WATER_BYTES: usize = 64 * 1024;

pub fn drive(input: &[u8]) {
    let config = EngineConfig {
        memory_limit_bytes: 4 * 1024 * 1024,
        item_size_max_bytes: 1024 * 1024,
        ..EngineConfig::default()
    };
    let engine = match Engine::new(config, ManualClock::new(1_700_000_000)) {
        Ok(engine) => engine,
        Err(error) => panic!("fixed fuzz configuration refused: {error}"),
    };
    let settings = ServerSettings::default();
    let stats = ServerStats::default();
    let binary = input.first() == Some(&0x80);
    let mut out = Vec::new();
    let mut at = 0;
    let mut swallow = 0usize;
    let mut resume_keys = 0usize;
    // Every step must move through the input (consume a byte, set bytes to swallow, or
    // answer at least one more key of a streamed retrieval, of which a line holds fewer
    // than its length), so the input is used up within 2 * input.len() + 1 steps; a step
    // that does not is the livelock the runtime would spin in, and fails here instead of
    // being cut short.
    let steps_max = 2 * input.len() + 1;
    let mut finished = false;
    for _ in 0..steps_max {
        if swallow > 0 {
            let skipped = swallow.min(input.len() - at);
            at += skipped;
            swallow -= skipped;
        }
        if at >= input.len() {
            finished = true;
            break;
        }
        let rest = &input[at..];
        let mut session = Session {
            engine: &engine,
            settings: &settings,
            stats: &stats,
            out: &mut out,
            resume_keys,
            out_high_water_bytes: OUT_HIGH_WATER_BYTES,
            client_fd: -1,
            upstream_reply: None,
        };
        let step = if binary {
            dispatch::binary::handle(&mut session, rest)
        } else {
            dispatch::text::handle(&mut session, rest)
        };
        assert!(
            out.len() <= OUTPUT_MAX_BYTES,
            "output grew to {} bytes",
            out.len()
        );
        if let Step::Partial { keys_done } = step {
            assert!(
                keys_done > resume_keys,
                "resumed at {resume_keys}, done {keys_done}"
            );
            assert!(
                out.len() >= OUT_HIGH_WATER_BYTES,
                "stopped at {} bytes of output, under the mark",
                out.len()
            );
            resume_keys = keys_done;
            // The runtime writes the output out before it resumes.
            out.clear();
            continue;
        }
        resume_keys = 0;
        match step {
            Step::Partial { .. } => unreachable!("handled above"),
            Step::Consumed(n) => {
                assert!(n > 0 && n <= rest.len(), "consumed {n} of {}", rest.len());
                at += n;
            }
            Step::Swallow { consumed, bytes } => {
                assert!(
                    consumed <= rest.len(),
                    "consumed {consumed} of {}",
                    rest.len()
                );
                assert!(
                    consumed > 0 || bytes > 0,
                    "a swallow of nothing after consuming nothing makes no progress"
                );
                at += consumed;
                swallow = bytes;
            }
            // A watcher takes no more requests.
            Step::NeedMore
            | Step::Close
            | Step::Shutdown
            | Step::Watch { .. }
            | Step::Upstream { .. } => {
                finished = true;
                break;
            }
        }
    }
    assert!(
        finished,
        "{} steps did not get through {} bytes of input",
        steps_max,
        input.len()
    );
    // Whatever came before, the engine still serves a fresh request correctly.
    let mut probe = Vec::new();
    let mut session = Session {
        engine: &engine,
        settings: &settings,
        stats: &stats,
        out: &mut probe,
        resume_keys: 0,
        out_high_water_bytes: usize::MAX,
        client_fd: -1,
        upstream_reply: None,
    };
    let request = b"set fuzz-probe 0 0 2\r\nok\r\n";
    assert_eq!(
        dispatch::text::handle(&mut session, request),
        Step::Consumed(request.len())
    );
    assert_eq!(probe, b"STORED\r\n");
}
