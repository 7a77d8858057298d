//! Binary protocol dispatch: one request from the front of the input, applied to the
//! engine, answered the way memcached 1.6's `proto_bin.c` answers it.
//!
//! memcached's rules worth knowing when reading this file:
//! - quiet opcodes (`*Q`) send nothing on success; `getq`/`getkq`/`gatq`/`gatkq` send
//!   nothing on a miss either; errors are always sent;
//! - every response echoes the request's opcode byte and opaque; a stored or read item's
//!   CAS travels in the header, errors carry CAS 0 and a fixed text body;
//! - `set`/`add`/`replace` with a non-zero CAS become a compare-and-swap, whatever the
//!   opcode; `append`/`prepend` compare it too;
//! - length errors reply and close the connection, a bad magic byte closes it silently.

use engine::{
    ArithOptions, ArithOutcome, ClientExptime, DeleteOptions, DeleteOutcome, ReadOptions,
    ReadOutcome, StoreMode, StoreOptions, StoreOutcome,
};
use protocol::binary::{
    self, BinaryLimits, BinaryRequest, Command, RequestHeader, Status, StoreKind,
    ARITH_EXPTIME_NO_CREATE,
};
use protocol::Parsed;

use crate::detail::PrefixOp;
use crate::latency::{self, CommandKind};
use crate::session::{Session, Step, SERVER_VERSION};
use crate::stats_reply::{self, StatsGroup};

/// Handles the request at the front of `input` (binary protocol).
pub fn handle(session: &mut Session<'_>, input: &[u8]) -> Step {
    let limits = BinaryLimits {
        value_max_bytes: session.engine.config().item_size_max_bytes,
    };
    match binary::parse(input, &limits) {
        Parsed::Incomplete => Step::NeedMore,
        Parsed::Invalid {
            reply,
            consumed,
            swallow_bytes,
            close,
        } => super::refuse(session, reply, consumed, swallow_bytes, close),
        Parsed::Complete { request, consumed } => {
            if latency::enabled() {
                return execute_timed(session, &request, consumed);
            }
            execute(session, &request, consumed)
        }
    }
}

/// [`execute`], timed into the latency histograms (`--metrics-listen`). Kept apart so
/// that the untimed path carries nothing of it.
#[inline(never)]
fn execute_timed(session: &mut Session<'_>, request: &BinaryRequest<'_>, consumed: usize) -> Step {
    let started = latency::start().map(|at| {
        let kind = match request.command {
            Command::Get { .. } | Command::GetAndTouch { .. } => CommandKind::Get,
            Command::Store { .. } | Command::StoreTooLarge { .. } => CommandKind::Set,
            Command::Delete { .. } => CommandKind::Delete,
            Command::Arith { .. } => CommandKind::Arith,
            Command::Touch { .. } => CommandKind::Touch,
            _ => CommandKind::Other,
        };
        (at, kind)
    });
    let step = execute(session, request, consumed);
    latency::finish(started);
    step
}

