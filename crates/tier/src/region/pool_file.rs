//! Opening a pool's file or DAX device for a region to map: refuse what is neither a
//! regular file nor a character device, lock it against a second server, show what it
//! holds to the owner's [`PoolVet`] before anything is written to it, then size it,
//! reserve its blocks (so that a store to the mapping never meets a full file system)
//! and map it shared. The region that the mapping becomes, and the pool header mapped
//! in front of it, are `region.rs` and `pool_header.rs`.
//!
//! Invariants the `unsafe` blocks below rely on:
//! 1. Nothing before the vet writes to the file or device: `open(O_RDWR)` without
//!    truncation, `flock`, reads (`pread`, `lseek`), and [`ReadOnlyMap`]s; an opener can
//!    refuse a file that is not its own and leave it untouched.
//! 2. The system calls on a descriptor (`flock`, `lseek`, `fallocate`, `fstatfs`) are made
//!    on a file this module opened and still holds, with no memory of ours passed
//!    beyond a zeroed struct the kernel fills.
//! 3. A `ReadOnlyMap` is its own `PROT_READ` mapping, read only as relaxed atomic words
//!    (another process may map the same file), and unmapped exactly once, on drop.
//! 4. [`map_shared`] maps a range that the file holds (sized by [`open_pool_file`] before
//!    it is called) or the device was checked to hold; the mapping it returns belongs to
//!    its caller, which becomes its owner (a region's pages: `region.rs` invariants 1 and
//!    2; a pool header: `pool_header.rs`).

use std::fs::OpenOptions;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use super::{MapMode, TierError, PAGE_SIZE_BYTES};

/// Device DAX maps in units of its alignment (2 MiB by default): a device mapping is
/// rounded down to a multiple of this.
const DEVICE_MAP_ALIGN_BYTES: usize = 2 * 1024 * 1024;

/// What a pool's file or device held before an open changed anything, for its owner's
/// [`PoolVet`] to judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolContents<'a> {
    /// Nothing to keep or protect: a new or empty file, a file of zeros only, or a device
    /// whose pool range (header and pages) holds zeros only.
    Blank,
    /// Something else: its first `header_bytes` (zeros past the end of a shorter file).
    Data(&'a [u8]),
}

