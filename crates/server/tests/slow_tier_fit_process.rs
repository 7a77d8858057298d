//! A slow tier that is the wrong tool says so at start (issue 26, item 8): a pool file on
//! a plain file system, larger than the memory the process may keep cached once the DRAM
//! tier has its share, makes every cold GET a major page fault in a worker thread. The
//! server starts (and serves), but names it: a warning, and the facts at `-v`.
//!
//! The memory is held small by a real memory cgroup (v1, as root): the server is started
//! through a two-line wrapper that enters the cgroup and `exec`s it. Where cgroups cannot
//! be made, the test says so through testkit's skip report.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use testkit::{fogcached_binary, stat, RawClient, ScratchDir, ServerProcess};

const MIB: u64 = 1024 * 1024;

/// A v1 memory cgroup with a limit, removed on drop (after the processes in it ended).
struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    fn new(test: &str, limit_bytes: u64) -> Option<MemoryCgroup> {
        let root = Path::new("/sys/fs/cgroup/memory");
        let dir = root.join(format!("fogcached-test-{}-{test}", std::process::id()));
        let made = std::fs::create_dir(&dir).is_ok()
            && std::fs::write(dir.join("memory.limit_in_bytes"), limit_bytes.to_string()).is_ok();
        if !made {
            let _ = std::fs::remove_dir(&dir);
            testkit::skip!(
                test,
                "cannot make a v1 memory cgroup under {}",
                root.display()
            );
            return None;
        }
        Some(MemoryCgroup { dir })
    }

    /// A script named `fogcached` in `dir` that enters this cgroup and runs the server
    /// under test with its arguments.
    fn wrapper(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let script = dir.join("fogcached");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho $$ > '{}/cgroup.procs' || exit 97\nexec '{}' \"$@\"\n",
                self.dir.display(),
                fogcached_binary()?.display()
            ),
        )?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        Ok(script)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Whether `dir` is on a file system whose pages are storage (not tmpfs): the case the
/// warning is for.
fn on_storage(test: &str, dir: &Path) -> bool {
    let file_system = tier::file_system_at(dir);
    if file_system.is_memory {
        testkit::skip!(
            test,
            "{} is on {}, which is memory",
            dir.display(),
            file_system.name
        );
    }
    !file_system.is_memory
}

/// A server started in its own memory cgroup, with its pool file. Fields drop in order:
/// the server is stopped before its cgroup is removed and its directory deleted.
struct InCgroup {
    server: ServerProcess,
    pool: String,
    _cgroup: MemoryCgroup,
    _scratch: ScratchDir,
}

/// The server under test with `-m 64 --slow-size <slow_size> -v`, its pool on a scratch
/// directory, in a fresh memory cgroup of `limit_bytes`. `None` (a skip reported) where
/// the scratch directory is memory or no cgroup can be made.
fn start_in_cgroup(
    test: &str,
    cgroup_tag: &str,
    limit_bytes: u64,
    slow_size: &str,
) -> anyhow::Result<Option<InCgroup>> {
    let scratch = ScratchDir::new(cgroup_tag);
    if !on_storage(test, scratch.path()) {
        return Ok(None);
    }
    let Some(cgroup) = MemoryCgroup::new(cgroup_tag, limit_bytes) else {
        return Ok(None);
    };
    let wrapper = cgroup.wrapper(scratch.path())?;
    let pool = scratch.path().join("pool").display().to_string();
    let server = ServerProcess::start_capturing_stderr(
        wrapper.to_str().unwrap(),
        &[
            "-m",
            "64",
            "--slow-size",
            slow_size,
            "--slow-path",
            &pool,
            "-v",
        ],
    )?;
    Ok(Some(InCgroup {
        server,
        pool,
        _cgroup: cgroup,
        _scratch: scratch,
    }))
}

#[test]
fn a_pool_larger_than_the_memory_the_cgroup_leaves_is_named_at_start() -> anyhow::Result<()> {
    let test = "a_pool_larger_than_the_memory_the_cgroup_leaves_is_named_at_start";
    let Some(started) = start_in_cgroup(test, "pool-too-large", 256 * MIB, "512m")? else {
        return Ok(());
    };
    let printed = started.server.stderr_text();
    assert!(
        printed.contains("fogcached: warning: the slow tier's pool"),
        "no warning in:\n{printed}"
    );
    for part in [
        started.pool.as_str(),
        "512 MiB on ",
        "192 MiB of the 256 MiB memory cgroup v1 limit",
        "major page fault",
        "--slow-size",
    ] {
        assert!(printed.contains(part), "{part:?} missing from:\n{printed}");
    }
    // -v: what the pool is on.
    assert!(
        printed.contains("(page cache over storage); memory budget 256 MiB"),
        "{printed}"
    );
    // A warning, not a refusal: the server serves.
    let mut client = RawClient::connect(started.server.addr())?;
    client.send(b"set k 0 0 1\r\nv\r\nget k\r\n")?;
    assert_eq!(
        client.read_until(b"END\r\n")?,
        b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    );
    let stats = client.stats("")?;
    assert_eq!(
        stat(&stats, "limit_maxbytes"),
        Some((64 * MIB).to_string().as_str())
    );
    Ok(())
}

#[test]
fn a_pool_the_memory_can_keep_cached_is_not_named() -> anyhow::Result<()> {
    let test = "a_pool_the_memory_can_keep_cached_is_not_named";
    let Some(started) = start_in_cgroup(test, "pool-fits", 512 * MIB, "256m")? else {
        return Ok(());
    };
    let printed = started.server.stderr_text();
    assert!(
        !printed.contains("warning: the slow tier's pool"),
        "{printed}"
    );
    assert!(
        printed.contains("slow-tier pool "),
        "-v names the pool:\n{printed}"
    );
    Ok(())
}
