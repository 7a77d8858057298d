//! Opening the flash device: refuse what is neither a regular file nor a block device,
//! open it for direct I/O where the file system allows (else buffered, saying why), lock
//! it against a second server, show what it holds to the opener's [`FlashVet`] before
//! anything is written (a mistyped path to someone's file is refused, untouched), check
//! that a device holds `--flash-size` and give a file its blocks up front, then read and
//! write it by aligned offset. A file deleted or
//! truncated under the server is seen by [`FlashDevice::check_intact`].
//!
//! Invariant the `unsafe` blocks below rely on: every system call here (`flock`,
//! `lseek`, `fallocate`) is made on a descriptor this module opened and still
//! holds, with no memory of ours passed beyond a zeroed struct the kernel fills.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::{AlignedBuf, FlashError, FlashIo, IO_ALIGN_BYTES};

/// What the flash tier is asked to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashSpec {
    /// A regular file (created if missing) or a block device.
    pub path: PathBuf,
    /// Bytes of it the tier uses (`--flash-size`): a positive multiple of
    /// [`IO_ALIGN_BYTES`].
    pub size_bytes: u64,
}

/// What a file or device held before the flash tier opened it, for the opener's
/// [`FlashVet`] to judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashContents<'a> {
    /// Nothing to keep: a new or empty file, a file of zeros only, or a device whose
    /// first 4 KiB are zeros.
    Blank,
    /// Something else: its first bytes (up to 4 KiB).
    Data(&'a [u8]),
}

/// The opener's judgement of what a file or device holds, before anything is written to
/// it: `Err` (the reason, for the operator) refuses the open and leaves it as it was.
pub type FlashVet<'a> = &'a dyn Fn(FlashContents<'_>) -> Result<(), String>;

/// An open, locked flash device of `size_bytes`.
#[derive(Debug)]
pub struct FlashDevice {
    file: File,
    path: PathBuf,
    is_block_device: bool,
    size_bytes: u64,
    /// Why I/O is buffered (`None`: opened `O_DIRECT`).
    why_buffered: Option<String>,
}

impl FlashDevice {
    /// Opens `spec.path` for the flash tier (see the module comment). What it holds is
    /// shown to `vet` first; only then is a regular file created or extended (never
    /// shrunk) to `spec.size_bytes` and its blocks reserved, so a segment write never
    /// meets a full file system. Nothing is written to a block device here.
    pub fn open(spec: &FlashSpec, vet: FlashVet<'_>) -> Result<FlashDevice, FlashError> {
        let path = spec.path.clone();
        let size_bytes = spec.size_bytes;
        if size_bytes == 0 || !size_bytes.is_multiple_of(IO_ALIGN_BYTES as u64) {
            return Err(FlashError::BadSize {
                size_bytes,
                align: IO_ALIGN_BYTES,
            });
        }
        let is_block_device = match std::fs::metadata(&path) {
            Ok(meta) => {
                let kind = meta.file_type();
                if kind.is_block_device() {
                    true
                } else if kind.is_file() {
                    false
                } else {
                    let what = if kind.is_dir() {
                        "a directory"
                    } else if kind.is_char_device() {
                        "a character device"
                    } else {
                        "neither a regular file nor a block device"
                    };
                    return Err(FlashError::NotFileOrBlockDevice { path, what });
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
            Err(source) => return Err(FlashError::Open { path, source }),
        };
        let (file, why_buffered) = open_direct_or_buffered(&path, is_block_device)?;
        // SAFETY: the module invariant: flock on the descriptor just opened.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let source = std::io::Error::last_os_error();
            return Err(if source.kind() == std::io::ErrorKind::WouldBlock {
                FlashError::InUse { path }
            } else {
                FlashError::Open { path, source }
            });
        }
        let shown = vet_contents(&path, is_block_device, vet);
        shown.map_err(|reason| FlashError::Refused {
            path: path.clone(),
            reason,
        })?;
        if is_block_device {
            let device_bytes = device_bytes(&file).map_err(|source| FlashError::Open {
                path: path.clone(),
                source,
            })?;
            if device_bytes < size_bytes {
                return Err(FlashError::TooSmall {
                    path,
                    device_bytes,
                    size_bytes,
                });
            }
        } else {
            give_file_its_blocks(&file, &path, size_bytes)?;
        }
        Ok(FlashDevice {
            file,
            path,
            is_block_device,
            size_bytes,
            why_buffered,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }

    /// Whether reads and writes bypass the page cache (`O_DIRECT`).
    pub fn direct_io(&self) -> bool {
        self.why_buffered.is_none()
    }

    /// Why I/O goes through the page cache instead, for `-v` and the start-up warning.
    pub fn why_buffered(&self) -> Option<&str> {
        self.why_buffered.as_deref()
    }

    /// Whether the file is still the one the server sized: not deleted (its last name
    /// gone), not truncated below `size_bytes`. A block device cannot be either.
    pub fn check_intact(&self) -> Result<(), FlashError> {
        if self.is_block_device {
            return Ok(());
        }
        let meta = self.file.metadata().map_err(|source| FlashError::Check {
            path: self.path.clone(),
            source,
        })?;
        if meta.nlink() == 0 {
            return Err(FlashError::Deleted {
                path: self.path.clone(),
            });
        }
        if meta.len() < self.size_bytes {
            return Err(FlashError::Truncated {
                path: self.path.clone(),
                len_bytes: meta.len(),
                size_bytes: self.size_bytes,
            });
        }
        Ok(())
    }

    /// Writes what was written so far to stable storage (`fdatasync`).
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// An `InvalidInput` error unless `[offset, offset + len)` is aligned and inside the
    /// device.
    fn check_range(&self, offset_bytes: u64, len_bytes: usize) -> std::io::Result<()> {
        let aligned = offset_bytes.is_multiple_of(IO_ALIGN_BYTES as u64);
        let inside = offset_bytes
            .checked_add(len_bytes as u64)
            .is_some_and(|end| end <= self.size_bytes);
        if aligned && inside {
            Ok(())
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "flash I/O of {len_bytes} bytes at {offset_bytes}: not {IO_ALIGN_BYTES}-aligned \
                     or past the device's {} bytes",
                    self.size_bytes
                ),
            ))
        }
    }
}

impl FlashIo for FlashDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut AlignedBuf) -> std::io::Result<()> {
        self.check_range(offset_bytes, buf.len())?;
        // A short read (a file truncated under the server) is `UnexpectedEof`: an error,
        // never a buffer half of stale bytes.
        self.file.read_exact_at(buf.as_mut_slice(), offset_bytes)
    }

    fn write_at(&self, offset_bytes: u64, buf: &AlignedBuf) -> std::io::Result<()> {
        self.check_range(offset_bytes, buf.len())?;
        self.file.write_all_at(buf.as_slice(), offset_bytes)
    }
}

