//! The unit tests of `dispatch/meta.rs`. Expected bytes come from memcached 1.6.18
//! answering the same requests.

use std::sync::atomic::{AtomicBool, AtomicU32};

use engine::EngineConfig;

use super::*;
use crate::dispatch::test_server::TestServer;
use crate::session::ServerSettings;

struct Server(TestServer);

impl std::ops::Deref for Server {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl Server {
    fn new() -> Server {
        Server(TestServer::new(
            EngineConfig::default(),
            ServerSettings {
                shutdown_enabled: false,
                verbosity: AtomicU32::new(0),
                max_connections: 1024,
                worker_threads: 1,
                tcp_port: 11211,
                listen_address: "127.0.0.1".to_string(),
                shutdown_requested: AtomicBool::new(false),
                ..ServerSettings::default()
            },
        ))
    }

    /// Feeds `input` through the dispatcher the way the runtime does (consuming and
    /// swallowing) and returns every reply byte.
    fn send(&self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut session = self.session(&mut out, 0, usize::MAX);
        let mut rest = input;
        // Each call consumes at least one byte, so this loop is bounded by the input.
        while !rest.is_empty() {
            match handle(&mut session, rest) {
                Step::Consumed(consumed) => rest = &rest[consumed..],
                Step::Swallow { consumed, bytes } => {
                    rest = &rest[(consumed + bytes).min(rest.len())..];
                }
                Step::NeedMore | Step::Close | Step::Shutdown => break,
                Step::Partial { .. } => panic!("meta requests have one key each"),
                Step::Watch { .. } => panic!("meta requests never watch"),
                Step::Upstream { .. } => panic!("no upstream in these tests"),
            }
        }
        out
    }

    /// The reply to `input`, which must be consumed completely.
    fn reply(&self, input: &[u8]) -> String {
        String::from_utf8_lossy(&self.send(input)).into_owned()
    }
}

#[test]
fn mn_answers_mn() {
    let server = Server::new();
    assert_eq!(server.reply(b"mn\r\nmn foo\n"), "MN\r\nMN\r\n");
}

#[test]
fn mg_returns_requested_flags_in_request_order() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms foo 3 F5 T100\r\nbar\r\n"), "HD\r\n");
    assert_eq!(
        server.reply(b"mg foo s v t f k Oq1 h l\r\n"),
        "VA 3 s3 t100 f5 kfoo Oq1 h0 l0\r\nbar\r\n"
    );
    server.clock.advance_s(3);
    assert_eq!(server.reply(b"mg foo h l t\r\n"), "HD h1 l3 t97\r\n");
    assert_eq!(server.reply(b"mg foo\r\n"), "HD\r\n");
    assert_eq!(
        server.reply(b"mg foo v vabc\r\n"),
        "CLIENT_ERROR duplicate flag\r\n"
    );
}

#[test]
fn mg_cas_matches_ms_cas() {
    let server = Server::new();
    let stored = server.reply(b"ms foo 3 c\r\nbar\r\n");
    let cas = stored
        .strip_prefix("HD c")
        .and_then(|rest| rest.strip_suffix("\r\n"))
        .expect("ms c returns the CAS");
    assert_eq!(server.reply(b"mg foo c\r\n"), format!("HD c{cas}\r\n"));
}

#[test]
fn mg_miss_echoes_opaque_and_key_and_q_hides_it() {
    let server = Server::new();
    assert_eq!(server.reply(b"mg foo v\r\n"), "EN\r\n");
    assert_eq!(
        server.reply(b"mg foo v k Oabc q\r\nmg foo k Oxyz\r\nmn\r\n"),
        "EN kfoo Oxyz\r\nMN\r\n"
    );
    // q hides only the miss: a hit is still answered.
    server.reply(b"ms hq 3\r\nabc\r\n");
    assert_eq!(
        server.reply(b"mg hq q\r\nmg hq v q k\r\nmn\r\n"),
        "HD\r\nVA 3 khq\r\nabc\r\nMN\r\n"
    );
}

#[test]
fn mg_touch_updates_the_ttl() {
    let server = Server::new();
    server.reply(b"ms foo 3 T100\r\nbar\r\n");
    assert_eq!(server.reply(b"mg foo T30 t\r\n"), "HD t30\r\n");
    assert_eq!(server.reply(b"mg foo t\r\n"), "HD t30\r\n");
}

