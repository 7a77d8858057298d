//! Meta protocol dispatch (`mg ms md ma mn me`), called by the text dispatcher.
//!
//! One request: parse it with [`protocol::meta`], apply it to the engine, append the reply
//! exactly as memcached 1.6 writes it. Reply flags follow the order the client sent them;
//! `q` suppresses only the nominal reply of each command (a miss for `mg`, `HD` for `ms`,
//! `md` and `ma`), never an error or another status.

use engine::{
    ArithOptions, ArithOutcome, DeleteOptions, DeleteOutcome, Engine, ItemView, ReadOptions,
    ReadOutcome, StoreMode, StoreOptions, StoreOutcome,
};
use protocol::meta::{
    self, push_i64, push_key, push_key_flag, push_numeric_flag, push_opaque_flag, push_ttl_flag,
    push_u64, ArithMode, MetaFlags, MetaKey, MetaLimits, MetaRequest, SetMode, SetValue,
};
use protocol::Parsed;

use crate::detail::PrefixOp;
use crate::latency::{self, CommandKind};
use crate::session::{Session, Step};

const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
const STORE_OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
const ARITH_OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory\r\n";
/// memcached's `ma` when `N` finds no memory for the item it creates.
const VIVIFY_OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR Out of memory allocating new item\r\n";
const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";

/// Handles the meta request at the front of `input`.
pub fn handle(session: &mut Session<'_>, input: &[u8]) -> Step {
    // Payloads beyond the item size limit can never be stored, so they are swallowed as
    // they arrive instead of being buffered.
    let limits = MetaLimits {
        value_max_bytes: session.engine.config().item_size_max_bytes,
    };
    match meta::parse(input, &limits) {
        Parsed::Incomplete => Step::NeedMore,
        Parsed::Invalid {
            reply,
            consumed,
            swallow_bytes,
            close,
        } => super::refuse(session, reply, consumed, swallow_bytes, close),
        Parsed::Complete { request, consumed } => {
            if latency::enabled() {
                return execute_timed(session, request, consumed);
            }
            execute(session, request, consumed)
        }
    }
}

/// [`execute`], timed into the latency histograms (`--metrics-listen`). Kept apart so
/// that the untimed path carries nothing of it.
#[inline(never)]
fn execute_timed(session: &mut Session<'_>, request: MetaRequest<'_>, consumed: usize) -> Step {
    let started = latency::start().map(|at| (at, command_kind(&request)));
    let step = execute(session, request, consumed);
    latency::finish(started);
    step
}

/// What a request counts as in the latency histograms.
fn command_kind(request: &MetaRequest<'_>) -> CommandKind {
    match request {
        MetaRequest::Get { .. } => CommandKind::Get,
        MetaRequest::Set { .. } => CommandKind::Set,
        MetaRequest::Delete { .. } => CommandKind::Delete,
        MetaRequest::Arith { .. } => CommandKind::Arith,
        _ => CommandKind::Other,
    }
}

fn execute(session: &mut Session<'_>, request: MetaRequest<'_>, consumed: usize) -> Step {
    // The fog layer: writes go to the upstream first.
    if super::fog::is_meta_write(session, &request) {
        return super::fog::meta_write(session, &request, consumed);
    }
    match request {
        MetaRequest::Get { key, flags } => match meta_get(session, &key, &flags) {
            Some(request) => Step::Upstream {
                keys_done: 0,
                request: Box::new(request),
            },
            None => Step::Consumed(consumed),
        },
        MetaRequest::Set {
            key,
            flags,
            mode,
            value: SetValue::Data(value),
        } => {
            meta_set(session, &key, &flags, mode, value);
            Step::Consumed(consumed)
        }
        MetaRequest::Set {
            key,
            value: SetValue::TooLarge { swallow_bytes },
            ..
        } => {
            // As memcached does when it cannot allocate the item: answer, drop any
            // old value so a stale one is not served, and discard the payload.
            // memcached's `ms` unlinks in every mode, counts `store_too_large`, and
            // does not count a delete.
            session.out.extend_from_slice(TOO_LARGE);
            session.engine.refuse_too_large(key.as_bytes(), true);
            Step::Swallow {
                consumed,
                bytes: swallow_bytes,
            }
        }
        MetaRequest::Delete { key, flags } => {
            meta_delete(session, &key, &flags);
            Step::Consumed(consumed)
        }
        MetaRequest::Arith { key, flags, mode } => {
            meta_arith(session, &key, &flags, mode);
            Step::Consumed(consumed)
        }
        MetaRequest::Noop => {
            session.out.extend_from_slice(b"MN\r\n");
            Step::Consumed(consumed)
        }
        MetaRequest::Debug { key } => {
            meta_debug(session, &key);
            Step::Consumed(consumed)
        }
    }
}

