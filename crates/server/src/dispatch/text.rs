//! Text protocol dispatch: parse one request from the front of the input with
//! `protocol::text`, apply it to the engine, append memcached's exact reply bytes.
//!
//! Lines that start with a meta command (`mg ms md ma mn me`) go to the meta dispatcher.
//!
//! `noreply` suppresses every reply of the command, errors included, byte for byte as
//! memcached 1.6's `set_noreply_maybe` + `out_string`: outcomes (`STORED`, `NOT_FOUND`,
//! `OK`, an incr/decr value, ...), `CLIENT_ERROR` replies (bad numbers, a non-numeric
//! value for incr/decr; the parser already returns them empty) and `SERVER_ERROR object
//! too large for cache` / `SERVER_ERROR out of memory ...` (checked against memcached
//! 1.6.18: `set k 0 0 2000000 noreply` and its payload get no reply; the payload is still
//! swallowed). Still sent: `ERROR` for an unknown command or a wrong token count (refused
//! before `noreply` is read) and the replies of commands without a `noreply` form.

use std::sync::atomic::Ordering;

use engine::{
    ArithOptions, ArithOutcome, DeleteOptions, DeleteOutcome, ItemView, ReadOptions, ReassignError,
    StoreMode, StoreOptions, StoreOutcome, TouchOutcome,
};
use protocol::meta::push_u64;
use protocol::text::{self, Keys, ShutdownMode, StoreCommand, TextLimits, TextRequest};
use protocol::Parsed;

use crate::detail::PrefixOp;
use crate::dispatch::admin;
use crate::latency::{self, CommandKind};
use crate::session::{Session, Step, SERVER_VERSION};
use crate::stats_reply::{self, StatsGroup};

const STORED: &[u8] = b"STORED\r\n";
const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
const EXISTS: &[u8] = b"EXISTS\r\n";
const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
const DELETED: &[u8] = b"DELETED\r\n";
const TOUCHED: &[u8] = b"TOUCHED\r\n";
const OK: &[u8] = b"OK\r\n";
pub(crate) const END: &[u8] = b"END\r\n";
const ERROR: &[u8] = b"ERROR\r\n";
const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
const OUT_OF_MEMORY_STORING: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory\r\n";
const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
const SHUTDOWN_DISABLED: &[u8] = b"ERROR: shutdown not enabled\r\n";
const FLUSH_DISABLED: &[u8] = b"CLIENT_ERROR flush_all not allowed\r\n";
const SHUTDOWN_BAD_MODE: &[u8] = b"CLIENT_ERROR invalid shutdown mode\r\n";
const REASSIGN_DISABLED: &[u8] = b"CLIENT_ERROR slab reassignment disabled\r\n";
const REASSIGN_SAME: &[u8] = b"SAME src and dst class are identical\r\n";
const REASSIGN_BUSY: &[u8] = b"BUSY currently processing reassign request\r\n";
const REASSIGN_BADCLASS: &[u8] = b"BADCLASS invalid src or dst class id\r\n";
const REASSIGN_NOSPARE: &[u8] = b"NOSPARE source class has no spare pages\r\n";
const MEMLIMIT_TOO_SMALL: &[u8] = b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n";
const MEMLIMIT_NOT_BYTES: &[u8] = b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n";
const MEMLIMIT_FAILED: &[u8] = b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n";

/// memcached refuses `cache_memlimit` below 8 MiB.
const MEMLIMIT_MIN_MEGABYTES: u32 = 8;
/// memcached assumes a `cache_memlimit` above this was given in bytes by mistake.
const MEMLIMIT_MAX_MEGABYTES: u32 = 1_000_000_000;

