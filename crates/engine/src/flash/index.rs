//! The flash tier's index in DRAM: where each flash item starts on the device, in 6 bytes
//! per slot, so that DRAM per flash item stays under 8 bytes (issue 26; extstore keeps
//! ~91 B per item, Navy's BlockCache 12 B). fogsim's model of the tier uses it, and so
//! will the engine's.
//!
//! A fixed table of buckets of [`BUCKET_SLOTS`] slots. A slot is a `u32` location (the
//! device's 64-byte granule where the item's record starts: 256 GiB per table) and a
//! `u16` tag (a hot bit, and 15 bits of the key's hash taken apart from the bucket bits;
//! 0 marks an empty slot). Each key has two candidate buckets (two-choice hashing): an
//! insert takes the emptier, a lookup compares the tag in both (2 x 96 B). The key itself
//! is only on the device: a tag match is a candidate, verified by reading the record (a
//! different key there is a tag collision, a miss). The table is sized once, for a full
//! device at about 90 % load, where about 0.5 % of inserts find both buckets full
//! (docs/results/sim-flash.md); the slot in the oldest segment then gives way.

/// Slots per bucket: 16 x 6 B, under two cache lines.
pub const BUCKET_SLOTS: usize = 16;
/// DRAM bytes per slot: a `u32` location and a `u16` tag.
pub const SLOT_BYTES: u64 = 6;
/// Bits of the key's hash a tag holds.
pub const TAG_BITS: u32 = 15;
const TAG_MASK: u16 = (1 << TAG_BITS) - 1;
const HOT_BIT: u16 = 1 << TAG_BITS;

/// A slot's location: the device's 64-byte granule where the record starts.
pub type Location = u32;

/// A key as the index sees it: its two buckets and its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPlace {
    b1: usize,
    b2: usize,
    tag: u16,
}

/// A slot whose tag is the key's: where it is, where its item starts, whether it is hot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub bucket: usize,
    pub slot: usize,
    pub location: Location,
    pub hot: bool,
}

/// The table (see the module comment).
pub struct FlashIndex {
    buckets: usize,
    locations: Box<[Location]>,
    tags: Box<[u16]>,
    items: u64,
}

impl FlashIndex {
    /// A table of at least `slots_wanted` slots (two buckets at least).
    pub fn new(slots_wanted: u64) -> FlashIndex {
        let buckets = (slots_wanted.div_ceil(BUCKET_SLOTS as u64)).max(2) as usize;
        FlashIndex {
            buckets,
            locations: vec![0; buckets * BUCKET_SLOTS].into_boxed_slice(),
            tags: vec![0; buckets * BUCKET_SLOTS].into_boxed_slice(),
            items: 0,
        }
    }

    /// The buckets and tag of a key whose 64-bit hash is `key_hash`.
    pub fn place(&self, key_hash: u64) -> KeyPlace {
        // Multiply-shift maps 32 hash bits onto the bucket count (no power of two
        // needed); the tag comes from bits neither bucket uses.
        let n = self.buckets as u64;
        let b1 = (((key_hash & 0xffff_ffff) * n) >> 32) as usize;
        // The second bucket from the hash mixed again: independent of the first.
        let h2 = (key_hash ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let h2 = h2 ^ (h2 >> 31);
        let mut b2 = (((h2 >> 32) * n) >> 32) as usize;
        if b2 == b1 {
            b2 = (b1 + 1) % self.buckets;
        }
        let tag = ((key_hash >> 48) as u16) & TAG_MASK;
        KeyPlace {
            b1,
            b2,
            tag: if tag == 0 { 1 } else { tag },
        }
    }

    /// Slots the table has.
    pub fn slots(&self) -> u64 {
        self.locations.len() as u64
    }

    /// Slots in use.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// DRAM the table allocated, in bytes.
    pub fn dram_bytes(&self) -> u64 {
        (self.locations.len() * std::mem::size_of::<Location>()
            + self.tags.len() * std::mem::size_of::<u16>()) as u64
    }

    fn at(&self, bucket: usize, slot: usize) -> (Location, u16) {
        let s = bucket * BUCKET_SLOTS + slot;
        (self.locations[s], self.tags[s])
    }

    fn put(&mut self, bucket: usize, slot: usize, location: Location, tag: u16) {
        let s = bucket * BUCKET_SLOTS + slot;
        self.locations[s] = location;
        self.tags[s] = tag;
    }

    fn slots_of(k: KeyPlace) -> impl Iterator<Item = (usize, usize)> {
        [k.b1, k.b2]
            .into_iter()
            .flat_map(|b| (0..BUCKET_SLOTS).map(move |i| (b, i)))
    }

    /// The slots of both buckets whose tag is the key's, first bucket first.
    pub fn candidates(&self, k: KeyPlace) -> impl Iterator<Item = Candidate> + '_ {
        Self::slots_of(k).filter_map(move |(bucket, slot)| {
            let (location, tag) = self.at(bucket, slot);
            (tag & TAG_MASK == k.tag).then_some(Candidate {
                bucket,
                slot,
                location,
                hot: tag & HOT_BIT != 0,
            })
        })
    }

