//! The hash index: key -> item address, split into independently locked shards.
//!
//! Each shard is a `hashbrown::HashTable<ItemAddr>` (8-byte entries) behind its own
//! mutex. Key comparison reads the key inside the item; growth rehashes from the hash
//! stored in each item header. A shard grows on its own, under its own lock, so growing
//! the index never stops requests to the other shards.

use std::sync::atomic::Ordering;

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use crate::item::{header_bytes, ItemAddr, ItemMemory, ITEM_HEADER_BYTES};

/// A shard: its table, padded to its own cache lines.
#[repr(align(128))]
pub(crate) struct Shard {
    pub table: Mutex<HashTable<ItemAddr>>,
}

pub(crate) type ShardGuard<'a> = MutexGuard<'a, HashTable<ItemAddr>>;

pub(crate) struct Index {
    shards: Box<[Shard]>,
    shard_shift: u32,
    hasher: foldhash::fast::FixedState,
}

/// Spreads a 32-bit key hash over 64 bits for the table (hashbrown uses the top 7 bits
/// as tags and the low bits as the bucket index; the shard uses the top bits of the
/// 32-bit hash, which the multiplication mixes into both).
pub(crate) fn table_hash(key_hash: u32) -> u64 {
    u64::from(key_hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Index {
    /// `hashpower`: log2 of the initial total number of buckets.
    pub fn new(hashpower: u32) -> Index {
        // About 64 initial buckets per shard, between 16 and 1024 shards.
        let shard_bits = hashpower.saturating_sub(6).clamp(4, 10);
        let per_shard = 1usize << (hashpower - shard_bits).min(14);
        let shards = (0..1usize << shard_bits)
            .map(|_| Shard {
                table: Mutex::new(HashTable::with_capacity(per_shard)),
            })
            .collect();
        Index {
            shards,
            shard_shift: 32 - shard_bits,
            hasher: foldhash::fast::FixedState::with_seed(0x6d65_6d63_6163_6865),
        }
    }

    pub fn hash(&self, key: &[u8]) -> u32 {
        use std::hash::BuildHasher;
        let h = self.hasher.hash_one(key);
        (h ^ (h >> 32)) as u32
    }

    pub fn shard(&self, key_hash: u32) -> &Shard {
        &self.shards[self.shard_index(key_hash)]
    }

    /// Which shard a key hash belongs to.
    pub fn shard_index(&self, key_hash: u32) -> usize {
        (key_hash >> self.shard_shift) as usize % self.shards.len()
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard at `index`.
    pub fn shard_at(&self, index: usize) -> &Shard {
        &self.shards[index]
    }

    /// Makes room for `additional` more entries in a shard (recovery knows its counts
    /// before inserting, and so avoids rehashing the table as it grows).
    pub fn reserve<'m>(
        table: &mut ShardGuard<'_>,
        mem_of: impl Fn(ItemAddr) -> &'m ItemMemory,
        additional: usize,
    ) {
        table.reserve(additional, |&a| {
            let mem = mem_of(a);
            mem.charge_header_read(a, header_bytes::KEY_HASH);
            table_hash(mem.header(a).key_hash.load(Ordering::Relaxed))
        });
    }

    /// DRAM bytes the index's tables hold (entries, control bytes, padding): every
    /// item's only DRAM cost outside its own tier.
    pub fn allocated_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.table.lock().allocation_size())
            .sum()
    }

    /// Total buckets, for `hash_power_level` / `hash_bytes`.
    pub fn bucket_count(&self) -> usize {
        self.shards.iter().map(|s| s.table.lock().capacity()).sum()
    }

    /// Finds the item with `key`. Entries may live in any tier: `mem_of` names the
    /// memory of an address. Each entry probed is charged as a read of its tier (a
    /// slow-tier key compare is a slow-tier access): the `key_hash` line for a tag
    /// collision, header and key for a matching hash.
    pub fn find<'m>(
        table: &ShardGuard<'_>,
        mem_of: impl Fn(ItemAddr) -> &'m ItemMemory,
        key_hash: u32,
        key: &[u8],
    ) -> Option<ItemAddr> {
        table
            .find(table_hash(key_hash), |&addr| {
                let mem = mem_of(addr);
                let h = mem.header(addr);
                if h.key_hash.load(Ordering::Relaxed) != key_hash {
                    // A collision of the table's tag: only the line of `key_hash` is read.
                    mem.charge_header_read(addr, header_bytes::KEY_HASH);
                    return false;
                }
                // The header and the key: the operation goes on to use every header
                // field, so the whole header is charged with the key, once.
                mem.charge_read(addr, 0, ITEM_HEADER_BYTES + key.len());
                // SAFETY: the caller holds this shard's lock and every entry of the
                // shard is a published item of the shard (item.rs invariant 3).
                unsafe { mem.key(addr) == key }
            })
            .copied()
    }

    /// Whether the shard holds an entry for the item at `addr`.
    pub fn contains(table: &ShardGuard<'_>, key_hash: u32, addr: ItemAddr) -> bool {
        table.find(table_hash(key_hash), |&a| a == addr).is_some()
    }

    /// Inserts `addr` for a key known to be absent. Growing the table rehashes from the
    /// hash in each item's header, wherever the item lives.
    pub fn insert_new<'m>(
        table: &mut ShardGuard<'_>,
        mem_of: impl Fn(ItemAddr) -> &'m ItemMemory,
        key_hash: u32,
        addr: ItemAddr,
    ) {
        table.insert_unique(table_hash(key_hash), addr, |&a| {
            // Growth rehashes every entry from its header: a read of each item's
            // `key_hash` line, wherever the item lives.
            let mem = mem_of(a);
            mem.charge_header_read(a, header_bytes::KEY_HASH);
            table_hash(mem.header(a).key_hash.load(Ordering::Relaxed))
        });
    }

    /// Replaces the entry `old` by `new` (same key).
    pub fn replace(
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        old: ItemAddr,
        new: ItemAddr,
    ) -> bool {
        match table.find_mut(table_hash(key_hash), |&a| a == old) {
            Some(slot) => {
                *slot = new;
                true
            }
            None => false,
        }
    }

    /// Removes the entry for the item at `addr`.
    pub fn remove(table: &mut ShardGuard<'_>, key_hash: u32, addr: ItemAddr) -> bool {
        match table.find_entry(table_hash(key_hash), |&a| a == addr) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }
}
