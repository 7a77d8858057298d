//! The hash index: key -> item, split into independently locked shards.
//!
//! Each shard is a table of 8-byte *descriptors* in 64-byte buckets of eight. A
//! descriptor packs the item's tier and chunk offset, a 16-bit signature of its key's
//! hash, and what a placement policy keeps in DRAM for the item: one byte and one
//! reference bit (HMCached's DRAM-resident descriptor — key signature, location, access
//! counter, CLOCK bit — in 8 bytes instead of 19):
//!
//! ```text
//!  63        48 47     40  39   38   37                      0
//! | signature  | policy  |ref |tier| chunk offset / 8 (2 TiB) |
//! ```
//!
//! A lookup compares signatures in DRAM and reads an item only when its signature
//! matches (1 in 65 536 for another key): a miss costs no read of the item's tier, a
//! slow-tier one included. The signature also places the descriptor (its home bucket),
//! so growing a shard rehashes without reading a single item.
//!
//! Buckets are probed linearly from the home bucket; a lookup stops after the first
//! bucket with a never-used slot. A removed descriptor leaves a tombstone, which an
//! insert reuses; rebuilding the table clears them. A shard is rebuilt when used slots
//! pass 9/10 of its capacity, at the size that brings its load to 72 %: its load stays
//! between 0.72 and 0.9, so the index costs 8.9 to 11.1 bytes of DRAM per item at every
//! size (a doubling table swings between 9 and 18, plus its control bytes). A shard
//! grows on its own, under its own lock, so growing the index never stops requests to
//! the other shards.

use std::cell::Cell;
use std::marker::PhantomData;

use crate::lock::{Guard, Mutex, Rank};

use crate::item::{ItemAccess, ItemAddr, ItemMemory, ItemRef, Probed, Written};

/// A shard: its table, padded to its own cache lines.
#[repr(align(128))]
pub(crate) struct Shard {
    pub table: Mutex<Table>,
}

pub(crate) type ShardGuard<'a> = Guard<'a, Table>;

/// One key's place in its shard as a placement policy may touch it: the caller holds
/// the shard's lock (`table`) and looked the key up. Through it a policy reads and
/// writes the policy byte and reference bit of an item's descriptor (DRAM-resident
/// metadata, [`Index::with_policy_bits`]) and proves the lock when it queues the item
/// for a move (`moves::ItemLock`); it cannot insert, remove or look up anything.
pub(crate) struct ShardEntry<'a, 'g> {
    table: &'a mut ShardGuard<'g>,
    key_hash: u32,
}

impl<'a, 'g> ShardEntry<'a, 'g> {
    #[inline(always)]
    pub(crate) fn new(table: &'a mut ShardGuard<'g>, key_hash: u32) -> Self {
        ShardEntry { table, key_hash }
    }

    /// [`Index::with_policy_bits`] of the key's item at `addr`.
    #[inline]
    pub(crate) fn policy_bits<R>(
        &mut self,
        addr: ItemAddr,
        update: impl FnOnce(&mut u8, &mut bool) -> R,
    ) -> Option<R> {
        Index::with_policy_bits(self.table, self.key_hash, addr, update)
    }

    /// Whether the shard holds the item at `addr` of `key_hash` (the debug check of
    /// `moves::ItemLock`).
    pub(crate) fn holds(&self, key_hash: u32, addr: ItemAddr) -> bool {
        Index::contains(self.table, key_hash, addr)
    }
}

/// A published item of the shard whose lock is held for `'g`: the proof that reading its
/// key and value is safe (`item.rs`, invariant 3). Made only here, from a descriptor of
/// the table behind a `&'g mut` guard (so at most one exists per guard at a time, and
/// none outlives the lock); neither `Copy` nor `Clone`.
#[derive(Debug)]
pub(crate) struct Held<'g> {
    addr: ItemAddr,
    _guard: PhantomData<&'g mut Table>,
}

impl Held<'_> {
    /// Only for descriptors of a table whose guard the caller borrows for the `Held`'s
    /// lifetime.
    fn vouched(addr: ItemAddr) -> Self {
        Held {
            addr,
            _guard: PhantomData,
        }
    }

    pub fn addr(&self) -> ItemAddr {
        self.addr
    }
}

// SAFETY: a `Held` names an item whose descriptor is in a shard's table, and lives no
// longer than the `&mut` borrow of that shard's guard it was made under (`vouched` is
// private to this module, and every function making one ties its lifetime to the
// guard's borrow). A descriptor names a live item of its shard (`item.rs`, invariant 3
// (b)), whose bytes are written only under the same lock through the one `&mut Held`
// (`overwrite_value_padded`), and whose chunk is freed only after the descriptor left
// the table, which needs the guard `Held` borrows.
unsafe impl ItemAccess for Held<'_> {
    #[inline]
    fn item_addr(&self) -> ItemAddr {
        self.addr
    }
}

