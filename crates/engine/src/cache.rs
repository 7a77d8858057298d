//! INTERIM reference engine: one mutex around a hash map. It exists so that the protocol
//! dispatchers can be built and tested against the real API while the slab engine is
//! written; it is replaced wholesale by the slab/LRU engine (same public API).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::api::*;
use crate::clock::Clock;
use crate::config::{ConfigError, EngineConfig};

const ITEM_HEADER_BYTES: usize = 48;

struct Item {
    value: Vec<u8>,
    client_flags: u32,
    cas: u64,
    /// Relative expiry time; 0 = never.
    exptime_rel_s: u32,
    last_access_s: u32,
    fetched: bool,
    stale: bool,
    token_sent: bool,
}

pub struct Engine {
    config: EngineConfig,
    clock: Arc<dyn Clock>,
    items: Mutex<HashMap<Vec<u8>, Item>>,
    cas_counter: AtomicU64,
    counters: Mutex<HashMap<&'static str, u64>>,
}

impl Engine {
    pub fn new(config: EngineConfig, clock: Arc<dyn Clock>) -> Result<Arc<Engine>, ConfigError> {
        config.validate()?;
        Ok(Arc::new(Engine {
            config,
            clock,
            items: Mutex::new(HashMap::new()),
            cas_counter: AtomicU64::new(0),
            counters: Mutex::new(HashMap::new()),
        }))
    }

    /// Starts the background threads (LRU maintainer, crawler, slab automover).
    pub fn start_background(self: &Arc<Self>) {}

    /// Stops the background threads and waits for them.
    pub fn stop_background(&self) {}

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// Whether an item with this key and value length could ever be stored. The server
    /// asks before reading a payload, so an oversized one is swallowed, not buffered.
    pub fn item_fits(&self, key_len: usize, value_len: usize) -> bool {
        ITEM_HEADER_BYTES + key_len + value_len + 2 <= self.config.item_size_max_bytes
    }

    fn count(&self, name: &'static str) {
        *self.counters.lock().entry(name).or_insert(0) += 1;
    }