/// Handles the request at the front of `input` (text protocol, including meta commands).
pub fn handle(session: &mut Session<'_>, input: &[u8]) -> Step {
    if text::is_meta_command(input) {
        return crate::dispatch::meta::handle(session, input);
    }
    let engine = session.engine;
    let item_fits = |key_len: usize, value_len: usize| engine.item_fits(key_len, value_len);
    let limits = TextLimits {
        item_fits: &item_fits,
    };
    match text::parse(input, &limits) {
        Parsed::Incomplete => Step::NeedMore,
        Parsed::Invalid {
            reply,
            consumed,
            swallow_bytes,
            close,
        } => {
            let reply = flush_all_refused(session, input, reply);
            super::refuse(session, reply, consumed, swallow_bytes, close)
        }
        Parsed::Complete { request, consumed } => {
            if latency::enabled() {
                return execute_timed(session, request, consumed);
            }
            execute(session, request, consumed)
        }
    }
}

/// A `flush_all` whose delay did not parse: memcached counts the command before it reads
/// the delay, and with `-F` refuses it before that too. Other refusals pass unchanged.
#[cold]
fn flush_all_refused(session: &Session<'_>, input: &[u8], reply: &'static [u8]) -> &'static [u8] {
    let bad_delay = reply == text::BAD_EXPTIME || reply.is_empty();
    if !bad_delay || !input.trim_ascii_start().starts_with(b"flush_all ") {
        return reply;
    }
    session.engine.count_flush_command();
    if session.settings.flush_enabled || reply.is_empty() {
        reply
    } else {
        FLUSH_DISABLED
    }
}

/// [`execute`], timed into the latency histograms (`--metrics-listen`). Kept apart so
/// that the untimed path carries nothing of it.
#[inline(never)]
fn execute_timed(session: &mut Session<'_>, request: TextRequest<'_>, consumed: usize) -> Step {
    let started = latency::start().map(|at| (at, command_kind(&request)));
    let step = execute(session, request, consumed);
    latency::finish(started);
    step
}

/// What a request counts as in the latency histograms.
fn command_kind(request: &TextRequest<'_>) -> CommandKind {
    match request {
        TextRequest::Get { .. } => CommandKind::Get,
        TextRequest::Store { .. } | TextRequest::StoreTooLarge { .. } => CommandKind::Set,
        TextRequest::Delete { .. } => CommandKind::Delete,
        TextRequest::Arith { .. } => CommandKind::Arith,
        TextRequest::Touch { .. } => CommandKind::Touch,
        _ => CommandKind::Other,
    }
}