/// `mg`: `VA <size> <flags>*` (with `v`) or `HD <flags>*` on a hit, `EN` on a miss.
///
/// With `--upstream`, a miss returns the request for the upstream; the call with its
/// reply answers from the reply (an upstream miss with `N` then vivifies here).
fn meta_get(
    session: &mut Session<'_>,
    key: &MetaKey<'_>,
    flags: &MetaFlags<'_>,
) -> Option<crate::upstream::UpstreamRequest> {
    let engine = session.engine;
    let out = &mut *session.out;
    let read_through = session.settings.upstream.is_some();
    if let Some(reply) = session.upstream_reply.and_then(|replies| replies.first()) {
        if let crate::upstream::UpstreamReply::Hit(fetched) = reply {
            // The edge echoes the key as this request gave it.
            let mut view = fetched.view();
            view.key_binary = key.binary;
            write_hit(out, engine, flags, &view, Ttl::Hit);
            return None;
        }
        if flags.vivify_exptime.is_none() {
            if !flags.quiet {
                write_miss(out, key, flags);
            }
            return None;
        }
    }
    let options = ReadOptions {
        touch_exptime: flags.exptime,
        no_bump: flags.no_bump,
        // With an upstream, `N` applies only once the upstream missed too.
        vivify_exptime: if read_through && session.upstream_reply.is_none() {
            None
        } else {
            created_item_exptime(flags)
        },
        vivify_key_binary: key.binary,
        recache_below_s: flags.recache_below_s,
        recache_before_touch: comes_before(flags, b'R', b'T'),
        is_touch_command: flags.exptime.is_some(),
        // memcached 1.6.18 counts an `mg T` hit as a touch but its miss as a get miss.
        miss_counts_as_get: true,
        // Only `mg` hands out the recache token of a stale item (`get` and `me` do not).
        claim_recache_token: true,
        no_stats: false,
        requester: session.client_fd,
        now_s: None,
    };
    let outcome = engine.read(key.as_bytes(), &options, |item| {
        write_hit(out, engine, flags, item, Ttl::Hit)
    });
    if read_through
        && session.upstream_reply.is_none()
        && matches!(outcome, ReadOutcome::Miss { vivified: false })
    {
        return Some(crate::upstream::UpstreamRequest::get(
            key.as_bytes(),
            flags.exptime,
        ));
    }
    let hit = matches!(outcome, ReadOutcome::Hit(()));
    session
        .stats
        .prefixes
        .record(key.as_bytes(), PrefixOp::Get { hit });
    match outcome {
        ReadOutcome::Hit(()) => {}
        ReadOutcome::Miss { vivified: true } => {
            // memcached answers a vivifying miss like a hit on the new empty item, with
            // `W`. The engine reports only that it created the item, so read it back
            // (without bumping or counting) to print its flags.
            let peek = ReadOptions {
                no_bump: true,
                no_stats: true,
                ..ReadOptions::default()
            };
            let outcome = engine.read(key.as_bytes(), &peek, |item| {
                write_hit(out, engine, flags, item, Ttl::Created)
            });
            if let ReadOutcome::Miss { .. } = outcome {
                // Evicted in between: to this client it is a plain miss.
                write_miss(out, key, flags);
            }
        }
        ReadOutcome::Miss { vivified: false } => {
            if !flags.quiet {
                write_miss(out, key, flags);
            }
        }
    }
    None
}

/// The exptime of an item that `N` creates on a miss. memcached applies `N` and `T` to
/// the new item in the order the client sent them, so a `T` after the `N` wins
/// (`mg k N100 T50` creates an item with 50 s to live, `mg k T50 N100` one with 100 s).
fn created_item_exptime(flags: &MetaFlags<'_>) -> Option<i64> {
    let vivify_exptime = flags.vivify_exptime?;
    let last_of_n_and_t = flags
        .in_order()
        .iter()
        .rev()
        .find(|&&flag| flag == b'N' || flag == b'T');
    Some(match flags.exptime {
        Some(exptime) if last_of_n_and_t == Some(&b'T') => exptime,
        _ => vivify_exptime,
    })
}

