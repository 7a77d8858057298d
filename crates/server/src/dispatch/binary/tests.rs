//! The unit tests of `dispatch/binary.rs`.

use engine::EngineConfig;

use super::*;
use crate::dispatch::test_server::TestServer;
use crate::session::ServerSettings;

const OPAQUE: u32 = 0xdead_beef;
const ITEM_SIZE_MAX_BYTES: usize = 1024 * 1024;

// Opcodes, spelled out so the tests do not lean on the parser's tables.
const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCR: u8 = 0x05;
const DECR: u8 = 0x06;
const QUIT: u8 = 0x07;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const REPLACEQ: u8 = 0x13;
const DELETEQ: u8 = 0x14;
const INCRQ: u8 = 0x15;
const DECRQ: u8 = 0x16;
const QUITQ: u8 = 0x17;
const FLUSHQ: u8 = 0x18;
const APPENDQ: u8 = 0x19;
const PREPENDQ: u8 = 0x1a;
const VERBOSITY: u8 = 0x1b;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const GATK: u8 = 0x23;
const GATKQ: u8 = 0x24;

struct Fixture(TestServer);

impl std::ops::Deref for Fixture {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl Fixture {
    fn new() -> Fixture {
        let config = EngineConfig {
            memory_limit_bytes: 8 * 1024 * 1024,
            item_size_max_bytes: ITEM_SIZE_MAX_BYTES,
            ..EngineConfig::default()
        };
        Fixture(TestServer::new(config, ServerSettings::default()))
    }

    /// One dispatcher call: its step and the reply bytes.
    fn call(&self, input: &[u8]) -> (Step, Vec<u8>) {
        let mut out = Vec::new();
        let mut session = self.session(&mut out, 0, usize::MAX);
        let step = handle(&mut session, input);
        (step, out)
    }

    /// Feeds `input` request by request, as the runtime would, and returns all reply
    /// bytes. Every request must be consumed normally.
    fn run(&self, input: &[u8]) -> Vec<u8> {
        let mut replies = Vec::new();
        let mut at = 0;
        while at < input.len() {
            let (step, out) = self.call(&input[at..]);
            replies.extend_from_slice(&out);
            match step {
                Step::Consumed(n) => {
                    assert!(n > 0 && at + n <= input.len());
                    at += n;
                }
                other => panic!("unexpected {other:?} at offset {at}"),
            }
        }
        replies
    }

