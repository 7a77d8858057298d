//! The fogcached cache engine: items, their index, slab memory per tier, the segmented
//! LRU, expiry and statistics. It knows nothing of sockets or wire formats; the `server`
//! crate maps requests onto the operations of [`Engine`].

pub mod api;
pub mod clock;
pub mod config;
mod cache;

pub use api::*;
pub use cache::Engine;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{ConfigError, EngineConfig, KEY_LENGTH_MAX_BYTES, SLAB_PAGE_SIZE_BYTES};
