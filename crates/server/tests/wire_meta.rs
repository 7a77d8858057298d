//! The meta protocol (`mg ms md ma mn me`) over a socket, fogcached against Debian's
//! memcached 1.6.18: every flag each command has in memcached 1.6.18's protocol.txt,
//! quiet mode with pipelining, opaques, base64 keys, stale items and recache tokens,
//! malformed lines. Each request goes to both servers and the replies must be equal byte
//! for byte (CAS and seconds through the normaliser of `support/wire_pair.rs`, which
//! checks their form and their pattern), except for the differences in [`DIFFERENCES`],
//! where the test asserts memcached's reply and fogcached's documented reply exactly.
//! `wire_meta_flags.rs` holds memcached's reply bytes for every flag, family by family.

#[path = "support/wire_pair.rs"]
mod wire_pair;

use std::time::Duration;

use testkit::escape;
use wire_pair::{flag_value, matches_documented, pause, Pair, FOGCACHED, MEMCACHED};

/// A request that fogcached answers differently from memcached 1.6.18, on purpose or as a
/// known bug (`reason` starts with "BUG:").
struct Difference {
    /// Sent to both servers first; the replies are not compared.
    setup: &'static [u8],
    /// Waited between `setup` and `request`.
    pause_ms: u64,
    request: &'static [u8],
    /// What memcached 1.6.18 answers (checked, so the table stays true).
    memcached: &'static [u8],
    /// What fogcached answers (checked exactly).
    fogcached: &'static [u8],
    reason: &'static str,
}

