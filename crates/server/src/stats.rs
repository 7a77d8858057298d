//! `stats` output: the runtime's counters and the engine's, under memcached's names.
