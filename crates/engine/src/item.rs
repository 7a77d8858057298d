//! Items in slab memory: the 56-byte header, then the key, then the value.
//!
//! This is the only module of the engine that dereferences raw pointers into slab
//! memory. An item is named by an [`ItemAddr`]: the byte offset of its header inside
//! its tier's region, with the tier number in the top byte, so the index, the LRU links
//! and the free lists are all plain `u64`s.
//!
//! Safety invariants (every `unsafe` block below relies on them):
//! 1. Memory: an `ItemMemory` owns its `Region` for as long as it lives; every address
//!    it is asked about is the start of a chunk inside that region and of this memory's
//!    tier, both checked in every build by one compare (`ItemMemory::locate`: the
//!    offset is the address with this memory's tier bits flipped off, so an address of
//!    another tier keeps its tier byte and is out of range); chunks are 8-byte aligned
//!    and at least `ITEM_HEADER_BYTES + key_len + value_len` long; and every key or value
//!    slice is checked to lie inside the region whatever the header says
//!    (`Located::bytes_ptr`).
//! 2. Header fields are atomics, so reading or writing them from any thread is defined
//!    behaviour; which lock makes a value *meaningful* is written next to each field.
//! 3. Key and value bytes are plain memory. No other thread may write them while a slice
//!    of them is alive, and nobody may hold a slice of them while they are written. This is
//!    carried by types: every function that reads or writes them takes a proof, an
//!    [`ItemAccess`], and the slices it returns borrow that proof:
//!    - [`Fresh`]: a chunk the allocator just handed to this thread (`ClassState::pop_free`,
//!      `Engine::take_chunk`), not yet written. It is neither `Copy` nor `Clone`, so only
//!      its owner can name it; [`Fresh::write_item`] consumes it and hands back a
//!      [`Written`] item, still unpublished, which publishing (`Index::insert_new`,
//!      `Index::replace`) consumes in turn.
//!    - [`Held`]: an item found in a shard's table while the caller holds that shard's
//!      lock. Only the index makes one (`Index::find`, `Index::held`, `Index::visit_from`),
//!      from a `&mut` borrow of the lock's guard (or a shared `&Held` inside a listing),
//!      so no slice outlives the lock and at most one `Held` per guard exists at a time;
//!      the in-place rewrite (`ItemRef::overwrite_value_padded`) takes `&mut` of the
//!      `ItemRef` holding the `Held`, so it cannot overlap a slice.
//!
//!    No function takes a memory and a proof apart (the tier of a proof's address is
//!    never picked by the caller): a `Fresh` and a `Written` carry the memory their
//!    chunk was taken from, an index look-up hands back an [`ItemRef`] located by the
//!    memory of its descriptor's tier, and a [`Held`] found by address is read through a
//!    view (below) that carries its memory, paired with the view after a check that both
//!    name one item. The unchecked reads (`Located::key_unproven`, ...) are private to this
//!    module.
//!
//! What the types cannot say (and how it is checked instead), so the proofs are made by
//! `unsafe` code that says why: (a) that a chunk is fresh: `Fresh::claim`, in the
//! allocator (the chunk just came off its class's free list, or is a page just given to
//! the class, under the class lock) and in recovery (`Written::recovered`: a record found
//! before the engine serves anyone); (b) that a descriptor in a shard's table names a
//! live item of that shard: the index takes descriptors only from `Written` items, and an
//! item's chunk is freed only after its descriptor left the index under the same lock
//! (`Engine::unlink`, `remove_locked`, `move_item`); the free path debug-asserts that the
//! chunk is no longer linked, and reads debug-assert that it is not on a free list; (c)
//! that an item's bytes are written only through those proofs: this module is the only
//! one that can write them.
//!
//! Release asserts. The checks the `unsafe` blocks' SAFETY comments rely on are not
//! `debug_assert!`s: an address inside the region and of this tier (`ItemMemory::locate`,
//! its panic out of line in `refuse`), a slice inside the region (`Located::bytes_ptr`),
//! a write inside its chunk (`Fresh::write_item`, `overwrite_value_padded`), a proof for
//! the item it is paired with (`Located::check_proof`). Each failing one would otherwise
//! be an out-of-bounds or aliasing access, so they stay in release builds; their failure
//! is a panic, which ends the `fogcached` process (its panic hook aborts,
//! `server/src/crash.rs`) before anything reads or writes through the bad pointer. The
//! others, which guard meaning rather than memory, are debug-only.
//!
//! Accounting: the charge is part of the access. Every byte of an item (header fields,
//! key, value, the LRU and free-list links in the header) is reached only through a
//! *view* that this module makes, and every way to make one charges the tier's region
//! (`tier::Region`, which counts the 64-byte lines and waits the emulated cost) for what
//! the view may touch, so a path that reads or writes an item without charging it does
//! not compile:
//! - [`HeaderRead`]: the header's fields, read. Made by a charged read
//!   ([`ItemMemory::read_header`]), by an index probe (which charged header and key), or
//!   from a write view.
//! - [`HeaderWrite`]: the fields, read and written. Made by a charged write
//!   ([`ItemMemory::write_header`], [`HeaderRead::charge_write`]).
//! - [`HeaderEdit`]: for the writes whose extent an operation learns only as it makes
//!   them (a hit's access word, a touch): its writes charge when the edit ends, once,
//!   if any was made. Ending it is dropping it, so it cannot be forgotten.
//! - [`ItemRead`] / [`ItemWrite`]: the whole item (key and value too), read or written,
//!   made by the charge of the rest of the item ([`HeaderRead::read_rest`]) or by
//!   [`Fresh::write_item`].
//! - a neighbour's link ([`ItemMemory::write_neighbour_next`], `_prev`) and a fresh
//!   page's headers ([`ItemMemory::write_headers_burst`]) are written by functions that
//!   charge what they write.
//!
//! A view lives for one operation: an operation charges each line it touches once, and
//! hands its views to the functions it calls (`Lru::unlink` takes the `HeaderWrite` its
//! caller paid for, `Engine::dead_reason` a `HeaderRead`), so one charge covers every
//! access of the operation. Which lines a charge covers (`header_bytes`) is the model's,
//! not the type's: `accounting::*` pins them. One rule is not a view: a [`Fresh`] chunk's
//! own header is rewritten by the allocator before its item is written (its state,
//! `Fresh::mark_allocated`), and that write is charged by whatever ends the chunk's
//! freshness, once: [`Fresh::write_item`] (the whole item) or [`Fresh::into_freed`] (its
//! links and state, when it goes back unwritten).

use std::ops::Range;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use tier::Region;

pub(crate) use crate::index::Held;
use crate::moves::MarkRight;

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
/// only way to name that chunk for a write (see the module comment). [`Fresh`],
/// [`Written`] and [`Held`] are the only implementations.
pub(crate) unsafe trait ItemAccess {
    fn item_addr(&self) -> ItemAddr;
}

