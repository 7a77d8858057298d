//! The fog layer's writes (`--upstream`): a write goes to the upstream first; the edge's
//! copy is updated (`--upstream-writes through`) or removed (`invalidate`) only once the
//! upstream answered — by the upstream loop, in the order the upstream applied the key's
//! writes, before the reply comes here (`upstream/io/edge.rs`, `Io::apply_to_edge`) — and the
//! client gets the upstream's answer in its own protocol.
//!
//! The first call of a write returns [`Step::Upstream`] with the request; the runtime
//! parks the connection and calls again with the reply in `Session::upstream_reply`.
//! Reads are handled where they are (`text::get`, `meta::meta_get`, `binary::read`): a
//! miss becomes a `Step::Upstream` there.

use engine::{ReadOptions, ReadOutcome};
use protocol::binary::{
    self, BinaryRequest, Command, StoreKind as BinaryStoreKind, ARITH_EXPTIME_NO_CREATE,
};
use protocol::meta::{
    push_key_flag, push_numeric_flag, push_opaque_flag, push_u64, ArithMode, MetaFlags, MetaKey,
    MetaRequest, SetMode, SetValue,
};
use protocol::text::{Keys, StoreCommand, TextRequest};

use crate::session::{Session, Step};
use crate::upstream::{Failure, StoreKind, UpstreamOp, UpstreamReply, UpstreamRequest};

/// `get gets gat gats` with an upstream: `text::get`'s loop (streaming at the output
/// mark included) where a key that misses stops the request with [`Step::Upstream`]
/// (the keys before it answered), asking for it and for the later keys that miss too;
/// the call with the upstream's replies answers those keys from the replies and reads
/// the others here. (A loop of its own, so that `text::get` without an upstream costs
/// what it did.)
pub fn get_read_through(
    session: &mut Session<'_>,
    keys: Keys<'_>,
    return_cas: bool,
    touch_exptime: Option<i64>,
    consumed: usize,
) -> Step {
    let engine = session.engine;
    let options = ReadOptions {
        touch_exptime,
        is_touch_command: touch_exptime.is_some(),
        ..ReadOptions::default()
    };
    let upstream_replies = session.upstream_reply;
    let out_high_water_bytes = session.out_high_water_bytes;
    let out = &mut *session.out;
    let keys_before = |key: &[u8]| {
        keys.iter()
            .take_while(|done| done.as_ptr() != key.as_ptr())
            .count()
    };
    let mut mark_reached = false;
    for key in keys.iter().skip(session.resume_keys) {
        if mark_reached {
            return Step::Partial {
                keys_done: keys_before(key),
            };
        }
        if let Some(reply) = upstream_replies.and_then(|replies| replies.get(key)) {
            // This key missed here and was asked of the upstream (counted as a miss then).
            if let UpstreamReply::Hit(fetched) = reply {
                super::text::push_value(out, &fetched.view(), return_cas);
                mark_reached = out.len() >= out_high_water_bytes;
            }
            continue;
        }
        let outcome = engine.read(key, &options, |item| {
            super::text::push_value(out, item, return_cas);
            mark_reached = out.len() >= out_high_water_bytes;
        });
        if let ReadOutcome::Miss { .. } = outcome {
            let keys_done = keys_before(key);
            // The keys after it that miss too go with it (a `gat` goes alone).
            let request = match touch_exptime {
                None => UpstreamRequest::get_batch(engine, key, keys.iter().skip(keys_done + 1)),
                Some(_) => UpstreamRequest::get(key, touch_exptime),
            };
            return Step::Upstream {
                keys_done,
                request: Box::new(request),
            };
        }
    }
    out.extend_from_slice(super::text::END);
    Step::Consumed(consumed)
}

/// The text reply for an upstream's answer to a write whose success reads `done`.
fn text_status<'r>(reply: &'r UpstreamReply, done: &'static [u8]) -> &'r [u8] {
    match reply {
        UpstreamReply::Done { .. } => done,
        UpstreamReply::NotStored => b"NOT_STORED\r\n",
        UpstreamReply::Exists => b"EXISTS\r\n",
        UpstreamReply::NotFound => b"NOT_FOUND\r\n",
        UpstreamReply::NonNumeric => {
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        }
        UpstreamReply::Error(line) => line,
        UpstreamReply::Failed(failure) => failure.server_error(),
        UpstreamReply::Hit(_) | UpstreamReply::Miss | UpstreamReply::Number { .. } => {
            Failure::Protocol.server_error()
        }
    }
}

