//! The index's unit tests: descriptors, probing, tombstones, rebuilds and shards.

use super::*;

fn addr(tier: u64, offset: u64) -> ItemAddr {
    (tier << 56) | offset
}

/// A descriptor's address for the tests that never read an item (there is no memory
/// behind these addresses): published with the index's address-only insert.
fn unread(addr: ItemAddr) -> ItemAddr {
    addr
}

/// A well-mixed 32-bit key hash for key number `i` (splitmix64), as the index's own
/// hasher gives for real keys.
fn hash(i: u64) -> u32 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

/// Keys compared by words are equal exactly when they are byte for byte: a
/// difference at any position of any length up to 24 is seen.
#[test]
fn keys_are_equal_only_when_every_byte_is() {
    for len in 0..24 {
        let key: Vec<u8> = (0..len as u8).map(|i| b'a' + i).collect();
        assert!(same_key(&key, &key.clone()), "len {len}");
        for at in 0..len {
            let mut other = key.clone();
            other[at] ^= 0x20;
            assert!(!same_key(&key, &other), "len {len} differing at {at}");
        }
        assert!(!same_key(&key, &key[..len.saturating_sub(1)]) || len == 0);
    }
}

#[test]
fn descriptors_round_trip_address_signature_and_policy_byte() {
    for (tier, offset) in [(0, 0), (0, 8), (1, 96), (1, OFFSET_LIMIT_BYTES - 8)] {
        let a = addr(tier, offset);
        for sig in [1u16, 0x1234, u16::MAX] {
            let d = encode(sig, 0xA5, a);
            assert!(is_descriptor(d));
            assert_eq!(decode_addr(d), a);
            assert_eq!(sig_of(d), sig);
            assert_eq!((d >> POLICY_SHIFT) as u8, 0xA5);
        }
    }
    assert_ne!(signature(0), 0);
}

/// The found-slot hint never names another item's descriptor: after the item it
/// named left (its slot reused by another key, or the table rebuilt), a look-up by
/// address still finds exactly what the table holds.
#[test]
fn a_stale_found_hint_finds_nothing_it_should_not() {
    let shard = Mutex::new(Rank::Shard, Table::with_capacity(8));
    let mut table = shard.lock();
    let a = |i: u64| addr(0, i * 8);
    Index::insert_addr(&mut table, hash(1), unread(a(1)));
    let slot = Index::slot_of(&table, hash(1), a(1)).expect("inserted");
    table.found_hint.set(slot);
    assert!(Index::remove(&mut table, hash(1), a(1)));
    assert!(Index::slot_of(&table, hash(1), a(1)).is_none(), "removed");
    // Another key takes the tombstone the hint points at.
    Index::insert_addr(&mut table, hash(1), unread(a(2)));
    assert!(
        Index::slot_of(&table, hash(1), a(1)).is_none(),
        "the hint's slot moved on"
    );
    assert!(Index::replace_addr(&mut table, hash(1), a(2), unread(a(3))));
    assert!(Index::slot_of(&table, hash(1), a(2)).is_none());
    // Grown past the hint's bucket count and shrunk by a rebuild: still exact.
    table.found_hint.set(Slot {
        bucket: 1 << 20,
        slot: 7,
    });
    for i in 10..2_000u64 {
        Index::insert_addr(&mut table, hash(i), unread(a(i)));
    }
    for i in 10..2_000u64 {
        let slot = Index::slot_of(&table, hash(i), a(i)).expect("inserted");
        table.found_hint.set(slot);
        let again = Index::slot_of(&table, hash(i), a(i)).expect("held");
        assert_eq!(decode_addr(table.get(again)), a(i));
    }
}

