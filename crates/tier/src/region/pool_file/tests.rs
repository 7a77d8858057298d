//! Pool files and devices: what an open shows the vet and leaves untouched, the file kinds
//! refused, the blocks reserved (with and without `fallocate`), the lock, `MAP_SYNC` and
//! its fallback, the device size check, and the pool header in front of the pages.

// Under Miri only the device size check runs (it has no files to map), so the helpers
// of the others go unused there.
#![cfg_attr(miri, allow(dead_code, unused_imports))]

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::device_data_bytes;
use crate::region::PoolContents;
use crate::region::{MapMode, Region, RegionBacking, RegionSpec, TierError, PAGE_SIZE_BYTES};
use crate::CostModel;
use testkit::ScratchDir;

fn file_spec(path: &Path, size_bytes: usize) -> RegionSpec {
    RegionSpec {
        size_bytes,
        backing: RegionBacking::File {
            path: path.to_path_buf(),
        },
        cost: CostModel::NONE,
    }
}

/// Whether the file system holding `path` is mounted with a `dax` option.
fn on_dax_mount(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let path = path.canonicalize().unwrap();
    mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() >= 4).then(|| (fields[1].to_string(), fields[3].to_string()))
        })
        .filter(|(mount_point, _)| path.starts_with(mount_point))
        .max_by_key(|(mount_point, _)| mount_point.len())
        .map(|(_, options)| options.split(',').any(|o| o.starts_with("dax")))
        .unwrap_or(false)
}

#[cfg(not(miri))]
#[test]
fn file_region_persists_bytes_across_reopen() {
    let dir = ScratchDir::new("tier-persist");
    let path = dir.path().join("slow-tier.pool");
    let spec = file_spec(&path, 2 * PAGE_SIZE_BYTES);
    {
        let region = Region::open(&spec).unwrap();
        assert_eq!(region.page_count(), 2);
        let p1 = region.page_ptr(1).unwrap().as_ptr();
        // SAFETY: inside the region, no other user.
        unsafe {
            assert_eq!(*p1, 0, "a new pool file reads as zeroes");
            std::ptr::copy_nonoverlapping(b"fogcached".as_ptr(), p1.add(100), 9);
        }
        region.flush().unwrap();
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        2 * PAGE_SIZE_BYTES as u64
    );
    let region = Region::open(&spec).unwrap();
    let p1 = region.page_ptr(1).unwrap().as_ptr();
    let mut got = [0u8; 9];
    // SAFETY: inside the region, no other user.
    unsafe { std::ptr::copy_nonoverlapping(p1.add(100), got.as_mut_ptr(), 9) };
    assert_eq!(&got, b"fogcached");
    assert!(region
        .describe()
        .starts_with(&format!("file:{} (MAP_SHARED", path.display())));
}

#[cfg(not(miri))]
#[test]
fn file_region_reserves_its_blocks_and_never_shrinks_the_file() {
    use std::os::unix::fs::MetadataExt;
    let dir = ScratchDir::new("tier-reserve");
    let path = dir.path().join("pool");
    let region = Region::open(&file_spec(&path, 64 * PAGE_SIZE_BYTES)).unwrap();
    drop(region);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 64 * PAGE_SIZE_BYTES as u64);
    // st_blocks counts 512-byte blocks actually allocated: all 64 MiB, so no store
    // to the mapping can meet a full file system (SIGBUS).
    assert!(
        meta.blocks() * 512 >= 64 * PAGE_SIZE_BYTES as u64,
        "only {} blocks reserved",
        meta.blocks()
    );
    let smaller = Region::open(&file_spec(&path, 2 * PAGE_SIZE_BYTES)).unwrap();
    assert_eq!(smaller.page_count(), 2);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        64 * PAGE_SIZE_BYTES as u64
    );
}

