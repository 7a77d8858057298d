//! The flash device under the storage tier (issue 26): a regular file or a block device
//! that items are written to in large segments and read back from by offset, not mapped.
//! This module opens and checks the device and does its I/O; what a segment holds, and
//! which items go there, is the engine's business.
//!
//! - `device.rs`: opening (`O_DIRECT` where the file system allows it, buffered with the
//!   reason otherwise, never silently), sizing, locking against a second server, and the
//!   checks that the file was not deleted or truncated under the server.
//! - `io.rs`: [`FlashIo`], the one seam every read and write goes through, and
//!   [`FaultyIo`], which tests put in front of a device to make chosen reads or writes
//!   fail.
//! - `aligned.rs`: [`AlignedBuf`], the aligned buffers direct I/O needs (the module's
//!   `unsafe`, with its invariants).

mod aligned;
mod device;
mod io;

pub use aligned::{AlignedBuf, IO_ALIGN_BYTES};
pub use device::{FlashContents, FlashDevice, FlashSpec, FlashVet};
pub use io::{FaultyIo, FlashIo, IoOp};

use std::path::PathBuf;

/// Why a flash device was refused or stopped serving. Each names the path and what the
/// operator can change.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error(
        "flash size {size_bytes} is not a positive multiple of {align} bytes: give \
         --flash-size in whole 4 KiB units"
    )]
    BadSize { size_bytes: u64, align: usize },
    #[error(
        "{path}: {what}; the flash tier is a regular file or a block device (a DAX \
         character device is the slow tier's: --slow-path)"
    )]
    NotFileOrBlockDevice { path: PathBuf, what: &'static str },
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The opener's [`FlashVet`] refused what the file or device holds; nothing was
    /// written to it.
    #[error(
        "{path} holds data the flash tier cannot take as its own ({reason}); nothing was \
         changed: give --flash-path a new file, a blank device, or one this server wrote"
    )]
    Refused { path: PathBuf, reason: String },
    #[error("{path} is in use by another process (another fogcached on the same flash device?)")]
    InUse { path: PathBuf },
    #[error(
        "{path} holds {device_bytes} bytes, fewer than --flash-size {size_bytes}: lower \
         --flash-size or use a larger device"
    )]
    TooSmall {
        path: PathBuf,
        device_bytes: u64,
        size_bytes: u64,
    },
    #[error(
        "{path}: the file system ({fs_name}) cannot give the flash file its {size_bytes} \
         bytes ({reason}): free space there, put it elsewhere, or lower --flash-size"
    )]
    NoSpace {
        path: PathBuf,
        fs_name: String,
        size_bytes: u64,
        reason: String,
    },
    #[error("{path} was deleted while the server used it")]
    Deleted { path: PathBuf },
    #[error("{path} was truncated to {len_bytes} bytes while the server used {size_bytes}")]
    Truncated {
        path: PathBuf,
        len_bytes: u64,
        size_bytes: u64,
    },
    #[error("checking {path}: {source}")]
    Check {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests;
