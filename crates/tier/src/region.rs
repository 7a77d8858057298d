//! A contiguous region of memory split into pages: its backing (anonymous memory, heap,
//! a mapped file or device, NUMA-bound memory), its emulated access cost and its access
//! accounting. How a file or device is opened, vetted and mapped is `region/pool_file.rs`;
//! the header mapped in front of a pool's pages is `region/pool_header.rs`; making stores
//! persistent is `region/persist.rs`.
//!
//! Invariants every `unsafe` block below relies on (and `pool_file.rs`, whose mappings
//! become regions' pages, upholds):
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

use std::alloc::Layout;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use thiserror::Error;

use crate::accounting::{lines_touched, AccessCounts, StripedCounters};
use crate::cost::{busy_wait_ns, CostModel};
use crate::numa;

mod persist;
mod pool_file;
pub(crate) use pool_file::file_has_data;
mod pool_header;

pub use persist::flush_cache_lines;
pub use pool_file::{PoolContents, PoolVet};
pub use pool_header::PoolHeader;

use persist::persist;
use pool_file::{map_shared, open_pool_file, OpenedPool};

/// Size of one page of a region (memcached's slab page).
pub const PAGE_SIZE_BYTES: usize = 1024 * 1024;

/// Alignment of the start of a region (and so of every page).
const REGION_ALIGN_BYTES: usize = 4096;

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
        // SAFETY: `map_shared` just made this mapping of `header_bytes` bytes (whole
        // 4096-byte blocks, asserted by the caller) for the header alone, and hands it
        // over: pool_header.rs invariant 1.
        let header = unsafe {
            PoolHeader::from_mapping(header_base, header_bytes, header_mode, opened.blank)
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
mod tests;