/// Every deliberate difference and known bug. The documented replies are compared after
/// normalisation (CAS values by pattern, seconds within one), but `me`'s `size=` exactly.
const DIFFERENCES: &[Difference] = &[
    Difference {
        setup: b"",
        pause_ms: 0,
        request: b"ms e1 1 E500 c\r\nx\r\nmg e1 c\r\n",
        memcached: b"CLIENT_ERROR invalid flag\r\nEN\r\n",
        fogcached: b"HD c500\r\nHD c500\r\n",
        reason: "`E<cas>` (the client picks the new item's CAS) is a flag of later memcached \
                 releases; fogcached's engine models it and accepts it on every command \
                 (protocol/src/meta.rs). memcached 1.6.18 refuses it.",
    },
    Difference {
        setup: b"ms e2 1\r\nx\r\n",
        pause_ms: 0,
        request: b"md e2 I E77\r\nmg e2 c\r\n",
        memcached: b"CLIENT_ERROR invalid or duplicate flag\r\nHD c1\r\n",
        fogcached: b"HD\r\nHD c77 X W\r\n",
        reason: "`E<cas>` on `md I`: later memcached releases; see the `ms E` row.",
    },
    Difference {
        setup: b"ms e3 1\r\n5\r\n",
        pause_ms: 0,
        request: b"ma e3 E900 c v\r\n",
        memcached: b"CLIENT_ERROR invalid or duplicate flag\r\n",
        fogcached: b"VA 1 c900\r\n6\r\n",
        reason: "`E<cas>` on `ma`: later memcached releases; see the `ms E` row.",
    },
    Difference {
        setup: b"",
        pause_ms: 0,
        request: b"mg e4 E5 v\r\n",
        memcached: b"CLIENT_ERROR invalid flag\r\n",
        fogcached: b"EN\r\n",
        reason: "`E` is accepted (and means nothing) on `mg`, as later memcached releases do.",
    },
    Difference {
        setup: b"ms x1 3 F9 T0\r\nabc\r\n",
        pause_ms: 0,
        request: b"md x1 x\r\nmg x1 v f\r\n",
        memcached: b"CLIENT_ERROR invalid or duplicate flag\r\nVA 3 f9\r\nabc\r\n",
        fogcached: b"HD\r\nVA 0 f0\r\n\r\n",
        reason: "`md x` (drop the value and client flags, keep the item) is a flag of later \
                 memcached releases that fogcached models; memcached 1.6.18 refuses it.",
    },
    Difference {
        setup: b"",
        pause_ms: 0,
        request: b"ms x2 1 x\r\na\r\n",
        memcached: b"CLIENT_ERROR invalid flag\r\n",
        fogcached: b"HD\r\n",
        reason: "`x` is accepted (and means nothing) outside `md`, as later memcached \
                 releases parse every flag for every command.",
    },
    Difference {
        setup: b"",
        pause_ms: 0,
        request: b"ms av 2 MA N30\r\nab\r\nmg av v t\r\n",
        memcached: b"NS\r\nEN\r\n",
        fogcached: b"HD\r\nVA 2 t30\r\nab\r\n",
        reason: "`ms` in append/prepend mode with `N<ttl>` creates the missing item (the \
                 autovivify of later memcached releases, which the engine models); \
                 memcached 1.6.18 ignores `N` on `ms` and answers NS.",
    },
    Difference {
        setup: b"",
        pause_ms: 0,
        request: b"ms f1 1 F4294967296\r\nx\r\nmg f1 f\r\n",
        memcached: b"HD\r\nHD f0\r\n",
        fogcached: b"CLIENT_ERROR bad command line format\r\nEN\r\n",
        reason: "client flags above 2^32-1 are refused (protocol/src/common.rs parse_u32); \
                 memcached 1.6.18 silently stores them modulo 2^32.",
    },
    Difference {
        setup: b"",
        pause_ms: 0,
        request: b"ms big4g 4294967299\r\nbar\r\nmg big4g v\r\n",
        memcached: b"HD\r\nVA 3\r\nbar\r\n",
        fogcached: b"CLIENT_ERROR bad command line format\r\nERROR\r\nEN\r\n",
        reason: "an `ms` length that does not fit a 32-bit int is refused; memcached 1.6.18's \
                 safe_strtol stores the 64-bit number into an int32_t, so 4294967299 \
                 silently becomes 3. Refusing is kept: the client meant 4 GiB, not 3 bytes.",
    },
    Difference {
        setup: b"ms t32 1\r\nx\r\n",
        pause_ms: 0,
        request: b"mg t32 T4294967326 t v\r\n",
        memcached: b"VA 1 t30\r\nx\r\n",
        fogcached: b"CLIENT_ERROR bad token in command line format\r\n",
        reason: "likewise `N`, `T` and `R` tokens beyond 32 bits are refused; memcached \
                 1.6.18 truncates them modulo 2^32 (4294967326 becomes 30).",
    },
    Difference {
        setup: b"ms a 1\r\nx\r\n",
        pause_ms: 0,
        request: b"mg a\x00b v\r\n",
        memcached: b"HD\r\n",
        fogcached: b"CLIENT_ERROR bad command line format\r\n",
        reason: "a NUL byte in a command line: memcached's C string handling ends the line \
                 there (`mg a<NUL>b v` is read as `mg a`, without the `v`); fogcached \
                 refuses the key (protocol/src/common.rs is_valid_key).",
    },
    Difference {
        setup: b"",
        pause_ms: 0,
        request: b"ms sz 3\r\nabc\r\nme sz\r\n",
        memcached: b"HD\r\nME sz exp=-1 la=0 cas=1 fetch=no cls=1 size=64\r\n",
        fogcached: b"HD\r\nME sz exp=-1 la=0 cas=1 fetch=no cls=1 size=61\r\n",
        reason: "`me`'s size= is the item's footprint in the server's own item layout \
                 (fogcached's item header is not memcached's).",
    },
    Difference {
        setup: b"ms la 1\r\nx\r\n",
        pause_ms: 2100,
        request: b"mg la l\r\nmg la l\r\n",
        memcached: b"HD l2\r\nHD l2\r\n",
        fogcached: b"HD l2\r\nHD l0\r\n",
        reason: "`l` is the documented \"time since item was last accessed\": fogcached \
                 counts every hit as an access. memcached 1.6.18's segmented LRU refreshes \
                 the access time only on an item's second fetch (when it becomes ACTIVE), \
                 so its first fetch does not reset `l`.",
    },
];