/// Inserting, removing and re-inserting many descriptors, with their own hash's
/// signature: each is found exactly where it is, none where it is not, and the load
/// stays within its bounds after every rebuild.
#[test]
fn a_table_finds_what_it_holds_and_keeps_its_load_bounded() {
    let mut table = Table::with_capacity(8);
    let a = |i: u64| addr(i % 2, i * 8);
    let present = |t: &Table, i: u64| {
        t.probe(signature(hash(i)), |d| decode_addr(d) == a(i))
            .is_some()
    };
    for i in 0..20_000u64 {
        table.insert(encode(signature(hash(i)), 0, a(i)));
        let load = table.used * 1000 / table.capacity();
        assert!(load <= LOAD_MAX_PERMILLE, "load {load} after {i}");
    }
    assert_eq!(table.len(), 20_000);
    let per_item = table.buckets.len() * 64 * 1000 / table.len();
    assert!(
        (8_800..=11_200).contains(&per_item),
        "{per_item} milli-bytes per item"
    );
    for i in (0..20_000u64).step_by(3) {
        let slot = table
            .probe(signature(hash(i)), |d| decode_addr(d) == a(i))
            .expect("held");
        table.set(slot, TOMBSTONE);
        table.live -= 1;
    }
    for i in 0..20_000u64 {
        assert_eq!(present(&table, i), i % 3 != 0, "{i}");
    }
    // A rebuild drops the tombstones: only live descriptors are carried over.
    let mut rebuilt = Table::with_capacity(8);
    rebuilt.buckets.clone_from(&table.buckets);
    (rebuilt.live, rebuilt.used) = (table.live, table.used);
    rebuilt.rebuild(rebuilt.len());
    assert_eq!((rebuilt.len(), rebuilt.used), (table.len(), table.len()));
    for i in 0..20_000u64 {
        assert_eq!(present(&rebuilt, i), i % 3 != 0, "{i} after the rebuild");
    }
    for i in 20_000..30_000u64 {
        table.insert(encode(signature(hash(i)), 0, a(i)));
    }
    for i in 0..30_000u64 {
        assert_eq!(present(&table, i), i >= 20_000 || i % 3 != 0, "{i}");
    }
    // Tombstones are reused or dropped by rebuilds, never counted as items: the
    // table's size follows the live descriptors.
    let live = 30_000 - 20_000usize.div_ceil(3);
    assert_eq!(table.len(), live);
    assert!(table.used * 1000 <= table.capacity() * LOAD_MAX_PERMILLE);
    table.rebuild(table.len());
    assert_eq!((table.len(), table.used), (live, live));
    let per_item = table.buckets.len() * 64 * 1000 / table.len();
    assert!(
        (8_800..=11_200).contains(&per_item),
        "{per_item} milli-bytes per item after removals"
    );
}

/// Placement spreads descriptors over the buckets: at the highest load a table
/// reaches, a lookup visits about one bucket (one cache line) on average.
#[test]
fn a_lookup_visits_about_one_bucket_at_the_highest_load() {
    let mut table = Table::with_capacity(1_000);
    let mut i = 0u64;
    let buckets = table.buckets.len();
    while (table.used + 1) * 1000 <= table.capacity() * LOAD_MAX_PERMILLE {
        table.insert(encode(signature(hash(i)), 0, addr(0, i * 8)));
        i += 1;
    }
    assert_eq!(table.buckets.len(), buckets, "no rebuild yet");
    let (mut visited_total, mut visited_max) = (0usize, 0usize);
    for j in 0..i {
        let sig = signature(hash(j));
        let home = table.home(sig);
        let slot = table
            .probe(sig, |d| decode_addr(d) == addr(0, j * 8))
            .expect("held");
        let visited = (slot.bucket + buckets - home) % buckets + 1;
        visited_total += visited;
        visited_max = visited_max.max(visited);
    }
    // Linear probing over 8-slot buckets at 90 % load: about 1.45 buckets on average
    // for well-mixed hashes (about 1.1 at the 72 % a rebuild starts from).
    let mean_milli = visited_total * 1000 / i as usize;
    assert!(mean_milli <= 1_700, "{mean_milli} milli-buckets per lookup");
    // Primary clustering makes a few lookups long in a full small table (40 buckets
    // here at worst, of 174); the mean is what every request pays.
    assert!(
        visited_max < buckets / 2,
        "a lookup visited {visited_max} buckets"
    );
}

/// `reserve` sizes a shard for what is coming (recovery), so the inserts that follow
/// do not rebuild it; the index's byte and slot counts are its tables'.
#[test]
fn reserve_presizes_a_shard_and_the_index_reports_its_real_size() {
    let index = Index::new(12);
    let key_hash = 0x1234_5678;
    let shard = index.shard(key_hash);
    let mut table = shard.table.lock();
    Index::reserve(&mut table, 50_000);
    let buckets = table.buckets.len();
    assert!(buckets * SLOTS * LOAD_MAX_PERMILLE >= 50_000 * 1000);
    for i in 0..50_000u64 {
        let h = key_hash.wrapping_add((i as u32).wrapping_mul(0x9E37_79B9));
        Index::insert_addr(&mut table, h, unread(addr(1, i * 8)));
    }
    assert_eq!(
        table.buckets.len(),
        buckets,
        "inserts after reserve rebuilt the shard"
    );
    drop(table);
    let slots: usize = (0..index.shard_count())
        .map(|s| index.shard_at(s).table.lock().capacity())
        .sum();
    assert_eq!(index.bucket_count(), slots);
    assert_eq!(index.allocated_bytes(), slots / SLOTS * 64);
    assert!(index.allocated_bytes() >= 50_000 * 8);
}

