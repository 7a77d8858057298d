//! What a start does with the slow-tier pool it finds, on the real binary: a pool written
//! with other settings starts cold (reformatted, the reason on stderr and in `stats`)
//! unless `--slow-pool-mismatch refuse` asks for a refusal, which leaves the pool as it
//! was; a file that is not a fogcached pool is refused whatever the flags, and left
//! byte for byte as it was.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use testkit::{RawClient, ServerProcess};

/// A unique directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "fogcached-pool-start-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How long a start that should be refused may run before it is killed (and fails).
const REFUSAL_WAIT: Duration = Duration::from_secs(20);

/// The arguments of a start on `pool` with `extra`: the settings every start uses
/// (`--slow-size 8m` unless `extra` changes it), then `extra`.
fn args(pool: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["--slow-path", pool.to_str().unwrap(), "-t", "2"];
    if !extra.contains(&"--slow-size") {
        args.extend(["--slow-size", "8m"]);
    }
    args.extend_from_slice(extra);
    args.iter().map(|s| s.to_string()).collect()
}

fn start(pool: &Path, extra: &[&str]) -> anyhow::Result<ServerProcess> {
    let args = args(pool, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServerProcess::fogcached_capturing_stderr(&args)
}

/// fogcached on `pool` with `extra`, expected to refuse to start: what it printed.
fn refused(pool: &Path, extra: &[&str]) -> anyhow::Result<String> {
    let mut command = std::process::Command::new(testkit::fogcached_binary()?);
    command
        .args(["-p", "0", "-l", "127.0.0.1", "-U", "0"])
        .args(args(pool, extra));
    let run = testkit::run_bounded(&mut command, REFUSAL_WAIT)?;
    anyhow::ensure!(
        !run.success,
        "started on {} with {extra:?}: {}",
        pool.display(),
        run.output
    );
    Ok(run.output)
}

fn set(client: &mut RawClient, key: &str, value: &str) -> anyhow::Result<()> {
    let reply = client.request(&testkit::set_request(key, value.as_bytes()), b"\r\n")?;
    anyhow::ensure!(
        reply == b"STORED\r\n",
        "set {key}: {}",
        testkit::escape(&reply)
    );
    Ok(())
}

/// Whether `get key` answers with a value.
fn hit(client: &mut RawClient, key: &str) -> anyhow::Result<bool> {
    let reply = client.request(format!("get {key}\r\n").as_bytes(), b"END\r\n")?;
    Ok(reply != b"END\r\n")
}

/// The `stats` values the pool's start shows.
fn pool_stats(client: &mut RawClient) -> anyhow::Result<(String, String, String)> {
    let stats = client.stats("")?;
    let get = |name: &str| {
        testkit::stat(&stats, name)
            .unwrap_or("(absent)")
            .to_string()
    };
    Ok((
        get("pool_formatted"),
        get("pool_format_reason"),
        get("pool_settings_changed"),
    ))
}

/// What a file is: its bytes, size and modification time.
#[derive(PartialEq, Debug)]
struct FileState {
    size_bytes: u64,
    modified: SystemTime,
    /// Compared whole (stronger than a checksum of them); shown as a hash.
    bytes: Vec<u8>,
}

impl FileState {
    fn of(path: &Path) -> anyhow::Result<FileState> {
        let meta = std::fs::metadata(path)?;
        Ok(FileState {
            size_bytes: meta.len(),
            modified: meta.modified()?,
            bytes: std::fs::read(path)?,
        })
    }

    fn assert_same(&self, after: &FileState, what: &str) {
        assert_eq!(
            self.size_bytes, after.size_bytes,
            "{what}: the size changed"
        );
        assert!(
            self.bytes == after.bytes,
            "{what}: the bytes changed (FNV-1a {:#x} before, {:#x} after)",
            fnv1a(&self.bytes),
            fnv1a(&after.bytes)
        );
        assert_eq!(self.modified, after.modified, "{what}: the mtime changed");
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `len` bytes that are nobody's pool: a deterministic pseudo-random stream.
fn other_data(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// One geometry setting changed against the settings of [`args`]: the flags, the name the message and
/// `pool_settings_changed` give it, and its value before and after in the message.
struct Change {
    flags: &'static [&'static str],
    name: &'static str,
    before: &'static str,
    after: &'static str,
}

/// Every setting the pool header records, changed in turn.
const CHANGES: [Change; 6] = [
    Change {
        flags: &["-I", "2m"],
        name: "item_size_max",
        before: "1048576",
        after: "2097152",
    },
    Change {
        flags: &["-n", "96"],
        name: "chunk_size",
        before: "48",
        after: "96",
    },
    Change {
        flags: &["-f", "1.5"],
        name: "growth_factor",
        before: "1.25",
        after: "1.5",
    },
    Change {
        flags: &["--slow-size", "16m"],
        name: "slow_size",
        before: "8388608",
        after: "16777216",
    },
    Change {
        flags: &["-o", "slab_chunk_max=256"],
        name: "slab_chunk_max",
        before: "524288",
        after: "262144",
    },
    Change {
        flags: &["-o", "slab_sizes=128-256-512-1024"],
        name: "slab_sizes",
        before: "none",
        after: "128-256-512-1024",
    },
];

/// A start on a pool written with one setting changed starts cold: the pool is
/// reformatted, stderr names the setting with its old and new value, `stats` says the
/// start was cold and why. Each setting is changed and then changed back (a second cold
/// start, the values the other way round); the pool then recovers with the settings it
/// was last written with.
#[test]
fn a_pool_written_with_another_setting_starts_cold_and_says_which() -> anyhow::Result<()> {
    let dir = TempDir::new("cold");
    let pool = dir.path("pool");
    let server = start(&pool, &[])?;
    let mut client = RawClient::connect(server.addr())?;
    assert_eq!(
        pool_stats(&mut client)?,
        ("1".into(), "new_pool".into(), "none".into())
    );
    let settings = client.stats("settings")?;
    assert_eq!(
        testkit::stat(&settings, "slow_pool_mismatch"),
        Some("reset")
    );
    set(&mut client, "kept", "value")?;
    server.stop()?;
    for change in &CHANGES {
        // Changed, then back: both starts are cold, with the values swapped.
        for (flags, old, new) in [
            (change.flags, change.before, change.after),
            (&[][..], change.after, change.before),
        ] {
            let server = start(&pool, flags)?;
            let mut client = RawClient::connect(server.addr())?;
            let what = format!("{} ({flags:?})", change.name);
            assert_eq!(
                pool_stats(&mut client)?,
                ("1".into(), "settings_changed".into(), change.name.into()),
                "{what}"
            );
            assert!(
                !hit(&mut client, "kept")?,
                "{what}: an item of the old pool"
            );
            set(&mut client, "kept", "value")?;
            let text = server.stderr_text();
            server.stop()?;
            let said = format!("{} ", change.name);
            let values = format!("was {old}, now {new}");
            assert!(
                text.contains(&said)
                    && text.contains(&values)
                    && text.contains("starting with a clean cache"),
                "{what}: stderr does not say `{said}... {values}`: {text}"
            );
        }
    }
    // Unchanged: recovered, not formatted.
    let server = start(&pool, &[])?;
    let mut client = RawClient::connect(server.addr())?;
    assert_eq!(
        pool_stats(&mut client)?,
        ("0".into(), "none".into(), "none".into())
    );
    assert!(hit(&mut client, "kept")?);
    server.stop()?;
    Ok(())
}

/// `--slow-pool-mismatch refuse` keeps the refusal: the start fails naming the setting
/// and what to do, and the pool (its size and bytes) is as it was, so that a start with
/// the old settings serves its items. A damaged header of a pool is refused the same
/// way, and by default starts cold saying so.
#[test]
fn slow_pool_mismatch_refuse_refuses_and_leaves_the_pool_as_it_was() -> anyhow::Result<()> {
    let dir = TempDir::new("refuse");
    let pool = dir.path("pool");
    let server = start(&pool, &[])?;
    let mut client = RawClient::connect(server.addr())?;
    set(&mut client, "kept", "value")?;
    server.stop()?;
    let before = FileState::of(&pool)?;
    for change in &CHANGES {
        let mut extra = vec!["--slow-pool-mismatch", "refuse"];
        extra.extend_from_slice(change.flags);
        let text = refused(&pool, &extra)?;
        let values = format!("{} ", change.name);
        assert!(
            text.contains(&values)
                && text.contains(&format!("was {}, now {}", change.before, change.after))
                && text.contains("--slow-pool-mismatch reset"),
            "{}: {text}",
            change.name
        );
        before.assert_same(&FileState::of(&pool)?, change.name);
    }
    let server = start(&pool, &["--slow-pool-mismatch", "refuse"])?;
    let mut client = RawClient::connect(server.addr())?;
    assert!(
        hit(&mut client, "kept")?,
        "the refusals lost the pool's item"
    );
    let settings = client.stats("settings")?;
    assert_eq!(
        testkit::stat(&settings, "slow_pool_mismatch"),
        Some("refuse")
    );
    server.stop()?;
    // A byte of the header's geometry block: the pool is ours (its magic), damaged.
    let mut bytes = std::fs::read(&pool)?;
    bytes[100] ^= 0xFF;
    std::fs::write(&pool, &bytes)?;
    let damaged = FileState::of(&pool)?;
    let text = refused(&pool, &["--slow-pool-mismatch", "refuse"])?;
    assert!(text.contains("damaged"), "{text}");
    damaged.assert_same(&FileState::of(&pool)?, "a damaged header, refused");
    let server = start(&pool, &[])?;
    let mut client = RawClient::connect(server.addr())?;
    assert_eq!(
        pool_stats(&mut client)?,
        ("1".into(), "header_damaged".into(), "none".into())
    );
    assert!(!hit(&mut client, "kept")?);
    let text = server.stderr_text();
    server.stop()?;
    assert!(
        text.contains("damaged") && text.contains("starting with a clean cache"),
        "{text}"
    );
    Ok(())
}

/// `--slow-path` at a file of someone else's data (a mistyped path) is refused, with or
/// without `--slow-pool-reset` and whatever `--slow-pool-mismatch` says, and the file is
/// left as it was: same size, same bytes, same mtime. That holds for a file larger and
/// smaller than the pool, and for one whose first blocks are zeros. A file of zeros
/// holds nothing and is formatted.
#[test]
fn a_file_that_is_not_a_pool_is_refused_and_left_as_it_was() -> anyhow::Result<()> {
    let dir = TempDir::new("foreign");
    let mut zeros_then_data = vec![0u8; 64 * 1024];
    zeros_then_data.extend(other_data(8 * 1024 * 1024 - 64 * 1024));
    let files: [(&str, Vec<u8>); 4] = [
        ("8 MiB of other data", other_data(8 * 1024 * 1024)),
        ("a short text file", b"host=db1\nport=5432\n".to_vec()),
        ("64 KiB of zeros, then data", zeros_then_data),
        ("16 MiB of other data", other_data(16 * 1024 * 1024)),
    ];
    for (what, contents) in &files {
        let path = dir.path("data.bin");
        std::fs::write(&path, contents)?;
        let before = FileState::of(&path)?;
        for extra in [
            &[][..],
            &["--slow-pool-reset"][..],
            &["--slow-pool-mismatch", "refuse"][..],
        ] {
            let text = refused(&path, extra)?;
            assert!(
                text.contains("is not a fogcached pool"),
                "{what} {extra:?}: {text}"
            );
            before.assert_same(&FileState::of(&path)?, &format!("{what} {extra:?}"));
        }
    }
    let zeros = dir.path("zeros.pool");
    std::fs::File::create(&zeros)?.set_len(8 * 1024 * 1024)?;
    let server = start(&zeros, &[])?;
    let mut client = RawClient::connect(server.addr())?;
    assert_eq!(
        pool_stats(&mut client)?,
        ("1".into(), "new_pool".into(), "none".into())
    );
    server.stop()?;
    Ok(())
}