    fn next_cas(&self) -> u64 {
        self.cas_counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Converts a client exptime to relative time; `None` means already expired.
    fn exptime_to_rel(&self, exptime: ClientExptime) -> Option<u32> {
        if exptime == 0 {
            return Some(0);
        }
        if exptime < 0 {
            return None;
        }
        let now = self.clock.now_s();
        if exptime > RELATIVE_EXPTIME_MAX_S {
            let start = self.clock.start_unix_s() as i64;
            if exptime <= start {
                return None;
            }
            let rel = (exptime - start).min(u32::MAX as i64) as u32;
            return Some(rel.max(1));
        }
        Some(now.saturating_add(exptime as u32))
    }

    fn is_live(&self, item: &Item, now: u32) -> bool {
        item.exptime_rel_s == 0 || item.exptime_rel_s > now
    }

    fn ttl_remaining(&self, item: &Item, now: u32) -> Option<u32> {
        if item.exptime_rel_s == 0 {
            None
        } else {
            Some(item.exptime_rel_s.saturating_sub(now))
        }
    }

    pub fn read<R>(
        &self,
        key: &[u8],
        opts: &ReadOptions,
        on_hit: impl FnOnce(&ItemView<'_>) -> R,
    ) -> ReadOutcome<R> {
        let now = self.clock.now_s();
        let mut items = self.items.lock();
        if let Some(item) = items.get(key) {
            if !self.is_live(item, now) {
                items.remove(key);
            }
        }
        let touch_rel = opts.touch_exptime.map(|e| self.exptime_to_rel(e));
        match items.get_mut(key) {
            Some(item) => {
                if let Some(t) = touch_rel {
                    match t {
                        Some(rel) => item.exptime_rel_s = rel,
                        None => {
                            items.remove(key);
                            return ReadOutcome::Miss { vivified: false };
                        }
                    }
                }
                let mut win = false;
                let mut already = false;
                if item.token_sent {
                    already = true;
                } else if item.stale
                    || opts.recache_below_s.is_some_and(|r| {
                        self.ttl_remaining(item, now).is_some_and(|t| (t as i64) < r)
                    })
                {
                    item.token_sent = true;
                    win = true;
                }
                let view = ItemView {
                    key,
                    value: &item.value,
                    client_flags: item.client_flags,
                    cas: item.cas,
                    ttl_remaining_s: self.ttl_remaining(item, now),
                    last_access_ago_s: now.saturating_sub(item.last_access_s),
                    fetched_before: item.fetched,
                    stale: item.stale,
                    win,
                    win_token_already_sent: already,
                    slab_class: 1,
                    total_size_bytes: ITEM_HEADER_BYTES + key.len() + item.value.len(),
                    tier: TierId::Dram,
                };
                let r = on_hit(&view);
                if !opts.no_bump {
                    item.fetched = true;
                    item.last_access_s = now;
                }
                if !opts.no_stats {
                    self.count("get_hits");
                }
                ReadOutcome::Hit(r)
            }
            None => {
                if !opts.no_stats {
                    self.count("get_misses");
                }
                if let Some(e) = opts.vivify_exptime {
                    if let Some(rel) = self.exptime_to_rel(e) {
                        let cas = self.next_cas();
                        items.insert(
                            key.to_vec(),
                            Item {
                                value: Vec::new(),
                                client_flags: 0,
                                cas,
                                exptime_rel_s: rel,
                                last_access_s: now,
                                fetched: false,
                                stale: false,
                                token_sent: true,
                            },
                        );
                        return ReadOutcome::Miss { vivified: true };
                    }
                }
                ReadOutcome::Miss { vivified: false }
            }
        }
    }

    pub fn store(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        let now = self.clock.now_s();
        let mut items = self.items.lock();
        if let Some(item) = items.get(key) {
            if !self.is_live(item, now) {
                items.remove(key);
            }
        }
        if !self.item_fits(key.len(), value.len()) {
            if opts.mode == StoreMode::Set {
                items.remove(key);
            }
            return StoreOutcome::TooLarge;
        }
        let Some(exptime_rel) = self.exptime_to_rel(opts.exptime) else {
            // Already expired: memcached stores it and it is never seen again.
            items.remove(key);
            return StoreOutcome::Stored { cas: self.next_cas() };
        };
        let existing = items.get(key);
        let mut stale = false;
        if let Some(expected) = opts.compare_cas {
            match existing {
                None => return StoreOutcome::NotFound,
                Some(item) if item.cas != expected => {
                    if opts.invalidate && expected < item.cas {
                        stale = true;
                    } else {
                        return StoreOutcome::Exists;
                    }
                }
                Some(_) => {}
            }
        }
        let new_value = match opts.mode {
            StoreMode::Set => value.to_vec(),
            StoreMode::Add => {
                if existing.is_some() {
                    return StoreOutcome::NotStored;
                }
                value.to_vec()
            }
            StoreMode::Replace => {
                if existing.is_none() {
                    return StoreOutcome::NotStored;
                }
                value.to_vec()
            }
            StoreMode::Append | StoreMode::Prepend => match existing {
                None => {
                    if opts.vivify_exptime.is_none() {
                        return StoreOutcome::NotStored;
                    }
                    value.to_vec()
                }
                Some(item) => {
                    if !self.item_fits(key.len(), item.value.len() + value.len()) {
                        return StoreOutcome::TooLarge;
                    }
                    let mut v = Vec::with_capacity(item.value.len() + value.len());
                    if opts.mode == StoreMode::Append {
                        v.extend_from_slice(&item.value);
                        v.extend_from_slice(value);
                    } else {
                        v.extend_from_slice(value);
                        v.extend_from_slice(&item.value);
                    }
                    v
                }
            },
        };
        let (client_flags, exptime_rel_s) = match (opts.mode, existing) {
            (StoreMode::Append | StoreMode::Prepend, Some(item)) => {
                (item.client_flags, item.exptime_rel_s)
            }
            (StoreMode::Append | StoreMode::Prepend, None) => (
                opts.client_flags,
                opts.vivify_exptime
                    .and_then(|e| self.exptime_to_rel(e))
                    .unwrap_or(exptime_rel),
            ),
            _ => (opts.client_flags, exptime_rel),
        };
        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
        let cas = if self.config.cas_enabled { cas } else { 0 };
        self.count("cmd_set");
        items.insert(
            key.to_vec(),
            Item {
                value: new_value,
                client_flags,
                cas,
                exptime_rel_s,
                last_access_s: now,
                fetched: false,
                stale,
                token_sent: false,
            },
        );
        StoreOutcome::Stored { cas }
    }

    pub fn delete(&self, key: &[u8], opts: &DeleteOptions) -> DeleteOutcome {
        let now = self.clock.now_s();
        let mut items = self.items.lock();
        let Some(item) = items.get_mut(key) else {
            return DeleteOutcome::NotFound;
        };
        if !self.is_live(item, now) {
            items.remove(key);
            return DeleteOutcome::NotFound;
        }
        if let Some(expected) = opts.compare_cas {
            if expected != item.cas {
                return DeleteOutcome::Exists;
            }
        }
        if opts.invalidate {
            item.stale = true;
            item.token_sent = false;
            if let Some(e) = opts.new_exptime {
                item.exptime_rel_s = self.exptime_to_rel(e).unwrap_or(1);
            }
            if let Some(c) = opts.new_cas {
                item.cas = c;
            }
            return DeleteOutcome::Deleted;
        }
        if opts.remove_value_only {
            item.value.clear();
            item.client_flags = 0;
            return DeleteOutcome::Deleted;
        }
        items.remove(key);
        DeleteOutcome::Deleted
    }

    pub fn arith(&self, key: &[u8], opts: &ArithOptions) -> ArithOutcome {
        let now = self.clock.now_s();
        let mut items = self.items.lock();
        if let Some(item) = items.get(key) {
            if !self.is_live(item, now) {
                items.remove(key);
            }
        }
        let Some(item) = items.get_mut(key) else {
            if let Some((initial, exptime)) = opts.vivify {
                let rel = self.exptime_to_rel(exptime).unwrap_or(1);
                let cas = self.next_cas();
                items.insert(
                    key.to_vec(),
                    Item {
                        value: initial.to_string().into_bytes(),
                        client_flags: 0,
                        cas,
                        exptime_rel_s: rel,
                        last_access_s: now,
                        fetched: false,
                        stale: false,
                        token_sent: false,
                    },
                );
                return ArithOutcome::Value {
                    value: initial,
                    cas,
                    ttl_remaining_s: if rel == 0 { None } else { Some(rel.saturating_sub(now)) },
                };
            }
            return ArithOutcome::NotFound;
        };
        if let Some(expected) = opts.compare_cas {
            if expected != item.cas {
                return ArithOutcome::Exists;
            }
        }
        let text = std::str::from_utf8(&item.value).unwrap_or("").trim_end_matches(' ');
        if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return ArithOutcome::NonNumeric;
        }
        let Ok(current) = text.parse::<u64>() else {
            return ArithOutcome::NonNumeric;
        };
        let value = if opts.increment {
            current.wrapping_add(opts.delta)
        } else {
            current.saturating_sub(opts.delta)
        };
        let digits = value.to_string();
        if digits.len() <= item.value.len() && !opts.increment {
            // memcached rewrites in place and pads with spaces when the number shrinks.
            let mut v = digits.into_bytes();
            v.resize(item.value.len(), b' ');
            item.value = v;
        } else {
            item.value = digits.into_bytes();
        }
        if let Some(e) = opts.touch_exptime {
            item.exptime_rel_s = self.exptime_to_rel(e).unwrap_or(1);
        }
        item.cas = opts.new_cas.unwrap_or_else(|| self.cas_counter.fetch_add(1, Ordering::Relaxed) + 1);
        item.last_access_s = now;
        ArithOutcome::Value {
            value,
            cas: item.cas,
            ttl_remaining_s: if item.exptime_rel_s == 0 {
                None
            } else {
                Some(item.exptime_rel_s.saturating_sub(now))
            },
        }
    }

    pub fn touch(&self, key: &[u8], exptime: ClientExptime) -> TouchOutcome {
        let now = self.clock.now_s();
        let rel = self.exptime_to_rel(exptime);
        let mut items = self.items.lock();
        match items.get_mut(key) {
            Some(item) if self.is_live(item, now) => {
                match rel {
                    Some(rel) => item.exptime_rel_s = rel,
                    None => {
                        items.remove(key);
                    }
                }
                TouchOutcome::Touched
            }
            _ => TouchOutcome::NotFound,
        }
    }

    /// `flush_all [delay]`: invalidates every item now, or `delay_s` seconds from now.
    pub fn flush_all(&self, delay_s: i64) {
        self.count("cmd_flush");
        if delay_s <= 0 {
            self.items.lock().clear();
        } else {
            let when = self.exptime_to_rel(delay_s).unwrap_or(1);
            for item in self.items.lock().values_mut() {
                if item.exptime_rel_s == 0 || item.exptime_rel_s > when {
                    item.exptime_rel_s = when;
                }
            }
        }
    }

    /// General statistics (`stats`), named as memcached names them.
    pub fn stats(&self, emit: &mut dyn FnMut(&str, StatValue)) {
        let items = self.items.lock();
        emit("curr_items", StatValue::U64(items.len() as u64));
        let bytes: usize = items.iter().map(|(k, v)| ITEM_HEADER_BYTES + k.len() + v.value.len()).sum();
        emit("bytes", StatValue::U64(bytes as u64));
        emit("limit_maxbytes", StatValue::U64(self.config.memory_limit_bytes));
        for (k, v) in self.counters.lock().iter() {
            emit(k, StatValue::U64(*v));
        }
    }

    /// `stats items`.
    pub fn stats_items(&self, _emit: &mut dyn FnMut(&str, StatValue)) {}
    /// `stats slabs`.
    pub fn stats_slabs(&self, emit: &mut dyn FnMut(&str, StatValue)) {
        emit("active_slabs", StatValue::U64(0));
        emit("total_malloced", StatValue::U64(0));
    }
    /// `stats sizes`.
    pub fn stats_sizes(&self, _emit: &mut dyn FnMut(&str, StatValue)) {}
    /// The engine's lines of `stats settings`.
    pub fn stats_settings(&self, emit: &mut dyn FnMut(&str, StatValue)) {
        emit("maxbytes", StatValue::U64(self.config.memory_limit_bytes));
        emit("item_size_max", StatValue::U64(self.config.item_size_max_bytes as u64));
    }
    /// `stats reset`.
    pub fn reset_stats(&self) {
        self.counters.lock().clear();
    }
}