/// A chunk the allocator handed to this thread and nobody else can see yet (invariant 3),
/// in the memory it was taken from. Neither `Copy` nor `Clone`: whoever holds it is the
/// only one naming the chunk, until [`Fresh::write_item`] turns it into a [`Written`]
/// item (or [`Fresh::into_freed`] gives it back unwritten).
#[must_use = "a fresh chunk is written or given back, or it leaks"]
pub(crate) struct Fresh<'m> {
    at: Located<'m>,
}

impl std::fmt::Debug for Fresh<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fresh({:#x})", self.at.addr)
    }
}

impl<'m> Fresh<'m> {
    /// Makes the proof for the chunk at `addr` of `mem` (bounds- and tier-checked).
    ///
    /// # Safety
    /// The caller has just taken the chunk for itself (off its class's free list, or a
    /// page run just given to the class, under the class lock); no index entry, LRU list
    /// or other thread names it, and no other proof for it exists.
    #[inline]
    pub unsafe fn claim(mem: &'m ItemMemory, addr: ItemAddr) -> Fresh<'m> {
        Fresh {
            at: mem.locate(addr),
        }
    }

    #[inline]
    pub fn addr(&self) -> ItemAddr {
        self.at.addr
    }

    /// Marks the chunk taken (`state::ALLOCATED`, what page evacuation skips as busy).
    /// Not charged here: the chunk's header is charged by what ends its freshness (the
    /// module comment's one rule), whose write covers this one.
    #[inline]
    pub fn mark_allocated(&self) {
        self.at
            .header()
            .state
            .store(state::ALLOCATED, Ordering::Relaxed);
    }

    /// Writes key and value (the concatenation of `value_parts`) into the chunk of
    /// `capacity_bytes`, and the header's length fields, charging the write of header, key
    /// and value once. The chunk must be at least `ITEM_HEADER_BYTES + key.len() +
    /// sum(value_parts)` bytes long. The other header fields are the caller's to write
    /// through the [`Written`] item's view (charged by this write).
    pub fn write_item(
        self,
        capacity_bytes: usize,
        key: &[u8],
        value_parts: &[&[u8]],
    ) -> Written<'m> {
        let at = self.at;
        let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
        at.charge_write(0, ITEM_HEADER_BYTES + key.len() + value_len);
        // A release assert: the copies below write this many bytes from the chunk's start.
        assert!(
            key.len() <= u8::MAX as usize
                && ITEM_HEADER_BYTES + key.len() + value_len <= capacity_bytes
                && ItemMemory::offset_of(at.addr) + capacity_bytes <= at.mem.size_bytes,
            "item does not fit its chunk"
        );
        let header = at.header();
        debug_assert!(
            header.state.load(Ordering::Relaxed) & (state::FREE | state::LINKED) == 0,
            "writing an item into chunk {:#x}, which is free or published",
            at.addr
        );
        header.key_len.store(key.len() as u8, Ordering::Relaxed);
        header.value_len.store(value_len as u32, Ordering::Relaxed);
        let mut ptr = at.ptr.wrapping_add(ITEM_HEADER_BYTES);
        // SAFETY: the whole write lies inside the chunk (checked above, invariant 1), and
        // nobody else can see the chunk, nor hold a slice of it (`self` is consumed: the
        // only name of the chunk, invariant 3). Sources are client buffers or other
        // items' bytes borrowed from their own proofs, never this chunk.
        unsafe {
            std::ptr::copy_nonoverlapping(key.as_ptr(), ptr, key.len());
            ptr = ptr.add(key.len());
            for part in value_parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), ptr, part.len());
                ptr = ptr.add(part.len());
            }
        }
        Written { at }
    }

    /// Gives the chunk up unwritten (a move that lost its race): charges the rewrite of
    /// its links and state that putting it back makes (`header_bytes::LINKS`, the one
    /// charge of its header, see [`Fresh::mark_allocated`]), and returns the view that
    /// makes it.
    pub fn into_freed(self) -> HeaderWrite<'m> {
        self.at
            .charge_write(header_bytes::LINKS.start, header_bytes::LINKS.len());
        HeaderWrite::of(self.at)
    }
}

// SAFETY: a `Fresh` is made only by `Fresh::claim`, whose caller vouches that nobody
// else names the chunk; it is not `Copy`, so its owner is the only one who can.
unsafe impl ItemAccess for Fresh<'_> {
    #[inline]
    fn item_addr(&self) -> ItemAddr {
        self.at.addr
    }
}

/// An item written into a fresh chunk (header, key and value written and charged), not
/// yet published: the proof publishing consumes (`Index::insert_new`, `Index::replace`).
/// Neither `Copy` nor `Clone`. Its key and value may be read, and its header written,
/// without a further charge: the write paid for the whole item.
#[must_use = "a written item is published or freed, or it leaks"]
pub(crate) struct Written<'m> {
    at: Located<'m>,
}

impl std::fmt::Debug for Written<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Written({:#x})", self.at.addr)
    }
}

impl<'m> Written<'m> {
    /// A record recovery found valid, as an item about to be published.
    ///
    /// # Safety
    /// The engine serves nobody yet and this thread is the only one handling the record
    /// (each record is in one shard's list), so nothing else names its chunk; `record`
    /// charged the read of the whole record. What recovery writes to its header is
    /// charged when it links or frees the record (`Engine::recover_records`).
    pub unsafe fn recovered(record: ItemRead<'m>) -> Written<'m> {
        Written { at: record.read.at }
    }

    #[inline]
    pub fn addr(&self) -> ItemAddr {
        self.at.addr
    }

    /// The whole item's view (charged by the write that made it).
    #[inline]
    pub fn view(&self) -> ItemWrite<'m> {
        ItemWrite {
            write: HeaderWrite::of(self.at),
        }
    }

    /// The key bytes; the slice borrows the item.
    #[inline]
    pub fn key(&self) -> &[u8] {
        // SAFETY: `self` is the only name of the chunk (invariant 3), and the slice
        // borrows it.
        unsafe { self.at.key_unproven() }
    }

    /// Key and value, contiguous (what a record checksum covers).
    #[inline]
    pub fn key_and_value(&self) -> &[u8] {
        // SAFETY: as in `key`.
        unsafe { self.at.record_unproven() }
    }

    /// Frees the item unpublished (a store refused under the lock, a write-down that
    /// raced): its header's rewrite was charged with the item's write.
    pub fn into_freed(self) -> HeaderWrite<'m> {
        HeaderWrite::of(self.at)
    }
}

