//! memcached's admin surface on the real binary, side by side with Debian's memcached
//! 1.6.18 where it exists: `watch` (fetchers, mutations, evictions, and fogcached's own
//! stream of tier migrations), `stats detail`, `stats cachedump`, `lru_crawler
//! metadump`, `stats conns` of a watcher; and the reuse of expired items' memory.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use testkit::{skip, stat, RawClient, ServerProcess};

/// Reads watcher lines until `done` says enough arrived, or `within` passed.
fn watch_lines(
    watcher: &mut RawClient,
    within: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut lines = Vec::new();
    let _ = watcher.set_read_timeout(Duration::from_millis(200));
    while Instant::now() < deadline && !done(&lines) {
        if let Ok(line) = watcher.read_until(b"\n") {
            lines.push(String::from_utf8_lossy(&line).trim_end().to_owned());
        }
    }
    lines
}

/// A watcher line without what differs from run to run: `ts=`, `gid=` and `cfd=`.
fn normalized(line: &str) -> String {
    line.split(' ')
        .filter(|field| !field.starts_with("ts=") && !field.starts_with("gid="))
        .map(|field| {
            if field.starts_with("cfd=") {
                "cfd=N"
            } else {
                field
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks the fields every watcher line starts with: `ts=<s>.<us> gid=<n> type=`.
fn assert_line_head(line: &str) {
    let mut fields = line.split(' ');
    let ts = fields
        .next()
        .and_then(|f| f.strip_prefix("ts="))
        .unwrap_or("");
    let (seconds, micros) = ts.split_once('.').unwrap_or(("", ""));
    assert!(
        seconds.parse::<u64>().is_ok_and(|s| s > 1_600_000_000)
            && micros.parse::<u32>().is_ok_and(|us| us < 1_000_000),
        "{line}"
    );
    let gid = fields
        .next()
        .and_then(|f| f.strip_prefix("gid="))
        .unwrap_or("");
    assert!(gid.parse::<u64>().is_ok(), "{line}");
    assert!(
        fields.next().is_some_and(|f| f.starts_with("type=")),
        "{line}"
    );
}

/// The commands of the side-by-side `watch` run, and the lines they must produce.
const WATCHED_COMMANDS: &[u8] = b"set foo:1 5 100 3\r\nbar\r\nget foo:1 nokey\r\n\
    add foo:1 0 0 1\r\nx\r\ncas foo:1 0 0 1 999999\r\nz\r\nreplace zz 0 0 1\r\n1\r\n\
    set sp%ace 0 0 1\r\nx\r\nmg foo:1 v\r\nmn\r\n";

fn run_watched(server: &ServerProcess) -> anyhow::Result<Vec<String>> {
    let mut watcher = RawClient::connect(server.addr())?;
    assert_eq!(
        watcher.request(b"watch fetchers mutations\r\n", b"\r\n")?,
        b"OK\r\n"
    );
    let mut client = RawClient::connect(server.addr())?;
    client.send(WATCHED_COMMANDS)?;
    client.read_until(b"MN\r\n")?;
    let lines = watch_lines(&mut watcher, Duration::from_secs(5), |lines| {
        // The last two commands' lines: the store of sp%ace, then `mg foo:1`'s hit (the
        // second hit of foo:1).
        let hits = lines
            .iter()
            .filter(|l| l.contains("type=item_get key=foo%3A1 status=found"))
            .count();
        hits >= 2
            && lines
                .iter()
                .any(|l| l.contains("type=item_store key=sp%25ace"))
    });
    Ok(lines)
}

#[test]
fn watch_lines_are_memcached_s() -> anyhow::Result<()> {
    let fogcached = ServerProcess::fogcached(&[])?;
    let lines = run_watched(&fogcached)?;
    for line in &lines {
        assert_line_head(line);
    }
    let gids: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.split(' ').nth(1)?.strip_prefix("gid=")?.parse().ok())
        .collect();
    assert!(gids.windows(2).all(|w| w[0] < w[1]), "{lines:?}");
    let ours: Vec<String> = lines.iter().map(|l| normalized(l)).collect();
    // The class of these small items: the one `get` reports.
    let class = ours
        .iter()
        .find_map(|l| l.strip_prefix("type=item_get key=foo%3A1 status=found clsid="))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or("?")
        .to_owned();
    let expected = [
        format!("type=item_store key=foo%3A1 status=stored cmd=set ttl=100 clsid={class} cfd=N size=3"),
        format!("type=item_get key=foo%3A1 status=found clsid={class} cfd=N size=3"),
        "type=item_get key=nokey status=not_found clsid=0 cfd=N size=0".to_owned(),
        format!("type=item_store key=foo%3A1 status=not_stored cmd=add ttl=0 clsid={class} cfd=N size=1"),
        format!("type=item_store key=foo%3A1 status=exists cmd=cas ttl=0 clsid={class} cfd=N size=1"),
        format!("type=item_store key=zz status=not_stored cmd=replace ttl=0 clsid={class} cfd=N size=1"),
        format!("type=item_store key=sp%25ace status=stored cmd=set ttl=0 clsid={class} cfd=N size=1"),
    ];
    for line in &expected {
        assert!(ours.contains(line), "missing {line:?} in {ours:#?}");
    }

    // memcached 1.6.18 prints the same lines (it also logs the lookups its stores make;
    // its class numbers are its own, so they are compared as numbers only).
    let Ok(memcached) = ServerProcess::memcached(&[]) else {
        skip!(
            "watch_lines_are_memcached_s",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    let theirs: BTreeSet<String> = run_watched(&memcached)?
        .iter()
        .map(|l| normalized(l).replace(" clsid=1 ", &format!(" clsid={class} ")))
        .collect();
    for line in &expected {
        assert!(
            theirs.contains(line),
            "memcached did not print {line:?}: {theirs:#?}"
        );
    }
    Ok(())
}

#[test]
fn watch_streams_evictions_and_tier_migrations() -> anyhow::Result<()> {
    // Evictions: a DRAM-only cache filled four times over.
    let server = ServerProcess::fogcached(&["-m", "2", "--slow-size", "0"])?;
    let mut watcher = RawClient::connect(server.addr())?;
    watcher.request(b"watch evictions\r\n", b"OK\r\n")?;
    let mut client = RawClient::connect(server.addr())?;
    let value = vec![b'v'; 1000];
    for i in 0..8000 {
        let mut request = format!(
            "set key{i} 0 {} 1000 noreply\r\n",
            if i % 2 == 0 { 500 } else { 0 }
        )
        .into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        client.send(&request)?;
    }
    client.request(b"mn\r\n", b"MN\r\n")?;
    let lines = watch_lines(&mut watcher, Duration::from_secs(5), |l| l.len() >= 10);
    assert!(lines.len() >= 10, "{lines:?}");
    for line in &lines {
        assert_line_head(line);
        let fields = normalized(line);
        let rest = fields
            .strip_prefix("type=eviction key=key")
            .unwrap_or_else(|| panic!("not an eviction: {line}"));
        let number: u32 = rest.split(' ').next().unwrap_or("").parse()?;
        let ttl = fields
            .split(' ')
            .find_map(|f| f.strip_prefix("ttl="))
            .unwrap_or("");
        if number.is_multiple_of(2) {
            // Stored with 500 s to live, evicted within seconds.
            assert!(
                ttl.parse::<u32>().is_ok_and(|t| t > 400 && t <= 500),
                "{line}"
            );
        } else {
            assert_eq!(ttl, "-1", "{line}");
        }
        assert!(fields.contains(" size=1000"), "{line}");
        assert!(!fields.contains("tier=slow"), "{line}");
    }
    drop(server);

    // Migrations: a small DRAM tier in front of a slow tier.
    let server = ServerProcess::fogcached(&["-m", "2", "--slow-size", "32"])?;
    let mut watcher = RawClient::connect(server.addr())?;
    watcher.request(b"watch migrations\r\n", b"OK\r\n")?;
    let mut client = RawClient::connect(server.addr())?;
    for i in 0..6000 {
        let mut request = format!("set key{i} 0 0 1000 noreply\r\n").into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        client.send(&request)?;
    }
    client.request(b"mn\r\n", b"MN\r\n")?;
    // Old keys were demoted; reading demoted ones repeatedly promotes one. Which keys the
    // policy demoted first depends on timing, so the reads follow the demotion lines.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    while Instant::now() < deadline
        && !(lines.iter().any(|l: &String| l.contains("type=demotion"))
            && lines.iter().any(|l: &String| l.contains("type=promotion")))
    {
        let demoted: Vec<&str> = lines
            .iter()
            .filter(|l| l.contains("type=demotion"))
            .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("key=")))
            .take(3)
            .collect();
        let request = if demoted.is_empty() {
            "get key0 key1 key2\r\n".to_owned()
        } else {
            format!("get {}\r\n", demoted.join(" "))
        };
        for _ in 0..3 {
            client.request(request.as_bytes(), b"END\r\n")?;
        }
        lines.extend(watch_lines(
            &mut watcher,
            Duration::from_millis(300),
            |_| false,
        ));
    }
    let demotion = lines
        .iter()
        .find(|l| l.contains("type=demotion"))
        .unwrap_or_else(|| panic!("no demotion in {lines:?}"));
    assert_line_head(demotion);
    assert!(demotion.ends_with(" size=1000 tier=slow"), "{demotion}");
    let promotion = lines
        .iter()
        .find(|l| l.contains("type=promotion"))
        .unwrap_or_else(|| panic!("no promotion in {lines:?}"));
    assert!(promotion.contains(" key=key"), "{promotion}");
    assert!(
        promotion.ends_with(" size=1000"),
        "a promoted item is in DRAM: {promotion}"
    );
    let stats = client.stats("")?;
    assert!(stat(&stats, "promotions").is_some_and(|p| p != "0"));
    Ok(())
}

#[test]
fn a_watcher_is_listed_counted_and_released() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&[])?;
    let mut client = RawClient::connect(server.addr())?;
    let mut watcher = RawClient::connect(server.addr())?;
    watcher.request(b"watch\r\n", b"OK\r\n")?;
    // Anything a watcher sends is ignored: it gets no reply.
    watcher.send(b"get foo\r\n")?;
    client.request(b"get foo\r\n", b"END\r\n")?;
    let lines = watch_lines(&mut watcher, Duration::from_secs(3), |l| !l.is_empty());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(normalized(&lines[0]).starts_with("type=item_get key=foo status=not_found"));
    let conns = client.stats("conns")?;
    assert!(
        conns
            .iter()
            .any(|(name, value)| name.ends_with(":state") && value == "conn_watch"),
        "{conns:?}"
    );
    let stats = client.stats("")?;
    assert_eq!(stat(&stats, "log_watchers"), Some("1"));
    let connections_watching: u64 = stat(&stats, "curr_connections").unwrap_or("0").parse()?;
    assert!(stat(&stats, "log_watcher_sent").is_some_and(|n| n != "0"));
    drop(watcher);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = client.stats("")?;
        let connections: u64 = stat(&stats, "curr_connections").unwrap_or("0").parse()?;
        if stat(&stats, "log_watchers") == Some("0") && connections < connections_watching {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the watcher was not released: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // `-W` refuses, as memcached does.
    let refusing = ServerProcess::fogcached(&["-W", "-X"])?;
    let mut client = RawClient::connect(refusing.addr())?;
    assert_eq!(
        client.request(b"watch\r\n", b"\r\n")?,
        b"CLIENT_ERROR watch commands not allowed\r\n"
    );
    assert_eq!(
        client.request(b"lru_crawler metadump all\r\n", b"\r\n")?,
        b"ERROR metadump not allowed\r\n"
    );
    let settings = client.stats("settings")?;
    assert_eq!(stat(&settings, "dump_enabled"), Some("no"));
    Ok(())
}

/// `stats detail` replies byte for byte as memcached's; `stats cachedump` and
/// `lru_crawler metadump` list items in memcached's format.
#[test]
fn detail_cachedump_and_metadump_match_memcached() -> anyhow::Result<()> {
    let script: &[u8] = b"stats detail on\r\nset a:b 0 0 1\r\nx\r\nget a:b a:c nope\r\n\
        delete a:c\r\nset b:1 0 0 2\r\nyy\r\nstats detail off\r\nset a:z 0 0 1\r\nz\r\n\
        mn\r\n";
    let fogcached = ServerProcess::fogcached(&[])?;
    let mut client = RawClient::connect(fogcached.addr())?;
    client.send(script)?;
    client.read_until(b"MN\r\n")?;
    let ours = client.request(b"stats detail dump\r\n", b"END\r\n")?;
    let ours = String::from_utf8_lossy(&ours).into_owned();
    assert_eq!(
        ours,
        "PREFIX a get 2 hit 1 set 1 del 1\r\nPREFIX b get 0 hit 0 set 1 del 0\r\nEND\r\n"
    );
    let one_item: Vec<String> = {
        let dump = client.request(b"lru_crawler metadump all\r\n", b"END\r\n")?;
        String::from_utf8_lossy(&dump)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(one_item.len(), 4, "{one_item:?}");
    assert!(one_item
        .iter()
        .any(|l| l.starts_with("key=a%3Ab exp=-1 la=") && l.contains(" fetch=yes cls=")));
    assert_eq!(one_item.last().map(String::as_str), Some("END"));

    let Ok(memcached) = ServerProcess::memcached(&[]) else {
        skip!(
            "detail_cachedump_and_metadump_match_memcached",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    let mut theirs_client = RawClient::connect(memcached.addr())?;
    theirs_client.send(script)?;
    theirs_client.read_until(b"MN\r\n")?;
    let theirs = theirs_client.request(b"stats detail dump\r\n", b"END\r\n")?;
    // memcached lists the prefixes in its hash table's order, fogcached sorted.
    let sorted = |reply: &str| {
        let mut lines: Vec<String> = reply.split("\r\n").map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert_eq!(
        sorted(&ours),
        sorted(&String::from_utf8_lossy(&theirs)),
        "stats detail"
    );
    let dump = theirs_client.request(b"lru_crawler metadump all\r\n", b"END\r\n")?;
    let theirs_lines: Vec<String> = String::from_utf8_lossy(&dump)
        .lines()
        .map(str::to_owned)
        .collect();
    // Same keys, same fields in the same order; times, CAS and sizes are each server's.
    let shape = |line: &str| -> Vec<String> {
        line.split(' ')
            .map(|f| match f.split_once('=') {
                Some((name @ ("la" | "cas" | "cls" | "size"), _)) => format!("{name}=*"),
                _ => f.to_owned(),
            })
            .collect()
    };
    let mut a: Vec<Vec<String>> = one_item.iter().map(|l| shape(l)).collect();
    let mut b: Vec<Vec<String>> = theirs_lines.iter().map(|l| shape(l)).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    Ok(())
}

/// A metadump of a cache much larger than a connection's output mark: every item once,
/// and the server answers other clients meanwhile.
#[test]
fn a_large_metadump_streams_every_item() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-m", "64"])?;
    let mut client = RawClient::connect(server.addr())?;
    const ITEMS: usize = 100_000;
    let mut batch = Vec::new();
    for i in 0..ITEMS {
        batch.extend_from_slice(format!("set item:{i} 0 0 4 noreply\r\nabcd\r\n").as_bytes());
        if batch.len() > 64 * 1024 {
            client.send(&batch)?;
            batch.clear();
        }
    }
    client.send(&batch)?;
    client.request(b"mn\r\n", b"MN\r\n")?;
    let mut dumper = RawClient::connect(server.addr())?;
    dumper.set_read_timeout(Duration::from_secs(30))?;
    let dump = dumper.request(b"lru_crawler metadump all\r\n", b"END\r\n")?;
    let text = String::from_utf8_lossy(&dump);
    let keys: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("key=")?.split(' ').next())
        .collect();
    assert_eq!(keys.len(), ITEMS);
    assert_eq!(text.lines().count(), ITEMS + 1, "each item once, then END");
    assert!(client
        .request(b"version\r\n", b"\r\n")?
        .starts_with(b"VERSION "));
    Ok(())
}

/// A cache of short-lived items reuses their memory: 1 000-byte items with a 2 s TTL,
/// 2 000 a second for 8 s (16 MB written, about 6 MB alive at once), and the DRAM tier
/// never holds more than the live items need, where taking fresh pages first would
/// have grown it to 17+ pages.
#[test]
fn short_lived_items_do_not_grow_the_cache() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-m", "64", "--slow-size", "0"])?;
    let mut client = RawClient::connect(server.addr())?;
    let value = vec![b'v'; 1000];
    let started = Instant::now();
    let mut pages_max = 0u64;
    for second in 0..8u32 {
        let mut batch = Vec::new();
        for i in 0..2000 {
            batch.extend_from_slice(format!("set s{second}:{i} 0 2 1000 noreply\r\n").as_bytes());
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
        }
        client.send(&batch)?;
        client.request(b"mn\r\n", b"MN\r\n")?;
        let stats = client.stats("")?;
        let pages: u64 = stat(&stats, "tier_dram_pages_in_use")
            .unwrap_or("0")
            .parse()?;
        pages_max = pages_max.max(pages);
        let next = started + Duration::from_secs(u64::from(second) + 1);
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let stats = client.stats("")?;
    assert_eq!(stat(&stats, "evictions"), Some("0"));
    let reclaimed: u64 = stat(&stats, "reclaimed").unwrap_or("0").parse()?;
    assert!(reclaimed > 4000, "{stats:?}");
    // Three seconds of items (6 MB in 1 184-byte chunks) fit in 8 pages; allow 12.
    assert!(pages_max <= 12, "the DRAM tier grew to {pages_max} pages");
    Ok(())
}

/// `cache_memlimit` resizes the DRAM tier at run time within `--dram-max`, and `stats`
/// reports the new size under memcached's names (as memcached's own do after the same
/// command).
#[test]
fn cache_memlimit_resizes_the_dram_tier() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-m", "8", "--dram-max", "32", "--slow-size", "0"])?;
    let mut client = RawClient::connect(server.addr())?;
    let fill = |client: &mut RawClient, from: usize| -> anyhow::Result<u64> {
        let mut batch = Vec::new();
        for i in from..from + 20_000 {
            batch.extend_from_slice(format!("set k{i} 0 0 1000 noreply\r\n").as_bytes());
            batch.extend_from_slice(&[b'v'; 1000]);
            batch.extend_from_slice(b"\r\n");
        }
        client.send(&batch)?;
        client.request(b"mn\r\n", b"MN\r\n")?;
        let stats = client.stats("")?;
        Ok(stat(&stats, "tier_dram_pages_in_use")
            .unwrap_or("0")
            .parse()?)
    };
    assert_eq!(fill(&mut client, 0)?, 8);
    assert_eq!(
        client.request(b"cache_memlimit 24\r\n", b"\r\n")?,
        b"OK\r\n"
    );
    let grown = fill(&mut client, 20_000)?;
    assert!(grown > 8 && grown <= 24, "{grown} pages");
    let stats = client.stats("")?;
    assert_eq!(stat(&stats, "limit_maxbytes"), Some("25165824"));
    let settings = client.stats("settings")?;
    assert_eq!(stat(&settings, "maxbytes"), Some("25165824"));
    assert_eq!(stat(&settings, "dram_max"), Some("33554432"));
    assert_eq!(
        client.request(b"cache_memlimit 33\r\n", b"\r\n")?,
        b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
    );
    assert_eq!(
        client.request(b"cache_memlimit 7\r\n", b"\r\n")?,
        b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
    );

    // memcached reports the same names after the same command.
    let Ok(memcached) = ServerProcess::memcached(&["-m", "8"]) else {
        skip!(
            "cache_memlimit_resizes_the_dram_tier",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    let mut theirs = RawClient::connect(memcached.addr())?;
    assert_eq!(
        theirs.request(b"cache_memlimit 24\r\n", b"\r\n")?,
        b"OK\r\n"
    );
    assert_eq!(stat(&theirs.stats("")?, "limit_maxbytes"), Some("25165824"));
    assert_eq!(
        stat(&theirs.stats("settings")?, "maxbytes"),
        Some("25165824")
    );
    Ok(())
}

/// A watcher line without what differs from run to run or server to server: `ts=`,
/// `gid=`, and the numbers of `rport=` and `cfd=`.
fn normalized_conn_line(line: &str) -> String {
    normalized(line)
        .split(' ')
        .map(|field| match field.split_once('=') {
            Some(("rport", _)) => "rport=N".to_owned(),
            _ => field.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Three connections seen by a `watch connevents`: one that says `quit`, one the client
/// closes, one the server closes for a line without end.
fn run_connevents(server: &ServerProcess) -> anyhow::Result<Vec<String>> {
    let mut watcher = RawClient::connect(server.addr())?;
    assert_eq!(
        watcher.request(b"watch connevents\r\n", b"\r\n")?,
        b"OK\r\n"
    );
    let mut quitting = RawClient::connect(server.addr())?;
    let dropped = RawClient::connect(server.addr())?;
    let mut hopeless = RawClient::connect(server.addr())?;
    // The three connections are told apart from any other the log may show by their
    // client-side ports, the lines' `rport=`.
    let our_ports: BTreeSet<String> = [quitting.stream(), dropped.stream(), hopeless.stream()]
        .iter()
        .map(|stream| stream.local_addr().map(|addr| addr.port().to_string()))
        .collect::<Result<_, _>>()?;
    quitting.request(b"version\r\n", b"\r\n")?;
    quitting.send(b"quit\r\n")?;
    assert!(quitting.is_closed_by_peer());
    drop(dropped);
    hopeless.send(&[b'x'; 5000])?;
    assert!(hopeless.is_closed_by_peer());
    let ours = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|line| {
                line.split(' ')
                    .find_map(|field| field.strip_prefix("rport="))
                    .is_some_and(|port| our_ports.contains(port))
            })
            .cloned()
            .collect()
    };
    let lines = watch_lines(&mut watcher, Duration::from_secs(10), |lines| {
        let ours = ours(lines);
        ours.iter()
            .filter(|l| l.contains("type=conn_close"))
            .count()
            >= 3
            && ours.iter().filter(|l| l.contains("type=conn_new")).count() >= 3
    });
    let lines = ours(&lines);
    for line in &lines {
        assert_line_head(line);
    }
    let mut shapes: Vec<String> = lines.iter().map(|l| normalized_conn_line(l)).collect();
    shapes.sort();
    Ok(shapes)
}

/// `watch connevents` prints memcached's `conn_new` and `conn_close` lines, with its
/// close reasons; `watch sysevents` streams the LRU crawler's passes.
#[test]
fn connection_and_system_events_are_memcached_s() -> anyhow::Result<()> {
    let fogcached = ServerProcess::fogcached(&[])?;
    let ours = run_connevents(&fogcached)?;
    let opened = "type=conn_new rip=127.0.0.1 rport=N transport=tcp cfd=N";
    let closed = |reason: &str| {
        format!("type=conn_close rip=127.0.0.1 rport=N transport=tcp reason={reason} cfd=N")
    };
    let expected = vec![
        closed("error"),
        closed("normal"),
        closed("normal"),
        opened.to_owned(),
        opened.to_owned(),
        opened.to_owned(),
    ];
    assert_eq!(ours, expected);

    // sysevents: a crawler pass over expired items, within the crawler's interval.
    let mut client = RawClient::connect(fogcached.addr())?;
    let mut watcher = RawClient::connect(fogcached.addr())?;
    assert_eq!(watcher.request(b"watch sysevents\r\n", b"\r\n")?, b"OK\r\n");
    for i in 0..20 {
        client.request(format!("set short{i} 0 1 1\r\nx\r\n").as_bytes(), b"\r\n")?;
    }
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        client.request(b"lru_crawler crawl all\r\n", b"\r\n")?,
        b"OK\r\n"
    );
    let lines = watch_lines(&mut watcher, Duration::from_secs(15), |lines| {
        lines
            .iter()
            .any(|l| l.contains("reclaimed=") && !l.ends_with("reclaimed=0"))
    });
    let crawled = lines
        .iter()
        .find(|l| l.contains("type=lru_crawler") && !l.ends_with("reclaimed=0"))
        .unwrap_or_else(|| panic!("no crawler line reclaiming items in {lines:?}"));
    assert_line_head(crawled);
    let normalized_line = normalized(crawled);
    let fields: Vec<&str> = normalized_line
        .split(' ')
        .map(|f| f.split('=').next().unwrap_or(""))
        .collect();
    // memcached's LOGGER_CRAWLER_STATUS fields, in its order.
    assert_eq!(
        fields,
        [
            "type",
            "crawler",
            "lru",
            "low_mark",
            "next_reclaims",
            "since_run",
            "next_run",
            "elapsed",
            "examined",
            "reclaimed"
        ],
        "{crawled}"
    );

    let Ok(memcached) = ServerProcess::memcached(&[]) else {
        skip!(
            "connection_and_system_events_are_memcached_s",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    // memcached does not always set the reason of a connection it closes for an overlong
    // line: it says `error`, or what the last connection of the same (reused) connection
    // struct closed with, here `normal`. Its other lines are the same every run.
    let theirs = run_connevents(&memcached)?
        .into_iter()
        .map(|line| line.replace("reason=normal", "reason=error"))
        .collect::<Vec<_>>();
    let ours_loose = expected
        .iter()
        .map(|line| line.replace("reason=normal", "reason=error"))
        .collect::<Vec<_>>();
    assert_eq!(theirs, ours_loose);
    let mut watcher = RawClient::connect(memcached.addr())?;
    assert_eq!(watcher.request(b"watch sysevents\r\n", b"\r\n")?, b"OK\r\n");
    Ok(())
}

/// Requests whose replies fogcached gives byte for byte as memcached 1.6.18 does
/// (`lru_crawler`, `lru`, `stats sizes_enable|disable`), one-line replies each; a
/// `mn` after each closes its reply (the sizes toggles end without `END`, as memcached's).
const TUNING_REQUESTS: &[&str] = &[
    "lru_crawler sleep 1000001",
    "lru_crawler sleep x",
    "lru_crawler sleep -1",
    "lru_crawler sleep 5 noreply",
    "lru_crawler tocrawl x",
    "lru_crawler tocrawl",
    "lru_crawler bogus",
    "lru_crawler sleep 50",
    "lru_crawler tocrawl 5",
    "lru_crawler enable",
    "lru_crawler disable",
    "lru_crawler disable",
    "lru_crawler crawl all",
    "lru_crawler metadump all",
    "lru_crawler enable",
    "lru tune 50 40 0.2 2.0",
    "lru tune 10 40 0 2.0",
    "lru tune 10 40 x 2.0",
    "lru tune 10 40 0.2",
    "lru tune 10 40 0.2 2.0",
    "lru tune 10 40 0.5 3.0 noreply",
    "lru mode segmented",
    "lru mode bogus",
    "lru temp_ttl -1",
    "lru temp_ttl x",
    "lru bogus",
    "lru noreply",
    "lru",
    "stats sizes_disable",
    "stats sizes_enable",
    "stats sizes_disable",
];

fn tuning_replies(server: &ServerProcess) -> anyhow::Result<Vec<String>> {
    let mut client = RawClient::connect(server.addr())?;
    let mut replies = Vec::new();
    for request in TUNING_REQUESTS {
        client.send(format!("{request}\r\nmn\r\n").as_bytes())?;
        let reply = client.read_until(b"MN\r\n")?;
        replies.push(format!(
            "{request} => {}",
            String::from_utf8_lossy(&reply[..reply.len() - 4])
        ));
        if *request == "lru_crawler disable" {
            // memcached's crawler thread stops after the `OK`: until it has, a `crawl`
            // gets "ERROR an unknown error happened" instead of its steady reply.
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    Ok(replies)
}

/// The settings `TUNING_REQUESTS` changed, as `stats settings` prints them after.
const TUNED_SETTINGS: &[&str] = &[
    "lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
];

/// `lru_crawler enable|disable|sleep|tocrawl`, `lru tune|mode|temp_ttl` and `stats
/// sizes_enable|disable` answer as memcached's and change what `stats settings` says;
/// what fogcached does not have (a flat LRU, a temporary LRU) gets memcached's `ERROR`.
#[test]
fn tuning_commands_reply_as_memcached_s() -> anyhow::Result<()> {
    let fogcached = ServerProcess::fogcached(&["--slow-size", "0"])?;
    let ours = tuning_replies(&fogcached)?;
    let mut client = RawClient::connect(fogcached.addr())?;
    let settings = client.stats("settings")?;
    let ours_settings: Vec<String> = TUNED_SETTINGS
        .iter()
        .map(|name| format!("{name} {}", stat(&settings, name).unwrap_or("?")))
        .collect();
    assert_eq!(
        ours_settings,
        [
            "lru_crawler yes",
            "lru_crawler_sleep 50",
            "lru_crawler_tocrawl 5",
            "hot_lru_pct 10",
            "warm_lru_pct 40",
            "hot_max_factor 0.50",
            "warm_max_factor 3.00",
        ]
    );
    // What fogcached lacks, refused with memcached's reply for what it cannot do.
    assert_eq!(client.request(b"lru mode flat\r\n", b"\r\n")?, b"ERROR\r\n");
    assert_eq!(
        client.request(b"lru temp_ttl 10\r\n", b"\r\n")?,
        b"ERROR\r\n"
    );
    // The size histogram, once enabled, counts the items.
    client.request(
        b"set a 0 0 1\r\nx\r\nset b 0 0 1\r\ny\r\n",
        b"STORED\r\nSTORED\r\n",
    )?;
    assert_eq!(
        client.request(b"stats sizes\r\n", b"END\r\n")?,
        b"STAT sizes_status disabled\r\nEND\r\n"
    );
    client.request(b"stats sizes_enable\r\n", b"\r\n")?;
    let sizes =
        String::from_utf8_lossy(&client.request(b"stats sizes\r\n", b"END\r\n")?).into_owned();
    let counted: u64 = sizes
        .lines()
        .filter_map(|l| {
            l.strip_prefix("STAT ")?
                .split(' ')
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(counted, 2, "{sizes}");
    assert_eq!(stat(&client.stats("settings")?, "track_sizes"), Some("yes"));

    let Ok(memcached) = ServerProcess::memcached(&[]) else {
        skip!(
            "tuning_commands_reply_as_memcached_s",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    let theirs = tuning_replies(&memcached)?;
    assert_eq!(ours, theirs);
    let settings = RawClient::connect(memcached.addr())?.stats("settings")?;
    let theirs_settings: Vec<String> = TUNED_SETTINGS
        .iter()
        .map(|name| format!("{name} {}", stat(&settings, name).unwrap_or("?")))
        .collect();
    assert_eq!(ours_settings, theirs_settings);
    Ok(())
}

/// `stats cachedump` on the binary: memcached's replies to bad arguments, one reply at
/// most 2 MiB however large the class (as memcached bounds it), and `-X` refusing it.
#[test]
fn cachedump_is_bounded_to_two_mebibytes_and_refused_with_x() -> anyhow::Result<()> {
    let server = ServerProcess::fogcached(&["-m", "64", "--slow-size", "0"])?;
    let mut client = RawClient::connect(server.addr())?;
    // 12 000 items with 240-byte keys, all of one class: listed in full they would take
    // about 3 MiB.
    const ITEMS: usize = 12_000;
    let mut batch = Vec::new();
    for i in 0..ITEMS {
        batch.extend_from_slice(format!("set {i:0>240} 0 0 1 noreply\r\nx\r\n").as_bytes());
        if batch.len() > 64 * 1024 {
            client.send(&batch)?;
            batch.clear();
        }
    }
    client.send(&batch)?;
    client.request(b"mn\r\n", b"MN\r\n")?;
    let items = client.stats("items")?;
    let class = items
        .iter()
        .find(|(name, value)| name.ends_with(":number") && value == &ITEMS.to_string())
        .and_then(|(name, _)| name.split(':').nth(1))
        .unwrap_or_else(|| panic!("no class holds all {ITEMS} items: {items:?}"))
        .to_owned();
    client.set_read_timeout(Duration::from_secs(30))?;
    let dump = client.request(
        format!("stats cachedump {class} 0\r\n").as_bytes(),
        b"END\r\n",
    )?;
    assert!(
        dump.len() <= 2 * 1024 * 1024,
        "a cachedump reply of {} bytes",
        dump.len()
    );
    assert!(
        dump.len() > 2 * 1024 * 1024 - 300,
        "the reply stopped before the cap: {} bytes",
        dump.len()
    );
    let text = String::from_utf8_lossy(&dump);
    let listed = text.lines().filter(|l| l.starts_with("ITEM ")).count();
    assert!(listed < ITEMS && listed > 7_000, "{listed} items listed");
    assert!(text.ends_with("END\r\n"));
    let first = text.lines().next().unwrap_or("");
    assert!(
        first.starts_with("ITEM ") && first.ends_with(" [1 b; 0 s]"),
        "{first}"
    );
    // A limit lists that many.
    let ten = client.request(
        format!("stats cachedump {class} 10\r\n").as_bytes(),
        b"END\r\n",
    )?;
    assert_eq!(String::from_utf8_lossy(&ten).lines().count(), 11);

    // Bad arguments get memcached 1.6.18's replies.
    let bad_arguments = [
        "stats cachedump",
        "stats cachedump 1",
        "stats cachedump x 1",
        "stats cachedump 1 x",
        "stats cachedump 64 1",
        "stats cachedump 63 1",
        "stats cachedump -1 1",
    ];
    let answers = |client: &mut RawClient| -> anyhow::Result<Vec<String>> {
        bad_arguments
            .iter()
            .map(|request| {
                let reply = client.request(format!("{request}\r\n").as_bytes(), b"\r\n")?;
                Ok(String::from_utf8_lossy(&reply).into_owned())
            })
            .collect()
    };
    let ours = answers(&mut client)?;
    assert_eq!(
        ours,
        [
            "CLIENT_ERROR bad command line\r\n",
            "CLIENT_ERROR bad command line\r\n",
            "CLIENT_ERROR bad command line format\r\n",
            "CLIENT_ERROR bad command line format\r\n",
            "CLIENT_ERROR Illegal slab id\r\n",
            "END\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ]
    );
    let refusing = ServerProcess::fogcached(&["-X", "--slow-size", "0"])?;
    let mut refused = RawClient::connect(refusing.addr())?;
    assert_eq!(
        refused.request(b"stats cachedump 1 1\r\n", b"\r\n")?,
        b"CLIENT_ERROR stats cachedump not allowed\r\n"
    );

    let Ok(memcached) = ServerProcess::memcached(&["-X"]) else {
        skip!(
            "cachedump_is_bounded_to_two_mebibytes_and_refused_with_x",
            "Debian's memcached is not installed"
        );
        return Ok(());
    };
    let mut theirs = RawClient::connect(memcached.addr())?;
    assert_eq!(
        theirs.request(b"stats cachedump 1 1\r\n", b"\r\n")?,
        b"CLIENT_ERROR stats cachedump not allowed\r\n"
    );
    let memcached = ServerProcess::memcached(&[])?;
    assert_eq!(answers(&mut RawClient::connect(memcached.addr())?)?, ours);
    Ok(())
}
