//! `--flash-size`: a model of the flash (NVMe) tier of issue 26, as a layer under the
//! engine. The engine is unchanged: what it evicts from its lowest tier (the event log's
//! `Evicted` events) goes down to the flash model, and a GET the engine misses is looked
//! up here; a flash hit may be copied up into the engine (a store). The point is to
//! settle the flash policy by counting before the wire implementation exists
//! (docs/design/flash-tier.md follows what this model settles).
//!
//! What is modelled as it would be built:
//! - the log: items are appended to the one open segment (a DRAM write buffer of
//!   `segment_bytes`), written to the device as a whole when full; the device holds
//!   `size_bytes / segment_bytes` segments;
//! - the DRAM index ([`Index`]): 6 bytes per slot (the 64-byte granule of the device
//!   where the item starts, a hot bit, a 15-bit hash tag), two-choice buckets of 16
//!   slots, sized for the device full at 90 % load; the key lives only on the device and
//!   is compared on read;
//! - invalidation (a store of the key) removes the key's slots in DRAM, never writes
//!   the device; the space comes back when its segment is reclaimed;
//! - reclamation (FIFO or least-live) reinserts live items read since they were written
//!   (the hot bit) and drops the rest.
//!
//! What is only simulated: the device. A segment's items are kept as records (key,
//! value size, a stamp of the value) in this process's memory, and a device access is a
//! byte count (reads rounded to 4 KiB pages, writes a whole segment).

use std::collections::{HashMap, HashSet};

/// The device's read unit: a flash read costs the pages the item spans.
pub const PAGE_BYTES: u64 = 4096;
/// An item's header on the device, before the key and the value: main's format
/// (`engine::flash::segment`: checksum, key and value lengths, flags, exptime, CAS).
pub const RECORD_HEADER_BYTES: u64 = 32;
/// Every segment starts with its header (magic, sequence, item count, checksum).
pub const SEGMENT_HEADER_BYTES: u64 = 64;
/// Records on the device start at multiples of this.
const RECORD_ALIGN_BYTES: u64 = 8;
/// The index's geometry: slots per bucket, DRAM bytes per slot.
pub use engine::flash::index::{BUCKET_SLOTS, SLOT_BYTES};
/// A location is the 64-byte granule of the device where the item starts: 2^32 of them
/// = 256 GiB per index (a larger device is split into shards, each with its own index
/// and log). Records start at multiples of 8, so a reader tries the granule's record
/// starts (in the wire: its 8 offsets, from the highest down) for the key.
pub const GRANULE_BYTES: u64 = 64;
/// The index has a slot per this share of the items a full device holds: two-choice
/// buckets of 16 rarely overflow below ~90 % (docs/results/sim-flash.md).
const INDEX_LOAD_PCT: u64 = 90;
/// DRAM per segment: sequence (8), live items (4), items (4), data bytes (4), state (1),
/// padded.
pub const SEGMENT_META_BYTES: u64 = 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// The oldest segment.
    Fifo,
    /// The segment with the fewest live bytes (estimated: live items x its mean item).
    LeastLive,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Every item the engine evicts goes down.
    All,
    /// Only items read since they were stored (the event's `fetched`).
    Fetched,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recache {
    /// Every flash hit is copied up into the engine.
    Always,
    /// A flash hit on an item already read on flash since it was written.
    SecondHit,
    Never,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reinsert {
    /// A live item of a reclaimed segment read since it was written goes back to the log.
    Hot,
    Never,
}

macro_rules! names {
    ($ty:ident { $($variant:ident = $name:literal),* $(,)? }) => {
        impl $ty {
            pub const NAMES: &'static [&'static str] = &[$($name),*];
            pub fn name(&self) -> &'static str {
                match self { $($ty::$variant => $name),* }
            }
            pub fn parse(text: &str) -> Result<$ty, String> {
                match text {
                    $($name => Ok($ty::$variant),)*
                    other => Err(format!(
                        "unknown {} {other:?} (known: {})",
                        stringify!($ty).to_ascii_lowercase(),
                        Self::NAMES.join(", ")
                    )),
                }
            }
        }
    };
}
names!(Reclaim { Fifo = "fifo", LeastLive = "least-live" });
names!(Admit { All = "all", Fetched = "fetched" });
names!(Recache { Always = "always", SecondHit = "second-hit", Never = "never" });
names!(Reinsert { Hot = "hot", Never = "never" });

