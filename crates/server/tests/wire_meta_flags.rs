//! Every flag of the meta protocol (`mg ms md ma mn me`, memcached 1.6.18's protocol.txt),
//! one test per flag family, each a table of exchanges whose expected replies are the
//! bytes memcached 1.6.18 answered (recorded from it, and checked against it again every
//! run): each step goes to Debian's memcached and to fogcached side by side, and both
//! replies must equal the table's, so a difference names the flag (the row) and the step.
//!
//! Replies are compared through the normaliser of `support/wire_pair.rs`: a CAS value is
//! compared by its pattern within the row (`c5 … c5 … c6` must be `cX … cX … cY`), a
//! number of seconds within one second, `me`'s `size=` as any positive number (the
//! servers' item layouts differ). `<cas:KEY>` in a request stands for that server's
//! current CAS of KEY (read with `me`, which changes nothing). The rows of one test share
//! a pair of servers, each row with its own keys.
//!
//! The flags fogcached deliberately answers otherwise (`E`, `x`, `ms … N`, numbers beyond
//! 32 bits, …) are `wire_meta.rs`'s `DIFFERENCES`, each with its reason, and README's
//! compatibility table.

#[path = "support/wire_pair.rs"]
mod wire_pair;

use testkit::escape;
use wire_pair::{pieces_match, render, Normaliser, Pair, SizeRule, FOGCACHED, MEMCACHED};

/// One flag's exchanges.
struct Row {
    /// The flag (or mode, or case) the row is about: a failure names it.
    flag: &'static str,
    /// (request, memcached 1.6.18's reply), in order.
    steps: &'static [(&'static [u8], &'static [u8])],
}

/// `request` with each `<cas:KEY>` replaced by `side`'s current CAS of KEY.
fn with_cas(pair: &mut Pair, request: &[u8], side: usize) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = request;
    while let Some(at) = rest.windows(5).position(|w| w == b"<cas:") {
        out.extend_from_slice(&rest[..at]);
        let after = &rest[at + 5..];
        let end = after
            .iter()
            .position(|&b| b == b'>')
            .ok_or_else(|| anyhow::anyhow!("unclosed <cas: in {:?}", escape(request)))?;
        let key = std::str::from_utf8(&after[..end])?;
        out.extend_from_slice(pair.cas_of(key)?[side].to_string().as_bytes());
        rest = &after[end + 1..];
    }
    out.extend_from_slice(rest);
    Ok(out)
}

