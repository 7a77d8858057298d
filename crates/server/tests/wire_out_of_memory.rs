//! Out-of-memory answers, fogcached against Debian's memcached 1.6.18 side by side:
//! with `-M` (no evictions) and no room left, every command answers memcached's words,
//! text, meta and binary, byte for byte; an append whose data finds room but whose whole
//! item does not is `NOT_STORED`, as memcached's two allocations make it; and a large
//! multi-get that memcached cannot buffer (`-o read_buf_mem_limit`) is answered in full
//! by fogcached, which streams it (README's compatibility section).
//!
//! fogcached runs `--slow-size 0`: with a slow tier, `-M` answers "out of memory" only
//! once both tiers are full, which is what a memory limit means for it.

#[path = "support/text_and_binary.rs"]
mod text_and_binary;

use testkit::{escape, stat, RawClient, ServerProcess};
use text_and_binary::{TextAndBinary, NAMES};

const SET: u8 = 0x01;
const INCREMENT: u8 = 0x05;
const APPEND: u8 = 0x0e;

/// A binary request (24-byte header, extras, key, value).
fn binary_request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let body_len = (extras.len() + key.len() + value.len()) as u32;
    let mut bytes = vec![0x80, opcode];
    bytes.extend_from_slice(&(key.len() as u16).to_be_bytes());
    bytes.push(extras.len() as u8);
    bytes.extend_from_slice(&[0, 0, 0]);
    bytes.extend_from_slice(&body_len.to_be_bytes());
    bytes.extend_from_slice(&7u32.to_be_bytes());
    bytes.extend_from_slice(&0u64.to_be_bytes());
    bytes.extend_from_slice(extras);
    bytes.extend_from_slice(key);
    bytes.extend_from_slice(value);
    bytes
}

/// The whole response to one binary request.
fn binary_reply(client: &mut RawClient, request: &[u8]) -> anyhow::Result<Vec<u8>> {
    client.send(request)?;
    let mut reply = client.read_exact(24)?;
    let body_len = u32::from_be_bytes([reply[8], reply[9], reply[10], reply[11]]) as usize;
    reply.extend_from_slice(&client.read_exact(body_len)?);
    Ok(reply)
}

/// Extras of a binary increment: delta 1, initial 0, and `exptime` (0xffffffff: fail on
/// a miss instead of creating).
fn incr_extras(exptime: u32) -> Vec<u8> {
    let mut extras = 1u64.to_be_bytes().to_vec();
    extras.extend_from_slice(&0u64.to_be_bytes());
    extras.extend_from_slice(&exptime.to_be_bytes());
    extras
}

/// A binary error response as memcached sends it: status, opaque 7, the message.
fn binary_error(opcode: u8, status: u16, message: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x81, opcode, 0, 0, 0, 0];
    bytes.extend_from_slice(&status.to_be_bytes());
    bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&7u32.to_be_bytes());
    bytes.extend_from_slice(&0u64.to_be_bytes());
    bytes.extend_from_slice(message);
    bytes
}

/// memcached `-M -m 8` and fogcached `-M -m 8 --slow-size 0`, a text and a binary
/// connection to each.
type Full = TextAndBinary;

fn start_full() -> anyhow::Result<Full> {
    TextAndBinary::start(&["-M", "-m", "8"], &["-M", "-m", "8", "--slow-size", "0"])
}

impl TextAndBinary {
    /// Sends `request` on each text connection; both must answer `memcached` exactly.
    fn text_is(&mut self, request: &[u8], memcached: &[u8]) -> anyhow::Result<()> {
        for (client, name) in self.text.iter_mut().zip(NAMES) {
            let reply = client.request(request, b"\r\n")?;
            anyhow::ensure!(
                reply == memcached,
                "{name} answered {:?} to {:?}, memcached 1.6.18 answers {:?}",
                escape(&reply),
                escape(&request[..request.len().min(48)]),
                escape(memcached)
            );
        }
        Ok(())
    }

    /// Sends `request` on each binary connection; both must answer `memcached` exactly.
    fn binary_is(&mut self, request: &[u8], memcached: &[u8]) -> anyhow::Result<()> {
        for (client, name) in self.binary.iter_mut().zip(NAMES) {
            let reply = binary_reply(client, request)?;
            anyhow::ensure!(
                reply == memcached,
                "{name} answered {:?} to {:?}, memcached 1.6.18 answers {:?}",
                escape(&reply),
                escape(&request[..request.len().min(48)]),
                escape(memcached)
            );
        }
        Ok(())
    }

