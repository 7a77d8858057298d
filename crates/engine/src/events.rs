//! The event log behind memcached's `watch` command: what the cache did, item by item
//! (a fetch, a store, an eviction, a move between tiers), what its background work did
//! (a slab page move, a crawler pass: memcached's `sysevents`), and the connections the
//! server opened and closed (`connevents`, recorded by the server), for the server to
//! format and stream to whoever watches.
//!
//! Cost rule: when nobody watches, emitting an event is one relaxed atomic load
//! ([`EventLog::wants`]) and a not-taken branch. When somebody watches, the event (its key
//! copied) goes into one bounded queue under a mutex; a full queue drops the event and
//! counts it, so a watcher that cannot keep up costs events, never memory or a waiting
//! request. The engine formats nothing: [`Event`] is plain data.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::lock::{Mutex, Rank};

use crate::api::{StoreMode, StoreOutcome, TierId};

/// Events held for the server at most; beyond this they are dropped and counted.
pub const EVENT_LOG_CAPACITY: usize = 8192;

/// Kinds of events, as bits of a watch mask ([`EventLog::set_wanted`]).
pub mod kind {
    /// A lookup by key: a hit or a miss (memcached's `fetchers`).
    pub const FETCHES: u32 = 1 << 0;
    /// A store command's outcome (memcached's `mutations`).
    pub const MUTATIONS: u32 = 1 << 1;
    /// A live item removed to make room (memcached's `evictions`).
    pub const EVICTIONS: u32 = 1 << 2;
    /// An item copied to the other tier: a promotion or a demotion (fogcached's own).
    pub const MIGRATIONS: u32 = 1 << 3;
    /// A connection opened or closed (memcached's `connevents`).
    pub const CONNECTIONS: u32 = 1 << 4;
    /// Background work: the slab automover's page moves and the LRU crawler's passes
    /// (memcached's `sysevents`).
    pub const SYSTEM: u32 = 1 << 5;
}

/// One thing the cache did to one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Wall-clock time of the event, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// Position in the log: consecutive events have consecutive numbers (a gap is a
    /// dropped event). memcached's `gid`.
    pub seq: u64,
    pub key: Box<[u8]>,
    pub what: EventWhat,
}

/// What happened, with what the item looked like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventWhat {
    Fetched {
        /// `None`: a miss.
        hit: Option<ItemFacts>,
        /// Who asked: the number the caller put in [`crate::ReadOptions::requester`].
        requester: i32,
    },
    Stored {
        mode: StoreMode,
        /// A `cas` (compare-and-swap) store.
        compare: bool,
        outcome: StoreOutcome,
        /// Seconds the item was given to live; 0 = no expiry.
        ttl_s: u32,
        /// The slab class an item of this size goes to.
        class_id: u8,
        value_bytes: u32,
        requester: i32,
    },
    Evicted {
        item: ItemFacts,
        /// Read at least once since it was stored.
        fetched: bool,
        /// Seconds left to live; `None`: no expiry.
        ttl_s: Option<u32>,
        /// Seconds since its last access.
        idle_s: u32,
    },
    Moved {
        /// The item in its new tier.
        item: ItemFacts,
        from: TierId,
        /// Seconds since its last access.
        idle_s: u32,
    },
    /// A client connection was accepted (`opened`) or closed; recorded by the server.
    Connection {
        opened: bool,
        /// The peer; `None` for a unix-domain socket.
        peer: Option<SocketAddr>,
        reason: CloseReason,
        fd: i32,
    },
    /// The slab automover decided to move a DRAM page from class `src` to class `dst`
    /// (0: back to the free pool).
    SlabMove { src: u32, dst: u32 },
    /// One LRU segment of one class, walked by a crawler pass.
    CrawlerStatus(CrawlerStatus),
}

/// Why a connection closed, with memcached's names (`reason=` of `conn_close`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// A protocol error, an oversized request, a failed read or write.
    Error,
    /// The client closed its side or sent `quit`.
    Normal,
    /// `-o idle_timeout`.
    IdleTimeout,
    /// The server is stopping.
    Shutdown,
}

impl CloseReason {
    pub fn name(&self) -> &'static str {
        match self {
            CloseReason::Error => "error",
            CloseReason::Normal => "normal",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

/// What a crawler pass found in one LRU segment of one class (memcached's
/// `type=lru_crawler` line; see `crawler.rs` for how each figure is taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrawlerStatus {
    pub tier: TierId,
    pub class_id: u8,
    /// Segment index: 0 HOT, 1 WARM, 2 COLD (the hotspot policy's queues 0 to 4).
    pub segment: u8,
    /// Items with an expiry, / 100, + 1 (memcached's `low_mark`).
    pub low_mark: u64,
    /// Items walked that expire within the next hour (memcached's `next_reclaims`).
    pub next_reclaims: u64,
    /// Seconds since the previous pass ended.
    pub since_run_s: u32,
    /// Seconds until the next pass is due.
    pub next_run_s: u32,
    /// Seconds the walk of this segment took.
    pub elapsed_s: u32,
    pub examined: u64,
    pub reclaimed: u64,
}

/// Where an item lives and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemFacts {
    pub tier: TierId,
    pub class_id: u8,
    pub value_bytes: u32,
}