/// Opens `path` read-write with `O_DIRECT`, or without it when the file system refuses
/// it (`EINVAL`: some FUSE and network file systems, and tmpfs before Linux 6.6),
/// returning why. A regular file is created if missing; a block device is opened
/// `O_EXCL` (Linux: refused while it is mounted or another process opened it so).
fn open_direct_or_buffered(
    path: &Path,
    is_block_device: bool,
) -> Result<(File, Option<String>), FlashError> {
    choose_direct_or_buffered(path, is_block_device, |direct| {
        let mut flags = libc::O_CLOEXEC;
        if direct {
            flags |= libc::O_DIRECT;
        }
        if is_block_device {
            flags |= libc::O_EXCL;
        }
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(!is_block_device)
            .truncate(false)
            .custom_flags(flags)
            .open(path)
    })
}

/// [`open_direct_or_buffered`]'s choice, with the opener (`open(direct)`) a test can
/// replace: this machine's file systems may all take `O_DIRECT`.
pub(super) fn choose_direct_or_buffered(
    path: &Path,
    is_block_device: bool,
    open: impl Fn(bool) -> std::io::Result<File>,
) -> Result<(File, Option<String>), FlashError> {
    match open(true) {
        Ok(file) => Ok((file, None)),
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            let file = open(false).map_err(|source| open_error(path, is_block_device, source))?;
            let fs_name = file_system_name(&file);
            Ok((
                file,
                Some(format!(
                    "the file system ({fs_name}) does not support O_DIRECT: reads and writes \
                     go through the page cache"
                )),
            ))
        }
        Err(source) => Err(open_error(path, is_block_device, source)),
    }
}

fn open_error(path: &Path, is_block_device: bool, source: std::io::Error) -> FlashError {
    if is_block_device && source.raw_os_error() == Some(libc::EBUSY) {
        // O_EXCL on a block device: mounted, or held by another exclusive opener.
        FlashError::InUse {
            path: path.to_path_buf(),
        }
    } else {
        FlashError::Open {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Shows what `path` holds to `vet`, read through a second, buffered descriptor (the
/// tier's own may be `O_DIRECT`, which takes only aligned buffers) without writing. A
/// regular file is blank when it holds only zeros (holes skipped); a device when its
/// first 4 KiB are zeros (it is not read whole).
fn vet_contents(path: &Path, is_block_device: bool, vet: FlashVet<'_>) -> Result<(), String> {
    let file = File::open(path).map_err(|e| format!("reading what it holds: {e}"))?;
    let len = if is_block_device {
        device_bytes(&file).map_err(|e| e.to_string())?
    } else {
        file.metadata().map_err(|e| e.to_string())?.len()
    };
    let mut first = vec![0u8; IO_ALIGN_BYTES.min(len as usize)];
    let mut filled = 0;
    while filled < first.len() {
        match file.read_at(&mut first[filled..], filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(e) => return Err(format!("reading what it holds: {e}")),
        }
    }
    first.truncate(filled);
    let blank = first.iter().all(|&b| b == 0)
        && (is_block_device
            || !crate::region::file_has_data(&file, filled as u64, len)
                .map_err(|e| format!("reading what it holds: {e}"))?);
    if blank {
        vet(FlashContents::Blank)
    } else {
        vet(FlashContents::Data(&first))
    }
}

/// A block device's size: the offset of its end.
fn device_bytes(file: &File) -> std::io::Result<u64> {
    // SAFETY: the module invariant: lseek on an open descriptor (its offset is unused:
    // every read and write is positioned).
    let end = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_END) };
    if end < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(end as u64)
}

/// Extends a regular file to `size_bytes` (never shrinks it) and reserves its blocks.
fn give_file_its_blocks(file: &File, path: &Path, size_bytes: u64) -> Result<(), FlashError> {
    let no_space = |reason: String| FlashError::NoSpace {
        path: path.to_path_buf(),
        fs_name: file_system_name(file),
        size_bytes,
        reason,
    };
    let current = file
        .metadata()
        .map_err(|source| FlashError::Open {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    let Ok(len) = libc::off_t::try_from(size_bytes.max(current)) else {
        return Err(no_space("too large for this system".to_string()));
    };
    // SAFETY: the module invariant: fallocate on an open descriptor, a valid range.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // No preallocation here (some file systems): the length at least.
        return file
            .set_len(size_bytes.max(current))
            .map_err(|e| no_space(e.to_string()));
    }
    Err(no_space(error.to_string()))
}

/// The file system `file` is on, by name.
fn file_system_name(file: &File) -> String {
    crate::file_system_of(file.as_raw_fd()).name
}
