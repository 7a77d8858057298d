//! Segmented LRU lists of one (tier, slab class): HOT, WARM and COLD (or the hotspot
//! policy's queues), intrusive doubly linked lists threaded through the item headers.
//! Guarded by the class lock.
//!
//! The rules that move items between segments belong to the placement policy
//! (`policy/slru.rs`); this module only links and unlinks.
//!
//! Accounting: linking or unlinking rewrites the neighbours' links, and those writes are
//! charged here (one header line of each neighbour touched,
//! `ItemMemory::write_neighbour_next`/`_prev`). The item's own header is rewritten too,
//! and the operation that links or unlinks it pays for that once: these functions take
//! the `HeaderWrite` view its charge made (it has usually just read or written the same
//! header), so they cannot run on a header nobody paid to write.

use crate::item::{HeaderRead, HeaderWrite, ItemAddr, ItemMemory, NIL};

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

    /// Links `item` at the head of `segment` and records the segment in its state. The
    /// caller paid for the item's own header write (`item`).
    pub fn link_head(&mut self, mem: &ItemMemory, segment: usize, item: HeaderWrite<'_>) {
        let addr = item.addr();
        item.set_segment(segment);
        item.set_prev(NIL);
        item.set_next(self.head[segment]);
        if self.head[segment] != NIL {
            mem.write_neighbour_prev(self.head[segment], addr);
        }
        self.head[segment] = addr;
        if self.tail[segment] == NIL {
            self.tail[segment] = addr;
        }
        self.count[segment] += 1;
        self.bytes[segment] += item.total_bytes() as u64;
    }

    /// Unlinks `item` from the segment recorded in its state. The caller paid for the
    /// item's own header write (`item`).
    pub fn unlink(&mut self, mem: &ItemMemory, item: HeaderWrite<'_>) {
        let addr = item.addr();
        let segment = item.segment();
        let prev = item.prev();
        let next = item.next();
        if self.hand == addr {
            self.hand = prev;
        }
        if prev != NIL {
            mem.write_neighbour_next(prev, next);
        } else {
            self.head[segment] = next;
        }
        if next != NIL {
            mem.write_neighbour_prev(next, prev);
        } else {
            self.tail[segment] = prev;
        }
        item.set_prev(NIL);
        item.set_next(NIL);
        let bytes = item.total_bytes() as u64;
        debug_assert!(
            self.count[segment] > 0 && self.bytes[segment] >= bytes,
            "unlinking from segment {segment} that does not account for the item"
        );
        self.count[segment] -= 1;
        self.bytes[segment] -= bytes;
    }

    /// Moves `item` to the head of `segment` (the caller paid for its header write).
    pub fn move_to(&mut self, mem: &ItemMemory, item: HeaderWrite<'_>, segment: usize) {
        self.unlink(mem, item);
        self.link_head(mem, segment, item);
    }

    /// The header of the tail item of `segment`, its read of header bytes `range`
    /// charged; `None` when the segment is empty.
    pub fn tail_header<'m>(
        &self,
        mem: &'m ItemMemory,
        segment: usize,
        range: std::ops::Range<usize>,
    ) -> Option<HeaderRead<'m>> {
        match self.tail[segment] {
            NIL => None,
            t => Some(mem.read_header(t, range)),
        }
    }
}

/// Seconds since the item `tail` (a segment's tail, `Lru::tail_header`) was last
/// accessed; 0 for an empty segment.
pub(crate) fn age_s(tail: Option<HeaderRead<'_>>, now_s: u32) -> u32 {
    tail.map_or(0, |h| now_s.saturating_sub(h.last_access_s()))
}