/// The owner's judgement of what a file or device holds, given with the number of pages
/// the region will map (a device may round down), before the open writes to it: `Err`
/// (the reason, for the operator) refuses the open and leaves the file as it was.
pub type PoolVet<'a> = &'a dyn Fn(PoolContents<'_>, usize) -> Result<(), String>;

/// A pool file opened, locked, sized and reserved.
pub(super) struct OpenedPool {
    pub(super) file: std::fs::File,
    pub(super) is_device: bool,
    /// Bytes of pages the mapping gets (a device may round down).
    pub(super) data_bytes: usize,
    /// It held nothing before the open ([`PoolContents::Blank`]).
    pub(super) blank: bool,
}

/// Bytes the blank check reads at a time. Below glibc's initial mmap threshold (128 KiB)
/// on purpose: freeing a larger buffer, which malloc mapped, raises that threshold for
/// the rest of the process, so that the connections' later 1 MiB input buffers came
/// from the heap and stayed resident after their connections closed
/// (`resource_bounds_process::an_unfinished_request_holds_at_most_one_requests_input_per_connection`
/// saw 8-30 MiB kept instead of ~1.5).
const SCAN_CHUNK_BYTES: usize = 64 * 1024;

/// Opens (creating a regular file if missing) and locks the pool file at `path`, shows
/// what it holds to `vet`, and only then sizes it for `header_bytes` then `data_bytes`. A
/// regular file's space is reserved up front (`fallocate`): a mapped file that runs out
/// of blocks kills the process with SIGBUS at the first store past the free space,
/// losing every item; refusing at start-up instead names the file system, its free space
/// and the flags to change.
///
/// Nothing before `vet` writes: `open(O_RDWR)` without truncation, `flock`, reads
/// (`pread`, or a read-only mapping of a device). A path that is neither a regular file
/// nor a character device is refused before it is opened.
pub(super) fn open_pool_file(
    path: &Path,
    data_bytes: usize,
    header_bytes: usize,
    vet: PoolVet<'_>,
) -> Result<OpenedPool, TierError> {
    let file_err = |reason: String| TierError::File {
        path: path.to_path_buf(),
        reason,
    };
    let existing = std::fs::metadata(path).ok();
    if let Some(kind) = existing.as_ref().map(|m| m.file_type()) {
        if !kind.is_file() && !kind.is_char_device() {
            let what = if kind.is_block_device() {
                "a block device"
            } else if kind.is_dir() {
                "a directory"
            } else {
                "neither a regular file nor a character device"
            };
            return Err(file_err(format!(
                "{what}: the slow tier maps a regular file or a DAX character device \
                 (/dev/daxX.Y); for persistent memory exposed as a block device, make a \
                 file system on it, mount it with -o dax and put the pool file there"
            )));
        }
    }
    let is_device = existing
        .as_ref()
        .map(|m| m.file_type().is_char_device())
        .unwrap_or(false);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(!is_device)
        .truncate(false)
        .open(path)
        .map_err(|e| file_err(e.to_string()))?;
    // SAFETY: invariant 2: flock on the descriptor just opened; no memory passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        return Err(file_err(
            if error.kind() == std::io::ErrorKind::WouldBlock {
                "in use by another process (another fogcached on the same pool?)".to_string()
            } else {
                format!("flock: {error}")
            },
        ));
    }
    let mut data_bytes = data_bytes;
    let blank;
    if is_device {
        let rdev = existing.as_ref().map(|m| m.rdev()).unwrap_or(0);
        let device_bytes = device_size_bytes(rdev).map_err(file_err)?;
        data_bytes = device_data_bytes(device_bytes, header_bytes, data_bytes).map_err(file_err)?;
        let (prefix, is_blank) =
            inspect_device(&file, header_bytes, data_bytes).map_err(file_err)?;
        vet_contents(vet, &prefix, is_blank, data_bytes)?;
        blank = is_blank;
    } else {
        let (prefix, is_blank) = inspect_file(&file, header_bytes)
            .map_err(|e| file_err(format!("reading what the file holds: {e}")))?;
        vet_contents(vet, &prefix, is_blank, data_bytes)?;
        blank = is_blank;
        let len = (header_bytes + data_bytes) as u64;
        let current = file.metadata().map_err(|e| file_err(e.to_string()))?.len();
        // Extend, but never shrink, so a larger pool made earlier keeps its bytes.
        if current < len {
            file.set_len(len).map_err(|e| file_err(e.to_string()))?;
        }
        reserve_blocks(&file, len).map_err(file_err)?;
    }
    Ok(OpenedPool {
        file,
        is_device,
        data_bytes,
        blank,
    })
}

fn vet_contents(
    vet: PoolVet<'_>,
    prefix: &[u8],
    blank: bool,
    data_bytes: usize,
) -> Result<(), TierError> {
    let contents = if blank {
        PoolContents::Blank
    } else {
        PoolContents::Data(prefix)
    };
    vet(contents, data_bytes / PAGE_SIZE_BYTES).map_err(TierError::Refused)
}

/// What a regular file holds, read without writing: its first `header_bytes` (zeros past
/// its end) and whether all of it is zeros. Holes are skipped (`SEEK_DATA`), so a sparse
/// file of any size is checked in a few calls; data is read a chunk at a time and the
/// scan stops at the first non-zero byte, so only a file that really is all zeros is read
/// whole.
fn inspect_file(file: &std::fs::File, header_bytes: usize) -> std::io::Result<(Vec<u8>, bool)> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let mut prefix = vec![0u8; header_bytes];
    let prefix_len = usize::try_from(len).map_or(header_bytes, |len| len.min(header_bytes));
    let mut filled = 0;
    while filled < prefix_len {
        let read = file.read_at(&mut prefix[filled..prefix_len], filled as u64)?;
        if read == 0 {
            break;
        }
        filled += read;
    }
    if prefix.iter().any(|&b| b != 0) {
        return Ok((prefix, false));
    }
    let blank = !file_has_data(file, prefix_len as u64, len)?;
    Ok((prefix, blank))
}