/// Applies one parsed request; `consumed` is how much input it took.
fn execute(session: &mut Session<'_>, request: TextRequest<'_>, consumed: usize) -> Step {
    let settings = session.settings;
    if settings.upstream.is_some() {
        // The fog layer: writes go to the upstream first.
        if let Some(step) = super::fog::text_write(session, &request, consumed) {
            return step;
        }
    }
    let engine = session.engine;
    match request {
        TextRequest::Store {
            command,
            key,
            client_flags,
            exptime,
            cas_unique,
            value,
            noreply,
        } => {
            let mut options = StoreOptions::new(store_mode(command), client_flags, exptime);
            options.requester = session.client_fd;
            if command == StoreCommand::Cas {
                options.compare_cas = Some(cas_unique);
            }
            admin::record_prefix(session, key, PrefixOp::Set);
            match engine.store(key, value, &options) {
                StoreOutcome::Stored { .. } => reply(session, noreply, STORED),
                StoreOutcome::NotStored => reply(session, noreply, NOT_STORED),
                StoreOutcome::Exists => reply(session, noreply, EXISTS),
                StoreOutcome::NotFound => reply(session, noreply, NOT_FOUND),
                // An append or prepend whose result would not fit.
                StoreOutcome::TooLarge => reply(session, noreply, TOO_LARGE),
                StoreOutcome::OutOfMemory => reply(session, noreply, OUT_OF_MEMORY_STORING),
            }
        }
        TextRequest::StoreTooLarge {
            command,
            key,
            value_len,
            noreply,
        } => {
            reply(session, noreply, TOO_LARGE);
            // memcached counts `store_too_large` and unlinks the old value of a refused
            // `set` (not `cas`), so that a client never reads the value it just tried to
            // replace. This is not a delete in the statistics.
            engine.refuse_too_large(key, command == StoreCommand::Set);
            return Step::Swallow {
                consumed,
                bytes: value_len.saturating_add(2),
            };
        }
        TextRequest::Get {
            keys,
            return_cas,
            touch_exptime,
        } => return get(session, keys, return_cas, touch_exptime, consumed),
        TextRequest::Delete { key, noreply } => {
            admin::record_prefix(session, key, PrefixOp::Delete);
            let outcome = engine.delete(key, &DeleteOptions::default());
            let bytes = match outcome {
                DeleteOutcome::Deleted => DELETED,
                DeleteOutcome::NotFound => NOT_FOUND,
                DeleteOutcome::Exists => EXISTS,
            };
            reply(session, noreply, bytes);
        }
        TextRequest::Arith {
            key,
            increment,
            delta,
            noreply,
        } => match engine.arith(key, &ArithOptions::new(increment, delta)) {
            ArithOutcome::Value { value, .. } => {
                if !noreply {
                    push_u64(session.out, value);
                    session.out.extend_from_slice(b"\r\n");
                }
            }
            ArithOutcome::NotFound => reply(session, noreply, NOT_FOUND),
            ArithOutcome::Exists => reply(session, noreply, EXISTS),
            ArithOutcome::NonNumeric => reply(session, noreply, NON_NUMERIC),
            ArithOutcome::OutOfMemory => reply(session, noreply, OUT_OF_MEMORY),
        },
        TextRequest::Touch {
            key,
            exptime,
            noreply,
        } => {
            let bytes = match engine.touch(key, exptime) {
                TouchOutcome::Touched => TOUCHED,
                TouchOutcome::NotFound => NOT_FOUND,
            };
            reply(session, noreply, bytes);
        }
        TextRequest::FlushAll { delay_s, noreply } => {
            if session.settings.flush_enabled {
                engine.flush_all(delay_s);
                reply(session, noreply, OK);
            } else {
                // `-F`: counted, as memcached counts it, and refused.
                engine.count_flush_command();
                reply(session, noreply, FLUSH_DISABLED);
            }
        }
        TextRequest::Stats { group, args } => stats_command(session, group, args),
        TextRequest::Watch { kinds } => return admin::watch(session, kinds, consumed),
        TextRequest::LruCrawler { command } => {
            return admin::lru_crawler(session, command, consumed)
        }
        TextRequest::Lru { command, noreply } => admin::lru(session, command, noreply),
        TextRequest::Version => {
            session.out.extend_from_slice(b"VERSION ");
            session.out.extend_from_slice(SERVER_VERSION.as_bytes());
            session.out.extend_from_slice(b"\r\n");
        }
        TextRequest::RefreshCerts { noreply } => refresh_certs(session, noreply),
        TextRequest::Verbosity { level, noreply } => {
            session.settings.verbosity.store(level, Ordering::Relaxed);
            reply(session, noreply, OK);
        }
        TextRequest::Quit => return Step::Close,
        TextRequest::Shutdown { mode } => {
            if !session.settings.shutdown_enabled {
                error(session, SHUTDOWN_DISABLED);
            } else if mode == ShutdownMode::Invalid {
                error(session, SHUTDOWN_BAD_MODE);
            } else {
                // memcached closes the connection without a reply and stops.
                session
                    .settings
                    .shutdown_requested
                    .store(true, Ordering::SeqCst);
                return Step::Shutdown;
            }
        }
        TextRequest::SlabsReassign {
            src_class,
            dst_class,
        } => slabs_reassign(session, src_class, dst_class),
        TextRequest::SlabsAutomove { level, noreply } => slabs_automove(session, level, noreply),
        TextRequest::CacheMemlimit { megabytes, noreply } => {
            if megabytes < MEMLIMIT_MIN_MEGABYTES {
                reply(session, noreply, MEMLIMIT_TOO_SMALL);
            } else if megabytes > MEMLIMIT_MAX_MEGABYTES {
                reply(session, noreply, MEMLIMIT_NOT_BYTES);
            } else {
                // The DRAM tier (memcached's one `-m`), up to the address space
                // reserved at start-up (`--dram-max`, by default the machine's memory);
                // beyond it memcached's reply for memory it cannot adjust. The slow
                // tier's size is its pool's and does not change at run time.
                match engine.set_dram_limit(u64::from(megabytes) * 1024 * 1024) {
                    Ok(()) => {
                        if session.settings.verbosity.load(Ordering::Relaxed) > 0 {
                            eprintln!("maxbytes adjusted to {megabytes}m");
                        }
                        reply(session, noreply, OK)
                    }
                    Err(_) => reply(session, noreply, MEMLIMIT_FAILED),
                }
            }
        }
    }
    Step::Consumed(consumed)
}