/// The bounded log; the engine writes, the server drains.
pub struct EventLog {
    /// Union of the kinds somebody watches.
    wanted: AtomicU32,
    queue: Mutex<VecDeque<Event>>,
    next_seq: AtomicU64,
    /// Events dropped because the queue was full, since the last drain.
    dropped: AtomicU64,
    /// Events dropped since start (memcached's `log_worker_dropped`).
    dropped_total: AtomicU64,
}

impl Default for EventLog {
    fn default() -> EventLog {
        EventLog {
            wanted: AtomicU32::new(0),
            queue: Mutex::with_default(Rank::Events),
            next_seq: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            dropped_total: AtomicU64::new(0),
        }
    }
}

impl EventLog {
    /// Whether events of `kind` are watched: the only cost of an event nobody watches.
    #[inline]
    pub fn wants(&self, kind: u32) -> bool {
        self.wanted.load(Ordering::Relaxed) & kind != 0
    }

    /// Sets the kinds to record (the union over every watcher); 0 stops recording and
    /// empties the queue.
    pub fn set_wanted(&self, kinds: u32) {
        self.wanted.store(kinds, Ordering::Relaxed);
        if kinds == 0 {
            self.queue.lock().clear();
        }
    }

    /// Adds `kinds` to the kinds recorded (a new watcher, before its `OK` is sent, so no
    /// event after it is missed).
    pub fn add_wanted(&self, kinds: u32) {
        self.wanted.fetch_or(kinds, Ordering::Relaxed);
    }

