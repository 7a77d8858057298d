//! What the command line's unit tests share: parse a line that must be accepted, or
//! refused, and a scratch directory for the storage set-up.

use std::path::PathBuf;

use tier::RegionSpec;

use super::{parse, CliExit, Config};

pub(super) fn parse_ok(args: &[&str]) -> Config {
    let mut full = vec!["fogcached"];
    full.extend_from_slice(args);
    match parse(full) {
        Ok(config) => config,
        Err(e) => panic!("{args:?} refused: {e}"),
    }
}

pub(super) fn parse_usage(args: &[&str]) -> String {
    let mut full = vec!["fogcached"];
    full.extend_from_slice(args);
    match parse(full) {
        Err(CliExit::Usage(message)) => message,
        other => panic!("{args:?} expected a usage error, got {other:?}"),
    }
}

/// A unique scratch directory under the system temp dir, removed on drop.
pub(super) struct ScratchDir(pub(super) PathBuf);

impl ScratchDir {
    pub(super) fn new(tag: &str) -> ScratchDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("fogcached-config-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn slow_spec(config: &Config) -> &RegionSpec {
    match &config.engine.slow_tier {
        Some(spec) => spec,
        None => panic!("expected a slow tier"),
    }
}