/// Whether bytes `[from, to)` of `file` hold anything but zeros.
pub(crate) fn file_has_data(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let fd = file.as_raw_fd();
    let mut buffer = vec![0u8; SCAN_CHUNK_BYTES];
    let mut pos = from;
    // Each turn moves `pos` forward by at least one byte, so the loop ends by `to`.
    while pos < to {
        let Ok(pos_off) = libc::off_t::try_from(pos) else {
            return Ok(true);
        };
        // SAFETY: invariant 2: lseek on an open descriptor, no memory passed (it moves
        // the descriptor's offset, which nothing here uses: reads are positioned).
        let data = unsafe { libc::lseek(fd, pos_off, libc::SEEK_DATA) };
        let (start, end) = if data < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // No data from `pos` on: the rest is a hole.
                Some(libc::ENXIO) => return Ok(false),
                // No SEEK_DATA on this file system: read everything.
                _ => (pos, to),
            }
        } else {
            // SAFETY: invariant 2, as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            let start = (data as u64).max(pos);
            let end = if hole < 0 { to } else { (hole as u64).min(to) };
            (start, if end > start { end } else { to })
        };
        let mut at = start;
        while at < end {
            let want = (end - at).min(SCAN_CHUNK_BYTES as u64) as usize;
            let read = file.read_at(&mut buffer[..want], at)?;
            if read == 0 {
                // The file ended early (shrunk meanwhile): nothing more to read.
                return Ok(false);
            }
            if buffer[..read].iter().any(|&b| b != 0) {
                return Ok(true);
            }
            at += read as u64;
        }
        pos = end.max(pos + 1);
    }
    Ok(false)
}

/// What a device holds in the range a pool of `header_bytes` then `data_bytes` would
/// use, read through read-only mappings of the same shape as the pool's (device DAX has
/// no `read`): its first `header_bytes`, and whether the whole range is zeros. The data
/// range is only scanned when the header is all zeros, and the scan stops at the first
/// non-zero word.
fn inspect_device(
    file: &std::fs::File,
    header_bytes: usize,
    data_bytes: usize,
) -> Result<(Vec<u8>, bool), String> {
    let fd = file.as_raw_fd();
    let header = ReadOnlyMap::new(fd, header_bytes, 0)?;
    let prefix: Vec<u8> = header
        .words()
        .iter()
        .flat_map(|w| w.load(std::sync::atomic::Ordering::Relaxed).to_le_bytes())
        .collect();
    if prefix.iter().any(|&b| b != 0) {
        return Ok((prefix, false));
    }
    let data = ReadOnlyMap::new(fd, data_bytes, header_bytes as u64)?;
    let blank = data
        .words()
        .iter()
        .all(|w| w.load(std::sync::atomic::Ordering::Relaxed) == 0);
    Ok((prefix, blank))
}

/// A read-only shared mapping of part of a device, to look at it before using it;
/// unmapped on drop.
struct ReadOnlyMap {
    base: NonNull<u8>,
    len: usize,
}

impl ReadOnlyMap {
    /// Maps `len` bytes (a multiple of 8) of `fd` from `offset` (page-aligned), readable
    /// only.
    fn new(fd: libc::c_int, len: usize, offset: u64) -> Result<ReadOnlyMap, String> {
        debug_assert!(len.is_multiple_of(8) && offset.is_multiple_of(4096));
        if len == 0 {
            return Ok(ReadOnlyMap {
                base: NonNull::dangling(),
                len: 0,
            });
        }
        let offset = libc::off_t::try_from(offset).map_err(|_| "offset too large".to_string())?;
        // SAFETY: invariant 3: a read-only shared mapping of an open descriptor, no
        // address hint; the result is checked. PROT_READ: nothing can be written through
        // it (invariant 1).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "mmap (read-only, to check what the device holds): {}",
                std::io::Error::last_os_error()
            ));
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or("mmap returned a null pointer")?;
        Ok(ReadOnlyMap { base, len })
    }

    /// The mapping as 8-byte words, read as atomics: the device's bytes may be shared
    /// with another process's mapping (invariant 3), so they are never read non-atomically.
    fn words(&self) -> &[AtomicU64] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: invariant 3: `base` maps `len` readable bytes (a multiple of 8) for as long as
        // `self` lives; the mapping is page-aligned, so 8-byte aligned; `AtomicU64` has
        // the size of `u64`. Only relaxed 8-byte loads are made, which the standard
        // library allows on read-only memory (the mapping is PROT_READ) where `AtomicU64`
        // is native, as on every 64-bit target fogcached builds for.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU64>(), self.len / 8) }
    }
}