// SAFETY: a `Written` is made only from a `Fresh` (consumed) or by `Written::recovered`,
// whose caller vouches that nobody else names the chunk; it is not `Copy`.
unsafe impl ItemAccess for Written<'_> {
    #[inline]
    fn item_addr(&self) -> ItemAddr {
        self.at.addr
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
    /// mark under the shard lock with the index re-checked (`Engine::clear_state`),
    /// through the two writes of a [`HeaderWrite`] that take a `moves::MarkRight`.
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
    /// `next` alone: a neighbour's forward link.
    pub const NEXT: Range<usize> = 0..8;
    /// `prev` alone: a neighbour's backward link.
    pub const PREV: Range<usize> = 8..16;
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
/// `key_len`, so a hit dirties exactly one 64-byte line of a slow-tier item. Private to
/// this module: the rest of the engine reads and writes it through the views, which
/// charge.
#[repr(C, align(8))]
struct ItemHeader {
    /// LRU (or free list) links; meaningful under the class lock.
    next: AtomicU64,
    prev: AtomicU64,
    /// Relative time of the last access; written lock-free by reads.
    last_access_s: AtomicU32,
    /// `state::*` bits.
    state: AtomicU16,
    /// Owned by the placement policy (e.g. a decayed access counter and its period);
    /// the engine only zeroes it for a new item and copies it on migration.
    access: AtomicU8,
    key_len: AtomicU8,
    /// CAS unique; written under the shard lock.
    cas: AtomicU64,
    /// Relative expiry time, 0 = never; written under the shard lock.
    exptime_rel_s: AtomicU32,
    /// 32-bit hash of the key (selects the shard and rebuilds the index on growth).
    key_hash: AtomicU32,
    client_flags: AtomicU32,
    value_len: AtomicU32,
    /// A slow-tier item in a persistent pool: the checksum that makes the chunk a valid
    /// record (`pool.rs`), written after everything it covers and zeroed first when the
    /// item changes or is freed; 0 = not a valid record (always, in DRAM).
    checksum: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<ItemHeader>() == ITEM_HEADER_BYTES);
const _: () = assert!(
    std::mem::offset_of!(ItemHeader, last_access_s) == header_bytes::ACCESS.start
        && std::mem::offset_of!(ItemHeader, access) + 1 == header_bytes::ACCESS.end
        && std::mem::offset_of!(ItemHeader, state) + 2 == header_bytes::LINKS.end
        && std::mem::offset_of!(ItemHeader, state) == header_bytes::STATE.start
        && std::mem::offset_of!(ItemHeader, next) == header_bytes::NEXT.start
        && std::mem::offset_of!(ItemHeader, prev) == header_bytes::PREV.start
        && std::mem::offset_of!(ItemHeader, key_hash) == header_bytes::KEY_HASH.start
        && std::mem::offset_of!(ItemHeader, exptime_rel_s) + 4 == header_bytes::TOUCH.end
        && std::mem::offset_of!(ItemHeader, checksum) == header_bytes::CHECKSUM.start,
    "header_bytes ranges match the field layout"
);

/// A tier's slab memory, seen as items.
pub(crate) struct ItemMemory {
    region: Region,
    tier_bits: u64,
    /// One more than the eighth of the last offset a header may start at; 0 when no
    /// header fits. The bounds check of every header access (`locate`), kept here:
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

    pub fn region(&self) -> &Region {
        &self.region
    }

    /// The header at `addr`, its read of header bytes `range` charged (see
    /// [`header_bytes`]). An address outside the region, or of another tier, is an
    /// engine bug and panics.
    #[inline]
    pub fn read_header(&self, addr: ItemAddr, range: Range<usize>) -> HeaderRead<'_> {
        let at = self.locate(addr);
        at.charge_read(range.start, range.len());
        HeaderRead { at }
    }

    /// The header at `addr`, its write of header bytes `range` charged.
    #[inline]
    pub fn write_header(&self, addr: ItemAddr, range: Range<usize>) -> HeaderWrite<'_> {
        let at = self.locate(addr);
        at.charge_write(range.start, range.len());
        HeaderWrite::of(at)
    }

    /// The whole item at `addr` (header, key and value), its read charged once (a move's
    /// copy).
    #[inline]
    pub fn read_item(&self, addr: ItemAddr) -> ItemRead<'_> {
        let read = HeaderRead {
            at: self.locate(addr),
        };
        read.at.charge_read(0, read.total_bytes());
        ItemRead { read }
    }

    /// The item at `addr` read as an index probe reads it, its header and key charged
    /// once (an admin listing, which finds it by address): its key is then read with a
    /// proof ([`Probed::key`]) without a further charge.
    #[inline]
    pub fn read_header_and_key(&self, addr: ItemAddr) -> Probed<'_> {
        let at = self.locate(addr);
        let key_len = usize::from(at.header().key_len.load(Ordering::Relaxed));
        at.charge_read(0, ITEM_HEADER_BYTES + key_len);
        Probed { at }
    }

    /// An index probe's read of the item `proof` names: its header and the first
    /// `key_len` bytes of its key (the key looked for: a match has that length), charged
    /// once. The item's key is then read without a further charge, and its value as the
    /// read's continuation ([`ItemRef::read_key_and_value`]).
    #[inline]
    pub fn probe<P: ItemAccess>(&self, proof: P, key_len: usize) -> ItemRef<'_, P> {
        let at = self.locate(proof.item_addr());
        at.charge_read(0, ITEM_HEADER_BYTES + key_len);
        ItemRef { at, proof }
    }

    /// Writes `next` of the item (or free chunk) at `addr`, a neighbour of the one being
    /// linked or unlinked, charging that field's write.
    #[inline]
    pub fn write_neighbour_next(&self, addr: ItemAddr, next: ItemAddr) {
        let at = self.locate(addr);
        at.charge_write(header_bytes::NEXT.start, header_bytes::NEXT.len());
        at.header().next.store(next, Ordering::Relaxed);
    }

    /// As [`ItemMemory::write_neighbour_next`], for `prev`.
    #[inline]
    pub fn write_neighbour_prev(&self, addr: ItemAddr, prev: ItemAddr) {
        let at = self.locate(addr);
        at.charge_write(header_bytes::PREV.start, header_bytes::PREV.len());
        at.header().prev.store(prev, Ordering::Relaxed);
    }

    /// Writes header bytes `range` of every item in `addrs` (`write` is handed each
    /// header's view in turn), charged as one burst: one access latency, each line
    /// counted (a fresh page's chunk headers, written back to back).
    pub fn write_headers_burst(
        &self,
        addrs: impl Iterator<Item = ItemAddr> + Clone,
        range: Range<usize>,
        mut write: impl FnMut(HeaderWrite<'_>),
    ) {
        let (mut lines, mut bytes) = (0u64, 0u64);
        for addr in addrs.clone() {
            let from = self.locate(addr).ptr as usize + range.start;
            lines += tier::lines_touched(from, range.len());
            bytes += range.len() as u64;
        }
        self.region.count_and_wait_write_burst(lines, bytes);
        for addr in addrs {
            write(HeaderWrite::of(self.locate(addr)));
        }
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

    /// The item at `addr`, its header located once for every field read next, with the
    /// check of invariant 1: in range, aligned and of this memory's tier, in one compare
    /// (a dozen checks a request, each cheaper so): the offset is the
    /// address with this tier's bits flipped, so another tier's address keeps bits above
    /// every bound; rotating moves any of the low three bits to the top, above every
    /// bound too; an aligned offset's eighth is below the bound iff the offset leaves
    /// room for a header. An address out of range is an engine bug, never
    /// client-controlled.
    #[inline]
    fn locate(&self, addr: ItemAddr) -> Located<'_> {
        let offset = (addr ^ self.tier_bits) as usize;
        // A release check (its panic in `refuse`): every pointer this module makes
        // starts here.
        if offset.rotate_right(3) >= self.header_bound_eighths {
            self.refuse(addr);
        }
        Located {
            mem: self,
            ptr: self.region.base_ptr().as_ptr().wrapping_add(offset),
            addr,
        }
    }

    /// The panic of a refused address, out of line (the check's cold side).
    #[cold]
    #[inline(never)]
    fn refuse(&self, addr: ItemAddr) -> ! {
        if addr & !OFFSET_MASK != self.tier_bits {
            panic!(
                "item address {addr:#x} of another tier (this memory's: {})",
                self.tier_bits >> 56
            );
        }
        panic!("item address {addr:#x} outside its region");
    }
}