#[test]
fn mg_touch_with_a_negative_ttl_answers_the_hit_then_expires() {
    let server = Server::new();
    server.reply(b"ms foo 3 T100\r\nbar\r\n");
    assert_eq!(server.reply(b"mg foo T-1\r\nmg foo\r\n"), "HD\r\nEN\r\n");
}

#[test]
fn invalidated_item_is_served_stale_and_one_client_wins_the_recache() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms sw 3 T100\r\nabc\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"md sw I T30\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"mg sw v t\r\n"), "VA 3 t30 X W\r\nabc\r\n");
    assert_eq!(server.reply(b"mg sw v t\r\n"), "VA 3 t30 Z X\r\nabc\r\n");
    assert_eq!(server.reply(b"mg sw\r\n"), "HD Z X\r\n");
    // The winner stores the fresh value: neither stale nor claimed any more.
    assert_eq!(server.reply(b"ms sw 3\r\nxyz\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"mg sw v\r\n"), "VA 3\r\nxyz\r\n");
    // A second invalidation hands out a new token.
    assert_eq!(server.reply(b"md sw I q\r\nmg sw\r\n"), "HD X W\r\n");
}

#[test]
fn an_oversized_ms_unlinks_in_every_mode_and_counts_store_too_large() {
    let server = Server::new();
    let too_big = server.engine.config().item_size_max_bytes;
    let mut input = b"ms k 1\r\nx\r\n".to_vec();
    input.extend_from_slice(format!("ms k {too_big} MA\r\n").as_bytes());
    input.resize(input.len() + too_big, b'z');
    input.extend_from_slice(b"\r\nmg k v\r\n");
    // memcached 1.6.18: refused, the old value gone, no delete counted.
    assert_eq!(
        server.reply(&input),
        "HD\r\nSERVER_ERROR object too large for cache\r\nEN\r\n"
    );
    assert_eq!(server.stat("store_too_large"), "1");
    assert_eq!(server.stat("delete_hits"), "0");
    assert_eq!(server.stat("delete_misses"), "0");
}

#[test]
fn mg_with_t_counts_a_hit_as_a_touch_and_a_miss_as_a_get() {
    let server = Server::new();
    server.reply(b"ms a 1\r\nx\r\n");
    assert_eq!(
        server.reply(b"mg a T30\r\nmg nokey v T30\r\n"),
        "HD\r\nEN\r\n"
    );
    assert_eq!(server.stat("cmd_touch"), "1");
    assert_eq!(server.stat("touch_hits"), "1");
    assert_eq!(server.stat("touch_misses"), "0");
    assert_eq!(server.stat("cmd_get"), "1");
    assert_eq!(server.stat("get_hits"), "0");
    assert_eq!(server.stat("get_misses"), "1");
}

#[test]
fn md_invalidate_bumps_the_cas() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms sw 3 c\r\nabc\r\n"), "HD c1\r\n");
    assert_eq!(
        server.reply(b"md sw I\r\nmg sw c\r\n"),
        "HD\r\nHD c2 X W\r\n"
    );
}

#[test]
fn md_invalidate_with_e_sets_the_cas() {
    let server = Server::new();
    server.reply(b"ms sw 3\r\nabc\r\n");
    assert_eq!(
        server.reply(b"md sw I E77\r\nmg sw c\r\n"),
        "HD\r\nHD c77 X W\r\n"
    );
}

