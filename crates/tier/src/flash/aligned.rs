//! Buffers for direct I/O: `O_DIRECT` reads and writes need the memory, the file offset
//! and the length aligned to the device's logical block. [`AlignedBuf`] is a zeroed heap
//! buffer aligned to [`IO_ALIGN_BYTES`] whose length is a multiple of it, so any buffer
//! of this type can be handed to a direct read or write of the same length.
//!
//! Invariants the `unsafe` blocks below rely on:
//! 1. `ptr` came from `alloc_zeroed` with `layout` (size `len > 0`, alignment
//!    [`IO_ALIGN_BYTES`]) and is freed exactly once, by `drop`, with the same layout.
//! 2. The `len` bytes at `ptr` are initialized (zeroed at allocation, then written only
//!    through `&mut [u8]` views or by the kernel's `pread` into a `&mut` borrow).
//! 3. `AlignedBuf` owns its bytes alone (no clone, no shared pointer out): `&self` gives
//!    `&[u8]`, `&mut self` gives `&mut [u8]`, so Rust's aliasing rules hold, and moving it
//!    to another thread moves the only owner (`Send`, `Sync`).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// The alignment and length unit of direct I/O: 4 KiB, a multiple of every logical block
/// size a device reports (512 B or 4 KiB).
pub const IO_ALIGN_BYTES: usize = 4096;

/// A zeroed, [`IO_ALIGN_BYTES`]-aligned heap buffer of a multiple of that many bytes.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: invariant 3: the buffer is owned alone; sending it moves that ownership.
unsafe impl Send for AlignedBuf {}
// SAFETY: invariant 3: `&AlignedBuf` only gives `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len_bytes` rounded up to a multiple of [`IO_ALIGN_BYTES`] (at
    /// least one unit).
    pub fn zeroed(len_bytes: usize) -> AlignedBuf {
        let len = len_bytes.max(1).next_multiple_of(IO_ALIGN_BYTES);
        let layout = Self::layout(len);
        // SAFETY: invariant 1: `layout` has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout);
        };
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        match Layout::from_size_align(len, IO_ALIGN_BYTES) {
            Ok(layout) => layout,
            // Only for a length near `isize::MAX`, which no allocation reaches.
            Err(error) => panic!("an aligned buffer of {len} bytes: {error}"),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: invariants 1 and 2: `len` initialized bytes at `ptr`; invariant 3:
        // shared borrow of the sole owner.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: invariants 1 and 2, as above; invariant 3: `&mut self` is the only
        // borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: invariant 1: allocated with this layout, freed once, here.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_zeroed_aligned_and_a_whole_number_of_units() {
        for asked in [0, 1, 4095, 4096, 4097, 3 * 4096] {
            let buf = AlignedBuf::zeroed(asked);
            assert_eq!(buf.as_slice().as_ptr() as usize % IO_ALIGN_BYTES, 0);
            assert_eq!(buf.len() % IO_ALIGN_BYTES, 0);
            assert!(buf.len() >= asked.max(1) && buf.len() < asked.max(1) + IO_ALIGN_BYTES);
            assert!(buf.as_slice().iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn writes_through_the_mutable_view_are_read_back_and_a_moved_buffer_keeps_them() {
        let mut buf = AlignedBuf::zeroed(8192);
        buf.as_mut_slice()[4095] = 7;
        buf.as_mut_slice()[8191] = 9;
        let moved = std::thread::spawn(move || buf).join().unwrap();
        assert_eq!(moved.as_slice()[4095], 7);
        assert_eq!(moved.as_slice()[8191], 9);
    }
}
