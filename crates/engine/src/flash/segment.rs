//! The flash tier's on-device format: a segment of records, self-describing and
//! checksummed, so that a restart (after a clean stop or `kill -9`) serves every record
//! that checks out and never a torn or superseded one, and a single-record read (a GET
//! that found its key's entry in the flash index) can tell a good record from a torn one,
//! from a stale one left in a reused slot, and from another key's (the index holds a
//! tag, not the key).
//!
//! A segment is `segment_bytes` (a multiple of 4 KiB) at `slot * segment_bytes` on the
//! device. Little-endian throughout.
//!
//! Header, [`SEGMENT_HEADER_BYTES`] at offset 0:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `FOGSEG01` |
//! | 8..12 | format version (1) |
//! | 12..16 | segment size in 4 KiB units |
//! | 16..24 | device id: random per formatted device, so a segment of another device or format is foreign |
//! | 24..32 | sequence: one more for every segment written to the device; of two copies of a key, the higher sequence's is the current one |
//! | 32..36 | records |
//! | 36..40 | payload bytes (records, after the header) |
//! | 40..48 | payload checksum: xxh3 of the payload, seeded with the sequence |
//! | 48..56 | zero |
//! | 56..64 | header checksum: xxh3 of bytes 0..56 |
//!
//! Record, at an 8-aligned offset, [`RECORD_HEADER_BYTES`] then the key, the value and
//! padding to 8:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | record checksum: xxh3 of bytes 8..end of value, seeded with the segment's sequence (so a record left in a reused slot fails it) |
//! | 8 | key length (1..=250) |
//! | 9..12 | zero |
//! | 12..16 | value length |
//! | 16..20 | client flags |
//! | 20..24 | expiry, unix seconds (0: never) |
//! | 24..32 | CAS |

// The engine's flash tier (issue 26) is being built: until it writes and reads segments,
// only this module's tests use the format.
#![cfg_attr(not(test), allow(dead_code))]

use tier::flash::{AlignedBuf, IO_ALIGN_BYTES};
use xxhash_rust::xxh3::xxh3_64_with_seed;

pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"FOGSEG01";
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const SEGMENT_HEADER_BYTES: usize = 64;
pub(crate) const RECORD_HEADER_BYTES: usize = 32;
/// memcached's longest key.
pub(crate) const KEY_BYTES_MAX: usize = 250;

/// What a record holds besides its key and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordMeta {
    pub client_flags: u32,
    /// Unix seconds; 0 for never.
    pub exptime_unix_s: u32,
    pub cas: u64,
}

/// A record read from a segment's bytes, its checksum verified.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: RecordMeta,
}

/// A verified segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub sequence: u64,
    pub records: u32,
    pub payload_bytes: u32,
    pub payload_checksum: u64,
}

/// Why bytes are not a segment, or not a good record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegmentError {
    /// No segment was ever written there (no magic).
    Blank,
    /// Another format version, another segment size, or another device's segment.
    Foreign,
    /// The header fails its checksum: a torn header write.
    TornHeader,
    /// The payload fails its checksum: the segment was not written whole.
    TornPayload,
    /// The record at this offset fails its checksum or its lengths: torn, or stale (a
    /// record of the slot's previous segment), or no record starts there.
    BadRecord { offset: u32 },
}

/// Bytes a record of a `key_len` key and a `value_len` value takes in a segment.
pub(crate) fn record_bytes(key_len: usize, value_len: usize) -> usize {
    (RECORD_HEADER_BYTES + key_len + value_len).next_multiple_of(8)
}

/// The segment being filled: the DRAM write buffer of one segment.
pub(crate) struct SegmentWriter {
    buf: AlignedBuf,
    used_bytes: usize,
    records: u32,
    sequence: u64,
    device_id: u64,
}

impl SegmentWriter {
    /// An empty segment of `segment_bytes` (a multiple of 4 KiB) for the device
    /// `device_id`, to be written with `sequence`.
    pub(crate) fn new(segment_bytes: usize, device_id: u64, sequence: u64) -> SegmentWriter {
        debug_assert!(segment_bytes.is_multiple_of(IO_ALIGN_BYTES) && segment_bytes > 0);
        SegmentWriter {
            buf: AlignedBuf::zeroed(segment_bytes),
            used_bytes: SEGMENT_HEADER_BYTES,
            records: 0,
            sequence,
            device_id,
        }
    }