    /// Fills the smallest slab class until nothing more fits (silently: `noreply`), so
    /// no page is left for any class that has one.
    fn fill_small_items(&mut self) -> anyhow::Result<()> {
        let mut fill = Vec::new();
        // 8 MiB holds fewer than 8 * 10923 of them.
        for i in 0..100_000 {
            fill.extend_from_slice(format!("set fill{i} 0 0 1 noreply\r\nx\r\n").as_bytes());
        }
        fill.extend_from_slice(b"mn\r\n");
        for client in &mut self.text {
            client.request(&fill, b"MN\r\n")?;
        }
        Ok(())
    }
}

#[test]
fn with_no_room_every_command_answers_memcacheds_out_of_memory_words() -> anyhow::Result<()> {
    let mut full = start_full()?;
    // Items the commands below need, in the class that then fills up.
    full.text_is(b"set n1 0 0 1\r\n9\r\n", b"STORED\r\n")?;
    full.text_is(b"set n2 0 0 1\r\n9\r\n", b"STORED\r\n")?;
    full.text_is(b"set a1 0 0 1\r\nx\r\n", b"STORED\r\n")?;
    full.fill_small_items()?;
    // Text: a store, an increment that needs a longer item, an append (found or not:
    // memcached allocates the data before it looks), and no item lost on the way.
    full.text_is(
        b"set s 0 0 1\r\nx\r\n",
        b"SERVER_ERROR out of memory storing object\r\n",
    )?;
    full.text_is(b"incr n1 1\r\n", b"SERVER_ERROR out of memory\r\n")?;
    full.text_is(
        b"append a1 0 0 1\r\ny\r\n",
        b"SERVER_ERROR out of memory storing object\r\n",
    )?;
    full.text_is(
        b"append nothere 0 0 1\r\ny\r\n",
        b"SERVER_ERROR out of memory storing object\r\n",
    )?;
    // Meta.
    full.text_is(
        b"ms s 1\r\nx\r\n",
        b"SERVER_ERROR out of memory storing object\r\n",
    )?;
    full.text_is(b"ma n1\r\n", b"SERVER_ERROR out of memory\r\n")?;
    full.text_is(
        b"ma nn N0 J5\r\n",
        b"SERVER_ERROR Out of memory allocating new item\r\n",
    )?;
    full.text_is(b"mg nv N30 v\r\n", b"EN\r\n")?;
    // Binary: memcached's text message without `SERVER_ERROR `, status 0x82.
    full.binary_is(
        &binary_request(SET, &[0; 8], b"bs", b"y"),
        &binary_error(SET, 0x82, b"Out of memory allocating item"),
    )?;
    full.binary_is(
        &binary_request(APPEND, b"", b"a1", b"y"),
        &binary_error(APPEND, 0x82, b"Out of memory allocating item"),
    )?;
    full.binary_is(
        &binary_request(INCREMENT, &incr_extras(0xffff_ffff), b"n2", b""),
        &binary_error(INCREMENT, 0x82, b"Out of memory incrementing value"),
    )?;
    full.binary_is(
        &binary_request(INCREMENT, &incr_extras(0), b"newc", b""),
        &binary_error(INCREMENT, 0x82, b"Out of memory allocating new item"),
    )?;
    full.text_is(b"get n1\r\n", b"VALUE n1 0 1\r\n")?;
    for client in &mut full.text {
        client.read_until(b"END\r\n")?;
    }
    for (client, name) in full.text.iter_mut().zip(NAMES) {
        let stats = client.stats("")?;
        assert_eq!(stat(&stats, "evictions"), Some("0"), "{name}");
        let no_memory: u64 = stat(&stats, "store_no_memory").unwrap_or("0").parse()?;
        assert!(no_memory >= 4, "{name}: store_no_memory {no_memory}");
    }
    full.stop()
}