#[test]
fn documented_differences_are_exactly_as_written() -> anyhow::Result<()> {
    let mut failures = Vec::new();
    // Each row on fresh servers: CAS values and access times start from a clean slate.
    for (row, difference) in DIFFERENCES.iter().enumerate() {
        assert!(!difference.reason.is_empty(), "row {row} has no reason");
        let mut pair = Pair::default_servers()?;
        if !difference.setup.is_empty() {
            pair.replies([difference.setup, difference.setup])?;
        }
        pause(Duration::from_millis(difference.pause_ms));
        let [memcached, fogcached] = pair.replies([difference.request, difference.request])?;
        for (server, actual, documented) in [
            ("memcached", &memcached, difference.memcached),
            ("fogcached", &fogcached, difference.fogcached),
        ] {
            if !matches_documented(actual, documented)? {
                failures.push(format!(
                    "row {row} ({:?}): {server} answered {:?}, the table says {:?}\n    \
                     reason: {}",
                    escape(difference.request),
                    escape(actual),
                    escape(documented),
                    difference.reason
                ));
            }
        }
        pair.stop()?;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[test]
fn mg_returns_each_flag_on_a_hit_in_the_order_sent() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.same(b"ms foo 5 T100 F77 c\r\nhello\r\n")?;
    pair.all_same(&[
        b"mg foo\r\n",
        b"mg foo v\r\n",
        b"mg foo s\r\n",
        b"mg foo f\r\n",
        b"mg foo t\r\n",
        b"mg foo c\r\n",
        b"mg foo k\r\n",
        b"mg foo Oabc\r\n",
        b"mg foo q\r\n",
        b"mg foo q v\r\n",
        b"mg foo h\r\n",
        b"mg foo l\r\n",
        b"mg foo u\r\n",
        b"mg foo P/route/ Lhint v\r\n",
        b"mg foo v s f t c k O1 h l\r\n",
        b"mg foo O1 l h k c t f s v\r\n",
        b"mg foo k v k\r\n",
    ])?;
    // A client flags value of 0 and one of 2^32 - 1 are printed as stored.
    pair.all_same(&[
        b"ms zero 1 F0\r\nz\r\n",
        b"mg zero f v\r\n",
        b"ms maxf 1 F4294967295 T0\r\nz\r\n",
        b"mg maxf f s t\r\n",
    ])?;
    pair.stop()
}

#[test]
fn mg_miss_echoes_only_opaque_and_key() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"mg nokey\r\n",
        b"mg nokey v s f t c h l u\r\n",
        b"mg nokey k O99 v\r\n",
        b"mg nokey O99 k\r\n",
        b"mg nokey q\r\n",
        b"mg nokey q k O1 v\r\n",
        b"mg bm9rZXk= b k v\r\n",
        b"mg nokey T30 v t\r\n",
        b"mg nokey R30 v t\r\n",
    ])?;
    pair.stop()
}

#[test]
fn hit_before_flips_after_a_fetch_and_u_does_not_count() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"ms h1 1\r\nx\r\n",
        b"mg h1 h l\r\n",
        b"mg h1 h\r\n",
        b"ms h2 1\r\nx\r\n",
        // `u`: no bump, the item is not marked fetched.
        b"mg h2 u h\r\n",
        b"mg h2 u h v\r\n",
        b"mg h2 h\r\n",
        b"mg h2 h\r\n",
        // A new store resets "fetched".
        b"ms h2 1\r\ny\r\n",
        b"mg h2 h\r\n",
        // `me` does not mark the item fetched either.
        b"ms h3 1\r\nx\r\n",
        b"me h3\r\n",
        b"mg h3 h\r\n",
        b"me h3\r\n",
    ])?;
    let fetched = pair.same(b"mg h3 h\r\n")?;
    assert_eq!(fetched, b"HD h1\r\n");
    pair.stop()
}

#[test]
fn ttl_counts_down_touch_updates_it_and_cas_is_kept() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"ms ttl 3 T100 c\r\nabc\r\n",
        b"mg ttl t c\r\n",
        b"me ttl\r\n",
        b"ms forever 3 T0\r\nabc\r\n",
        b"mg forever t v\r\n",
        b"me forever\r\n",
    ])?;
    let waited = Duration::from_millis(2200);
    pause(waited);
    let reply = pair.same(b"mg ttl t c v\r\n")?;
    let ttl_s = flag_value(&reply, b't').expect("t in the reply");
    assert!(
        (96..=98).contains(&ttl_s),
        "2.2 s after T100 the TTL is 97 or 98 (one tick either way), got {ttl_s}: {:?}",
        escape(&reply)
    );
    pair.all_same(&[
        // Touch with T: the new TTL, the same CAS (touch does not change the item).
        b"mg ttl T30 t c\r\n",
        b"mg ttl t c\r\n",
        // T0: never expires; a negative T expires the item at once.
        b"mg ttl T0 t\r\n",
        b"mg ttl t\r\n",
        b"mg ttl T-1 v\r\n",
        b"mg ttl v\r\n",
        b"mg forever t\r\n",
    ])?;
    // mg with T on a hit counts as a touch; the value and flags are untouched.
    pair.all_same(&[b"ms tv 3 F5 T100\r\nabc\r\n", b"mg tv T50 v f t s\r\n"])?;
    pair.stop()
}