/// A pool header is mapped apart from the pages: the first bytes of the file are
/// the header, the region's page 0 starts right after it, and both reach the file.
#[cfg(not(miri))]
#[test]
fn a_pool_header_precedes_the_pages_in_the_file() {
    use std::io::{Read, Seek, SeekFrom};
    use std::sync::atomic::Ordering;
    let dir = ScratchDir::new("tier-header");
    let path = dir.path().join("pool");
    let header_bytes = 8192;
    let (region, header) = Region::open_with_header(
        &file_spec(&path, 4 * PAGE_SIZE_BYTES),
        header_bytes,
        &|_, _| Ok(()),
    )
    .unwrap();
    let header = header.expect("a file pool has a header");
    assert!(header.blank());
    assert_eq!(header.len(), header_bytes);
    assert_eq!(region.page_count(), 4);
    header
        .u64_at(8)
        .store(0x1122_3344_5566_7788, Ordering::Relaxed);
    header.bytes()[header_bytes - 1].store(0x5A, Ordering::Relaxed);
    let page0 = region.page_ptr(0).unwrap().as_ptr();
    // SAFETY: page 0 is mapped and owned by this test.
    unsafe { std::ptr::write_bytes(page0, 0xC3, 16) };
    header.persist(0, header_bytes).unwrap();
    region.persist(page0, 16).unwrap();
    drop((region, header));
    let mut file = std::fs::File::open(&path).unwrap();
    assert_eq!(
        file.metadata().unwrap().len(),
        (header_bytes + 4 * PAGE_SIZE_BYTES) as u64
    );
    let mut bytes = vec![0u8; header_bytes + 16];
    file.seek(SeekFrom::Start(0)).unwrap();
    file.read_exact(&mut bytes).unwrap();
    assert_eq!(&bytes[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(bytes[header_bytes - 1], 0x5A);
    assert_eq!(&bytes[header_bytes..], &[0xC3; 16]);
    // Reopened: not blank, the header reads back. (Another test forking a child
    // may hold a duplicate of our descriptor, and so the lock, until its exec.)
    let reopened = (0..100)
        .find_map(|_| {
            let opened = Region::open_with_header(
                &file_spec(&path, 4 * PAGE_SIZE_BYTES),
                header_bytes,
                &|_, _| Ok(()),
            )
            .ok();
            if opened.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            opened
        })
        .expect("reopen the pool");
    let header = reopened.1.unwrap();
    assert!(!header.blank());
    assert_eq!(
        header.u64_at(8).load(Ordering::Relaxed),
        0x1122_3344_5566_7788
    );
    // Other backings have no header.
    let (_, none) = Region::open_with_header(
        &RegionSpec {
            size_bytes: PAGE_SIZE_BYTES,
            backing: RegionBacking::Anonymous,
            cost: CostModel::NONE,
        },
        header_bytes,
        &|_, _| Ok(()),
    )
    .unwrap();
    assert!(none.is_none());
}

/// What a file holds, as the open shows it to the vet: its first `header_bytes`, or
/// `Blank` when there is nothing but zeros in it.
#[cfg(not(miri))]
fn contents_seen(path: &Path, header_bytes: usize) -> Option<Vec<u8>> {
    let seen = std::cell::RefCell::new(None);
    let vet = |contents: PoolContents<'_>, _| {
        *seen.borrow_mut() = match contents {
            PoolContents::Blank => Some(None),
            PoolContents::Data(bytes) => Some(Some(bytes.to_vec())),
        };
        Err("seen".to_string())
    };
    let refused =
        Region::open_with_header(&file_spec(path, 2 * PAGE_SIZE_BYTES), header_bytes, &vet);
    assert!(matches!(refused, Err(TierError::Refused(ref r)) if r == "seen"));
    seen.into_inner().expect("the vet was asked")
}

/// A file the vet refuses is left exactly as it was: no extension, no `fallocate`
/// (which would change its mtime), no byte written; and what the vet is shown is the
/// file's own first bytes, zero-padded when the file is shorter than the header.
#[cfg(not(miri))]
#[test]
fn a_file_the_vet_refuses_is_left_as_it_was() {
    let dir = ScratchDir::new("tier-vet");
    let header_bytes = 8192;
    for len in [100, 3 * PAGE_SIZE_BYTES + 5] {
        let path = dir.path().join(format!("other-{len}"));
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8 | 1
            })
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let seen = contents_seen(&path, header_bytes).expect("not blank");
        let mut expected = bytes[..len.min(header_bytes)].to_vec();
        expected.resize(header_bytes, 0);
        assert_eq!(seen, expected, "{len} bytes");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), len as u64);
        assert_eq!(meta.modified().unwrap(), mtime);
        assert!(
            std::fs::read(&path).unwrap() == bytes,
            "{len} bytes changed"
        );
    }
}