/// A write of the text protocol (`set add replace append prepend cas delete incr decr
/// touch`), passed on to the upstream; `None` for every other request.
pub fn text_write(
    session: &mut Session<'_>,
    request: &TextRequest<'_>,
    consumed: usize,
) -> Option<Step> {
    let reply = session.upstream_reply.and_then(|replies| replies.first());
    let park = |key: &[u8], op: UpstreamOp| Some(upstream_step(key, op));
    let (noreply, done): (bool, &'static [u8]) = match *request {
        TextRequest::Store {
            command,
            key,
            client_flags,
            exptime,
            cas_unique,
            value,
            noreply,
        } => {
            let kind = match command {
                StoreCommand::Set | StoreCommand::Cas => StoreKind::Set,
                StoreCommand::Add => StoreKind::Add,
                StoreCommand::Replace => StoreKind::Replace,
                StoreCommand::Append => StoreKind::Append,
                StoreCommand::Prepend => StoreKind::Prepend,
            };
            if reply.is_none() {
                return park(
                    key,
                    UpstreamOp::Store {
                        kind,
                        client_flags,
                        exptime,
                        compare_cas: (command == StoreCommand::Cas).then_some(cas_unique),
                        value: value.to_vec(),
                    },
                );
            }
            (noreply, b"STORED\r\n")
        }
        TextRequest::Delete { key, noreply } => {
            if reply.is_none() {
                return park(key, UpstreamOp::Delete { compare_cas: None });
            }
            (noreply, b"DELETED\r\n")
        }
        TextRequest::Arith {
            key,
            increment,
            delta,
            noreply,
        } => {
            let Some(reply) = reply else {
                let op = UpstreamOp::Arith {
                    increment,
                    delta,
                    create: None,
                };
                return park(key, op);
            };
            if !noreply {
                if let UpstreamReply::Number { value, .. } = reply {
                    push_u64(session.out, *value);
                    session.out.extend_from_slice(b"\r\n");
                } else {
                    session.out.extend_from_slice(text_status(reply, b""));
                }
            }
            return Some(Step::Consumed(consumed));
        }
        TextRequest::Touch {
            key,
            exptime,
            noreply,
        } => {
            if reply.is_none() {
                return park(key, UpstreamOp::Touch { exptime });
            }
            (noreply, b"TOUCHED\r\n")
        }
        _ => return None,
    };
    let reply = reply?;
    if !noreply {
        session.out.extend_from_slice(text_status(reply, done));
    }
    Some(Step::Consumed(consumed))
}

/// The `O` and `k` echoes of a meta status, in request order, and `c` when asked.
fn push_meta_echoes(out: &mut Vec<u8>, key: &MetaKey<'_>, flags: &MetaFlags<'_>, cas: u64) {
    for &flag in flags.in_order() {
        match flag {
            b'O' => {
                if let Some(opaque) = flags.opaque {
                    push_opaque_flag(out, opaque);
                }
            }
            b'k' => push_key_flag(out, key.as_bytes(), key.binary),
            b'c' => push_numeric_flag(out, b'c', cas),
            _ => {}
        }
    }
}

/// A meta status line (`HD`, `NS`, ...) or the error line of a failed write.
fn meta_status(
    out: &mut Vec<u8>,
    reply: &UpstreamReply,
    key: &MetaKey<'_>,
    flags: &MetaFlags<'_>,
    not_found: &[u8],
) {
    let (status, cas): (&[u8], u64) = match reply {
        UpstreamReply::Done { cas } => {
            if flags.quiet {
                return;
            }
            (b"HD", cas.unwrap_or(0))
        }
        UpstreamReply::NotStored => (b"NS", 0),
        UpstreamReply::Exists => (b"EX", 0),
        UpstreamReply::NotFound => (not_found, 0),
        other => {
            out.extend_from_slice(text_status(other, b""));
            return;
        }
    };
    out.extend_from_slice(status);
    push_meta_echoes(out, key, flags, cas);
    out.extend_from_slice(b"\r\n");
}

/// Whether `request` is a meta write the fog layer passes on (the server has an
/// upstream, and it is an `ms` with its data, an `md` or an `ma`).
pub fn is_meta_write(session: &Session<'_>, request: &MetaRequest<'_>) -> bool {
    session.settings.upstream.is_some()
        && matches!(
            request,
            MetaRequest::Set {
                value: SetValue::Data(_),
                ..
            } | MetaRequest::Delete { .. }
                | MetaRequest::Arith { .. }
        )
}

/// A meta write (`ms md ma`, see [`is_meta_write`]), passed on to the upstream.
/// The flags that have no upstream form (`I`, `E`, `x`, `ms N`, `ma C`/`T`) are refused
/// with `SERVER_ERROR not supported by the upstream`, never applied to the edge alone.
pub fn meta_write(session: &mut Session<'_>, request: &MetaRequest<'_>, consumed: usize) -> Step {
    if session.settings.upstream.is_none() {
        // Not a fog-layer server: `is_meta_write` said no; nothing to pass on.
        return Step::Consumed(consumed);
    }
    meta_write_to(session, request, consumed).unwrap_or(Step::Consumed(consumed))
}