/// An append whose data alone finds room (its class has a free chunk) but whose whole
/// item does not (that class is full and no page is left) is `NOT_STORED` and keeps the
/// old value, as memcached's `do_store_item` answers; before issue 27 fogcached answered
/// `SERVER_ERROR out of memory storing object`, and `ms MA` then dropped the old item.
#[test]
fn an_append_whose_whole_item_finds_no_room_is_not_stored() -> anyhow::Result<()> {
    let mut full = start_full()?;
    let half = vec![b'h'; 60_000];
    let mut set_half = b"set B 0 0 60000\r\n".to_vec();
    set_half.extend_from_slice(&half);
    set_half.extend_from_slice(b"\r\n");
    full.text_is(&set_half, b"STORED\r\n")?;
    // The class of the appended item, full: items of its size until its page is.
    let whole = vec![b'w'; 120_000];
    for (client, name) in full.text.iter_mut().zip(NAMES) {
        let mut class = None;
        for i in 0..64 {
            let mut set = format!("set C{i:02} 0 0 120000\r\n").into_bytes();
            set.extend_from_slice(&whole);
            set.extend_from_slice(b"\r\n");
            assert_eq!(client.request(&set, b"\r\n")?, b"STORED\r\n", "{name}");
            let slabs = client.stats("slabs")?;
            // The class whose chunks hold 120 000 bytes and that holds an item.
            let class_id = class.get_or_insert_with(|| {
                slabs
                    .iter()
                    .filter_map(|(n, v)| {
                        let id = n.strip_suffix(":chunk_size")?;
                        let used = stat(&slabs, &format!("{id}:used_chunks"))?;
                        (v.parse::<u64>().ok()? >= 120_000 && used != "0").then(|| id.to_owned())
                    })
                    .next()
                    .unwrap_or_default()
            });
            let used = stat(&slabs, &format!("{class_id}:used_chunks"));
            let total = stat(&slabs, &format!("{class_id}:total_chunks"));
            if used.is_some() && used == total {
                break;
            }
        }
    }
    full.fill_small_items()?;
    let mut append = b"append B 0 0 60000\r\n".to_vec();
    append.extend_from_slice(&half);
    append.extend_from_slice(b"\r\n");
    full.text_is(&append, b"NOT_STORED\r\n")?;
    let mut ms_append = b"ms B 60000 MA\r\n".to_vec();
    ms_append.extend_from_slice(&half);
    ms_append.extend_from_slice(b"\r\n");
    full.text_is(&ms_append, b"NS\r\n")?;
    full.binary_is(
        &binary_request(APPEND, b"", b"B", &half),
        &binary_error(APPEND, 0x05, b"Not stored."),
    )?;
    // The old value is still there.
    full.text_is(b"mg B s\r\n", b"HD s60000\r\n")?;
    full.stop()
}

/// memcached builds a multi-get's whole reply before sending it, and with its response
/// memory bounded (`-o read_buf_mem_limit=1`) a 200-key `get` fails with `SERVER_ERROR
/// out of memory writing get response`; fogcached streams a multi-get under a per-
/// connection output bound (README: resource bounds), so it answers every key. A
/// deliberate difference (README's compatibility table).
#[test]
fn a_multi_get_memcached_cannot_buffer_is_streamed_by_fogcached() -> anyhow::Result<()> {
    let servers = [
        ServerProcess::memcached(&["-o", "read_buf_mem_limit=1"])?,
        ServerProcess::fogcached(&["-o", "read_buf_mem_limit=1"])?,
    ];
    let mut get = b"get".to_vec();
    for _ in 0..200 {
        get.extend_from_slice(b" k");
    }
    get.extend_from_slice(b"\r\n");
    let mut replies = Vec::new();
    for server in &servers {
        let mut client = RawClient::connect(server.addr())?;
        client.request(b"set k 0 0 1\r\nx\r\n", b"\r\n")?;
        client.send(&get)?;
        // memcached's error ends the reply; fogcached's END does.
        let first = client.read_until(b"\r\n")?;
        let reply = if first.starts_with(b"SERVER_ERROR") {
            first
        } else {
            let mut all = first;
            all.extend_from_slice(&client.read_until(b"END\r\n")?);
            all
        };
        replies.push(reply);
    }
    assert_eq!(
        escape(&replies[0]),
        escape(b"SERVER_ERROR out of memory writing get response\r\n"),
        "memcached"
    );
    let every_key: Vec<u8> = b"VALUE k 0 1\r\nx\r\n"
        .repeat(200)
        .into_iter()
        .chain(*b"END\r\n")
        .collect();
    assert!(
        replies[1] == every_key,
        "fogcached answered {:?}, not the 200 values and END",
        escape(&replies[1][..replies[1].len().min(64)])
    );
    let [memcached, fogcached] = servers;
    drop(memcached);
    fogcached.stop()?;
    Ok(())
}