/// The flash tier's settings (`--flash-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashConfig {
    pub size_bytes: u64,
    pub segment_bytes: u64,
    pub reclaim: Reclaim,
    pub admit: Admit,
    pub recache: Recache,
    pub reinsert: Reinsert,
    /// Reinsertion during one reclamation fills at most this percentage of the new
    /// segment: it bounds the write amplification reinsertion adds (at most
    /// 100 / (100 - pct)) and keeps a segment of only hot items from stalling the log.
    pub reinsert_max_pct: u64,
}

/// The defaults docs/results/sim-flash.md settled.
pub const SEGMENT_BYTES_DEFAULT: u64 = 4 << 20;
pub const REINSERT_MAX_PCT_DEFAULT: u64 = 20;

impl FlashConfig {
    pub fn new(size_bytes: u64) -> FlashConfig {
        FlashConfig {
            size_bytes,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            reclaim: Reclaim::Fifo,
            admit: Admit::All,
            recache: Recache::SecondHit,
            reinsert: Reinsert::Hot,
            reinsert_max_pct: REINSERT_MAX_PCT_DEFAULT,
        }
    }

    pub fn segments(&self) -> u64 {
        self.size_bytes / self.segment_bytes.max(1)
    }

    pub fn check(&self) -> Result<(), String> {
        if self.segment_bytes < 2 * PAGE_BYTES || !self.segment_bytes.is_multiple_of(PAGE_BYTES) {
            return Err(format!(
                "--flash-segment-bytes must be a multiple of {PAGE_BYTES} and at least two pages, got {}",
                self.segment_bytes
            ));
        }
        if self.reinsert_max_pct > 90 {
            return Err(format!(
                "--flash-reinsert-max-pct must be at most 90, got {}",
                self.reinsert_max_pct
            ));
        }
        if self.segments() < 2 {
            return Err(format!(
                "--flash-size must hold at least two segments of {} bytes, got {} bytes",
                self.segment_bytes, self.size_bytes
            ));
        }
        if self.size_bytes / GRANULE_BYTES > u64::from(u32::MAX) {
            return Err(format!(
                "--flash-size above {} GiB needs index shards (not modelled)",
                (GRANULE_BYTES << 32) >> 30
            ));
        }
        Ok(())
    }
}

/// What the flash tier did, cumulative (as `stats` would report it), and two gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashCounters {
    /// Engine misses looked up on flash.
    pub lookups: u64,
    pub hits: u64,
    /// Hits served from the open segment's DRAM buffer (no device read).
    pub buffer_hits: u64,
    /// Lookups whose tag matched a slot holding another key (each cost a device read).
    pub tag_collisions: u64,
    /// Device bytes read for GETs (each read rounded to whole pages).
    pub read_bytes: u64,
    /// Device bytes read by reclamation (the pages of the live items it examined).
    pub reclaim_read_bytes: u64,
    /// Device bytes written (whole segments).
    pub write_bytes: u64,
    pub segments_written: u64,
    /// Items the engine evicted that went down, and their bytes (header + key + value).
    pub admitted_items: u64,
    pub admitted_bytes: u64,
    /// Evictions the admission rule kept off flash.
    pub not_admitted: u64,
    /// Evictions of items whose flash copy was still valid: no device write.
    pub clean_evictions: u64,
    /// Flash hits copied up into the engine.
    pub copy_ups: u64,
    /// Stores that removed a flash copy (slots removed in DRAM, nothing written).
    pub invalidations: u64,
    pub segments_reclaimed: u64,
    pub reinserted_items: u64,
    pub reinserted_bytes: u64,
    /// Live items of reclaimed segments dropped (not hot, or no room to reinsert).
    pub reclaim_drops: u64,
    /// Items dropped because their index bucket was full.
    pub index_drops: u64,
    /// Evictions too large for a segment.
    pub too_large: u64,
    /// Flash hits whose value was not the key's latest (must stay 0).
    pub stale_hits: u64,
    /// Gauges: items indexed, and DRAM bytes of the index and the segment table.
    pub items: u64,
    pub dram_bytes: u64,
}

impl FlashCounters {
    /// `b - a` for the counts, `b`'s gauges.
    pub fn between(a: &FlashCounters, b: &FlashCounters) -> FlashCounters {
        let mut d = b.zip(a, u64::saturating_sub);
        d.items = b.items;
        d.dram_bytes = b.dram_bytes;
        d
    }

