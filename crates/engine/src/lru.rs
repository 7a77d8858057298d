//! Segmented LRU lists of one (tier, slab class): HOT, WARM and COLD (or the hotspot
//! policy's queues), intrusive doubly linked lists threaded through the item headers.
//! Guarded by the class lock.
//!
//! The rules that move items between segments belong to the placement policy
//! (`policy/slru.rs`); this module only links and unlinks.
//!
//! Accounting: linking or unlinking rewrites the neighbours' links, and those writes are
//! charged here (one header line of each neighbour touched). The item's own header is
//! rewritten too, but the operation that links or unlinks it charges that once (it has
//! usually just read or written the same header), so it is not charged twice.

use std::sync::atomic::Ordering;

use crate::item::{ItemAddr, ItemMemory, NIL};

/// Bytes of the `next` and of the `prev` field in a header (a neighbour's link update).
const NEXT_FIELD: std::ops::Range<usize> = 0..8;
const PREV_FIELD: std::ops::Range<usize> = 8..16;

pub(crate) const HOT: usize = 0;
pub(crate) const WARM: usize = 1;
pub(crate) const COLD: usize = 2;
/// Lists per (tier, class): memcached's three segments, or the hotspot policy's
/// multi-queue (up to `config::MQ_QUEUES_MAX`).
pub(crate) const SEGMENTS: usize = crate::config::MQ_QUEUES_MAX;

#[derive(Debug)]
pub(crate) struct Lru {
    pub head: [ItemAddr; SEGMENTS],
    pub tail: [ItemAddr; SEGMENTS],
    pub count: [u64; SEGMENTS],
    pub bytes: [u64; SEGMENTS],
    /// A CLOCK hand over the lists (the hotspot policy's slow-tier replacement): the
    /// next item it looks at, moving from the tails towards the heads. Unlinking the
    /// item under the hand moves the hand on, so it never names a freed chunk.
    pub hand: ItemAddr,
}

impl Lru {
    pub fn new() -> Lru {
        Lru {
            head: [NIL; SEGMENTS],
            tail: [NIL; SEGMENTS],
            count: [0; SEGMENTS],
            bytes: [0; SEGMENTS],
            hand: NIL,
        }
    }

    pub fn items(&self) -> u64 {
        self.count.iter().sum()
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }

    /// Links `addr` at the head of `segment` and records the segment in its state. The
    /// caller charges the item's own header write.
    pub fn link_head(&mut self, mem: &ItemMemory, segment: usize, addr: ItemAddr) {
        let h = mem.header(addr);
        h.set_segment(segment);
        h.prev.store(NIL, Ordering::Relaxed);
        h.next.store(self.head[segment], Ordering::Relaxed);
        if self.head[segment] != NIL {
            let old_head = self.head[segment];
            mem.header_write_field(old_head, PREV_FIELD);
            mem.header(old_head).prev.store(addr, Ordering::Relaxed);
        }
        self.head[segment] = addr;
        if self.tail[segment] == NIL {
            self.tail[segment] = addr;
        }
        self.count[segment] += 1;
        self.bytes[segment] += h.total_bytes() as u64;
    }

    /// Unlinks `addr` from the segment recorded in its state. The caller charges the
    /// item's own header write.
    pub fn unlink(&mut self, mem: &ItemMemory, addr: ItemAddr) {
        let h = mem.header(addr);
        let segment = h.segment();
        let prev = h.prev.load(Ordering::Relaxed);
        let next = h.next.load(Ordering::Relaxed);
        if self.hand == addr {
            self.hand = prev;
        }
        if prev != NIL {
            mem.header_write_field(prev, NEXT_FIELD);
            mem.header(prev).next.store(next, Ordering::Relaxed);
        } else {
            self.head[segment] = next;
        }
        if next != NIL {
            mem.header_write_field(next, PREV_FIELD);
            mem.header(next).prev.store(prev, Ordering::Relaxed);
        } else {
            self.tail[segment] = prev;
        }
        h.prev.store(NIL, Ordering::Relaxed);
        h.next.store(NIL, Ordering::Relaxed);
        let bytes = h.total_bytes() as u64;
        debug_assert!(
            self.count[segment] > 0 && self.bytes[segment] >= bytes,
            "unlinking from segment {segment} that does not account for the item"
        );
        self.count[segment] -= 1;
        self.bytes[segment] -= bytes;
    }

    /// Moves `addr` to the head of `segment` (the caller charges its header write).
    pub fn move_to(&mut self, mem: &ItemMemory, addr: ItemAddr, segment: usize) {
        self.unlink(mem, addr);
        self.link_head(mem, segment, addr);
    }

    /// Seconds since the tail item of `segment` was last accessed.
    pub fn tail_age_s(&self, mem: &ItemMemory, segment: usize, now_s: u32) -> u32 {
        match self.tail[segment] {
            NIL => 0,
            t => now_s.saturating_sub(mem.header(t).last_access_s.load(Ordering::Relaxed)),
        }
    }
}
