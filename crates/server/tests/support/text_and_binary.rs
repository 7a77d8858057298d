//! memcached and fogcached side by side, each with a text and a binary connection: what
//! the binary-protocol comparisons (`wire_binary_stat`, `wire_out_of_memory`) start and
//! stop. Each test file adds its own comparisons on [`TextAndBinary`] (an inherent impl
//! in the file: this module is compiled into each test crate that includes it).

use testkit::{RawClient, ServerProcess};

/// The servers' names, in the order of the arrays below (memcached first).
pub const NAMES: [&str; 2] = ["memcached", "fogcached"];

pub struct TextAndBinary {
    pub servers: [ServerProcess; 2],
    pub text: [RawClient; 2],
    pub binary: [RawClient; 2],
}

impl TextAndBinary {
    /// Starts memcached with `memcached_args` and fogcached with `fogcached_args`, and
    /// connects a text and a binary client to each.
    pub fn start(memcached_args: &[&str], fogcached_args: &[&str]) -> anyhow::Result<Self> {
        let servers = [
            ServerProcess::memcached(memcached_args)?,
            ServerProcess::fogcached(fogcached_args)?,
        ];
        let connect = |i: usize| RawClient::connect(servers[i].addr());
        let text = [connect(0)?, connect(1)?];
        let binary = [connect(0)?, connect(1)?];
        Ok(TextAndBinary {
            servers,
            text,
            binary,
        })
    }

    /// Stops both; fogcached must stop cleanly.
    pub fn stop(self) -> anyhow::Result<()> {
        let [memcached, fogcached] = self.servers;
        drop(memcached);
        fogcached.stop()?;
        Ok(())
    }
}
