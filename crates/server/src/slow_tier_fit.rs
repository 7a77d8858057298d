//! Whether the slow tier's pool can stay in memory, said at start. The slow tier is
//! memory-mapped: on DAX (persistent or CXL memory) or tmpfs every access is a memory
//! access, but a pool file on a plain file system (ext4, xfs, ...) is served from the
//! page cache, and a pool larger than the memory the process may keep cached turns cold
//! GETs into major page faults that block a worker thread and every connection on it
//! (issue 26 measured 86 GETs/s, p99 1.1 s). The operator hears it at start: a warning,
//! and the facts at `-v`.

use std::path::{Path, PathBuf};

/// The memory the process may use for the DRAM tier and the pool's page cache together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryBudget {
    pub bytes: u64,
    /// Where the figure comes from (`MemTotal`, or the memory cgroup's limit).
    pub source: String,
}

/// What the start knows of the slow tier's pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolFacts {
    pub path: PathBuf,
    pub pool_bytes: u64,
    /// The DRAM tier's size (`-m`), which the same memory holds first.
    pub dram_bytes: u64,
    /// The file system's name (`ext4`, `tmpfs`, ...).
    pub fs_name: String,
    /// The pool is memory whatever its size: tmpfs, ramfs, a DAX mapping (`MAP_SYNC`
    /// accepted) or a DAX character device.
    pub is_memory: bool,
}

/// The warning for a pool that cannot stay cached in `budget` (`None` when it can, or
/// when it is memory anyway).
pub fn warning(pool: &PoolFacts, budget: &MemoryBudget) -> Option<String> {
    if pool.is_memory {
        return None;
    }
    let cacheable_bytes = budget.bytes.saturating_sub(pool.dram_bytes);
    if pool.pool_bytes <= cacheable_bytes {
        return None;
    }
    Some(format!(
        "the slow tier's pool {} ({} on {}, not DAX) is larger than the memory this \
         process can keep cached ({} of the {} {}, after the DRAM tier's {}): a cold GET \
         will wait for the disk in a worker thread (a major page fault), holding up every \
         connection on it. Put the pool on DAX or tmpfs (--slow-path), or lower \
         --slow-size",
        pool.path.display(),
        mib(pool.pool_bytes),
        pool.fs_name,
        mib(cacheable_bytes),
        mib(budget.bytes),
        budget.source,
        mib(pool.dram_bytes),
    ))
}

/// What `-v` prints of the pool at start.
pub fn verbose_line(pool: &PoolFacts, budget: Option<&MemoryBudget>) -> String {
    let medium = if pool.is_memory {
        "memory"
    } else {
        "page cache over storage"
    };
    let budget = budget.map_or("unknown".to_string(), |b| {
        format!("{} ({})", mib(b.bytes), b.source)
    });
    format!(
        "slow-tier pool {}: {} on {} ({medium}); memory budget {budget}",
        pool.path.display(),
        mib(pool.pool_bytes),
        pool.fs_name,
    )
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes / (1024 * 1024))
}