    /// Counts added, gauges of `b`.
    pub fn add(&mut self, b: &FlashCounters) {
        let (items, dram_bytes) = (b.items, b.dram_bytes);
        *self = self.zip(b, u64::saturating_add);
        self.items = items;
        self.dram_bytes = dram_bytes;
    }

    fn zip(&self, o: &FlashCounters, f: fn(u64, u64) -> u64) -> FlashCounters {
        FlashCounters {
            lookups: f(self.lookups, o.lookups),
            hits: f(self.hits, o.hits),
            buffer_hits: f(self.buffer_hits, o.buffer_hits),
            tag_collisions: f(self.tag_collisions, o.tag_collisions),
            read_bytes: f(self.read_bytes, o.read_bytes),
            reclaim_read_bytes: f(self.reclaim_read_bytes, o.reclaim_read_bytes),
            write_bytes: f(self.write_bytes, o.write_bytes),
            segments_written: f(self.segments_written, o.segments_written),
            admitted_items: f(self.admitted_items, o.admitted_items),
            admitted_bytes: f(self.admitted_bytes, o.admitted_bytes),
            not_admitted: f(self.not_admitted, o.not_admitted),
            clean_evictions: f(self.clean_evictions, o.clean_evictions),
            copy_ups: f(self.copy_ups, o.copy_ups),
            invalidations: f(self.invalidations, o.invalidations),
            segments_reclaimed: f(self.segments_reclaimed, o.segments_reclaimed),
            reinserted_items: f(self.reinserted_items, o.reinserted_items),
            reinserted_bytes: f(self.reinserted_bytes, o.reinserted_bytes),
            reclaim_drops: f(self.reclaim_drops, o.reclaim_drops),
            index_drops: f(self.index_drops, o.index_drops),
            too_large: f(self.too_large, o.too_large),
            stale_hits: f(self.stale_hits, o.stale_hits),
            items: f(self.items, o.items),
            dram_bytes: f(self.dram_bytes, o.dram_bytes),
        }
    }

    /// Application write amplification: device bytes written / item bytes admitted.
    pub fn write_amplification(&self) -> f64 {
        crate::sim::ratio(self.write_bytes, self.admitted_bytes)
    }
}

/// A slot's location: the device's 64-byte granule where the item starts.
type Loc = u32;

fn loc_of(device_offset: u64) -> Loc {
    debug_assert!(device_offset / GRANULE_BYTES <= u64::from(u32::MAX));
    (device_offset / GRANULE_BYTES) as u32
}

/// The key's 64-bit hash (FNV-1a, then a mixer so that low bits are usable).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The DRAM index is the engine's (`engine::flash::index`): 6-byte slots in two-choice
/// buckets, sized once, for the items the device holds at the mean item size (the wire
/// takes it from the engine's stats at the first admission; the simulator from its
/// workload), at [`INDEX_LOAD_PCT`] % load when the device is full.
use engine::flash::index::{Candidate, FlashIndex as Index};

/// An item as the device holds it.
#[derive(Clone, Debug)]
struct Record {
    key: Box<[u8]>,
    value_bytes: u32,
    stamp: u64,
    /// Offset in the segment and bytes on the device (header, key, value, aligned).
    offset: u64,
    len: u64,
    loc: Loc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Open,
    Sealed,
}

struct Segment {
    state: State,
    seq: u64,
    records: Vec<Record>,
    fill_bytes: u64,
    live_items: u64,
    data_bytes: u64,
}

/// A value found on flash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashHit {
    pub value_bytes: u32,
    pub stamp: u64,
    /// The recache rule says: copy it up into the engine.
    pub copy_up: bool,
}

/// The flash tier: index, segments, counters.
pub struct Flash {
    config: FlashConfig,
    index: Index,
    segments: Vec<Segment>,
    free: Vec<usize>,
    open: usize,
    next_seq: u64,
    hash: fn(&[u8]) -> u64,
    pub counters: FlashCounters,
}

/// Bytes an item takes as the engine stores it (header + key + value), the unit of
/// "admitted bytes".
pub fn item_bytes(key: &[u8], value_bytes: u32) -> u64 {
    RECORD_HEADER_BYTES + key.len() as u64 + u64::from(value_bytes)
}

impl Flash {
    /// A flash tier whose index is sized for items of `item_bytes` (header + key +
    /// value) filling the device.
    pub fn new(config: FlashConfig, item_bytes: u64) -> Result<Flash, String> {
        Flash::with_hash(config, item_bytes, key_hash)
    }