/// Whether flag `first` appears before flag `second` in the request (both present).
fn comes_before(flags: &MetaFlags<'_>, first: u8, second: u8) -> bool {
    let order = flags.in_order();
    let at = |flag| order.iter().position(|&f| f == flag);
    matches!((at(first), at(second)), (Some(a), Some(b)) if a < b)
}

/// Whether the item a reply shows was there before the request (`Hit`) or created by it
/// (`Created`: `mg N`, `ma N`), for the TTL that `t` reports.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ttl {
    Hit,
    Created,
}

/// The TTL `t` reports at position `at` of the request's flags. memcached applies the
/// flags in the order sent: on a hit, a `t` before `T` sees the TTL the item had; an
/// item the request creates has no expiry (-1) until its `N` or `T`, and a `t` between
/// the two sees the first one's.
fn ttl_at(
    engine: &Engine,
    flags: &MetaFlags<'_>,
    ttl_remaining_s: Option<u32>,
    ttl_before_touch_s: Option<u32>,
    kind: Ttl,
    at: usize,
) -> Option<u32> {
    let order = flags.in_order();
    let setters: &[u8] = match kind {
        Ttl::Hit => b"T",
        Ttl::Created => b"NT",
    };
    let mut applied = order[..at].iter().filter(|f| setters.contains(f));
    let Some(&first) = applied.next() else {
        return match kind {
            Ttl::Hit => ttl_before_touch_s,
            Ttl::Created => None,
        };
    };
    let all_applied = order[at..].iter().all(|f| !setters.contains(f));
    if all_applied {
        return ttl_remaining_s;
    }
    // Only a created item can be here: the first of its N and T, the other one to come.
    let exptime = if first == b'N' {
        flags.vivify_exptime
    } else {
        flags.exptime
    };
    exptime.and_then(|e| engine.ttl_for_exptime(e))
}

fn write_hit(
    out: &mut Vec<u8>,
    engine: &Engine,
    flags: &MetaFlags<'_>,
    item: &ItemView<'_>,
    kind: Ttl,
) {
    let value_bytes = item.value.len() as u64;
    if flags.return_value {
        out.extend_from_slice(b"VA ");
        push_u64(out, value_bytes);
    } else {
        out.extend_from_slice(b"HD");
    }
    for (at, &flag) in flags.in_order().iter().enumerate() {
        match flag {
            b's' => push_numeric_flag(out, b's', value_bytes),
            b't' => {
                let ttl_s = ttl_at(
                    engine,
                    flags,
                    item.ttl_remaining_s,
                    item.ttl_before_touch_s,
                    kind,
                    at,
                );
                push_ttl_flag(out, ttl_s);
            }
            b'c' => push_numeric_flag(out, b'c', item.cas),
            b'f' => push_numeric_flag(out, b'f', u64::from(item.client_flags)),
            b'l' => push_numeric_flag(out, b'l', u64::from(item.last_access_ago_s)),
            b'h' => push_numeric_flag(out, b'h', u64::from(item.fetched_before)),
            b'O' => push_opaque(out, flags),
            // The key as it was stored (memcached's ITEM_KEY_BINARY), not as asked.
            b'k' => push_key_flag(out, item.key, item.key_binary),
            _ => {}
        }
    }
    // memcached's order: Z (someone else holds the token), X (stale), W (this client won).
    // The request that created the item holds the token, so it sees W and never Z.
    if kind == Ttl::Created {
        out.extend_from_slice(b" W");
    } else {
        if item.win_token_already_sent {
            out.extend_from_slice(b" Z");
        }
        if item.stale {
            out.extend_from_slice(b" X");
        }
        if item.win {
            out.extend_from_slice(b" W");
        }
    }
    out.extend_from_slice(b"\r\n");
    if flags.return_value {
        out.extend_from_slice(item.value);
        out.extend_from_slice(b"\r\n");
    }
}

fn write_miss(out: &mut Vec<u8>, key: &MetaKey<'_>, flags: &MetaFlags<'_>) {
    out.extend_from_slice(b"EN");
    push_opaque_and_key(out, key, flags);
    out.extend_from_slice(b"\r\n");
}

fn push_opaque(out: &mut Vec<u8>, flags: &MetaFlags<'_>) {
    if let Some(opaque) = flags.opaque {
        push_opaque_flag(out, opaque);
    }
}

/// The `O` and `k` echoes, in request order: all that a status without an item carries.
fn push_opaque_and_key(out: &mut Vec<u8>, key: &MetaKey<'_>, flags: &MetaFlags<'_>) {
    for &flag in flags.in_order() {
        match flag {
            b'O' => push_opaque(out, flags),
            b'k' => push_key_flag(out, key.as_bytes(), key.binary),
            _ => {}
        }
    }
}