/// An item whose header was located once: [`ItemMemory::locate`] made the bounds check
/// of invariant 1 for the header, so every field read through it needs no other, and a
/// key or value read needs one compare (its end against the region's). A request reads a
/// dozen fields and the key and value of the item it found, and checking the address
/// again for each was paid on every one (docs/results/engine-hot-path-figures.md). Private: what the rest of the engine holds is a
/// view of it, made by a charge.
///
/// Invariant: `ptr` is `mem`'s base plus the offset of `addr`, and that offset passed
/// `locate`'s check (this tier, 8-byte aligned, with a whole header inside the region);
/// `mem`, borrowed for `'m`, owns the region for at least as long (invariant 1).
#[derive(Clone, Copy)]
struct Located<'m> {
    mem: &'m ItemMemory,
    ptr: *mut u8,
    addr: ItemAddr,
}

// SAFETY: a `Located` is a shared borrow of an `ItemMemory` (which is `Sync`: its region
// is, invariant 1) and an address in it; the pointer is derived from that borrow and is
// dereferenced only under invariants 1 to 3, which hold on any thread (header fields are
// atomics, key and value bytes are read only with a proof). Recovery's page scans hand
// the views of the records they read to the thread that indexes them.
unsafe impl Send for Located<'_> {}
// SAFETY: see `Send`: `&Located` gives nothing `Located` does not.
unsafe impl Sync for Located<'_> {}