    pub(crate) fn sequence(&self) -> u64 {
        self.sequence
    }

    pub(crate) fn records(&self) -> u32 {
        self.records
    }

    /// Appends a record; returns its offset in the segment, or `None` when it does not
    /// fit in what is left (or its key is empty or longer than memcached allows).
    pub(crate) fn append(&mut self, key: &[u8], value: &[u8], meta: RecordMeta) -> Option<u32> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return None;
        }
        let value_len = u32::try_from(value.len()).ok()?;
        let len = record_bytes(key.len(), value.len());
        let offset = self.used_bytes;
        if len > self.buf.len() - offset {
            return None;
        }
        let bytes = &mut self.buf.as_mut_slice()[offset..offset + len];
        bytes[8] = key.len() as u8;
        bytes[9..12].fill(0);
        bytes[12..16].copy_from_slice(&value_len.to_le_bytes());
        bytes[16..20].copy_from_slice(&meta.client_flags.to_le_bytes());
        bytes[20..24].copy_from_slice(&meta.exptime_unix_s.to_le_bytes());
        bytes[24..32].copy_from_slice(&meta.cas.to_le_bytes());
        let key_end = RECORD_HEADER_BYTES + key.len();
        bytes[RECORD_HEADER_BYTES..key_end].copy_from_slice(key);
        let value_end = key_end + value.len();
        bytes[key_end..value_end].copy_from_slice(value);
        bytes[value_end..].fill(0);
        let checksum = xxh3_64_with_seed(&bytes[8..value_end], self.sequence);
        bytes[0..8].copy_from_slice(&checksum.to_le_bytes());
        self.used_bytes += len;
        self.records += 1;
        Some(offset as u32)
    }

    /// The record at `offset` of the segment being filled (a GET of an item not yet
    /// written to the device).
    pub(crate) fn record_at(&self, offset: u32) -> Result<Record<'_>, SegmentError> {
        if (offset as usize) < SEGMENT_HEADER_BYTES {
            return Err(SegmentError::BadRecord { offset });
        }
        let payload = &self.buf.as_slice()[..self.used_bytes];
        decode_record(payload, offset as usize, self.sequence)
    }

    /// Writes the header (counts and checksums) and returns the whole segment, ready to
    /// be written at its slot.
    pub(crate) fn seal(&mut self) -> &AlignedBuf {
        let segment_bytes = self.buf.len();
        let payload_bytes = (self.used_bytes - SEGMENT_HEADER_BYTES) as u32;
        let bytes = self.buf.as_mut_slice();
        let payload_checksum = xxh3_64_with_seed(
            &bytes[SEGMENT_HEADER_BYTES..SEGMENT_HEADER_BYTES + payload_bytes as usize],
            self.sequence,
        );
        bytes[0..8].copy_from_slice(&SEGMENT_MAGIC);
        bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&((segment_bytes / IO_ALIGN_BYTES) as u32).to_le_bytes());
        bytes[16..24].copy_from_slice(&self.device_id.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.sequence.to_le_bytes());
        bytes[32..36].copy_from_slice(&self.records.to_le_bytes());
        bytes[36..40].copy_from_slice(&payload_bytes.to_le_bytes());
        bytes[40..48].copy_from_slice(&payload_checksum.to_le_bytes());
        bytes[48..56].fill(0);
        let header_checksum = xxh3_64_with_seed(&bytes[0..56], 0);
        bytes[56..64].copy_from_slice(&header_checksum.to_le_bytes());
        &self.buf
    }

    /// Empties the buffer for the next segment, written with `sequence`.
    pub(crate) fn reset(&mut self, sequence: u64) {
        self.buf.as_mut_slice()[..self.used_bytes].fill(0);
        self.used_bytes = SEGMENT_HEADER_BYTES;
        self.records = 0;
        self.sequence = sequence;
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The header of the segment whose first bytes are `bytes` (at least its header),
/// verified: a segment of `segment_bytes` written by the device `device_id`.
pub(crate) fn read_header(
    bytes: &[u8],
    segment_bytes: usize,
    device_id: u64,
) -> Result<SegmentHeader, SegmentError> {
    if bytes.len() < SEGMENT_HEADER_BYTES || bytes[0..8] != SEGMENT_MAGIC {
        return Err(SegmentError::Blank);
    }
    if u64_at(bytes, 56) != xxh3_64_with_seed(&bytes[0..56], 0) {
        return Err(SegmentError::TornHeader);
    }
    let units = u32_at(bytes, 12) as usize;
    if u32_at(bytes, 8) != FORMAT_VERSION
        || units * IO_ALIGN_BYTES != segment_bytes
        || u64_at(bytes, 16) != device_id
    {
        return Err(SegmentError::Foreign);
    }
    let payload_bytes = u32_at(bytes, 36);
    if SEGMENT_HEADER_BYTES + payload_bytes as usize > segment_bytes {
        return Err(SegmentError::TornHeader);
    }
    Ok(SegmentHeader {
        sequence: u64_at(bytes, 24),
        records: u32_at(bytes, 32),
        payload_bytes,
        payload_checksum: u64_at(bytes, 40),
    })
}

/// The records of a whole segment (`bytes`, read from its slot) whose header is
/// `header`, for a restart's scan: all of them with their offsets, or why the segment
/// cannot be trusted (its payload fails its checksum: it was not written whole).
pub(crate) fn records<'a>(
    bytes: &'a [u8],
    header: &SegmentHeader,
) -> Result<Vec<(u32, Record<'a>)>, SegmentError> {
    let end = SEGMENT_HEADER_BYTES + header.payload_bytes as usize;
    if bytes.len() < end
        || xxh3_64_with_seed(&bytes[SEGMENT_HEADER_BYTES..end], header.sequence)
            != header.payload_checksum
    {
        return Err(SegmentError::TornPayload);
    }
    let payload = &bytes[..end];
    let mut out = Vec::with_capacity(header.records as usize);
    let mut offset = SEGMENT_HEADER_BYTES;
    for _ in 0..header.records {
        let record = decode_record(payload, offset, header.sequence)?;
        let len = record_bytes(record.key.len(), record.value.len());
        out.push((offset as u32, record));
        offset += len;
    }
    if offset != end {
        return Err(SegmentError::TornPayload);
    }
    Ok(out)
}