/// `ms`: `HD`, `NS`, `EX` or `NF`, echoing `O`, `k` and `c` (the new CAS, 0 on failure).
fn meta_set(
    session: &mut Session<'_>,
    key: &MetaKey<'_>,
    flags: &MetaFlags<'_>,
    mode: SetMode,
    value: &[u8],
) {
    let store_mode = match mode {
        SetMode::Set => StoreMode::Set,
        SetMode::Add => StoreMode::Add,
        SetMode::Replace => StoreMode::Replace,
        SetMode::Append => StoreMode::Append,
        SetMode::Prepend => StoreMode::Prepend,
    };
    let concatenates = matches!(mode, SetMode::Append | SetMode::Prepend);
    let mut options = StoreOptions::new(
        store_mode,
        flags.client_flags.unwrap_or(0),
        flags.exptime.unwrap_or(0),
    );
    // memcached turns set/replace with a CAS into its `cas` command, checks the CAS of
    // append/prepend, and ignores it for add.
    options.compare_cas = match mode {
        SetMode::Add => None,
        _ => flags.compare_cas,
    };
    options.new_cas = flags.new_cas;
    // `I` only matters to the `cas` form: an older CAS then stores the item as stale.
    options.invalidate = flags.invalidate
        && flags.compare_cas.is_some()
        && matches!(mode, SetMode::Set | SetMode::Replace);
    options.vivify_exptime = if concatenates {
        flags.vivify_exptime
    } else {
        None
    };
    options.key_binary = key.binary;
    options.requester = session.client_fd;
    session.stats.prefixes.record(key.as_bytes(), PrefixOp::Set);

    let engine = session.engine;
    let out = &mut *session.out;
    let (status, cas): (&[u8], u64) = match engine.store(key.as_bytes(), value, &options) {
        StoreOutcome::Stored { cas } => (b"HD", cas),
        StoreOutcome::NotStored => (b"NS", 0),
        StoreOutcome::Exists => (b"EX", 0),
        // append/prepend never report "not found": a missing item is simply not stored.
        StoreOutcome::NotFound if concatenates => (b"NS", 0),
        StoreOutcome::NotFound => (b"NF", 0),
        refused @ (StoreOutcome::TooLarge | StoreOutcome::OutOfMemory) => {
            // memcached's `ms` unlinks the old value whenever it cannot allocate the new
            // one, in every mode; the engine already counted the refusal.
            engine.unlink_key(key.as_bytes());
            out.extend_from_slice(if refused == StoreOutcome::TooLarge {
                TOO_LARGE
            } else {
                STORE_OUT_OF_MEMORY
            });
            return;
        }
    };
    if status == b"HD" && flags.quiet {
        return;
    }
    out.extend_from_slice(status);
    for &flag in flags.in_order() {
        match flag {
            b'O' => push_opaque(out, flags),
            b'k' => push_key_flag(out, key.as_bytes(), key.binary),
            b'c' => push_numeric_flag(out, b'c', cas),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// `md`: `HD`, `NF` or `EX`, echoing `O` and `k`.
fn meta_delete(session: &mut Session<'_>, key: &MetaKey<'_>, flags: &MetaFlags<'_>) {
    let options = DeleteOptions {
        compare_cas: flags.compare_cas,
        invalidate: flags.invalidate,
        // memcached retimes the item only when it marks it stale.
        new_exptime: if flags.invalidate {
            flags.exptime
        } else {
            None
        },
        remove_value_only: flags.remove_value,
        new_cas: flags.new_cas,
    };
    session
        .stats
        .prefixes
        .record(key.as_bytes(), PrefixOp::Delete);
    let status: &[u8] = match session.engine.delete(key.as_bytes(), &options) {
        DeleteOutcome::Deleted if flags.quiet => return,
        DeleteOutcome::Deleted => b"HD",
        DeleteOutcome::NotFound => b"NF",
        DeleteOutcome::Exists => b"EX",
    };
    let out = &mut *session.out;
    out.extend_from_slice(status);
    push_opaque_and_key(out, key, flags);
    out.extend_from_slice(b"\r\n");
}

/// `ma`: `HD` or `VA <len>` with the new number, `NF`, `EX`; `N` creates a missing item
/// with the `J` initial value (not incremented).
fn meta_arith(
    session: &mut Session<'_>,
    key: &MetaKey<'_>,
    flags: &MetaFlags<'_>,
    mode: ArithMode,
) {
    let engine = session.engine;
    let mut options = ArithOptions::new(mode == ArithMode::Increment, flags.delta.unwrap_or(1));
    options.compare_cas = flags.compare_cas;
    options.new_cas = flags.new_cas;
    options.touch_exptime = flags.exptime;
    options.key_binary = key.binary;
    // memcached's `q` hides the reply of an update but not of a creation, and the engine
    // does not say which one happened: try the update first, and create only on a miss.
    let creates = created_item_exptime(flags);
    options.creates_on_miss = creates.is_some();
    let mut outcome = engine.arith(key.as_bytes(), &options);
    let mut created = false;
    if let (ArithOutcome::NotFound, Some(exptime)) = (outcome, creates) {
        options.vivify = Some((flags.initial.unwrap_or(0), exptime));
        outcome = engine.arith(key.as_bytes(), &options);
        created = true;
    }
    let out = &mut *session.out;
    match outcome {
        ArithOutcome::Value {
            value,
            cas,
            ttl_remaining_s,
            ttl_before_touch_s,
        } => {
            if flags.quiet && !created {
                return;
            }
            if flags.return_value {
                out.extend_from_slice(b"VA ");
                push_u64(out, decimal_digits(value));
            } else {
                out.extend_from_slice(b"HD");
            }
            let kind = if created { Ttl::Created } else { Ttl::Hit };
            for (at, &flag) in flags.in_order().iter().enumerate() {
                match flag {
                    b'c' => push_numeric_flag(out, b'c', cas),
                    b't' => {
                        let ttl_s =
                            ttl_at(engine, flags, ttl_remaining_s, ttl_before_touch_s, kind, at);
                        push_ttl_flag(out, ttl_s);
                    }
                    b'O' => push_opaque(out, flags),
                    b'k' => push_key_flag(out, key.as_bytes(), key.binary),
                    _ => {}
                }
            }
            out.extend_from_slice(b"\r\n");
            if flags.return_value {
                push_u64(out, value);
                out.extend_from_slice(b"\r\n");
            }
        }
        ArithOutcome::NotFound | ArithOutcome::Exists => {
            out.extend_from_slice(if outcome == ArithOutcome::NotFound {
                b"NF"
            } else {
                b"EX"
            });
            push_opaque_and_key(out, key, flags);
            out.extend_from_slice(b"\r\n");
        }
        ArithOutcome::NonNumeric => out.extend_from_slice(NON_NUMERIC),
        ArithOutcome::OutOfMemory if created => out.extend_from_slice(VIVIFY_OUT_OF_MEMORY),
        ArithOutcome::OutOfMemory => out.extend_from_slice(ARITH_OUT_OF_MEMORY),
    }
}

/// How many decimal digits `n` has.
fn decimal_digits(n: u64) -> u64 {
    let mut digits = 1;
    let mut rest = n / 10;
    while rest > 0 {
        digits += 1;
        rest /= 10;
    }
    digits
}

/// `me`: memcached's debug line, or `EN`. `exp` is memcached's `current_time - exptime`,
/// so a live item with a TTL shows it negated; `-1` means it never expires.
fn meta_debug(session: &mut Session<'_>, key: &MetaKey<'_>) {
    let engine = session.engine;
    let out = &mut *session.out;
    let options = ReadOptions {
        no_bump: true,
        no_stats: true,
        ..ReadOptions::default()
    };
    let outcome = engine.read(key.as_bytes(), &options, |item| {
        out.extend_from_slice(b"ME ");
        // As `k`: the key as it was stored, whatever the encoding asked with.
        push_key(out, item.key, item.key_binary);
        out.extend_from_slice(b" exp=");
        match item.ttl_remaining_s {
            Some(ttl_s) => push_i64(out, -i64::from(ttl_s)),
            None => out.extend_from_slice(b"-1"),
        }
        out.extend_from_slice(b" la=");
        push_u64(out, u64::from(item.last_access_ago_s));
        out.extend_from_slice(b" cas=");
        push_u64(out, item.cas);
        out.extend_from_slice(if item.fetched_before {
            b" fetch=yes cls="
        } else {
            b" fetch=no cls="
        });
        push_u64(out, u64::from(item.slab_class));
        out.extend_from_slice(b" size=");
        push_u64(out, item.total_size_bytes as u64);
        out.extend_from_slice(b"\r\n");
    });
    if let ReadOutcome::Miss { .. } = outcome {
        out.extend_from_slice(b"EN\r\n");
    }
}

#[cfg(test)]
mod tests;