impl<'m> Located<'m> {
    #[inline]
    fn header(&self) -> &'m ItemHeader {
        // SAFETY: invariants 1 and 2 (checked when the `Located` was made: in range and
        // aligned), and every field is an atomic, so a shared reference is valid
        // whatever other threads do to the header.
        unsafe { &*(self.ptr as *const ItemHeader) }
    }

    /// Charges (counts, and for an emulated slow tier waits for) a read of `len` bytes at
    /// byte `from` of the item. Address arithmetic only: nothing is read.
    #[inline(always)]
    fn charge_read(&self, from: usize, len: usize) {
        self.mem
            .region
            .count_and_wait_read(self.ptr.wrapping_add(from), len);
    }

    /// As [`Located::charge_read`], for a write.
    #[inline(always)]
    fn charge_write(&self, from: usize, len: usize) {
        self.mem
            .region
            .count_and_wait_write(self.ptr.wrapping_add(from), len);
    }

    /// Charges a write of header bytes `range` except the 64-byte lines that `already`
    /// spans (written by the same operation and charged already).
    fn charge_write_except(&self, range: Range<usize>, already: Range<usize>) {
        let line = tier::LINE_SIZE_BYTES;
        let base = self.ptr as usize;
        let line_of = |offset: usize| (base + offset) / line;
        let (first, last) = (line_of(range.start), line_of(range.end - 1));
        let (skip_first, skip_last) = (line_of(already.start), line_of(already.end - 1));
        for l in first..=last {
            if (skip_first..=skip_last).contains(&l) {
                continue;
            }
            let from = (l * line).max(base + range.start);
            let to = ((l + 1) * line).min(base + range.end);
            self.mem
                .region
                .count_and_wait_write(from as *const u8, to - from);
        }
    }

    /// Charges a read of bytes `[from, to)` of the item that continues a read of the
    /// bytes just before `from` by the same operation: the 64-byte line holding byte
    /// `from - 1` was charged by that read and is in the CPU's cache, so only the lines
    /// after it are charged (none when the rest fits in that line).
    #[inline]
    fn charge_read_continuing(&self, from: usize, to: usize) {
        debug_assert!(from <= to, "read range {from}..{to} is reversed");
        let base = self.ptr as usize;
        let first_new_line = (base + from).next_multiple_of(tier::LINE_SIZE_BYTES);
        let end = base + to;
        if first_new_line < end {
            self.mem
                .region
                .count_and_wait_read(first_new_line as *const u8, end - first_new_line);
        }
    }

    /// Panics unless `proof` names this item: a view pairs with the proof of its own
    /// item only (one compare; none where both come from one address).
    #[inline]
    fn check_proof(&self, proof: &impl ItemAccess) {
        // A release assert: a proof for another item would let this one's bytes be read
        // while they are written (invariant 3).
        assert!(
            self.addr == proof.item_addr(),
            "item {:#x} viewed, proof for {:#x}",
            self.addr,
            proof.item_addr()
        );
    }

    /// Pointer to bytes `[from, from + len)` of the live item, checked to lie inside the
    /// region whatever its header says (a header is only as good as the last write to
    /// it: a torn or foreign pool record must not make a slice reach past the mapping).
    /// In debug builds also checks that the chunk is not on a free list (invariant 3
    /// (b)).
    #[inline]
    fn bytes_ptr(&self, from: usize, len: usize) -> *const u8 {
        debug_assert!(
            self.header().state.load(Ordering::Relaxed) & state::FREE == 0,
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
    /// proof-taking functions tie it to a proof. One non-generic body for every proof
    /// type, compiled as the engine's hot path always was (a generic body made the
    /// optimiser inline it and call what it calls, a cost on every GET).
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

    /// The key and the value bytes, contiguous.
    ///
    /// # Safety
    /// As for `key_unproven`.
    unsafe fn record_unproven<'a>(&self) -> &'a [u8] {
        let header = self.header();
        let len = header.key_len.load(Ordering::Relaxed) as usize
            + header.value_len.load(Ordering::Relaxed) as usize;
        let ptr = self.bytes_ptr(ITEM_HEADER_BYTES, len);
        // SAFETY: as in `key_unproven`.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// An item's header, which the operation holding this view has paid to read (a charged
/// read of some of its bytes, an index probe, or a charged write). `Copy`: the
/// operation hands it to whatever it calls, and nothing is charged twice.
#[derive(Clone, Copy)]
pub(crate) struct HeaderRead<'m> {
    at: Located<'m>,
}

impl<'m> HeaderRead<'m> {
    #[inline]
    pub fn addr(&self) -> ItemAddr {
        self.at.addr
    }

    #[inline]
    pub fn has(&self, bits: u16) -> bool {
        self.state() & bits != 0
    }
    #[inline]
    pub fn state(&self) -> u16 {
        self.at.header().state.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn segment(&self) -> usize {
        ((self.state() & state::SEG_MASK) >> state::SEG_SHIFT) as usize
    }
    #[inline]
    pub fn next(&self) -> ItemAddr {
        self.at.header().next.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn prev(&self) -> ItemAddr {
        self.at.header().prev.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn last_access_s(&self) -> u32 {
        self.at.header().last_access_s.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn access(&self) -> u8 {
        self.at.header().access.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn key_len(&self) -> u8 {
        self.at.header().key_len.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn cas(&self) -> u64 {
        self.at.header().cas.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn exptime_rel_s(&self) -> u32 {
        self.at.header().exptime_rel_s.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn key_hash(&self) -> u32 {
        self.at.header().key_hash.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn client_flags(&self) -> u32 {
        self.at.header().client_flags.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn value_len(&self) -> u32 {
        self.at.header().value_len.load(Ordering::Relaxed)
    }
    /// The record checksum (`Acquire`: a recovery check reads the record after it).
    #[inline]
    pub fn checksum(&self, order: Ordering) -> u64 {
        self.at.header().checksum.load(order)
    }
    #[inline]
    pub fn total_bytes(&self) -> usize {
        ITEM_HEADER_BYTES + usize::from(self.key_len()) + self.value_len() as usize
    }

    /// The same header, its write of bytes `range` charged now.
    #[inline]
    pub fn charge_write(self, range: Range<usize>) -> HeaderWrite<'m> {
        self.at.charge_write(range.start, range.len());
        HeaderWrite::of(self.at)
    }

    /// As [`HeaderRead::charge_write`], except the 64-byte lines of `already`, which the
    /// operation wrote and charged before (or charges when its edit ends).
    #[inline]
    pub fn charge_write_except(
        self,
        range: Range<usize>,
        already: Range<usize>,
    ) -> HeaderWrite<'m> {
        self.at.charge_write_except(range, already);
        HeaderWrite::of(self.at)
    }

    /// Opens an edit of header bytes `range`: its writes are charged once, when it ends,
    /// if it made any (see [`HeaderEdit`]).
    #[inline]
    pub fn edit(self, range: Range<usize>) -> HeaderEdit<'m> {
        HeaderEdit {
            at: self.at,
            from: range.start as u8,
            to: range.end as u8,
            except: None,
            dirty: false,
        }
    }

    /// The key bytes of the item `proof` names (this header's item), charged as the
    /// continuation of the header's read (the key's first bytes share the header's last
    /// line). The slice borrows the proof.
    pub fn read_key<'p>(&self, proof: &'p impl ItemAccess) -> &'p [u8] {
        self.at.check_proof(proof);
        let key_len = usize::from(self.key_len());
        self.at
            .charge_read_continuing(ITEM_HEADER_BYTES, ITEM_HEADER_BYTES + key_len);
        // SAFETY: `proof` vouches for this item (checked above) and the slice borrows it
        // (invariant 3).
        unsafe { self.at.key_unproven() }
    }

    /// The whole item, the read of its key and value charged now as the continuation of
    /// the header's.
    #[inline]
    pub fn read_rest(self) -> ItemRead<'m> {
        self.at
            .charge_read_continuing(ITEM_HEADER_BYTES, self.total_bytes());
        ItemRead { read: self }
    }

    /// Makes the stores to bytes `[from, from + len)` of the item persistent (see
    /// `tier::Region::persist`).
    pub fn persist(&self, from: usize, len: usize) -> Result<(), tier::TierError> {
        self.at
            .mem
            .region
            .persist(self.at.ptr.wrapping_add(from), len)
    }
}

/// An item's header, which the operation holding this view has paid to write (and so to
/// read: it derefs to a [`HeaderRead`]).
#[derive(Clone, Copy)]
pub(crate) struct HeaderWrite<'m> {
    read: HeaderRead<'m>,
}

impl<'m> std::ops::Deref for HeaderWrite<'m> {
    type Target = HeaderRead<'m>;
    #[inline]
    fn deref(&self) -> &HeaderRead<'m> {
        &self.read
    }
}

impl<'m> HeaderWrite<'m> {
    /// Private: every view is made by a charge (or, for a [`Fresh`] chunk's header, by
    /// what charges it).
    #[inline]
    fn of(at: Located<'m>) -> HeaderWrite<'m> {
        HeaderWrite {
            read: HeaderRead { at },
        }
    }

    #[inline]
    fn header(&self) -> &'m ItemHeader {
        self.read.at.header()
    }

    /// The view to read through (the same item).
    #[inline]
    pub fn read(&self) -> HeaderRead<'m> {
        self.read
    }

    #[inline]
    pub fn set(&self, bits: u16) {
        debug_assert!(
            bits & state::QUEUED == 0,
            "QUEUED is set by moves::Queued::mark"
        );
        self.header().state.fetch_or(bits, Ordering::Relaxed);
    }
    #[inline]
    pub fn clear(&self, bits: u16) {
        debug_assert!(
            bits & state::QUEUED == 0,
            "QUEUED is cleared by Engine::clear_state"
        );
        self.header().state.fetch_and(!bits, Ordering::Relaxed);
    }
    /// Sets `QUEUED`. Only `moves.rs` can call it (only it makes a [`MarkRight`]), in
    /// `Queued::mark`, whose caller holds the lock that keeps this chunk the item's.
    #[inline]
    pub fn set_queued(&self, _: MarkRight) {
        self.header()
            .state
            .fetch_or(state::QUEUED, Ordering::Relaxed);
    }
    /// Clears `bits`, which may include `QUEUED`. Only `moves.rs` can call it, in
    /// `Engine::clear_state`, under the shard lock with the index re-checked.
    #[inline]
    pub fn clear_marked(&self, bits: u16, _: MarkRight) {
        self.header().state.fetch_and(!bits, Ordering::Relaxed);
    }
    /// Replaces the whole state: a chunk changing hands (allocated, freed, recovered),
    /// whose old bits, `QUEUED` included, no longer mean anything.
    #[inline]
    pub fn store_state(&self, bits: u16) {
        self.header().state.store(bits, Ordering::Relaxed);
    }
    #[inline]
    pub fn set_segment(&self, segment: usize) {
        let bits = ((segment as u16) << state::SEG_SHIFT) & state::SEG_MASK;
        let _ = self
            .header()
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some((s & !state::SEG_MASK) | bits)
            });
    }
    #[inline]
    pub fn set_next(&self, next: ItemAddr) {
        self.header().next.store(next, Ordering::Relaxed);
    }
    #[inline]
    pub fn set_prev(&self, prev: ItemAddr) {
        self.header().prev.store(prev, Ordering::Relaxed);
    }
    #[inline]
    pub fn set_last_access_s(&self, now_s: u32) {
        self.header().last_access_s.store(now_s, Ordering::Relaxed);
    }
    /// Records an access at `now_s` (a store only when the second changed, so a
    /// repeated hit within a second leaves a slow-tier line clean).
    #[inline]
    pub fn touch_last_access(&self, now_s: u32) {
        if self.last_access_s() != now_s {
            self.set_last_access_s(now_s);
        }
    }
    #[inline]
    pub fn set_access(&self, access: u8) {
        self.header().access.store(access, Ordering::Relaxed);
    }
    #[inline]
    pub fn set_cas(&self, cas: u64) {
        self.header().cas.store(cas, Ordering::Relaxed);
    }
    #[inline]
    pub fn set_exptime_rel_s(&self, exptime_rel_s: u32) {
        self.header()
            .exptime_rel_s
            .store(exptime_rel_s, Ordering::Relaxed);
    }
    #[inline]
    pub fn set_key_hash(&self, key_hash: u32) {
        self.header().key_hash.store(key_hash, Ordering::Relaxed);
    }
    #[inline]
    pub fn set_client_flags(&self, client_flags: u32) {
        self.header()
            .client_flags
            .store(client_flags, Ordering::Relaxed);
    }
    /// Writes the record checksum (`Release` where it vouches for what was written
    /// before it).
    #[inline]
    pub fn set_checksum(&self, checksum: u64, order: Ordering) {
        self.header().checksum.store(checksum, order);
    }
}

/// Writes to an item's header whose extent the operation learns as it makes them (a hit:
/// the access word if the counter or the time changed, links as well if it relinked; a
/// touch: expiry and access). The edit charges header bytes `from..to` once when it ends
/// (it is dropped, or [`HeaderEdit::finish`]ed), if anything was written through it
/// ([`HeaderEdit::write`]) or it was told the operation rewrote the header anyway
/// ([`HeaderEdit::mark_dirty`]); nothing if not. Made from a [`HeaderRead`]: an
/// operation reads an item before it updates it.
pub(crate) struct HeaderEdit<'m> {
    at: Located<'m>,
    from: u8,
    to: u8,
    /// Lines this operation charged by other means (`header_bytes` range), skipped.
    except: Option<(u8, u8)>,
    dirty: bool,
}

