//! What the dispatchers' unit tests share: an engine on a manual clock with the settings
//! and counters a session needs, and a session over it as a connection makes one (no
//! socket, no upstream). Each test module wraps it with its own way of feeding requests.

use std::sync::Arc;

use engine::{Engine, EngineConfig, ManualClock};

use crate::session::{ServerSettings, ServerStats, Session};

/// The engine clock's start, in Unix seconds.
pub(super) const START_UNIX_S: u64 = 1_700_000_000;

pub(super) struct TestServer {
    pub(super) engine: Arc<Engine>,
    pub(super) clock: Arc<ManualClock>,
    pub(super) settings: ServerSettings,
    pub(super) stats: ServerStats,
}

impl TestServer {
    pub(super) fn new(config: EngineConfig, settings: ServerSettings) -> TestServer {
        let clock = ManualClock::new(START_UNIX_S);
        let engine = match Engine::new(config, clock.clone()) {
            Ok(engine) => engine,
            Err(e) => panic!("engine config: {e}"),
        };
        TestServer {
            engine,
            clock,
            settings,
            stats: ServerStats::default(),
        }
    }

    /// A session whose replies go to `out`.
    pub(super) fn session<'s>(
        &'s self,
        out: &'s mut Vec<u8>,
        resume_keys: usize,
        out_high_water_bytes: usize,
    ) -> Session<'s> {
        Session {
            engine: &self.engine,
            settings: &self.settings,
            stats: &self.stats,
            out,
            resume_keys,
            out_high_water_bytes,
            client_fd: -1,
            upstream_reply: None,
        }
    }

    /// One line of the engine's general `stats`, by memcached's name.
    pub(super) fn stat(&self, name: &str) -> String {
        let mut found = None;
        self.engine.stats(&mut |key, value| {
            if key == name {
                found = Some(value.to_string());
            }
        });
        found.unwrap_or_else(|| panic!("no stat {name}"))
    }
}
