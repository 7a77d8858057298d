//! The tier flags' unit tests: sizes, backings, costs, the policy and migration knobs,
//! and the storage set-up.

use std::path::PathBuf;

use engine::config::PlacementPolicy;
use tier::{CostModel, RegionBacking, RegionSpec};

use super::super::test_support::{parse_ok, parse_usage, slow_spec, ScratchDir};
use super::{prepare_storage, StorageError};

#[test]
fn default_is_dram_plus_a_pool_file_in_the_data_dir() {
    let config = parse_ok(&[]);
    assert_eq!(config.data_dir, PathBuf::from("fogcached-data"));
    assert_eq!(
        config.engine.slow_tier,
        Some(RegionSpec {
            size_bytes: 1 << 30,
            backing: RegionBacking::File {
                path: PathBuf::from("fogcached-data/slow-tier.pool")
            },
            cost: CostModel::NONE,
        })
    );
    assert_eq!(config.engine.memory_limit_bytes, 64 << 20);
    assert_eq!(config.engine.policy, PlacementPolicy::Hotspot);
    assert!(config.engine.migration_enabled);
    // DRAM only: memcached's LRU unless a policy is named.
    assert_eq!(
        parse_ok(&["--slow-size", "0"]).engine.policy,
        PlacementPolicy::DualLru
    );
    assert_eq!(
        parse_ok(&["--slow-size", "0", "--policy", "hotspot"])
            .engine
            .policy,
        PlacementPolicy::Hotspot
    );
    assert_eq!(config.engine.dram_residency_max_s, 0);
    assert_eq!(config.engine.migration_threads, 1);
    assert_eq!(config.engine.move_queue_max, 1024);
}

#[test]
fn dram_is_the_memory_limit() {
    assert_eq!(
        parse_ok(&["--dram", "128"]).engine.memory_limit_bytes,
        128 << 20
    );
    assert_eq!(
        parse_ok(&["--dram", "2g"]).engine.memory_limit_bytes,
        2 << 30
    );
    assert_eq!(
        parse_ok(&["--memory-limit", "8"]).engine.memory_limit_bytes,
        8 << 20
    );
    // 0 = slow tier only.
    let config = parse_ok(&["--dram", "0"]);
    assert_eq!(config.engine.memory_limit_bytes, 0);
    assert_eq!(slow_spec(&config).size_bytes, 1 << 30);
    assert_eq!(parse_ok(&["-m", "0"]).engine.memory_limit_bytes, 0);
    assert_eq!(
        parse_usage(&["--dram", "512k"]),
        "memory limit (-m/--dram) must be 0 (slow tier only) or at least 1 megabyte"
    );
    assert!(parse_usage(&["--dram", "lots"]).starts_with("invalid memory limit (-m) \"lots\""));
    assert!(parse_usage(&["--dram", "1", "-m", "2"]).contains("--memory-limit"));
}

#[test]
fn slow_size_sets_the_slow_tier() {
    assert_eq!(
        slow_spec(&parse_ok(&["--slow-size", "256"])).size_bytes,
        256 << 20
    );
    assert_eq!(
        slow_spec(&parse_ok(&["--slow-size", "4g"])).size_bytes,
        4 << 30
    );
    // 0 = DRAM only.
    assert_eq!(parse_ok(&["--slow-size", "0"]).engine.slow_tier, None);
    assert_eq!(
        parse_usage(&["--slow-size", "100k"]),
        "slow tier size (--slow-size) must be 0 (DRAM only) or at least 1 megabyte"
    );
    assert_eq!(
        parse_usage(&["--slow-size", "big"]),
        "invalid slow tier size (--slow-size) \"big\": expected a number with an optional k/m/g suffix"
    );
    assert_eq!(
        parse_usage(&["--slow-size", "0", "--dram", "0"]),
        "-m/--dram and --slow-size are both 0: at least one tier needs memory"
    );
}

#[test]
fn slow_path_maps_the_given_file_or_device() {
    let config = parse_ok(&["--slow-path", "/dev/dax0.0", "--slow-size", "2g"]);
    assert_eq!(
        slow_spec(&config).backing,
        RegionBacking::File {
            path: PathBuf::from("/dev/dax0.0")
        }
    );
    assert_eq!(slow_spec(&config).size_bytes, 2 << 30);
    assert!(
        parse_usage(&["--slow-path", ""]).contains("a value is required for '--slow-path <PATH>'")
    );
    assert_eq!(
        parse_usage(&["--slow-path", "/mnt/pmem/pool", "--slow-size", "0"]),
        "--slow-path and --slow-numa-node need a slow tier (--slow-size is 0)"
    );
    let message = parse_usage(&["--slow-path", "/x", "--slow-numa-node", "1"]);
    assert!(
        message.contains("'--slow-path <PATH>' cannot be used with '--slow-numa-node <N>'"),
        "{message}"
    );
}