/// Descriptors per bucket: one cache line.
const SLOTS: usize = 8;
/// A slot never used since the table was built.
const EMPTY: u64 = 0;
/// A slot whose descriptor was removed (lookups probe past it).
const TOMBSTONE: u64 = 1;
/// Used slots (live + tombstones) above this share of the capacity rebuild the table.
const LOAD_MAX_PERMILLE: usize = 900;
/// The load a rebuilt table starts at.
const LOAD_AFTER_REBUILD_PERMILLE: usize = 720;

const OFFSET_BITS: u32 = 38;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const TIER_SHIFT: u32 = 38;
const REF_BIT: u64 = 1 << 39;
const POLICY_SHIFT: u32 = 40;
const SIG_SHIFT: u32 = 48;

/// The largest tier a descriptor can address (2 TiB; `EngineConfig::validate` refuses
/// larger ones).
pub(crate) const OFFSET_LIMIT_BYTES: u64 = (OFFSET_MASK + 1) * 8;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Bucket([u64; SLOTS]);

/// One shard's descriptors.
pub(crate) struct Table {
    buckets: Vec<Bucket>,
    live: usize,
    /// Slots holding a descriptor or a tombstone.
    used: usize,
    /// Where `Index::find` last found a key: a store or delete looks the same item up
    /// again by address right after (`slot_of`), and a check of this slot spares it the
    /// probe (docs/results/engine-hot-path-figures.md). Only a hint: `slot_of` uses it only if that slot
    /// holds a descriptor of the very address it looks for, and an address has one
    /// descriptor, so a stale hint is merely a miss.
    found_hint: Cell<Slot>,
}

/// Where a descriptor sits (valid until the table changes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    bucket: usize,
    slot: usize,
}

/// The 16-bit signature of a key hash (never 0, so a descriptor is never `EMPTY` or
/// `TOMBSTONE`). Mixed from the whole hash, independent of the shard's bits.
fn signature(key_hash: u32) -> u16 {
    let mixed = u64::from(key_hash).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    match (mixed >> 32) as u16 {
        0 => 1,
        sig => sig,
    }
}

fn encode(sig: u16, policy: u8, addr: ItemAddr) -> u64 {
    let tier = addr >> 56;
    let offset = ItemMemory::offset_of(addr) as u64;
    debug_assert!(
        offset.is_multiple_of(8) && offset < OFFSET_LIMIT_BYTES,
        "offset {offset}"
    );
    debug_assert!(tier <= 1, "tier {tier}");
    (u64::from(sig) << SIG_SHIFT)
        | (u64::from(policy) << POLICY_SHIFT)
        | (tier << TIER_SHIFT)
        | (offset >> 3)
}

fn decode_addr(descriptor: u64) -> ItemAddr {
    let tier = (descriptor >> TIER_SHIFT) & 1;
    (tier << 56) | ((descriptor & OFFSET_MASK) << 3)
}

fn sig_of(descriptor: u64) -> u16 {
    (descriptor >> SIG_SHIFT) as u16
}

/// Whether two keys are equal. Keys of 4 to 16 bytes (most) are compared as a first and
/// a last word each, overlapping when shorter than two: cheaper than a call of `bcmp`
/// on every look-up (docs/results/engine-hot-path-figures.md).
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    match a.len() {
        8..=16 => {
            a.first_chunk::<8>() == b.first_chunk::<8>()
                && a.last_chunk::<8>() == b.last_chunk::<8>()
        }
        4..=7 => {
            a.first_chunk::<4>() == b.first_chunk::<4>()
                && a.last_chunk::<4>() == b.last_chunk::<4>()
        }
        _ => a == b,
    }
}

fn is_descriptor(slot: u64) -> bool {
    slot > TOMBSTONE
}

impl Table {
    fn with_capacity(items: usize) -> Table {
        let buckets = (items * 1000 / LOAD_AFTER_REBUILD_PERMILLE)
            .div_ceil(SLOTS)
            .max(1);
        Table {
            buckets: vec![Bucket([EMPTY; SLOTS]); buckets],
            live: 0,
            used: 0,
            found_hint: Cell::new(Slot { bucket: 0, slot: 0 }),
        }
    }

