//! The binary protocol's `STAT` with a sub-command (the request's key), fogcached against
//! Debian's memcached 1.6.18 side by side: `detail on`, `detail off`, `detail dump`,
//! `reset`, `settings`, `items`, `slabs`, `sizes`, `conns`, as memcached's
//! `process_bin_stat` answers them.
//!
//! Where a reply's bytes can be the same on both servers (`detail *`, `reset`, `sizes`,
//! `conns`, an unknown group) they are compared byte for byte, 24-byte headers included.
//! `settings`, `items` and `slabs` list each server's own statistics (fogcached has its
//! tiers, memcached its extstore knobs; `wire_stats.rs` compares the names), so for those
//! each server's binary answer must be its own text `stats <group>`, name for name and in
//! the same order, with the same values except `items:<n>:age`, `age_hot`, `age_warm`
//! (seconds, which may tick between the two requests: within one second).

#[path = "support/text_and_binary.rs"]
mod text_and_binary;

use testkit::{escape, RawClient};
use text_and_binary::{TextAndBinary, NAMES};

const STAT: u8 = 0x10;
const SET: u8 = 0x01;
const GET: u8 = 0x00;
const DELETE: u8 = 0x04;
const STATUS_NOT_FOUND: u16 = 0x0001;

/// A binary request: 24-byte header, extras, key, value.
fn request(opcode: u8, opaque: u32, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let body_len = (extras.len() + key.len() + value.len()) as u32;
    let mut bytes = vec![0x80, opcode];
    bytes.extend_from_slice(&(key.len() as u16).to_be_bytes());
    bytes.push(extras.len() as u8);
    bytes.extend_from_slice(&[0, 0, 0]); // data type, vbucket
    bytes.extend_from_slice(&body_len.to_be_bytes());
    bytes.extend_from_slice(&opaque.to_be_bytes());
    bytes.extend_from_slice(&0u64.to_be_bytes());
    bytes.extend_from_slice(extras);
    bytes.extend_from_slice(key);
    bytes.extend_from_slice(value);
    bytes
}

/// One response packet.
struct Packet {
    raw: Vec<u8>,
    status: u16,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn read_packet(client: &mut RawClient) -> anyhow::Result<Packet> {
    let header = client.read_exact(24)?;
    anyhow::ensure!(header[0] == 0x81, "not a response: {:?}", escape(&header));
    let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let extras_len = usize::from(header[4]);
    let status = u16::from_be_bytes([header[6], header[7]]);
    let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
    let body = client.read_exact(body_len)?;
    let key = body[extras_len..extras_len + key_len].to_vec();
    let value = body[extras_len + key_len..].to_vec();
    let mut raw = header;
    raw.extend_from_slice(&body);
    Ok(Packet {
        raw,
        status,
        key,
        value,
    })
}

/// `STAT <group>`'s packets: up to and including the terminator (empty key and value) or
/// the first error. Bounded: a group has at most a few thousand statistics.
fn stat(client: &mut RawClient, group: &[u8]) -> anyhow::Result<Vec<Packet>> {
    client.send(&request(STAT, 0xfeed_0001, b"", group, b""))?;
    let mut packets = Vec::new();
    for _ in 0..100_000 {
        let packet = read_packet(client)?;
        let last = packet.status != 0 || (packet.key.is_empty() && packet.value.is_empty());
        packets.push(packet);
        if last {
            return Ok(packets);
        }
    }
    anyhow::bail!("STAT {:?}: no terminator", escape(group))
}

/// The concatenated bytes of a group's packets.
fn raw(packets: &[Packet]) -> Vec<u8> {
    packets.iter().flat_map(|p| p.raw.iter().copied()).collect()
}

/// A group's packets with each `detailed` dump's lines sorted.
fn comparable(packets: &[Packet]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for packet in packets {
        if packet.key == b"detailed" {
            bytes.extend_from_slice(&packet.raw[..packet.raw.len() - packet.value.len()]);
            let mut lines: Vec<&[u8]> = packet.value.split_inclusive(|&b| b == b'\n').collect();
            lines.sort();
            lines.iter().for_each(|line| bytes.extend_from_slice(line));
        } else {
            bytes.extend_from_slice(&packet.raw);
        }
    }
    bytes
}

/// memcached and fogcached with their defaults.
type Servers = TextAndBinary;

fn start_servers() -> anyhow::Result<Servers> {
    TextAndBinary::start(&[], &[])
}

impl TextAndBinary {
    /// `STAT <group>` on both; fails unless the two answers are the same bytes (the
    /// lines of a `detailed` dump compared sorted: memcached lists its prefixes in the
    /// order of its hash table).
    fn same_stat(&mut self, group: &[u8]) -> anyhow::Result<Vec<Packet>> {
        let memcached = stat(&mut self.binary[0], group)?;
        let fogcached = stat(&mut self.binary[1], group)?;
        anyhow::ensure!(
            comparable(&memcached) == comparable(&fogcached),
            "STAT {:?}:\n  memcached: {:?}\n  fogcached: {:?}",
            escape(group),
            escape(&raw(&memcached)),
            escape(&raw(&fogcached))
        );
        Ok(fogcached)
    }