/// Runs every row of a family on one pair of servers; fails listing each step whose
/// reply (memcached's or fogcached's) is not the table's.
fn run_family(family: &str, rows: &[Row]) -> anyhow::Result<()> {
    let mut pair = Pair::default_servers()?;
    let mut failures = Vec::new();
    for row in rows {
        // CAS labels are per row: the table's and each server's.
        let mut expected_labels = Normaliser::default();
        let mut labels = [Normaliser::default(), Normaliser::default()];
        for (step, &(request, expected)) in row.steps.iter().enumerate() {
            let requests = [
                with_cas(&mut pair, request, MEMCACHED)?,
                with_cas(&mut pair, request, FOGCACHED)?,
            ];
            let replies = pair.replies([&requests[MEMCACHED], &requests[FOGCACHED]])?;
            let expected_pieces = expected_labels.pieces(expected)?;
            let mut row_failed = false;
            for (side, name) in [(MEMCACHED, "memcached"), (FOGCACHED, "fogcached")] {
                let pieces = labels[side].pieces(&replies[side])?;
                if !pieces_match(&pieces, &expected_pieces, SizeRule::AnyPositive) {
                    row_failed = true;
                    failures.push(format!(
                        "{family}, flag {:?}, step {step} {:?}:\n    {name} answered {:?}\n    \
                         the table (memcached 1.6.18) says {:?}\n    normalised: {} vs {}",
                        row.flag,
                        escape(request),
                        escape(&replies[side]),
                        escape(expected),
                        render(&pieces),
                        render(&expected_pieces),
                    ));
                }
            }
            if row_failed {
                // The row's later steps depend on this one.
                break;
            }
        }
    }
    pair.stop()?;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// `mg`'s return flags: `v s f t c k O q h l u b`, their order, and `P`/`L`.
const MG_RETURN_FLAGS: &[Row] = &[
    Row {
        flag: "v",
        steps: &[
            (b"ms v1 5 T0 F3\r\nhello\r\n", b"HD\r\n"),
            (b"mg v1 v\r\n", b"VA 5\r\nhello\r\n"),
            (b"mg v1\r\n", b"HD\r\n"),
            (b"mg v1 q v\r\n", b"VA 5\r\nhello\r\n"),
            (b"mg v0 v\r\n", b"EN\r\n"),
        ],
    },
    Row {
        flag: "s",
        steps: &[
            (b"ms s1 5\r\nhello\r\n", b"HD\r\n"),
            (b"mg s1 s\r\n", b"HD s5\r\n"),
            (b"mg s1 s v\r\n", b"VA 5 s5\r\nhello\r\n"),
            (b"ms s2 0\r\n\r\n", b"HD\r\n"),
            (b"mg s2 s v\r\n", b"VA 0 s0\r\n\r\n"),
            (b"mg s0 s\r\n", b"EN\r\n"),
        ],
    },
    Row {
        flag: "f",
        steps: &[
            (b"ms f1 1 F77\r\nx\r\n", b"HD\r\n"),
            (b"mg f1 f\r\n", b"HD f77\r\n"),
            (b"ms f2 1\r\nx\r\n", b"HD\r\n"),
            (b"mg f2 f\r\n", b"HD f0\r\n"),
            (b"ms f3 1 F4294967295\r\nx\r\n", b"HD\r\n"),
            (b"mg f3 f v\r\n", b"VA 1 f4294967295\r\nx\r\n"),
        ],
    },
    Row {
        flag: "t",
        steps: &[
            (b"ms t1 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"mg t1 t\r\n", b"HD t100\r\n"),
            (b"ms t2 1 T0\r\nx\r\n", b"HD\r\n"),
            (b"mg t2 t\r\n", b"HD t-1\r\n"),
            (b"ms t3 1\r\nx\r\n", b"HD\r\n"),
            (b"mg t3 t v\r\n", b"VA 1 t-1\r\nx\r\n"),
            (b"mg t0 t\r\n", b"EN\r\n"),
        ],
    },
    Row {
        flag: "c",
        steps: &[
            (b"ms c1 1 c\r\nx\r\n", b"HD c10\r\n"),
            (b"mg c1 c\r\n", b"HD c10\r\n"),
            (b"mg c1 c v\r\n", b"VA 1 c10\r\nx\r\n"),
            (b"ms c1 1\r\ny\r\n", b"HD\r\n"),
            (b"mg c1 c\r\n", b"HD c11\r\n"),
            (b"mg c0 c\r\n", b"EN\r\n"),
        ],
    },
    Row {
        flag: "k",
        steps: &[
            (b"ms k1 1\r\nx\r\n", b"HD\r\n"),
            (b"mg k1 k\r\n", b"HD kk1\r\n"),
            (b"mg k1 k v k\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
            (b"mg k0 k\r\n", b"EN kk0\r\n"),
            (b"mg k0 v k\r\n", b"EN kk0\r\n"),
        ],
    },
    Row {
        flag: "O",
        steps: &[
            (b"ms o1 1\r\nx\r\n", b"HD\r\n"),
            (b"mg o1 Oabc\r\n", b"HD Oabc\r\n"),
            (b"mg o1 O\r\n", b"HD O\r\n"),
            (b"mg o0 Oabc v\r\n", b"EN Oabc\r\n"),
            (
                b"mg o1 O1234567890123456789012345678901\r\n",
                b"HD O1234567890123456789012345678901\r\n",
            ),
            (
                b"mg o1 O12345678901234567890123456789012\r\n",
                b"CLIENT_ERROR opaque token too long\r\n",
            ),
        ],
    },
    Row {
        flag: "q",
        steps: &[
            (b"ms q1 1\r\nx\r\n", b"HD\r\n"),
            (b"mg q1 q\r\n", b"HD\r\n"),
            (b"mg q1 q v k\r\n", b"VA 1 kq1\r\nx\r\n"),
            (b"mg q0 q v\r\n", b""),
            (b"mg q0 q k O9\r\nmn\r\n", b"MN\r\n"),
        ],
    },
    Row {
        flag: "h",
        steps: &[
            (b"ms h1 1\r\nx\r\n", b"HD\r\n"),
            (b"mg h1 h\r\n", b"HD h0\r\n"),
            (b"mg h1 h\r\n", b"HD h1\r\n"),
            (b"mg h1 h v\r\n", b"VA 1 h1\r\nx\r\n"),
            (b"ms h1 1\r\ny\r\n", b"HD\r\n"),
            (b"mg h1 h\r\n", b"HD h0\r\n"),
        ],
    },
    Row {
        flag: "l",
        steps: &[
            (b"ms l1 1\r\nx\r\n", b"HD\r\n"),
            (b"mg l1 l\r\n", b"HD l0\r\n"),
            (b"mg l1 l h\r\n", b"HD l0 h1\r\n"),
        ],
    },
    Row {
        flag: "u",
        steps: &[
            (b"ms u1 1\r\nx\r\n", b"HD\r\n"),
            (b"mg u1 u h\r\n", b"HD h0\r\n"),
            (b"mg u1 u h v\r\n", b"VA 1 h0\r\nx\r\n"),
            (b"mg u1 h\r\n", b"HD h0\r\n"),
            (b"mg u1 h\r\n", b"HD h1\r\n"),
        ],
    },
    Row {
        flag: "b",
        steps: &[
            (b"ms YjE= 1 b\r\nx\r\n", b"HD\r\n"),
            (b"mg YjE= b v\r\n", b"VA 1\r\nx\r\n"),
            (b"mg YjE= b k v\r\n", b"VA 1 kYjE= b\r\nx\r\n"),
            (b"mg b1 k v\r\n", b"VA 1 kYjE= b\r\nx\r\n"),
            (b"mg YjA= b k v\r\n", b"EN kYjA= b\r\n"),
            (b"mg YjA= b q k\r\nmn\r\n", b"MN\r\n"),
            (b"mg Yj b\r\n", b"CLIENT_ERROR error decoding key\r\n"),
            (b"mg !!!! b v\r\n", b"CLIENT_ERROR error decoding key\r\n"),
        ],
    },
    Row {
        flag: "order",
        steps: &[
            (b"ms or1 5 T100 F7\r\nhello\r\n", b"HD\r\n"),
            (
                b"mg or1 v s f t c k O1 h l\r\n",
                b"VA 5 s5 f7 t100 c20 kor1 O1 h0 l0\r\nhello\r\n",
            ),
            (
                b"mg or1 O1 l h k c t f s v\r\n",
                b"VA 5 O1 l0 h1 kor1 c20 t100 f7 s5\r\nhello\r\n",
            ),
            (b"mg or1 k s k\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
        ],
    },
    Row {
        flag: "P L",
        steps: &[
            (b"ms pl1 1\r\nx\r\n", b"HD\r\n"),
            (b"mg pl1 P/route/ Lhint v\r\n", b"VA 1\r\nx\r\n"),
        ],
    },
];

#[test]
fn mg_return_flags() -> anyhow::Result<()> {
    run_family("mg_return_flags", MG_RETURN_FLAGS)
}

/// `mg`'s item-changing flags `N R T` and the `W Z` they answer, in the order sent.
const MG_VIVIFY_RECACHE_TOUCH: &[Row] = &[
    Row {
        flag: "N",
        steps: &[
            (b"mg n1 N30 s v t\r\n", b"VA 0 s0 t30 W\r\n\r\n"),
            (b"mg n1 N30 s v t\r\n", b"VA 0 s0 t30 Z\r\n\r\n"),
            (b"mg n1 v\r\n", b"VA 0 Z\r\n\r\n"),
            (b"mg n1 k c\r\n", b"HD kn1 c1 Z\r\n"),
            (b"ms n2 1 T0\r\nx\r\n", b"HD\r\n"),
            (b"mg n2 N30 v t\r\n", b"VA 1 t-1\r\nx\r\n"),
            (b"mg n3 N30 q k\r\n", b"HD kn3 W\r\n"),
            (b"mg n3 N30 q k\r\n", b"HD kn3 Z\r\n"),
            (
                b"mg n4 N v\r\n",
                b"CLIENT_ERROR bad token in command line format\r\n",
            ),
            (
                b"mg n4 Nx v\r\n",
                b"CLIENT_ERROR bad token in command line format\r\n",
            ),
        ],
    },
    Row {
        flag: "N then recache",
        steps: &[
            (b"mg n5 N30 c\r\n", b"HD c4 W\r\n"),
            (b"ms n5 3 T30 C<cas:n5>\r\nnew\r\n", b"HD\r\n"),
            (b"mg n5 v N30 t\r\n", b"VA 3 t30\r\nnew\r\n"),
            (b"mg n5 v N30\r\n", b"VA 3\r\nnew\r\n"),
        ],
    },
    Row {
        flag: "N T order",
        steps: &[
            (b"mg nt1 N100 T50 v t\r\n", b"VA 0 t50 W\r\n\r\n"),
            (b"mg nt2 T50 N100 v t\r\n", b"VA 0 t100 W\r\n\r\n"),
            (b"mg nt3 t N100 v\r\n", b"VA 0 t-1 W\r\n\r\n"),
            (b"mg nt3 t\r\n", b"HD t100 Z\r\n"),
            (b"mg nt4 N100 t T50\r\n", b"HD t100 W\r\n"),
            (b"mg nt5 T50 t N100\r\n", b"HD t50 W\r\n"),
            (b"mg nt5 t\r\n", b"HD t100 Z\r\n"),
        ],
    },
    Row {
        flag: "R",
        steps: &[
            (b"ms r1 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"mg r1 R30 t\r\n", b"HD t100\r\n"),
            (b"mg r1 R200 t v\r\n", b"VA 1 t100 W\r\nx\r\n"),
            (b"mg r1 R200 t v\r\n", b"VA 1 t100 Z\r\nx\r\n"),
            (b"mg r1 t\r\n", b"HD t100 Z\r\n"),
            (b"ms r2 1 T0\r\nx\r\n", b"HD\r\n"),
            (b"mg r2 R200 t\r\n", b"HD t-1\r\n"),
            (b"ms r3 1 T10\r\nx\r\n", b"HD\r\n"),
            (b"mg r3 R30 u\r\n", b"HD W\r\n"),
            (b"mg r3 R30\r\n", b"HD Z\r\n"),
            (b"ms r1 1 T10\r\ny\r\n", b"HD\r\n"),
            (b"mg r1 R30 v\r\n", b"VA 1 W\r\ny\r\n"),
            (b"mg r1 R30 v\r\n", b"VA 1 Z\r\ny\r\n"),
            (
                b"mg r1 Rx\r\n",
                b"CLIENT_ERROR bad token in command line format\r\n",
            ),
            (b"mg r0 R30 v\r\n", b"EN\r\n"),
        ],
    },
    Row {
        flag: "T",
        steps: &[
            (b"ms tt1 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"mg tt1 T30 t c\r\n", b"HD t30 c15\r\n"),
            (b"mg tt1 t c\r\n", b"HD t30 c15\r\n"),
            (b"mg tt1 T0 t\r\n", b"HD t-1\r\n"),
            (b"mg tt1 t\r\n", b"HD t-1\r\n"),
            (b"mg tt1 T-1 v\r\n", b"VA 1\r\nx\r\n"),
            (b"mg tt1 v\r\n", b"EN\r\n"),
            (b"mg tt0 T30 v t\r\n", b"EN\r\n"),
            (
                b"mg tt1 Tx\r\n",
                b"CLIENT_ERROR bad token in command line format\r\n",
            ),
        ],
    },
    Row {
        flag: "t before T",
        steps: &[
            (b"ms tb1 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"mg tb1 t T40\r\n", b"HD t100\r\n"),
            (b"mg tb1 t\r\n", b"HD t40\r\n"),
            (b"mg tb1 t T30 t\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
        ],
    },
    Row {
        flag: "R and T order",
        steps: &[
            (b"ms rt1 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"mg rt1 R30 T10 t\r\n", b"HD t10\r\n"),
            (b"ms rt2 1 T10\r\nx\r\n", b"HD\r\n"),
            (b"mg rt2 R30 T100 t\r\n", b"HD t100 W\r\n"),
            (b"ms rt3 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"mg rt3 T10 R30 t\r\n", b"HD t10 W\r\n"),
            (b"ms rt4 1 T10\r\nx\r\n", b"HD\r\n"),
            (b"mg rt4 T100 R30 t\r\n", b"HD t100\r\n"),
        ],
    },
    Row {
        flag: "T on hit, N ignored",
        steps: &[
            (b"ms th1 1 T0\r\nx\r\n", b"HD\r\n"),
            (b"mg th1 T30 N100 t\r\n", b"HD t30\r\n"),
            (b"mg th1 N100 T40 t\r\n", b"HD t40\r\n"),
        ],
    },
];

#[test]
fn mg_vivify_recache_touch() -> anyhow::Result<()> {
    run_family("mg_vivify_recache_touch", MG_VIVIFY_RECACHE_TOUCH)
}

/// Stale items and the recache token: `md I T`, `ms I C<older cas>`, and memcached's own t/metaget.t cases ("serve stale", "lease").
const STALE_AND_WIN: &[Row] = &[
    Row {
        flag: "md I T, ms I C<old>",
        steps: &[
            (b"ms sw1 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"mg sw1 c\r\n", b"HD c1\r\n"),
            (b"md sw1 I T30\r\n", b"HD\r\n"),
            (b"mg sw1 v t c\r\n", b"VA 1 t30 c2 X W\r\nx\r\n"),
            (b"mg sw1 v t c\r\n", b"VA 1 t30 c2 Z X\r\nx\r\n"),
            (b"ms sw1 1 C1 I T500\r\ny\r\n", b"HD\r\n"),
            (b"mg sw1 v t c\r\n", b"VA 1 t30 c3 Z X\r\ny\r\n"),
            (b"mg sw1 v t c s\r\n", b"VA 1 t30 c3 s1 Z X\r\ny\r\n"),
            (b"mg sw1\r\n", b"HD Z X\r\n"),
        ],
    },
    Row {
        flag: "metaget.t serve stale",
        steps: &[
            (b"set toinv 0 0 3\r\nmoo\r\n", b"STORED\r\n"),
            (b"mg toinv s v\r\n", b"VA 3 s3\r\nmoo\r\n"),
            (b"md toinv I T30\r\n", b"HD\r\n"),
            (b"mg toinv s t c v\r\n", b"VA 3 s3 t30 c5 X W\r\nmoo\r\n"),
            (b"ms toinv 1 T90 C1\r\nf\r\n", b"EX\r\n"),
            (b"ms toinv 1 I T90 C1\r\nf\r\n", b"HD\r\n"),
            (b"mg toinv s t c v\r\n", b"VA 1 s1 t30 c6 Z X\r\nf\r\n"),
            (b"ms toinv 1 T90 C<cas:toinv>\r\ng\r\n", b"HD\r\n"),
            (b"mg toinv s t c v\r\n", b"VA 1 s1 t90 c7\r\ng\r\n"),
        ],
    },
    Row {
        flag: "metaget.t lease",
        steps: &[
            (b"mg needwin s c v N30 t\r\n", b"VA 0 s0 c8 t30 W\r\n\r\n"),
            (b"mg needwin s t c v N30\r\n", b"VA 0 s0 t30 c8 Z\r\n\r\n"),
            (b"ms needwin 2 C5000 T120\r\nnu\r\n", b"EX\r\n"),
            (b"ms needwin 2 C<cas:needwin> T120\r\nmu\r\n", b"HD\r\n"),
            (b"mg needwin s t c v N30\r\n", b"VA 2 s2 t120 c9\r\nmu\r\n"),
            (
                b"mg needwin s t c v N30 R130\r\n",
                b"VA 2 s2 t120 c9 W\r\nmu\r\n",
            ),
            (
                b"mg needwin s t c v N30 R130\r\n",
                b"VA 2 s2 t120 c9 Z\r\nmu\r\n",
            ),
            (b"ms needwin 4 C<cas:needwin> T300\r\nzuuu\r\n", b"HD\r\n"),
            (
                b"mg needwin s t c v N30\r\n",
                b"VA 4 s4 t300 c10\r\nzuuu\r\n",
            ),
        ],
    },
    Row {
        flag: "ms I keeps TTL",
        steps: &[
            (b"ms st1 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"ms st1 1 T100\r\ny\r\n", b"HD\r\n"),
            (b"ms st1 1 C1 I T0\r\nz\r\n", b"HD\r\n"),
            (b"mg st1 t v\r\n", b"VA 1 t100 X W\r\nz\r\n"),
            (b"mg st1 t v\r\n", b"VA 1 t100 Z X\r\nz\r\n"),
        ],
    },
    Row {
        flag: "ms I keeps Z",
        steps: &[
            (b"ms st2 1\r\nx\r\n", b"HD\r\n"),
            (b"md st2 I\r\n", b"HD\r\n"),
            (b"mg st2\r\n", b"HD X W\r\n"),
            (b"ms st2 1 C1 I\r\ny\r\n", b"HD\r\n"),
            (b"mg st2 v\r\n", b"VA 1 Z X\r\ny\r\n"),
        ],
    },
    Row {
        flag: "ms I newer CAS",
        steps: &[
            (b"ms st3 1\r\nx\r\n", b"HD\r\n"),
            (b"ms st3 1 C999999 I\r\nw\r\n", b"EX\r\n"),
            (b"mg st3 v\r\n", b"VA 1\r\nx\r\n"),
        ],
    },
    Row {
        flag: "ms I matching CAS",
        steps: &[
            (b"ms st4 1 I\r\nx\r\n", b"HD\r\n"),
            (b"ms st4 1 C<cas:st4> I c\r\ny\r\n", b"HD c19\r\n"),
            (b"mg st4 v\r\n", b"VA 1\r\ny\r\n"),
        ],
    },
    Row {
        flag: "md I again",
        steps: &[
            (b"ms st5 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"md st5 I\r\n", b"HD\r\n"),
            (b"mg st5 c\r\n", b"HD c21 X W\r\n"),
            (b"mg st5 c\r\n", b"HD c21 Z X\r\n"),
            (b"md st5 I q\r\n", b""),
            (b"mg st5 c\r\n", b"HD c22 X W\r\n"),
            (b"mg st5 c\r\n", b"HD c22 Z X\r\n"),
            (b"ms st5 1 T0\r\ny\r\n", b"HD\r\n"),
            (b"mg st5 v t\r\n", b"VA 1 t-1\r\ny\r\n"),
        ],
    },
    Row {
        flag: "md T without I",
        steps: &[
            (b"ms st6 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"md st6 T30 q\r\n", b""),
            (b"mg st6 t\r\n", b"EN\r\n"),
            (b"md nothing I\r\n", b"NF\r\n"),
            (b"md nothing T30\r\n", b"NF\r\n"),
        ],
    },
    Row {
        flag: "stale via get",
        steps: &[
            (b"ms st7 1\r\nx\r\n", b"HD\r\n"),
            (b"md st7 I\r\n", b"HD\r\n"),
            (b"get st7\r\n", b"VALUE st7 0 1\r\nx\r\nEND\r\n"),
            (
                b"me st7\r\n",
                b"ME st7 exp=-1 la=0 cas=26 fetch=yes cls=1 size=63\r\n",
            ),
            (b"mg st7 v\r\n", b"VA 1 X W\r\nx\r\n"),
        ],
    },
];

#[test]
fn stale_and_win() -> anyhow::Result<()> {
    run_family("stale_and_win", STALE_AND_WIN)
}

/// `ms` flags: `b c C F I k O q T`, the flags it ignores, invalid ones.
const MS_FLAGS: &[Row] = &[
    Row {
        flag: "b",
        steps: &[
            (b"ms bXMx 2 b\r\nab\r\n", b"HD\r\n"),
            (b"mg ms1 v\r\n", b"VA 2\r\nab\r\n"),
            (b"ms bXMx 2 b k\r\nab\r\n", b"HD kbXMx b\r\n"),
            (
                b"ms bXM 2 b\r\nab\r\n",
                b"CLIENT_ERROR error decoding key\r\n",
            ),
        ],
    },
    Row {
        flag: "c",
        steps: &[
            (b"ms msc 2 c\r\nab\r\n", b"HD c3\r\n"),
            (b"mg msc c\r\n", b"HD c3\r\n"),
            (b"ms msc 2 MR c\r\nab\r\n", b"HD c4\r\n"),
            (b"ms msc2 2 MR c\r\nab\r\n", b"NS c0\r\n"),
        ],
    },
    Row {
        flag: "C",
        steps: &[
            (b"ms msC 2 c\r\nab\r\n", b"HD c5\r\n"),
            (b"ms msC 2 C<cas:msC> c\r\ncd\r\n", b"HD c6\r\n"),
            (b"ms msC 2 C1 c\r\nef\r\n", b"EX c0\r\n"),
            (b"mg msC v\r\n", b"VA 2\r\ncd\r\n"),
            (b"ms msC0 2 C1\r\nab\r\n", b"NF\r\n"),
            (
                b"ms msC 2 Cx\r\nab\r\n",
                b"CLIENT_ERROR bad token in command line format\r\n",
            ),
        ],
    },
    Row {
        flag: "F",
        steps: &[
            (b"ms msF 1 F9\r\nx\r\n", b"HD\r\n"),
            (b"mg msF f\r\n", b"HD f9\r\n"),
            (b"ms msF 1\r\nx\r\n", b"HD\r\n"),
            (b"mg msF f\r\n", b"HD f0\r\n"),
            (
                b"ms msF 1 F-1\r\nx\r\n",
                b"CLIENT_ERROR bad command line format\r\n",
            ),
            (
                b"ms msF 1 Fx\r\nx\r\n",
                b"CLIENT_ERROR bad command line format\r\n",
            ),
        ],
    },
    Row {
        flag: "I",
        steps: &[
            (b"ms msI 1 I\r\nx\r\n", b"HD\r\n"),
            (b"mg msI v\r\n", b"VA 1\r\nx\r\n"),
        ],
    },
    Row {
        flag: "k",
        steps: &[
            (b"ms msk 1 k\r\nx\r\n", b"HD kmsk\r\n"),
            (b"ms msk 1 k MA\r\ny\r\n", b"HD kmsk\r\n"),
            (b"ms msk0 1 k ME\r\nx\r\n", b"HD kmsk0\r\n"),
            (b"ms msk0 1 k ME\r\nx\r\n", b"NS kmsk0\r\n"),
        ],
    },
    Row {
        flag: "O",
        steps: &[
            (b"ms msO 1 Oab\r\nx\r\n", b"HD Oab\r\n"),
            (
                b"ms msO 1 O12345678901234567890123456789012\r\nx\r\n",
                b"CLIENT_ERROR opaque token too long\r\n",
            ),
            (b"ms msO 1 O k c\r\nx\r\n", b"HD O kmsO c14\r\n"),
        ],
    },
    Row {
        flag: "q",
        steps: &[
            (b"ms msq 1 q\r\nx\r\n", b""),
            (b"ms msq 1 q ME\r\nx\r\n", b"NS\r\n"),
            (b"ms msq 1 q C1\r\nx\r\n", b"EX\r\n"),
            (b"ms msq0 1 q MR\r\nx\r\n", b"NS\r\n"),
            (b"ms msq 1 q\r\nx\r\nmn\r\n", b"MN\r\n"),
        ],
    },
    Row {
        flag: "T",
        steps: &[
            (b"ms msT 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"mg msT t\r\n", b"HD t100\r\n"),
            (b"ms msT 1 T0\r\nx\r\n", b"HD\r\n"),
            (b"mg msT t\r\n", b"HD t-1\r\n"),
            (b"ms msT 1 T-1\r\nx\r\n", b"HD\r\n"),
            (b"mg msT v\r\n", b"EN\r\n"),
            (
                b"ms msT 1 Tx\r\nx\r\n",
                b"CLIENT_ERROR bad token in command line format\r\n",
            ),
        ],
    },
    Row {
        flag: "ignored flags",
        steps: &[
            (b"ms msi 3 h l t f v u s\r\nabc\r\n", b"HD\r\n"),
            (b"ms msi 3 P1 L1\r\nabc\r\n", b"HD\r\n"),
            (b"ms msi 3 N30\r\nabc\r\n", b"HD\r\n"),
            (b"mg msi t v\r\n", b"VA 3 t-1\r\nabc\r\n"),
        ],
    },
    Row {
        flag: "invalid",
        steps: &[
            (b"ms msx 1 Z\r\nx\r\n", b"CLIENT_ERROR invalid flag\r\n"),
            (b"ms msx 1 v v\r\nx\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
            (b"ms msx 1 S1\r\nx\r\n", b"CLIENT_ERROR invalid flag\r\n"),
            (b"mg msx v\r\n", b"EN\r\n"),
        ],
    },
];

#[test]
fn ms_flags() -> anyhow::Result<()> {
    run_family("ms_flags", MS_FLAGS)
}

/// `ms` modes `ME MA MP MR MS` (append and prepend on a missing key: `NS`), invalid modes.
const MS_MODES: &[Row] = &[
    Row {
        flag: "ME",
        steps: &[
            (b"ms mE 1 ME\r\na\r\n", b"HD\r\n"),
            (b"ms mE 1 ME c\r\nb\r\n", b"NS c0\r\n"),
            (b"mg mE v\r\n", b"VA 1\r\na\r\n"),
            (b"ms mE2 1 ME C99999 c\r\nx\r\n", b"HD c2\r\n"),
        ],
    },
    Row {
        flag: "MA",
        steps: &[
            (b"ms mA 1\r\na\r\n", b"HD\r\n"),
            (b"ms mA 1 MA\r\nb\r\n", b"HD\r\n"),
            (b"mg mA v\r\n", b"VA 2\r\nab\r\n"),
            (b"ms mA0 1 MA\r\nz\r\n", b"NS\r\n"),
            (b"mg mA0 v\r\n", b"EN\r\n"),
            (b"ms mA 1 MA C99999\r\nc\r\n", b"EX\r\n"),
            (b"ms mA 1 MA C<cas:mA> c\r\nd\r\n", b"HD c5\r\n"),
            (b"mg mA v\r\n", b"VA 3\r\nabd\r\n"),
        ],
    },
    Row {
        flag: "MP",
        steps: &[
            (b"ms mP 1 F5 T100\r\na\r\n", b"HD\r\n"),
            (b"ms mP 1 MP F9 T50\r\nb\r\n", b"HD\r\n"),
            (b"mg mP v f t\r\n", b"VA 2 f5 t100\r\nba\r\n"),
            (b"ms mP0 1 MP\r\nz\r\n", b"NS\r\n"),
        ],
    },
    Row {
        flag: "MR",
        steps: &[
            (b"ms mR0 1 MR\r\nz\r\n", b"NS\r\n"),
            (b"mg mR0 v\r\n", b"EN\r\n"),
            (b"ms mR 1\r\na\r\n", b"HD\r\n"),
            (b"ms mR 2 MR F3 c\r\nrr\r\n", b"HD c9\r\n"),
            (b"mg mR v f\r\n", b"VA 2 f3\r\nrr\r\n"),
            (b"ms mR 1 MR C1\r\nx\r\n", b"EX\r\n"),
        ],
    },
    Row {
        flag: "MS",
        steps: &[
            (b"ms mS 2 MS\r\nss\r\n", b"HD\r\n"),
            (b"mg mS v\r\n", b"VA 2\r\nss\r\n"),
        ],
    },
    Row {
        flag: "invalid",
        steps: &[
            (
                b"ms mX 1 Ms\r\nx\r\n",
                b"CLIENT_ERROR invalid mode for ms M token\r\n",
            ),
            (
                b"ms mX 1 Me\r\nx\r\n",
                b"CLIENT_ERROR invalid mode for ms M token\r\n",
            ),
            (
                b"ms mX 1 MX\r\nx\r\n",
                b"CLIENT_ERROR invalid mode for ms M token\r\n",
            ),
            (
                b"ms mX 1 MSS\r\nx\r\n",
                b"CLIENT_ERROR incorrect length for M token\r\n",
            ),
            (
                b"ms mX 1 M\r\nx\r\n",
                b"CLIENT_ERROR incorrect length for M token\r\n",
            ),
            (b"mg mX v\r\n", b"EN\r\n"),
        ],
    },
];

#[test]
fn ms_modes() -> anyhow::Result<()> {
    run_family("ms_modes", MS_MODES)
}

/// `md` flags: `b C I k O q T`.
const MD_FLAGS: &[Row] = &[
    Row {
        flag: "plain",
        steps: &[
            (b"md d0\r\n", b"NF\r\n"),
            (b"ms d1 1\r\nx\r\n", b"HD\r\n"),
            (b"md d1\r\n", b"HD\r\n"),
            (b"mg d1 v\r\n", b"EN\r\n"),
        ],
    },
    Row {
        flag: "b",
        steps: &[
            (b"ms ZDI= 1 b\r\nx\r\n", b"HD\r\n"),
            (b"md ZDI= b k\r\n", b"HD kZDI= b\r\n"),
            (b"md ZDI= b k\r\n", b"NF kZDI= b\r\n"),
            (
                b"md ZD b\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
    Row {
        flag: "C",
        steps: &[
            (b"ms d3 1\r\nx\r\n", b"HD\r\n"),
            (b"md d3 C99999\r\n", b"EX\r\n"),
            (b"md d3 C99999 q\r\n", b"EX\r\n"),
            (b"mg d3 v\r\n", b"VA 1\r\nx\r\n"),
            (
                b"md d3 Cx\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
            (b"md d3 C<cas:d3> k\r\n", b"HD kd3\r\n"),
            (b"mg d3\r\n", b"EN\r\n"),
        ],
    },
    Row {
        flag: "I",
        steps: &[
            (b"ms d4 1\r\nx\r\n", b"HD\r\n"),
            (b"md d4 I\r\n", b"HD\r\n"),
            (b"mg d4 v c\r\n", b"VA 1 c5 X W\r\nx\r\n"),
            (b"md d4 I C1\r\n", b"EX\r\n"),
            (b"md d40 I\r\n", b"NF\r\n"),
        ],
    },
    Row {
        flag: "k",
        steps: &[
            (b"md d5 k\r\n", b"NF kd5\r\n"),
            (b"ms d5 1\r\nx\r\n", b"HD\r\n"),
            (b"md d5 k O1\r\n", b"HD kd5 O1\r\n"),
        ],
    },
    Row {
        flag: "O",
        steps: &[
            (b"ms d6 1\r\nx\r\n", b"HD\r\n"),
            (b"md d6 Oq\r\n", b"HD Oq\r\n"),
            (b"md d6 Oq k\r\n", b"NF Oq kd6\r\n"),
            (
                b"md d6 O12345678901234567890123456789012\r\n",
                b"CLIENT_ERROR opaque token too long\r\n",
            ),
        ],
    },
    Row {
        flag: "q",
        steps: &[
            (b"ms d7 1\r\nx\r\n", b"HD\r\n"),
            (b"md d7 q\r\nmn\r\n", b"MN\r\n"),
            (b"md d7 q\r\nmn\r\n", b"NF\r\nMN\r\n"),
            (b"ms d7 1\r\nx\r\n", b"HD\r\n"),
            (b"md d7 q C99999\r\n", b"EX\r\n"),
        ],
    },
    Row {
        flag: "T",
        steps: &[
            (b"ms d8 1 T100\r\nx\r\n", b"HD\r\n"),
            (b"md d8 I T30\r\n", b"HD\r\n"),
            (b"mg d8 t\r\n", b"HD t30 X W\r\n"),
            (
                b"md d8 Tx\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
    Row {
        flag: "ignored and invalid",
        steps: &[
            (b"ms d9 1\r\nx\r\n", b"HD\r\n"),
            (
                b"md d9 v s f t c h l u N30 R30 MI J1 D1 F1 P1 L1\r\n",
                b"HD\r\n",
            ),
            (
                b"md d9 Z\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
            (
                b"md d9 q q\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
];

#[test]
fn md_flags() -> anyhow::Result<()> {
    run_family("md_flags", MD_FLAGS)
}

/// `ma` flags and modes: `b C N J D T M q t c v k O`, autovivify, `MI M+ MD M-`.
const MA_FLAGS: &[Row] = &[
    Row {
        flag: "plain",
        steps: &[
            (b"ma a0\r\n", b"NF\r\n"),
            (b"ms a1 1\r\n5\r\n", b"HD\r\n"),
            (b"ma a1\r\n", b"HD\r\n"),
            (b"mg a1 v\r\n", b"VA 1\r\n6\r\n"),
        ],
    },
    Row {
        flag: "b",
        steps: &[
            (b"ms YTI= 1 b\r\n5\r\n", b"HD\r\n"),
            (b"ma YTI= b k v\r\n", b"VA 1 kYTI= b\r\n6\r\n"),
            (
                b"ma YTI b\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
    Row {
        flag: "C",
        steps: &[
            (b"ms a3 1\r\n5\r\n", b"HD\r\n"),
            (b"ma a3 C99999 v\r\n", b"EX\r\n"),
            (b"ma a3 C<cas:a3> c v\r\n", b"VA 1 c6\r\n6\r\n"),
            (b"ma a3 c v\r\n", b"VA 1 c7\r\n7\r\n"),
            (b"ma a30 C1 v\r\n", b"NF\r\n"),
        ],
    },
    Row {
        flag: "N",
        steps: &[
            (b"ma a4 N0\r\n", b"HD\r\n"),
            (b"ma a4 v\r\n", b"VA 1\r\n1\r\n"),
            (b"ma a5 N100 t v\r\n", b"VA 1 t100\r\n0\r\n"),
            (b"ma a5 N100 t v\r\n", b"VA 1 t100\r\n1\r\n"),
            (
                b"ma a6 N\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
    Row {
        flag: "J",
        steps: &[
            (b"ma a7 N0 J41 v\r\n", b"VA 2\r\n41\r\n"),
            (b"ma a7 N0 J41 v\r\n", b"VA 2\r\n42\r\n"),
            (b"ma a8 J41 v\r\n", b"NF\r\n"),
            (b"ma a9 N0 J99 MD v\r\n", b"VA 2\r\n99\r\n"),
            (
                b"ma a9 J-4 N0\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
    Row {
        flag: "D",
        steps: &[
            (b"ms a10 2\r\n10\r\n", b"HD\r\n"),
            (b"ma a10 D5 v\r\n", b"VA 2\r\n15\r\n"),
            (b"ma a10 D18446744073709551615 v\r\n", b"VA 2\r\n14\r\n"),
            (
                b"ma a10 D-1\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
            (
                b"ma a10 Dx\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
            (
                b"ma a10 D18446744073709551616\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
    Row {
        flag: "T",
        steps: &[
            (b"ms a11 1 T100\r\n5\r\n", b"HD\r\n"),
            (b"ma a11 T30 t v\r\n", b"VA 1 t30\r\n6\r\n"),
            (b"ma a11 T0 t v\r\n", b"VA 1 t-1\r\n7\r\n"),
            (b"ma a11 t T70 v\r\n", b"VA 1 t-1\r\n8\r\n"),
            (b"ma a11 t\r\n", b"HD t70\r\n"),
        ],
    },
    Row {
        flag: "N T order",
        steps: &[
            (b"ma a12 N100 T50 t v\r\n", b"VA 1 t50\r\n0\r\n"),
            (b"ma a13 T50 N100 t v\r\n", b"VA 1 t100\r\n0\r\n"),
            (b"ma a14 t N100 v\r\n", b"VA 1 t-1\r\n0\r\n"),
            (b"ma a15 N100 t T50 v\r\n", b"VA 1 t100\r\n0\r\n"),
        ],
    },
    Row {
        flag: "M",
        steps: &[
            (b"ms a16 2\r\n50\r\n", b"HD\r\n"),
            (b"ma a16 MI D10 v\r\n", b"VA 2\r\n60\r\n"),
            (b"ma a16 M+ D10 v\r\n", b"VA 2\r\n70\r\n"),
            (b"ma a16 MD D3 v\r\n", b"VA 2\r\n67\r\n"),
            (b"ma a16 M- D3 v\r\n", b"VA 2\r\n64\r\n"),
            (b"ma a16 MD D1000 v\r\n", b"VA 1\r\n0\r\n"),
            (
                b"ma a16 Mx\r\n",
                b"CLIENT_ERROR invalid mode for ma M token\r\n",
            ),
            (
                b"ma a16 MII\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
    Row {
        flag: "q",
        steps: &[
            (b"ms a17 1\r\n5\r\n", b"HD\r\n"),
            (b"ma a17 q\r\nmn\r\n", b"MN\r\n"),
            (b"ma a18 q N0\r\nmn\r\n", b"HD\r\nMN\r\n"),
            (b"ma a18 q\r\nmn\r\n", b"MN\r\n"),
            (b"ma a19 q\r\nmn\r\n", b"NF\r\nMN\r\n"),
        ],
    },
    Row {
        flag: "t c v k O",
        steps: &[
            (b"ms a20 1 T100\r\n5\r\n", b"HD\r\n"),
            (b"ma a20 t c v k O1\r\n", b"VA 1 t100 c38 ka20 O1\r\n6\r\n"),
            (b"ma a20 O1 k v c t\r\n", b"VA 1 O1 ka20 c39 t100\r\n7\r\n"),
            (b"ma a21 k O2 v t c\r\n", b"NF ka21 O2\r\n"),
        ],
    },
    Row {
        flag: "wrap and floor",
        steps: &[
            (b"ms a22 20\r\n18446744073709551615\r\n", b"HD\r\n"),
            (b"ma a22 v\r\n", b"VA 1\r\n0\r\n"),
            (b"ms a23 3\r\n100\r\n", b"HD\r\n"),
            (b"ma a23 MD D1 v\r\n", b"VA 2\r\n99\r\n"),
            (b"mg a23 v\r\n", b"VA 3\r\n99 \r\n"),
        ],
    },
    Row {
        flag: "errors",
        steps: &[
            (b"ms a24 3\r\nabc\r\n", b"HD\r\n"),
            (
                b"ma a24\r\n",
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            (
                b"ma a24 N0\r\n",
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            (
                b"ma a24 Z\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
            (
                b"ma a24 v v\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
            (
                b"ma a24 2\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
];

#[test]
fn ma_flags() -> anyhow::Result<()> {
    run_family("ma_flags", MA_FLAGS)
}

/// `q` on every command, pipelined, with `mn` marking the end.
const QUIET_MODE: &[Row] = &[
    Row {
        flag: "q with mn",
        steps: &[
            (b"ms qh 3\r\nabc\r\n", b"HD\r\n"),
            (b"mg qm1 q v k O1\r\nmg qh q v k O2\r\nmg qm2 q k O3\r\nmg qh q k O4\r\nms qn 3 q O5\r\nxyz\r\nms qn 3 q O6 ME\r\nxyz\r\nms qnope 3 q O7 MR\r\nxyz\r\nms qn 3 q O8 C1\r\nxyz\r\nmd qn q O9\r\nmd qn q O10\r\nma qc q O11\r\nma qc q O12 N0 J5\r\nma qc q O13\r\nma qc q O14 v\r\nmg qc q v O15\r\nmg qm3 q v O16 Z\r\nmn\r\n", b"VA 3 kqh O2\r\nabc\r\nHD kqh O4\r\nNS O6\r\nNS O7\r\nEX O8\r\nNF O10\r\nNF O11\r\nHD O12\r\nVA 1 O15\r\n7\r\nCLIENT_ERROR invalid flag\r\nMN\r\n"),
        ],
    },
];

#[test]
fn quiet_mode() -> anyhow::Result<()> {
    run_family("quiet_mode", QUIET_MODE)
}

/// `mn` and `me` (with `b`).
const MN_AND_ME: &[Row] = &[
    Row {
        flag: "mn",
        steps: &[
            (b"mn\r\n", b"MN\r\n"),
            (b"mn ignored tokens\r\n", b"MN\r\n"),
            (b"mn\n", b"MN\r\n"),
        ],
    },
    Row {
        flag: "me",
        steps: &[
            (b"me menokey\r\n", b"EN\r\n"),
            (b"ms medbg 3 T100 c\r\nabc\r\n", b"HD c1\r\n"),
            (
                b"me medbg\r\n",
                b"ME medbg exp=-100 la=0 cas=1 fetch=no cls=1 size=67\r\n",
            ),
            (b"mg medbg v\r\n", b"VA 3\r\nabc\r\n"),
            (
                b"me medbg\r\n",
                b"ME medbg exp=-100 la=0 cas=1 fetch=yes cls=1 size=67\r\n",
            ),
            (b"me\r\n", b"CLIENT_ERROR bad command line format\r\n"),
            (
                b"me medbg extra tokens\r\n",
                b"ME medbg exp=-100 la=0 cas=1 fetch=yes cls=1 size=67\r\n",
            ),
        ],
    },
    Row {
        flag: "me b",
        steps: &[
            (b"ms bWVi 3 b\r\nxyz\r\n", b"HD\r\n"),
            (
                b"me bWVi b\r\n",
                b"ME bWVi exp=-1 la=0 cas=2 fetch=no cls=1 size=65\r\n",
            ),
            (
                b"me meb\r\n",
                b"ME bWVi exp=-1 la=0 cas=2 fetch=no cls=1 size=65\r\n",
            ),
            (b"ms meplain 1\r\nx\r\n", b"HD\r\n"),
            (
                b"me bWVwbGFpbg== b\r\n",
                b"ME meplain exp=-1 la=0 cas=3 fetch=no cls=1 size=67\r\n",
            ),
            (b"me Zm9 b\r\n", b"CLIENT_ERROR bad command line format\r\n"),
            (b"me Zm9v x\r\n", b"EN\r\n"),
        ],
    },
];

#[test]
fn mn_and_me() -> anyhow::Result<()> {
    run_family("mn_and_me", MN_AND_ME)
}

/// `b` keys: `k` and `me` echo a key as it was stored (memcached's ITEM_KEY_BINARY), `ma` and `md` as asked.
const BASE64_KEYS: &[Row] = &[
    Row {
        flag: "stored base64, read plain",
        steps: &[
            (b"ms Zm9v 3 b\r\nbar\r\n", b"HD\r\n"),
            (b"mg foo k v\r\n", b"VA 3 kZm9v b\r\nbar\r\n"),
            (b"mg Zm9v b k v\r\n", b"VA 3 kZm9v b\r\nbar\r\n"),
            (
                b"me foo\r\n",
                b"ME Zm9v exp=-1 la=0 cas=1 fetch=yes cls=1 size=65\r\n",
            ),
        ],
    },
    Row {
        flag: "stored plain, read base64",
        steps: &[
            (b"ms plain 3\r\nbar\r\n", b"HD\r\n"),
            (b"mg cGxhaW4= b k v\r\n", b"VA 3 kplain\r\nbar\r\n"),
            (
                b"me cGxhaW4= b\r\n",
                b"ME plain exp=-1 la=0 cas=2 fetch=yes cls=1 size=67\r\n",
            ),
        ],
    },
    Row {
        flag: "binary bytes",
        steps: &[
            (b"ms AAEgCg== 2 b k\r\n42\r\n", b"HD kAAEgCg== b\r\n"),
            (b"mg AAEgCg== b k v\r\n", b"VA 2 kAAEgCg== b\r\n42\r\n"),
            (
                b"me AAEgCg== b\r\n",
                b"ME AAEgCg== exp=-1 la=0 cas=3 fetch=yes cls=1 size=65\r\n",
            ),
            (b"ma AAEgCg== b\r\n", b"HD\r\n"),
            (b"md AAEgCg== b k q\r\n", b""),
            (b"mg AAEgCg== b k v\r\n", b"EN kAAEgCg== b\r\n"),
        ],
    },
    Row {
        flag: "ma and md echo the request",
        steps: &[
            (b"ma Y250 b N0 J7 v k\r\n", b"VA 1 kY250 b\r\n7\r\n"),
            (b"ma Y250 b v k\r\n", b"VA 1 kY250 b\r\n8\r\n"),
            (b"ma cnt v k\r\n", b"VA 1 kcnt\r\n9\r\n"),
            (b"mg Y250 b v\r\n", b"VA 1\r\n9\r\n"),
            (b"md Y250 b k\r\n", b"HD kY250 b\r\n"),
            (b"md Y250 b k\r\n", b"NF kY250 b\r\n"),
        ],
    },
    Row {
        flag: "canonical and bad",
        steps: &[
            (b"ms Zm9vYmE= 1 b\r\nx\r\n", b"HD\r\n"),
            (b"mg Zm9vYmF= b k\r\n", b"HD kZm9vYmE= b\r\n"),
            (b"mg Zm9v= b k\r\n", b"CLIENT_ERROR error decoding key\r\n"),
            (b"mg Zm9 b\r\n", b"CLIENT_ERROR error decoding key\r\n"),
            (b"mg a b\r\n", b"CLIENT_ERROR error decoding key\r\n"),
            (
                b"ms Zm9 3 b\r\nbar\r\n",
                b"CLIENT_ERROR error decoding key\r\n",
            ),
            (
                b"md Zm9 b\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
            (
                b"ma Zm9 b\r\n",
                b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ),
        ],
    },
];

#[test]
fn base64_keys() -> anyhow::Result<()> {
    run_family("base64_keys", BASE64_KEYS)
}

/// `O` on every command, up to 32 bytes.
const OPAQUE: &[Row] = &[
    Row {
        flag: "every command",
        steps: &[
            (b"ms op 2 O1\r\n12\r\n", b"HD O1\r\n"),
            (
                b"ms op 2 Oabc-DEF_123 k c\r\n12\r\n",
                b"HD Oabc-DEF_123 kop c2\r\n",
            ),
            (b"mg op Oz\r\n", b"HD Oz\r\n"),
            (b"mg op v Oz\r\n", b"VA 2 Oz\r\n12\r\n"),
            (b"ma op Oz\r\n", b"HD Oz\r\n"),
            (b"md op Oq k\r\n", b"HD Oq kop\r\n"),
            (b"md op Oq k\r\n", b"NF Oq kop\r\n"),
            (b"ma op Oq\r\n", b"NF Oq\r\n"),
            (b"ms op 2\r\n12\r\n", b"HD\r\n"),
            (b"mg op O\r\n", b"HD O\r\n"),
        ],
    },
    Row {
        flag: "32 bytes",
        steps: &[
            (b"ms op2 2\r\n12\r\n", b"HD\r\n"),
            (
                b"mg op2 O1234567890123456789012345678901\r\n",
                b"HD O1234567890123456789012345678901\r\n",
            ),
            (
                b"mg op2 O12345678901234567890123456789012\r\n",
                b"CLIENT_ERROR opaque token too long\r\n",
            ),
            (
                b"ms op2 2 O12345678901234567890123456789012\r\nab\r\n",
                b"CLIENT_ERROR opaque token too long\r\n",
            ),
            (b"mg op2 v\r\n", b"VA 2\r\n12\r\n"),
            (
                b"md op2 O12345678901234567890123456789012\r\n",
                b"CLIENT_ERROR opaque token too long\r\n",
            ),
            (
                b"ma op2 O12345678901234567890123456789012\r\n",
                b"CLIENT_ERROR opaque token too long\r\n",
            ),
        ],
    },
];

#[test]
fn opaque() -> anyhow::Result<()> {
    run_family("opaque", OPAQUE)
}