    /// The bucket a signature starts probing at.
    fn home(&self, sig: u16) -> usize {
        (usize::from(sig) * self.buckets.len()) >> 16
    }

    /// Calls `visit` on every descriptor with signature `sig`, in probe order, until it
    /// returns true; returns that slot.
    #[inline]
    fn probe(&self, sig: u16, mut visit: impl FnMut(u64) -> bool) -> Option<Slot> {
        let n = self.buckets.len();
        let mut bucket = self.home(sig);
        for _ in 0..n {
            for (slot, &d) in self.buckets[bucket].0.iter().enumerate() {
                if d == EMPTY {
                    // A bucket's empty slots are its last ones (`insert` takes the first
                    // free slot, a removal leaves a tombstone), and a probe ends at the
                    // first bucket with one: nothing further can match. Stopping here
                    // rather than at the bucket's end saves most of a miss's scan.
                    return None;
                }
                if is_descriptor(d) && sig_of(d) == sig && visit(d) {
                    return Some(Slot { bucket, slot });
                }
            }
            bucket = if bucket + 1 == n { 0 } else { bucket + 1 };
        }
        None
    }

    /// The slot's content, if the table has such a slot.
    fn get_checked(&self, at: Slot) -> Option<u64> {
        self.buckets
            .get(at.bucket)
            .and_then(|b| b.0.get(at.slot))
            .copied()
    }

    fn get(&self, at: Slot) -> u64 {
        self.buckets[at.bucket].0[at.slot]
    }

    fn set(&mut self, at: Slot, value: u64) {
        self.buckets[at.bucket].0[at.slot] = value;
    }

    /// Puts `descriptor` in the first free slot (empty or tombstone) of its probe,
    /// rebuilding the table first if it is too full.
    fn insert(&mut self, descriptor: u64) {
        if (self.used + 1) * 1000 > self.capacity() * LOAD_MAX_PERMILLE {
            self.rebuild(self.live + 1);
        }
        let n = self.buckets.len();
        let mut bucket = self.home(sig_of(descriptor));
        for _ in 0..n {
            if let Some(slot) = self.buckets[bucket].0.iter().position(|&d| d <= TOMBSTONE) {
                if self.buckets[bucket].0[slot] == EMPTY {
                    // Probes stop at the first empty slot: everything after it is empty.
                    debug_assert!(
                        self.buckets[bucket].0[slot..].iter().all(|&d| d == EMPTY),
                        "a used slot after an empty one"
                    );
                    self.used += 1;
                }
                self.buckets[bucket].0[slot] = descriptor;
                self.live += 1;
                return;
            }
            bucket = if bucket + 1 == n { 0 } else { bucket + 1 };
        }
        // Unreachable: the load bound keeps a free slot.
        self.rebuild(self.live + 1);
        self.insert(descriptor);
    }

    /// Rebuilds the table for `items` descriptors at the load it starts at, dropping
    /// tombstones. Placement comes from the signatures: no item is read.
    fn rebuild(&mut self, items: usize) {
        let mut fresh = Table::with_capacity(items.max(self.live));
        for bucket in &self.buckets {
            for &d in &bucket.0 {
                if is_descriptor(d) {
                    fresh.insert(d);
                }
            }
        }
        *self = fresh;
    }

    fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS
    }

    /// Descriptors in the table.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live
    }
}

pub(crate) struct Index {
    shards: Box<[Shard]>,
    shard_shift: u32,
    hasher: foldhash::fast::FixedState,
}

impl Index {
    /// `hashpower`: log2 of the initial total number of slots.
    pub fn new(hashpower: u32) -> Index {
        // About 64 initial slots per shard, between 16 and 1024 shards.
        let shard_bits = hashpower.saturating_sub(6).clamp(4, 10);
        let per_shard = 1usize << (hashpower - shard_bits).min(14);
        let shards = (0..1usize << shard_bits)
            .map(|_| Shard {
                table: Mutex::new(
                    Rank::Shard,
                    Table::with_capacity(per_shard * LOAD_AFTER_REBUILD_PERMILLE / 1000),
                ),
            })
            .collect();
        Index {
            shards,
            shard_shift: 32 - shard_bits,
            hasher: foldhash::fast::FixedState::with_seed(0x6d65_6d63_6163_6865),
        }
    }

    #[inline]
    pub fn hash(&self, key: &[u8]) -> u32 {
        use std::hash::BuildHasher;
        let h = self.hasher.hash_one(key);
        (h ^ (h >> 32)) as u32
    }

    pub fn shard(&self, key_hash: u32) -> &Shard {
        &self.shards[self.shard_index(key_hash)]
    }

