//! A contiguous region of memory split into pages.
//!
//! Invariants every `unsafe` block below relies on:
//! 1. `base` points at `page_count * PAGE_SIZE_BYTES` bytes that this `Region` owns
//!    exclusively (an anonymous mapping made by `mmap`, or a heap allocation made by
//!    `alloc_zeroed` with `heap_layout`), readable and writable, aligned to 4096 bytes.
//! 2. The range stays mapped until `Drop`, which releases it exactly once with the
//!    routine matching how it was obtained (`munmap` or `dealloc`).
//! 3. The region never reads or writes the bytes itself: what the engine stores in the
//!    pages, and how it synchronises access to them, is the engine's business. Handing
//!    out pointers is therefore safe; dereferencing them is the caller's `unsafe`.

use std::alloc::Layout;
use std::ptr::NonNull;

use thiserror::Error;

/// Size of one page of a region (memcached's slab page).
pub const PAGE_SIZE_BYTES: usize = 1024 * 1024;

/// Alignment of the start of a region (and so of every page).
const REGION_ALIGN_BYTES: usize = 4096;

#[derive(Debug, Error)]
pub enum TierError {
    #[error("cannot reserve {size_bytes} bytes of memory: {reason}")]
    Reserve { size_bytes: usize, reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    Mmap,
    Heap,
    /// Zero pages: nothing to release.
    Empty,
}

/// A range of pages, reserved at construction and released on drop.
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    page_count: usize,
    backing: Backing,
}

// SAFETY: the region is a plain owned byte range (invariant 1); moving the owner to
// another thread or sharing `&Region` between threads only shares the base pointer.
// Synchronisation of the bytes is the caller's responsibility (invariant 3).
unsafe impl Send for Region {}
// SAFETY: see `Send`: `&Region` only exposes the address range, never the bytes.
unsafe impl Sync for Region {}

impl Region {
    /// Reserves `size_bytes` (rounded down to whole pages) of anonymous memory. The
    /// memory is mapped with `MAP_NORESERVE`, so untouched pages cost nothing.
    pub fn anonymous(size_bytes: usize) -> Result<Region, TierError> {
        let page_count = size_bytes / PAGE_SIZE_BYTES;
        if page_count == 0 {
            return Ok(Region::empty());
        }
        let len = page_count * PAGE_SIZE_BYTES;
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked against MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(TierError::Reserve {
                size_bytes: len,
                reason: std::io::Error::last_os_error().to_string(),
            });
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(TierError::Reserve {
            size_bytes: len,
            reason: "mmap returned a null pointer".to_string(),
        })?;
        Ok(Region {
            base,
            page_count,
            backing: Backing::Mmap,
        })
    }

    /// Reserves `size_bytes` (rounded down to whole pages) from the heap, zeroed. For
    /// tests under Miri, which cannot `mmap`.
    pub fn heap(size_bytes: usize) -> Result<Region, TierError> {
        let page_count = size_bytes / PAGE_SIZE_BYTES;
        if page_count == 0 {
            return Ok(Region::empty());
        }
        let layout = heap_layout(page_count).ok_or(TierError::Reserve {
            size_bytes,
            reason: "size overflows".to_string(),
        })?;
        // SAFETY: the layout has a non-zero size (page_count >= 1).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(ptr).ok_or(TierError::Reserve {
            size_bytes,
            reason: "allocation failed".to_string(),
        })?;
        Ok(Region {
            base,
            page_count,
            backing: Backing::Heap,
        })
    }

    fn empty() -> Region {
        Region {
            base: NonNull::dangling(),
            page_count: 0,
            backing: Backing::Empty,
        }
    }

    pub fn page_count(&self) -> usize {
        self.page_count
    }

    pub fn size_bytes(&self) -> usize {
        self.page_count * PAGE_SIZE_BYTES
    }

    /// The first byte of the region. Valid for `size_bytes()` bytes while `self` lives.
    pub fn base_ptr(&self) -> NonNull<u8> {
        self.base
    }

    /// The first byte of page `page_index`, or `None` when out of range.
    pub fn page_ptr(&self, page_index: usize) -> Option<NonNull<u8>> {
        if page_index >= self.page_count {
            return None;
        }
        // Address arithmetic only (no dereference): stays inside the owned range.
        let addr = self
            .base
            .as_ptr()
            .wrapping_add(page_index * PAGE_SIZE_BYTES);
        NonNull::new(addr)
    }

    /// Whether `ptr` points inside the region.
    pub fn contains(&self, ptr: *const u8) -> bool {
        let start = self.base.as_ptr() as usize;
        let addr = ptr as usize;
        addr >= start && addr - start < self.size_bytes()
    }

    /// The page `ptr` lies in, or `None` when it is outside the region.
    pub fn page_index_of(&self, ptr: *const u8) -> Option<usize> {
        if !self.contains(ptr) {
            return None;
        }
        Some((ptr as usize - self.base.as_ptr() as usize) / PAGE_SIZE_BYTES)
    }
}