impl Drop for ReadOnlyMap {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: invariant 3: this exact range came from `mmap` and is released once,
            // here.
            unsafe {
                libc::munmap(self.base.as_ptr().cast(), self.len);
            }
        }
    }
}

/// The data bytes a device DAX mapping of `header_bytes + data_bytes` gets on a device of
/// `device_bytes`: `data_bytes` rounded down to the device's mapping alignment, or why the
/// device cannot hold the pool (smaller than asked: stores past its end would fault).
/// Apart from the open so that it is tested without a DAX device (which needs an NVDIMM,
/// or memory set aside at boot; its size comes from `/sys/dev/char/M:m/size`, which no
/// other character device has).
fn device_data_bytes(
    device_bytes: usize,
    header_bytes: usize,
    data_bytes: usize,
) -> Result<usize, String> {
    let wanted = header_bytes.checked_add(data_bytes);
    if wanted.is_none_or(|wanted| wanted > device_bytes) {
        let wanted = wanted.map_or_else(|| "more".to_string(), |w| w.to_string());
        return Err(format!(
            "the device holds {device_bytes} bytes, fewer than the {wanted} asked for \
             (lower --slow-size)"
        ));
    }
    // Device DAX refuses lengths that are not a multiple of its alignment.
    let aligned = data_bytes / DEVICE_MAP_ALIGN_BYTES * DEVICE_MAP_ALIGN_BYTES;
    if aligned == 0 {
        return Err(format!(
            "a device mapping needs at least {DEVICE_MAP_ALIGN_BYTES} bytes"
        ));
    }
    Ok(aligned)
}

/// Allocates the blocks of the first `len` bytes of `file` (`fallocate`), so stores to
/// its mapping never meet a full file system. Where the file system cannot preallocate
/// (`EOPNOTSUPP`: ext2/3, some network and FUSE file systems), the blocks are allocated by
/// writing them ([`write_reservation`]), as glibc's `posix_fallocate` does there: checking
/// the free space alone would leave the server to die of SIGBUS when something else
/// fills the file system later.
fn reserve_blocks(file: &std::fs::File, len: u64) -> Result<(), String> {
    let fd = file.as_raw_fd();
    let Ok(len_off) = libc::off_t::try_from(len) else {
        return Err(format!(
            "a pool of {len} bytes is too large for this system"
        ));
    };
    // SAFETY: invariant 2: fallocate on an open descriptor with a valid range.
    let rc = unsafe { libc::fallocate(fd, 0, 0, len_off) };
    if rc == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    let (fs_free, fs_name) = free_space(fd);
    match error.raw_os_error() {
        Some(libc::ENOSPC) => Err(format!(
            "the file system ({fs_name}) has {fs_free} bytes free, fewer than the pool's {len}: \
             free space there, put the pool elsewhere (--data-dir or --slow-path), or lower \
             --slow-size"
        )),
        // Checked first, so that a pool that cannot fit does not fill the file system
        // on its way to being refused. What the file holds already (a pool reopened
        // after a restart) needs no more room.
        Some(libc::EOPNOTSUPP) if fs_free >= len.saturating_sub(allocated_bytes(file)) => {
            write_reservation(file, len).map_err(|error| {
                let (fs_free, fs_name) = free_space(fd);
                format!(
                    "the file system ({fs_name}) cannot preallocate, and writing the pool's \
                     {len} bytes failed ({error}; {fs_free} bytes free now): free space \
                     there, put the pool elsewhere (--data-dir or --slow-path), or lower \
                     --slow-size"
                )
            })
        }
        Some(libc::EOPNOTSUPP) => Err(format!(
            "the file system ({fs_name}) cannot preallocate and has {fs_free} bytes free, \
             fewer than the pool's {len}: lower --slow-size or put the pool elsewhere"
        )),
        _ => Err(format!("fallocate: {error}")),
    }
}