    /// With another key hash (tests force tag collisions with it).
    pub fn with_hash(
        config: FlashConfig,
        item_bytes: u64,
        hash: fn(&[u8]) -> u64,
    ) -> Result<Flash, String> {
        config.check()?;
        let device_item_bytes = item_bytes.next_multiple_of(RECORD_ALIGN_BYTES).max(1);
        let n = config.segments() as usize;
        let segments = (0..n)
            .map(|_| Segment {
                state: State::Free,
                seq: 0,
                records: Vec::new(),
                fill_bytes: 0,
                live_items: 0,
                data_bytes: 0,
            })
            .collect();
        let mut flash = Flash {
            index: Index::new(
                n as u64 * config.segment_bytes / device_item_bytes * 100 / INDEX_LOAD_PCT,
            ),
            segments,
            free: (1..n).rev().collect(),
            open: 0,
            next_seq: 0,
            hash,
            counters: FlashCounters::default(),
            config,
        };
        flash.open_segment(0);
        flash.update_gauges();
        Ok(flash)
    }

    pub fn config(&self) -> &FlashConfig {
        &self.config
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// DRAM bytes per indexed item (index + segment table), 0 when empty.
    pub fn dram_bytes_per_item(&self) -> f64 {
        crate::sim::ratio(self.counters.dram_bytes, self.counters.items)
    }

    fn update_gauges(&mut self) {
        self.counters.items = self.index.items();
        self.counters.dram_bytes =
            self.index.dram_bytes() + self.segments.len() as u64 * SEGMENT_META_BYTES;
    }

    fn open_segment(&mut self, s: usize) {
        self.next_seq += 1;
        let seg = &mut self.segments[s];
        seg.state = State::Open;
        seg.seq = self.next_seq;
        seg.records.clear();
        seg.fill_bytes = SEGMENT_HEADER_BYTES;
        seg.live_items = 0;
        seg.data_bytes = 0;
        self.open = s;
    }

    fn segment_of(&self, loc: Loc) -> usize {
        (u64::from(loc) * GRANULE_BYTES / self.config.segment_bytes) as usize
    }

    /// The records that start in the granule `loc`, highest offset first (the order a
    /// reader tries them in: a record starting before the key's own in the same granule
    /// ends in it, and is never taken for it).
    fn records_at(&self, loc: Loc) -> impl Iterator<Item = &Record> {
        let seg = &self.segments[self.segment_of(loc)];
        let first = seg.records.partition_point(|r| r.loc < loc);
        let end = seg.records.partition_point(|r| r.loc <= loc);
        seg.records[first..end].iter().rev()
    }

    /// Device bytes of a read of `r`: the pages it spans.
    fn read_cost(r: &Record) -> u64 {
        let start = r.offset - r.offset % PAGE_BYTES;
        (r.offset + r.len).div_ceil(PAGE_BYTES) * PAGE_BYTES - start
    }

    /// Whether a slot with the key's tag exists: what an eviction of an item copied up
    /// from flash checks (no device read) before it skips the write. A tag of another
    /// key makes it skip wrongly: the item is lost (a later miss), never served wrong.
    pub fn holds(&self, key: &[u8]) -> bool {
        let k = self.index.place((self.hash)(key));
        self.index.candidates(k).next().is_some()
    }

    /// A store of `key`: its flash copies are invalidated in DRAM (every slot with its
    /// tag: one of another key goes too, a miss later, never a write).
    pub fn invalidate(&mut self, key: &[u8]) {
        let k = self.index.place((self.hash)(key));
        let found: Vec<Candidate> = self.index.candidates(k).collect();
        if found.is_empty() {
            return;
        }
        self.counters.invalidations += 1;
        for Candidate {
            bucket,
            slot,
            location,
            ..
        } in found
        {
            self.index.remove(bucket, slot);
            let s = self.segment_of(location);
            self.segments[s].live_items -= 1;
        }
        self.update_gauges();
    }

    /// An engine miss looked up on flash.
    pub fn get(&mut self, key: &[u8]) -> Option<FlashHit> {
        self.counters.lookups += 1;
        let k = self.index.place((self.hash)(key));
        let found: Vec<Candidate> = self.index.candidates(k).collect();
        for Candidate {
            bucket,
            slot,
            location: loc,
            hot,
        } in found
        {
            let s = self.segment_of(loc);
            let buffered = self.segments[s].state == State::Open;
            // One read from the granule's page to the end of the last record starting
            // in it; the key is compared on the records found there.
            let mut cost = 0;
            let mut found = None;
            for r in self.records_at(loc) {
                cost = cost.max(Self::read_cost(r));
                if found.is_none() && &*r.key == key {
                    found = Some((r.value_bytes, r.stamp));
                }
            }
            debug_assert!(cost > 0, "a slot points at no record");
            if !buffered {
                self.counters.read_bytes += cost;
            }
            let Some((value_bytes, stamp)) = found else {
                self.counters.tag_collisions += 1;
                continue;
            };
            let hit = FlashHit {
                value_bytes,
                stamp,
                copy_up: match self.config.recache {
                    Recache::Always => true,
                    Recache::SecondHit => hot,
                    Recache::Never => false,
                },
            };
            self.counters.hits += 1;
            if buffered {
                self.counters.buffer_hits += 1;
            }
            self.index.set_hot(bucket, slot);
            return Some(hit);
        }
        None
    }

    /// An item the engine evicted goes down (its older copies are invalidated first,
    /// so a key has at most one slot).
    pub fn admit(&mut self, key: &[u8], value_bytes: u32, stamp: u64) {
        let len = item_bytes(key, value_bytes).next_multiple_of(RECORD_ALIGN_BYTES);
        if len + SEGMENT_HEADER_BYTES > self.config.segment_bytes || key.len() > u8::MAX as usize {
            self.counters.too_large += 1;
            return;
        }
        self.invalidate(key);
        self.counters.admitted_items += 1;
        self.counters.admitted_bytes += item_bytes(key, value_bytes);
        self.append(key.into(), value_bytes, stamp, len, false);
        self.update_gauges();
    }

    /// Appends to the open segment (rolling to the next one when full) and indexes it.
    fn append(&mut self, key: Box<[u8]>, value_bytes: u32, stamp: u64, len: u64, hot: bool) {
        let loc = loop {
            if let Some(loc) = self.place(len) {
                break loc;
            }
            self.roll();
        };
        let k = self.index.place((self.hash)(&key));
        let seg = &mut self.segments[self.open];
        let offset = seg.fill_bytes;
        seg.records.push(Record {
            key,
            value_bytes,
            stamp,
            offset,
            len,
            loc,
        });
        seg.fill_bytes += len;
        seg.live_items += 1;
        seg.data_bytes += len;
        let segments = &self.segments;
        let segment_bytes = self.config.segment_bytes;
        let dropped = self.index.insert(&k, loc, |l| {
            segments[(u64::from(l) * GRANULE_BYTES / segment_bytes) as usize].seq
        });
        if hot {
            let slot = self
                .index
                .candidates(k)
                .find(|c| c.location == loc)
                .map(|c| (c.bucket, c.slot));
            if let Some((bucket, slot)) = slot {
                self.index.set_hot(bucket, slot);
            }
        }
        if let Some(old) = dropped {
            self.counters.index_drops += 1;
            let s = self.segment_of(old);
            self.segments[s].live_items -= 1;
        }
    }

    /// Where a record of `len` bytes goes in the open segment, or `None` when it is
    /// full.
    fn place(&self, len: u64) -> Option<Loc> {
        let offset = self.segments[self.open].fill_bytes;
        (offset + len <= self.config.segment_bytes)
            .then(|| loc_of(self.open as u64 * self.config.segment_bytes + offset))
    }

    /// Writes the open segment to the device and opens the next one, reclaiming a
    /// segment when none is free.
    fn roll(&mut self) {
        let full = self.open;
        self.segments[full].state = State::Sealed;
        self.counters.write_bytes += self.config.segment_bytes;
        self.counters.segments_written += 1;
        let next = match self.free.pop() {
            Some(s) => {
                self.open_segment(s);
                return;
            }
            None => self.victim(),
        };
        let keep = self.reclaim(next);
        self.open_segment(next);
        for r in keep {
            self.counters.reinserted_items += 1;
            self.counters.reinserted_bytes += r.len;
            // Hot survives one reclamation only by being read again.
            self.append(r.key, r.value_bytes, r.stamp, r.len, false);
        }
    }

    /// The segment to reclaim: the oldest, or the one with the fewest live bytes.
    fn victim(&self) -> usize {
        let sealed = self
            .segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == State::Sealed);
        let chosen = match self.config.reclaim {
            Reclaim::Fifo => sealed.min_by_key(|(_, s)| s.seq),
            Reclaim::LeastLive => sealed.min_by_key(|(_, s)| (Self::live_bytes_estimate(s), s.seq)),
        };
        chosen.map_or(0, |(i, _)| i)
    }