#[test]
fn quiet_mode_pipelines_and_mn_marks_the_end() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.same(b"ms hit 3\r\nabc\r\n")?;
    // One write with everything: only misses, failures and hits carry a reply.
    let reply = pair.same(
        b"mg miss1 q v k O1\r\n\
          mg hit q v k O2\r\n\
          mg miss2 q k O3\r\n\
          mg hit q k O4\r\n\
          ms new 3 q O5\r\nxyz\r\n\
          ms new 3 q O6 ME\r\nxyz\r\n\
          ms nope 3 q O7 MR\r\nxyz\r\n\
          ms new 3 q O8 C1\r\nxyz\r\n\
          md new q O9\r\n\
          md new q O10\r\n\
          ma cnt q O11\r\n\
          ma cnt q O12 N0 J5\r\n\
          ma cnt q O13\r\n\
          ma cnt q O14 v\r\n\
          mg cnt q v O15\r\n\
          mg miss3 q v O16 Z\r\n\
          mn\r\n",
    )?;
    assert!(reply.ends_with(b"MN\r\n"), "{:?}", escape(&reply));
    // Many quiet misses in a row and a final mn: nothing but MN.
    let mut burst = Vec::new();
    for i in 0..200 {
        burst.extend_from_slice(format!("mg quiet{i} q v O{i}\r\n").as_bytes());
    }
    burst.extend_from_slice(b"mn\r\n");
    assert_eq!(pair.same(&burst)?, b"MN\r\n");
    pair.stop()
}

#[test]
fn opaque_is_echoed_by_every_command_and_limited_to_32_bytes() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"ms op 2 O1\r\n12\r\n",
        b"ms op 2 Oabc-DEF_123 k c\r\n12\r\n",
        b"mg op Oz\r\n",
        b"mg op v Oz\r\n",
        b"ma op Oz\r\n",
        b"md op Oq k\r\n",
        b"md op Oq k\r\n",
        b"ma op Oq\r\n",
        b"ms op 2\r\n12\r\n",
        b"mg op O\r\n",
        // 32 bytes with the O: the longest accepted; 33: refused.
        b"mg op O1234567890123456789012345678901\r\n",
        b"mg op O12345678901234567890123456789012\r\n",
        b"ms op 2 O12345678901234567890123456789012\r\nab\r\nmg op v\r\n",
        b"md op O12345678901234567890123456789012\r\n",
        b"ma op O12345678901234567890123456789012\r\n",
    ])?;
    pair.stop()
}

#[test]
fn base64_keys_are_decoded_and_echoed_encoded() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"ms Zm9v 3 b k c O1\r\nbar\r\n",
        b"mg Zm9v b k v\r\n",
        b"mg Zm9v b v s k O2\r\n",
        // A binary key may hold bytes a text key cannot (NUL, space, newline).
        b"ms AAEgCg== 2 b k\r\n42\r\n",
        b"mg AAEgCg== b k v\r\n",
        b"me AAEgCg== b\r\n",
        b"ma AAEgCg== b\r\n",
        b"md AAEgCg== b k q\r\n",
        b"mg AAEgCg== b k v\r\n",
        b"ma Y250 b N0 J7 v k\r\n",
        b"ma Y250 b v k\r\n",
        b"mg Y250 b v\r\n",
        b"md Y250 b k\r\n",
        b"md Y250 b k\r\n",
        // Sloppy but accepted encodings come back canonical.
        b"mg Zm9vYmF= b k\r\n",
        // Bad base64: each command's error.
        b"mg Zm9v= b k\r\n",
        b"mg Zm9 b\r\n",
        b"mg !!!! b\r\n",
        b"mg a b\r\n",
        b"ms Zm9 3 b\r\nbar\r\n",
        b"md Zm9 b\r\n",
        b"ma Zm9 b\r\n",
        b"me Zm9 b\r\n",
        b"me Zm9v x\r\n",
    ])?;
    pair.stop()
}