/// Bytes of storage the file system has given `file` (its blocks, indirect ones
/// included, so possibly more than its length).
fn allocated_bytes(file: &std::fs::File) -> u64 {
    file.metadata()
        .map_or(0, |m| m.blocks().saturating_mul(512))
}

/// Allocates every block of the first `len` bytes of `file` by writing it, keeping its
/// contents (a pool reopened after a restart holds items): one byte per block (the
/// file system's `st_blksize`) is read, and a zero byte is written back where it was zero
/// (a hole reads as zero; rewriting a zero changes nothing), as glibc's emulation of
/// `posix_fallocate` does. The file is already `len` bytes long.
fn write_reservation(file: &std::fs::File, len: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let block = file.metadata()?.blksize().max(512);
    // The last byte of every block, so that the block holding byte `len - 1` is written.
    let mut offset = (len.saturating_sub(1)) % block;
    while offset < len {
        let mut byte = [0u8; 1];
        let read = file.read_at(&mut byte, offset)?;
        if read == 0 || byte[0] == 0 {
            file.write_all_at(&[0], offset)?;
        }
        offset += block;
    }
    Ok(())
}

/// Free bytes of the file system holding `fd`, and its type in words.
fn free_space(fd: libc::c_int) -> (u64, String) {
    let fs = crate::file_system_of(fd);
    (fs.free_bytes, fs.name)
}

/// Maps `len` bytes of `fd` shared, with `MAP_SYNC` when the file system allows it
/// (a DAX mount or a device DAX), else plain `MAP_SHARED` with the reason logged.
pub(super) fn map_shared(
    fd: libc::c_int,
    len: usize,
    offset: u64,
    path: &Path,
) -> Result<(NonNull<u8>, MapMode), String> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let offset = libc::off_t::try_from(offset).map_err(|_| "offset too large".to_string())?;
    // SAFETY: invariant 4: fd is an open descriptor of a file at least `offset + len`
    // bytes long (sized by `open_pool_file`) or a device checked to hold it; `offset` is
    // page-aligned; no address hint; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            fd,
            offset,
        )
    };
    if ptr != libc::MAP_FAILED {
        let base = NonNull::new(ptr.cast::<u8>()).ok_or("mmap returned a null pointer")?;
        return Ok((base, MapMode::SharedSync));
    }
    let sync_error = std::io::Error::last_os_error().to_string();
    // SAFETY: as above, without MAP_SYNC.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            fd,
            offset,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    let base = NonNull::new(ptr.cast::<u8>()).ok_or("mmap returned a null pointer")?;
    // A start-up event, once per mapping of pages (not a pool header's): the operator
    // must know that stores are not synchronously persistent (not a DAX mount, or an
    // old kernel).
    if len >= PAGE_SIZE_BYTES {
        eprintln!(
            "fogcached: {}: MAP_SYNC unavailable ({sync_error}), mapped MAP_SHARED \
             (not a DAX mount: stores reach the file only through the page cache)",
            path.display()
        );
    }
    Ok((base, MapMode::SharedFallback { reason: sync_error }))
}

/// A character device's size, from sysfs (`/sys/dev/char/MAJ:MIN/size`, which device
/// DAX provides in bytes).
fn device_size_bytes(rdev: u64) -> Result<usize, String> {
    let major = libc::major(rdev);
    let minor = libc::minor(rdev);
    let sys = format!("/sys/dev/char/{major}:{minor}/size");
    let text = std::fs::read_to_string(&sys)
        .map_err(|e| format!("cannot read the device size from {sys}: {e}"))?;
    text.trim()
        .parse::<usize>()
        .map_err(|_| format!("{sys} does not hold a size: {:?}", text.trim()))
}

#[cfg(test)]
mod tests;
