//! Drives hostile bytes through the dispatchers over a real engine, as the runtime would,
//! and checks what must hold whatever the input: no panic, every step within the input,
//! bounded output, and a server that still answers afterwards. Shared by the cargo-fuzz
//! target (`fuzz/fuzz_targets/dispatch.rs`) and the corpus replay test.

use engine::{Engine, EngineConfig, ManualClock};
use server::dispatch;
use server::session::{ServerSettings, ServerStats, Session, Step};

/// Dispatcher calls per input before the driver stops (each consumes at least a byte
/// unless it asks for more input, so this bounds the loop).
const STEPS_MAX: usize = 100_000;
/// Reply bytes a single input may produce: replies are bounded by what was stored.
const OUTPUT_MAX_BYTES: usize = 64 * 1024 * 1024;

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
    for _ in 0..STEPS_MAX {
        if swallow > 0 {
            let skipped = swallow.min(input.len() - at);
            at += skipped;
            swallow -= skipped;
        }
        if at >= input.len() {
            break;
        }
        let rest = &input[at..];
        let mut session = Session {
            engine: &engine,
            settings: &settings,
            stats: &stats,
            out: &mut out,
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
        match step {
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
                at += consumed;
                swallow = bytes;
            }
            Step::NeedMore | Step::Close | Step::Shutdown => break,
        }
    }
    // Whatever came before, the engine still serves a fresh request correctly.
    let mut probe = Vec::new();
    let mut session = Session {
        engine: &engine,
        settings: &settings,
        stats: &stats,
        out: &mut probe,
    };
    let request = b"set fuzz-probe 0 0 2\r\nok\r\n";
    assert_eq!(
        dispatch::text::handle(&mut session, request),
        Step::Consumed(request.len())
    );
    assert_eq!(probe, b"STORED\r\n");
}
