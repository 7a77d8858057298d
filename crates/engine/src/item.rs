//! Items in slab memory: the 56-byte header, then the key, then the value.
//!
//! This is the only module of the engine that dereferences raw pointers into slab
//! memory. An item is named by an [`ItemAddr`]: the byte offset of its header inside
//! its tier's region, with the tier number in the top byte, so the index, the LRU links
//! and the free lists are all plain `u64`s.
//!
//! Safety invariants (every `unsafe` block below relies on them):
//! 1. Memory: an `ItemMemory` owns its `Region` for as long as it lives; every address
//!    it is asked about is the start of a chunk inside that region (checked by
//!    `header_ptr`, which refuses out-of-range offsets) and of this memory's tier (checked
//!    there in debug builds: every caller takes the memory from the address), chunks are
//!    8-byte aligned and at least `ITEM_HEADER_BYTES + key_len + value_len` long; and
//!    every key or value slice is checked to lie inside the region whatever the header
//!    says (`Located::bytes_ptr`).
//! 2. Header fields are atomics, so reading or writing them from any thread is defined
//!    behaviour; which lock makes a value *meaningful* is written next to each field.
//! 3. Key and value bytes are plain memory. No other thread may write them while a slice
//!    of them is alive, and nobody may hold a slice of them while they are written. This is
//!    carried by types: every function that reads or writes them takes a proof, an
//!    [`ItemAccess`], and the slices it returns borrow that proof:
//!    - [`Fresh`]: a chunk the allocator just handed to this thread (`Engine::take_chunk`),
//!      not yet published. It is neither `Copy` nor `Clone`, so only its owner can name
//!      it; writing takes `&mut Fresh`, so no slice of it is alive then; publishing it
//!      (`Index::insert_new`, `Index::replace`) consumes it.
//!    - [`Held`]: an item found in a shard's table while the caller holds that shard's
//!      lock. Only the index makes one (`Index::find`, `Index::held`, `Index::visit_from`),
//!      from a `&mut` borrow of the lock's guard (or a shared `&Held` inside a listing),
//!      so no slice outlives the lock and at most one `Held` per guard exists at a time;
//!      the in-place rewrite (`overwrite_value_padded`) takes `&mut Held`, so it cannot
//!      overlap a slice.
//!
//!    A look-up hands back an [`ItemRef`]: the item's header located and bounds-checked
//!    once ([`Located`], which reads header fields only) paired with its proof, whose
//!    `key()` and `value` slices borrow the `ItemRef` and so the proof. The unchecked
//!    reads (`Located::key_unproven`, `key_and_value_unproven`) are private to this
//!    module; only `ItemRef` and `ItemMemory`'s proof-taking functions call them.
//!
//! What the types cannot say (and how it is checked instead), so the proofs are made by
//! `unsafe` code that says why: (a) that a chunk is fresh: `Fresh::claim`, in the
//! allocator (the chunk just came off its class's free list, or is a page just given to
//! the class, under the class lock) and in recovery (a record found before the engine
//! serves anyone); (b) that a descriptor in a shard's table names a live item of that
//! shard: the index takes descriptors only from `Fresh` chunks, and an item's chunk is
//! freed only after its descriptor left the index under the same lock (`Engine::unlink`,
//! `remove_locked`, `move_item`); the free path debug-asserts that the chunk is no longer
//! linked, and reads debug-assert that it is not on a free list; (c) that an item's bytes
//! are written only through those proofs: this module is the only one that can write them.
//!
//! Release asserts. The five `assert!`s below (not `debug_assert!`s) are the checks the
//! `unsafe` blocks' SAFETY comments rely on: an address inside the region, a slice inside
//! the region, a write inside its chunk, a proof for the item it is paired with. Each
//! failing one would otherwise be an out-of-bounds or aliasing access, so they stay in
//! release builds; their failure is a panic, which ends the `fogcached` process (its
//! panic hook aborts, `server/src/crash.rs`) before anything reads or writes through the
//! bad pointer. The others, which guard meaning rather than memory, are debug-only.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use tier::Region;

pub(crate) use crate::index::Held;

/// Size of the item header in slab memory.
pub(crate) const ITEM_HEADER_BYTES: usize = 56;

/// An item's address: tier number in bits 56..64, byte offset in the tier's region below.
pub(crate) type ItemAddr = u64;

/// "No item" in LRU and free-list links.
pub(crate) const NIL: ItemAddr = u64::MAX;

const OFFSET_MASK: u64 = (1 << 56) - 1;

/// A proof that its holder may read the key and value bytes of the item at
/// [`ItemAccess::item_addr`] (invariant 3); the slices borrow it.
///
/// # Safety
/// An implementation vouches that while a value of it lives, no other thread writes the
/// bytes of the chunk it names and the chunk is not freed, and that a `&mut` of it is the
/// only way to name that chunk for a write (see the module comment). [`Fresh`] and
/// [`Held`] are the only implementations.
pub(crate) unsafe trait ItemAccess {
    fn item_addr(&self) -> ItemAddr;
}