    /// Stores `key` with `set` and returns the CAS it was given.
    fn set(&self, key: &[u8], value: &[u8], flags: u32, exptime: u32) -> u64 {
        let reply = self.run(&req(SET, &store_extras(flags, exptime), key, value, 0));
        assert_eq!(&reply[..12], &resp_prefix(SET, 0, 0, 0, 0)[..]);
        cas_of(&reply)
    }
}

fn req(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let body_len = extras.len() + key.len() + value.len();
    let mut b = vec![0x80, opcode];
    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
    b.push(extras.len() as u8);
    b.extend_from_slice(&[0, 0, 0]);
    b.extend_from_slice(&(body_len as u32).to_be_bytes());
    b.extend_from_slice(&OPAQUE.to_be_bytes());
    b.extend_from_slice(&cas.to_be_bytes());
    b.extend_from_slice(extras);
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

fn store_extras(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

fn arith_extras(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    [
        &delta.to_be_bytes()[..],
        &initial.to_be_bytes(),
        &exptime.to_be_bytes(),
    ]
    .concat()
}

/// The first 12 bytes of a response header (magic .. body length).
fn resp_prefix(opcode: u8, status: u16, extras: usize, key: usize, body: usize) -> Vec<u8> {
    let mut b = vec![0x81, opcode];
    b.extend_from_slice(&(key as u16).to_be_bytes());
    b.push(extras as u8);
    b.push(0);
    b.extend_from_slice(&status.to_be_bytes());
    b.extend_from_slice(&(body as u32).to_be_bytes());
    b
}

/// A whole response, built by hand.
fn resp(opcode: u8, status: u16, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut b = resp_prefix(
        opcode,
        status,
        extras.len(),
        key.len(),
        extras.len() + key.len() + value.len(),
    );
    b.extend_from_slice(&OPAQUE.to_be_bytes());
    b.extend_from_slice(&cas.to_be_bytes());
    b.extend_from_slice(extras);
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

fn ok(opcode: u8, cas: u64) -> Vec<u8> {
    resp(opcode, 0, cas, b"", b"", b"")
}

fn err(opcode: u8, status: u16, text: &[u8]) -> Vec<u8> {
    resp(opcode, status, 0, b"", b"", text)
}

fn cas_of(reply: &[u8]) -> u64 {
    u64::from_be_bytes(reply[16..24].try_into().expect("a whole header"))
}

const NOT_FOUND: &[u8] = b"Not found";
const EXISTS: &[u8] = b"Data exists for key.";
const NOT_STORED: &[u8] = b"Not stored.";

#[test]
fn set_then_get_getk_return_flags_cas_key_and_value() {
    let f = Fixture::new();
    let reply = f.run(&req(SET, &store_extras(5, 0), b"k", b"v1", 0));
    let cas = cas_of(&reply);
    assert_ne!(cas, 0);
    assert_eq!(reply, ok(SET, cas));
    assert_eq!(
        f.run(&req(GET, b"", b"k", b"", 0)),
        resp(GET, 0, cas, &5u32.to_be_bytes(), b"", b"v1")
    );
    assert_eq!(
        f.run(&req(GETK, b"", b"k", b"", 0)),
        resp(GETK, 0, cas, &5u32.to_be_bytes(), b"k", b"v1")
    );
    // A value holding protocol bytes and CRLFs comes back untouched.
    let cas = f.set(b"bin", b"\x80\r\n\x00x", 0, 0);
    assert_eq!(
        f.run(&req(GET, b"", b"bin", b"", 0)),
        resp(GET, 0, cas, &[0; 4], b"", b"\x80\r\n\x00x")
    );
    // A newer set gets a newer CAS.
    let newer = f.set(b"k", b"v2", 0, 0);
    assert!(newer > cas);
}

#[test]
fn get_misses_say_not_found_and_getk_misses_echo_the_key() {
    let f = Fixture::new();
    assert_eq!(f.run(&req(GET, b"", b"nx", b"", 0)), err(GET, 1, NOT_FOUND));
    assert_eq!(
        f.run(&req(GETK, b"", b"nx", b"", 0)),
        resp(GETK, 1, 0, b"", b"nx", b"")
    );
}

#[test]
fn quiet_gets_send_hits_only_and_noop_ends_the_batch() {
    let f = Fixture::new();
    let cas = f.set(b"q", b"x", 0, 0);
    let mut batch = req(GETQ, b"", b"nx", b"", 0);
    batch.extend(req(GETKQ, b"", b"nx", b"", 0));
    batch.extend(req(GETQ, b"", b"q", b"", 0));
    batch.extend(req(GETKQ, b"", b"q", b"", 0));
    batch.extend(req(NOOP, b"", b"", b"", 0));
    let expected = [
        resp(GETQ, 0, cas, &[0; 4], b"", b"x"),
        resp(GETKQ, 0, cas, &[0; 4], b"q", b"x"),
        ok(NOOP, 0),
    ]
    .concat();
    assert_eq!(f.run(&batch), expected);
}

#[test]
fn add_and_replace_refusals_use_memcached_statuses() {
    let f = Fixture::new();
    let se = store_extras(0, 0);
    let cas = f.run(&req(ADD, &se, b"k", b"a", 0));
    assert_eq!(cas, ok(ADD, cas_of(&cas)));
    assert_eq!(f.run(&req(ADD, &se, b"k", b"b", 0)), err(ADD, 2, EXISTS));
    assert_eq!(
        f.run(&req(REPLACE, &se, b"nx", b"b", 0)),
        err(REPLACE, 1, NOT_FOUND)
    );
    let replaced = f.run(&req(REPLACE, &se, b"k", b"c", 0));
    assert_eq!(replaced, ok(REPLACE, cas_of(&replaced)));
    assert_eq!(
        f.run(&req(GET, b"", b"k", b"", 0)),
        resp(GET, 0, cas_of(&replaced), &[0; 4], b"", b"c")
    );
}

#[test]
fn quiet_stores_send_only_errors() {
    let f = Fixture::new();
    let se = store_extras(0, 0);
    let mut batch = req(SETQ, &se, b"q", b"1", 0);
    batch.extend(req(ADDQ, &se, b"q", b"2", 0));
    batch.extend(req(REPLACEQ, &se, b"q", b"3", 0));
    batch.extend(req(REPLACEQ, &se, b"nx", b"3", 0));
    batch.extend(req(APPENDQ, b"", b"q", b"4", 0));
    batch.extend(req(PREPENDQ, b"", b"q", b"0", 0));
    batch.extend(req(APPENDQ, b"", b"nx", b"4", 0));
    batch.extend(req(DELETEQ, b"", b"nx", b"", 0));
    batch.extend(req(NOOP, b"", b"", b"", 0));
    let expected = [
        err(ADDQ, 2, EXISTS),
        err(REPLACEQ, 1, NOT_FOUND),
        err(APPENDQ, 5, NOT_STORED),
        err(DELETEQ, 1, NOT_FOUND),
        ok(NOOP, 0),
    ]
    .concat();
    assert_eq!(f.run(&batch), expected);
    let reply = f.run(&req(GET, b"", b"q", b"", 0));
    assert_eq!(reply, resp(GET, 0, cas_of(&reply), &[0; 4], b"", b"034"));
    assert_eq!(f.run(&req(DELETEQ, b"", b"q", b"", 0)), b"");
    assert_eq!(f.run(&req(GET, b"", b"q", b"", 0)), err(GET, 1, NOT_FOUND));
}

#[test]
fn a_cas_in_the_header_makes_any_store_a_compare_and_swap() {
    let f = Fixture::new();
    let se = store_extras(0, 0);
    let cas = f.set(b"k", b"v", 0, 0);
    assert_eq!(
        f.run(&req(SET, &se, b"k", b"x", cas + 100)),
        err(SET, 2, EXISTS)
    );
    assert_eq!(
        f.run(&req(SET, &se, b"nx", b"x", cas)),
        err(SET, 1, NOT_FOUND)
    );
    assert_eq!(
        f.run(&req(REPLACE, &se, b"nx", b"x", cas)),
        err(REPLACE, 1, NOT_FOUND)
    );
    assert_eq!(
        f.run(&req(ADD, &se, b"nx", b"x", cas)),
        err(ADD, 1, NOT_FOUND)
    );
    // `add` with the right CAS on an existing item stores, as in memcached.
    let reply = f.run(&req(ADD, &se, b"k", b"y", cas));
    let new_cas = cas_of(&reply);
    assert!(new_cas > cas);
    assert_eq!(reply, ok(ADD, new_cas));
    let reply = f.run(&req(SET, &se, b"k", b"z", new_cas));
    assert_eq!(reply, ok(SET, cas_of(&reply)));
    assert_eq!(
        f.run(&req(GET, b"", b"k", b"", 0)),
        resp(GET, 0, cas_of(&reply), &[0; 4], b"", b"z")
    );
}

#[test]
fn append_and_prepend_keep_flags_and_compare_cas() {
    let f = Fixture::new();
    assert_eq!(
        f.run(&req(APPEND, b"", b"nx", b"x", 0)),
        err(APPEND, 5, NOT_STORED)
    );
    assert_eq!(
        f.run(&req(PREPEND, b"", b"nx", b"x", 0)),
        err(PREPEND, 5, NOT_STORED)
    );
    assert_eq!(
        f.run(&req(APPEND, b"", b"nx", b"x", 7)),
        err(APPEND, 5, NOT_STORED)
    );
    let cas = f.set(b"k", b"x", 9, 0);
    assert_eq!(
        f.run(&req(APPEND, b"", b"k", b"A", cas + 1)),
        err(APPEND, 2, EXISTS)
    );
    let appended = f.run(&req(APPEND, b"", b"k", b"A", cas));
    assert_eq!(appended, ok(APPEND, cas_of(&appended)));
    let prepended = f.run(&req(PREPEND, b"", b"k", b"P", 0));
    assert_eq!(prepended, ok(PREPEND, cas_of(&prepended)));
    assert_eq!(
        f.run(&req(GET, b"", b"k", b"", 0)),
        resp(GET, 0, cas_of(&prepended), &9u32.to_be_bytes(), b"", b"PxA")
    );
}

#[test]
fn delete_compares_cas_and_replies_with_cas_zero() {
    let f = Fixture::new();
    let cas = f.set(b"k", b"v", 0, 0);
    assert_eq!(
        f.run(&req(DELETE, b"", b"k", b"", cas + 1)),
        err(DELETE, 2, EXISTS)
    );
    assert_eq!(f.run(&req(DELETE, b"", b"k", b"", cas)), ok(DELETE, 0));
    assert_eq!(
        f.run(&req(DELETE, b"", b"k", b"", 0)),
        err(DELETE, 1, NOT_FOUND)
    );
    f.set(b"k", b"v", 0, 0);
    assert_eq!(f.run(&req(DELETE, b"", b"k", b"", 0)), ok(DELETE, 0));
}

fn counter(opcode: u8, cas: u64, value: u64) -> Vec<u8> {
    resp(opcode, 0, cas, b"", b"", &value.to_be_bytes())
}

#[test]
fn incr_and_decr_create_only_when_asked_and_wrap_like_memcached() {
    let f = Fixture::new();
    let no_create = arith_extras(1, 5, 0xffff_ffff);
    assert_eq!(
        f.run(&req(INCR, &no_create, b"n", b"", 0)),
        err(INCR, 1, NOT_FOUND)
    );
    assert_eq!(
        f.run(&req(DECR, &no_create, b"n", b"", 0)),
        err(DECR, 1, NOT_FOUND)
    );
    let created = f.run(&req(INCR, &arith_extras(1, 5, 0), b"n", b"", 0));
    assert_eq!(created, counter(INCR, cas_of(&created), 5));
    let reply = f.run(&req(INCR, &arith_extras(10, 5, 0), b"n", b"", 0));
    assert_eq!(reply, counter(INCR, cas_of(&reply), 15));
    assert!(cas_of(&reply) > cas_of(&created));
    let reply = f.run(&req(DECR, &arith_extras(100, 5, 0), b"n", b"", 0));
    assert_eq!(reply, counter(DECR, cas_of(&reply), 0));
    // The stored text is the number, rewritten in place and padded with spaces to
    // the old length, as memcached 1.6.18 does.
    let cas = f.set(b"w", b"18446744073709551615", 0, 0);
    let reply = f.run(&req(INCR, &arith_extras(2, 0, 0), b"w", b"", 0));
    assert_eq!(reply, counter(INCR, cas_of(&reply), 1));
    assert!(cas_of(&reply) > cas);
    let reply = f.run(&req(GET, b"", b"w", b"", 0));
    assert_eq!(
        reply,
        resp(
            GET,
            0,
            cas_of(&reply),
            &[0; 4],
            b"",
            b"1                   "
        )
    );
}

#[test]
fn incr_errors_and_quiet_forms() {
    let f = Fixture::new();
    let ae = arith_extras(1, 0, 0);
    f.set(b"t", b"abc", 0, 0);
    assert_eq!(
        f.run(&req(INCR, &ae, b"t", b"", 0)),
        err(INCR, 6, b"Non-numeric server-side value for incr or decr")
    );
    let cas = f.set(b"n", b"1", 0, 0);
    assert_eq!(
        f.run(&req(INCR, &ae, b"n", b"", cas + 1)),
        err(INCR, 2, EXISTS)
    );
    let reply = f.run(&req(INCR, &ae, b"n", b"", cas));
    assert_eq!(reply, counter(INCR, cas_of(&reply), 2));
    let mut batch = req(INCRQ, &ae, b"n", b"", 0);
    batch.extend(req(DECRQ, &arith_extras(5, 0, 0), b"n", b"", 0));
    batch.extend(req(
        INCRQ,
        &arith_extras(1, 0, 0xffff_ffff),
        b"missing",
        b"",
        0,
    ));
    batch.extend(req(NOOP, b"", b"", b"", 0));
    assert_eq!(
        f.run(&batch),
        [err(INCRQ, 1, NOT_FOUND), ok(NOOP, 0)].concat()
    );
    let reply = f.run(&req(GET, b"", b"n", b"", 0));
    assert_eq!(&reply[reply.len() - 1..], b"0");
}

#[test]
fn a_created_counter_expires_with_its_exptime() {
    let f = Fixture::new();
    let created = f.run(&req(INCR, &arith_extras(1, 7, 10), b"n", b"", 0));
    assert_eq!(created, counter(INCR, cas_of(&created), 7));
    f.clock.advance_s(11);
    assert_eq!(f.run(&req(GET, b"", b"n", b"", 0)), err(GET, 1, NOT_FOUND));
}

#[test]
fn touch_and_gat_update_the_expiry_and_reply_like_memcached() {
    let f = Fixture::new();
    let cas = f.set(b"t", b"abc", 3, 10);
    let ten_more = 100u32.to_be_bytes();
    assert_eq!(
        f.run(&req(TOUCH, &ten_more, b"t", b"", 0)),
        resp(TOUCH, 0, cas, &3u32.to_be_bytes(), b"", b"")
    );
    assert_eq!(
        f.run(&req(GAT, &ten_more, b"t", b"", 0)),
        resp(GAT, 0, cas, &3u32.to_be_bytes(), b"", b"abc")
    );
    assert_eq!(
        f.run(&req(GATK, &ten_more, b"t", b"", 0)),
        resp(GATK, 0, cas, &3u32.to_be_bytes(), b"t", b"abc")
    );
    // Past the original 10 s the item lives on, because touch moved its expiry.
    f.clock.advance_s(50);
    assert_eq!(
        f.run(&req(GET, b"", b"t", b"", 0)),
        resp(GET, 0, cas, &3u32.to_be_bytes(), b"", b"abc")
    );
    f.clock.advance_s(60);
    assert_eq!(f.run(&req(GET, b"", b"t", b"", 0)), err(GET, 1, NOT_FOUND));
    assert_eq!(
        f.run(&req(TOUCH, &ten_more, b"t", b"", 0)),
        err(TOUCH, 1, NOT_FOUND)
    );
    assert_eq!(
        f.run(&req(GAT, &ten_more, b"t", b"", 0)),
        err(GAT, 1, NOT_FOUND)
    );
    assert_eq!(
        f.run(&req(GATK, &ten_more, b"t", b"", 0)),
        resp(GATK, 1, 0, b"", b"t", b"")
    );
    let mut batch = req(GATQ, &ten_more, b"t", b"", 0);
    batch.extend(req(GATKQ, &ten_more, b"t", b"", 0));
    batch.extend(req(NOOP, b"", b"", b"", 0));
    assert_eq!(f.run(&batch), ok(NOOP, 0));
}

#[test]
fn items_expire_by_their_set_exptime() {
    let f = Fixture::new();
    let cas = f.set(b"e", b"v", 0, 5);
    f.clock.advance_s(4);
    assert_eq!(
        f.run(&req(GET, b"", b"e", b"", 0)),
        resp(GET, 0, cas, &[0; 4], b"", b"v")
    );
    f.clock.advance_s(2);
    assert_eq!(f.run(&req(GET, b"", b"e", b"", 0)), err(GET, 1, NOT_FOUND));
}

#[test]
fn flush_empties_the_cache_now_or_later_and_flushq_is_silent() {
    let f = Fixture::new();
    f.set(b"a", b"1", 0, 0);
    assert_eq!(f.run(&req(FLUSH, b"", b"", b"", 0)), ok(FLUSH, 0));
    assert_eq!(f.run(&req(GET, b"", b"a", b"", 0)), err(GET, 1, NOT_FOUND));
    f.set(b"a", b"1", 0, 0);
    assert_eq!(f.run(&req(FLUSHQ, b"", b"", b"", 0)), b"");
    assert_eq!(f.run(&req(GET, b"", b"a", b"", 0)), err(GET, 1, NOT_FOUND));
    let cas = f.set(b"a", b"1", 0, 0);
    assert_eq!(
        f.run(&req(FLUSH, &10u32.to_be_bytes(), b"", b"", 0)),
        ok(FLUSH, 0)
    );
    assert_eq!(
        f.run(&req(GET, b"", b"a", b"", 0)),
        resp(GET, 0, cas, &[0; 4], b"", b"1")
    );
    f.clock.advance_s(11);
    assert_eq!(f.run(&req(GET, b"", b"a", b"", 0)), err(GET, 1, NOT_FOUND));
}

#[test]
fn noop_version_and_quit() {
    let f = Fixture::new();
    assert_eq!(f.run(&req(NOOP, b"", b"", b"", 0)), ok(NOOP, 0));
    assert_eq!(
        f.run(&req(VERSION, b"", b"", b"", 0)),
        resp(VERSION, 0, 0, b"", b"", SERVER_VERSION.as_bytes())
    );
    assert_eq!(
        f.call(&req(QUIT, b"", b"", b"", 0)),
        (Step::Close, ok(QUIT, 0))
    );
    assert_eq!(
        f.call(&req(QUITQ, b"", b"", b"", 0)),
        (Step::Close, Vec::new())
    );
}

/// One decoded response, for tests that look at many of them.
struct Decoded {
    opcode: u8,
    status: u16,
    key: Vec<u8>,
    value: Vec<u8>,
    opaque: u32,
}

/// Splits a stream of responses.
fn responses(mut bytes: &[u8]) -> Vec<Decoded> {
    let mut all = Vec::new();
    while !bytes.is_empty() {
        assert_eq!(bytes[0], 0x81);
        let key_len = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
        let extras_len = usize::from(bytes[4]);
        let body_len = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        let body = &bytes[24..24 + body_len];
        all.push(Decoded {
            opcode: bytes[1],
            status: u16::from_be_bytes([bytes[6], bytes[7]]),
            key: body[extras_len..extras_len + key_len].to_vec(),
            value: body[extras_len + key_len..].to_vec(),
            opaque: u32::from_be_bytes(bytes[12..16].try_into().expect("4 bytes")),
        });
        bytes = &bytes[24 + body_len..];
    }
    all
}

#[test]
fn stat_answers_one_response_per_statistic_then_a_terminator() {
    let f = Fixture::new();
    f.set(b"a", b"1", 0, 0);
    let all = responses(&f.run(&req(STAT, b"", b"", b"", 0)));
    assert!(all.len() > 2);
    assert!(all
        .iter()
        .all(|r| r.opcode == STAT && r.status == 0 && r.opaque == OPAQUE));
    let (last, stats) = all.split_last().expect("at least the terminator");
    assert!(last.key.is_empty() && last.value.is_empty());
    assert!(stats.iter().all(|r| !r.key.is_empty()));
    let curr_items = stats
        .iter()
        .find(|r| r.key == b"curr_items")
        .expect("curr_items");
    assert_eq!(curr_items.value, b"1");
    assert!(stats
        .iter()
        .any(|r| r.key == b"version" && r.value == SERVER_VERSION.as_bytes()));

    let settings = responses(&f.run(&req(STAT, b"", b"settings", b"", 0)));
    assert!(settings.iter().any(|r| r.key == b"item_size_max"));
    assert_eq!(f.run(&req(STAT, b"", b"reset", b"", 0)), ok(STAT, 0));
    assert_eq!(
        f.run(&req(STAT, b"", b"bogus", b"", 0)),
        err(STAT, 1, NOT_FOUND)
    );
    // Every group ends with the terminator.
    for group in [&b"items"[..], b"slabs", b"sizes"] {
        let reply = f.run(&req(STAT, b"", group, b"", 0));
        assert!(
            reply.ends_with(&ok(STAT, 0)),
            "stat {}",
            String::from_utf8_lossy(group)
        );
    }
    // memcached serves `conns` over the text protocol only.
    assert_eq!(
        f.run(&req(STAT, b"", b"conns", b"", 0)),
        err(STAT, 1, NOT_FOUND)
    );
}

#[test]
fn a_value_over_the_item_limit_is_swallowed_and_unlinks_the_old_value() {
    let f = Fixture::new();
    f.set(b"big", b"old", 0, 0);
    let value = vec![b'x'; ITEM_SIZE_MAX_BYTES + 1];
    let request = req(SET, &store_extras(0, 0), b"big", &value, 0);
    let key_end = 24 + 8 + 3;
    // Decided as soon as the key is in: the value is never buffered.
    let (step, reply) = f.call(&request[..key_end]);
    assert_eq!(
        step,
        Step::Swallow {
            consumed: key_end,
            bytes: value.len()
        }
    );
    assert_eq!(reply, err(SET, 3, b"Too large."));
    assert_eq!(
        f.run(&req(GET, b"", b"big", b"", 0)),
        err(GET, 1, NOT_FOUND)
    );

    // Append and setq too large: the error is sent even when quiet, the old value stays.
    let cas = f.set(b"keep", b"old", 0, 0);
    let request = req(APPENDQ, b"", b"keep", &value, 0);
    let (step, reply) = f.call(&request);
    assert_eq!(
        step,
        Step::Swallow {
            consumed: 24 + 4,
            bytes: value.len()
        }
    );
    assert_eq!(reply, err(APPENDQ, 3, b"Too large."));
    assert_eq!(
        f.run(&req(GET, b"", b"keep", b"", 0)),
        resp(GET, 0, cas, &[0; 4], b"", b"old")
    );
}

#[test]
fn a_refused_value_counts_store_too_large_and_no_delete() {
    let f = Fixture::new();
    f.set(b"big", b"old", 0, 0);
    let value = vec![b'x'; ITEM_SIZE_MAX_BYTES + 1];
    let request = req(SET, &store_extras(0, 0), b"big", &value, 0);
    let (_, reply) = f.call(&request[..24 + 8 + 3]);
    assert_eq!(reply, err(SET, 3, b"Too large."));
    let (_, reply) = f.call(&req(ADD, &store_extras(0, 0), b"nokey", &value, 0));
    assert_eq!(reply, err(ADD, 3, b"Too large."));
    assert_eq!(f.stat("store_too_large"), "2");
    assert_eq!(f.stat("delete_hits"), "0");
    assert_eq!(f.stat("delete_misses"), "0");
    assert_eq!(
        f.run(&req(GET, b"", b"big", b"", 0)),
        err(GET, 1, NOT_FOUND)
    );
}

#[test]
fn touch_and_gat_count_as_touches_not_gets() {
    // memcached 1.6.18's process_bin_touch counts only cmd_touch and touch_hits or
    // touch_misses, for touch and gat alike.
    let f = Fixture::new();
    f.set(b"t", b"abc", 3, 0);
    let exptime = 100u32.to_be_bytes();
    f.run(&req(TOUCH, &exptime, b"t", b"", 0));
    f.run(&req(GAT, &exptime, b"t", b"", 0));
    f.run(&req(TOUCH, &exptime, b"none", b"", 0));
    f.run(&req(GATK, &exptime, b"none", b"", 0));
    assert_eq!(f.stat("cmd_touch"), "4");
    assert_eq!(f.stat("touch_hits"), "2");
    assert_eq!(f.stat("touch_misses"), "2");
    assert_eq!(f.stat("cmd_get"), "0");
    assert_eq!(f.stat("get_hits"), "0");
    assert_eq!(f.stat("get_misses"), "0");
}

#[test]
fn an_immediate_flush_takes_one_cas_value() {
    let f = Fixture::new();
    let before = f.set(b"a", b"1", 0, 0);
    assert_eq!(f.run(&req(FLUSH, b"", b"", b"", 0)), ok(FLUSH, 0));
    assert_eq!(f.set(b"a", b"1", 0, 0), before + 2);
}

#[test]
fn a_value_that_only_misses_the_limit_by_its_overhead_is_too_large() {
    let f = Fixture::new();
    f.set(b"edge", b"old", 0, 0);
    let value = vec![b'x'; ITEM_SIZE_MAX_BYTES];
    let reply = f.run(&req(SET, &store_extras(0, 0), b"edge", &value, 0));
    assert_eq!(reply, err(SET, 3, b"Too large."));
    assert_eq!(
        f.run(&req(GET, b"", b"edge", b"", 0)),
        err(GET, 1, NOT_FOUND)
    );
}

#[test]
fn bad_lengths_reply_invalid_arguments_and_close() {
    let f = Fixture::new();
    let invalid = |opcode| err(opcode, 4, b"Invalid arguments");
    let cases = [
        (GET, req(GET, b"xxxx", b"k", b"", 0)),
        (NOOP, req(NOOP, b"", b"k", b"", 0)),
        (SETQ, req(SETQ, b"1234", b"k", b"v", 0)),
        (INCR, req(INCR, &store_extras(0, 0), b"k", b"", 0)),
        (DELETE, req(DELETE, b"", b"", b"", 0)),
        (GET, req(GET, b"", &[b'k'; 251], b"", 0)),
    ];
    for (opcode, request) in cases {
        assert_eq!(
            f.call(&request),
            (Step::Close, invalid(opcode)),
            "opcode {opcode:#04x}"
        );
    }
    // A key longer than the body is "Unknown command", and closes too.
    let mut request = req(GET, b"", b"kk", b"", 0);
    request[8..12].copy_from_slice(&1u32.to_be_bytes());
    assert_eq!(
        f.call(&request),
        (Step::Close, err(GET, 0x81, b"Unknown command"))
    );
}

#[test]
fn a_bad_magic_byte_closes_without_a_reply() {
    let f = Fixture::new();
    let mut request = req(NOOP, b"", b"", b"", 0);
    request[0] = 0x81;
    assert_eq!(f.call(&request), (Step::Close, Vec::new()));
}

#[test]
fn unknown_opcodes_reply_unknown_command_and_swallow_their_body() {
    let f = Fixture::new();
    let request = req(VERBOSITY, &1u32.to_be_bytes(), b"", b"", 0);
    assert_eq!(
        f.call(&request),
        (
            Step::Swallow {
                consumed: 24,
                bytes: 4
            },
            err(VERBOSITY, 0x81, b"Unknown command")
        )
    );
    let request = req(0x50, b"", b"", b"", 0);
    assert_eq!(
        f.call(&request),
        (Step::Consumed(24), err(0x50, 0x81, b"Unknown command"))
    );
}

#[test]
fn partial_requests_need_more_input() {
    let f = Fixture::new();
    let request = req(SET, &store_extras(1, 0), b"key", b"value", 0);
    for split in 0..request.len() {
        assert_eq!(
            f.call(&request[..split]),
            (Step::NeedMore, Vec::new()),
            "cut at {split}"
        );
    }
    assert!(matches!(f.call(&request).0, Step::Consumed(n) if n == request.len()));
}

proptest::proptest! {
    // Each case builds a whole engine; 64 cases keep the test fast with the slab engine.
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Hostile requests (any opcode, lengths, CAS, extras and body) never panic, and
    /// every step stays inside the input or says how much to swallow.
    #[test]
    fn arbitrary_requests_never_panic_and_steps_stay_in_bounds(
        opcode in 0u8..0x30,
        key_len in 0u16..260,
        extras_len in 0u8..24,
        body_extra in 0u32..40,
        cas in proptest::prelude::prop_oneof![proptest::prelude::Just(0u64), 1u64..4],
        tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
    ) {
        let f = Fixture::new();
        f.set(b"k", b"12", 0, 0);
        let body_len = u32::from(key_len) + u32::from(extras_len) + body_extra;
        let mut input = vec![0x80, opcode];
        input.extend_from_slice(&key_len.to_be_bytes());
        input.push(extras_len);
        input.extend_from_slice(&[0, 0, 0]);
        input.extend_from_slice(&body_len.to_be_bytes());
        input.extend_from_slice(&OPAQUE.to_be_bytes());
        input.extend_from_slice(&cas.to_be_bytes());
        input.extend_from_slice(&tail);
        let (step, out) = f.call(&input);
        match step {
            Step::Consumed(n) => proptest::prop_assert!(n >= 24 && n <= input.len()),
            Step::Swallow { consumed, .. } => proptest::prop_assert!(consumed <= input.len()),
            Step::NeedMore => proptest::prop_assert!(out.is_empty()),
            Step::Close => {}
            Step::Shutdown => proptest::prop_assert!(false, "binary never shuts down"),
            Step::Partial { .. } => proptest::prop_assert!(false, "binary never streams"),
            Step::Watch { .. } => proptest::prop_assert!(false, "binary never watches"),
            Step::Upstream { .. } => proptest::prop_assert!(false, "no upstream here"),
        }
        // Whatever was answered is well-formed responses echoing the opaque.
        for r in responses(&out) {
            proptest::prop_assert_eq!(r.opcode, opcode);
            proptest::prop_assert_eq!(r.opaque, OPAQUE);
        }
    }
}