/// The proofs end to end over real item memory (Miri runs this): a written chunk is
/// published, found under its shard's lock, read, rewritten in place through the
/// look-up's `ItemRef` (which holds the `Held`), and read again through a proof the
/// index makes from its address.
#[test]
fn an_item_is_written_published_found_read_and_rewritten_through_its_proofs() {
    use crate::item::{header_bytes, Fresh};
    let mem = ItemMemory::new(tier::Region::heap(tier::PAGE_SIZE_BYTES).unwrap(), 0);
    let index = Index::new(8);
    let key_hash = index.hash(b"counter");
    let at = mem.addr_at(128);
    // SAFETY: a chunk of this test's own memory, which nothing else names.
    let chunk = unsafe { Fresh::claim(&mem, at) };
    let item = chunk.write_item(256, b"counter", &[b"12", b"34"]);
    assert_eq!(item.key_and_value(), b"counter1234");
    let mut table = index.shard(key_hash).table.lock();
    Index::insert_new(&mut table, key_hash, item);
    {
        let mut item =
            Index::find_item(&mut table, |_| &mem, key_hash, b"counter").expect("published");
        assert_eq!(item.addr(), at);
        assert_eq!(item.key(), b"counter");
        item.overwrite_value_padded(b"7");
        assert_eq!(item.read_value(), b"7   ");
    }
    assert!(Index::find(&mut table, |_| &mem, key_hash, b"counteR").is_none());
    let item = Index::held(&mut table, key_hash, at).expect("held");
    let view = mem.read_header(at, header_bytes::ALL).read_rest();
    assert_eq!(view.key_and_value(&item), b"counter7   ");
    assert!(Index::held(&mut table, key_hash, mem.addr_at(512)).is_none());
}

/// Keys whose hashes share a signature (here: the same hash) get descriptors that
/// differ only in their address: each is found, updated and removed on its own, and
/// its policy bits never leak to another.
/// A lookup reads an item (in its tier: the charge `Index::find` makes in its visit)
/// only for a descriptor whose signature matches: descriptors of other keys that
/// share its home bucket or probe path cost nothing, so a miss usually reads nothing
/// of the slow tier and a signature collision costs exactly one item read.
#[test]
fn a_probe_reads_only_the_items_whose_signature_matches() {
    let shard = Mutex::new(Rank::Shard, Table::with_capacity(64));
    let mut table = shard.lock();
    let wanted = 0xDEAD_BEEF;
    // Eight descriptors share the wanted key's signature (its collisions); hundreds
    // of others fill the table around them.
    for i in 0..8 {
        Index::insert_addr(&mut table, wanted, unread(addr(1, 64 * (i + 1))));
    }
    let mut others = 0;
    for i in 0..400u64 {
        let h = hash(i);
        if signature(h) != signature(wanted) {
            Index::insert_addr(&mut table, h, unread(addr(1, 64 * (1000 + i))));
            others += 1;
        }
    }
    assert!(others > 390);
    let mut items_read = 0;
    let found = table.probe(signature(wanted), |_| {
        items_read += 1;
        false
    });
    assert!(found.is_none());
    assert_eq!(
        items_read, 8,
        "one item read per signature match, none for the others"
    );
}

#[test]
fn descriptors_with_one_signature_are_told_apart_by_address() {
    let shard = Mutex::new(Rank::Shard, Table::with_capacity(4));
    let mut table = shard.lock();
    let hash = 0xDEAD_BEEF;
    let addrs: Vec<ItemAddr> = (0..40).map(|i| addr(i % 2, 64 * (i + 1))).collect();
    for &a in &addrs {
        Index::insert_addr(&mut table, hash, unread(a));
    }
    for (i, &a) in addrs.iter().enumerate() {
        let set = Index::with_policy_bits(&mut table, hash, a, |byte, referenced| {
            *byte = i as u8;
            *referenced = i % 3 == 0;
        });
        assert_eq!(set, Some(()));
    }
    assert!(Index::remove(&mut table, hash, addrs[7]));
    assert!(!Index::contains(&table, hash, addrs[7]));
    assert!(Index::replace_addr(
        &mut table,
        hash,
        addrs[8],
        unread(addr(1, 1 << 20))
    ));
    for (i, &a) in addrs.iter().enumerate() {
        let a = if i == 8 { addr(1, 1 << 20) } else { a };
        let bits =
            Index::with_policy_bits(&mut table, hash, a, |byte, referenced| (*byte, *referenced));
        let expected = (i != 7).then_some((i as u8, i % 3 == 0));
        assert_eq!(bits, expected, "descriptor {i}");
    }
    assert_eq!(table.len(), 39);
}