    /// Live bytes as the DRAM segment table knows them: live items x the mean item.
    fn live_bytes_estimate(s: &Segment) -> u64 {
        (s.live_items * s.data_bytes)
            .checked_div(s.records.len() as u64)
            .unwrap_or(0)
    }

    /// Empties segment `s`: its live items leave the index; the hot ones (if the rule
    /// reinserts) are returned to be appended again, up to half a segment.
    fn reclaim(&mut self, s: usize) -> Vec<Record> {
        self.counters.segments_reclaimed += 1;
        let records = std::mem::take(&mut self.segments[s].records);
        let budget = self.config.segment_bytes * self.config.reinsert_max_pct / 100;
        let mut kept_bytes = 0;
        let mut keep = Vec::new();
        for r in records {
            let k = self.index.place((self.hash)(&r.key));
            let Some(Candidate {
                bucket, slot, hot, ..
            }) = self.index.candidates(k).find(|c| c.location == r.loc)
            else {
                continue;
            };
            self.counters.reclaim_read_bytes += Self::read_cost(&r);
            self.index.remove(bucket, slot);
            if hot && self.config.reinsert == Reinsert::Hot && kept_bytes + r.len <= budget {
                kept_bytes += r.len;
                keep.push(r);
            } else {
                self.counters.reclaim_drops += 1;
            }
        }
        self.segments[s].live_items = 0;
        self.segments[s].state = State::Free;
        keep
    }