fn execute(session: &mut Session<'_>, request: &BinaryRequest<'_>, consumed: usize) -> Step {
    let header = &request.header;
    let settings = session.settings;
    if settings.upstream.is_some() {
        // The fog layer: writes go to the upstream first.
        if let Some(step) = super::fog::binary_write(session, request, consumed) {
            return step;
        }
    }
    let fetch = match request.command {
        Command::Get {
            key,
            return_key,
            quiet,
        } => read(session, header, key, None, return_key, quiet),
        Command::GetAndTouch {
            key,
            exptime,
            return_key,
            quiet,
        } => read(session, header, key, Some(exptime), return_key, quiet),
        _ => None,
    };
    if let Some(request) = fetch {
        return Step::Upstream {
            keys_done: 0,
            request: Box::new(request),
        };
    }
    match request.command {
        Command::Get { .. } | Command::GetAndTouch { .. } => {}
        Command::Touch { key, exptime } => touch(session, header, key, exptime),
        Command::Store {
            kind,
            key,
            value,
            flags,
            exptime,
            quiet,
        } => store(session, header, kind, key, value, flags, exptime, quiet),
        Command::StoreTooLarge {
            kind,
            key,
            value_len,
            ..
        } => {
            // memcached counts `store_too_large` and unlinks the old value of a `set`
            // (with or without a CAS) that can never fit, so a reader does not keep
            // seeing data the client meant to replace. Not a delete in the statistics.
            session.engine.refuse_too_large(key, kind == StoreKind::Set);
            error(session, header, Status::TooLarge);
            return Step::Swallow {
                consumed,
                bytes: value_len,
            };
        }
        Command::Delete { key, quiet } => delete(session, header, key, quiet),
        Command::Arith {
            increment,
            key,
            delta,
            initial,
            exptime,
            quiet,
        } => {
            let mut opts = ArithOptions::new(increment, delta);
            opts.compare_cas = nonzero(header.cas);
            if exptime != ARITH_EXPTIME_NO_CREATE {
                opts.vivify = Some((initial, ClientExptime::from(exptime)));
            }
            match session.engine.arith(key, &opts) {
                ArithOutcome::Value { value, cas, .. } => {
                    if !quiet {
                        binary::encode_counter(
                            session.out,
                            header.opcode,
                            header.opaque,
                            cas,
                            value,
                        );
                    }
                }
                ArithOutcome::NotFound => error(session, header, Status::KeyNotFound),
                ArithOutcome::NonNumeric => error(session, header, Status::NonNumeric),
                ArithOutcome::Exists => error(session, header, Status::KeyExists),
                ArithOutcome::OutOfMemory => {
                    // memcached names what it could not allocate: the item a miss would
                    // have created, or the longer number of an increment.
                    let creating = opts.vivify.is_some() && !exists(session, key);
                    out_of_memory(
                        session,
                        header,
                        if creating {
                            b"Out of memory allocating new item"
                        } else {
                            b"Out of memory incrementing value"
                        },
                    );
                }
            }
        }
        Command::Flush { exptime, quiet } => {
            if session.settings.flush_enabled {
                session.engine.flush_all(ClientExptime::from(exptime));
                if !quiet {
                    success(session, header, 0);
                }
            } else {
                // `-F`: memcached 1.6.18 answers "Auth failure." even to FLUSHQ, and
                // does not count the command.
                error(session, header, Status::AuthError);
            }
        }
        Command::Noop => success(session, header, 0),
        Command::Version => binary::encode_response(
            session.out,
            &binary::Response {
                opcode: header.opcode,
                status: Status::NoError,
                opaque: header.opaque,
                cas: 0,
                extras: b"",
                key: b"",
                value: SERVER_VERSION.as_bytes(),
            },
        ),
        Command::Stat { group } => stat(session, header, group),
        Command::Quit { quiet } => {
            if !quiet {
                success(session, header, 0);
            }
            return Step::Close;
        }
        Command::Unknown { swallow_bytes } => {
            error(session, header, Status::UnknownCommand);
            if swallow_bytes > 0 {
                return Step::Swallow {
                    consumed,
                    bytes: swallow_bytes,
                };
            }
        }
        Command::ProtocolError { status } => {
            error(session, header, status);
            return Step::Close;
        }
    }
    Step::Consumed(consumed)
}

fn success(session: &mut Session<'_>, header: &RequestHeader, cas: u64) {
    binary::encode_success(session.out, header.opcode, header.opaque, cas);
}

fn error(session: &mut Session<'_>, header: &RequestHeader, status: Status) {
    binary::encode_error(session.out, header.opcode, header.opaque, status);
}

/// "Out of memory" with memcached's words for what could not be allocated (its
/// `out_of_memory` sends the text error's message, `SERVER_ERROR ` dropped).
fn out_of_memory(session: &mut Session<'_>, header: &RequestHeader, message: &[u8]) {
    binary::encode_response(
        session.out,
        &binary::Response {
            opcode: header.opcode,
            status: Status::OutOfMemory,
            opaque: header.opaque,
            cas: 0,
            extras: b"",
            key: b"",
            value: message,
        },
    );
}

/// Whether `key` has a live item (read without counting or bumping it).
fn exists(session: &Session<'_>, key: &[u8]) -> bool {
    let peek = ReadOptions {
        no_bump: true,
        no_stats: true,
        ..ReadOptions::default()
    };
    matches!(
        session.engine.read(key, &peek, |_| ()),
        engine::ReadOutcome::Hit(())
    )
}