#[test]
fn slow_numa_node_binds_the_slow_tier() {
    let config = parse_ok(&["--slow-numa-node", "2"]);
    assert_eq!(slow_spec(&config).backing, RegionBacking::Numa { node: 2 });
    assert!(parse_usage(&["--slow-numa-node", "x"]).contains("--slow-numa-node <N>"));
    assert!(parse_usage(&["--slow-numa-node", "-1"]).contains("-1"));
    assert_eq!(
        parse_usage(&["--slow-numa-node", "0", "--slow-size", "0"]),
        "--slow-path and --slow-numa-node need a slow tier (--slow-size is 0)"
    );
}

#[test]
fn slow_cost_takes_presets_and_explicit_figures() {
    assert_eq!(
        slow_spec(&parse_ok(&["--slow-cost", "optane"])).cost,
        CostModel::OPTANE
    );
    assert_eq!(
        slow_spec(&parse_ok(&["--slow-cost", "cxl"])).cost,
        CostModel::CXL
    );
    let hm = slow_spec(&parse_ok(&["--slow-cost", "hmcached"])).cost;
    assert_eq!(hm, CostModel::HMCACHED);
    assert_eq!(
        slow_spec(&parse_ok(&["--slow-cost", "none"])).cost,
        CostModel::NONE
    );
    let explicit = slow_spec(&parse_ok(&[
        "--slow-cost",
        "read_ns=200,write_ns=500,read_gbps=8,write_gbps=2",
    ]))
    .cost;
    assert_eq!(
        explicit,
        CostModel {
            read_latency_ns: 200,
            write_latency_ns: 500,
            read_line_ns: 0,
            write_line_ns: 0,
            read_bandwidth_gbps: 8.0,
            write_bandwidth_gbps: 2.0
        }
    );
    assert_eq!(
        parse_usage(&["--slow-cost", "fast"]),
        "invalid --slow-cost \"fast\": bad slow-tier cost: unknown cost preset \"fast\" (presets: none, optane, cxl, hmcached; or read_ns=..,write_ns=..,read_line_ns=..,write_line_ns=..,read_gbps=..,write_gbps=..)"
    );
    assert!(parse_usage(&["--slow-cost", "read_ns=x"]).contains("read_ns must be a whole number"));
    assert!(parse_usage(&["--slow-cost", "speed=1"]).contains("unknown cost key \"speed\""));
}

#[test]
fn data_dir_holds_the_pool_file() {
    let config = parse_ok(&["--data-dir", "/var/lib/fogcached"]);
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/fogcached"));
    assert_eq!(
        slow_spec(&config).backing,
        RegionBacking::File {
            path: PathBuf::from("/var/lib/fogcached/slow-tier.pool")
        }
    );
    assert!(parse_usage(&["--data-dir", ""]).contains("a value is required for '--data-dir <DIR>'"));
}

#[test]
fn policy_names_the_implemented_policies_and_refuses_the_rest() {
    for (name, policy) in [
        ("dual-lru", PlacementPolicy::DualLru),
        ("hotspot", PlacementPolicy::Hotspot),
        ("hyperbolic", PlacementPolicy::Hyperbolic),
        ("uniform", PlacementPolicy::Uniform),
        ("two-level", PlacementPolicy::TwoLevel),
    ] {
        assert_eq!(parse_ok(&["--policy", name]).engine.policy, policy);
    }
    // And every policy of the registry, a new one included, by its name.
    for &policy in PlacementPolicy::ALL {
        assert_eq!(parse_ok(&["--policy", policy.name()]).engine.policy, policy);
    }
    // Every name of the registry, in its order (the list is not written here, so that a
    // new policy needs no edit; the table above pins the names users type).
    assert_eq!(
        parse_usage(&["--policy", "lfu"]),
        format!(
            "unknown policy \"lfu\" (valid: {})",
            PlacementPolicy::NAMES.join(", ")
        )
    );
    assert_eq!(parse_ok(&["--mq-queues", "3"]).engine.mq_queues, 3);
    assert!(parse_ok(&[]).engine.benefit_reassign);
    assert!(!parse_ok(&["--no-benefit-reassign"]).engine.benefit_reassign);
    assert!(parse_usage(&["--mq-queues", "6"]).contains("mq queues must be between 1 and 5"));
    let tuned = parse_ok(&["--access-period", "50000", "--promotion-margin", "0"]).engine;
    assert_eq!(
        (tuned.access_period_requests, tuned.promotion_margin),
        (50000, 0)
    );
    assert!(parse_usage(&["--promotion-margin", "300"]).contains("--promotion-margin"));
}