#[test]
fn vivify_on_miss_gives_one_client_the_win() {
    let server = Server::new();
    assert_eq!(server.reply(b"mg viv N30 v t\r\n"), "VA 0 t30 W\r\n\r\n");
    assert_eq!(server.reply(b"mg viv N30 v t\r\n"), "VA 0 t30 Z\r\n\r\n");
    assert_eq!(server.reply(b"mg viv v\r\n"), "VA 0 Z\r\n\r\n");
    assert_eq!(server.reply(b"mg viv2 N30 k Oa\r\n"), "HD kviv2 Oa W\r\n");
    assert_eq!(server.reply(b"mg viv2 N30 k\r\n"), "HD kviv2 Z\r\n");
    // The winner recaches; the placeholder and its token are gone.
    assert_eq!(server.reply(b"ms viv 3 T30\r\nnew\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"mg viv v N30\r\n"), "VA 3\r\nnew\r\n");
}

#[test]
fn vivified_placeholder_reports_its_cas() {
    let server = Server::new();
    let first = server.reply(b"mg viv N30 c\r\n");
    let cas = first
        .strip_prefix("HD c")
        .and_then(|rest| rest.strip_suffix(" W\r\n"))
        .expect("the vivifying request wins");
    assert_eq!(
        server.reply(b"mg viv N30 c\r\n"),
        format!("HD c{cas} Z\r\n")
    );
}

#[test]
fn recache_wins_when_the_ttl_is_below_the_threshold() {
    let server = Server::new();
    server.reply(b"ms rc 3 T100\r\nabc\r\n");
    assert_eq!(server.reply(b"mg rc R30 v t\r\n"), "VA 3 t100\r\nabc\r\n");
    assert_eq!(
        server.reply(b"mg rc R200 v t\r\n"),
        "VA 3 t100 W\r\nabc\r\n"
    );
    assert_eq!(
        server.reply(b"mg rc R200 v t\r\n"),
        "VA 3 t100 Z\r\nabc\r\n"
    );
    // An item that never expires is never due for a recache.
    server.reply(b"ms rc2 3 T0\r\nabc\r\n");
    assert_eq!(server.reply(b"mg rc2 R200 v t\r\n"), "VA 3 t-1\r\nabc\r\n");
}

#[test]
fn base64_keys_are_decoded_and_echoed_encoded() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms Zm9v 3 b k\r\nbar\r\n"), "HD kZm9v b\r\n");
    assert_eq!(
        server.reply(b"mg Zm9v b k v\r\n"),
        "VA 3 kZm9v b\r\nbar\r\n"
    );
    assert_eq!(server.reply(b"mg foo v\r\n"), "VA 3\r\nbar\r\n");
    // memcached re-encodes the decoded key, so a sloppy encoding comes back canonical.
    assert_eq!(server.reply(b"mg Zm9vYmF= b k\r\n"), "EN kZm9vYmE= b\r\n");
    assert_eq!(server.reply(b"md Zm9v b k q\r\nmg foo\r\n"), "EN\r\n");
    assert_eq!(
        server.reply(b"mg Zm9v= b k\r\n"),
        "CLIENT_ERROR error decoding key\r\n"
    );
}

#[test]
fn ms_quiet_hides_only_hd() {
    let server = Server::new();
    assert_eq!(
        server.reply(b"ms foo 3 T0 F5 k O1 q\r\nbar\r\nmn\r\n"),
        "MN\r\n"
    );
    assert_eq!(
        server.reply(b"ms foo 1 ME q O9\r\nx\r\nms nf2 1 MR q k\r\nx\r\nms nf 1 C5 q\r\nx\r\n"),
        "NS O9\r\nNS knf2\r\nNF\r\n"
    );
}

#[test]
fn ms_compare_and_swap() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms ca 1 c\r\nx\r\n"), "HD c1\r\n");
    assert_eq!(server.reply(b"ms ca 1 C99 c\r\ny\r\n"), "EX c0\r\n");
    assert_eq!(server.reply(b"ms ca 1 C1 c\r\nz\r\n"), "HD c2\r\n");
    assert_eq!(server.reply(b"mg ca v c\r\n"), "VA 1 c2\r\nz\r\n");
    // Replace with a CAS behaves like `cas`: a missing item is NF.
    assert_eq!(server.reply(b"ms nope 1 MR C1\r\nz\r\n"), "NF\r\n");
    // Add ignores the CAS.
    assert_eq!(
        server.reply(b"ms added 1 ME C12345 c\r\nz\r\n"),
        "HD c3\r\n"
    );
}

#[test]
fn ms_e_sets_the_new_cas() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms ce 1 E500 c\r\nx\r\n"), "HD c500\r\n");
    assert_eq!(server.reply(b"mg ce c\r\n"), "HD c500\r\n");
}

