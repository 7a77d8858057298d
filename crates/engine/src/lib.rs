//! The fogcached cache engine: items, their index, slab memory per tier, the segmented
//! LRU, expiry and statistics. It knows nothing of sockets or wire formats; the `server`
//! crate maps requests onto the operations of [`Engine`].
//!
//! Map: `item.rs` (item layout, the only raw-pointer code), `slab.rs` (classes, page
//! pool, free chunks), `lru.rs` (segmented lists), `index.rs` (sharded hash index),
//! `engine.rs` (the engine, its tiers, lock order), `ops.rs` (request verbs),
//! `lifecycle.rs` (allocation, link, unlink), `moves.rs` (Move queues, `move_item`),
//! `pages.rs` (slab page moves), `crawler.rs`, `automove.rs`, `background.rs`
//! (background work), `tuning.rs` (what `lru tune` and `lru_crawler` change at run
//! time), `policy/` (every placement decision), `counters.rs` + `stats_lines.rs`
//! (statistics), `events.rs` (the event log `watch` streams), `dump.rs` (item listings for
//! `stats cachedump` and `lru_crawler metadump`), `fault.rs` (the panic points test
//! builds can trigger).

pub mod api;
mod automove;
mod background;
pub mod clock;
pub mod config;
mod counters;
mod crawler;
mod dump;
mod engine;
pub mod events;
pub mod fault;
pub mod flash;
mod index;
mod item;
mod lifecycle;
mod lock;
mod lru;
mod moves;
mod ops;
mod pages;
#[cfg(feature = "test-hooks")]
mod pause;
mod policy;
mod pool;
mod records;
mod recovery;
mod room;
mod slab;
mod stats_lines;
mod tuning;

pub use api::*;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    fraction_to_ppm, parse_fraction, ConfigError, Durability, EngineConfig, PlacementPolicy,
    PoolMismatch, CRAWLER_SLEEP_MAX_US, KEY_LENGTH_MAX_BYTES, MIGRATION_THREADS_MAX,
    MOVE_QUEUE_MAX_LIMIT, MQ_QUEUES_MAX, PPM, SLAB_PAGE_SIZE_BYTES,
};
pub use dump::{ItemDump, DUMP_CURSOR_START};
pub use engine::Engine;
pub use engine::{DramLimitError, ReassignError};
pub use events::{CloseReason, CrawlerStatus, Event, EventLog, EventWhat, ItemFacts};
#[cfg(feature = "test-hooks")]
pub use pause::{MigrationPause, ShardHold};
pub use pool::{Mismatch, PoolError, PoolStart, SettingChange};
pub use recovery::{RecoveryReport, StopReport};
pub use tuning::{CrawlerSettingError, LruTune, LruTuneError};