    /// Live bytes of every sealed segment, estimated as reclamation sees them (tests).
    pub fn sealed_live_bytes(&self) -> Vec<(usize, u64)> {
        self.segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == State::Sealed)
            .map(|(i, s)| (i, Self::live_bytes_estimate(s)))
            .collect()
    }
}

/// The flash layer of one simulation run: the model, plus what the engine's items
/// would carry (a "copy on flash still valid" bit) and the truth about each key's
/// latest value (a stamp per store) to catch a stale flash hit.
pub struct FlashRun {
    pub flash: Flash,
    /// Keys copied up from flash and not stored since: the engine item's flash bit.
    copied_up: HashSet<Box<[u8]>>,
    /// Stores of each key in the run phase (absent: 0), the stamp its value carries.
    stamps: HashMap<Box<[u8]>, u64>,
    events: Vec<engine::Event>,
    /// Eviction events the engine's log dropped (must stay 0: then every eviction was
    /// seen).
    pub events_dropped: u64,
}

impl FlashRun {
    /// `item_bytes`: the mean item (header + key + value) the index is sized for.
    pub fn new(
        config: &FlashConfig,
        item_bytes: u64,
        engine: &engine::Engine,
    ) -> Result<FlashRun, String> {
        engine.events().set_wanted(engine::events::kind::EVICTIONS);
        Ok(FlashRun {
            flash: Flash::new(config.clone(), item_bytes)?,
            copied_up: HashSet::new(),
            stamps: HashMap::new(),
            events: Vec::new(),
            events_dropped: 0,
        })
    }

    fn stamp(&self, key: &[u8]) -> u64 {
        self.stamps.get(key).copied().unwrap_or(0)
    }

    /// Before the engine stores a new value of `key` (not a copy-up).
    pub fn before_store(&mut self, key: &[u8]) {
        self.flash.invalidate(key);
        self.copied_up.remove(key);
        *self.stamps.entry(key.into()).or_insert(0) += 1;
    }

    /// An engine miss: the flash hit's value size if any; copies it up when the
    /// recache rule says so (`store` stores into the engine).
    pub fn get(&mut self, key: &[u8], mut store: impl FnMut(u32) -> bool) -> Option<u32> {
        let hit = self.flash.get(key)?;
        if hit.stamp != self.stamp(key) {
            self.flash.counters.stale_hits += 1;
        }
        if hit.copy_up && store(hit.value_bytes) {
            self.flash.counters.copy_ups += 1;
            self.copied_up.insert(key.into());
        }
        Some(hit.value_bytes)
    }

