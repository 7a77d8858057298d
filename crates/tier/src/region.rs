//! A contiguous region of memory split into pages, with its backing (anonymous memory,
//! heap, a mapped file or device, NUMA-bound memory), its emulated access cost and its
//! access accounting.
//!
//! Invariants every `unsafe` block below relies on:
//! 1. `base` points at `page_count * PAGE_SIZE_BYTES` bytes that this `Region` owns
//!    exclusively (a mapping made by `mmap`, or a heap allocation made by
//!    `alloc_zeroed` with `heap_layout`), readable and writable, aligned to 4096 bytes.
//!    For a file mapping "owns" means: no other mapping is made by this process; other
//!    processes sharing the file are the operator's business.
//! 2. The range stays mapped until `Drop`, which releases it exactly once with the
//!    routine matching how it was obtained (`munmap` or `dealloc`).
//! 3. The region never reads or writes the bytes itself: what the engine stores in the
//!    pages, and how it synchronises access to them, is the engine's business. Handing
//!    out pointers is therefore safe; dereferencing them is the caller's `unsafe`.
//!    The one exception comes before the region exists: an existing file or device is
//!    looked at before anything writes to it (`open_pool_file`), by `pread` or through a
//!    `ReadOnlyMap` (`PROT_READ`, its own mapping, read as relaxed atomics, unmapped on
//!    drop), so that an opener can refuse a file that is not its own untouched.

use std::alloc::Layout;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8};

use thiserror::Error;

use crate::accounting::{lines_touched, AccessCounts, StripedCounters};
use crate::cost::{busy_wait_ns, CostModel};
use crate::numa;

/// Size of one page of a region (memcached's slab page).
pub const PAGE_SIZE_BYTES: usize = 1024 * 1024;

/// Alignment of the start of a region (and so of every page).
const REGION_ALIGN_BYTES: usize = 4096;

/// Device DAX maps in units of its alignment (2 MiB by default): a device mapping is
/// rounded down to a multiple of this.
const DEVICE_MAP_ALIGN_BYTES: usize = 2 * 1024 * 1024;

#[derive(Debug, Error)]
pub enum TierError {
    #[error("cannot reserve {size_bytes} bytes of memory: {reason}")]
    Reserve { size_bytes: usize, reason: String },
    #[error("bad slow-tier cost: {0}")]
    CostSpec(String),
    #[error("cannot map {path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// The owner's [`PoolVet`] refused what the file or device holds; nothing was
    /// written to it.
    #[error("{0}")]
    Refused(String),
    #[error("NUMA node {node} does not exist (nodes: {nodes})")]
    NumaNodeMissing { node: u32, nodes: String },
    #[error(
        "NUMA node {node} has {node_bytes} bytes of memory, fewer than the {asked_bytes} \
         asked for: lower --slow-size"
    )]
    NumaNodeTooSmall {
        node: u32,
        node_bytes: u64,
        asked_bytes: u64,
    },
    #[error("cannot bind memory to NUMA node {node}: {reason}")]
    Numa { node: u32, reason: String },
}

/// Where a region's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionBacking {
    /// Private anonymous memory (`MAP_NORESERVE`): DRAM, and slow tiers in tests.
    Anonymous,
    /// Zeroed heap memory: for tests under Miri, which cannot `mmap`.
    Heap,
    /// A file or a DAX character device mapped `MAP_SHARED` (with `MAP_SYNC` where the
    /// file system supports it). A regular file is created, and extended sparsely with
    /// `ftruncate`, to the region's size, once its contents were shown to the opener's
    /// [`PoolVet`] (`Region::open_with_header`; a plain `Region::open` accepts any file).
    /// Anything else (a block device, a FIFO, a directory) is refused before it is
    /// opened for writing.
    File { path: PathBuf },
    /// Anonymous memory bound with `mbind(MPOL_BIND)` to one NUMA node (a CXL expander
    /// shows up as a CPU-less node).
    Numa { node: u32 },
}

/// What [`Region::open`] makes.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionSpec {
    /// Rounded down to whole pages; fewer than one page makes an empty region.
    pub size_bytes: usize,
    pub backing: RegionBacking,
    pub cost: CostModel,
}

/// How the region's bytes were obtained, so `Drop` releases them the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    Munmap,
    Dealloc,
    /// Zero pages: nothing to release.
    Nothing,
}

