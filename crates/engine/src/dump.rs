//! Item listings for memcached's admin commands: `stats cachedump` (one class's LRU,
//! most recent first) and `lru_crawler metadump` (the whole cache, in index order,
//! resumable so that the server can stream it with bounded memory).
//!
//! Both read items the way a request does: under the item's index shard lock (item.rs
//! invariant 3), charging the header and key they read to the item's tier (a class walk
//! also charges the header of each item it passes, busy or not: it reads its links). A class walk
//! holds the class lock and only tries shard locks (lock order: shard before class), so
//! an item that is busy at that instant is left out; an index walk takes each shard's
//! lock for at most [`DUMP_ITEMS_PER_LOCK`] items at a time, so a listing never stops the
//! requests of a shard for long.

use crate::api::TierId;
use crate::engine::{Engine, SlabTier};
use crate::index::Index;
use crate::item::{header_bytes, state, HeaderRead, NIL};
use crate::lru::SEGMENTS;

/// Items an index walk reads per hold of a shard lock.
pub const DUMP_ITEMS_PER_LOCK: usize = 256;

/// The cursor that starts an index walk ([`Engine::dump_items`]).
pub const DUMP_CURSOR_START: u64 = 0;

/// What a listing shows of one live item.
#[derive(Clone, Copy, Debug)]
pub struct ItemDump<'a> {
    pub key: &'a [u8],
    pub value_bytes: u32,
    /// The item's whole size: header, key and value.
    pub total_bytes: u32,
    /// Unix time it expires at; `None`: never.
    pub exptime_unix_s: Option<u64>,
    /// Unix time of its last access.
    pub last_access_unix_s: u64,
    /// 0 when CAS is disabled (`-C`).
    pub cas: u64,
    /// Read at least once since it was stored.
    pub fetched: bool,
    pub class_id: u8,
    pub tier: TierId,
}