/// A chunk the allocator handed to this thread and nobody else can see yet (invariant 3).
/// Neither `Copy` nor `Clone`: whoever holds it is the only one naming the chunk, until
/// the index consumes it at publication (or it is freed unpublished).
#[derive(Debug)]
pub(crate) struct Fresh {
    addr: ItemAddr,
}

impl Fresh {
    /// Makes the proof for the chunk at `addr`.
    ///
    /// # Safety
    /// The caller has just taken the chunk for itself (off its class's free list, or a
    /// page run just given to the class, under the class lock), or is recovery reading a
    /// record before the engine serves anyone; no index entry, LRU list or other thread
    /// names it, and no other `Fresh` for it exists.
    pub unsafe fn claim(addr: ItemAddr) -> Fresh {
        Fresh { addr }
    }

    pub fn addr(&self) -> ItemAddr {
        self.addr
    }
}

// SAFETY: a `Fresh` is made only by `Fresh::claim`, whose caller vouches that nobody
// else names the chunk; it is not `Copy`, so its owner is the only one who can.
unsafe impl ItemAccess for Fresh {
    #[inline]
    fn item_addr(&self) -> ItemAddr {
        self.addr
    }
}

/// Item state bits (`ItemHeader::state`).
pub(crate) mod state {
    /// Linked in the index and in an LRU list.
    pub const LINKED: u16 = 1 << 0;
    /// Read at least once since it was stored.
    pub const FETCHED: u16 = 1 << 1;
    /// Read again after FETCHED; cleared when the maintainer moves the item.
    pub const ACTIVE: u16 = 1 << 2;
    /// Marked stale by `md I` / `ms I`.
    pub const STALE: u16 = 1 << 3;
    /// A recache token (meta `W`) has been handed out.
    pub const TOKEN_SENT: u16 = 1 << 4;
    /// Stored with a base64 key (meta `b`): meta `k` and `me` echo the key base64-encoded
    /// (memcached's `ITEM_KEY_BINARY`).
    pub const KEY_BINARY: u16 = 1 << 5;
    /// LRU segment (or multi-queue queue), three bits.
    pub const SEG_SHIFT: u16 = 11;
    pub const SEG_MASK: u16 = 0b111 << SEG_SHIFT;
    /// Chunk handed out by the allocator and not yet freed (linked or about to be).
    pub const ALLOCATED: u16 = 1 << 7;
    /// Chunk on its class's free list.
    pub const FREE: u16 = 1 << 8;
    /// Fogcached's Promote state: a slow-tier item referenced again while ACTIVE.
    /// Set and read by the placement policy; cleared when the item is copied to DRAM
    /// (the copy starts without it).
    pub const PROMOTE: u16 = 1 << 9;
    /// The item has an entry in a Move queue, or a synchronous demotion that waits for
    /// its shard; keeps it from being queued twice. Written only in `moves.rs`: set with
    /// the item's shard or class lock held (`Queued::mark`), cleared by the owner of the
    /// mark under the shard lock with the index re-checked (`Engine::clear_state`).
    pub const QUEUED: u16 = 1 << 10;
    /// Bits a migrated copy keeps: what the client or the protocol can observe.
    pub const CARRIED_BY_MIGRATION: u16 = FETCHED | STALE | TOKEN_SENT | KEY_BINARY;
}

/// Byte ranges of the header that one kind of update rewrites. The accounting charges
/// the 64-byte lines they span, so the fields an operation writes together sit together:
/// a hit rewrites `ACCESS` (one aligned 8-byte word, so always one line), an LRU or
/// free-list link rewrites `LINKS` (the links and the segment bits of `state`).
pub(crate) mod header_bytes {
    use std::ops::Range;
    /// `next`, `prev`, `last_access_s`, `state`.
    pub const LINKS: Range<usize> = 0..22;
    /// `state`: flags alone (a queue mark, a refused promotion).
    pub const STATE: Range<usize> = 20..22;
    /// `last_access_s`, `state`, `access`: what a read or touch updates.
    pub const ACCESS: Range<usize> = 16..23;
    /// `key_hash`: what an index probe compares before the key.
    pub const KEY_HASH: Range<usize> = 36..40;
    /// `last_access_s` .. `exptime_rel_s`: what `touch` rewrites (access and expiry).
    pub const TOUCH: Range<usize> = 16..36;
    /// The record checksum of a slow-tier item in a persistent pool (`pool.rs`).
    pub const CHECKSUM: Range<usize> = 48..56;
    /// The whole header.
    pub const ALL: Range<usize> = 0..super::ITEM_HEADER_BYTES;
}

