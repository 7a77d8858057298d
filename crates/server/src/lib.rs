//! The fogcached server: sockets, connections, command dispatch and configuration.
//! It contains no cache policy; every cache decision is the engine's.

pub mod dispatch;
pub mod session;
pub mod stats;