impl Engine {
    /// Lists live items in index order, from `cursor` ([`DUMP_CURSOR_START`] for a new
    /// listing), calling `visit` for each until it returns false. Returns the cursor to
    /// continue from after that item, or `None` once every shard was listed. Items stored
    /// or removed during a listing may or may not appear; one whose shard grew between
    /// two calls may appear twice or not at all (memcached's dumps are as loose).
    pub fn dump_items(
        &self,
        cursor: u64,
        visit: &mut dyn FnMut(&ItemDump<'_>) -> bool,
    ) -> Option<u64> {
        let mut shard_index = (cursor >> 32) as usize;
        let mut slot = (cursor & u64::from(u32::MAX)) as usize;
        let now = self.now_s();
        while shard_index < self.index.shard_count() {
            let mut table = self.index.shard_at(shard_index).table.lock();
            let mut read = 0;
            let mut stopped = false;
            let next = Index::visit_from(&mut table, slot, |item| {
                read += 1;
                let addr = item.addr();
                // Header and key, charged once, as an index probe reads them.
                let probed = self.mem_of(addr).read_header_and_key(addr);
                if let Some(listed) = self.dump_of(probed.header(), now) {
                    stopped = !visit(&listed.as_dump(self, probed.key(item)));
                }
                !stopped && read < DUMP_ITEMS_PER_LOCK
            });
            drop(table);
            match next {
                Some(next_slot) if stopped => {
                    return Some(((shard_index as u64) << 32) | next_slot as u64);
                }
                // The lock was held long enough: take it again for the rest.
                Some(next_slot) => slot = next_slot,
                None => {
                    shard_index += 1;
                    slot = 0;
                }
            }
        }
        None
    }

    /// Lists up to `limit` live items of one class of `tier`, each segment from its head
    /// (most recently linked first), calling `visit` until it returns false. An item
    /// whose shard is busy at that instant is skipped. Returns false if the tier or the
    /// class does not exist.
    pub fn dump_class(
        &self,
        tier: TierId,
        class_id: usize,
        limit: usize,
        visit: &mut dyn FnMut(&ItemDump<'_>) -> bool,
    ) -> bool {
        let Some(tier) = self.tiers.iter().find(|t| t.id == tier) else {
            return false;
        };
        if class_id == 0 || class_id > self.geometry.large {
            return false;
        }
        let now = self.now_s();
        let cs = tier.classes[class_id].0.lock();
        let mut listed = 0;
        for segment in 0..SEGMENTS {
            let mut addr = cs.lru.head[segment];
            while addr != NIL && listed < limit {
                // The walk reads every header it passes (its links, its key hash).
                let h = tier.mem.read_header(addr, header_bytes::ALL);
                let next = h.next();
                let key_hash = h.key_hash();
                if let Some(mut table) = self.index.shard(key_hash).table.try_lock() {
                    // The proof to read its key: a probe of its shard (an admin listing).
                    let held = Index::held(&mut table, key_hash, addr);
                    if let (Some(held), Some(listed_item)) = (held, self.dump_of(h, now)) {
                        listed += 1;
                        // The key's read continues the header's.
                        if !visit(&listed_item.as_dump(self, h.read_key(&held))) {
                            return true;
                        }
                    }
                }
                addr = next;
            }
        }
        true
    }

    /// The facts of the live item `h` (its header, read and charged under its shard lock,
    /// which the caller holds); `None` if it is dead or not linked.
    fn dump_of<'e>(&'e self, h: HeaderRead<'e>, now_s: u32) -> Option<Listed<'e>> {
        if !h.has(state::LINKED) || self.dead_reason(h, now_s).is_some() {
            return None;
        }
        Some(Listed {
            tier: self.tier_of(h.addr()),
            h,
        })
    }
}

/// A live item found by a listing, in its tier, with its header's view.
struct Listed<'e> {
    tier: &'e SlabTier,
    h: HeaderRead<'e>,
}

impl Listed<'_> {
    /// The item's facts, read under its shard lock; `key`: its key, read with the
    /// lock's proof.
    fn as_dump<'k>(&self, engine: &Engine, key: &'k [u8]) -> ItemDump<'k> {
        let h = self.h;
        let addr = h.addr();
        let start_unix_s = engine.clock.start_unix_s();
        let exptime_rel_s = h.exptime_rel_s();
        ItemDump {
            key,
            value_bytes: h.value_len(),
            total_bytes: h.total_bytes() as u32,
            exptime_unix_s: (exptime_rel_s != 0).then(|| start_unix_s + u64::from(exptime_rel_s)),
            last_access_unix_s: start_unix_s + u64::from(h.last_access_s()),
            cas: engine.visible_cas(h.cas()),
            fetched: h.has(state::FETCHED),
            class_id: self.tier.class_of(addr) as u8,
            tier: self.tier.id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ReadOptions, StoreMode, StoreOptions};
    use crate::clock::ManualClock;
    use crate::config::EngineConfig;

    const START_UNIX_S: u64 = 1_700_000_000;

    fn engine_with(keys: usize) -> std::sync::Arc<Engine> {
        let e = Engine::new(EngineConfig::default(), ManualClock::new(START_UNIX_S)).unwrap();
        for i in 0..keys {
            let key = format!("key:{i}");
            let exptime = if i == 0 { 100 } else { 0 };
            e.store(
                key.as_bytes(),
                b"value",
                &StoreOptions::new(StoreMode::Set, 0, exptime),
            );
        }
        e
    }

    fn collect_all(e: &Engine, stop_every: usize) -> Vec<String> {
        let mut keys = Vec::new();
        let mut cursor = Some(DUMP_CURSOR_START);
        let mut calls = 0;
        while let Some(at) = cursor {
            calls += 1;
            assert!(calls < 100_000, "the walk makes progress");
            let mut seen = 0;
            cursor = e.dump_items(at, &mut |item| {
                keys.push(String::from_utf8_lossy(item.key).into_owned());
                seen += 1;
                seen < stop_every
            });
        }
        keys.sort();
        keys
    }

    #[test]
    fn an_index_walk_lists_every_live_item_once_however_often_it_stops() {
        let e = engine_with(3000);
        let mut expected: Vec<String> = (0..3000).map(|i| format!("key:{i}")).collect();
        expected.sort();
        assert_eq!(collect_all(&e, usize::MAX), expected);
        assert_eq!(collect_all(&e, 1), expected);
        assert_eq!(collect_all(&e, 7), expected);
    }

    #[test]
    fn a_listing_shows_memcached_s_facts_and_skips_dead_items() {
        let clock = ManualClock::new(START_UNIX_S);
        let e = Engine::new(EngineConfig::default(), clock.clone()).unwrap();
        e.store(b"ttl", b"abc", &StoreOptions::new(StoreMode::Set, 0, 100));
        e.store(b"forever", b"x", &StoreOptions::new(StoreMode::Set, 0, 0));
        e.store(b"short", b"x", &StoreOptions::new(StoreMode::Set, 0, 1));
        let _ = e.read(b"forever", &ReadOptions::default(), |_| ());
        clock.advance_s(2);
        let now_unix_s = START_UNIX_S + u64::from(e.now_s());
        let mut seen = Vec::new();
        assert_eq!(
            e.dump_items(DUMP_CURSOR_START, &mut |item| {
                seen.push((
                    String::from_utf8_lossy(item.key).into_owned(),
                    item.exptime_unix_s,
                    item.fetched,
                    item.value_bytes,
                    item.last_access_unix_s,
                ));
                true
            }),
            None
        );
        seen.sort();
        assert_eq!(seen.len(), 2, "the expired item is not listed: {seen:?}");
        assert_eq!(seen[0].0, "forever");
        assert_eq!(seen[0].1, None);
        assert!(seen[0].2, "forever was read");
        assert_eq!(seen[1].0, "ttl");
        assert_eq!(seen[1].1, Some(now_unix_s - 2 + 100));
        assert!(!seen[1].2);
        assert_eq!(seen[1].3, 3);
        assert_eq!(seen[1].4, now_unix_s - 2);
    }

    #[test]
    fn a_class_listing_is_bounded_and_refuses_unknown_classes() {
        let e = engine_with(50);
        let class = usize::from(e.slab_class_for(b"key:10".len(), b"value".len()));
        let mut keys = Vec::new();
        assert!(e.dump_class(TierId::Dram, class, 10, &mut |item| {
            keys.push(item.key.to_vec());
            true
        }));
        assert_eq!(keys.len(), 10);
        // Most recently stored first.
        assert_eq!(keys[0], b"key:49");
        assert!(!e.dump_class(TierId::Dram, 0, 10, &mut |_| true));
        assert!(!e.dump_class(TierId::Dram, 1000, 10, &mut |_| true));
        assert!(!e.dump_class(TierId::Slow, class, 10, &mut |_| true));
    }
}