/// `Blank` means zeros only: a new file, an empty one, a sparse or written file of
/// zeros; a file with a single non-zero byte anywhere (past the header, in a sparse
/// file's data, or at its very end) is data.
#[cfg(not(miri))]
#[test]
fn only_a_file_of_zeros_is_blank() {
    use std::os::unix::fs::FileExt;
    let dir = ScratchDir::new("tier-blank");
    let header_bytes = 8192;
    let new = dir.path().join("new");
    assert_eq!(contents_seen(&new, header_bytes), None);
    assert!(!new.exists() || std::fs::metadata(&new).unwrap().len() == 0);
    let file = |name: &str, len: u64, byte_at: Option<u64>, written: bool| {
        let path = dir.path().join(name);
        let f = std::fs::File::create(&path).unwrap();
        if written {
            f.write_all_at(&vec![0u8; len as usize], 0).unwrap();
        } else {
            f.set_len(len).unwrap();
        }
        if let Some(at) = byte_at {
            f.write_all_at(&[7], at).unwrap();
        }
        path
    };
    let mib = PAGE_SIZE_BYTES as u64;
    assert_eq!(
        contents_seen(&file("empty", 0, None, false), header_bytes),
        None
    );
    assert_eq!(
        contents_seen(&file("sparse", 9 * mib, None, false), header_bytes),
        None
    );
    assert_eq!(
        contents_seen(&file("zeros", 3 * mib, None, true), header_bytes),
        None
    );
    for (name, len, at, written) in [
        ("past-header", 3 * mib, 8192 + 17, true),
        ("sparse-data", 9 * mib, 6 * mib + 3, false),
        ("last-byte", 3 * mib, 3 * mib - 1, true),
    ] {
        let seen = contents_seen(&file(name, len, Some(at), written), header_bytes);
        let zeros = seen
            .as_ref()
            .map(|b| b.len() == header_bytes && b.iter().all(|&x| x == 0));
        assert_eq!(zeros, Some(true), "{name}: None is blank");
    }
}

/// A block device, a directory or a FIFO is refused before it is opened for writing
/// (the vet is never asked): the slow tier maps regular files and DAX character
/// devices only.
#[cfg(not(miri))]
#[test]
fn a_block_device_a_directory_or_a_fifo_is_refused_unopened() {
    let dir = ScratchDir::new("tier-kinds");
    let never = |_: PoolContents<'_>, _| -> Result<(), String> { panic!("the vet was asked") };
    let refusal = |path: &Path| {
        Region::open_with_header(&file_spec(path, 2 * PAGE_SIZE_BYTES), 8192, &never)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| panic!("{} was opened", path.display()))
    };
    let text = refusal(dir.path());
    assert!(text.contains("a directory"), "{text}");
    let fifo = dir.path().join("fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let text = refusal(&fifo);
    assert!(text.contains("neither a regular file"), "{text}");
    // A block device node: made here (a loop device's numbers; it is never opened),
    // else any the machine has.
    let node = dir.path().join("blockdev");
    let c_node = std::ffi::CString::new(node.to_str().unwrap()).unwrap();
    // SAFETY: mknod with a valid NUL-terminated path; it only makes a node.
    let made = unsafe {
        libc::mknod(
            c_node.as_ptr(),
            libc::S_IFBLK | 0o600,
            libc::makedev(7, 250),
        )
    } == 0;
    let block = if made {
        Some(node)
    } else {
        std::fs::read_dir("/dev").ok().and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device()))
        })
    };
    match block {
        Some(path) => {
            let text = refusal(&path);
            assert!(
                text.contains("a block device") && text.contains("-o dax"),
                "{text}"
            );
        }
        None => testkit::skip!(
            "a_block_device_a_directory_or_a_fifo_is_refused_unopened",
            "no block device node here and mknod is not permitted"
        ),
    }
}