impl<'m> HeaderEdit<'m> {
    /// The header, read (the edit was made from a read view).
    #[inline]
    pub fn read(&self) -> HeaderRead<'m> {
        HeaderRead { at: self.at }
    }

    /// The header to write, for as long as this borrow: what is written is charged
    /// when the edit ends.
    #[inline]
    pub fn write(&mut self) -> HeaderWrite<'_> {
        self.dirty = true;
        HeaderWrite::of(self.at)
    }

    /// The operation rewrote the header even if nothing was written through the edit
    /// (a `touch` to the same time): charge it when the edit ends.
    #[inline]
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// Widens the bytes charged to cover `range` as well (a hit that relinked the item
    /// rewrote its links too).
    #[inline]
    pub fn widen(&mut self, range: Range<usize>) {
        self.from = self.from.min(range.start as u8);
        self.to = self.to.max(range.end as u8);
    }

    /// The lines of header bytes `already` were charged by the operation otherwise (its
    /// hit's access word): they are not charged again.
    #[inline]
    pub fn except(&mut self, already: Range<usize>) {
        self.except = Some((already.start as u8, already.end as u8));
    }

    /// Ends the edit: charges it (if dirty) now. Returns whether it was dirty. Always
    /// inlined, as the `if dirty { charge }` it replaces was (the optimiser left it out of
    /// line once: a call on every hotspot GET).
    #[inline(always)]
    pub fn finish(self) -> bool {
        let dirty = self.dirty;
        if dirty {
            self.charge();
        }
        // Charged: the drop would charge again. (Ending it here rather than through
        // the drop glue keeps a hit's charge inline: the glue was left out of line, a
        // call on every GET.)
        std::mem::forget(self);
        dirty
    }
}

impl HeaderEdit<'_> {
    /// The charge of a dirty edit: one write of its bytes (inline, as a hit's was), or,
    /// less lines charged otherwise (a touch after its hit), out of line.
    #[inline(always)]
    fn charge(&self) {
        let (from, to) = (usize::from(self.from), usize::from(self.to));
        match self.except {
            None => self.at.charge_write(from, to - from),
            Some(already) => self.charge_except(already),
        }
    }

    #[inline(never)]
    fn charge_except(&self, (start, end): (u8, u8)) {
        let range = usize::from(self.from)..usize::from(self.to);
        self.at
            .charge_write_except(range, usize::from(start)..usize::from(end));
    }
}

impl Drop for HeaderEdit<'_> {
    /// Always inlined: a clean edit costs its caller one test, as the `if dirty` it
    /// replaces did.
    #[inline(always)]
    fn drop(&mut self) {
        if self.dirty {
            self.charge();
        }
    }
}

/// A whole item (header, key and value) the operation holding this view has paid to
/// read. Key and value are read through it with the proof of the same item, without a
/// further charge.
#[derive(Clone, Copy)]
pub(crate) struct ItemRead<'m> {
    read: HeaderRead<'m>,
}

impl<'m> std::ops::Deref for ItemRead<'m> {
    type Target = HeaderRead<'m>;
    #[inline]
    fn deref(&self) -> &HeaderRead<'m> {
        &self.read
    }
}

impl<'m> ItemRead<'m> {
    /// Key and value; the slices borrow `proof`, which must name this item.
    #[inline]
    pub fn key_and_value_parts<'p>(&self, proof: &'p impl ItemAccess) -> (&'p [u8], &'p [u8]) {
        self.read.at.check_proof(proof);
        // SAFETY: as in `key`.
        unsafe { self.read.at.key_and_value_unproven() }
    }

    /// Key and value, contiguous (what a record checksum covers).
    #[inline]
    pub fn key_and_value<'p>(&self, proof: &'p impl ItemAccess) -> &'p [u8] {
        self.read.at.check_proof(proof);
        // SAFETY: as in `key`.
        unsafe { self.read.at.record_unproven() }
    }
}

/// A whole item the operation holding this view has written (and paid for: a
/// [`Written`] item's view). Derefs to its header's write view; its key is read back
/// without a charge.
#[derive(Clone, Copy)]
pub(crate) struct ItemWrite<'m> {
    write: HeaderWrite<'m>,
}

impl<'m> std::ops::Deref for ItemWrite<'m> {
    type Target = HeaderWrite<'m>;
    #[inline]
    fn deref(&self) -> &HeaderWrite<'m> {
        &self.write
    }
}

impl<'m> ItemWrite<'m> {
    /// The header's write view.
    #[inline]
    pub fn header(&self) -> HeaderWrite<'m> {
        self.write
    }

    /// The key bytes; the slice borrows `proof`, which must name this item.
    #[inline]
    pub fn key<'p>(&self, proof: &'p impl ItemAccess) -> &'p [u8] {
        self.write.read.at.check_proof(proof);
        // SAFETY: `proof` vouches for this item (checked) and the slice borrows it.
        unsafe { self.write.read.at.key_unproven() }
    }
}