    /// Records an event of `kind` (the caller checked [`EventLog::wants`]).
    #[cold]
    pub fn record(&self, kind: u32, key: &[u8], what: EventWhat) {
        if !self.wants(kind) {
            return;
        }
        let unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let mut queue = self.queue.lock();
        // The number is taken under the lock, so the queue is in sequence order.
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed) + 1;
        if queue.len() >= EVENT_LOG_CAPACITY {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
            return;
        }
        queue.push_back(Event {
            unix_us,
            seq,
            key: key.into(),
            what,
        });
    }

    /// Events recorded and events dropped since start (memcached's `log_worker_written`
    /// and `log_worker_dropped`).
    pub fn totals(&self) -> (u64, u64) {
        let dropped = self.dropped_total.load(Ordering::Relaxed);
        let numbered = self.next_seq.load(Ordering::Relaxed);
        (numbered - dropped, dropped)
    }

    /// Moves up to `max` events into `out`, oldest first, and returns how many were
    /// dropped (queue full) since the last call.
    pub fn drain(&self, out: &mut Vec<Event>, max: usize) -> u64 {
        let mut queue = self.queue.lock();
        let take = queue.len().min(max);
        out.extend(queue.drain(..take));
        self.dropped.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn miss() -> EventWhat {
        EventWhat::Fetched {
            hit: None,
            requester: 7,
        }
    }

    fn drained(log: &EventLog) -> Vec<Event> {
        let mut out = Vec::new();
        log.drain(&mut out, usize::MAX);
        out
    }

    #[test]
    fn the_engine_logs_fetches_stores_evictions_and_moves() {
        use crate::api::{ReadOptions, StoreOptions};
        use crate::clock::ManualClock;
        use crate::config::EngineConfig;
        use crate::index::Index;
        use crate::moves::{Direction, Queued};
        use crate::Engine;

        let config = EngineConfig {
            memory_limit_bytes: 2 << 20,
            slow_tier: Some(tier::RegionSpec {
                size_bytes: 4 << 20,
                backing: tier::RegionBacking::Anonymous,
                cost: tier::CostModel::NONE,
            }),
            ..EngineConfig::default()
        };
        let e = Engine::new(config, ManualClock::new(1_700_000_000)).unwrap();
        e.events()
            .set_wanted(kind::FETCHES | kind::MUTATIONS | kind::MIGRATIONS);
        let mut set = StoreOptions::new(StoreMode::Set, 0, 100);
        set.requester = 9;
        assert!(matches!(
            e.store(b"k", b"abc", &set),
            StoreOutcome::Stored { .. }
        ));
        let read = ReadOptions {
            requester: 9,
            ..ReadOptions::default()
        };
        let _ = e.read(b"k", &read, |_| ());
        let _ = e.read(b"missing", &read, |_| ());
        let add = StoreOptions::new(StoreMode::Add, 0, 0);
        assert_eq!(e.store(b"k", b"x", &add), StoreOutcome::NotStored);
        let class_id = e.slab_class_for(1, 3);
        let events = drained(e.events());
        let whats: Vec<EventWhat> = events.iter().map(|ev| ev.what).collect();
        let dram_item = ItemFacts {
            tier: TierId::Dram,
            class_id,
            value_bytes: 3,
        };
        assert_eq!(
            whats,
            vec![
                EventWhat::Stored {
                    mode: StoreMode::Set,
                    compare: false,
                    outcome: events_outcome(&events[0]),
                    ttl_s: 100,
                    class_id,
                    value_bytes: 3,
                    requester: 9,
                },
                EventWhat::Fetched {
                    hit: Some(dram_item),
                    requester: 9,
                },
                EventWhat::Fetched {
                    hit: None,
                    requester: 9,
                },
                EventWhat::Stored {
                    mode: StoreMode::Add,
                    compare: false,
                    outcome: StoreOutcome::NotStored,
                    ttl_s: 0,
                    class_id: e.slab_class_for(1, 1),
                    value_bytes: 1,
                    requester: 0,
                },
            ]
        );
        assert_eq!(&*events[2].key, b"missing");
        assert!(events.windows(2).all(|w| w[0].seq + 1 == w[1].seq));

        // A demotion is logged with both tiers.
        let key_hash = e.index.hash(b"k");
        let queued = {
            let mut table = e.index.shard(key_hash).table.lock();
            let addr = Index::find(&mut table, |a| e.mem_of(a), key_hash, b"k")
                .unwrap()
                .addr();
            let h = e
                .dram()
                .mem
                .write_header(addr, crate::item::header_bytes::STATE);
            Queued::mark(h, &table)
        };
        assert!(e.move_item(queued, Direction::ToSlow));
        let events = drained(e.events());
        assert_eq!(events.len(), 1);
        assert_eq!(&*events[0].key, b"k");
        assert!(matches!(
            events[0].what,
            EventWhat::Moved {
                item: ItemFacts {
                    tier: TierId::Slow,
                    value_bytes: 3,
                    ..
                },
                from: TierId::Dram,
                ..
            }
        ));

        // Evictions: a DRAM-only engine filled far past its size.
        let small = Engine::new(
            EngineConfig {
                memory_limit_bytes: 2 << 20,
                ..EngineConfig::default()
            },
            ManualClock::new(1_700_000_000),
        )
        .unwrap();
        small.events().set_wanted(kind::EVICTIONS);
        let value = vec![b'v'; 1000];
        for i in 0..5000 {
            let key = format!("key{i}");
            small.store(
                key.as_bytes(),
                &value,
                &StoreOptions::new(StoreMode::Set, 0, 0),
            );
        }
        let evictions = drained(small.events());
        assert!(!evictions.is_empty());
        assert_eq!(&*evictions[0].key, b"key0", "the oldest item goes first");
        assert!(matches!(
            evictions[0].what,
            EventWhat::Evicted {
                fetched: false,
                ttl_s: None,
                item: ItemFacts {
                    tier: TierId::Dram,
                    value_bytes: 1000,
                    ..
                },
                ..
            }
        ));
    }

    fn events_outcome(event: &Event) -> StoreOutcome {
        match event.what {
            EventWhat::Stored {
                outcome: outcome @ StoreOutcome::Stored { .. },
                ..
            } => outcome,
            other => panic!("not a successful store: {other:?}"),
        }
    }

    #[test]
    fn nothing_is_recorded_unless_watched() {
        let log = EventLog::default();
        assert!(!log.wants(kind::FETCHES));
        log.record(kind::FETCHES, b"k", miss());
        let mut out = Vec::new();
        assert_eq!(log.drain(&mut out, 10), 0);
        assert!(out.is_empty());
        log.set_wanted(kind::EVICTIONS);
        log.record(kind::FETCHES, b"k", miss());
        log.drain(&mut out, 10);
        assert!(out.is_empty(), "only the watched kinds");
    }

    #[test]
    fn a_full_log_drops_and_counts_and_keeps_its_order() {
        let log = EventLog::default();
        log.set_wanted(kind::FETCHES);
        for _ in 0..EVENT_LOG_CAPACITY + 5 {
            log.record(kind::FETCHES, b"k", miss());
        }
        let mut out = Vec::new();
        assert_eq!(log.drain(&mut out, 3), 5);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].seq + 1, out[1].seq);
        assert_eq!(&*out[0].key, b"k");
        assert_eq!(log.drain(&mut out, usize::MAX), 0, "the count was taken");
        assert_eq!(out.len(), EVENT_LOG_CAPACITY);
        // Unwatching empties the queue: nothing stale is delivered to the next watcher.
        log.record(kind::FETCHES, b"k", miss());
        log.set_wanted(0);
        out.clear();
        log.drain(&mut out, usize::MAX);
        assert!(out.is_empty());
    }
}