/// A pool larger than its file system's free space is refused at open with what to
/// change, instead of dying with SIGBUS at the first store past the free space.
#[cfg(not(miri))]
#[test]
fn a_pool_larger_than_the_free_space_is_refused_naming_the_file_system() {
    let dir = ScratchDir::new("tier-tmpfs");
    let mount = dir.path().join("small");
    std::fs::create_dir_all(&mount).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=32m", "tmpfs"])
        .arg(&mount)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        testkit::skip!(
            "a_pool_larger_than_the_free_space_is_refused_naming_the_file_system",
            "cannot mount a 32 MiB tmpfs here (not root, or mounts forbidden)"
        );
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mount.clone());
    let path = mount.join("pool");
    let err = Region::open(&file_spec(&path, 128 * PAGE_SIZE_BYTES))
        .unwrap_err()
        .to_string();
    assert!(err.contains("tmpfs"), "{err}");
    assert!(err.contains("bytes free, fewer than the pool's"), "{err}");
    assert!(err.contains("--slow-size"), "{err}");
    assert!(!err.contains("  "), "a message with a run of spaces: {err}");
    // One that fits opens, and every page can be written.
    let region = Region::open(&file_spec(&path, 16 * PAGE_SIZE_BYTES)).unwrap();
    for page in 0..region.page_count() {
        let p = region.page_ptr(page).unwrap().as_ptr();
        // SAFETY: the page is mapped and owned by this test.
        unsafe { std::ptr::write_bytes(p, 0xAB, PAGE_SIZE_BYTES) };
    }
    region.flush().unwrap();
}

/// A small ext2 file system in a loop-mounted image: ext2 files have no extents, so
/// `fallocate` answers `EOPNOTSUPP` there. Unmounted and removed on drop.
struct Ext2Mount {
    dir: ScratchDir,
    mount: PathBuf,
}

impl Ext2Mount {
    /// None when this machine cannot make one (not root, no `mkfs.ext2`, no loop
    /// devices, or mounts forbidden).
    fn new(tag: &str, size_mib: u64) -> Option<Ext2Mount> {
        let dir = ScratchDir::new(&format!("tier-{tag}"));
        let image = dir.path().join("image");
        let mount = dir.path().join("mnt");
        std::fs::create_dir_all(&mount).ok()?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(size_mib * 1024 * 1024))
            .ok()?;
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            std::process::Command::new(program)
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // No blocks reserved for root, so the free space is what a root server sees.
        let made = run(
            "mkfs.ext2",
            &[
                "-q".as_ref(),
                "-F".as_ref(),
                "-m".as_ref(),
                "0".as_ref(),
                image.as_os_str(),
            ],
        );
        let mounted = made
            && run(
                "mount",
                &[
                    "-o".as_ref(),
                    "loop".as_ref(),
                    image.as_os_str(),
                    mount.as_os_str(),
                ],
            );
        mounted.then_some(Ext2Mount { dir, mount })
    }
}

impl Drop for Ext2Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(&self.mount)
            .status();
        let _ = &self.dir;
    }
}

/// Writes a file in `dir` until its file system is full.
fn fill_file_system(dir: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0xF1u8; 64 * 1024];
    loop {
        match file.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling the file system: {e}"),
        }
    }
}