/// How a file backing ended up mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapMode {
    /// Not a file mapping.
    NotFile,
    /// `MAP_SHARED_VALIDATE | MAP_SYNC`: stores reach persistence with a cache flush.
    SharedSync,
    /// Plain `MAP_SHARED`, because `MAP_SYNC` was refused for the given reason.
    SharedFallback { reason: String },
}

/// A range of pages, reserved at construction and released on drop.
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    page_count: usize,
    release: Release,
    cost: CostModel,
    /// `cost.is_none()`, decided once: every access asks.
    costless: bool,
    counters: StripedCounters,
    map_mode: MapMode,
    description: String,
    /// A file backing's descriptor, kept open to hold its `flock`: two processes
    /// mapping one pool would overwrite each other's items.
    _lock: Option<std::fs::File>,
}

// SAFETY: the region is a plain owned byte range (invariant 1); moving the owner to
// another thread or sharing `&Region` between threads only shares the base pointer.
// Synchronisation of the bytes is the caller's responsibility (invariant 3). The
// counters are atomics.
unsafe impl Send for Region {}
// SAFETY: see `Send`: `&Region` only exposes the address range, never the bytes.
unsafe impl Sync for Region {}

impl Region {
    /// Makes the region `spec` describes.
    pub fn open(spec: &RegionSpec) -> Result<Region, TierError> {
        let page_count = spec.size_bytes / PAGE_SIZE_BYTES;
        let mut region = match &spec.backing {
            RegionBacking::Anonymous => Region::anonymous(spec.size_bytes)?,
            RegionBacking::Heap => Region::heap(spec.size_bytes)?,
            RegionBacking::File { path } => Region::map_file(path, page_count)?,
            RegionBacking::Numa { node } => Region::numa(*node, page_count)?,
        };
        region.cost = spec.cost;
        region.costless = spec.cost.is_none();
        Ok(region)
    }

    /// Reserves `size_bytes` (rounded down to whole pages) of anonymous memory. The
    /// memory is mapped with `MAP_NORESERVE`, so untouched pages cost nothing.
    ///
    /// Under Miri, which cannot `mmap`, the same zeroed, aligned bytes come from the heap
    /// ([`Region::heap`]), so the engine's tests run there on memory Miri checks (only
    /// the lazy reservation differs, which no test under Miri looks at).
    pub fn anonymous(size_bytes: usize) -> Result<Region, TierError> {
        if cfg!(miri) {
            return Region::heap(size_bytes);
        }
        let page_count = size_bytes / PAGE_SIZE_BYTES;
        if page_count == 0 {
            return Ok(Region::empty());
        }
        let base = map_anonymous(page_count)?;
        Ok(Region::new(
            base,
            page_count,
            Release::Munmap,
            "anonymous".to_string(),
        ))
    }

    /// As [`Region::open`], for a region that keeps a pool header in front of its pages:
    /// with a file or device backing, the first `header_bytes` of it (a multiple of
    /// 4096) are mapped apart and returned as a [`PoolHeader`], and the region's pages
    /// follow them. Other backings are not persistent and get no header.
    ///
    /// Before anything is written to an existing file or device (no extension, no
    /// `fallocate`, no writable mapping), what it holds is shown to `vet`, whose `Err`
    /// refuses the open ([`TierError::Refused`]) and leaves it as it was: an owner
    /// refuses a file it did not write.
    pub fn open_with_header(
        spec: &RegionSpec,
        header_bytes: usize,
        vet: PoolVet<'_>,
    ) -> Result<(Region, Option<PoolHeader>), TierError> {
        let page_count = spec.size_bytes / PAGE_SIZE_BYTES;
        let RegionBacking::File { path } = &spec.backing else {
            return Ok((Region::open(spec)?, None));
        };
        if page_count == 0 {
            return Ok((Region::empty(), None));
        }
        assert!(
            header_bytes > 0 && header_bytes.is_multiple_of(REGION_ALIGN_BYTES),
            "a pool header is a whole number of 4096-byte blocks"
        );
        let (mut region, header) =
            Region::map_file_with_header(path, page_count, header_bytes, vet)?;
        region.cost = spec.cost;
        region.costless = spec.cost.is_none();
        Ok((region, Some(header)))
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
        Ok(Region::new(
            base,
            page_count,
            Release::Dealloc,
            "heap".to_string(),
        ))
    }