/// The record that starts at `start` of `bytes`, part of a segment written with
/// `sequence`, verified: its lengths inside `bytes` and its checksum. `bytes` is the
/// segment from its first byte (a scan) or the aligned blocks a GET read around the
/// record (`start` then counts from the first of them). A stale record of the slot's
/// previous segment fails the checksum (another seed), as does a torn one.
pub(crate) fn decode_record(
    bytes: &[u8],
    start: usize,
    sequence: u64,
) -> Result<Record<'_>, SegmentError> {
    let bad = SegmentError::BadRecord {
        offset: u32::try_from(start).unwrap_or(u32::MAX),
    };
    if !start.is_multiple_of(8) || start + RECORD_HEADER_BYTES > bytes.len() {
        return Err(bad);
    }
    let head = &bytes[start..start + RECORD_HEADER_BYTES];
    let key_len = head[8] as usize;
    let value_len = u32_at(head, 12) as usize;
    if key_len == 0 || key_len > KEY_BYTES_MAX || head[9..12] != [0, 0, 0] {
        return Err(bad);
    }
    let key_start = start + RECORD_HEADER_BYTES;
    let value_start = key_start + key_len;
    let Some(value_end) = value_start.checked_add(value_len) else {
        return Err(bad);
    };
    if value_end > bytes.len() {
        return Err(bad);
    }
    if u64_at(head, 0) != xxh3_64_with_seed(&bytes[start + 8..value_end], sequence) {
        return Err(bad);
    }
    Ok(Record {
        key: &bytes[key_start..value_start],
        value: &bytes[value_start..value_end],
        meta: RecordMeta {
            client_flags: u32_at(head, 16),
            exptime_unix_s: u32_at(head, 20),
            cas: u64_at(head, 24),
        },
    })
}

#[cfg(test)]
mod tests;