/// A CAS of 0 in a request header means "no compare".
fn nonzero(cas: u64) -> Option<u64> {
    (cas != 0).then_some(cas)
}

/// `get getq getk getkq` and, with `touch_exptime`, `gat gatq gatk gatkq`.
///
/// With `--upstream`, a miss returns the request for the upstream; the call with its
/// reply answers from the reply.
fn read(
    session: &mut Session<'_>,
    header: &RequestHeader,
    key: &[u8],
    touch_exptime: Option<u32>,
    return_key: bool,
    quiet: bool,
) -> Option<crate::upstream::UpstreamRequest> {
    let opts = ReadOptions {
        touch_exptime: touch_exptime.map(ClientExptime::from),
        is_touch_command: touch_exptime.is_some(),
        requester: session.client_fd,
        ..ReadOptions::default()
    };
    let out = &mut *session.out;
    let encode = |out: &mut Vec<u8>, item: &engine::ItemView<'_>| {
        let reply_key = if return_key { item.key } else { b"" };
        binary::encode_item(
            out,
            header,
            item.client_flags,
            item.cas,
            reply_key,
            item.value,
        );
    };
    let hit = match session.upstream_reply.map(|replies| replies.first()) {
        Some(Some(crate::upstream::UpstreamReply::Hit(fetched))) => {
            encode(out, &fetched.view());
            true
        }
        Some(_) => false,
        None => {
            let outcome = session.engine.read(key, &opts, |item| encode(out, item));
            let hit = matches!(outcome, ReadOutcome::Hit(()));
            if !hit && session.settings.upstream.is_some() {
                let touch_exptime = touch_exptime.map(ClientExptime::from);
                return Some(crate::upstream::UpstreamRequest::get(key, touch_exptime));
            }
            hit
        }
    };
    session.stats.prefixes.record(key, PrefixOp::Get { hit });
    if !hit {
        if quiet {
            return None;
        }
        if return_key {
            // memcached answers a `getk`/`gatk` miss with the key instead of the text.
            binary::encode_response(
                session.out,
                &binary::Response {
                    opcode: header.opcode,
                    status: Status::KeyNotFound,
                    opaque: header.opaque,
                    cas: 0,
                    extras: b"",
                    key,
                    value: b"",
                },
            );
        } else {
            error(session, header, Status::KeyNotFound);
        }
    }
    None
}

/// `touch`: like `gat`, but the reply carries only the flags.
fn touch(session: &mut Session<'_>, header: &RequestHeader, key: &[u8], exptime: u32) {
    let opts = ReadOptions {
        touch_exptime: Some(ClientExptime::from(exptime)),
        is_touch_command: true,
        ..ReadOptions::default()
    };
    let out = &mut *session.out;
    let outcome = session.engine.read(key, &opts, |item| {
        binary::encode_item(out, header, item.client_flags, item.cas, b"", b"");
    });
    if let ReadOutcome::Miss { .. } = outcome {
        error(session, header, Status::KeyNotFound);
    }
}

#[allow(clippy::too_many_arguments)] // one argument per field of the request
fn store(
    session: &mut Session<'_>,
    header: &RequestHeader,
    kind: StoreKind,
    key: &[u8],
    value: &[u8],
    flags: u32,
    exptime: u32,
    quiet: bool,
) {
    let compare_cas = nonzero(header.cas);
    let mode = match kind {
        // With a CAS, memcached turns set/add/replace into a plain compare-and-swap.
        StoreKind::Set | StoreKind::Add | StoreKind::Replace if compare_cas.is_some() => {
            StoreMode::Set
        }
        StoreKind::Set => StoreMode::Set,
        StoreKind::Add => StoreMode::Add,
        StoreKind::Replace => StoreMode::Replace,
        StoreKind::Append => StoreMode::Append,
        StoreKind::Prepend => StoreMode::Prepend,
    };
    let mut opts = StoreOptions::new(mode, flags, ClientExptime::from(exptime));
    opts.compare_cas = compare_cas;
    opts.requester = session.client_fd;
    session.stats.prefixes.record(key, PrefixOp::Set);
    let concat = matches!(kind, StoreKind::Append | StoreKind::Prepend);
    let status = match session.engine.store(key, value, &opts) {
        StoreOutcome::Stored { cas } => {
            if !quiet {
                success(session, header, cas);
            }
            return;
        }
        StoreOutcome::Exists => Status::KeyExists,
        // memcached's `complete_update_bin` maps a refused store by opcode.
        StoreOutcome::NotStored => match kind {
            StoreKind::Add => Status::KeyExists,
            StoreKind::Replace => Status::KeyNotFound,
            _ => Status::NotStored,
        },
        // A CAS store on a missing item; append/prepend never find "not found", only
        // "not stored".
        StoreOutcome::NotFound if concat => Status::NotStored,
        StoreOutcome::NotFound => Status::KeyNotFound,
        // The new value alone too large is "Too large."; an append that would only
        // outgrow the limit together with the old value is "Not stored.".
        StoreOutcome::TooLarge if concat && session.engine.item_fits(key.len(), value.len()) => {
            Status::NotStored
        }
        StoreOutcome::TooLarge => Status::TooLarge,
        StoreOutcome::OutOfMemory => {
            out_of_memory(session, header, b"Out of memory allocating item");
            return;
        }
    };
    error(session, header, status);
}

