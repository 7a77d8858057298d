//! The persistent pool: what makes a slow tier on a file or device survive a restart.
//!
//! A pool file is laid out as a header, then the slow tier's slab pages:
//!
//! ```text
//! 0       magic "FOGCPOOL", format version, header size
//! 16      generation (random, made when the pool is formatted)
//! 24      clock base: Unix time of the engine's relative time 0
//! 32      checksum of the geometry block
//! 64      clean mark (the last stop wrote everything down and flushed)
//! 72      CAS high-water mark (no CAS below it is ever handed out again)
//! 80      flush_all state: oldest live CAS, and the relative time of a delayed flush
//! 96      geometry block: page size, page count, item size limit, chunk sizes, ...
//! 4096    page table: one byte per slab page, its slab class (0: free; LARGE_TAIL: a
//!         page inside a large item's run)
//! header  the slab pages (the engine's slow-tier region)
//! ```
//!
//! Records. A slow-tier item is self-describing: its header holds key length, value
//! length, client flags, exptime (relative to the pool's clock base, so it keeps its
//! meaning across restarts), CAS and a checksum (xxh3 over those, the key and the value,
//! seeded with the pool's generation so no record of an earlier format of the same file
//! ever checks out). A chunk is a valid record exactly when its checksum matches.
//!
//! Ordering, so that a crash leaves every record whole and valid or recognisably
//! invalid, and never a stale one:
//! - a record is *sealed* (its checksum written) after every byte it covers; a crash
//!   before that leaves a checksum of 0 or of the chunk's previous, invalidated record;
//! - before a sealed record changes in place (`touch`, `incr`, `md I`) its checksum is
//!   zeroed, and it is sealed again after; a crash in between loses the item, never
//!   serves a torn one;
//! - a slow-tier chunk's checksum is zeroed when the chunk is freed (delete, overwrite,
//!   eviction, expiry, promotion to DRAM, page moves), before anything that depends on
//!   it is acknowledged, so a key deleted or overwritten never comes back with an older
//!   value;
//! - after a crash between an overwrite's new record and the old one's invalidation,
//!   both may check out; recovery keeps the one with the higher CAS (the client had not
//!   been answered yet, so either is a correct outcome).
//!
//! A process crash (`kill -9`) keeps every store made to a shared file mapping (the page
//! cache holds them), so program order is all these rules need. Power loss needs the
//! stores flushed: with `MAP_SYNC` (DAX), `Region::persist` writes the cache lines back
//! where the stores are made; on a plain file, the engine counts invalidations not yet
//! flushed and the server holds replies until `Engine::make_durable` has `msync`ed them
//! (a group commit: one flush per turn of a worker, shared by every connection and
//! worker waiting). That is `--slow-durability power`. The default, `auto`, is `power`
//! on DAX and `crash` (program order only: a process crash is covered, a power loss may
//! bring back what was invalidated just before it) on a plain file, where each flush
//! waits for the disk: `scripts/bench-restart.sh` measures what `power` costs there.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::config::SLAB_CLASSES_MAX;
use crate::item::{HeaderRead, ITEM_HEADER_BYTES};
use crate::slab::Geometry;

const MAGIC: &[u8; 8] = b"FOGCPOOL";
/// Bumped whenever the header, the page table or the record layout changes.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// Offsets of the header's fields.
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION_AND_SIZE: usize = 8;
    pub const GENERATION: usize = 16;
    pub const CLOCK_BASE: usize = 24;
    pub const GEOMETRY_CHECKSUM: usize = 32;
    pub const CLEAN: usize = 64;
    pub const CAS_HIGH_WATER: usize = 72;
    pub const FLUSH_OLDEST_CAS: usize = 80;
    pub const FLUSH_AT_S: usize = 88;
    pub const GEOMETRY: usize = 96;
    pub const PAGE_TABLE: usize = 4096;
}

/// The clean mark's value (anything else: the last run did not stop cleanly).
const CLEAN_MARK: u64 = 0x434c_4541_4e53_544f; // "CLEANSTO"

/// Page-table value of a page inside a large item's run (not its first page).
pub(crate) const LARGE_TAIL: u8 = u8::MAX;

/// CAS values reserved at a time: the high-water mark is persisted once per block.
pub(crate) const CAS_BLOCK: u64 = 1 << 20;