    fn numa(node: u32, page_count: usize) -> Result<Region, TierError> {
        numa::check_node_exists(node)?;
        // Pages bound to a node that cannot hold them are faulted in until the node runs
        // out, and then the kernel kills the process: refuse at start instead.
        numa::check_node_holds(node, page_count.saturating_mul(PAGE_SIZE_BYTES) as u64)?;
        if page_count == 0 {
            return Ok(Region::empty());
        }
        let base = map_anonymous(page_count)?;
        let len = page_count * PAGE_SIZE_BYTES;
        if let Err(reason) = numa::bind(base, len, node) {
            // SAFETY: invariant 2: the mapping was just made and is not handed out.
            unsafe { libc::munmap(base.as_ptr().cast(), len) };
            return Err(TierError::Numa { node, reason });
        }
        Ok(Region::new(
            base,
            page_count,
            Release::Munmap,
            format!("numa:{node} (anonymous, mbind MPOL_BIND)"),
        ))
    }

    fn map_file(path: &Path, page_count: usize) -> Result<Region, TierError> {
        if page_count == 0 {
            return Ok(Region::empty());
        }
        // A raw mapping: no owner to tell its file from another's (the engine's slow tier
        // always goes through `open_with_header`).
        let opened = open_pool_file(path, page_count * PAGE_SIZE_BYTES, 0, &|_, _| Ok(()))?;
        let page_count = opened.data_bytes / PAGE_SIZE_BYTES;
        let (base, map_mode) = map_shared(opened.file.as_raw_fd(), opened.data_bytes, 0, path)
            .map_err(|reason| TierError::File {
                path: path.to_path_buf(),
                reason,
            })?;
        Ok(Region::from_file_mapping(
            path, opened, base, page_count, map_mode,
        ))
    }

    /// A file or device laid out as `header_bytes` of pool header, then the pages.
    fn map_file_with_header(
        path: &Path,
        page_count: usize,
        header_bytes: usize,
        vet: PoolVet<'_>,
    ) -> Result<(Region, PoolHeader), TierError> {
        let file_err = |reason: String| TierError::File {
            path: path.to_path_buf(),
            reason,
        };
        let opened = open_pool_file(path, page_count * PAGE_SIZE_BYTES, header_bytes, vet)?;
        let page_count = opened.data_bytes / PAGE_SIZE_BYTES;
        let fd = opened.file.as_raw_fd();
        let (header_base, header_mode) = map_shared(fd, header_bytes, 0, path).map_err(file_err)?;
        let header = PoolHeader {
            base: header_base,
            len: header_bytes,
            map_mode: header_mode,
            blank: opened.blank,
        };
        let (base, map_mode) =
            map_shared(fd, opened.data_bytes, header_bytes as u64, path).map_err(file_err)?;
        let region = Region::from_file_mapping(path, opened, base, page_count, map_mode);
        Ok((region, header))
    }

    fn from_file_mapping(
        path: &Path,
        opened: OpenedPool,
        base: NonNull<u8>,
        page_count: usize,
        map_mode: MapMode,
    ) -> Region {
        let mode = match &map_mode {
            MapMode::SharedSync => "MAP_SHARED|MAP_SYNC".to_string(),
            MapMode::SharedFallback { reason } => {
                format!("MAP_SHARED, MAP_SYNC unavailable: {reason}")
            }
            MapMode::NotFile => String::new(),
        };
        let kind = if opened.is_device { "device" } else { "file" };
        let description = format!("{kind}:{} ({mode})", path.display());
        let mut region = Region::new(base, page_count, Release::Munmap, description);
        region.map_mode = map_mode;
        region._lock = Some(opened.file);
        region
    }

    fn new(base: NonNull<u8>, page_count: usize, release: Release, description: String) -> Region {
        Region {
            base,
            page_count,
            release,
            cost: CostModel::NONE,
            costless: true,
            counters: StripedCounters::new(),
            map_mode: MapMode::NotFile,
            description,
            _lock: None,
        }
    }

