//! The fogcached cache engine: items, their index, slab memory per tier, the segmented
//! LRU, expiry and statistics. It knows nothing of sockets or wire formats; the `server`
//! crate maps requests onto the operations of [`Engine`].
//!
//! Map: `item.rs` (item layout, the only raw-pointer code), `slab.rs` (classes, page
//! pool, free chunks), `lru.rs` (segmented lists), `index.rs` (sharded hash index),
//! `engine.rs` (request operations, allocation, lock order), `maintainer.rs` (LRU
//! maintainer, crawler, slab automover), `stats.rs` + `report.rs` (statistics).

pub mod api;
pub mod clock;
pub mod config;
mod engine;
mod index;
mod item;
mod lru;
mod maintainer;
mod migrate;
mod report;
mod slab;
mod stats;

pub use api::*;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    ConfigError, EngineConfig, PlacementPolicy, KEY_LENGTH_MAX_BYTES, MIGRATION_THREADS_MAX,
    MOVE_QUEUE_MAX_LIMIT, SLAB_PAGE_SIZE_BYTES,
};
pub use engine::Engine;
pub use engine::ReassignError;
#[cfg(feature = "test-hooks")]
pub use migrate::MigrationPause;