    /// Which shard a key hash belongs to.
    #[inline]
    pub fn shard_index(&self, key_hash: u32) -> usize {
        // The shard count is 2^(32 - shard_shift): the shifted hash is already in range
        // (the mask costs nothing where `%` by the length was a division).
        debug_assert!(self.shards.len().is_power_of_two());
        (key_hash >> self.shard_shift) as usize & (self.shards.len() - 1)
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard at `index`.
    pub fn shard_at(&self, index: usize) -> &Shard {
        &self.shards[index]
    }

    /// Makes room for `additional` more descriptors in a shard (recovery knows its
    /// counts before inserting, and so avoids rebuilding the table as it grows).
    pub fn reserve(table: &mut ShardGuard<'_>, additional: usize) {
        let wanted = table.live + additional;
        if wanted * 1000 > table.capacity() * LOAD_MAX_PERMILLE {
            table.rebuild(wanted);
        }
    }

    /// Total slots, for `hash_power_level` / `hash_bytes`.
    pub fn bucket_count(&self) -> usize {
        self.shards.iter().map(|s| s.table.lock().capacity()).sum()
    }

    /// DRAM bytes the index's tables hold: every item's only DRAM cost outside its own
    /// tier.
    pub fn allocated_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.table.lock().buckets.len() * std::mem::size_of::<Bucket>())
            .sum()
    }

    /// Finds the item with `key`. Descriptors may point into any tier: `mem_of` names
    /// the memory of an address. Only an item whose signature matches is read (charged
    /// to its tier: header and key).
    #[inline]
    pub fn find<'g, 'm>(
        table: &'g mut ShardGuard<'_>,
        mem_of: impl Fn(ItemAddr) -> &'m ItemMemory,
        key_hash: u32,
        key: &[u8],
    ) -> Option<Held<'g>> {
        Index::find_item(table, mem_of, key_hash, key).map(ItemRef::into_proof)
    }

    /// [`Index::find`], handing back the item found with its header located (and the
    /// `Held` to read its key and value), so that the caller reads its fields without
    /// locating it again.
    #[inline]
    pub fn find_item<'g, 'm>(
        table: &'g mut ShardGuard<'_>,
        mem_of: impl Fn(ItemAddr) -> &'m ItemMemory,
        key_hash: u32,
        key: &[u8],
    ) -> Option<ItemRef<'m, Held<'g>>> {
        Index::find_item_unless(table, mem_of, key_hash, key, |_, _| false)
    }

    /// [`Index::find_item`], unless `drop_dead` says the item found is dead: it gets the
    /// guard to remove it (and the located header to decide), and returns whether it did
    /// (then `None`). Always inlined (a read's look-up, `Engine::find_live_item`, is
    /// inlined into the `get` loop): as a call its set-up and saved registers were paid
    /// on every key (docs/results/engine-hot-path-figures.md).
    #[inline(always)]
    pub fn find_item_unless<'g, 'm>(
        table: &'g mut ShardGuard<'_>,
        mem_of: impl Fn(ItemAddr) -> &'m ItemMemory,
        key_hash: u32,
        key: &[u8],
        drop_dead: impl FnOnce(&mut ShardGuard<'_>, Probed<'m>) -> bool,
    ) -> Option<ItemRef<'m, Held<'g>>> {
        let at = Index::locate(table, mem_of, key_hash, key)?;
        if drop_dead(table, at) {
            return None;
        }
        // A descriptor of the table whose guard `Held` borrows for `'g`.
        Some(at.with_proof(Held::vouched(at.addr())))
    }

    /// The item with `key`, its header located once (and its key compared by words). The
    /// probe of each candidate charges its header and key (`ItemMemory::probe`), in the
    /// memory `mem_of` names for its address (the engine's one mapping of a tier number
    /// to its memory, `Engine::mem_of`).
    #[inline]
    fn locate<'m>(
        table: &ShardGuard<'_>,
        mem_of: impl Fn(ItemAddr) -> &'m ItemMemory,
        key_hash: u32,
        key: &[u8],
    ) -> Option<Probed<'m>> {
        let mut found = None;
        let slot = table.probe(signature(key_hash), |d| {
            let addr = decode_addr(d);
            // A descriptor of the table whose guard the caller borrows, for the
            // comparison only.
            let item = mem_of(addr).probe(Held::vouched(addr), key.len());
            let matches = same_key(item.key(), key);
            if matches {
                found = Some(item.probed());
            }
            matches
        })?;
        table.found_hint.set(slot);
        found
    }

    /// The item at `addr`, if the shard holds its descriptor: the proof to read it.
    pub fn held<'g>(
        table: &'g mut ShardGuard<'_>,
        key_hash: u32,
        addr: ItemAddr,
    ) -> Option<Held<'g>> {
        Index::slot_of(table, key_hash, addr).map(|_| Held::vouched(addr))
    }

    /// The slot of the descriptor of the item at `addr`, if the shard holds one.
    #[inline]
    fn slot_of(table: &ShardGuard<'_>, key_hash: u32, addr: ItemAddr) -> Option<Slot> {
        let hint = table.found_hint.get();
        if let Some(d) = table.get_checked(hint) {
            if is_descriptor(d) && decode_addr(d) == addr {
                return Some(hint);
            }
        }
        table.probe(signature(key_hash), |d| decode_addr(d) == addr)
    }

    /// Whether the shard holds a descriptor for the item at `addr`.
    pub fn contains(table: &ShardGuard<'_>, key_hash: u32, addr: ItemAddr) -> bool {
        Index::slot_of(table, key_hash, addr).is_some()
    }

    /// Publishes the written item `item` (its key known to be absent): inserts its
    /// descriptor.
    #[inline]
    pub fn insert_new(table: &mut ShardGuard<'_>, key_hash: u32, item: Written<'_>) {
        Index::insert_addr(table, key_hash, item.addr());
    }

    #[inline]
    fn insert_addr(table: &mut ShardGuard<'_>, key_hash: u32, addr: ItemAddr) {
        table.insert(encode(signature(key_hash), 0, addr));
    }

    /// Publishes the written item `new` in place of `old` (the same key): points the
    /// descriptor of `old` at it, keeping the policy byte. `false` (and `new` dropped:
    /// the caller still owns its chunk by address) if the shard holds no descriptor of
    /// `old`.
    #[inline]
    pub fn replace(
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        old: ItemAddr,
        new: Written<'_>,
    ) -> bool {
        Index::replace_addr(table, key_hash, old, new.addr())
    }

    #[inline]
    fn replace_addr(
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        old: ItemAddr,
        new: ItemAddr,
    ) -> bool {
        let Some(slot) = Index::slot_of(table, key_hash, old) else {
            return false;
        };
        let d = table.get(slot);
        table.set(slot, encode(sig_of(d), (d >> POLICY_SHIFT) as u8, new));
        true
    }

    /// The policy byte and reference bit of the descriptor of the item at `addr`, handed
    /// to `update`, which may change them (DRAM-resident metadata a placement policy
    /// keeps for the item: a read of it or a write to it never touches the item's tier).
    /// Returns what `update` returned, or `None` if the shard holds no such descriptor.
    #[inline]
    pub fn with_policy_bits<R>(
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        addr: ItemAddr,
        update: impl FnOnce(&mut u8, &mut bool) -> R,
    ) -> Option<R> {
        let slot = Index::slot_of(table, key_hash, addr)?;
        let d = table.get(slot);
        let mut byte = (d >> POLICY_SHIFT) as u8;
        let mut referenced = d & REF_BIT != 0;
        let result = update(&mut byte, &mut referenced);
        let updated = (d & !(0xFF << POLICY_SHIFT) & !REF_BIT)
            | (u64::from(byte) << POLICY_SHIFT)
            | if referenced { REF_BIT } else { 0 };
        table.set(slot, updated);
        Some(result)
    }

    /// Calls `visit` with every item of the shard in slots `from..` (slot order: bucket
    /// by bucket), until it returns false. Returns the slot to continue from, or `None`
    /// once the end of the table was reached. Slot numbers are valid until the table is
    /// rebuilt (a listing across calls may then repeat or miss items).
    pub fn visit_from(
        table: &mut ShardGuard<'_>,
        from: usize,
        mut visit: impl FnMut(&Held<'_>) -> bool,
    ) -> Option<usize> {
        let slots = table.capacity();
        for position in from..slots {
            let d = table.buckets[position / SLOTS].0[position % SLOTS];
            // Lent for the call only, while this function holds the guard's borrow.
            if is_descriptor(d) && !visit(&Held::vouched(decode_addr(d))) {
                return Some(position + 1);
            }
        }
        None
    }

    /// Removes the descriptor of the item at `addr`.
    #[inline]
    pub fn remove(table: &mut ShardGuard<'_>, key_hash: u32, addr: ItemAddr) -> bool {
        let Some(slot) = Index::slot_of(table, key_hash, addr) else {
            return false;
        };
        table.set(slot, TOMBSTONE);
        table.live -= 1;
        true
    }
}

#[cfg(test)]
mod tests;