/// The header at the start of every chunk. `repr(C)`, 56 bytes. The fields a read
/// updates (`last_access_s`, `state`, `access`) share one aligned 8-byte word with
/// `key_len`, so a hit dirties exactly one 64-byte line of a slow-tier item.
#[repr(C, align(8))]
pub(crate) struct ItemHeader {
    /// LRU (or free list) links; meaningful under the class lock.
    pub next: AtomicU64,
    pub prev: AtomicU64,
    /// Relative time of the last access; written lock-free by reads.
    pub last_access_s: AtomicU32,
    /// `state::*` bits.
    pub state: AtomicU16,
    /// Owned by the placement policy (e.g. a decayed access counter and its period);
    /// the engine only zeroes it for a new item and copies it on migration.
    pub access: AtomicU8,
    pub key_len: AtomicU8,
    /// CAS unique; written under the shard lock.
    pub cas: AtomicU64,
    /// Relative expiry time, 0 = never; written under the shard lock.
    pub exptime_rel_s: AtomicU32,
    /// 32-bit hash of the key (selects the shard and rebuilds the index on growth).
    pub key_hash: AtomicU32,
    pub client_flags: AtomicU32,
    pub value_len: AtomicU32,
    /// A slow-tier item in a persistent pool: the checksum that makes the chunk a valid
    /// record (`pool.rs`), written after everything it covers and zeroed first when the
    /// item changes or is freed; 0 = not a valid record (always, in DRAM).
    pub checksum: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<ItemHeader>() == ITEM_HEADER_BYTES);
const _: () = assert!(
    std::mem::offset_of!(ItemHeader, last_access_s) == header_bytes::ACCESS.start
        && std::mem::offset_of!(ItemHeader, access) + 1 == header_bytes::ACCESS.end
        && std::mem::offset_of!(ItemHeader, state) + 2 == header_bytes::LINKS.end
        && std::mem::offset_of!(ItemHeader, state) == header_bytes::STATE.start
        && std::mem::offset_of!(ItemHeader, key_hash) == header_bytes::KEY_HASH.start
        && std::mem::offset_of!(ItemHeader, exptime_rel_s) + 4 == header_bytes::TOUCH.end
        && std::mem::offset_of!(ItemHeader, checksum) == header_bytes::CHECKSUM.start,
    "header_bytes ranges match the field layout"
);

impl ItemHeader {
    pub fn has(&self, bits: u16) -> bool {
        self.state.load(Ordering::Relaxed) & bits != 0
    }
    pub fn set(&self, bits: u16) {
        debug_assert!(
            bits & state::QUEUED == 0,
            "QUEUED is set by moves::Queued::mark"
        );
        self.state.fetch_or(bits, Ordering::Relaxed);
    }
    pub fn clear(&self, bits: u16) {
        debug_assert!(
            bits & state::QUEUED == 0,
            "QUEUED is cleared by Engine::clear_state"
        );
        self.state.fetch_and(!bits, Ordering::Relaxed);
    }
    pub fn segment(&self) -> usize {
        ((self.state.load(Ordering::Relaxed) & state::SEG_MASK) >> state::SEG_SHIFT) as usize
    }
    pub fn set_segment(&self, segment: usize) {
        let bits = ((segment as u16) << state::SEG_SHIFT) & state::SEG_MASK;
        let _ = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some((s & !state::SEG_MASK) | bits)
            });
    }
    pub fn total_bytes(&self) -> usize {
        ITEM_HEADER_BYTES
            + self.key_len.load(Ordering::Relaxed) as usize
            + self.value_len.load(Ordering::Relaxed) as usize
    }
    /// Records an access at `now_s` (a store only when the second changed, so a
    /// repeated hit within a second leaves a slow-tier line clean).
    pub fn touch_last_access(&self, now_s: u32) {
        if self.last_access_s.load(Ordering::Relaxed) != now_s {
            self.last_access_s.store(now_s, Ordering::Relaxed);
        }
    }
}

/// A tier's slab memory, seen as items.
pub(crate) struct ItemMemory {
    region: Region,
    tier_bits: u64,
    /// One more than the eighth of the last offset a header may start at; 0 when no
    /// header fits. The bounds check of every header access (`header_ptr`), kept here:
    /// computed from the region's page count it cost a multiplication and two loads.
    header_bound_eighths: usize,
    /// The region's size, for the item-bytes check of [`Located::bytes_ptr`] (one load
    /// instead of the region's page count and a shift).
    size_bytes: usize,
}

impl ItemMemory {
    pub fn new(region: Region, tier_number: u8) -> ItemMemory {
        ItemMemory {
            header_bound_eighths: region
                .size_bytes()
                .checked_sub(ITEM_HEADER_BYTES)
                .map_or(0, |last| (last >> 3) + 1),
            size_bytes: region.size_bytes(),
            region,
            tier_bits: u64::from(tier_number) << 56,
        }
    }