/// On a file system that cannot preallocate (`fallocate` answers `EOPNOTSUPP`), a
/// pool that fits has its blocks written at open, so that filling the file system
/// afterwards cannot make a store to the mapping die of SIGBUS; a reopened pool keeps
/// its bytes (and needs no free space for the blocks it holds); one that does not fit
/// is refused naming the file system and the flags.
#[cfg(not(miri))]
#[test]
fn a_pool_on_a_file_system_without_fallocate_is_written_out_at_open() {
    let test = "a_pool_on_a_file_system_without_fallocate_is_written_out_at_open";
    let Some(fs) = Ext2Mount::new("ext2", 24) else {
        testkit::skip!(
            test,
            "cannot make and loop-mount an ext2 image here (not root, no mkfs.ext2 or no loop devices)"
        );
        return;
    };
    let probe = std::fs::File::create(fs.mount.join("probe")).unwrap();
    // SAFETY: fallocate on an open descriptor with a valid range.
    let rc = unsafe { libc::fallocate(probe.as_raw_fd(), 0, 0, 4096) };
    let error = std::io::Error::last_os_error().raw_os_error();
    if rc == 0 || error != Some(libc::EOPNOTSUPP) {
        testkit::skip!(
            test,
            "fallocate works on this kernel's ext2: the fallback is not exercised"
        );
        return;
    }
    drop(probe);
    let path = fs.mount.join("pool");
    let pages = 8;
    let region = Region::open(&file_spec(&path, pages * PAGE_SIZE_BYTES)).unwrap();
    let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
    assert!(
        allocated >= (pages * PAGE_SIZE_BYTES) as u64,
        "the pool has {allocated} bytes of blocks, fewer than its {} bytes",
        pages * PAGE_SIZE_BYTES
    );
    fill_file_system(&fs.mount);
    // Every page written once the file system is full: SIGBUS here without the
    // reservation.
    for page in 0..region.page_count() {
        let p = region.page_ptr(page).unwrap().as_ptr();
        // SAFETY: the page is mapped and owned by this test.
        unsafe { std::ptr::write_bytes(p, 0xAB, PAGE_SIZE_BYTES) };
    }
    region.flush().unwrap();
    drop(region);
    // Reopened on the full file system: accepted, and the bytes are still there.
    let region = Region::open(&file_spec(&path, pages * PAGE_SIZE_BYTES)).unwrap();
    for page in 0..region.page_count() {
        let p = region.page_ptr(page).unwrap().as_ptr();
        // SAFETY: the page is mapped; nothing else writes it.
        let bytes = unsafe { std::slice::from_raw_parts(p, PAGE_SIZE_BYTES) };
        assert!(bytes.iter().all(|&b| b == 0xAB), "page {page} changed");
    }
    drop(region);
    std::fs::remove_file(fs.mount.join("filler")).unwrap();
    let err = Region::open(&file_spec(&fs.mount.join("big"), 64 * PAGE_SIZE_BYTES))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot preallocate"), "{err}");
    assert!(err.contains("ext2/3/4"), "{err}");
    assert!(err.contains("--slow-size"), "{err}");
}

/// The device DAX size check (the open reads the size from sysfs, which only a DAX
/// device has, so the check is tested here on its own): a device smaller than the
/// pool is refused naming both sizes and the flag; one that holds it maps a whole
/// number of the device's 2 MiB alignment units.
#[test]
fn a_dax_device_smaller_than_asked_is_refused() {
    let mib = 1024 * 1024;
    let header = 4096;
    assert_eq!(
        device_data_bytes(64 * mib, header, 64 * mib),
        Err(format!(
            "the device holds {} bytes, fewer than the {} asked for (lower --slow-size)",
            64 * mib,
            64 * mib + header
        ))
    );
    assert!(device_data_bytes(64 * mib, usize::MAX, 1).is_err());
    assert_eq!(
        device_data_bytes(64 * mib + header, header, 64 * mib),
        Ok(64 * mib)
    );
    assert_eq!(device_data_bytes(64 * mib, header, 5 * mib), Ok(4 * mib));
    assert_eq!(
        device_data_bytes(64 * mib, header, mib),
        Err(format!("a device mapping needs at least {} bytes", 2 * mib))
    );
}

