//! Making stores to a mapped pool persistent: with `MAP_SYNC` (a DAX mount or device) the
//! CPU's cache lines are written back and fenced where the store was made; with a plain
//! shared mapping the dirty pages are `msync`ed; memory that is not a file needs nothing.
//!
//! Invariant the `unsafe` blocks below rely on: every range given lies inside a live
//! mapping of this process (a region's pages or a pool header, whose owners check the
//! range against their own), and writing a cache line back or syncing a page never
//! changes the bytes, so no reference into the range is invalidated.

use std::ptr::NonNull;

use super::{MapMode, REGION_ALIGN_BYTES};

/// The cache line size the persistence flushes work in.
const FLUSH_LINE_BYTES: usize = 64;

/// Makes the stores to `[ptr, ptr + len)` of a mapping starting at `base` persistent, as
/// its map mode requires (see [`Region::persist`]).
pub(super) fn persist(
    map_mode: &MapMode,
    base: NonNull<u8>,
    ptr: *const u8,
    len: usize,
) -> Result<(), String> {
    if len == 0 {
        return Ok(());
    }
    match map_mode {
        MapMode::NotFile => Ok(()),
        MapMode::SharedSync => {
            flush_cache_lines(ptr, len);
            Ok(())
        }
        MapMode::SharedFallback { .. } => {
            // msync takes page-aligned starts; the mapping itself is page-aligned.
            let page = REGION_ALIGN_BYTES;
            let start = (ptr as usize - base.as_ptr() as usize) / page * page;
            let end = ptr as usize - base.as_ptr() as usize + len;
            // SAFETY: the invariant above: `[base + start, base + end)` lies in a live
            // mapping (the caller's range is inside it), and msync only writes back pages.
            let rc =
                unsafe { libc::msync(base.as_ptr().add(start).cast(), end - start, libc::MS_SYNC) };
            if rc == 0 {
                Ok(())
            } else {
                Err(format!("msync: {}", std::io::Error::last_os_error()))
            }
        }
    }
}

/// Writes the cache lines of `[ptr, ptr + len)` back to memory and fences, so that
/// stores to a `MAP_SYNC` mapping are persistent when it returns.
pub fn flush_cache_lines(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let first = ptr as usize / FLUSH_LINE_BYTES * FLUSH_LINE_BYTES;
    let end = ptr as usize + len;
    #[cfg(target_arch = "x86_64")]
    {
        let kind = x86_flush::kind();
        let mut line = first;
        while line < end {
            // SAFETY: the invariant above: `line` is within a cache line of the caller's
            // mapped range; flushing a line has no effect on its contents.
            unsafe { x86_flush::flush_line(kind, line as *const u8) };
            line += FLUSH_LINE_BYTES;
        }
        // SAFETY: sfence has no preconditions.
        unsafe { core::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (first, end);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_flush {
    use std::sync::OnceLock;

    #[derive(Clone, Copy)]
    pub(super) enum Kind {
        Clwb,
        ClflushOpt,
        Clflush,
    }

    pub(super) fn kind() -> Kind {
        static KIND: OnceLock<Kind> = OnceLock::new();
        *KIND.get_or_init(|| {
            // CPUID leaf 7, sub-leaf 0, EBX: bit 24 CLWB, bit 23 CLFLUSHOPT (the std
            // detection macro does not know these two).
            let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
            if leaf7.ebx & (1 << 24) != 0 {
                Kind::Clwb
            } else if leaf7.ebx & (1 << 23) != 0 {
                Kind::ClflushOpt
            } else {
                Kind::Clflush
            }
        })
    }

    /// # Safety
    /// `line` points into mapped memory.
    pub(super) unsafe fn flush_line(kind: Kind, line: *const u8) {
        // SAFETY: the instructions only write back or evict the line containing `line`,
        // which the caller guarantees is mapped; the CPU has the feature (detected).
        unsafe {
            match kind {
                Kind::Clwb => {
                    core::arch::asm!("clwb [{}]", in(reg) line, options(nostack, preserves_flags))
                }
                Kind::ClflushOpt => {
                    core::arch::asm!("clflushopt [{}]", in(reg) line, options(nostack, preserves_flags))
                }
                Kind::Clflush => core::arch::x86_64::_mm_clflush(line),
            }
        }
    }
}

// Miri cannot run the flush instructions.
#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    /// The cache-line flush the DAX path uses runs on any memory (it only writes lines
    /// back); the bytes are unchanged by it.
    #[test]
    fn flushing_cache_lines_keeps_the_bytes() {
        let mut buf = vec![7u8; 1000];
        buf[500] = 9;
        flush_cache_lines(buf.as_ptr().wrapping_add(3), 900);
        flush_cache_lines(buf.as_ptr(), 0);
        assert_eq!(buf[500], 9);
        assert_eq!(buf.iter().filter(|&&b| b == 7).count(), 999);
    }
}