    /// Takes the engine's evictions since the last call down to flash.
    pub fn drain(&mut self, engine: &engine::Engine) {
        loop {
            self.events.clear();
            self.events_dropped += engine.events().drain(&mut self.events, 1024);
            if self.events.is_empty() {
                return;
            }
            let events = std::mem::take(&mut self.events);
            for event in &events {
                if let engine::EventWhat::Evicted { item, fetched, .. } = event.what {
                    self.evicted(&event.key, item.value_bytes, fetched);
                }
            }
            self.events = events;
        }
    }

    fn evicted(&mut self, key: &[u8], value_bytes: u32, fetched: bool) {
        if self.copied_up.remove(key) && self.flash.holds(key) {
            self.flash.counters.clean_evictions += 1;
            return;
        }
        if self.flash.config.admit == Admit::Fetched && !fetched {
            self.flash.counters.not_admitted += 1;
            return;
        }
        let stamp = self.stamp(key);
        self.flash.admit(key, value_bytes, stamp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two segments of two pages each: small enough to count by hand.
    fn tiny(reclaim: Reclaim) -> FlashConfig {
        FlashConfig {
            size_bytes: 4 * PAGE_BYTES,
            segment_bytes: 2 * PAGE_BYTES,
            reclaim,
            admit: Admit::All,
            recache: Recache::Never,
            reinsert: Reinsert::Hot,
            reinsert_max_pct: 50,
        }
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key:{i:08}").into_bytes()
    }

    #[test]
    fn a_key_stored_after_it_went_to_flash_is_never_served_from_flash() {
        let mut f = Flash::new(FlashConfig::new(64 << 20), 1044).unwrap();
        f.admit(&key(1), 1000, 7);
        assert_eq!(f.get(&key(1)).map(|h| h.stamp), Some(7));
        f.invalidate(&key(1));
        assert_eq!(
            f.get(&key(1)),
            None,
            "the stored-over copy must not be served"
        );
        assert_eq!(f.counters.write_bytes, 0, "invalidation writes nothing");
        // Sealed on the device too: fill segments past it, then invalidate.
        f.admit(&key(2), 1000, 1);
        for i in 10..10_000 {
            f.admit(&key(i), 1000, 0);
        }
        assert!(f.counters.segments_written > 0);
        assert_eq!(f.get(&key(2)).map(|h| h.stamp), Some(1));
        f.invalidate(&key(2));
        assert_eq!(f.get(&key(2)), None);
        // A newer copy admitted later is the one served.
        f.admit(&key(2), 1000, 2);
        assert_eq!(f.get(&key(2)).map(|h| h.stamp), Some(2));
    }

    #[test]
    fn a_tag_collision_is_a_miss_not_another_keys_value() {
        // Every key hashes alike: same bucket, same tag.
        let mut f = Flash::with_hash(FlashConfig::new(64 << 20), 136, |_| 0x1234_5678).unwrap();
        f.admit(&key(1), 100, 11);
        assert_eq!(f.get(&key(2)), None, "key 2 was never admitted");
        assert_eq!(f.counters.tag_collisions, 1);
        assert_eq!(f.get(&key(1)).map(|h| h.stamp), Some(11));
        // Admitting a colliding key invalidates the slot with the same tag: a miss, not a
        // wrong value.
        f.admit(&key(2), 200, 22);
        assert_eq!(
            f.get(&key(2)).map(|h| (h.value_bytes, h.stamp)),
            Some((200, 22))
        );
        assert_eq!(f.get(&key(1)), None);
    }

    #[test]
    fn items_starting_in_the_same_64_byte_granule_are_each_found() {
        let mut f = Flash::new(FlashConfig::new(64 << 20), 48).unwrap();
        // Empty values: records of 32 + 12 = 44 bytes, 48 on the device, at offsets 64,
        // 112 and 160 of the first segment: the first two start in granule 1.
        for (i, stamp) in [(1, 10), (2, 20), (3, 30)] {
            f.admit(&key(i), 0, stamp);
        }
        for (i, stamp) in [(1, 10), (2, 20), (3, 30)] {
            assert_eq!(f.get(&key(i)).map(|h| h.stamp), Some(stamp), "key {i}");
        }
        assert_eq!(f.counters.tag_collisions, 0);
    }

    #[test]
    fn write_amplification_is_device_bytes_over_admitted_bytes() {
        let mut f = Flash::new(tiny(Reclaim::Fifo), 1044).unwrap();
        // Items of 32 + 12 + 1000 = 1044 bytes, 1048 on the device: a segment of
        // 8192 bytes with its 64-byte header holds 7 (64 + 7 x 1048 = 7400).
        for i in 0..8 {
            f.admit(&key(i), 1000, 0);
        }
        assert_eq!(f.counters.admitted_bytes, 8 * 1044);
        assert_eq!(
            f.counters.segments_written, 1,
            "the 8th item rolled the first segment"
        );
        assert_eq!(f.counters.write_bytes, 8192);
        assert_eq!(f.counters.write_amplification(), 8192.0 / (8.0 * 1044.0));
        // Read key 0 so that it is hot, then fill the second segment: the first is
        // reclaimed (FIFO), key 0 reinserted, the six others dropped.
        assert!(f.get(&key(0)).is_some());
        for i in 8..15 {
            f.admit(&key(i), 1000, 0);
        }
        assert_eq!(f.counters.segments_written, 2);
        assert_eq!(f.counters.segments_reclaimed, 1);
        assert_eq!(f.counters.reinserted_items, 1);
        assert_eq!(f.counters.reclaim_drops, 6);
        assert_eq!(f.counters.write_bytes, 2 * 8192);
        assert_eq!(f.counters.write_amplification(), 16384.0 / (15.0 * 1044.0));
        assert!(f.get(&key(0)).is_some(), "the hot item survived");
        assert_eq!(f.get(&key(1)), None, "a cold one was dropped");
    }

    #[test]
    fn least_live_reclaims_the_segment_with_the_fewest_live_bytes() {
        for reclaim in [Reclaim::LeastLive, Reclaim::Fifo] {
            let config = FlashConfig {
                size_bytes: 3 * 2 * PAGE_BYTES,
                ..tiny(reclaim)
            };
            let mut f = Flash::new(config, 1044).unwrap();
            // Segment 0: keys 0-6; segment 1: keys 7-13; key 14 rolls into segment 2.
            for i in 0..15 {
                f.admit(&key(i), 1000, 0);
            }
            // Segment 1 loses 5 of its 7 items, segment 0 only 1.
            for i in [0, 7, 8, 9, 10, 11] {
                f.invalidate(&key(i));
            }
            let live: Vec<(usize, u64)> = f.sealed_live_bytes();
            assert_eq!(live, vec![(0, 6 * 1048), (1, 2 * 1048)]);
            // Fill segment 2: the next roll must reclaim a segment.
            for i in 15..22 {
                f.admit(&key(i), 1000, 0);
            }
            assert_eq!(f.counters.segments_reclaimed, 1);
            let gone: Vec<u32> = (0..14).filter(|&i| f.get(&key(i)).is_none()).collect();
            match reclaim {
                // Segment 1 went: its two live keys 12 and 13 are gone too.
                Reclaim::LeastLive => assert_eq!(gone, vec![0, 7, 8, 9, 10, 11, 12, 13]),
                // The oldest, segment 0, went: keys 1-6 are gone.
                Reclaim::Fifo => assert_eq!(gone, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
            }
        }
    }

    #[test]
    fn the_index_costs_at_most_8_bytes_of_dram_per_item_on_a_full_device() {
        for value_bytes in [100u32, 1000] {
            let item = item_bytes(&key(0), value_bytes);
            let config = FlashConfig::new(64 << 20);
            let mut f = Flash::new(config.clone(), item).unwrap();
            // Twice the device: it fills, then reclaims.
            let n = (2 * config.size_bytes / item) as u32;
            for i in 0..n {
                f.admit(&key(i), value_bytes, 0);
            }
            assert!(f.counters.segments_reclaimed > 0);
            let per_item = f.dram_bytes_per_item();
            assert!(
                per_item <= 8.0,
                "{value_bytes} B values: {per_item} B per item"
            );
            assert!(
                f.counters.index_drops * 100 < f.counters.admitted_items,
                "{value_bytes} B values: {} of {} items dropped by a full bucket",
                f.counters.index_drops,
                f.counters.admitted_items
            );
            eprintln!(
                "{value_bytes} B values: {} items, {:.2} B of DRAM per item, {} of {} admitted dropped by a full bucket",
                f.counters.items,
                per_item,
                f.counters.index_drops,
                f.counters.admitted_items
            );
            // Every item still indexed is found, with its own value.
            let found = (0..n).filter(|&i| f.get(&key(i)).is_some()).count() as u64;
            assert_eq!(found, f.counters.items);
        }
    }
}