    /// The item at `addr`, its header located (and bounds-checked) once for every field
    /// the caller reads next. An out-of-range address is an engine bug and panics, as
    /// [`ItemMemory::header`].
    #[inline]
    pub fn item(&self, addr: ItemAddr) -> Located<'_> {
        Located {
            mem: self,
            ptr: self.header_ptr(addr),
            addr,
        }
    }

    /// The item `proof` names, located once, with the proof to read its key and value.
    #[inline]
    pub fn item_ref<P: ItemAccess>(&self, proof: P) -> ItemRef<'_, P> {
        ItemRef {
            at: self.item(proof.item_addr()),
            proof,
        }
    }

    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Accounts (and, for an emulated slow tier, waits for) a read of `len` bytes at
    /// byte `from` of the item at `addr`. Address arithmetic only: nothing is read.
    #[inline]
    pub fn charge_read(&self, addr: ItemAddr, from: usize, len: usize) {
        let ptr = self.header_ptr(addr).wrapping_add(from);
        self.region.charge_read(ptr, len);
    }

    /// As [`ItemMemory::charge_read`], for a write.
    #[inline]
    pub fn charge_write(&self, addr: ItemAddr, from: usize, len: usize) {
        let ptr = self.header_ptr(addr).wrapping_add(from);
        self.region.charge_write(ptr, len);
    }

    /// Charges writing header bytes `range` of every item in `addrs` as one burst (one
    /// access latency, each line counted), e.g. a fresh page's chunk headers.
    pub fn charge_header_write_burst(
        &self,
        addrs: impl Iterator<Item = ItemAddr>,
        range: std::ops::Range<usize>,
    ) {
        let (mut lines, mut bytes) = (0u64, 0u64);
        for addr in addrs {
            let from = self.header_ptr(addr) as usize + range.start;
            lines += tier::lines_touched(from, range.len());
            bytes += range.len() as u64;
        }
        self.region.charge_write_burst(lines, bytes);
    }

    /// Charges a read of header bytes `range` (see [`header_bytes`]).
    #[inline]
    pub fn charge_header_read(&self, addr: ItemAddr, range: std::ops::Range<usize>) {
        self.charge_read(addr, range.start, range.len());
    }

    /// Charges a write of one field of a neighbour's header (an LRU or free-list link).
    #[inline]
    pub fn header_write_field(&self, addr: ItemAddr, field: std::ops::Range<usize>) {
        self.charge_write(addr, field.start, field.len());
    }

    /// Charges a write of header bytes `range` (see [`header_bytes`]).
    #[inline]
    pub fn charge_header_write(&self, addr: ItemAddr, range: std::ops::Range<usize>) {
        self.charge_write(addr, range.start, range.len());
    }

    /// Charges a write of header bytes `range` except the 64-byte lines that
    /// `already` spans (written by the same operation and charged already).
    pub fn charge_header_write_except(
        &self,
        addr: ItemAddr,
        range: std::ops::Range<usize>,
        already: std::ops::Range<usize>,
    ) {
        let line = tier::LINE_SIZE_BYTES;
        let base = self.header_ptr(addr) as usize;
        let line_of = |offset: usize| (base + offset) / line;
        let (first, last) = (line_of(range.start), line_of(range.end - 1));
        let (skip_first, skip_last) = (line_of(already.start), line_of(already.end - 1));
        for l in first..=last {
            if (skip_first..=skip_last).contains(&l) {
                continue;
            }
            let from = (l * line).max(base + range.start);
            let to = ((l + 1) * line).min(base + range.end);
            self.region.charge_write(from as *const u8, to - from);
        }
    }

    /// Charges a read of bytes `[from, to)` of the item that continues a read of the
    /// bytes just before `from` by the same operation: the 64-byte line holding byte
    /// `from - 1` was charged by that read and is in the CPU's cache, so only the lines
    /// after it are charged (none when the rest fits in that line).
    #[inline]
    pub fn charge_read_continuing(&self, addr: ItemAddr, from: usize, to: usize) {
        self.item(addr).charge_read_continuing(from, to);
    }

    /// Address of byte `offset` of the region.
    pub fn addr_at(&self, offset: usize) -> ItemAddr {
        self.tier_bits | offset as u64
    }

    #[inline]
    pub fn offset_of(addr: ItemAddr) -> usize {
        (addr & OFFSET_MASK) as usize
    }

    #[inline]
    pub fn page_of(addr: ItemAddr) -> usize {
        Self::offset_of(addr) / tier::PAGE_SIZE_BYTES
    }

    /// Pointer to the header at `addr`, with the bounds check of invariant 1. An
    /// out-of-range address is an engine bug, never client-controlled. That the address
    /// is of this memory's tier is checked in debug builds only: every caller takes the
    /// memory from the address (`Engine::tier_of`), and checking it in release builds
    /// costs a load per header access (measured: 9 instructions per GET).
    #[inline]
    fn header_ptr(&self, addr: ItemAddr) -> *mut u8 {
        debug_assert_eq!(
            addr & !OFFSET_MASK,
            self.tier_bits,
            "item address {addr:#x} of another tier"
        );
        let offset = Self::offset_of(addr);
        // Aligned and in range in one compare (a dozen checks a request, three
        // instructions fewer each): rotating moves any of the low three bits to the top,
        // above every bound; an aligned offset's eighth is below the bound iff the offset
        // leaves room for a header. A release assert: every pointer this module makes
        // starts here.
        assert!(
            offset.rotate_right(3) < self.header_bound_eighths,
            "item address {addr:#x} outside its region"
        );
        self.region.base_ptr().as_ptr().wrapping_add(offset)
    }

    #[inline]
    pub fn header(&self, addr: ItemAddr) -> &ItemHeader {
        self.item(addr).header()
    }

    /// The key bytes of the item `item` names; the slice lives as long as the proof.
    #[inline]
    pub fn key<'a>(&'a self, item: &'a impl ItemAccess) -> &'a [u8] {
        // SAFETY: `item` vouches for the chunk (invariant 3) and the slice borrows it.
        unsafe { self.key_at(item.item_addr()) }
    }

    /// [`ItemMemory::key`] without the proof: one non-generic body for every proof type,
    /// compiled as the engine's hot path always was (a generic body made the optimiser
    /// inline it and call what it calls: +24 instructions per GET).
    ///
    /// # Safety
    /// The caller holds an [`ItemAccess`] for `addr` for as long as the slice lives.
    #[inline]
    unsafe fn key_at(&self, addr: ItemAddr) -> &[u8] {
        // SAFETY: the caller's contract.
        unsafe { self.item(addr).key_unproven() }
    }

    /// The value bytes of the item `item` names; the slice lives as long as the proof.
    #[inline]
    pub fn value<'a>(&'a self, item: &'a impl ItemAccess) -> &'a [u8] {
        // SAFETY: `item` vouches for the chunk (invariant 3) and the slice borrows it.
        unsafe { self.value_at(item.item_addr()) }
    }

    /// [`ItemMemory::value`] without the proof (see `key_at`).
    ///
    /// # Safety
    /// As for `key_at`.
    #[inline]
    unsafe fn value_at(&self, addr: ItemAddr) -> &[u8] {
        // SAFETY: the caller's contract.
        unsafe { self.item(addr).key_and_value_unproven().1 }
    }

    /// The key and value bytes of the item `item` names, contiguous (what a record
    /// checksum covers).
    pub fn key_and_value<'a>(&'a self, item: &'a impl ItemAccess) -> &'a [u8] {
        // SAFETY: `item` vouches for the chunk (invariant 3) and the slice borrows it.
        unsafe { self.key_and_value_at(item.item_addr()) }
    }

    /// [`ItemMemory::key_and_value`] without the proof (see `key_at`).
    ///
    /// # Safety
    /// As for `key_at`.
    unsafe fn key_and_value_at(&self, addr: ItemAddr) -> &[u8] {
        let item = self.item(addr);
        let header = item.header();
        let len = header.key_len.load(Ordering::Relaxed) as usize
            + header.value_len.load(Ordering::Relaxed) as usize;
        let ptr = item.bytes_ptr(ITEM_HEADER_BYTES, len);
        // SAFETY: in the region (checked by `bytes_ptr`) and in the chunk, which holds
        // header, key and value (invariant 1); no writer runs while the caller's proof,
        // which the slice outlives not, lives (invariant 3).
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// Makes the stores to bytes `[from, from + len)` of the item at `addr` persistent
    /// (see `tier::Region::persist`).
    pub fn persist(&self, addr: ItemAddr, from: usize, len: usize) -> Result<(), tier::TierError> {
        let ptr = self.header_ptr(addr).wrapping_add(from);
        self.region.persist(ptr, len)
    }

    /// Rewrites the value in place as `digits` followed by spaces up to its current
    /// length (memcached's in-place `incr`/`decr`), whatever that length is. `digits` is
    /// no longer than the item's value.
    pub fn overwrite_value_padded(&self, item: &mut Held<'_>, digits: &[u8]) {
        let addr = item.item_addr();
        let header = self.header(addr);
        let key_len = header.key_len.load(Ordering::Relaxed) as usize;
        let value_len = header.value_len.load(Ordering::Relaxed) as usize;
        // A release assert: a longer `digits` would write past the value, and the
        // padding's length below would wrap.
        assert!(
            digits.len() <= value_len,
            "in-place value write grows the value"
        );
        self.charge_write(addr, ITEM_HEADER_BYTES + key_len, value_len);
        let ptr = self
            .item(addr)
            .bytes_ptr(ITEM_HEADER_BYTES + key_len, value_len)
            .cast_mut();
        // SAFETY: `value_len` bytes from `ptr` lie in the chunk (invariant 1); no slice of
        // them is alive and no other thread touches them: `&mut Held` is the only name
        // of the item under its shard lock (invariant 3); `digits` is a caller buffer,
        // which cannot be a slice of this item for the same reason.
        unsafe {
            std::ptr::copy_nonoverlapping(digits.as_ptr(), ptr, digits.len());
            std::ptr::write_bytes(ptr.add(digits.len()), b' ', value_len - digits.len());
        }
    }

    /// Writes key and value (the concatenation of `value_parts`) into the fresh chunk
    /// `chunk` of `capacity_bytes`, and sets the header's length fields. The chunk must be
    /// at least `ITEM_HEADER_BYTES + key.len() + sum(value_parts)` bytes long.
    pub fn write_item(
        &self,
        chunk: &mut Fresh,
        capacity_bytes: usize,
        key: &[u8],
        value_parts: &[&[u8]],
    ) {
        let addr = chunk.addr;
        let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
        self.charge_write(addr, 0, ITEM_HEADER_BYTES + key.len() + value_len);
        // A release assert: the copies below write this many bytes from the chunk's start.
        assert!(
            key.len() <= u8::MAX as usize
                && ITEM_HEADER_BYTES + key.len() + value_len <= capacity_bytes
                && Self::offset_of(addr) + capacity_bytes <= self.region.size_bytes(),
            "item does not fit its chunk"
        );
        let header = self.header(addr);
        debug_assert!(
            !header.has(state::FREE) && !header.has(state::LINKED),
            "writing an item into chunk {addr:#x}, which is free or published"
        );
        header.key_len.store(key.len() as u8, Ordering::Relaxed);
        header.value_len.store(value_len as u32, Ordering::Relaxed);
        let mut ptr = self.header_ptr(addr).wrapping_add(ITEM_HEADER_BYTES);
        // SAFETY: the whole write lies inside the chunk (checked above, invariant 1), and
        // nobody else can see the chunk, nor hold a slice of it (`&mut Fresh`, invariant
        // 3). Sources are client buffers or other items' bytes borrowed from their own
        // proofs, never this chunk.
        unsafe {
            std::ptr::copy_nonoverlapping(key.as_ptr(), ptr, key.len());
            ptr = ptr.add(key.len());
            for part in value_parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), ptr, part.len());
                ptr = ptr.add(part.len());
            }
        }
    }
}

