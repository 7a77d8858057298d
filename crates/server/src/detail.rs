//! `stats detail on|off|dump`: memcached's per-prefix statistics. A key's prefix is
//! what comes before the first delimiter (`-D`, default `:`); keys without one are not
//! counted, as in memcached. While collection is off, recording is one relaxed load.
//!
//! The table is bounded ([`PREFIXES_MAX`]): once it is full, new prefixes are not
//! counted (memcached's is unbounded; a client sending random prefixes must not grow the
//! server without limit). `stats detail off` stops counting and keeps the counts, so a
//! later `dump` still shows them, as memcached does.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use parking_lot::Mutex;

/// Distinct prefixes counted at most.
pub const PREFIXES_MAX: usize = 10_000;

/// What a request did to a key, for its prefix's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixOp {
    Get { hit: bool },
    Set,
    Delete,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

#[derive(Debug)]
pub struct PrefixStats {
    enabled: AtomicBool,
    delimiter: AtomicU8,
    table: Mutex<HashMap<Box<[u8]>, Counts>>,
}

impl Default for PrefixStats {
    fn default() -> Self {
        PrefixStats {
            enabled: AtomicBool::new(false),
            delimiter: AtomicU8::new(b':'),
            table: Mutex::new(HashMap::new()),
        }
    }
}

impl PrefixStats {
    /// Start-up settings: `-D` sets the delimiter and turns collection on.
    pub fn configure(&self, delimiter: u8, enabled: bool) {
        self.delimiter.store(delimiter, Ordering::Relaxed);
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn delimiter(&self) -> u8 {
        self.delimiter.load(Ordering::Relaxed)
    }

    /// Counts `op` on `key` if collection is on.
    #[inline]
    pub fn record(&self, key: &[u8], op: PrefixOp) {
        if self.enabled() {
            self.record_slow(key, op);
        }
    }

    #[cold]
    fn record_slow(&self, key: &[u8], op: PrefixOp) {
        let delimiter = self.delimiter();
        let Some(end) = key.iter().position(|&b| b == delimiter) else {
            return;
        };
        let prefix = &key[..end];
        let mut table = self.table.lock();
        if table.len() >= PREFIXES_MAX && !table.contains_key(prefix) {
            return;
        }
        let counts = table.entry(prefix.into()).or_default();
        match op {
            PrefixOp::Get { hit } => {
                counts.gets += 1;
                counts.hits += u64::from(hit);
            }
            PrefixOp::Set => counts.sets += 1,
            PrefixOp::Delete => counts.deletes += 1,
        }
    }

    /// Forgets every prefix's counts (`stats reset`, as memcached's `stats_prefix_clear`).
    pub fn clear(&self) {
        self.table.lock().clear();
    }

    /// `stats detail dump`: one `PREFIX <prefix> get <n> hit <n> set <n> del <n>` line
    /// per prefix (sorted), then `END`.
    pub fn dump(&self, out: &mut Vec<u8>) {
        let mut rows: Vec<(Box<[u8]>, Counts)> = self
            .table
            .lock()
            .iter()
            .map(|(prefix, counts)| (prefix.clone(), *counts))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        for (prefix, c) in rows {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(&prefix);
            // Writing to a Vec cannot fail.
            let _ = write!(
                out,
                " get {} hit {} set {} del {}\r\n",
                c.gets, c.hits, c.sets, c.deletes
            );
        }
        out.extend_from_slice(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(stats: &PrefixStats) -> String {
        let mut out = Vec::new();
        stats.dump(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn counts_by_prefix_only_while_on() {
        let stats = PrefixStats::default();
        stats.record(b"a:1", PrefixOp::Set);
        assert_eq!(dump(&stats), "END\r\n");
        stats.set_enabled(true);
        stats.record(b"a:1", PrefixOp::Set);
        stats.record(b"a:1", PrefixOp::Get { hit: true });
        stats.record(b"a:2", PrefixOp::Get { hit: false });
        stats.record(b"nodelimiter", PrefixOp::Get { hit: false });
        stats.record(b"b:x:y", PrefixOp::Delete);
        stats.set_enabled(false);
        stats.record(b"a:1", PrefixOp::Set);
        assert_eq!(
            dump(&stats),
            "PREFIX a get 2 hit 1 set 1 del 0\r\nPREFIX b get 0 hit 0 set 0 del 1\r\nEND\r\n"
        );
        stats.configure(b'/', true);
        stats.record(b"c/1", PrefixOp::Set);
        assert!(dump(&stats).contains("PREFIX c get 0 hit 0 set 1 del 0\r\n"));
    }

    #[test]
    fn the_table_is_bounded() {
        let stats = PrefixStats::default();
        stats.set_enabled(true);
        for i in 0..PREFIXES_MAX + 10 {
            stats.record(format!("p{i}:k").as_bytes(), PrefixOp::Set);
        }
        assert_eq!(stats.table.lock().len(), PREFIXES_MAX);
        // A prefix already counted keeps counting.
        stats.record(b"p0:k", PrefixOp::Set);
        assert_eq!(stats.table.lock().get(&b"p0"[..]).map(|c| c.sets), Some(2));
    }
}