#[test]
fn ms_flags_modes_and_cas() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"ms m 3 T100 F5 c k O1\r\nabc\r\n",
        b"mg m v f t c\r\n",
        // Flags that mean nothing to ms are accepted and ignored.
        b"ms m 3 h l t f v u s\r\nabc\r\n",
        b"ms m 3 P1 L1\r\nabc\r\n",
        // Modes: E (add), A (append), P (prepend), R (replace), S (set).
        b"ms add 1 ME\r\na\r\n",
        b"ms add 1 ME c\r\nb\r\n",
        b"mg add v\r\n",
        b"ms add 1 MA\r\nz\r\n",
        b"ms add 1 MP F9 T50\r\ny\r\n",
        b"mg add v f t\r\n",
        b"ms none 1 MA\r\nz\r\n",
        b"ms none 1 MP\r\nz\r\n",
        b"ms none 1 MR\r\nz\r\n",
        b"mg none v\r\n",
        b"ms add 2 MR F3 c\r\nrr\r\n",
        b"mg add v f c\r\n",
        b"ms add 2 MS\r\nss\r\n",
        b"mg add v\r\n",
        // Invalid modes: lowercase, unknown, too long, empty.
        b"ms add 1 Ms\r\nx\r\n",
        b"ms add 1 Me\r\nx\r\n",
        b"ms add 1 MX\r\nx\r\n",
        b"ms add 1 MSS\r\nx\r\n",
        b"ms add 1 M\r\nx\r\n",
        b"mg add v\r\n",
        // T and F: negative T stores an already expired item; F is 32-bit.
        b"ms neg 1 T-1\r\nx\r\n",
        b"mg neg v\r\n",
        b"ms f 1 F-1\r\nx\r\n",
        b"ms f 1 Fx\r\nx\r\n",
        b"ms f 1 Tx\r\nx\r\n",
        b"mg f v\r\n",
        // N means nothing to a plain set (memcached 1.6.18 ignores it on every ms).
        b"ms nset 1 N30\r\nx\r\n",
        b"mg nset t v\r\n",
        // An empty value.
        b"ms empty 0\r\n\r\n",
        b"mg empty v s\r\n",
    ])?;

    // CAS: each server with its own current CAS value.
    pair.same(b"ms cas 1 c\r\nx\r\n")?;
    let cas = pair.cas_of("cas")?;
    let matching = cas.map(|c| format!("ms cas 1 C{c} c\r\ny\r\n"));
    pair.same_each([
        matching[MEMCACHED].as_bytes(),
        matching[FOGCACHED].as_bytes(),
    ])?;
    // The same (now stale) CAS again: EX, with c0.
    pair.same_each([
        matching[MEMCACHED].as_bytes(),
        matching[FOGCACHED].as_bytes(),
    ])?;
    pair.all_same(&[
        b"mg cas v c\r\n",
        b"ms nocas 1 C1 c\r\nx\r\n",
        b"ms nocas 1 C1 MR\r\nx\r\n",
        // Add ignores C; append and prepend honour it.
        b"ms addcas 1 ME C99999 c\r\nx\r\n",
        b"ms addcas 1 MA C99999\r\ny\r\n",
        b"mg addcas v\r\n",
    ])?;
    let cas = pair.cas_of("addcas")?;
    let append = cas.map(|c| format!("ms addcas 1 MA C{c} c\r\nz\r\n"));
    pair.same_each([append[MEMCACHED].as_bytes(), append[FOGCACHED].as_bytes()])?;
    pair.same(b"mg addcas v c\r\n")?;
    pair.stop()
}

#[test]
fn ms_value_is_binary_safe_and_must_end_with_crlf() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    // Values holding line ends, reply terminators and any byte come back as stored.
    for (set, get, value_reply) in [
        (
            &b"ms bin 9\r\na\r\nb\r\n\r\nc\r\n"[..],
            &b"mg bin v s\r\n"[..],
            &b"VA 9 s9\r\na\r\nb\r\n\r\nc\r\n"[..],
        ),
        (
            b"ms bin2 7\r\n\r\nEND\r\n\r\n",
            b"mg bin2 v\r\n",
            b"VA 7\r\n\r\nEND\r\n\r\n",
        ),
        (
            b"ms nul 3\r\n\x00\xff\x80\r\n",
            b"mg nul v\r\n",
            b"VA 3\r\n\x00\xff\x80\r\n",
        ),
    ] {
        assert_eq!(pair.same(set)?, b"HD\r\n");
        assert_eq!(escape(&pair.same(get)?), escape(value_reply));
    }
    pair.all_same(&[
        // A block shorter than its length: memcached reads length + 2 bytes and finds
        // no "\r\n" at their end; what is left is read as the next command line.
        b"ms short 2\r\nabc\r\n",
        b"ms short 3\r\nabcde",
        b"mg short v\r\n",
    ])?;
    // A value over the item size limit: refused, its payload swallowed, the old value gone.
    pair.same(b"ms big 3\r\nold\r\n")?;
    let mut too_large = b"ms big 2000000 T0\r\n".to_vec();
    too_large.resize(too_large.len() + 2_000_000, b'x');
    too_large.extend_from_slice(b"\r\n");
    pair.same(&too_large)?;
    pair.same(b"mg big v\r\n")?;
    pair.stop()
}

