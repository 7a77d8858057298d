//! The region itself: pages and their addresses, anonymous and heap memory, NUMA binding,
//! and the access accounting with its emulated cost. The file and device backing's tests
//! are in `pool_file/tests.rs`.

use super::*;

#[test]
fn heap_region_pages_are_disjoint_and_writable() {
    let region = Region::heap(2 * PAGE_SIZE_BYTES + 17).unwrap();
    assert_eq!(region.page_count(), 2);
    let p0 = region.page_ptr(0).unwrap();
    let p1 = region.page_ptr(1).unwrap();
    assert_eq!(p1.as_ptr() as usize - p0.as_ptr() as usize, PAGE_SIZE_BYTES);
    assert!(region.page_ptr(2).is_none());
    assert_eq!(region.page_index_of(p1.as_ptr()), Some(1));
    let last = p1.as_ptr().wrapping_add(PAGE_SIZE_BYTES - 1);
    assert_eq!(region.page_index_of(last), Some(1));
    assert_eq!(region.page_index_of(last.wrapping_add(1)), None);
    // SAFETY: both bytes are inside the region and nobody else uses it.
    unsafe {
        *p0.as_ptr() = 7;
        *last = 9;
        assert_eq!(*p0.as_ptr(), 7);
        assert_eq!(*last, 9);
    }
    assert_eq!(region.describe(), "heap");
}

#[test]
fn region_smaller_than_a_page_is_empty() {
    let region = Region::heap(PAGE_SIZE_BYTES - 1).unwrap();
    assert_eq!(region.page_count(), 0);
    assert!(region.page_ptr(0).is_none());
    assert!(!region.contains(region.base_ptr().as_ptr()));
}

#[cfg(not(miri))]
#[test]
fn anonymous_region_is_zeroed_and_writable() {
    let region = Region::open(&RegionSpec {
        size_bytes: 3 * PAGE_SIZE_BYTES,
        backing: RegionBacking::Anonymous,
        cost: CostModel::NONE,
    })
    .unwrap();
    assert_eq!(region.page_count(), 3);
    let p2 = region.page_ptr(2).unwrap();
    // SAFETY: inside the region, no other user.
    unsafe {
        assert_eq!(*p2.as_ptr(), 0);
        *p2.as_ptr() = 1;
        assert_eq!(*p2.as_ptr(), 1);
    }
    assert!(region.contains(p2.as_ptr()));
    assert_eq!(region.describe(), "anonymous");
    assert_eq!(region.map_mode(), &MapMode::NotFile);
}

#[cfg(not(miri))]
#[test]
fn missing_numa_node_is_a_clear_error() {
    let nodes = crate::online_nodes();
    let absent = nodes.iter().max().map_or(0, |n| n + 1);
    let err = Region::open(&RegionSpec {
        size_bytes: PAGE_SIZE_BYTES,
        backing: RegionBacking::Numa { node: absent },
        cost: CostModel::NONE,
    })
    .unwrap_err();
    let listed = if nodes.is_empty() {
        "none listed in /sys/devices/system/node".to_string()
    } else {
        nodes
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    assert_eq!(
        err.to_string(),
        format!("NUMA node {absent} does not exist (nodes: {listed})")
    );
}

/// A slow tier larger than its NUMA node is refused at open, naming the node's size
/// (the pages would be faulted in until the node ran out, and the kernel would kill
/// the server).
#[cfg(not(miri))]
#[test]
fn a_numa_node_smaller_than_asked_is_refused() {
    let meminfo = Path::new("/sys/devices/system/node/node0/meminfo");
    if !meminfo.is_file() {
        testkit::skip!(
            "a_numa_node_smaller_than_asked_is_refused",
            "no /sys/devices/system/node/node0/meminfo: the node size check is untested"
        );
        return;
    }
    let asked = 64 * 1024 * 1024 * 1024 * 1024usize; // 64 TiB: more than any node here
    let err = Region::open(&RegionSpec {
        size_bytes: asked,
        backing: RegionBacking::Numa { node: 0 },
        cost: CostModel::NONE,
    })
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("NUMA node 0 has "), "{err}");
    assert!(
        err.ends_with(&format!(
            "fewer than the {asked} asked for: lower --slow-size"
        )),
        "{err}"
    );
}