/// An item an index probe read (its header and key, charged once): what a look-up finds
/// before it pairs it with the proof that it may keep reading it. `Copy`.
#[derive(Clone, Copy)]
pub(crate) struct Probed<'m> {
    at: Located<'m>,
}

impl<'m> Probed<'m> {
    #[inline]
    pub fn addr(&self) -> ItemAddr {
        self.at.addr
    }

    /// The header (charged by the probe).
    #[inline]
    pub fn header(&self) -> HeaderRead<'m> {
        HeaderRead { at: self.at }
    }

    /// The key bytes (charged by the probe); the slice borrows `proof`, which must name
    /// this item.
    #[inline]
    pub fn key<'p>(&self, proof: &'p impl ItemAccess) -> &'p [u8] {
        self.at.check_proof(proof);
        // SAFETY: `proof` vouches for this item (checked) and the slice borrows it
        // (invariant 3).
        unsafe { self.at.key_unproven() }
    }

    /// Pairs the probed item with `proof`; panics unless they name the same item (a
    /// compare the optimiser removes where both come from one address, as in the
    /// index's look-up).
    #[inline]
    pub fn with_proof<P: ItemAccess>(self, proof: P) -> ItemRef<'m, P> {
        self.at.check_proof(&proof);
        ItemRef { at: self.at, proof }
    }
}

/// An item an index probe found ([`ItemMemory::probe`]: header located, header and key
/// charged) with the proof that its key and value may be read ([`ItemAccess`]: a
/// [`Held`] from the index). The key and value slices borrow the `ItemRef`, so they live
/// no longer than its proof (for a `Held`, no longer than the shard lock). The header
/// view ([`ItemRef::header`]) does not borrow it: it is `Copy` and outlives the proof
/// (invariant 2), so the operation keeps reading and writing header fields after its
/// look-up's proof went (to the index, or to unlink the item).
pub(crate) struct ItemRef<'m, P: ItemAccess> {
    at: Located<'m>,
    proof: P,
}

impl<'m, P: ItemAccess> ItemRef<'m, P> {
    #[inline]
    pub fn addr(&self) -> ItemAddr {
        self.at.addr
    }

    /// The item's header (charged by the probe).
    #[inline]
    pub fn header(&self) -> HeaderRead<'m> {
        HeaderRead { at: self.at }
    }

    /// The probed item without its proof.
    #[inline]
    pub fn probed(&self) -> Probed<'m> {
        Probed { at: self.at }
    }

    #[inline]
    pub fn proof(&self) -> &P {
        &self.proof
    }

    #[inline]
    pub fn into_proof(self) -> P {
        self.proof
    }

    /// The key bytes (charged by the probe); the slice borrows the proof.
    #[inline]
    pub fn key(&self) -> &[u8] {
        // SAFETY: `self.proof` vouches for the item at `self.at.addr` (the same address:
        // `probe` locates it there, `Probed::with_proof` checks it), and the slice borrows
        // `self`, so it lives no longer than the proof (invariant 3).
        unsafe { self.at.key_unproven() }
    }

    /// The key and the value bytes, with one read of their lengths and one check; the
    /// value's read is charged as the continuation of the probe's (header and key). The
    /// slices borrow the proof.
    #[inline]
    pub fn read_key_and_value(&self) -> (&[u8], &[u8]) {
        // SAFETY: as in `key`.
        let (key, value) = unsafe { self.at.key_and_value_unproven() };
        let value_from = ITEM_HEADER_BYTES + key.len();
        self.at
            .charge_read_continuing(value_from, value_from + value.len());
        (key, value)
    }

    /// The value bytes, charged as [`ItemRef::read_key_and_value`] charges them.
    #[inline]
    pub fn read_value(&self) -> &[u8] {
        self.read_key_and_value().1
    }
}