    /// Empties a slot in use.
    pub fn remove(&mut self, bucket: usize, slot: usize) {
        debug_assert!(self.at(bucket, slot).1 != 0, "removing an empty slot");
        self.put(bucket, slot, 0, 0);
        self.items -= 1;
    }

    /// Marks a slot's item hot (read since it was written).
    pub fn set_hot(&mut self, bucket: usize, slot: usize) {
        let (location, tag) = self.at(bucket, slot);
        debug_assert!(tag != 0, "marking an empty slot");
        self.put(bucket, slot, location, tag | HOT_BIT);
    }

    fn free_slots(&self, bucket: usize) -> usize {
        (0..BUCKET_SLOTS)
            .filter(|&i| self.at(bucket, i).1 == 0)
            .count()
    }

    /// Adds the key's slot at `location` in the emptier of its buckets. When both are
    /// full, the slot whose location is oldest (`age`: lower is older) gives way, and its
    /// location is returned so that its segment's live count drops.
    pub fn insert(
        &mut self,
        k: &KeyPlace,
        location: Location,
        age: impl Fn(Location) -> u64,
    ) -> Option<Location> {
        let bucket = if self.free_slots(k.b2) > self.free_slots(k.b1) {
            k.b2
        } else {
            k.b1
        };
        if let Some(slot) = (0..BUCKET_SLOTS).find(|&i| self.at(bucket, i).1 == 0) {
            self.put(bucket, slot, location, k.tag);
            self.items += 1;
            return None;
        }
        let (bucket, slot) = Self::slots_of(*k)
            .min_by_key(|&(b, i)| age(self.at(b, i).0))
            .unwrap_or((k.b1, 0));
        let old = self.at(bucket, slot).0;
        self.put(bucket, slot, location, k.tag);
        Some(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(i: u64) -> u64 {
        let mut h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 31;
        h.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 29)
    }

    #[test]
    fn an_inserted_key_is_a_candidate_until_removed_and_hot_once_marked() {
        let mut index = FlashIndex::new(1024);
        let k = index.place(mix(7));
        assert_eq!(index.candidates(k).count(), 0);
        assert_eq!(index.insert(&k, 4242, |_| 0), None);
        let found: Vec<_> = index.candidates(k).collect();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].location, found[0].hot), (4242, false));
        index.set_hot(found[0].bucket, found[0].slot);
        assert!(index.candidates(k).next().unwrap().hot);
        assert_eq!(index.items(), 1);
        index.remove(found[0].bucket, found[0].slot);
        assert_eq!((index.candidates(k).count(), index.items()), (0, 0));
    }

    #[test]
    fn a_full_pair_of_buckets_gives_up_the_oldest_slot() {
        // Two buckets only: every key has the same pair.
        let mut index = FlashIndex::new(2 * BUCKET_SLOTS as u64);
        for i in 0..2 * BUCKET_SLOTS as u64 {
            let k = index.place(mix(i));
            assert_eq!(index.insert(&k, 100 + i as u32, u64::from), None);
        }
        let k = index.place(mix(999));
        // Age = the location: 100 is the oldest.
        assert_eq!(index.insert(&k, 500, u64::from), Some(100));
        assert_eq!(index.items(), 2 * BUCKET_SLOTS as u64);
    }

    #[test]
    fn six_bytes_per_slot_and_few_overflows_at_ninety_percent_load() {
        let items = 200_000u64;
        let mut index = FlashIndex::new(items * 100 / 90);
        assert_eq!(index.dram_bytes(), index.slots() * SLOT_BYTES);
        let mut dropped = 0;
        for i in 0..items {
            let k = index.place(mix(i));
            if index.insert(&k, i as u32, u64::from).is_some() {
                dropped += 1;
            }
        }
        let per_item = index.dram_bytes() as f64 / index.items() as f64;
        assert!(per_item < 7.0, "{per_item:.2} B per item");
        // Two choices keep overflows rare (one choice would lose several per cent).
        assert!(dropped * 100 < items, "{dropped} of {items} dropped");
    }
}