fn store_mode(command: StoreCommand) -> StoreMode {
    match command {
        StoreCommand::Set | StoreCommand::Cas => StoreMode::Set,
        StoreCommand::Add => StoreMode::Add,
        StoreCommand::Replace => StoreMode::Replace,
        StoreCommand::Append => StoreMode::Append,
        StoreCommand::Prepend => StoreMode::Prepend,
    }
}

/// A reply of a command with a `noreply` form, which `noreply` suppresses (errors too).
fn reply(session: &mut Session<'_>, noreply: bool, bytes: &[u8]) {
    if !noreply {
        session.out.extend_from_slice(bytes);
    }
}

/// A reply of a command without a `noreply` form.
fn error(session: &mut Session<'_>, bytes: &[u8]) {
    session.out.extend_from_slice(bytes);
}

/// `get gets gat gats`: a `VALUE` block per hit, in key order, then `END`.
///
/// The replies stream: once `out` reaches the session's high-water mark with keys left,
/// this stops and returns [`Step::Partial`], and the runtime calls again for the rest
/// (starting at `session.resume_keys`) after the socket drained. Each key is looked up
/// (and counted, and touched by `gat`) when it is reached, once, as memcached does, so
/// a connection never holds more than the mark plus one value whatever the key count.
///
/// With `--upstream`, `fog::get_read_through` runs instead (this loop stays as it is
/// without the fog layer).
fn get(
    session: &mut Session<'_>,
    keys: Keys<'_>,
    return_cas: bool,
    touch_exptime: Option<i64>,
    consumed: usize,
) -> Step {
    if session.settings.upstream.is_some() {
        return super::fog::get_read_through(session, keys, return_cas, touch_exptime, consumed);
    }
    let engine = session.engine;
    let options = ReadOptions {
        touch_exptime,
        is_touch_command: touch_exptime.is_some(),
        requester: session.client_fd,
        // One clock reading for all the keys of the line.
        now_s: Some(engine.now_s()),
        ..ReadOptions::default()
    };
    // `stats detail` counts each key; looked up once per request while it is off.
    let prefixes = &session.stats.prefixes;
    let prefixes_on = prefixes.enabled();
    let resume_keys = session.resume_keys;
    let out_high_water_bytes = session.out_high_water_bytes;
    let out = &mut *session.out;
    let mut keys_left = keys.iter();
    if resume_keys > 0 {
        let _ = keys_left.nth(resume_keys - 1);
    }
    // Only a hit adds output, so the mark is checked there, where the output's length is
    // at hand; the loop itself keeps no count (this is the `get` path, and a multi-get
    // that fits under the mark must cost what it did before streaming). Setting the flag
    // only after a key was answered makes every call progress.
    let mut mark_reached = false;
    for key in keys_left {
        if mark_reached {
            // Rare: count the keys before this one to resume here.
            let keys_done = keys
                .iter()
                .take_while(|done| done.as_ptr() != key.as_ptr())
                .count();
            return Step::Partial { keys_done };
        }
        // A miss prints nothing.
        let outcome = engine.read(key, &options, |item| {
            push_value(out, item, return_cas);
            mark_reached = out.len() >= out_high_water_bytes;
        });
        if prefixes_on {
            let hit = matches!(outcome, engine::ReadOutcome::Hit(_));
            prefixes.record(key, PrefixOp::Get { hit });
        }
    }
    out.extend_from_slice(END);
    Step::Consumed(consumed)
}

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
// Inlined at both of its call sites, as it was at the one it had before the fog layer's
// read-through loop: this is the `get` path.
#[inline(always)]
pub(super) fn push_value(out: &mut Vec<u8>, item: &ItemView<'_>, return_cas: bool) {
    text::push_value_line(
        out,
        item.key,
        item.client_flags,
        item.value.len(),
        return_cas.then_some(item.cas),
        item.value.len() + 2,
    );
    out.extend_from_slice(item.value);
    out.extend_from_slice(b"\r\n");
}