/// An item whose header was located once: [`ItemMemory::item`] made the bounds check of
/// invariant 1 for the header, so every field read through [`Located::header`] needs no
/// other, and a key or value read needs one compare (its end against the region's).
/// A request reads a dozen fields and the key and value of the item it found; checking
/// the address again for each cost ~7 instructions apiece. Header fields only (invariant
/// 2): the key and value are read through an [`ItemRef`], which pairs a `Located` with
/// the proof that they may be read.
///
/// Invariant: `ptr` is `mem`'s base plus the offset of `addr`, and that offset passed
/// `header_ptr`'s check (8-byte aligned, with a whole header inside the region); `mem`,
/// borrowed for `'m`, owns the region for at least as long (invariant 1).
#[derive(Clone, Copy)]
pub(crate) struct Located<'m> {
    mem: &'m ItemMemory,
    ptr: *mut u8,
    addr: ItemAddr,
}

impl<'m> Located<'m> {
    #[inline]
    pub fn addr(&self) -> ItemAddr {
        self.addr
    }

    #[inline]
    pub fn header(&self) -> &'m ItemHeader {
        // SAFETY: invariants 1 and 2 (checked when the `Located` was made: in range and
        // aligned), and every field is an atomic, so a shared reference is valid
        // whatever other threads do to the header.
        unsafe { &*(self.ptr as *const ItemHeader) }
    }

    /// Pointer to bytes `[from, from + len)` of the live item, checked to lie inside the
    /// region whatever its header says (a header is only as good as the last write to
    /// it: a torn or foreign pool record must not make a slice reach past the mapping).
    /// In debug builds also checks that the chunk is not on a free list (invariant 3
    /// (b)).
    #[inline]
    fn bytes_ptr(&self, from: usize, len: usize) -> *const u8 {
        debug_assert!(
            !self.header().has(state::FREE),
            "reading the bytes of free chunk {:#x}",
            self.addr
        );
        // The header's offset left room for a header, so the subtraction cannot wrap;
        // `from` is at most a header, a key and a value (u32), so the sum cannot either.
        let room = self.mem.size_bytes - ItemMemory::offset_of(self.addr);
        // A release assert: the header's lengths may be a torn record's.
        assert!(
            from.checked_add(len).is_some_and(|end| end <= room),
            "item {:#x} bytes {from}+{len} outside its region",
            self.addr
        );
        self.ptr.wrapping_add(from)
    }

    /// The key bytes, for any lifetime the caller picks: private to this module, whose
    /// proof-taking functions ([`ItemRef::key`], [`ItemMemory::key`]) tie it to a proof.
    ///
    /// # Safety
    /// The caller holds an [`ItemAccess`] for this item for as long as the slice lives
    /// (invariant 3).
    #[inline]
    unsafe fn key_unproven<'a>(&self) -> &'a [u8] {
        let key_len = self.header().key_len.load(Ordering::Relaxed) as usize;
        let ptr = self.bytes_ptr(ITEM_HEADER_BYTES, key_len);
        // SAFETY: in the region (checked by `bytes_ptr`) and in the chunk, which holds
        // header + key + value (invariant 1); no writer runs while the caller's proof,
        // which the slice outlives not, lives (caller's contract, invariant 3).
        unsafe { std::slice::from_raw_parts(ptr, key_len) }
    }

    /// The key and the value bytes, with one read of their lengths and one check.
    ///
    /// # Safety
    /// As for `key_unproven`.
    #[inline]
    unsafe fn key_and_value_unproven<'a>(&self) -> (&'a [u8], &'a [u8]) {
        let header = self.header();
        let key_len = header.key_len.load(Ordering::Relaxed) as usize;
        let value_len = header.value_len.load(Ordering::Relaxed) as usize;
        let ptr = self.bytes_ptr(ITEM_HEADER_BYTES, key_len + value_len);
        // SAFETY: as in `key_unproven`: both lie in the checked span.
        unsafe {
            (
                std::slice::from_raw_parts(ptr, key_len),
                std::slice::from_raw_parts(ptr.add(key_len), value_len),
            )
        }
    }

    /// [`ItemMemory::charge_read`] of this item.
    #[inline]
    pub fn charge_read(&self, from: usize, len: usize) {
        self.mem
            .region
            .charge_read(self.ptr.wrapping_add(from), len);
    }

    /// [`ItemMemory::charge_header_write`] of this item.
    #[inline]
    pub fn charge_header_write(&self, range: std::ops::Range<usize>) {
        self.mem
            .region
            .charge_write(self.ptr.wrapping_add(range.start), range.len());
    }

    /// [`ItemMemory::charge_read_continuing`] of this item.
    #[inline]
    pub fn charge_read_continuing(&self, from: usize, to: usize) {
        debug_assert!(from <= to, "read range {from}..{to} is reversed");
        let base = self.ptr as usize;
        let first_new_line = (base + from).next_multiple_of(tier::LINE_SIZE_BYTES);
        let end = base + to;
        if first_new_line < end {
            self.mem
                .region
                .charge_read(first_new_line as *const u8, end - first_new_line);
        }
    }
}