/// Header bytes a pool of `page_count` slab pages needs: the fixed part and one
/// page-table byte per page, in whole 4096-byte blocks.
pub(crate) fn header_bytes(page_count: usize) -> usize {
    (at::PAGE_TABLE + page_count).next_multiple_of(4096)
}

/// What a pool must agree on with the engine that opens it; any difference would make
/// its records misread.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PoolGeometry {
    pub page_bytes: u32,
    pub page_count: u32,
    pub item_header_bytes: u32,
    pub item_size_max: u32,
    pub chunk_bytes: Vec<u32>,
}

impl PoolGeometry {
    pub fn new(geometry: &Geometry, page_count: usize, item_size_max: usize) -> PoolGeometry {
        PoolGeometry {
            page_bytes: crate::config::SLAB_PAGE_SIZE_BYTES as u32,
            page_count: page_count as u32,
            item_header_bytes: ITEM_HEADER_BYTES as u32,
            item_size_max: item_size_max as u32,
            chunk_bytes: geometry.chunk_bytes[1..]
                .iter()
                .map(|&c| c as u32)
                .collect(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 4 * (SLAB_CLASSES_MAX + 1));
        for v in [
            self.page_bytes,
            self.page_count,
            self.item_header_bytes,
            self.item_size_max,
            self.chunk_bytes.len() as u32,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for &c in &self.chunk_bytes {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<PoolGeometry> {
        let word = |i: usize| -> Option<u32> {
            Some(u32::from_le_bytes(
                bytes.get(4 * i..4 * i + 4)?.try_into().ok()?,
            ))
        };
        let classes = word(4)? as usize;
        if classes > SLAB_CLASSES_MAX + 1 {
            return None;
        }
        Some(PoolGeometry {
            page_bytes: word(0)?,
            page_count: word(1)?,
            item_header_bytes: word(2)?,
            item_size_max: word(3)?,
            chunk_bytes: (0..classes).map(|c| word(5 + c)).collect::<Option<_>>()?,
        })
    }

    /// The differences from `other`, in words (empty when they agree).
    fn differences(&self, pool: &PoolGeometry) -> Vec<String> {
        let mut out = Vec::new();
        let mut field = |name: &str, engine: u32, pool: u32| {
            if engine != pool {
                out.push(format!("{name}: pool {pool}, now {engine}"));
            }
        };
        field("slab page bytes", self.page_bytes, pool.page_bytes);
        field("slab pages (--slow-size)", self.page_count, pool.page_count);
        field(
            "item header bytes",
            self.item_header_bytes,
            pool.item_header_bytes,
        );
        field(
            "item size limit (-I)",
            self.item_size_max,
            pool.item_size_max,
        );
        if self.chunk_bytes != pool.chunk_bytes {
            out.push(format!(
                "slab classes (-f, -n, slab_chunk_max): pool {} classes ({:?}...), now {} ({:?}...)",
                pool.chunk_bytes.len(),
                &pool.chunk_bytes[..pool.chunk_bytes.len().min(4)],
                self.chunk_bytes.len(),
                &self.chunk_bytes[..self.chunk_bytes.len().min(4)],
            ));
        }
        out
    }
}

/// Why a pool cannot be used as it is.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{0}")]
    Refused(String),
    #[error("cannot write the pool header: {0}")]
    Io(String),
}

/// An open pool: its header, through which the page table and the persistent state are
/// read and written.
pub(crate) struct Pool {
    header: tier::PoolHeader,
    page_count: usize,
    generation: u64,
    /// The last run stopped cleanly (read at open; the mark is cleared right after).
    was_clean: bool,
    /// The pool was formatted by this open (nothing to recover).
    formatted: bool,
}

impl Pool {
    /// Opens the pool whose header is `header`: formats it when the file is new (or
    /// `reset`), else checks it was made by this format with this geometry, and refuses
    /// it with what differs otherwise. `now_unix_s`: the clock base of a new pool.
    pub fn open(
        header: tier::PoolHeader,
        geometry: &PoolGeometry,
        reset: bool,
        now_unix_s: u64,
        describe: &str,
    ) -> Result<Pool, PoolError> {
        let page_count = geometry.page_count as usize;
        let mut pool = Pool {
            header,
            page_count,
            generation: 0,
            was_clean: false,
            formatted: false,
        };
        if pool.header.len() < header_bytes(page_count) {
            return Err(PoolError::Refused(format!(
                "{describe}: the pool header holds {} bytes, a pool of {page_count} pages needs {}",
                pool.header.len(),
                header_bytes(page_count)
            )));
        }
        if reset || pool.header.created() {
            pool.format(geometry, now_unix_s)?;
            return Ok(pool);
        }
        let fresh_start = "start with --slow-pool-reset to discard its items and format it anew, \
                           or point --slow-path/--data-dir elsewhere";
        let magic = pool.read_bytes(at::MAGIC, 8);
        if magic.iter().all(|&b| b == 0) && pool.all_zero() {
            // A file of zeroes (extended, never formatted): nothing to keep.
            pool.format(geometry, now_unix_s)?;
            return Ok(pool);
        }
        if magic != MAGIC {
            return Err(PoolError::Refused(format!(
                "{describe} is not a fogcached pool (no pool header: damaged, or another file); {fresh_start}"
            )));
        }
        let version_and_size = pool.word(at::VERSION_AND_SIZE);
        let version = version_and_size as u32;
        if version != FORMAT_VERSION {
            return Err(PoolError::Refused(format!(
                "{describe} has pool format version {version}, this fogcached reads version \
                 {FORMAT_VERSION}; {fresh_start}"
            )));
        }
        let encoded = pool.read_bytes(at::GEOMETRY, geometry.encode().len().max(20 + 4 * 64));
        let checksum = pool.word(at::GEOMETRY_CHECKSUM);
        let stored = PoolGeometry::decode(&encoded)
            .filter(|g| xxhash_rust::xxh3::xxh3_64(&g.encode()) == checksum);
        let Some(stored) = stored else {
            return Err(PoolError::Refused(format!(
                "{describe}: the pool header is damaged (its geometry does not check out); {fresh_start}"
            )));
        };
        let differences = geometry.differences(&stored);
        if !differences.is_empty() {
            return Err(PoolError::Refused(format!(
                "{describe} was made with another geometry ({}); start with the settings it was \
                 made with, or {fresh_start}",
                differences.join("; ")
            )));
        }
        pool.generation = pool.word(at::GENERATION);
        pool.was_clean = pool.word(at::CLEAN) == CLEAN_MARK;
        // From now until a clean stop, a restart must treat the pool as crashed.
        pool.set_word(at::CLEAN, 0);
        pool.persist(at::CLEAN, 8)?;
        Ok(pool)
    }

    fn format(&mut self, geometry: &PoolGeometry, now_unix_s: u64) -> Result<(), PoolError> {
        // The generation seeds every record checksum: records left in the file by an
        // earlier format never check out.
        let generation = random_u64() | 1;
        self.generation = generation;
        self.formatted = true;
        for byte in self.header.bytes() {
            byte.store(0, Ordering::Relaxed);
        }
        let encoded = geometry.encode();
        for (i, &b) in encoded.iter().enumerate() {
            self.header.bytes()[at::GEOMETRY + i].store(b, Ordering::Relaxed);
        }
        self.set_word(at::GEOMETRY_CHECKSUM, xxhash_rust::xxh3::xxh3_64(&encoded));
        self.set_word(
            at::VERSION_AND_SIZE,
            u64::from(FORMAT_VERSION) | ((self.header.len() as u64) << 32),
        );
        self.set_word(at::GENERATION, generation);
        // memcached's relative clock starts two seconds in the past (see clock.rs).
        self.set_word(at::CLOCK_BASE, now_unix_s.saturating_sub(2));
        self.set_word(at::CAS_HIGH_WATER, 0);
        self.persist(0, self.header.len())?;
        // The magic last: a crash while formatting leaves a file that is refused or
        // formatted again, never one that looks valid with a half-written header.
        for (i, &b) in MAGIC.iter().enumerate() {
            self.header.bytes()[at::MAGIC + i].store(b, Ordering::Relaxed);
        }
        self.persist(0, 8)
    }

    fn all_zero(&self) -> bool {
        self.header
            .bytes()
            .iter()
            .take(at::PAGE_TABLE)
            .all(|b| b.load(Ordering::Relaxed) == 0)
    }

    fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        self.header.bytes()[offset..offset + len]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    fn word(&self, offset: usize) -> u64 {
        self.header.u64_at(offset).load(Ordering::Acquire)
    }

    fn set_word(&self, offset: usize, value: u64) {
        self.header.u64_at(offset).store(value, Ordering::Release);
    }

    fn persist(&self, offset: usize, len: usize) -> Result<(), PoolError> {
        self.header
            .persist(offset, len)
            .map_err(|e| PoolError::Io(e.to_string()))
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn was_clean(&self) -> bool {
        self.was_clean
    }

    /// Whether this open formatted the pool (there is nothing to recover).
    pub fn formatted(&self) -> bool {
        self.formatted
    }

    pub fn clock_base_unix_s(&self) -> u64 {
        self.word(at::CLOCK_BASE)
    }

    /// The page-table entry of slab page `page`.
    pub fn page_class(&self, page: usize) -> &AtomicU8 {
        debug_assert!(page < self.page_count, "page {page} beyond the pool");
        &self.header.bytes()[at::PAGE_TABLE + page]
    }

    /// The CAS high-water mark: every CAS handed out so far is below it.
    pub fn cas_high_water(&self) -> u64 {
        self.word(at::CAS_HIGH_WATER)
    }

    /// Raises the CAS high-water mark to `to` and persists it (once per `CAS_BLOCK`).
    pub fn raise_cas_high_water(&self, to: u64) -> Result<(), PoolError> {
        self.header
            .u64_at(at::CAS_HIGH_WATER)
            .fetch_max(to, Ordering::AcqRel);
        self.persist(at::CAS_HIGH_WATER, 8)
    }

    /// The persisted `flush_all` state: (oldest live CAS, relative time of a delayed
    /// flush).
    pub fn flush_state(&self) -> (u64, u32) {
        (
            self.word(at::FLUSH_OLDEST_CAS),
            self.word(at::FLUSH_AT_S) as u32,
        )
    }

    /// Persists the `flush_all` state before the flush is acknowledged.
    pub fn store_flush_state(&self, oldest_cas: u64, flush_at_s: u32) -> Result<(), PoolError> {
        self.set_word(at::FLUSH_OLDEST_CAS, oldest_cas);
        self.set_word(at::FLUSH_AT_S, u64::from(flush_at_s));
        self.persist(at::FLUSH_OLDEST_CAS, 16)
    }

    /// Persists the page table (before the clean mark, at a clean stop).
    pub fn persist_page_table(&self) -> Result<(), PoolError> {
        self.persist(at::PAGE_TABLE, self.page_count)
    }

    /// Marks the pool cleanly stopped (everything it holds is flushed).
    pub fn mark_clean(&self) -> Result<(), PoolError> {
        self.set_word(at::CLEAN, CLEAN_MARK);
        self.persist(at::CLEAN, 8)
    }
}

/// The checksum that makes the item with header `h` and key-and-value bytes `key_value`
/// a valid record of the pool of `generation`. Never 0 (0 marks "not a record").
pub(crate) fn record_checksum(generation: u64, h: HeaderRead<'_>, key_value: &[u8]) -> u64 {
    let mut fixed = [0u8; 21];
    fixed[0] = h.key_len();
    fixed[1..5].copy_from_slice(&h.value_len().to_le_bytes());
    fixed[5..9].copy_from_slice(&h.client_flags().to_le_bytes());
    fixed[9..13].copy_from_slice(&h.exptime_rel_s().to_le_bytes());
    fixed[13..21].copy_from_slice(&h.cas().to_le_bytes());
    let fields = xxhash_rust::xxh3::xxh3_64_with_seed(&fixed, generation);
    match xxhash_rust::xxh3::xxh3_64_with_seed(key_value, fields) {
        0 => 1,
        sum => sum,
    }
}

/// A random 64-bit value (the pool generation): the standard library's per-process
/// random hash keys, mixed with the time.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(nanos);
    hasher.finish()
}

/// Group commit of a pool on a plain file (`--slow-durability power`): record
/// invalidations are counted as they are made; a flush covers every change counted
/// before it began, and callers whose changes an earlier or concurrent flush covered do
/// not flush again, so all the connections of all the workers share each `msync`.
#[derive(Default)]
pub(crate) struct PendingFlush {
    /// Invalidations made so far (monotonic).
    pub changes: AtomicU64,
    /// `changes` as it was when the last completed flush began: everything up to it is
    /// on the file.
    pub durable: AtomicU64,
    /// One flush at a time; the others wait for it and usually find themselves covered.
    pub flushing: parking_lot::Mutex<()>,
}
