//! Segmented LRU lists of one (tier, slab class): HOT, WARM and COLD, intrusive doubly
//! linked lists threaded through the item headers. Guarded by the class lock.
//!
//! The rules that move items between segments live in `maintainer.rs`; this module only
//! links and unlinks.

use std::sync::atomic::Ordering;

use crate::item::{ItemAddr, ItemMemory, ITEM_HEADER_BYTES, NIL};

pub(crate) const HOT: usize = 0;
pub(crate) const WARM: usize = 1;
pub(crate) const COLD: usize = 2;
pub(crate) const SEGMENTS: usize = 3;

#[derive(Debug)]
pub(crate) struct Lru {
    pub head: [ItemAddr; SEGMENTS],
    pub tail: [ItemAddr; SEGMENTS],
    pub count: [u64; SEGMENTS],
    pub bytes: [u64; SEGMENTS],
}

impl Lru {
    pub fn new() -> Lru {
        Lru {
            head: [NIL; SEGMENTS],
            tail: [NIL; SEGMENTS],
            count: [0; SEGMENTS],
            bytes: [0; SEGMENTS],
        }
    }

    pub fn items(&self) -> u64 {
        self.count.iter().sum()
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }

    /// Links `addr` at the head of `segment` and records the segment in its state.
    pub fn link_head(&mut self, mem: &ItemMemory, segment: usize, addr: ItemAddr) {
        // The item's header is rewritten (links, segment): a write of its tier.
        mem.charge_write(addr, 0, ITEM_HEADER_BYTES);
        let h = mem.header(addr);
        h.set_segment(segment);
        h.prev.store(NIL, Ordering::Relaxed);
        h.next.store(self.head[segment], Ordering::Relaxed);
        if self.head[segment] != NIL {
            mem.header(self.head[segment])
                .prev
                .store(addr, Ordering::Relaxed);
        }
        self.head[segment] = addr;
        if self.tail[segment] == NIL {
            self.tail[segment] = addr;
        }
        self.count[segment] += 1;
        self.bytes[segment] += h.total_bytes() as u64;
    }

    /// Unlinks `addr` from the segment recorded in its state.
    pub fn unlink(&mut self, mem: &ItemMemory, addr: ItemAddr) {
        mem.charge_write(addr, 0, ITEM_HEADER_BYTES);
        let h = mem.header(addr);
        let segment = h.segment();
        let prev = h.prev.load(Ordering::Relaxed);
        let next = h.next.load(Ordering::Relaxed);
        if prev != NIL {
            mem.header(prev).next.store(next, Ordering::Relaxed);
        } else {
            self.head[segment] = next;
        }
        if next != NIL {
            mem.header(next).prev.store(prev, Ordering::Relaxed);
        } else {
            self.tail[segment] = prev;
        }
        h.prev.store(NIL, Ordering::Relaxed);
        h.next.store(NIL, Ordering::Relaxed);
        self.count[segment] = self.count[segment].saturating_sub(1);
        self.bytes[segment] = self.bytes[segment].saturating_sub(h.total_bytes() as u64);
    }

    /// Moves `addr` to the head of `segment`.
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
