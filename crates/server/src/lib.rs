//! The fogcached server: sockets, connections, command dispatch and configuration.
//! It contains no cache policy; every cache decision is the engine's.

pub mod auth;
pub mod cli;
pub mod connection;
pub mod crash;
pub mod detail;
pub mod dispatch;
pub mod latency;
pub mod listener;
pub mod metrics;
pub mod process;
pub mod registry;
pub mod runtime;
pub mod session;
pub mod slow_tier_fit;
pub mod stats_reply;
pub mod stream;
pub mod tls;
pub mod udp;
pub mod upstream;
pub mod verbose;
pub mod watch;
pub mod worker;
