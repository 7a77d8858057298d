//! Property test: random operation sequences give the same outcomes from the engine as
//! from a plain map modelling memcached's semantics (no memory pressure, no expiry).

mod common;
use common::*;
use engine::*;
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Clone, Debug)]
enum Op {
    Set(u8, Vec<u8>, u32),
    Add(u8, Vec<u8>),
    Replace(u8, Vec<u8>),
    Append(u8, Vec<u8>),
    Prepend(u8, Vec<u8>),
    Delete(u8),
    Incr(u8, u64),
    Decr(u8, u64),
    Get(u8),
    CasStale(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    let val = prop::collection::vec(
        prop_oneof![Just(b'1'), Just(b'9'), Just(b'a'), Just(b' ')],
        0..6,
    );
    prop_oneof![
        (key.clone(), val.clone(), any::<u32>()).prop_map(|(k, v, f)| Op::Set(k, v, f)),
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Add(k, v)),
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Replace(k, v)),
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Append(k, v)),
        (key.clone(), val).prop_map(|(k, v)| Op::Prepend(k, v)),
        key.clone().prop_map(Op::Delete),
        (key.clone(), 0u64..1000).prop_map(|(k, d)| Op::Incr(k, d)),
        (key.clone(), 0u64..1000).prop_map(|(k, d)| Op::Decr(k, d)),
        key.clone().prop_map(Op::Get),
        key.prop_map(Op::CasStale),
    ]
}

#[derive(Clone)]
struct M {
    value: Vec<u8>,
    flags: u32,
    cas: u64,
}

/// memcached reads a counter with `strtoull`: leading white space, an optional `+`, digits,
/// then the end of the value or a white-space byte (a `-` only as "-0").
fn model_strtoull(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let text = text.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, text) = match text.as_bytes().first() {
        Some(b'+') => (false, &text[1..]),
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    let digits_len = text.bytes().take_while(u8::is_ascii_digit).count();
    let ends_well = match text.as_bytes().get(digits_len) {
        None => true,
        Some(b) => b.is_ascii_whitespace() || *b == 0x0b,
    };
    if digits_len == 0 || !ends_well {
        return None;
    }
    let n: u64 = text[..digits_len].parse().ok()?;
    if negative {
        let wrapped = n.wrapping_neg();
        return i64::try_from(wrapped).is_ok().then_some(wrapped);
    }
    Some(n)
}

fn model_arith(m: &mut HashMap<u8, M>, k: u8, incr: bool, d: u64) -> Option<Option<u64>> {
    let item = m.get_mut(&k)?;
    let Some(n) = model_strtoull(&item.value) else {
        return Some(None);
    };
    let r = if incr {
        n.wrapping_add(d)
    } else {
        n.saturating_sub(d)
    };
    let digits = r.to_string().into_bytes();
    if digits.len() <= item.value.len() {
        let mut v = digits;
        v.resize(item.value.len(), b' ');
        item.value = v;
    } else {
        item.value = digits;
    }
    Some(Some(r))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model(ops in prop::collection::vec(op(), 1..60)) {
        let (e, _) = engine();
        let mut m: HashMap<u8, M> = HashMap::new();
        for op in ops {
            let is_append = matches!(op, Op::Append(..));
            let is_incr = matches!(op, Op::Incr(..));
            match op {
                Op::Set(k, v, f) => {
                    let StoreOutcome::Stored { cas } = store(&e, StoreMode::Set, &[k], &v, f, 0) else { panic!() };
                    m.insert(k, M { value: v, flags: f, cas });
                }
                Op::Add(k, v) => {
                    let o = store(&e, StoreMode::Add, &[k], &v, 1, 0);
                    match m.entry(k) {
                        std::collections::hash_map::Entry::Occupied(_) => {
                            prop_assert_eq!(o, StoreOutcome::NotStored);
                        }
                        std::collections::hash_map::Entry::Vacant(slot) => {
                            let StoreOutcome::Stored { cas } = o else { panic!("{o:?}") };
                            slot.insert(M { value: v, flags: 1, cas });
                        }
                    }
                }
                Op::Replace(k, v) => {
                    let o = store(&e, StoreMode::Replace, &[k], &v, 2, 0);
                    if let Some(item) = m.get_mut(&k) {
                        let StoreOutcome::Stored { cas } = o else { panic!("{o:?}") };
                        *item = M { value: v, flags: 2, cas };
                    } else {
                        prop_assert_eq!(o, StoreOutcome::NotStored);
                    }
                }
                Op::Append(k, v) | Op::Prepend(k, v) => {
                    let append = is_append;
                    let mode = if append { StoreMode::Append } else { StoreMode::Prepend };
                    let o = store(&e, mode, &[k], &v, 3, 0);
                    if let Some(item) = m.get_mut(&k) {
                        let StoreOutcome::Stored { cas } = o else { panic!("{o:?}") };
                        item.value = if append { [item.value.clone(), v].concat() } else { [v, item.value.clone()].concat() };
                        item.cas = cas;
                    } else {
                        prop_assert_eq!(o, StoreOutcome::NotStored);
                    }
                }
                Op::Delete(k) => {
                    let o = e.delete(&[k], &DeleteOptions::default());
                    let expected = if m.remove(&k).is_some() { DeleteOutcome::Deleted } else { DeleteOutcome::NotFound };
                    prop_assert_eq!(o, expected);
                }
                Op::Incr(k, d) | Op::Decr(k, d) => {
                    let incr = is_incr;
                    let o = e.arith(&[k], &ArithOptions::new(incr, d));
                    match model_arith(&mut m, k, incr, d) {
                        None => prop_assert_eq!(o, ArithOutcome::NotFound),
                        Some(None) => prop_assert_eq!(o, ArithOutcome::NonNumeric),
                        Some(Some(r)) => {
                            let ArithOutcome::Value { value, cas, .. } = o else { panic!("{o:?}") };
                            prop_assert_eq!(value, r);
                            if let Some(item) = m.get_mut(&k) { item.cas = cas; }
                        }
                    }
                }
                Op::Get(k) => {
                    let got = get(&e, &[k]);
                    match m.get(&k) {
                        None => prop_assert!(got.is_none()),
                        Some(item) => {
                            let g = got.expect("model has the key");
                            prop_assert_eq!(&g.value, &item.value);
                            prop_assert_eq!(g.flags, item.flags);
                            prop_assert_eq!(g.cas, item.cas);
                        }
                    }
                }
                Op::CasStale(k) => {
                    let mut o = StoreOptions::new(StoreMode::Set, 0, 0);
                    o.compare_cas = Some(1_000_000);
                    let out = e.store(&[k], b"z", &o);
                    let expected = if m.contains_key(&k) { StoreOutcome::Exists } else { StoreOutcome::NotFound };
                    prop_assert_eq!(out, expected);
                }
            }
        }
        prop_assert_eq!(stat(&e, "curr_items"), m.len() as u64);
    }
}