/// The smaller of the machine's memory and this process's memory cgroup limit.
pub fn memory_budget() -> Option<MemoryBudget> {
    let total = memory_total_bytes().map(|bytes| MemoryBudget {
        bytes,
        source: "machine's memory (MemTotal)".to_string(),
    });
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| cgroup_limit(&text, Path::new("/sys/fs/cgroup")));
    match (total, cgroup) {
        (Some(total), Some(cgroup)) if cgroup.bytes < total.bytes => Some(cgroup),
        (Some(total), _) => Some(total),
        (None, cgroup) => cgroup,
    }
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`).
pub fn memory_total_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The memory limit of the cgroup `/proc/self/cgroup` (`proc_cgroup`) names, under the
/// cgroup file systems mounted at `root`: v1's `memory.limit_in_bytes` or v2's
/// `memory.max`, looked for at the process's cgroup path and, as inside a container
/// that mounts its own cgroup at the root, at the root. No limit ("max", or v1's
/// near-2^63 "unlimited") is `None`.
pub fn cgroup_limit(proc_cgroup: &str, root: &Path) -> Option<MemoryBudget> {
    let mut candidates: Vec<(PathBuf, &str)> = Vec::new();
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            let dir = root.join("memory");
            candidates.push((dir.join(relative).join("memory.limit_in_bytes"), "v1"));
            candidates.push((dir.join("memory.limit_in_bytes"), "v1"));
        } else if controllers.is_empty() {
            candidates.push((root.join(relative).join("memory.max"), "v2"));
            candidates.push((root.join("memory.max"), "v2"));
        }
    }
    candidates.into_iter().find_map(|(file, version)| {
        let text = std::fs::read_to_string(&file).ok()?;
        let bytes: u64 = text.trim().parse().ok()?;
        // v1 writes "no limit" as the largest page-aligned i64.
        (bytes < (1 << 62)).then(|| MemoryBudget {
            bytes,
            source: format!("memory cgroup {version} limit ({})", file.display()),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;

    fn pool(pool_bytes: u64, is_memory: bool) -> PoolFacts {
        PoolFacts {
            path: PathBuf::from("/var/lib/fogcached/pool"),
            pool_bytes,
            dram_bytes: GIB,
            fs_name: "ext4".to_string(),
            is_memory,
        }
    }

    fn budget(bytes: u64) -> MemoryBudget {
        MemoryBudget {
            bytes,
            source: "memory cgroup v1 limit (x)".to_string(),
        }
    }

    #[test]
    fn a_pool_on_storage_larger_than_the_memory_left_after_dram_is_named() {
        // 8 GiB of memory, 1 GiB of DRAM tier: 7 GiB can cache the pool.
        assert_eq!(warning(&pool(7 * GIB, false), &budget(8 * GIB)), None);
        let text = warning(&pool(7 * GIB + MIB, false), &budget(8 * GIB)).expect("warns");
        for part in [
            "/var/lib/fogcached/pool",
            "7169 MiB on ext4",
            "7168 MiB of the 8192 MiB memory cgroup v1 limit",
            "DRAM tier's 1024 MiB",
            "major page fault",
            "--slow-size",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
    }

    #[test]
    fn a_pool_that_is_memory_is_never_named_whatever_its_size() {
        assert_eq!(warning(&pool(100 * GIB, true), &budget(GIB)), None);
    }

    #[test]
    fn the_cgroup_limit_is_found_at_the_process_path_or_at_the_root_and_no_limit_is_none() {
        let dir = testkit::ScratchDir::new("cgroup-limit");
        let root = dir.path();
        let v1 = "4:memory:/process_api/abc\n0::/\n";
        // Mounted at the root of the container: the file at the root.
        std::fs::create_dir_all(root.join("memory")).unwrap();
        std::fs::write(root.join("memory/memory.limit_in_bytes"), "268435456\n").unwrap();
        let found = cgroup_limit(v1, root).expect("at the root");
        assert_eq!(found.bytes, 256 * MIB);
        assert!(found.source.contains("v1"), "{}", found.source);
        // The process's own cgroup directory wins.
        std::fs::create_dir_all(root.join("memory/process_api/abc")).unwrap();
        std::fs::write(
            root.join("memory/process_api/abc/memory.limit_in_bytes"),
            "134217728",
        )
        .unwrap();
        assert_eq!(cgroup_limit(v1, root).unwrap().bytes, 128 * MIB);
        // v1's "unlimited".
        std::fs::write(
            root.join("memory/process_api/abc/memory.limit_in_bytes"),
            "9223372036854771712",
        )
        .unwrap();
        std::fs::remove_file(root.join("memory/memory.limit_in_bytes")).unwrap();
        assert_eq!(cgroup_limit(v1, root), None);
        // v2.
        let v2 = "0::/user.slice/app\n";
        std::fs::create_dir_all(root.join("user.slice/app")).unwrap();
        std::fs::write(root.join("user.slice/app/memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_limit(v2, root), None);
        std::fs::write(root.join("user.slice/app/memory.max"), "1073741824\n").unwrap();
        let found = cgroup_limit(v2, root).unwrap();
        assert_eq!((found.bytes, found.source.contains("v2")), (GIB, true));
    }
}
