use super::*;

const SEGMENT_BYTES: usize = 64 * 1024;
const DEVICE: u64 = 0x0123_4567_89AB_CDEF;

fn meta(i: u32) -> RecordMeta {
    RecordMeta {
        client_flags: i,
        exptime_unix_s: 1_800_000_000 + i,
        cas: u64::from(i) * 7 + 1,
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key:{i:05}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    (0..(i as usize * 37) % 900 + 1)
        .map(|b| (b as u8) ^ (i as u8))
        .collect()
}

/// A sealed segment of `n` records written with `sequence`, and their offsets.
fn sealed(n: u32, sequence: u64) -> (Vec<u8>, Vec<u32>) {
    let mut writer = SegmentWriter::new(SEGMENT_BYTES, DEVICE, sequence);
    let offsets = (0..n)
        .map(|i| writer.append(&key(i), &value(i), meta(i)).expect("fits"))
        .collect();
    (writer.seal().as_slice().to_vec(), offsets)
}

#[test]
fn a_sealed_segment_reads_back_every_record_by_scan_and_by_offset() {
    let (bytes, offsets) = sealed(40, 9);
    let header = read_header(&bytes, SEGMENT_BYTES, DEVICE).expect("header");
    assert_eq!(header.sequence, 9);
    assert_eq!(header.records, 40);
    let scanned = records(&bytes, &header).expect("records");
    assert_eq!(scanned.len(), 40);
    for (i, (offset, record)) in scanned.iter().enumerate() {
        let i = i as u32;
        assert_eq!(*offset, offsets[i as usize]);
        assert_eq!(record.key, key(i));
        assert_eq!(record.value, value(i));
        assert_eq!(record.meta, meta(i));
        // A single-record read: from the record's first bytes on, as a GET reads them.
        let alone = decode_record(&bytes, *offset as usize, 9).expect("by offset");
        assert_eq!(&alone, record);
        // A GET reads only the 4 KiB blocks around the record.
        let first = *offset as usize / 4096 * 4096;
        let end = (*offset as usize + record_bytes(record.key.len(), record.value.len()))
            .next_multiple_of(4096);
        let blocks = &bytes[first..end];
        let read = decode_record(blocks, *offset as usize - first, 9).expect("from its blocks");
        assert_eq!(&read, record);
    }
}

#[test]
fn a_record_reads_back_from_the_write_buffer_before_the_segment_is_sealed() {
    let mut writer = SegmentWriter::new(SEGMENT_BYTES, DEVICE, 3);
    let at = writer.append(b"k", b"v", meta(1)).unwrap();
    let record = writer.record_at(at).unwrap();
    assert_eq!((record.key, record.value), (&b"k"[..], &b"v"[..]));
    assert!(writer.record_at(at + 8).is_err(), "no record starts there");
}

#[test]
fn every_flipped_byte_of_a_record_fails_its_read_and_the_segment_scan() {
    let (bytes, offsets) = sealed(3, 5);
    let start = offsets[1] as usize;
    let end = start + record_bytes(key(1).len(), value(1).len());
    let value_end = start + RECORD_HEADER_BYTES + key(1).len() + value(1).len();
    for at in start..end {
        let mut torn = bytes.clone();
        torn[at] ^= 0x40;
        if at < value_end {
            assert_eq!(
                decode_record(&torn, offsets[1] as usize, 5),
                Err(SegmentError::BadRecord { offset: offsets[1] }),
                "byte {at}"
            );
        }
        let header = read_header(&torn, SEGMENT_BYTES, DEVICE).unwrap();
        assert_eq!(
            records(&torn, &header).unwrap_err(),
            SegmentError::TornPayload,
            "byte {at}"
        );
    }
}

#[test]
fn a_record_left_by_the_slots_previous_segment_is_not_taken_for_the_current_one() {
    // Slot reuse: sequence 7's segment is being replaced by sequence 8's; a read with the
    // new sequence of bytes still holding the old record fails.
    let (old, offsets) = sealed(2, 7);
    assert!(decode_record(&old, offsets[0] as usize, 7).is_ok());
    assert_eq!(
        decode_record(&old, offsets[0] as usize, 8),
        Err(SegmentError::BadRecord { offset: offsets[0] })
    );
    // A new header over an old payload (a write torn after its first block).
    let (new, _) = sealed(2, 8);
    let mut torn = old.clone();
    torn[..SEGMENT_HEADER_BYTES].copy_from_slice(&new[..SEGMENT_HEADER_BYTES]);
    let header = read_header(&torn, SEGMENT_BYTES, DEVICE).unwrap();
    assert_eq!(
        records(&torn, &header).unwrap_err(),
        SegmentError::TornPayload
    );
}

#[test]
fn headers_that_are_blank_torn_or_foreign_are_told_apart() {
    let (bytes, _) = sealed(1, 1);
    assert_eq!(
        read_header(&vec![0u8; SEGMENT_BYTES], SEGMENT_BYTES, DEVICE),
        Err(SegmentError::Blank)
    );
    let mut torn = bytes.clone();
    torn[30] ^= 1;
    assert_eq!(
        read_header(&torn, SEGMENT_BYTES, DEVICE),
        Err(SegmentError::TornHeader)
    );
    assert_eq!(
        read_header(&bytes, SEGMENT_BYTES, DEVICE + 1),
        Err(SegmentError::Foreign)
    );
    assert_eq!(
        read_header(&bytes, 2 * SEGMENT_BYTES, DEVICE),
        Err(SegmentError::Foreign)
    );
}

#[test]
fn a_segment_takes_records_until_the_next_does_not_fit_and_reset_empties_it() {
    let mut writer = SegmentWriter::new(8192, DEVICE, 1);
    let big = vec![b'x'; 1000];
    let per = record_bytes(4, 1000);
    let fit = (8192 - SEGMENT_HEADER_BYTES) / per;
    for i in 0..fit {
        assert!(
            writer
                .append(format!("k{i:03}").as_bytes(), &big, meta(0))
                .is_some(),
            "{i}"
        );
    }
    assert_eq!(writer.append(b"knot", &big, meta(0)), None);
    assert_eq!(writer.append(b"", b"v", meta(0)), None, "an empty key");
    assert_eq!(
        writer.append(&[b'k'; 251], b"v", meta(0)),
        None,
        "a key over 250 bytes"
    );
    assert_eq!(writer.records(), fit as u32);
    let header = read_header(writer.seal().as_slice(), 8192, DEVICE).unwrap();
    assert_eq!(header.records, fit as u32);
    writer.reset(2);
    assert_eq!((writer.records(), writer.sequence()), (0, 2));
    assert!(writer.append(b"knot", &big, meta(0)).is_some());
    let bytes = writer.seal().as_slice().to_vec();
    let header = read_header(&bytes, 8192, DEVICE).unwrap();
    assert_eq!((header.sequence, header.records), (2, 1));
    assert_eq!(records(&bytes, &header).unwrap()[0].1.key, b"knot");
}