/// A located item ([`Located`]: its header found and checked once) with the proof that
/// its key and value may be read ([`ItemAccess`]: a [`Held`] from the index, or a
/// [`Fresh`] chunk). The key and value slices borrow the `ItemRef`, so they live no
/// longer than its proof (for a `Held`, no longer than the shard lock). Made by
/// [`ItemMemory::item_ref`], which locates the header at the proof's own address, or by
/// [`ItemRef::new`], which checks that the two name the same item (a compare the
/// optimiser removes where both come from one address, as in the index's look-up).
pub(crate) struct ItemRef<'m, P: ItemAccess> {
    at: Located<'m>,
    proof: P,
}

impl<'m, P: ItemAccess> ItemRef<'m, P> {
    /// Pairs `at` with `proof`; panics unless they name the same item.
    #[inline]
    pub fn new(at: Located<'m>, proof: P) -> Self {
        // A release assert: a proof for another item would let this one's bytes be read
        // while they are written (invariant 3).
        assert!(
            at.addr == proof.item_addr(),
            "item {:#x} located, proof for {:#x}",
            at.addr,
            proof.item_addr()
        );
        ItemRef { at, proof }
    }

    #[inline]
    pub fn addr(&self) -> ItemAddr {
        self.at.addr
    }

    /// The item's header (the `'m` reference needs no proof: invariant 2).
    #[inline]
    pub fn header(&self) -> &'m ItemHeader {
        self.at.header()
    }

    /// The located header without the proof (header fields and charges only).
    #[inline]
    pub fn located(&self) -> Located<'m> {
        self.at
    }

    #[inline]
    pub fn proof(&self) -> &P {
        &self.proof
    }

    #[inline]
    pub fn into_proof(self) -> P {
        self.proof
    }

    /// The key bytes; the slice borrows the proof.
    #[inline]
    pub fn key(&self) -> &[u8] {
        // SAFETY: `self.proof` vouches for the item at `self.at.addr` (the same address:
        // `new` checks it, `item_ref` locates it there), and the slice borrows `self`,
        // so it lives no longer than the proof (invariant 3).
        unsafe { self.at.key_unproven() }
    }

    /// The key and the value bytes, with one read of their lengths and one check; the
    /// slices borrow the proof.
    #[inline]
    pub fn key_and_value_parts(&self) -> (&[u8], &[u8]) {
        // SAFETY: as in `key`.
        unsafe { self.at.key_and_value_unproven() }
    }

    /// [`Located::charge_read`].
    #[inline]
    pub fn charge_read(&self, from: usize, len: usize) {
        self.at.charge_read(from, len);
    }

    /// [`Located::charge_read_continuing`].
    #[inline]
    pub fn charge_read_continuing(&self, from: usize, to: usize) {
        self.at.charge_read_continuing(from, to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> ItemMemory {
        ItemMemory::new(Region::heap(tier::PAGE_SIZE_BYTES).unwrap(), 0)
    }

    #[test]
    fn header_is_48_bytes_and_fields_round_trip() {
        let mem = memory();
        let addr = mem.addr_at(96);
        let h = mem.header(addr);
        h.set(state::LINKED | state::FETCHED);
        h.set_segment(2);
        assert!(h.has(state::FETCHED));
        assert_eq!(h.segment(), 2);
        h.clear(state::FETCHED);
        assert!(!h.has(state::FETCHED));
        assert!(h.has(state::LINKED));
        assert_eq!(h.segment(), 2);
    }

    #[test]
    fn header_accesses_outside_the_region_or_misaligned_are_refused() {
        let mem = memory();
        let last = tier::PAGE_SIZE_BYTES - ITEM_HEADER_BYTES;
        // The first and the last header that fit are accessible.
        for offset in [0, last] {
            let _ = mem.header(mem.addr_at(offset));
        }
        for offset in [
            1,
            4,
            last + 8,
            last + 1,
            tier::PAGE_SIZE_BYTES,
            usize::MAX >> 9,
        ] {
            let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = mem.header(mem.addr_at(offset));
            }));
            assert!(refused.is_err(), "header at offset {offset} was accessed");
        }
        let empty = ItemMemory::new(Region::heap(0).unwrap(), 0);
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = empty.header(empty.addr_at(0));
        }));
        assert!(refused.is_err(), "a header in an empty region was accessed");
    }

    #[test]
    fn item_bytes_round_trip() {
        let mem = memory();
        let addr = mem.addr_at(192);
        // SAFETY: a chunk of this test's own memory, which nothing else names.
        let mut chunk = unsafe { Fresh::claim(addr) };
        mem.write_item(&mut chunk, 120, b"key", &[b"hello ", b"world"]);
        assert_eq!(mem.key(&chunk), b"key");
        assert_eq!(mem.value(&chunk), b"hello world");
        assert_eq!(mem.key_and_value(&chunk), b"keyhello world");
        // The in-place rewrite needs the item published and found under its shard lock.
        let index = crate::index::Index::new(8);
        let key_hash = index.hash(b"key");
        let mut table = index.shard(key_hash).table.lock();
        crate::index::Index::insert_new(&mut table, key_hash, chunk);
        let mut item =
            crate::index::Index::find(&mut table, |_| &mem, key_hash, b"key").expect("published");
        mem.overwrite_value_padded(&mut item, b"42");
        assert_eq!(mem.value(&item), b"42         ");
        assert_eq!(mem.header(addr).total_bytes(), 56 + 3 + 11);
    }

    /// An `ItemRef` checks its header once and each key or value read against the
    /// region's end: the bytes it hands out are the item's, and a header whose lengths
    /// reach past the region (a torn or foreign pool record) is refused, at the last
    /// header of the region as anywhere. Its slices borrow its proof: a `Fresh` chunk
    /// here, the index's `Held` once published; a proof of another item is refused.
    #[test]
    fn item_refs_read_the_item_and_refuse_lengths_past_the_region() {
        let mem = memory();
        let last = tier::PAGE_SIZE_BYTES - ITEM_HEADER_BYTES - 16;
        for offset in [192, last] {
            let addr = mem.addr_at(offset);
            // SAFETY: a chunk of this test's own memory, which nothing else names.
            let mut chunk = unsafe { Fresh::claim(addr) };
            mem.write_item(&mut chunk, ITEM_HEADER_BYTES + 16, b"key", &[b"value"]);
            let item = mem.item_ref(chunk);
            assert_eq!(item.addr(), addr);
            assert_eq!(item.key(), b"key");
            assert_eq!(mem.value(item.proof()), b"value");
            assert_eq!(item.key_and_value_parts(), (&b"key"[..], &b"value"[..]));
            let room = tier::PAGE_SIZE_BYTES - offset - ITEM_HEADER_BYTES - 3;
            for (value_len, fits) in [(room, true), (room + 1, false), (u32::MAX as usize, false)] {
                item.header()
                    .value_len
                    .store(value_len as u32, Ordering::Relaxed);
                let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    item.key_and_value_parts().1.len()
                }));
                assert_eq!(
                    read.ok(),
                    fits.then_some(value_len),
                    "offset {offset} value {value_len}"
                );
                let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    mem.value(item.proof()).len()
                }));
                assert_eq!(value.ok(), fits.then_some(value_len));
            }
            item.header().value_len.store(5, Ordering::Relaxed);
            // Published, the item is read through the `Held` the index's look-up makes.
            let index = crate::index::Index::new(8);
            let key_hash = index.hash(b"key");
            let mut table = index.shard(key_hash).table.lock();
            crate::index::Index::insert_new(&mut table, key_hash, item.into_proof());
            let found = crate::index::Index::find_item(&mut table, |_| &mem, key_hash, b"key")
                .expect("published");
            assert_eq!(found.addr(), addr);
            assert_eq!(found.key_and_value_parts(), (&b"key"[..], &b"value"[..]));
            // A located header and a proof of another item do not pair.
            let elsewhere = mem.item(mem.addr_at(if offset == 192 { 512 } else { 192 }));
            let paired = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ItemRef::new(elsewhere, found.into_proof()).addr()
            }));
            assert!(
                paired.is_err(),
                "offset {offset}: a mismatched pair was made"
            );
        }
    }

    #[test]
    #[should_panic(expected = "outside its region")]
    fn out_of_range_address_is_refused() {
        let mem = memory();
        let _ = mem.header(mem.addr_at(tier::PAGE_SIZE_BYTES));
    }

    /// An address of another tier is refused (in debug builds) even when its offset lies
    /// inside this memory's region: its chunk is another memory's.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "of another tier")]
    fn an_address_of_another_tier_is_refused() {
        let mem = memory();
        let other = ItemMemory::new(Region::heap(tier::PAGE_SIZE_BYTES).unwrap(), 1);
        let _ = mem.header(other.addr_at(192));
    }

    /// A header whose lengths reach past the region (a torn or foreign pool record) never
    /// makes a slice beyond it.
    #[test]
    #[should_panic(expected = "outside its region")]
    fn a_header_reaching_past_the_region_is_refused() {
        let mem = memory();
        let addr = mem.addr_at(tier::PAGE_SIZE_BYTES - 64);
        // SAFETY: a chunk of this test's own memory, which nothing else names.
        let chunk = unsafe { Fresh::claim(addr) };
        mem.header(addr).value_len.store(1 << 20, Ordering::Relaxed);
        let _ = mem.value(&chunk);
    }
}
