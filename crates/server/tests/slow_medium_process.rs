//! The slow medium cannot kill the server. A pool file on a file system with less free
//! space than `--slow-size` used to start, and the server died with SIGBUS at the first
//! store past the free space, losing every item. Now the pool's blocks are reserved at
//! start (`fallocate`): a pool that does not fit is refused with a message naming the
//! file system, its free space and the flags to change, and a pool that fits keeps its
//! blocks even when something else fills the file system afterwards.
//!
//! These tests mount a real 32 MiB tmpfs (as root); where mounting is not permitted
//! they say so through testkit's skip report.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testkit::{fogcached_binary, run_bounded, stat, RawClient, ServerProcess};

/// A 32 MiB tmpfs mounted on a fresh directory, unmounted and removed on drop.
struct SmallTmpfs {
    mount_point: PathBuf,
}

impl SmallTmpfs {
    /// None (and a skip report) when this machine does not let the test mount.
    fn mount(test: &str) -> anyhow::Result<Option<SmallTmpfs>> {
        let mount_point =
            std::env::temp_dir().join(format!("fogcached-tmpfs-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&mount_point)?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=32m", "tmpfs"])
            .arg(&mount_point)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let _ = std::fs::remove_dir(&mount_point);
            testkit::skip!(
                test,
                "cannot mount a 32 MiB tmpfs here (not root, or mounts forbidden)"
            );
            return Ok(None);
        }
        Ok(Some(SmallTmpfs { mount_point }))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.mount_point.join(name)
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount_point).status();
        let _ = std::fs::remove_dir(&self.mount_point);
    }
}

/// Writes `path` until the file system is full; returns the bytes written.
fn fill_file_system(path: &Path) -> anyhow::Result<u64> {
    let mut file = std::fs::File::create(path)?;
    let block = vec![0xF1u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match file.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(written)
}

#[test]
fn a_pool_larger_than_its_file_system_is_refused_at_start() -> anyhow::Result<()> {
    let Some(tmpfs) = SmallTmpfs::mount("a_pool_larger_than_its_file_system_is_refused_at_start")?
    else {
        return Ok(());
    };
    let pool = tmpfs.path("pool");
    let run = run_bounded(
        Command::new(fogcached_binary()?)
            .args([
                "-p",
                "0",
                "-l",
                "127.0.0.1",
                "--slow-size",
                "128m",
                "--slow-path",
            ])
            .arg(&pool),
        Duration::from_secs(30),
    )?;
    assert!(!run.success, "started: {}", run.output);
    assert!(run.output.contains("tmpfs"), "{}", run.output);
    assert!(
        run.output.contains("bytes free, fewer than the pool's"),
        "{}",
        run.output
    );
    assert!(run.output.contains("--slow-size"), "{}", run.output);
    assert!(
        run.output.contains(&pool.display().to_string()),
        "{}",
        run.output
    );
    Ok(())
}

#[test]
fn a_pool_that_fits_survives_its_file_system_filling_up() -> anyhow::Result<()> {
    let Some(tmpfs) = SmallTmpfs::mount("a_pool_that_fits_survives_its_file_system_filling_up")?
    else {
        return Ok(());
    };
    let pool = tmpfs.path("pool");
    let pool_arg = pool.display().to_string();
    let server = ServerProcess::fogcached(&[
        "--dram",
        "2",
        "--slow-size",
        "24m",
        "--slow-path",
        &pool_arg,
        "-I",
        "512k",
    ])?;
    // Someone else takes every free block of the file system.
    let filler_bytes = fill_file_system(&tmpfs.path("filler"))?;
    assert!(
        filler_bytes > 0,
        "the tmpfs had no room left beyond the pool"
    );
    // Three times the cache in values: every page of the pool is written, and the cache
    // evicts instead of dying.
    let mut client = RawClient::connect(server.addr())?;
    let value = vec![b'w'; 50_000];
    let count = 3 * 26 * 1024 * 1024 / value.len();
    for i in 0..count {
        let mut request = format!("set fill{i} 0 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        assert_eq!(
            client.request(&request, b"\r\n")?,
            b"STORED\r\n",
            "set fill{i}"
        );
    }
    let stats = client.stats("")?;
    let evictions: u64 = stat(&stats, "evictions").unwrap_or("0").parse()?;
    assert!(
        evictions > 0,
        "the cache never filled: {evictions} evictions"
    );
    let slow_items: u64 = stat(&stats, "tier_slow_items").unwrap_or("0").parse()?;
    assert!(slow_items > 0, "nothing reached the pool");
    // The latest items read back whole.
    for i in count - 20..count {
        let reply = client.request(format!("get fill{i}\r\n").as_bytes(), b"END\r\n")?;
        assert_eq!(
            reply.len(),
            format!("VALUE fill{i} 0 50000\r\n").len() + 50_002 + 5
        );
    }
    let status = server.stop()?;
    assert_eq!(status.code(), Some(0), "{status}");
    Ok(())
}