fn delete(session: &mut Session<'_>, header: &RequestHeader, key: &[u8], quiet: bool) {
    let opts = DeleteOptions {
        compare_cas: nonzero(header.cas),
        ..DeleteOptions::default()
    };
    session.stats.prefixes.record(key, PrefixOp::Delete);
    match session.engine.delete(key, &opts) {
        DeleteOutcome::Deleted => {
            if !quiet {
                success(session, header, 0);
            }
        }
        DeleteOutcome::NotFound => error(session, header, Status::KeyNotFound),
        DeleteOutcome::Exists => error(session, header, Status::KeyExists),
    }
}

/// `stat [group]`: one response per statistic, then an empty one as terminator, as
/// memcached's `process_bin_stat` answers: `reset`, `settings` and `detail` are matched
/// as prefixes of the key (memcached's `strncmp`), so `resetx` resets; `detail on|off`
/// answer the terminator alone and `detail dump` one `detailed` statistic holding the
/// whole text dump; `items`, `slabs` and `sizes` must match exactly, and every other
/// group, `conns` included, is `Not found` (memcached serves `conns` over the text
/// protocol only).
fn stat(session: &mut Session<'_>, header: &RequestHeader, group: &[u8]) {
    let group = if group.is_empty() {
        Some(StatsGroup::General)
    } else if group.starts_with(b"reset") {
        stats_reply::reset(session);
        None
    } else if group.starts_with(b"settings") {
        Some(StatsGroup::Settings)
    } else if let Some(detail) = group.strip_prefix(b"detail") {
        let prefixes = &session.stats.prefixes;
        if detail.starts_with(b" dump") {
            let mut dump = Vec::new();
            prefixes.dump(&mut dump);
            binary::encode_stat(
                session.out,
                header.opcode,
                header.opaque,
                b"detailed",
                &dump,
            );
        } else if detail.starts_with(b" on") {
            prefixes.set_enabled(true);
        } else if detail.starts_with(b" off") {
            prefixes.set_enabled(false);
        } else {
            error(session, header, Status::KeyNotFound);
            return;
        }
        None
    } else {
        match group {
            b"items" => Some(StatsGroup::Items),
            b"slabs" => Some(StatsGroup::Slabs),
            b"sizes" => Some(StatsGroup::Sizes),
            // fogcached's own group, with no text-only counterpart to follow.
            b"upstreams" => Some(StatsGroup::Upstreams),
            _ => {
                error(session, header, Status::KeyNotFound);
                return;
            }
        }
    };
    if let Some(group) = group {
        // `collect` reads the whole session, so the replies go to the output buffer taken
        // out of it for the duration (no copy, no extra allocation).
        let mut out = std::mem::take(session.out);
        stats_reply::collect(session, group, &mut |name, value| {
            binary::encode_stat(
                &mut out,
                header.opcode,
                header.opaque,
                name.as_bytes(),
                value.as_bytes(),
            );
        });
        *session.out = out;
    }
    binary::encode_stat(session.out, header.opcode, header.opaque, b"", b"");
}

#[cfg(test)]
mod tests;