impl ItemRef<'_, Held<'_>> {
    /// Rewrites the value in place as `digits` followed by spaces up to its current
    /// length (memcached's in-place `incr`/`decr`), whatever that length is, charging the
    /// value's write. `digits` is no longer than the item's value.
    pub fn overwrite_value_padded(&mut self, digits: &[u8]) {
        let header = self.at.header();
        let key_len = header.key_len.load(Ordering::Relaxed) as usize;
        let value_len = header.value_len.load(Ordering::Relaxed) as usize;
        // A release assert: a longer `digits` would write past the value, and the
        // padding's length below would wrap.
        assert!(
            digits.len() <= value_len,
            "in-place value write grows the value"
        );
        self.at.charge_write(ITEM_HEADER_BYTES + key_len, value_len);
        let ptr = self
            .at
            .bytes_ptr(ITEM_HEADER_BYTES + key_len, value_len)
            .cast_mut();
        // SAFETY: `value_len` bytes from `ptr` lie in the chunk (invariant 1); no slice of
        // them is alive and no other thread touches them: `&mut self` holds the `Held`,
        // the only name of the item under its shard lock (invariant 3); `digits` is a
        // caller buffer, which cannot be a slice of this item for the same reason.
        unsafe {
            std::ptr::copy_nonoverlapping(digits.as_ptr(), ptr, digits.len());
            std::ptr::write_bytes(ptr.add(digits.len()), b' ', value_len - digits.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> ItemMemory {
        ItemMemory::new(Region::heap(tier::PAGE_SIZE_BYTES).unwrap(), 0)
    }

    /// Lines (read, written) the region counted while `op` ran.
    fn lines(mem: &ItemMemory, op: impl FnOnce()) -> (u64, u64) {
        let before = mem.region().access_counts();
        op();
        let after = mem.region().access_counts();
        (
            after.lines_read - before.lines_read,
            after.lines_written - before.lines_written,
        )
    }

    #[test]
    fn header_is_56_bytes_and_fields_round_trip() {
        let mem = memory();
        let addr = mem.addr_at(96);
        let h = mem.write_header(addr, header_bytes::ALL);
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
            let _ = mem.read_header(mem.addr_at(offset), header_bytes::ALL);
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
                let _ = mem.read_header(mem.addr_at(offset), header_bytes::ALL);
            }));
            assert!(refused.is_err(), "header at offset {offset} was accessed");
        }
        let empty = ItemMemory::new(Region::heap(0).unwrap(), 0);
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = empty.read_header(empty.addr_at(0), header_bytes::ALL);
        }));
        assert!(refused.is_err(), "a header in an empty region was accessed");
    }

    #[test]
    fn item_bytes_round_trip() {
        let mem = memory();
        let addr = mem.addr_at(192);
        // SAFETY: a chunk of this test's own memory, which nothing else names.
        let chunk = unsafe { Fresh::claim(&mem, addr) };
        let item = chunk.write_item(120, b"key", &[b"hello ", b"world"]);
        assert_eq!(item.key(), b"key");
        assert_eq!(item.key_and_value(), b"keyhello world");
        // The in-place rewrite needs the item published and found under its shard lock.
        let index = crate::index::Index::new(8);
        let key_hash = index.hash(b"key");
        let mut table = index.shard(key_hash).table.lock();
        crate::index::Index::insert_new(&mut table, key_hash, item);
        let mut found = crate::index::Index::find_item(&mut table, |_| &mem, key_hash, b"key")
            .expect("published");
        found.overwrite_value_padded(b"42");
        assert_eq!(found.read_value(), b"42         ");
        assert_eq!(found.header().total_bytes(), 56 + 3 + 11);
    }

    /// An `ItemRef` checks its header once and each key or value read against the
    /// region's end: the bytes it hands out are the item's, and a header whose lengths
    /// reach past the region (a torn or foreign pool record) is refused, at the last
    /// header of the region as anywhere. Its slices borrow its proof (the index's `Held`);
    /// a proof of another item is refused, by the pairing and by a view's reads.
    #[test]
    fn item_refs_read_the_item_and_refuse_lengths_past_the_region() {
        let mem = memory();
        let last = tier::PAGE_SIZE_BYTES - ITEM_HEADER_BYTES - 16;
        for offset in [192, last] {
            let addr = mem.addr_at(offset);
            // SAFETY: a chunk of this test's own memory, which nothing else names.
            let chunk = unsafe { Fresh::claim(&mem, addr) };
            let item = chunk.write_item(ITEM_HEADER_BYTES + 16, b"key", &[b"value"]);
            assert_eq!(item.addr(), addr);
            assert_eq!(item.key(), b"key");
            assert_eq!(item.key_and_value(), b"keyvalue");
            let index = crate::index::Index::new(8);
            let key_hash = index.hash(b"key");
            let mut table = index.shard(key_hash).table.lock();
            crate::index::Index::insert_new(&mut table, key_hash, item);
            let found = crate::index::Index::find_item(&mut table, |_| &mem, key_hash, b"key")
                .expect("published");
            assert_eq!(found.addr(), addr);
            assert_eq!(found.key(), b"key");
            assert_eq!(found.read_key_and_value(), (&b"key"[..], &b"value"[..]));
            let room = tier::PAGE_SIZE_BYTES - offset - ITEM_HEADER_BYTES - 3;
            for (value_len, fits) in [(room, true), (room + 1, false), (u32::MAX as usize, false)] {
                found
                    .at
                    .header()
                    .value_len
                    .store(value_len as u32, Ordering::Relaxed);
                let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    found.read_key_and_value().1.len()
                }));
                assert_eq!(
                    read.ok(),
                    fits.then_some(value_len),
                    "offset {offset} value {value_len}"
                );
                let whole = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    found
                        .header()
                        .read_rest()
                        .key_and_value(found.proof())
                        .len()
                }));
                assert_eq!(whole.ok(), fits.then_some(3 + value_len));
            }
            found.at.header().value_len.store(5, Ordering::Relaxed);
            // A probed item and a proof of another item do not pair, nor does a view
            // read another item's key.
            let probed = found.probed();
            let held = found.into_proof();
            let other = mem.addr_at(if offset == 192 { 512 } else { 192 });
            let elsewhere = mem.read_header(other, header_bytes::ALL);
            let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                elsewhere.read_key(&held).len()
            }));
            assert!(read.is_err(), "offset {offset}: a view read another's key");
            assert_eq!(probed.key(&held), b"key");
            let paired = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                mem.read_header_and_key(other).with_proof(held).addr()
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
        let _ = mem.read_header(mem.addr_at(tier::PAGE_SIZE_BYTES), header_bytes::ALL);
    }

    /// An address of another tier is refused (in every build: the check is the bounds
    /// check itself) even when its offset lies inside this memory's region: its chunk is
    /// another memory's, and its bytes would be read from the wrong tier.
    #[test]
    #[should_panic(expected = "of another tier")]
    fn an_address_of_another_tier_is_refused() {
        let mem = memory();
        let other = ItemMemory::new(Region::heap(tier::PAGE_SIZE_BYTES).unwrap(), 1);
        let _ = mem.read_header(other.addr_at(192), header_bytes::ALL);
    }

    /// A header whose lengths reach past the region (a torn or foreign pool record) never
    /// makes a slice beyond it.
    #[test]
    #[should_panic(expected = "outside its region")]
    fn a_header_reaching_past_the_region_is_refused() {
        let mem = memory();
        let addr = mem.addr_at(tier::PAGE_SIZE_BYTES - 64);
        // SAFETY: a chunk of this test's own memory, which nothing else names.
        let chunk = unsafe { Fresh::claim(&mem, addr) };
        let item = chunk.write_item(64, b"k", &[]);
        item.at.header().value_len.store(1 << 20, Ordering::Relaxed);
        let _ = item.key_and_value();
    }

    /// Each way to reach an item's bytes pays for them once: a view is made by a charge
    /// (nothing more is charged for what it reads or writes), an edit charges its bytes
    /// once when it ends and only if it wrote, widened by a relink and less the lines the
    /// operation charged otherwise, and a neighbour's link costs its line.
    #[test]
    fn views_charge_once_when_made_and_edits_once_when_they_end() {
        let mem = memory();
        // A header straddling two lines (offset 40: bytes 40..96 of the page), so that a
        // range's lines are told apart.
        let addr = mem.addr_at(40);
        let (read, view) = {
            let mut view = None;
            let counted = lines(&mem, || {
                view = Some(mem.read_header(addr, header_bytes::ALL))
            });
            (counted, view.expect("made"))
        };
        assert_eq!(read, (2, 0), "a header read of both lines");
        let reads = lines(&mem, || {
            for _ in 0..10 {
                let _ = (view.cas(), view.total_bytes(), view.segment());
            }
        });
        assert_eq!(reads, (0, 0), "reads through a view are paid for");
        // An edit that wrote nothing charges nothing.
        assert_eq!(
            lines(&mem, || drop(view.edit(header_bytes::ACCESS))),
            (0, 0)
        );
        // One that wrote twice charges its range once: the access word (bytes 56..63 of
        // the page: line 0).
        let once = lines(&mem, || {
            let mut edit = view.edit(header_bytes::ACCESS);
            edit.write().set(state::FETCHED);
            edit.write().touch_last_access(7);
            assert!(edit.finish());
        });
        assert_eq!(once, (0, 1));
        // Widened to the links (bytes 40..63: line 0 only, here) and to the expiry
        // (`TOUCH`, bytes 56..76: lines 0 and 1), less the access word's line.
        let widened = lines(&mem, || {
            let mut edit = view.edit(header_bytes::ACCESS);
            edit.write().set_exptime_rel_s(9);
            edit.widen(header_bytes::TOUCH);
            edit.except(header_bytes::ACCESS);
        });
        assert_eq!(widened, (0, 1));
        let marked = lines(&mem, || view.edit(header_bytes::TOUCH).mark_dirty());
        assert_eq!(
            marked,
            (0, 2),
            "a touch to the same time rewrites the header"
        );
        assert_eq!(
            lines(&mem, || mem.write_neighbour_prev(addr, NIL)),
            (0, 1),
            "a neighbour's link: its line"
        );
        assert_eq!(view.prev(), NIL);
    }
}