fn meta_write_to(
    session: &mut Session<'_>,
    request: &MetaRequest<'_>,
    consumed: usize,
) -> Option<Step> {
    let reply = session.upstream_reply.and_then(|replies| replies.first());
    let unsupported = |out: &mut Vec<u8>| {
        out.extend_from_slice(Failure::Unsupported.server_error());
        Some(Step::Consumed(consumed))
    };
    match request {
        MetaRequest::Set {
            key,
            flags,
            mode,
            value: SetValue::Data(value),
        } => {
            if flags.invalidate || flags.new_cas.is_some() || flags.vivify_exptime.is_some() {
                return unsupported(session.out);
            }
            let kind = match mode {
                SetMode::Set => StoreKind::Set,
                SetMode::Add => StoreKind::Add,
                SetMode::Replace => StoreKind::Replace,
                SetMode::Append => StoreKind::Append,
                SetMode::Prepend => StoreKind::Prepend,
            };
            let client_flags = flags.client_flags.unwrap_or(0);
            let exptime = flags.exptime.unwrap_or(0);
            let Some(reply) = reply else {
                let op = UpstreamOp::Store {
                    kind,
                    client_flags,
                    exptime,
                    // memcached ignores a CAS on `ms` in add mode.
                    compare_cas: if kind == StoreKind::Add {
                        None
                    } else {
                        flags.compare_cas
                    },
                    value: value.to_vec(),
                };
                return Some(upstream_step(key.as_bytes(), op));
            };
            // append/prepend never report "not found".
            let not_found: &[u8] = if matches!(kind, StoreKind::Append | StoreKind::Prepend) {
                b"NS"
            } else {
                b"NF"
            };
            meta_status(session.out, reply, key, flags, not_found);
        }
        MetaRequest::Delete { key, flags } => {
            if flags.invalidate || flags.remove_value || flags.new_cas.is_some() {
                return unsupported(session.out);
            }
            let Some(reply) = reply else {
                let op = UpstreamOp::Delete {
                    compare_cas: flags.compare_cas,
                };
                return Some(upstream_step(key.as_bytes(), op));
            };
            meta_status(session.out, reply, key, flags, b"NF");
        }
        MetaRequest::Arith { key, flags, mode } => {
            if flags.compare_cas.is_some() || flags.new_cas.is_some() || flags.exptime.is_some() {
                return unsupported(session.out);
            }
            let Some(reply) = reply else {
                let op = UpstreamOp::Arith {
                    increment: *mode == ArithMode::Increment,
                    delta: flags.delta.unwrap_or(1),
                    create: flags
                        .vivify_exptime
                        .map(|exptime| (flags.initial.unwrap_or(0), exptime)),
                };
                return Some(upstream_step(key.as_bytes(), op));
            };
            let out = &mut *session.out;
            match reply {
                UpstreamReply::Number { value, cas } => {
                    if flags.quiet {
                        return Some(Step::Consumed(consumed));
                    }
                    let digits = value.to_string();
                    if flags.return_value {
                        out.extend_from_slice(b"VA ");
                        push_u64(out, digits.len() as u64);
                    } else {
                        out.extend_from_slice(b"HD");
                    }
                    push_meta_echoes(out, key, flags, cas.unwrap_or(0));
                    out.extend_from_slice(b"\r\n");
                    if flags.return_value {
                        out.extend_from_slice(digits.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                }
                UpstreamReply::NotStored | UpstreamReply::Exists | UpstreamReply::NotFound => {
                    let status: &[u8] = if *reply == UpstreamReply::Exists {
                        b"EX"
                    } else {
                        b"NF"
                    };
                    out.extend_from_slice(status);
                    push_meta_echoes(out, key, flags, 0);
                    out.extend_from_slice(b"\r\n");
                }
                other => out.extend_from_slice(text_status(other, b"")),
            }
        }
        _ => return None,
    }
    Some(Step::Consumed(consumed))
}

fn upstream_step(key: &[u8], op: UpstreamOp) -> Step {
    Step::Upstream {
        keys_done: 0,
        request: Box::new(UpstreamRequest::new(key, op)),
    }
}

/// A binary write (stores, `delete`, `incr`/`decr`, `touch`), passed on to the
/// upstream; `None` for every other request. A failed write is answered with
/// memcached's "temporary failure" status.
pub fn binary_write(
    session: &mut Session<'_>,
    request: &BinaryRequest<'_>,
    consumed: usize,
) -> Option<Step> {
    let header = &request.header;
    let reply = session.upstream_reply.and_then(|replies| replies.first());
    let compare_cas = (header.cas != 0).then_some(header.cas);
    let error = |out: &mut Vec<u8>, status: binary::Status| {
        binary::encode_error(out, header.opcode, header.opaque, status);
    };
    let failed = |reply: &UpstreamReply| match reply {
        UpstreamReply::NonNumeric => binary::Status::NonNumeric,
        _ => binary::Status::TemporaryFailure,
    };
    match request.command {
        Command::Store {
            kind,
            key,
            value,
            flags,
            exptime,
            quiet,
        } => {
            let upstream_kind = match kind {
                BinaryStoreKind::Set => StoreKind::Set,
                BinaryStoreKind::Add => StoreKind::Add,
                BinaryStoreKind::Replace => StoreKind::Replace,
                BinaryStoreKind::Append => StoreKind::Append,
                BinaryStoreKind::Prepend => StoreKind::Prepend,
            };
            let exptime = i64::from(exptime);
            let Some(reply) = reply else {
                let op = UpstreamOp::Store {
                    kind: upstream_kind,
                    client_flags: flags,
                    exptime,
                    compare_cas,
                    value: value.to_vec(),
                };
                return Some(upstream_step(key, op));
            };
            let concat = matches!(kind, BinaryStoreKind::Append | BinaryStoreKind::Prepend);
            let status = match reply {
                UpstreamReply::Done { cas } => {
                    if !quiet {
                        binary::encode_success(
                            session.out,
                            header.opcode,
                            header.opaque,
                            cas.unwrap_or(0),
                        );
                    }
                    return Some(Step::Consumed(consumed));
                }
                UpstreamReply::Exists => binary::Status::KeyExists,
                // memcached's `complete_update_bin` maps a refused store by opcode.
                UpstreamReply::NotStored => match kind {
                    BinaryStoreKind::Add => binary::Status::KeyExists,
                    BinaryStoreKind::Replace => binary::Status::KeyNotFound,
                    _ => binary::Status::NotStored,
                },
                UpstreamReply::NotFound if concat => binary::Status::NotStored,
                UpstreamReply::NotFound => binary::Status::KeyNotFound,
                other => failed(other),
            };
            error(session.out, status);
        }
        Command::Delete { key, quiet } => {
            let Some(reply) = reply else {
                return Some(upstream_step(key, UpstreamOp::Delete { compare_cas }));
            };
            match reply {
                UpstreamReply::Done { .. } => {
                    if !quiet {
                        binary::encode_success(session.out, header.opcode, header.opaque, 0);
                    }
                }
                UpstreamReply::NotFound => error(session.out, binary::Status::KeyNotFound),
                UpstreamReply::Exists => error(session.out, binary::Status::KeyExists),
                other => error(session.out, failed(other)),
            }
        }
        Command::Arith {
            increment,
            key,
            delta,
            initial,
            exptime,
            quiet,
        } => {
            if compare_cas.is_some() {
                error(session.out, binary::Status::TemporaryFailure);
                return Some(Step::Consumed(consumed));
            }
            let Some(reply) = reply else {
                let create =
                    (exptime != ARITH_EXPTIME_NO_CREATE).then_some((initial, i64::from(exptime)));
                let op = UpstreamOp::Arith {
                    increment,
                    delta,
                    create,
                };
                return Some(upstream_step(key, op));
            };
            match reply {
                UpstreamReply::Number { value, cas } => {
                    if !quiet {
                        binary::encode_counter(
                            session.out,
                            header.opcode,
                            header.opaque,
                            cas.unwrap_or(0),
                            *value,
                        );
                    }
                }
                UpstreamReply::NotFound => error(session.out, binary::Status::KeyNotFound),
                UpstreamReply::Exists => error(session.out, binary::Status::KeyExists),
                other => error(session.out, failed(other)),
            }
        }
        Command::Touch { key, exptime } => {
            let exptime = i64::from(exptime);
            // Sent as a `gat`: binary `touch` answers with the item's flags.
            let Some(reply) = reply else {
                let op = UpstreamOp::Get {
                    touch_exptime: Some(exptime),
                };
                return Some(upstream_step(key, op));
            };
            match reply {
                UpstreamReply::Hit(fetched) => binary::encode_item(
                    session.out,
                    header,
                    fetched.client_flags,
                    fetched.cas,
                    b"",
                    b"",
                ),
                UpstreamReply::Miss | UpstreamReply::NotFound => {
                    error(session.out, binary::Status::KeyNotFound)
                }
                other => error(session.out, failed(other)),
            }
        }
        _ => return None,
    }
    Some(Step::Consumed(consumed))
}