#[test]
fn vivify_on_miss_hands_out_one_win_then_z() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"mg viv N30 v t s f c\r\n",
        b"mg viv N30 v t\r\n",
        b"mg viv v\r\n",
        b"mg viv k Oa\r\n",
        // N on a hit does nothing.
        b"ms hit 1 T0\r\nx\r\n",
        b"mg hit N30 v t\r\n",
        // N and T: the one sent last sets the new item's TTL.
        b"mg nt1 N100 T50 v t\r\n",
        b"mg nt2 T50 N100 v t\r\n",
        b"mg nt3 N100 T50 t\r\n",
        b"mg nt4 T50 N100 t\r\n",
        // On a hit T applies and N does not, whatever the order.
        b"mg hit T30 N100 t\r\n",
        b"mg hit N100 T40 t\r\n",
        // Quiet mode does not hide the win.
        b"mg vq N30 q k\r\n",
        b"mg vq N30 q k\r\n",
        b"mg bad N v\r\n",
        b"mg bad Nx v\r\n",
    ])?;
    // The winner recaches; the placeholder's token is gone with it.
    let cas = pair.cas_of("viv")?;
    let recache = cas.map(|c| format!("ms viv 3 T30 C{c}\r\nnew\r\n"));
    pair.same_each([recache[MEMCACHED].as_bytes(), recache[FOGCACHED].as_bytes()])?;
    pair.all_same(&[b"mg viv v N30 t\r\n", b"mg viv v N30\r\n"])?;
    pair.stop()
}

#[test]
fn recache_flag_wins_once_when_the_ttl_is_low() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"ms rc 1 T100\r\nx\r\n",
        b"mg rc R30 t\r\n",
        b"mg rc R200 t v\r\n",
        b"mg rc R200 t v\r\n",
        b"mg rc t\r\n",
        // An item that never expires is never due.
        b"ms forever 1 T0\r\nx\r\n",
        b"mg forever R200 t\r\n",
        // `u` does not stop the win; the token is still taken once.
        b"ms rcu 1 T10\r\nx\r\n",
        b"mg rcu R30 u\r\n",
        b"mg rcu R30\r\n",
        // R and T in the order that both servers agree on: T first.
        b"ms rt 1 T100\r\nx\r\n",
        b"mg rt T10 R30 t\r\n",
        b"ms rt2 1 T10\r\nx\r\n",
        b"mg rt2 T100 R30 t\r\n",
        // A new store resets the token.
        b"ms rc 1 T10\r\ny\r\n",
        b"mg rc R30 v\r\n",
        b"mg rc R30 v\r\n",
        b"mg rc Rx\r\n",
    ])?;
    pair.stop()
}

#[test]
fn stale_items_from_md_and_ms_invalidate() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"ms st 1 T100 c\r\nx\r\n",
        b"mg st c\r\n",
        // md I: marked stale, CAS bumped, T retimes it; the first reader wins, then Z.
        b"md st I T30\r\n",
        b"mg st v t c\r\n",
        b"mg st v t c\r\n",
        b"mg st\r\n",
        // Invalidating again resets the token.
        b"md st I q\r\n",
        b"mg st c\r\n",
        b"mg st c\r\n",
        // T without I does not retime; md I of a missing item is NF.
        b"ms plain 1 T100\r\nx\r\n",
        b"md nothing I\r\n",
        b"md nothing I q\r\n",
        b"md nothing T30\r\n",
        // A new store replaces the stale item with a fresh one.
        b"ms st 1 T0\r\ny\r\n",
        b"mg st v t\r\n",
    ])?;
    // ms I with an older CAS: stored, but stale (X and a win for the next reader).
    pair.all_same(&[b"ms old 1 c\r\na\r\n", b"ms old 1 c\r\nb\r\n"])?;
    pair.all_same(&[
        b"ms old 1 C1 I c\r\nz\r\n",
        b"mg old v c\r\n",
        b"mg old v\r\n",
        // A CAS newer than the item's is still a conflict, I or not.
        b"ms old 1 C999999 I\r\nw\r\n",
        b"mg old v\r\n",
    ])?;
    // I without C, and I with the matching CAS: a plain store.
    pair.same(b"ms fresh 1 I\r\nx\r\n")?;
    let cas = pair.cas_of("fresh")?;
    let matching = cas.map(|c| format!("ms fresh 1 C{c} I c\r\ny\r\nmg fresh v\r\n"));
    pair.same_each([
        matching[MEMCACHED].as_bytes(),
        matching[FOGCACHED].as_bytes(),
    ])?;
    pair.stop()
}

