//! What file system a path or descriptor is on, by name, and whether its pages are
//! memory (tmpfs, ramfs) rather than storage: the slow tier's pool, the flash device and
//! their messages all ask this one place.
//!
//! Invariant the `unsafe` blocks below rely on: `statfs`/`fstatfs` fill a zeroed struct
//! we own, from a NUL-terminated path or a descriptor the caller holds open.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::RawFd;
use std::path::Path;

/// A file system as the tiers describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSystem {
    /// Its common name (`tmpfs`, `ext2/3/4`, ...), or its type number.
    pub name: String,
    /// Its pages are memory: tmpfs or ramfs.
    pub is_memory: bool,
    /// Bytes free to an unprivileged writer.
    pub free_bytes: u64,
}

impl FileSystem {
    fn unknown() -> FileSystem {
        FileSystem {
            name: "unknown file system".to_string(),
            is_memory: false,
            free_bytes: 0,
        }
    }

    fn of(stat: &libc::statfs) -> FileSystem {
        let (name, is_memory) = match stat.f_type as u64 {
            0x0102_1994 => ("tmpfs".to_string(), true),
            0x8584_58F6 => ("ramfs".to_string(), true),
            0xEF53 => ("ext2/3/4".to_string(), false),
            0x5846_5342 => ("xfs".to_string(), false),
            0x9123_683E => ("btrfs".to_string(), false),
            0x794C_7630 => ("overlayfs".to_string(), false),
            0x6573_5546 => ("fuse".to_string(), false),
            0x6969 => ("nfs".to_string(), false),
            other => (format!("file system type {other:#x}"), false),
        };
        FileSystem {
            name,
            is_memory,
            free_bytes: stat.f_bavail.saturating_mul(stat.f_bsize as u64),
        }
    }
}

/// The file system `path` is on.
pub fn file_system_at(path: &Path) -> FileSystem {
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return FileSystem::unknown();
    };
    // SAFETY: the module invariant: all zeros is a valid `statfs` (plain integers).
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the module invariant: a NUL-terminated path, a struct we own.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } != 0 {
        return FileSystem::unknown();
    }
    FileSystem::of(&stat)
}

/// The file system of the open descriptor `fd`.
pub fn file_system_of(fd: RawFd) -> FileSystem {
    // SAFETY: the module invariant, as above.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the module invariant: a descriptor the caller holds open.
    if unsafe { libc::fstatfs(fd, &mut stat) } != 0 {
        return FileSystem::unknown();
    }
    FileSystem::of(&stat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_shm_is_memory_and_the_temp_dir_has_a_name() {
        let shm = file_system_at(Path::new("/dev/shm"));
        if shm.name == "tmpfs" {
            assert!(shm.is_memory);
        }
        let tmp = file_system_at(&std::env::temp_dir());
        assert_ne!(tmp.name, "unknown file system");
        assert_eq!(
            file_system_at(Path::new("/no/such/dir")).name,
            "unknown file system"
        );
    }
}
