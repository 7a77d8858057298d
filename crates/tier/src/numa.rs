//! Binding memory to a NUMA node. A CXL memory expander appears to Linux as a CPU-less
//! NUMA node; binding the slow tier's pages to it puts the slow tier on the expander.

use std::path::Path;
use std::ptr::NonNull;

use crate::TierError;

const NODE_SYSFS_DIR: &str = "/sys/devices/system/node";

/// The NUMA nodes sysfs lists, ascending (empty when sysfs has no NUMA directory).
pub fn online_nodes() -> Vec<u32> {
    nodes_in(Path::new(NODE_SYSFS_DIR))
}

fn nodes_in(dir: &Path) -> Vec<u32> {
    let mut nodes: Vec<u32> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("node"))
                    .and_then(|n| n.parse().ok())
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    nodes.sort_unstable();
    nodes
}

/// Ok when `/sys/devices/system/node/node<node>` exists, else the start-up error
/// "NUMA node N does not exist (nodes: ...)".
pub fn check_node_exists(node: u32) -> Result<(), TierError> {
    check_node_in(Path::new(NODE_SYSFS_DIR), node)
}

fn check_node_in(dir: &Path, node: u32) -> Result<(), TierError> {
    if dir.join(format!("node{node}")).is_dir() {
        return Ok(());
    }
    let nodes = nodes_in(dir);
    let nodes = if nodes.is_empty() {
        format!("none listed in {}", dir.display())
    } else {
        nodes
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(TierError::NumaNodeMissing { node, nodes })
}

/// Ok when NUMA node `node` has at least `asked_bytes` of memory (its `MemTotal` in
/// sysfs), else the start-up error "NUMA node N has ... fewer than ... asked for". A
/// node whose size sysfs does not say is not refused.
pub fn check_node_holds(node: u32, asked_bytes: u64) -> Result<(), TierError> {
    check_node_holds_in(Path::new(NODE_SYSFS_DIR), node, asked_bytes)
}

fn check_node_holds_in(dir: &Path, node: u32, asked_bytes: u64) -> Result<(), TierError> {
    match node_memory_bytes(dir, node) {
        Some(node_bytes) if node_bytes < asked_bytes => Err(TierError::NumaNodeTooSmall {
            node,
            node_bytes,
            asked_bytes,
        }),
        _ => Ok(()),
    }
}

/// The `MemTotal` of `<dir>/node<node>/meminfo` (a line `Node 0 MemTotal:  5597400 kB`),
/// in bytes.
fn node_memory_bytes(dir: &Path, node: u32) -> Option<u64> {
    let meminfo = std::fs::read_to_string(dir.join(format!("node{node}")).join("meminfo")).ok()?;
    meminfo.lines().find_map(|line| {
        let (_, rest) = line.split_once("MemTotal:")?;
        let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// `mbind(MPOL_BIND)` of `[base, base + len)` to `node`. The pages are not touched yet,
/// so they will be faulted in on the node.
pub(crate) fn bind(base: NonNull<u8>, len: usize, node: u32) -> Result<(), String> {
    const BITS_PER_WORD: usize = u64::BITS as usize;
    let node = node as usize;
    let words = node / BITS_PER_WORD + 1;
    let mut mask = vec![0u64; words];
    mask[node / BITS_PER_WORD] |= 1u64 << (node % BITS_PER_WORD);
    // The kernel reads `maxnode - 1` bits, so pass one more than the mask holds.
    let maxnode = (words * BITS_PER_WORD + 1) as libc::c_ulong;
    // SAFETY: base/len is a live mapping this process owns; the mask is `words` u64s
    // (c_ulong on 64-bit Linux) and outlives the call; mbind only changes policy.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            base.as_ptr(),
            len as libc::c_ulong,
            libc::MPOL_BIND as libc::c_ulong,
            mask.as_ptr(),
            maxnode,
            0 as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(format!("mbind: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_node_error_lists_the_nodes() {
        let dir = std::env::temp_dir().join(format!("tier-numa-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("node0")).unwrap();
        std::fs::create_dir_all(dir.join("node2")).unwrap();
        std::fs::create_dir_all(dir.join("cpu0")).unwrap();
        assert!(check_node_in(&dir, 2).is_ok());
        let err = check_node_in(&dir, 7).unwrap_err().to_string();
        assert_eq!(err, "NUMA node 7 does not exist (nodes: 0, 2)");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_node_smaller_than_asked_is_refused_with_its_size() {
        let dir = std::env::temp_dir().join(format!("tier-numa-size-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("node1")).unwrap();
        std::fs::write(
            dir.join("node1").join("meminfo"),
            "Node 1 MemTotal:        2048 kB\nNode 1 MemFree:          1024 kB\n",
        )
        .unwrap();
        assert!(check_node_holds_in(&dir, 1, 2048 * 1024).is_ok());
        let err = check_node_holds_in(&dir, 1, 2048 * 1024 + 1)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "NUMA node 1 has 2097152 bytes of memory, fewer than the 2097153 asked for: \
             lower --slow-size"
        );
        // A node whose size is not listed is not refused (nothing to compare with).
        assert!(check_node_holds_in(&dir, 3, u64::MAX).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