/// memcached's `refresh_certs`: `OK`, or the reason the certificates were not reloaded
/// (connections keep the old ones).
fn refresh_certs(session: &mut Session<'_>, noreply: bool) {
    let Some(tls) = &session.settings.tls else {
        // memcached's words when it has TLS compiled in but not enabled.
        session.out.extend_from_slice(b"Error TLS not enabled\r\n");
        return;
    };
    match tls.refresh() {
        Ok(()) => reply(session, noreply, OK),
        Err(message) => {
            // One line, whatever the error text holds.
            let message = message.replace(['\r', '\n'], " ");
            session.out.extend_from_slice(message.as_bytes());
            session.out.extend_from_slice(b"\r\n");
        }
    }
}

/// `stats [group]`.
fn stats_command(session: &mut Session<'_>, group: &[u8], args: protocol::text::Args<'_>) {
    match group {
        b"reset" => {
            stats_reply::reset(session);
            session.out.extend_from_slice(b"RESET\r\n");
        }
        b"detail" => admin::stats_detail(session, args),
        b"cachedump" => admin::stats_cachedump(session, args),
        b"sizes_enable" => admin::stats_sizes_toggle(session, true),
        b"sizes_disable" => admin::stats_sizes_toggle(session, false),
        _ => match StatsGroup::from_name(group) {
            Some(group) => {
                // `collect` reads the session while the lines are written, so they go
                // to a buffer taken out of it for the duration.
                let mut out = std::mem::take(session.out);
                stats_reply::collect(session, group, &mut |name, value| {
                    out.extend_from_slice(b"STAT ");
                    out.extend_from_slice(name.as_bytes());
                    out.push(b' ');
                    out.extend_from_slice(value.as_bytes());
                    out.extend_from_slice(b"\r\n");
                });
                out.extend_from_slice(END);
                *session.out = out;
            }
            None => error(session, ERROR),
        },
    }
}

/// `slabs reassign <src> <dst>`: memcached has no `noreply` form of this command.
fn slabs_reassign(session: &mut Session<'_>, src_class: i32, dst_class: i32) {
    let bytes = match session.engine.slabs_reassign(src_class, dst_class) {
        Ok(()) => OK,
        Err(ReassignError::Busy) => REASSIGN_BUSY,
        Err(ReassignError::BadClass) => REASSIGN_BADCLASS,
        Err(ReassignError::NoSpare) => REASSIGN_NOSPARE,
        Err(ReassignError::Same) => REASSIGN_SAME,
        Err(ReassignError::Disabled) => REASSIGN_DISABLED,
    };
    error(session, bytes);
}

/// `slabs automove <0|1|2> [noreply]`.
fn slabs_automove(session: &mut Session<'_>, level: u32, noreply: bool) {
    match session.engine.set_slab_automove(level) {
        Ok(()) => reply(session, noreply, OK),
        // The parser only passes 0..=2; memcached answers any other level with ERROR.
        Err(_) => reply(session, noreply, ERROR),
    }
}

#[cfg(test)]
mod tests;