#[test]
fn ms_invalidate_with_an_older_cas_stores_a_stale_item() {
    let server = Server::new();
    server.reply(b"ms cb 1\r\nx\r\nms cb 1\r\nx\r\n");
    assert_eq!(server.reply(b"mg cb c\r\n"), "HD c2\r\n");
    // A newer CAS than the item's is still a conflict.
    assert_eq!(server.reply(b"ms cb 1 C99 I c\r\nz\r\n"), "EX c0\r\n");
    assert_eq!(server.reply(b"ms cb 1 C1 I c q\r\nw\r\n"), "");
    assert_eq!(server.reply(b"mg cb v c\r\n"), "VA 1 c3 X W\r\nw\r\n");
}

#[test]
fn ms_modes_add_replace_append_prepend() {
    let server = Server::new();
    assert_eq!(
        server.reply(b"ms ap 1 MA\r\nx\r\nms ap 1 MP\r\nx\r\n"),
        "NS\r\nNS\r\n"
    );
    assert_eq!(server.reply(b"ms ap 1 MR\r\nx\r\n"), "NS\r\n");
    assert_eq!(server.reply(b"ms ap 2 ME T50\r\nab\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"ms ap 2 ME\r\nzz\r\n"), "NS\r\n");
    assert_eq!(server.reply(b"ms ap 1 MA\r\nc\r\n"), "HD\r\n");
    // Prepend keeps the item's client flags and TTL.
    assert_eq!(server.reply(b"ms ap 1 MP F7 T0\r\nz\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"mg ap v f t\r\n"), "VA 4 f0 t50\r\nzabc\r\n");
    assert_eq!(
        server.reply(b"ms ap 1 MS\r\nq\r\nmg ap v\r\n"),
        "HD\r\nVA 1\r\nq\r\n"
    );
    assert_eq!(
        server.reply(b"ms ap 1 MR\r\nr\r\nmg ap v\r\n"),
        "HD\r\nVA 1\r\nr\r\n"
    );
}

#[test]
fn ms_append_with_n_creates_the_missing_item() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms av 2 MA N30\r\nab\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"mg av v t\r\n"), "VA 2 t30\r\nab\r\n");
}

#[test]
fn ms_payload_may_contain_crlf_and_must_end_with_it() {
    let server = Server::new();
    assert_eq!(
        server.reply(b"ms foo 5\r\na\r\nbc\r\nmg foo v\r\n"),
        "HD\r\nVA 5\r\na\r\nbc\r\n"
    );
    // memcached reads length + 2 bytes; the leftover newline is then an empty command
    // line for the text dispatcher, so only the error is checked here.
    let mut out = Vec::new();
    let mut session = Session {
        engine: &server.engine,
        settings: &server.settings,
        stats: &server.stats,
        out: &mut out,
        resume_keys: 0,
        out_high_water_bytes: usize::MAX,
        client_fd: -1,
        upstream_reply: None,
    };
    assert_eq!(
        handle(&mut session, b"ms foo 2\r\nbar\r\n"),
        Step::Consumed(14)
    );
    assert_eq!(out, b"CLIENT_ERROR bad data chunk\r\n");
}

#[test]
fn ms_errors_swallow_the_payload() {
    let server = Server::new();
    assert_eq!(
        server.reply(b"ms foo 3 Z\r\nbar\r\nmn\r\n"),
        "CLIENT_ERROR invalid flag\r\nMN\r\n"
    );
    assert_eq!(
        server.reply(b"ms foo 3 MX\r\nbar\r\nmn\r\n"),
        "CLIENT_ERROR invalid mode for ms M token\r\nMN\r\n"
    );
    assert_eq!(
        server.reply(b"ms foo 3 O123456789012345678901234567890123\r\nbar\r\nmn\r\n"),
        "CLIENT_ERROR opaque token too long\r\nMN\r\n"
    );
}

#[test]
fn oversized_ms_is_swallowed_and_unlinks_the_old_value() {
    let server = Server::new();
    server.reply(b"ms big 3\r\nold\r\n");
    let mut input = b"ms big 2000000 q\r\n".to_vec();
    let line_bytes = input.len();
    input.resize(line_bytes + 2_000_000, b'x');
    input.extend_from_slice(b"\r\n");
    let mut out = Vec::new();
    let mut session = Session {
        engine: &server.engine,
        settings: &server.settings,
        stats: &server.stats,
        out: &mut out,
        resume_keys: 0,
        out_high_water_bytes: usize::MAX,
        client_fd: -1,
        upstream_reply: None,
    };
    // Only the command line is needed: the payload is discarded as it arrives.
    assert_eq!(
        handle(&mut session, &input[..line_bytes]),
        Step::Swallow {
            consumed: line_bytes,
            bytes: 2_000_002
        }
    );
    assert_eq!(out, b"SERVER_ERROR object too large for cache\r\n");
    assert_eq!(server.reply(b"mg big\r\n"), "EN\r\n");
}

#[test]
fn partial_requests_need_more() {
    let server = Server::new();
    let mut out = Vec::new();
    let mut session = Session {
        engine: &server.engine,
        settings: &server.settings,
        stats: &server.stats,
        out: &mut out,
        resume_keys: 0,
        out_high_water_bytes: usize::MAX,
        client_fd: -1,
        upstream_reply: None,
    };
    let request = b"ms foo 3 T0\r\nbar\r\n";
    for split in 0..request.len() {
        assert_eq!(handle(&mut session, &request[..split]), Step::NeedMore);
    }
    assert_eq!(handle(&mut session, request), Step::Consumed(request.len()));
    assert_eq!(out, b"HD\r\n");
}

#[test]
fn md_deletes_and_q_hides_only_hd() {
    let server = Server::new();
    assert_eq!(server.reply(b"md nokey\r\n"), "NF\r\n");
    assert_eq!(server.reply(b"md nokey q k O1\r\n"), "NF knokey O1\r\n");
    server.reply(b"ms d1 1\r\nx\r\n");
    assert_eq!(server.reply(b"md d1 C99 q\r\n"), "EX\r\n");
    assert_eq!(server.reply(b"md d1 q\r\nmn\r\n"), "MN\r\n");
    assert_eq!(server.reply(b"mg d1\r\n"), "EN\r\n");
    server.reply(b"ms d2 1\r\nx\r\n");
    assert_eq!(server.reply(b"md d2 k Oa\r\n"), "HD kd2 Oa\r\n");
    assert_eq!(server.reply(b"md ZDI= b Oa k\r\n"), "NF Oa kZDI= b\r\n");
    assert_eq!(
        server.reply(b"md d2 k Oa b\r\n"),
        "CLIENT_ERROR invalid or duplicate flag\r\n"
    );
}

#[test]
fn md_with_matching_cas_deletes() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms d 1 c\r\nx\r\n"), "HD c1\r\n");
    assert_eq!(server.reply(b"md d C1\r\nmg d\r\n"), "HD\r\nEN\r\n");
}