#[test]
fn md_flags() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"md nokey\r\n",
        b"md nokey q\r\n",
        b"md nokey k O1 q\r\n",
        b"ms d1 1\r\nx\r\n",
        b"md d1 k O2\r\n",
        b"mg d1 v\r\n",
        b"ms d2 1\r\nx\r\n",
        b"md d2 q\r\nmn\r\n",
        b"mg d2 v\r\n",
        b"ms d3 1\r\nx\r\n",
        b"md d3 C99999\r\n",
        b"md d3 C99999 q\r\n",
        b"mg d3 v\r\n",
        b"md d3 Cx\r\n",
        b"md d3 Tx\r\n",
        b"md d3 P1 L1\r\n",
        b"ms ZDQ= 1 b\r\nx\r\n",
        b"md ZDQ= b k\r\n",
        b"md ZDQ= b k\r\n",
        // Flags of other commands are accepted and ignored.
        b"ms d5 1\r\nx\r\n",
        b"md d5 v s f t c h l u N30 R30 MI J1 D1 F1\r\n",
    ])?;
    pair.same(b"ms d6 1\r\nx\r\n")?;
    let cas = pair.cas_of("d6")?;
    let matching = cas.map(|c| format!("md d6 C{c} k\r\nmg d6\r\n"));
    pair.same_each([
        matching[MEMCACHED].as_bytes(),
        matching[FOGCACHED].as_bytes(),
    ])?;
    pair.stop()
}

#[test]
fn ma_flags_modes_and_limits() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"ma n\r\n",
        b"ma n q\r\n",
        b"ma n k O1 v t c\r\n",
        b"ma n N0\r\n",
        b"ma n v t c\r\n",
        b"ma n q\r\nmn\r\n",
        b"ma n v\r\n",
        b"ma n MI D10 v\r\n",
        b"ma n M+ D10 v\r\n",
        b"ma n MD D3 v\r\n",
        b"ma n M- D3 v\r\n",
        b"ma n MD D1000 v\r\n",
        b"mg n v\r\n",
        // Vivify with an initial value: created, not incremented; J without N is unused.
        b"ma j1 N0 J41 v\r\n",
        b"ma j1 N0 J41 v\r\n",
        b"ma j2 J41 v\r\n",
        b"ma j3 N0 J99 MD v\r\n",
        b"ma j4 N100 t v\r\n",
        b"ma j5 N100 T50 t v\r\n",
        b"ma j6 T50 N100 t v\r\n",
        // T on a hit retimes the item, t reports it.
        b"ma j4 T30 t v\r\n",
        b"ma j4 T0 t v\r\n",
        // Wrap on increment, floor at zero on decrement, shrinking numbers padded.
        b"ms w 20\r\n18446744073709551615\r\n",
        b"ma w v\r\n",
        b"ms d 3\r\n100\r\n",
        b"ma d MD D1 v\r\n",
        b"mg d v\r\n",
        b"ma d D18446744073709551615 v\r\n",
        // Errors.
        b"ms txt 3\r\nabc\r\n",
        b"ma txt\r\n",
        b"ma txt N0\r\n",
        b"ma n Mx\r\n",
        b"ma n MII\r\n",
        b"ma n D-1\r\n",
        b"ma n Dabc\r\n",
        b"ma n D18446744073709551616\r\n",
        b"ma n J-4 N0\r\n",
        b"ma n N\r\n",
        b"ma n Z\r\n",
        b"ma n v v\r\n",
        b"ma n 2\r\n",
        b"ma n C99999 v\r\n",
        b"ma nothere C1 v\r\n",
    ])?;
    pair.same(b"ma c N0 J5\r\n")?;
    let cas = pair.cas_of("c")?;
    let matching = cas.map(|c| format!("ma c C{c} c v\r\nma c c v\r\n"));
    pair.same_each([
        matching[MEMCACHED].as_bytes(),
        matching[FOGCACHED].as_bytes(),
    ])?;
    pair.stop()
}

#[test]
fn mn_and_me() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.all_same(&[
        b"mn\r\n",
        b"mn ignored tokens\r\n",
        b"mn\n",
        b"me nokey\r\n",
        b"ms dbg 3 T100 c\r\nabc\r\n",
        b"me dbg\r\n",
        b"mg dbg v\r\n",
        b"me dbg\r\n",
        b"ms bWVi 3 b\r\nxyz\r\n",
        b"me bWVi b\r\n",
        b"me\r\n",
        b"me dbg extra tokens\r\n",
        b"me bWVi b extra\r\n",
    ])?;
    pair.stop()
}

