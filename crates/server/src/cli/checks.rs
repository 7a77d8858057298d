//! Validation once every flag is read: the cross-option refusals memcached makes at
//! start-up (in its words), fogcached's own (TLS needs TCP, the fog layer needs TCP, an
//! item must fit every tier that can hold it), then the engine's own checks
//! (`EngineConfig::validate`).

use engine::SLAB_PAGE_SIZE_BYTES;

use super::{usage, CliExit, Config};
use crate::session::BindingProtocol;

/// Cross-option checks memcached makes at start-up, then the engine's own.
pub(super) fn check(config: &Config, slab_chunk_max_set: bool) -> Result<(), CliExit> {
    config.tls.check().map_err(usage)?;
    // memcached binds `-Y` to the text protocol and `-S` to the binary one; a `-B` that
    // allows the other protocol is refused with its words.
    match (config.binding, config.auth_file.is_some(), config.sasl) {
        (BindingProtocol::Ascii, _, true) => {
            return Err(usage(
                "You cannot allow the ASCII protocol while using SASL.",
            ))
        }
        (BindingProtocol::Binary, true, _) => {
            return Err(usage(
                "You cannot allow the BINARY protocol while using ascii authentication tokens.",
            ))
        }
        _ => {}
    }
    // memcached's refusals, in its words: a datagram cannot carry an authentication.
    if config.udp_port.is_some() {
        if config.upstream.is_some() {
            return Err(usage(
                "-U with --upstream: the fog layer's requests wait for the upstream, which a \
                 datagram's request cannot (serve the edge over TCP)",
            ));
        }
        if config.auth_file.is_some() {
            return Err(usage(
                "Cannot use UDP with ascii authentication enabled (-U 0 to disable)",
            ));
        }
        if config.sasl {
            return Err(usage(
                "ERROR: Cannot enable UDP while using binary SASL authentication.",
            ));
        }
    }
    if config.tls.enabled && config.unix_socket.is_some() {
        return Err(usage(
            "TLS (-Z) needs TCP: connections to a unix socket (-s) are never encrypted",
        ));
    }
    let engine = &config.engine;
    // An item must fit in every tier that can hold it (new items go to DRAM, demoted
    // ones to the slow tier); a tier of size 0 holds nothing.
    if engine.memory_limit_bytes != 0
        && engine.item_size_max_bytes as u64 > engine.memory_limit_bytes / 2
    {
        return Err(usage(format!(
            "Cannot set item size limit (-I {}) higher than 1/2 of memory max (-m {} bytes)",
            engine.item_size_max_bytes, engine.memory_limit_bytes
        )));
    }
    if let Some(slow) = &engine.slow_tier {
        if engine.item_size_max_bytes > slow.size_bytes / 2 {
            return Err(usage(format!(
                "Cannot set item size limit (-I {}) higher than 1/2 of the slow tier (--slow-size {} bytes)",
                engine.item_size_max_bytes, slow.size_bytes
            )));
        }
    }
    if slab_chunk_max_set {
        let chunk = engine.slab_chunk_max_bytes;
        if chunk == 0 || chunk > engine.item_size_max_bytes {
            return Err(usage(format!(
                "slab_chunk_max ({chunk} bytes) cannot be larger than the max item size (-I {} bytes)",
                engine.item_size_max_bytes
            )));
        }
        if SLAB_PAGE_SIZE_BYTES.checked_rem(chunk) != Some(0) {
            return Err(usage(format!(
                "slab_chunk_max ({chunk} bytes) must divide the slab page size ({SLAB_PAGE_SIZE_BYTES} bytes)"
            )));
        }
    }
    engine.validate().map_err(|e| usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{parse_ok, parse_usage};

    #[test]
    fn item_size_must_fit_half_the_memory() {
        let message = parse_usage(&["-m", "1", "-I", "1m"]);
        assert!(message.contains("1/2 of memory max"), "{message}");
    }

    #[test]
    fn item_size_must_fit_half_of_each_tier() {
        // Slow tier only: -I is checked against the slow tier, not the empty DRAM.
        assert_eq!(
            parse_ok(&["--dram", "0", "--slow-size", "2", "-I", "1m"])
                .engine
                .memory_limit_bytes,
            0
        );
        assert_eq!(
            parse_usage(&["--dram", "0", "--slow-size", "1", "-I", "1m"]),
            "Cannot set item size limit (-I 1048576) higher than 1/2 of the slow tier (--slow-size 1048576 bytes)"
        );
        assert!(parse_usage(&["--dram", "1", "-I", "1m"]).contains("1/2 of memory max"));
    }
}