#[cfg(not(miri))]
#[test]
fn a_pool_in_use_is_refused_until_released() {
    let dir = ScratchDir::new("tier-lock");
    let path = dir.path().join("pool");
    let first = Region::open(&file_spec(&path, PAGE_SIZE_BYTES)).unwrap();
    let err = Region::open(&file_spec(&path, PAGE_SIZE_BYTES))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "cannot map {}: in use by another process (another fogcached on the same pool?)",
            path.display()
        )
    );
    drop(first);
    assert!(Region::open(&file_spec(&path, PAGE_SIZE_BYTES)).is_ok());
}

/// The environment variable naming a directory on a DAX mount, for the `MAP_SYNC`
/// check; without one (most machines, CI) that check is skipped, and says so.
const DAX_DIR_ENV: &str = "FOGCACHED_TEST_DAX_DIR";

#[cfg(not(miri))]
#[test]
fn map_sync_fallback_is_reported() {
    let dir = ScratchDir::new("tier-mapsync");
    if on_dax_mount(dir.path()) {
        testkit::skip!(
            "map_sync_fallback_is_reported",
            "the temp dir {} is on a DAX mount, where MAP_SYNC succeeds: the fallback is not exercised",
            dir.path().display()
        );
        return;
    }
    let path = dir.path().join("pool");
    let region = Region::open(&file_spec(&path, PAGE_SIZE_BYTES)).unwrap();
    // tmpfs and page-cache file systems refuse MAP_SYNC with EOPNOTSUPP.
    match region.map_mode() {
        MapMode::SharedFallback { reason } => assert!(!reason.is_empty()),
        other => panic!("expected the MAP_SYNC fallback, got {other:?}"),
    }
    assert!(
        region
            .describe()
            .contains("(MAP_SHARED, MAP_SYNC unavailable: "),
        "{}",
        region.describe()
    );
}

#[cfg(not(miri))]
#[test]
fn map_sync_is_used_on_a_dax_mount() {
    let Some(dax_dir) = std::env::var_os(DAX_DIR_ENV).map(PathBuf::from) else {
        testkit::skip!(
            "map_sync_is_used_on_a_dax_mount",
            "${DAX_DIR_ENV} is not set (no DAX file system here): MAP_SYNC itself is untested"
        );
        return;
    };
    // Named on purpose: a wrong directory is an error, not a skip.
    assert!(
        on_dax_mount(&dax_dir),
        "${DAX_DIR_ENV}={} is not on a mount with a dax option",
        dax_dir.display()
    );
    let path = dax_dir.join(format!("fogcached-test-{}.pool", std::process::id()));
    let region = Region::open(&file_spec(&path, PAGE_SIZE_BYTES)).unwrap();
    let mode = region.map_mode().clone();
    let described = region.describe();
    drop(region);
    let _ = std::fs::remove_file(&path);
    assert_eq!(mode, MapMode::SharedSync);
    assert!(described.ends_with("(MAP_SHARED|MAP_SYNC)"), "{described}");
}

#[cfg(not(miri))]
#[test]
fn file_errors_name_the_path() {
    let dir = ScratchDir::new("tier-errors");
    let missing = dir.path().join("no-such-dir").join("pool");
    let err = Region::open(&file_spec(&missing, PAGE_SIZE_BYTES)).unwrap_err();
    assert!(err
        .to_string()
        .starts_with(&format!("cannot map {}: ", missing.display())));
    // A character device without a sysfs size (not a DAX device) is refused.
    let err = Region::open(&file_spec(Path::new("/dev/zero"), 2 * PAGE_SIZE_BYTES))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot read the device size from /sys/dev/char/1:5/size"),
        "{err}"
    );
    // Zero pages: nothing is created.
    let none = dir.path().join("empty");
    let region = Region::open(&file_spec(&none, PAGE_SIZE_BYTES - 1)).unwrap();
    assert_eq!(region.page_count(), 0);
    assert!(!none.exists());
}