    /// A binary request whose single reply is read and not compared (a store's CAS).
    fn binary_op(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        for client in &mut self.binary {
            client.send(bytes)?;
            read_packet(client)?;
        }
        Ok(())
    }
}

#[test]
fn stat_detail_on_off_dump_and_reset_answer_as_memcached() -> anyhow::Result<()> {
    let mut servers = start_servers()?;
    // `detail on`: the terminator alone (before issue 27 fogcached answered Not found).
    let on = servers.same_stat(b"detail on")?;
    assert_eq!(on.len(), 1);
    let mut set_extras = Vec::new();
    set_extras.extend_from_slice(&0u32.to_be_bytes()); // client flags
    set_extras.extend_from_slice(&0u32.to_be_bytes()); // exptime
    servers.binary_op(&request(SET, 1, &set_extras, b"a:1", b"x"))?;
    servers.binary_op(&request(GET, 2, b"", b"a:1", b""))?;
    servers.binary_op(&request(GET, 3, b"", b"a:2", b""))?;
    servers.binary_op(&request(DELETE, 4, b"", b"b:1", b""))?;
    // `detail dump`: one `detailed` statistic holding the text dump, then the terminator.
    let dump = servers.same_stat(b"detail dump")?;
    assert_eq!(dump[0].key, b"detailed");
    assert_eq!(
        escape(&comparable(&dump[..1])[24 + 8..]),
        escape(b"END\r\nPREFIX a get 2 hit 1 set 1 del 0\r\nPREFIX b get 0 hit 0 set 0 del 1\r\n")
    );
    // `detail off` stops counting and keeps the counts.
    servers.same_stat(b"detail off")?;
    servers.binary_op(&request(GET, 5, b"", b"a:1", b""))?;
    servers.same_stat(b"detail dump")?;
    for (text, name) in servers.text.iter_mut().zip(NAMES) {
        let settings = text.stats("settings")?;
        assert_eq!(
            testkit::stat(&settings, "detail_enabled"),
            Some("no"),
            "{name}"
        );
    }
    // memcached matches `reset`, `settings` and `detail ...` as prefixes of the key.
    servers.same_stat(b"detail onx")?;
    servers.same_stat(b"detail offline")?;
    let unknown = servers.same_stat(b"detail x")?;
    assert_eq!(unknown[0].status, STATUS_NOT_FOUND);
    // `reset` clears the per-prefix counts too (memcached's stats_reset: item 6).
    servers.same_stat(b"resetx")?;
    let dump = servers.same_stat(b"detail dump")?;
    assert_eq!(escape(&dump[0].value), escape(b"END\r\n"));
    // Groups memcached does not serve over the binary protocol.
    for group in [&b"conns"[..], b"foo", b"item", b"itemsx", b"sizes_x"] {
        let reply = servers.same_stat(group)?;
        assert_eq!(reply[0].status, STATUS_NOT_FOUND, "{:?}", escape(group));
    }
    servers.same_stat(b"sizes")?;
    servers.stop()
}

/// Whether `name` is a number of seconds that may tick between two requests.
fn is_seconds(name: &str) -> bool {
    name.starts_with("items:")
        && (name.ends_with(":age") || name.ends_with(":age_hot") || name.ends_with(":age_warm"))
}

#[test]
fn stat_settings_items_slabs_answer_each_servers_text_stats() -> anyhow::Result<()> {
    let mut servers = start_servers()?;
    // Items in two slab classes, so that `items` and `slabs` have lines.
    let mut workload = b"set s1 0 0 1\r\nx\r\nset s2 0 100 600\r\n".to_vec();
    workload.extend_from_slice(&[b'v'; 600]);
    workload.extend_from_slice(b"\r\nget s1 s2\r\n");
    for text in &mut servers.text {
        text.request(&workload, b"END\r\n")?;
    }
    let mut failures = Vec::new();
    for group in ["settings", "items", "slabs", "sizes", "settingsx"] {
        for (side, name) in NAMES.iter().enumerate() {
            let binary = stat(&mut servers.binary[side], group.as_bytes())?;
            let text_group = group.strip_suffix('x').unwrap_or(group);
            let text = servers.text[side].stats(text_group)?;
            let terminator = binary.last().map(|p| (p.status, p.key.is_empty()));
            if terminator != Some((0, true)) || binary.len() < 2 {
                failures.push(format!("{name} STAT {group}: not answered"));
                continue;
            }
            let pairs: Vec<(String, String)> = binary[..binary.len() - 1]
                .iter()
                .map(|p| {
                    (
                        String::from_utf8_lossy(&p.key).into_owned(),
                        String::from_utf8_lossy(&p.value).into_owned(),
                    )
                })
                .collect();
            let names = |list: &[(String, String)]| -> Vec<String> {
                list.iter().map(|(n, _)| n.clone()).collect()
            };
            if names(&pairs) != names(&text) {
                failures.push(format!(
                    "{name} STAT {group}: names differ from `stats {text_group}`:\n    \
                     binary {:?}\n    text   {:?}",
                    names(&pairs),
                    names(&text)
                ));
                continue;
            }
            for ((stat, binary_value), (_, text_value)) in pairs.iter().zip(&text) {
                let same = if is_seconds(stat) {
                    let (a, b) = (binary_value.parse::<i64>(), text_value.parse::<i64>());
                    matches!((a, b), (Ok(a), Ok(b)) if (a - b).abs() <= 1)
                } else {
                    binary_value == text_value
                };
                if !same {
                    failures.push(format!(
                        "{name} STAT {group}: {stat} is {binary_value:?}, text says \
                         {text_value:?}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    servers.stop()
}