fn heap_layout(page_count: usize) -> Option<Layout> {
    let size = page_count.checked_mul(PAGE_SIZE_BYTES)?;
    Layout::from_size_align(size, REGION_ALIGN_BYTES).ok()
}

impl Drop for Region {
    fn drop(&mut self) {
        match self.backing {
            Backing::Mmap => {
                // SAFETY: invariant 2: this exact range came from `mmap` in
                // `anonymous` and is released once, here.
                unsafe {
                    libc::munmap(self.base.as_ptr().cast(), self.size_bytes());
                }
            }
            Backing::Heap => {
                if let Some(layout) = heap_layout(self.page_count) {
                    // SAFETY: invariant 2: allocated in `heap` with this layout.
                    unsafe { std::alloc::dealloc(self.base.as_ptr(), layout) };
                }
            }
            Backing::Empty => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_region_pages_are_disjoint_and_writable() {
        let region = Region::heap(2 * PAGE_SIZE_BYTES + 17).unwrap();
        assert_eq!(region.page_count(), 2);
        let p0 = region.page_ptr(0).unwrap();
        let p1 = region.page_ptr(1).unwrap();
        assert_eq!(p1.as_ptr() as usize - p0.as_ptr() as usize, PAGE_SIZE_BYTES);
        assert!(region.page_ptr(2).is_none());
        assert_eq!(region.page_index_of(p1.as_ptr()), Some(1));
        let last = p1.as_ptr().wrapping_add(PAGE_SIZE_BYTES - 1);
        assert_eq!(region.page_index_of(last), Some(1));
        assert_eq!(region.page_index_of(last.wrapping_add(1)), None);
        // SAFETY: both bytes are inside the region and nobody else uses it.
        unsafe {
            *p0.as_ptr() = 7;
            *last = 9;
            assert_eq!(*p0.as_ptr(), 7);
            assert_eq!(*last, 9);
        }
    }

    #[test]
    fn region_smaller_than_a_page_is_empty() {
        let region = Region::heap(PAGE_SIZE_BYTES - 1).unwrap();
        assert_eq!(region.page_count(), 0);
        assert!(region.page_ptr(0).is_none());
        assert!(!region.contains(region.base_ptr().as_ptr()));
    }

    #[cfg(not(miri))]
    #[test]
    fn anonymous_region_is_zeroed_and_writable() {
        let region = Region::anonymous(3 * PAGE_SIZE_BYTES).unwrap();
        assert_eq!(region.page_count(), 3);
        let p2 = region.page_ptr(2).unwrap();
        // SAFETY: inside the region, no other user.
        unsafe {
            assert_eq!(*p2.as_ptr(), 0);
            *p2.as_ptr() = 1;
            assert_eq!(*p2.as_ptr(), 1);
        }
        assert!(region.contains(p2.as_ptr()));
    }
}