#[test]
fn migration_knobs() {
    let config = parse_ok(&[
        "--no-migration",
        "--dram-residency-max-s",
        "30",
        "--migration-threads",
        "4",
        "--move-queue-max",
        "64",
    ]);
    assert!(!config.engine.migration_enabled);
    assert_eq!(config.engine.dram_residency_max_s, 30);
    assert_eq!(config.engine.migration_threads, 4);
    assert_eq!(config.engine.move_queue_max, 64);
    assert!(parse_usage(&["--dram-residency-max-s", "-1"]).contains("-1"));
    assert!(parse_usage(&["--dram-residency-max-s", "soon"]).contains("--dram-residency-max-s"));
    assert_eq!(
        parse_usage(&["--migration-threads", "0"]),
        "--migration-threads must be between 1 and 64, got 0"
    );
    assert_eq!(
        parse_usage(&["--migration-threads", "65"]),
        "--migration-threads must be between 1 and 64, got 65"
    );
    assert_eq!(
        parse_usage(&["--move-queue-max", "0"]),
        "--move-queue-max must be between 1 and 1048576, got 0"
    );
    assert_eq!(
        parse_usage(&["--move-queue-max", "1048577"]),
        "--move-queue-max must be between 1 and 1048576, got 1048577"
    );
    assert!(parse_usage(&["--no-migration=yes"]).contains("--no-migration"));
}

#[test]
fn prepare_storage_creates_the_data_dir_only_when_the_pool_is_in_it() {
    let scratch = ScratchDir::new("prepare");
    let data_dir = scratch.0.join("nested").join("data");
    let dir_arg = data_dir.to_str().unwrap();
    let config = parse_ok(&["--data-dir", dir_arg]);
    assert!(!data_dir.exists(), "parsing must not touch the file system");
    prepare_storage(&config).unwrap();
    assert!(data_dir.is_dir());
    // Idempotent.
    prepare_storage(&config).unwrap();

    let elsewhere = scratch.0.join("other");
    let elsewhere_arg = elsewhere.to_str().unwrap();
    let pool = scratch.0.join("pool");
    let config = parse_ok(&[
        "--data-dir",
        elsewhere_arg,
        "--slow-path",
        pool.to_str().unwrap(),
    ]);
    prepare_storage(&config).unwrap();
    let config = parse_ok(&["--data-dir", elsewhere_arg, "--slow-size", "0"]);
    prepare_storage(&config).unwrap();
    assert!(!elsewhere.exists());

    // A data dir that cannot be created (a file is in the way).
    std::fs::write(scratch.0.join("file"), b"x").unwrap();
    let blocked = scratch.0.join("file").join("data");
    let config = parse_ok(&["--data-dir", blocked.to_str().unwrap()]);
    match prepare_storage(&config) {
        Err(StorageError::Os(message)) => assert!(
            message.starts_with(&format!(
                "cannot create the data directory {}: ",
                blocked.display()
            )),
            "{message}"
        ),
        other => panic!("expected an OS error, got {other:?}"),
    }
}

#[test]
fn prepare_storage_refuses_a_missing_numa_node() {
    let nodes = tier::online_nodes();
    let absent = nodes.iter().max().map_or(0, |n| n + 1);
    let config = parse_ok(&["--slow-numa-node", &absent.to_string()]);
    match prepare_storage(&config) {
        Err(StorageError::Usage(message)) => assert!(
            message.starts_with(&format!("NUMA node {absent} does not exist (nodes: ")),
            "{message}"
        ),
        other => panic!("expected a usage error, got {other:?}"),
    }
    if nodes.contains(&0) {
        prepare_storage(&parse_ok(&["--slow-numa-node", "0"])).unwrap();
    } else {
        testkit::skip!(
            "prepare_storage_refuses_a_missing_numa_node",
            "sysfs lists no NUMA node 0 (nodes: {nodes:?}): accepting an existing node is untested"
        );
    }
}
