//! The memory tiers and what runs on them: DRAM's size, the slow tier's size, backing
//! (the pool file in `--data-dir`, `--slow-path`, or a NUMA node) and emulated cost, what
//! a start does with the pool it finds, the placement policy and its knobs, migration;
//! and the storage set-up before the engine opens its regions ([`prepare_storage`]).

use std::fmt;
use std::path::Path;

use engine::config::{
    Durability, PlacementPolicy, PoolMismatch, MIGRATION_THREADS_MAX, MOVE_QUEUE_MAX_LIMIT,
};
use engine::{EngineConfig, SLAB_PAGE_SIZE_BYTES};
use tier::{CostModel, RegionBacking, RegionSpec};

use super::flags::{Flags, POLICY_DEFAULT, POLICY_DEFAULT_DRAM_ONLY};
use super::{parse_size, usage, CliExit, Config, SizeUnit};

/// The pool file's name inside the data directory.
pub const POOL_FILE_NAME: &str = "slow-tier.pool";

/// The tier and placement flags, onto the engine's slow tier spec and policy knobs.
pub(super) fn apply_tier_flags(engine: &mut EngineConfig, cli: &Flags) -> Result<(), CliExit> {
    let page_mb = SLAB_PAGE_SIZE_BYTES >> 20;
    if engine.memory_limit_bytes != 0 && engine.memory_limit_bytes < SLAB_PAGE_SIZE_BYTES as u64 {
        return Err(usage(format!(
            "memory limit (-m/--dram) must be 0 (slow tier only) or at least {page_mb} megabyte"
        )));
    }
    let slow_size_bytes = parse_size(&cli.slow_size, SizeUnit::Megabytes).map_err(|e| {
        usage(format!(
            "invalid slow tier size (--slow-size) {:?}: {e}",
            cli.slow_size
        ))
    })?;
    if slow_size_bytes != 0 && slow_size_bytes < SLAB_PAGE_SIZE_BYTES as u64 {
        return Err(usage(format!(
            "slow tier size (--slow-size) must be 0 (DRAM only) or at least {page_mb} megabyte"
        )));
    }
    let slow_size_bytes = usize::try_from(slow_size_bytes).map_err(|_| {
        usage(format!(
            "slow tier size (--slow-size) too large: {}",
            cli.slow_size
        ))
    })?;
    if engine.memory_limit_bytes == 0 && slow_size_bytes == 0 {
        return Err(usage(
            "-m/--dram and --slow-size are both 0: at least one tier needs memory",
        ));
    }
    let cost = CostModel::parse(&cli.slow_cost)
        .map_err(|e| usage(format!("invalid --slow-cost {:?}: {e}", cli.slow_cost)))?;
    engine.slow_tier = if slow_size_bytes == 0 {
        if cli.slow_path.is_some() || cli.slow_numa_node.is_some() {
            return Err(usage(
                "--slow-path and --slow-numa-node need a slow tier (--slow-size is 0)",
            ));
        }
        None
    } else {
        let backing = match (&cli.slow_path, cli.slow_numa_node) {
            // clap refuses an empty PATH/DIR ("a value is required").
            (Some(path), _) => RegionBacking::File { path: path.clone() },
            (None, Some(node)) => RegionBacking::Numa { node },
            (None, None) => RegionBacking::File {
                path: cli.data_dir.join(POOL_FILE_NAME),
            },
        };
        Some(RegionSpec {
            size_bytes: slow_size_bytes,
            backing,
            cost,
        })
    };

    // Without a slow tier the policy only replaces: the hotspot policy's multi-queue
    // evicts a new item (count 1, lowest queue) before an old working set whose counts
    // are still decaying, and lost most of memcaslap's gets once each new run's keys met
    // the last run's (docs/results/speed.md); memcached's LRU does not.
    let policy_name = cli.policy.as_deref().unwrap_or(if slow_size_bytes == 0 {
        POLICY_DEFAULT_DRAM_ONLY.name()
    } else {
        POLICY_DEFAULT.name()
    });
    engine.policy = match PlacementPolicy::parse(policy_name) {
        Some(policy) => policy,
        None => {
            let valid = PlacementPolicy::NAMES.join(", ");
            return Err(usage(format!(
                "unknown policy {policy_name:?} (valid: {valid})"
            )));
        }
    };
    engine.migration_enabled = !cli.no_migration;
    engine.slow_pool_reset = cli.slow_pool_reset;
    engine.slow_pool_mismatch = PoolMismatch::parse(&cli.slow_pool_mismatch).ok_or_else(|| {
        usage(format!(
            "invalid --slow-pool-mismatch {:?} (valid: {})",
            cli.slow_pool_mismatch,
            PoolMismatch::NAMES.join(", ")
        ))
    })?;
    engine.slow_durability = Durability::parse(&cli.slow_durability).ok_or_else(|| {
        usage(format!(
            "invalid --slow-durability {:?} (valid: {})",
            cli.slow_durability,
            Durability::NAMES.join(", ")
        ))
    })?;
    engine.access_period_requests = cli.access_period;
    engine.promotion_margin = cli.promotion_margin;
    engine.mq_queues = cli.mq_queues;
    engine.benefit_reassign = !cli.no_benefit_reassign;
    if let Some(text) = &cli.uniform_dram_share {
        engine.uniform_dram_share_ppm = Some(engine::parse_fraction(text).map(engine::fraction_to_ppm).ok_or_else(|| {
            usage(format!(
                "invalid --uniform-dram-share {text:?}: expected a fraction in (0, 1] such as 0.25 or 1/4"
            ))
        })?);
    }
    engine.dram_residency_max_s = cli.dram_residency_max_s;
    if cli.migration_threads == 0 || cli.migration_threads > MIGRATION_THREADS_MAX {
        return Err(usage(format!(
            "--migration-threads must be between 1 and {MIGRATION_THREADS_MAX}, got {}",
            cli.migration_threads
        )));
    }
    engine.migration_threads = cli.migration_threads;
    if cli.move_queue_max == 0 || cli.move_queue_max > MOVE_QUEUE_MAX_LIMIT {
        return Err(usage(format!(
            "--move-queue-max must be between 1 and {MOVE_QUEUE_MAX_LIMIT}, got {}",
            cli.move_queue_max
        )));
    }
    engine.move_queue_max = cli.move_queue_max;
    Ok(())
}

/// Why the storage the configuration names could not be made ready.
#[derive(Debug, PartialEq, Eq)]
pub enum StorageError {
    /// The configuration asks for something this machine lacks (a NUMA node): a usage
    /// error.
    Usage(String),
    /// The operating system refused (e.g. the data directory cannot be created).
    Os(String),
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Usage(message) | StorageError::Os(message) => f.write_str(message),
        }
    }
}

/// Start-up checks and preparation before the engine opens its regions: creates the
/// data directory when the slow tier's pool file lives in it, and checks a NUMA node
/// exists. Separate from [`parse`] so that parsing has no side effects.
pub fn prepare_storage(config: &Config) -> Result<(), StorageError> {
    let Some(spec) = &config.engine.slow_tier else {
        return Ok(());
    };
    match &spec.backing {
        RegionBacking::File { path } if path.starts_with(&config.data_dir) => {
            create_data_dir(&config.data_dir)
        }
        RegionBacking::Numa { node } => {
            tier::check_node_exists(*node).map_err(|e| StorageError::Usage(e.to_string()))
        }
        _ => Ok(()),
    }
}

fn create_data_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        StorageError::Os(format!(
            "cannot create the data directory {}: {e}",
            dir.display()
        ))
    })
}

#[cfg(test)]
mod tests;
