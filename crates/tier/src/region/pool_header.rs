//! A pool's header: the first bytes of its file or device, mapped apart from the pages so
//! that its owner (the engine's pool) can keep its identity and layout there and
//! persist them on their own.
//!
//! Invariants the `unsafe` blocks below rely on:
//! 1. `base` is a mapping of `len` bytes (whole 4096-byte blocks, so page-aligned) made by
//!    `pool_file::map_shared` for this header alone, and stays mapped until `Drop`
//!    unmaps it, exactly once.
//! 2. The bytes are shared with whatever ran on the pool before, and with any other
//!    process that maps the file: they are only ever read and written as atomics, never
//!    through a plain reference (a crash can leave any byte pattern; the owner checks).

use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8};

use super::persist::persist;
use super::{MapMode, TierError};

/// A pool's header: the first bytes of its file or device, mapped apart from the pages.
/// The bytes are shared with whatever ran on the pool before, so they are only ever
/// read and written as atomics (a crash can leave any byte pattern; the owner checks).
pub struct PoolHeader {
    base: NonNull<u8>,
    len: usize,
    map_mode: MapMode,
    /// Before this open the file was new, empty or all zeros (a device: its pool range
    /// was): there is nothing in it to keep.
    blank: bool,
}

// SAFETY: invariants 1 and 2: the header is an owned mapping, accessed only as atomics,
// so sharing it between threads shares no plain access to its bytes.
unsafe impl Send for PoolHeader {}
// SAFETY: see `Send`.
unsafe impl Sync for PoolHeader {}

impl PoolHeader {
    /// The header over the mapping of `len` bytes at `base`, which it owns from now on.
    ///
    /// # Safety
    /// `base` is a shared mapping of `len` bytes, page-aligned, made for this header alone
    /// and not unmapped by anything else (invariant 1); `blank` says what
    /// [`PoolHeader::blank`] reports.
    pub(super) unsafe fn from_mapping(
        base: NonNull<u8>,
        len: usize,
        map_mode: MapMode,
        blank: bool,
    ) -> PoolHeader {
        PoolHeader {
            base,
            len,
            map_mode,
            blank,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the file (a device: its pool range) held nothing but zeros before this
    /// open ([`PoolContents::Blank`]).
    pub fn blank(&self) -> bool {
        self.blank
    }

    /// The header's bytes, as atomics.
    pub fn bytes(&self) -> &[AtomicU8] {
        // SAFETY: invariant 1: `base` maps `len` bytes for as long as `self` lives;
        // `AtomicU8` has the size and alignment of `u8`, and every access goes through
        // atomics, so bytes shared with other mappings of the file are never raced on
        // non-atomically from this process (invariant 2).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU8>(), self.len) }
    }

    /// The 8-byte word at `offset` (a multiple of 8, inside the header), as an atomic.
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.len,
            "header word {offset} out of range"
        );
        // SAFETY: invariant 1: in range and 8-byte aligned (the mapping is page-aligned);
        // invariant 2: atomics only.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// Makes the stores to header bytes `[offset, offset + len)` persistent.
    pub fn persist(&self, offset: usize, len: usize) -> Result<(), TierError> {
        assert!(offset + len <= self.len, "persist outside the header");
        persist(
            &self.map_mode,
            self.base,
            self.base.as_ptr().wrapping_add(offset),
            len,
        )
        .map_err(|reason| TierError::File {
            path: PathBuf::from("pool header"),
            reason,
        })
    }
}

impl Drop for PoolHeader {
    fn drop(&mut self) {
        // SAFETY: invariant 1: this exact range came from `mmap` and is released once,
        // here.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