#[test]
fn malformed_lines_get_memcacheds_error_strings() -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    pair.same(b"ms foo 3\r\nbar\r\n")?;
    let mut long_key = b"mg ".to_vec();
    long_key.extend_from_slice(&[b'k'; 251]);
    long_key.extend_from_slice(b" v\r\n");
    let mut longest_key = b"mg ".to_vec();
    longest_key.extend_from_slice(&[b'k'; 250]);
    longest_key.extend_from_slice(b" v\r\n");
    let mut ms_long_key = b"ms ".to_vec();
    ms_long_key.extend_from_slice(&[b'k'; 251]);
    ms_long_key.extend_from_slice(b" 3\r\nbar\r\n");
    let requests: Vec<&[u8]> = vec![
        // Unknown commands and missing parts.
        b"mx foo\r\n",
        b"mgx foo\r\n",
        b"MG foo v\r\n",
        b"mg\r\n",
        b"mg \r\n",
        b"md\r\n",
        b"ma\r\n",
        b"ms\r\n",
        b"ms foo\r\n",
        b"ms foo bar\r\n",
        b"ms foo -1\r\n",
        b"ms foo S3 T0\r\nbar\r\n",
        &long_key,
        &longest_key,
        &ms_long_key,
        // Unknown and duplicate flags, bad tokens: mg's messages.
        b"mg foo Z\r\n",
        b"mg foo v v\r\n",
        b"mg foo \xff\r\n",
        b"mg foo Tabc\r\n",
        b"mg foo T\r\n",
        b"mg foo N\r\n",
        b"mg foo R9223372036854775808\r\n",
        b"mg foo Cx\r\n",
        b"mg foo D\r\n",
        b"mg foo J-1\r\n",
        b"mg foo MSS\r\n",
        b"mg foo Fx\r\n",
        b"mg foo Tx MSS\r\n",
        b"mg foo Tx Fx\r\n",
        b"mg foo Tx Z\r\n",
        // ms: errors after the length swallow the data block.
        b"ms foo 3 Z\r\nbar\r\n",
        b"ms foo 3 v v\r\nbar\r\n",
        b"ms foo 3 MX\r\nbar\r\n",
        b"ms foo 3 MSS\r\nbar\r\n",
        b"ms foo 3 Fx\r\nbar\r\n",
        b"ms foo 3 Cx\r\nbar\r\n",
        b"ms foo 3 Tx\r\nbar\r\n",
        // The length is positional in 1.6.18: an `S` flag is unknown.
        b"ms foo 3 S3\r\nbar\r\n",
        // md and ma: one message for every flag problem.
        b"md foo Z\r\n",
        b"md foo q q\r\n",
        b"md foo Tx\r\n",
        b"ma foo Z\r\n",
        b"ma foo Dx\r\n",
        // Too many flags.
        b"mg foo v k c f s T100 t h l u O1 q P1 L1 R5 N1 F1\r\n",
        b"mg foo v k c f s t h l u O1 q P1 L1 T100 R5 N1 F1 C1\r\n",
        b"md foo v k c f s t h l u O1 q P1 L1 T100 R5 N1 F1 C1\r\n",
        b"ma foo v k c f s t h l u O1 q P1 L1 T100 R5 N1 F1 C1\r\n",
        b"ms foo 1 k c f s t h l u O1 q P1 L1 T100 R5 N1 F1\r\nx\r\n",
        b"ms foo 1 k c f s t h l u O1 q P1 L1 T100 R5 N1 F1 C1\r\nx\r\n",
        // Whitespace: runs of spaces, bare LF, a tab inside a key.
        b"mg  foo   v  \r\n",
        b"mg foo v\n",
        b"mg fo\to v\r\n",
        b"\r\n",
        b"mg foo v\r\n",
    ];
    for request in requests {
        pair.same(request)?;
    }
    pair.stop()
}

#[test]
fn a_line_without_newline_past_2048_bytes_closes_both() -> anyhow::Result<()> {
    let pair = Pair::default_servers()?;
    let mut clients = pair.connect_again()?;
    let mut line = b"mg ".to_vec();
    line.resize(3000, b'k');
    for (client, name) in clients.iter_mut().zip(["memcached", "fogcached"]) {
        client.send(&line)?;
        assert!(client.is_closed_by_peer(), "{name} kept the connection");
    }
    pair.stop()
}