#[test]
fn md_x_keeps_the_item_without_its_value() {
    let server = Server::new();
    server.reply(b"ms x1 3 F9\r\nabc\r\n");
    assert_eq!(server.reply(b"md x1 x\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"mg x1 v f\r\n"), "VA 0 f0\r\n\r\n");
}

#[test]
fn ma_increments_decrements_and_vivifies() {
    let server = Server::new();
    assert_eq!(server.reply(b"ma m1 q v k O1\r\n"), "NF km1 O1\r\n");
    // Creation is answered even in quiet mode; an update is not.
    assert_eq!(server.reply(b"ma m1 N0 J5 q\r\n"), "HD\r\n");
    assert_eq!(server.reply(b"ma m1 v\r\n"), "VA 1\r\n6\r\n");
    assert_eq!(server.reply(b"ma m1 MI D10 v\r\n"), "VA 2\r\n16\r\n");
    assert_eq!(server.reply(b"ma m1 M+ v\r\n"), "VA 2\r\n17\r\n");
    assert_eq!(server.reply(b"ma m1 q\r\nmn\r\n"), "MN\r\n");
    assert_eq!(server.reply(b"ma m1 M- D100 v t\r\n"), "VA 1 t-1\r\n0\r\n");
    assert_eq!(server.reply(b"ma m1 MD D1 v\r\n"), "VA 1\r\n0\r\n");
    assert_eq!(
        server.reply(b"ma m1 Mx\r\n"),
        "CLIENT_ERROR invalid mode for ma M token\r\n"
    );
    assert_eq!(
        server.reply(b"ma m5 N50 J3 t v k Oz\r\n"),
        "VA 1 t50 km5 Oz\r\n3\r\n"
    );
    assert_eq!(server.reply(b"ma m7 N0 J99 MD v\r\n"), "VA 2\r\n99\r\n");
}

#[test]
fn ma_cas_ttl_and_errors() {
    let server = Server::new();
    assert_eq!(server.reply(b"ms m2 3\r\nabc\r\n"), "HD\r\n");
    assert_eq!(
        server.reply(b"ma m2\r\n"),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(server.reply(b"ma m2 C999 v\r\n"), "EX\r\n");
    assert_eq!(server.reply(b"ma m3 C1 v\r\n"), "NF\r\n");
    assert_eq!(server.reply(b"ma m3 N0 C1 v\r\n"), "VA 1\r\n0\r\n");
    assert_eq!(server.reply(b"ms m4 2 T100 c\r\n10\r\n"), "HD c3\r\n");
    assert_eq!(server.reply(b"ma m4 C3 c v\r\n"), "VA 2 c4\r\n11\r\n");
    assert_eq!(server.reply(b"ma m4 T0 v t\r\n"), "VA 2 t-1\r\n12\r\n");
    assert_eq!(
        server.reply(b"ma m4 E900 c\r\nmg m4 c\r\n"),
        "HD c900\r\nHD c900\r\n"
    );
}

#[test]
fn ma_wraps_on_increment_and_stops_at_zero_on_decrement() {
    let server = Server::new();
    server.reply(b"ms w 20\r\n18446744073709551615\r\n");
    assert_eq!(server.reply(b"ma w v\r\n"), "VA 1\r\n0\r\n");
    server.reply(b"ms d 2\r\n10\r\n");
    assert_eq!(server.reply(b"ma d MD D1 v\r\n"), "VA 1\r\n9\r\n");
    // memcached pads a shrinking number with spaces in place.
    assert_eq!(server.reply(b"mg d v\r\n"), "VA 2\r\n9 \r\n");
    assert_eq!(server.reply(b"ma d D100 v\r\n"), "VA 3\r\n109\r\n");
}

#[test]
fn me_prints_the_item_metadata() {
    let server = Server::new();
    assert_eq!(server.reply(b"me nokey\r\n"), "EN\r\n");
    server.reply(b"ms ex 3 T100 c\r\nabc\r\n");
    server.clock.advance_s(2);
    let reply = server.reply(b"me ex\r\n");
    assert!(
        reply.starts_with("ME ex exp=-98 la=2 cas=1 fetch=no cls="),
        "{reply:?}"
    );
    assert!(
        reply.contains(" size=") && reply.ends_with("\r\n"),
        "{reply:?}"
    );
    // me itself does not mark the item fetched; mg does.
    assert!(server.reply(b"me ex\r\n").contains(" fetch=no "));
    server.reply(b"mg ex\r\n");
    let reply = server.reply(b"me ex\r\n");
    assert!(reply.starts_with("ME ex exp=-98 la="), "{reply:?}");
    assert!(reply.contains(" cas=1 fetch=yes cls="), "{reply:?}");
    server.reply(b"ms Zm9v 1\r\nx\r\n");
    let reply = server.reply(b"me Zm9v b\r\n");
    assert_eq!(reply, "EN\r\n");
    server.reply(b"ms Zm9v 1 b\r\nx\r\n");
    let reply = server.reply(b"me Zm9v b\r\n");
    assert!(reply.starts_with("ME Zm9v exp=-1 la=0 cas="), "{reply:?}");
    assert_eq!(
        server.reply(b"me\r\n"),
        "CLIENT_ERROR bad command line format\r\n"
    );
}

#[test]
fn me_does_not_take_the_recache_token_of_a_stale_item() {
    let server = Server::new();
    server.reply(b"ms sw 3\r\nabc\r\nmd sw I\r\n");
    server.reply(b"me sw\r\n");
    assert_eq!(server.reply(b"mg sw\r\n"), "HD X W\r\n");
}

#[test]
fn line_without_newline_past_2048_bytes_closes() {
    let server = Server::new();
    let mut out = Vec::new();
    let mut session = Session {
        engine: &server.engine,
        settings: &server.settings,
        stats: &server.stats,
        out: &mut out,
        resume_keys: 0,
        out_high_water_bytes: usize::MAX,
        client_fd: -1,
        upstream_reply: None,
    };
    let input = vec![b'k'; 3000];
    let mut line = b"mg ".to_vec();
    line.extend_from_slice(&input);
    assert_eq!(handle(&mut session, &line), Step::Close);
}