#[cfg(not(miri))]
#[test]
fn numa_node_zero_binds_when_sysfs_lists_it() {
    if !Path::new("/sys/devices/system/node/node0").is_dir() {
        testkit::skip!(
            "numa_node_zero_binds_when_sysfs_lists_it",
            "no /sys/devices/system/node/node0: mbind to a NUMA node is untested"
        );
        return;
    }
    let region = Region::open(&RegionSpec {
        size_bytes: 2 * PAGE_SIZE_BYTES,
        backing: RegionBacking::Numa { node: 0 },
        cost: CostModel::NONE,
    })
    .unwrap();
    assert_eq!(region.page_count(), 2);
    assert_eq!(region.describe(), "numa:0 (anonymous, mbind MPOL_BIND)");
    let p = region.page_ptr(1).unwrap().as_ptr();
    // SAFETY: inside the region, no other user; faulting it in obeys the policy.
    unsafe {
        *p = 42;
        assert_eq!(*p, 42);
    }
}

#[test]
fn charging_counts_exactly_the_lines_touched() {
    let region = Region::open(&RegionSpec {
        size_bytes: PAGE_SIZE_BYTES,
        backing: RegionBacking::Heap,
        cost: CostModel::HMCACHED,
    })
    .unwrap();
    let base = region.base_ptr().as_ptr();
    // 100 bytes from offset 60: lines 0, 1 and 2 (the base is 4096-aligned).
    region.count_and_wait_read(base.wrapping_add(60), 100);
    assert_eq!(
        region.access_counts(),
        AccessCounts {
            bytes_read: 100,
            bytes_written: 0,
            lines_read: 3,
            lines_written: 0
        }
    );
    region.count_and_wait_write(base.wrapping_add(64), 64);
    region.count_and_wait_write(base.wrapping_add(127), 2);
    assert_eq!(
        region.access_counts(),
        AccessCounts {
            bytes_read: 100,
            bytes_written: 66,
            lines_read: 3,
            lines_written: 3
        }
    );
    // hmcached: 224 ns per line read, 924 per line written (HME's injected delay).
    assert_eq!(region.emulated_wait_ns(), 3 * 224 + 3 * 924);
    assert_eq!(region.cost_model(), CostModel::HMCACHED);
}

#[test]
fn charging_with_bandwidth_adds_the_transfer_time() {
    let cost = CostModel::parse("read_ns=10,write_ns=20,read_gbps=1,write_gbps=0.5").unwrap();
    let region = Region::open(&RegionSpec {
        size_bytes: PAGE_SIZE_BYTES,
        backing: RegionBacking::Heap,
        cost,
    })
    .unwrap();
    let base = region.base_ptr().as_ptr();
    region.count_and_wait_read(base, 1000);
    region.count_and_wait_write(base, 1000);
    assert_eq!(region.emulated_wait_ns(), (10 + 1000) + (20 + 2000));
    assert_eq!(region.access_counts().lines_read, 16);
    assert_eq!(region.access_counts().lines_written, 16);
}

#[test]
fn none_cost_counts_but_never_spins() {
    let region = Region::heap(PAGE_SIZE_BYTES).unwrap();
    assert_eq!(region.cost_model(), CostModel::NONE);
    let base = region.base_ptr().as_ptr();
    for i in 0..1000 {
        region.count_and_wait_read(base.wrapping_add(i), 64);
        region.count_and_wait_write(base.wrapping_add(i), 1);
    }
    let counts = region.access_counts();
    assert_eq!(counts.bytes_read, 64_000);
    assert_eq!(counts.bytes_written, 1000);
    // 64 bytes from an aligned offset touch one line, from any other offset two.
    assert_eq!(counts.lines_read, 1000 + 984);
    assert_eq!(counts.lines_written, 1000);
    assert_eq!(region.emulated_wait_ns(), 0, "a NONE cost charges no wait");
}

#[test]
fn charges_from_many_threads_all_count() {
    let region = Region::heap(PAGE_SIZE_BYTES).unwrap();
    let base = region.base_ptr().as_ptr() as usize;
    std::thread::scope(|scope| {
        for t in 0..4usize {
            let region = &region;
            scope.spawn(move || {
                for i in 0..500usize {
                    region.count_and_wait_read((base + (t * 500 + i) * 64) as *const u8, 64);
                }
            });
        }
    });
    assert_eq!(region.access_counts().lines_read, 2000);
    assert_eq!(region.access_counts().bytes_read, 2000 * 64);
}