    fn empty() -> Region {
        Region::new(
            NonNull::dangling(),
            0,
            Release::Nothing,
            "empty".to_string(),
        )
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

    /// Asks the kernel to back the region with transparent huge pages (memcached's `-L`:
    /// fewer TLB misses over a large cache). Advice only: the kernel may ignore it.
    pub fn advise_huge_pages(&self) -> std::io::Result<()> {
        if self.size_bytes() == 0 {
            return Ok(());
        }
        // SAFETY: invariant 1: `base` starts `size_bytes()` bytes this region owns,
        // aligned to 4096 bytes. MADV_HUGEPAGE changes how the kernel backs the range,
        // never its contents, so no reference into it is invalidated.
        let rc = unsafe {
            libc::madvise(
                self.base.as_ptr().cast::<libc::c_void>(),
                self.size_bytes(),
                libc::MADV_HUGEPAGE,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
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

    /// Debug builds: `[ptr, ptr + len)` lies inside the region. The accounting and the
    /// persistence calls take raw ranges from the engine; one outside the region is an
    /// engine bug that would count (or flush) someone else's bytes.
    #[inline]
    fn debug_assert_inside(&self, ptr: *const u8, len: usize) {
        debug_assert!(
            len == 0 || (self.contains(ptr) && self.contains(ptr.wrapping_add(len - 1))),
            "range {ptr:?}+{len} outside the region at {:?} ({} bytes)",
            self.base,
            self.size_bytes()
        );
    }

    /// Counts the 64-byte lines of [ptr, ptr+len) as read, and busy-waits the emulated
    /// cost of that read (both: the name says so, so that no caller mistakes it for a
    /// plain counter). Always inlined: it is a few instructions for a costless region
    /// (the wait is out of line), on every item access of a request.
    #[inline(always)]
    pub fn count_and_wait_read(&self, ptr: *const u8, len: usize) {
        self.debug_assert_inside(ptr, len);
        let lines = lines_touched(ptr as usize, len);
        self.counters.add_read(len as u64, lines);
        if !self.costless {
            self.wait_read(len, lines);
        }
    }

    /// Counts the 64-byte lines of [ptr, ptr+len) as written, and busy-waits the emulated
    /// cost of that write. Always inlined, as [`Region::count_and_wait_read`].
    #[inline(always)]
    pub fn count_and_wait_write(&self, ptr: *const u8, len: usize) {
        self.debug_assert_inside(ptr, len);
        let lines = lines_touched(ptr as usize, len);
        self.counters.add_write(len as u64, lines);
        if !self.costless {
            self.wait_write(len, lines);
        }
    }

    /// The emulated cost of a read (an emulated slow tier only). Out of line: inlined,
    /// its floating-point set-up was hoisted into the callers' loops (the index probe's),
    /// where a costless region paid for it on every look-up.
    #[inline(never)]
    fn wait_read(&self, len: usize, lines: u64) {
        let ns = self.cost.read_cost_ns(len, lines);
        self.counters.add_wait_ns(ns);
        busy_wait_ns(ns);
    }

    /// [`Region::wait_read`] for a write.
    #[inline(never)]
    fn wait_write(&self, len: usize, lines: u64) {
        let ns = self.cost.write_cost_ns(len, lines);
        self.counters.add_wait_ns(ns);
        busy_wait_ns(ns);
    }

    /// Counts a burst of `lines` 64-byte lines holding `bytes` bytes as written (a page
    /// being formatted: scattered small writes issued back to back), and busy-waits one
    /// access latency plus the transfer of `lines` whole lines.
    pub fn count_and_wait_write_burst(&self, lines: u64, bytes: u64) {
        self.counters.add_write(bytes, lines);
        if !self.costless {
            let line_bytes = usize::try_from(lines)
                .unwrap_or(usize::MAX)
                .saturating_mul(crate::LINE_SIZE_BYTES);
            let ns = self.cost.write_cost_ns(line_bytes, lines);
            self.counters.add_wait_ns(ns);
            busy_wait_ns(ns);
        }
    }

    /// Sum of every thread's accounting so far.
    pub fn access_counts(&self) -> AccessCounts {
        self.counters.snapshot()
    }

    /// Total emulated wait the cost model has charged (nanoseconds of busy-wait asked
    /// for, summed over threads); 0 while the cost is NONE.
    pub fn emulated_wait_ns(&self) -> u64 {
        self.counters.wait_ns()
    }

    pub fn cost_model(&self) -> CostModel {
        self.cost
    }

    /// How a file backing was mapped ([`MapMode::NotFile`] for the others).
    pub fn map_mode(&self) -> &MapMode {
        &self.map_mode
    }

    /// The backing in words, e.g. `file:/path (MAP_SHARED|MAP_SYNC)`, for logs and stats.
    pub fn describe(&self) -> String {
        self.description.clone()
    }

    /// Makes every store to the region so far persistent: `msync(MS_SYNC)` of a file
    /// mapping's dirty pages; a cache flush is not enough without `MAP_SYNC`, and with
    /// it every store was flushed where it was made ([`Region::persist`]). Nothing to do
    /// for the other backings, which are not persistent.
    pub fn flush(&self) -> Result<(), TierError> {
        if self.page_count == 0 {
            return Ok(());
        }
        persist(
            &self.map_mode,
            self.base,
            self.base.as_ptr(),
            self.size_bytes(),
        )
        .map_err(|reason| TierError::File {
            path: PathBuf::from(self.description.clone()),
            reason,
        })
    }

    /// Makes the stores to bytes `[ptr, ptr + len)` of the region persistent: with
    /// `MAP_SYNC`, the CPU cache lines are written back (`clwb`, else `clflushopt`, else
    /// `clflush`) and fenced; with a plain file mapping, the pages are `msync`ed; for a
    /// backing that is not persistent, nothing. `ptr` must lie in the region.
    pub fn persist(&self, ptr: *const u8, len: usize) -> Result<(), TierError> {
        debug_assert!(
            len == 0 || (self.contains(ptr) && self.contains(ptr.wrapping_add(len - 1))),
            "persist outside the region"
        );
        persist(&self.map_mode, self.base, ptr, len).map_err(|reason| TierError::File {
            path: PathBuf::from(self.description.clone()),
            reason,
        })
    }

    /// Whether stores to the region outlive the process (a file or device mapping).
    pub fn is_persistent(&self) -> bool {
        self.map_mode != MapMode::NotFile
    }
}

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

// SAFETY: as for `Region`: the header is an owned mapping, accessed only as atomics.
unsafe impl Send for PoolHeader {}
// SAFETY: see `Send`.
unsafe impl Sync for PoolHeader {}

impl PoolHeader {
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
        // SAFETY: `base` maps `len` bytes for as long as `self` lives (dropped with it);
        // `AtomicU8` has the size and alignment of `u8`, and every access goes through
        // atomics, so bytes shared with other mappings of the file are never raced on
        // non-atomically from this process.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU8>(), self.len) }
    }

    /// The 8-byte word at `offset` (a multiple of 8, inside the header), as an atomic.
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.len,
            "header word {offset} out of range"
        );
        // SAFETY: in range and 8-byte aligned (the mapping is page-aligned); atomics only.
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
        // SAFETY: this exact range came from `mmap` and is released once, here.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// The cache line size the persistence flushes work in.
const FLUSH_LINE_BYTES: usize = 64;

/// Makes the stores to `[ptr, ptr + len)` of a mapping starting at `base` persistent, as
/// its map mode requires (see [`Region::persist`]).
fn persist(
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
            // SAFETY: `[base + start, base + end)` lies in a live mapping (the caller's
            // range is inside it), and msync only reads the page tables.
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
            // SAFETY: `line` is within a cache line of the caller's mapped range;
            // flushing a line has no effect on its contents.
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

/// A pool file opened, locked, sized and reserved.
struct OpenedPool {
    file: std::fs::File,
    is_device: bool,
    /// Bytes of pages the mapping gets (a device may round down).
    data_bytes: usize,
    /// It held nothing before the open ([`PoolContents::Blank`]).
    blank: bool,
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
fn open_pool_file(
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
    // SAFETY: flock on an open descriptor has no memory preconditions.
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
fn file_has_data(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let fd = file.as_raw_fd();
    let mut buffer = vec![0u8; SCAN_CHUNK_BYTES];
    let mut pos = from;
    // Each turn moves `pos` forward by at least one byte, so the loop ends by `to`.
    while pos < to {
        let Ok(pos_off) = libc::off_t::try_from(pos) else {
            return Ok(true);
        };
        // SAFETY: lseek on an open descriptor has no memory preconditions (it moves the
        // descriptor's offset, which nothing here uses: reads are positioned).
        let data = unsafe { libc::lseek(fd, pos_off, libc::SEEK_DATA) };
        let (start, end) = if data < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // No data from `pos` on: the rest is a hole.
                Some(libc::ENXIO) => return Ok(false),
                // No SEEK_DATA on this file system: read everything.
                _ => (pos, to),
            }
        } else {
            // SAFETY: as above.
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
        // SAFETY: a read-only shared mapping of an open descriptor, no address hint; the
        // result is checked. PROT_READ: nothing can be written through it.
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
    /// with another mapping (see invariant 1), so they are never read non-atomically.
    fn words(&self) -> &[AtomicU64] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `base` maps `len` readable bytes (a multiple of 8) for as long as
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
            // SAFETY: this exact range came from `mmap` and is released once, here.
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
    // SAFETY: fallocate on an open descriptor with a valid range.
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
    // SAFETY: statfs fills the zeroed struct for an open descriptor.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return (0, "unknown file system".to_string());
    }
    let free = (st.f_bavail as u64).saturating_mul(st.f_bsize as u64);
    let name = match st.f_type as i64 {
        0x0102_1994 => "tmpfs",
        0xEF53 => "ext2/3/4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        _ => "file system",
    };
    (free, format!("{name}, type {:#x}", st.f_type))
}

fn heap_layout(page_count: usize) -> Option<Layout> {
    let size = page_count.checked_mul(PAGE_SIZE_BYTES)?;
    Layout::from_size_align(size, REGION_ALIGN_BYTES).ok()
}

fn map_anonymous(page_count: usize) -> Result<NonNull<u8>, TierError> {
    let len = page_count
        .checked_mul(PAGE_SIZE_BYTES)
        .ok_or(TierError::Reserve {
            size_bytes: usize::MAX,
            reason: "size overflows".to_string(),
        })?;
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
    NonNull::new(ptr.cast::<u8>()).ok_or(TierError::Reserve {
        size_bytes: len,
        reason: "mmap returned a null pointer".to_string(),
    })
}

/// Maps `len` bytes of `fd` shared, with `MAP_SYNC` when the file system allows it
/// (a DAX mount or a device DAX), else plain `MAP_SHARED` with the reason logged.
fn map_shared(
    fd: libc::c_int,
    len: usize,
    offset: u64,
    path: &Path,
) -> Result<(NonNull<u8>, MapMode), String> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let offset = libc::off_t::try_from(offset).map_err(|_| "offset too large".to_string())?;
    // SAFETY: fd is an open descriptor of a file at least `offset + len` bytes long
    // (extended above) or a device checked to hold it; `offset` is page-aligned; no
    // address hint; the result is checked.
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

impl Drop for Region {
    fn drop(&mut self) {
        match self.release {
            Release::Munmap => {
                // SAFETY: invariant 2: this exact range came from `mmap` and is
                // released once, here.
                unsafe {
                    libc::munmap(self.base.as_ptr().cast(), self.size_bytes());
                }
            }
            Release::Dealloc => {
                if let Some(layout) = heap_layout(self.page_count) {
                    // SAFETY: invariant 2: allocated in `heap` with this layout.
                    unsafe { std::alloc::dealloc(self.base.as_ptr(), layout) };
                }
            }
            Release::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh, unique directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("tier-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

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
        assert_eq!(region.describe(), "heap");
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
        let region = Region::open(&RegionSpec {
            size_bytes: 3 * PAGE_SIZE_BYTES,
            backing: RegionBacking::Anonymous,
            cost: CostModel::NONE,
        })
        .unwrap();
        assert_eq!(region.page_count(), 3);
        let p2 = region.page_ptr(2).unwrap();
        // SAFETY: inside the region, no other user.
        unsafe {
            assert_eq!(*p2.as_ptr(), 0);
            *p2.as_ptr() = 1;
            assert_eq!(*p2.as_ptr(), 1);
        }
        assert!(region.contains(p2.as_ptr()));
        assert_eq!(region.describe(), "anonymous");
        assert_eq!(region.map_mode(), &MapMode::NotFile);
    }

    #[cfg(not(miri))]
    #[test]
    fn file_region_persists_bytes_across_reopen() {
        let dir = TempDir::new("persist");
        let path = dir.0.join("slow-tier.pool");
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
        let dir = TempDir::new("reserve");
        let path = dir.0.join("pool");
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
        let dir = TempDir::new("header");
        let path = dir.0.join("pool");
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
        let dir = TempDir::new("vet");
        let header_bytes = 8192;
        for len in [100, 3 * PAGE_SIZE_BYTES + 5] {
            let path = dir.0.join(format!("other-{len}"));
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
        let dir = TempDir::new("blank");
        let header_bytes = 8192;
        let new = dir.0.join("new");
        assert_eq!(contents_seen(&new, header_bytes), None);
        assert!(!new.exists() || std::fs::metadata(&new).unwrap().len() == 0);
        let file = |name: &str, len: u64, byte_at: Option<u64>, written: bool| {
            let path = dir.0.join(name);
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
        let dir = TempDir::new("kinds");
        let never = |_: PoolContents<'_>, _| -> Result<(), String> { panic!("the vet was asked") };
        let refusal = |path: &Path| {
            Region::open_with_header(&file_spec(path, 2 * PAGE_SIZE_BYTES), 8192, &never)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| panic!("{} was opened", path.display()))
        };
        let text = refusal(&dir.0);
        assert!(text.contains("a directory"), "{text}");
        let fifo = dir.0.join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let text = refusal(&fifo);
        assert!(text.contains("neither a regular file"), "{text}");
        // A block device node: made here (a loop device's numbers; it is never opened),
        // else any the machine has.
        let node = dir.0.join("blockdev");
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

    /// The cache-line flush the DAX path uses runs on any memory (it only writes lines
    /// back); the bytes are unchanged by it.
    #[cfg(not(miri))]
    #[test]
    fn flushing_cache_lines_keeps_the_bytes() {
        let mut buf = vec![7u8; 1000];
        buf[500] = 9;
        flush_cache_lines(buf.as_ptr().wrapping_add(3), 900);
        flush_cache_lines(buf.as_ptr(), 0);
        assert_eq!(buf[500], 9);
        assert_eq!(buf.iter().filter(|&&b| b == 7).count(), 999);
    }

    /// A pool larger than its file system's free space is refused at open with what to
    /// change, instead of dying with SIGBUS at the first store past the free space.
    #[cfg(not(miri))]
    #[test]
    fn a_pool_larger_than_the_free_space_is_refused_naming_the_file_system() {
        let dir = TempDir::new("tmpfs");
        let mount = dir.0.join("small");
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
        dir: TempDir,
        mount: PathBuf,
    }

    impl Ext2Mount {
        /// None when this machine cannot make one (not root, no `mkfs.ext2`, no loop
        /// devices, or mounts forbidden).
        fn new(tag: &str, size_mib: u64) -> Option<Ext2Mount> {
            let dir = TempDir::new(tag);
            let image = dir.0.join("image");
            let mount = dir.0.join("mnt");
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
        let dir = TempDir::new("lock");
        let path = dir.0.join("pool");
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
        let dir = TempDir::new("mapsync");
        if on_dax_mount(&dir.0) {
            testkit::skip!(
                "map_sync_fallback_is_reported",
                "the temp dir {} is on a DAX mount, where MAP_SYNC succeeds: the fallback is not exercised",
                dir.0.display()
            );
            return;
        }
        let path = dir.0.join("pool");
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
        let dir = TempDir::new("errors");
        let missing = dir.0.join("no-such-dir").join("pool");
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
        let none = dir.0.join("empty");
        let region = Region::open(&file_spec(&none, PAGE_SIZE_BYTES - 1)).unwrap();
        assert_eq!(region.page_count(), 0);
        assert!(!none.exists());
    }

    #[cfg(not(miri))]
    #[test]
    fn missing_numa_node_is_a_clear_error() {
        let nodes = crate::online_nodes();
        let absent = nodes.iter().max().map_or(0, |n| n + 1);
        let err = Region::open(&RegionSpec {
            size_bytes: PAGE_SIZE_BYTES,
            backing: RegionBacking::Numa { node: absent },
            cost: CostModel::NONE,
        })
        .unwrap_err();
        let listed = if nodes.is_empty() {
            "none listed in /sys/devices/system/node".to_string()
        } else {
            nodes
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        assert_eq!(
            err.to_string(),
            format!("NUMA node {absent} does not exist (nodes: {listed})")
        );
    }

    /// A slow tier larger than its NUMA node is refused at open, naming the node's size
    /// (the pages would be faulted in until the node ran out, and the kernel would kill
    /// the server).
    #[cfg(not(miri))]
    #[test]
    fn a_numa_node_smaller_than_asked_is_refused() {
        let meminfo = Path::new("/sys/devices/system/node/node0/meminfo");
        if !meminfo.is_file() {
            testkit::skip!(
                "a_numa_node_smaller_than_asked_is_refused",
                "no /sys/devices/system/node/node0/meminfo: the node size check is untested"
            );
            return;
        }
        let asked = 64 * 1024 * 1024 * 1024 * 1024usize; // 64 TiB: more than any node here
        let err = Region::open(&RegionSpec {
            size_bytes: asked,
            backing: RegionBacking::Numa { node: 0 },
            cost: CostModel::NONE,
        })
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("NUMA node 0 has "), "{err}");
        assert!(
            err.ends_with(&format!(
                "fewer than the {asked} asked for: lower --slow-size"
            )),
            "{err}"
        );
    }

    #[cfg(not(miri))]
    #[test]
    fn numa_node_zero_binds_when_sysfs_lists_it() {
        if !Path::new("/sys/devices/system/node/node0").is_dir() {
            testkit::skip!(
                "numa_node_zero_binds_when_sysfs_lists_it",
                "no /sys/devices/system/node/node0: mbind to a NUMA node is untested"
            );
            return;
        }
        let region = Region::open(&RegionSpec {
            size_bytes: 2 * PAGE_SIZE_BYTES,
            backing: RegionBacking::Numa { node: 0 },
            cost: CostModel::NONE,
        })
        .unwrap();
        assert_eq!(region.page_count(), 2);
        assert_eq!(region.describe(), "numa:0 (anonymous, mbind MPOL_BIND)");
        let p = region.page_ptr(1).unwrap().as_ptr();
        // SAFETY: inside the region, no other user; faulting it in obeys the policy.
        unsafe {
            *p = 42;
            assert_eq!(*p, 42);
        }
    }

    #[test]
    fn charging_counts_exactly_the_lines_touched() {
        let region = Region::open(&RegionSpec {
            size_bytes: PAGE_SIZE_BYTES,
            backing: RegionBacking::Heap,
            cost: CostModel::HMCACHED,
        })
        .unwrap();
        let base = region.base_ptr().as_ptr();
        // 100 bytes from offset 60: lines 0, 1 and 2 (the base is 4096-aligned).
        region.count_and_wait_read(base.wrapping_add(60), 100);
        assert_eq!(
            region.access_counts(),
            AccessCounts {
                bytes_read: 100,
                bytes_written: 0,
                lines_read: 3,
                lines_written: 0
            }
        );
        region.count_and_wait_write(base.wrapping_add(64), 64);
        region.count_and_wait_write(base.wrapping_add(127), 2);
        assert_eq!(
            region.access_counts(),
            AccessCounts {
                bytes_read: 100,
                bytes_written: 66,
                lines_read: 3,
                lines_written: 3
            }
        );
        // hmcached: 224 ns per line read, 924 per line written (HME's injected delay).
        assert_eq!(region.emulated_wait_ns(), 3 * 224 + 3 * 924);
        assert_eq!(region.cost_model(), CostModel::HMCACHED);
    }

    #[test]
    fn charging_with_bandwidth_adds_the_transfer_time() {
        let cost = CostModel::parse("read_ns=10,write_ns=20,read_gbps=1,write_gbps=0.5").unwrap();
        let region = Region::open(&RegionSpec {
            size_bytes: PAGE_SIZE_BYTES,
            backing: RegionBacking::Heap,
            cost,
        })
        .unwrap();
        let base = region.base_ptr().as_ptr();
        region.count_and_wait_read(base, 1000);
        region.count_and_wait_write(base, 1000);
        assert_eq!(region.emulated_wait_ns(), (10 + 1000) + (20 + 2000));
        assert_eq!(region.access_counts().lines_read, 16);
        assert_eq!(region.access_counts().lines_written, 16);
    }

    #[test]
    fn none_cost_counts_but_never_spins() {
        let region = Region::heap(PAGE_SIZE_BYTES).unwrap();
        assert_eq!(region.cost_model(), CostModel::NONE);
        let base = region.base_ptr().as_ptr();
        for i in 0..1000 {
            region.count_and_wait_read(base.wrapping_add(i), 64);
            region.count_and_wait_write(base.wrapping_add(i), 1);
        }
        let counts = region.access_counts();
        assert_eq!(counts.bytes_read, 64_000);
        assert_eq!(counts.bytes_written, 1000);
        // 64 bytes from an aligned offset touch one line, from any other offset two.
        assert_eq!(counts.lines_read, 1000 + 984);
        assert_eq!(counts.lines_written, 1000);
        assert_eq!(region.emulated_wait_ns(), 0, "a NONE cost charges no wait");
    }

    #[test]
    fn charges_from_many_threads_all_count() {
        let region = Region::heap(PAGE_SIZE_BYTES).unwrap();
        let base = region.base_ptr().as_ptr() as usize;
        std::thread::scope(|scope| {
            for t in 0..4usize {
                let region = &region;
                scope.spawn(move || {
                    for i in 0..500usize {
                        region.count_and_wait_read((base + (t * 500 + i) * 64) as *const u8, 64);
                    }
                });
            }
        });
        assert_eq!(region.access_counts().lines_read, 2000);
        assert_eq!(region.access_counts().bytes_read, 2000 * 64);
    }
}
