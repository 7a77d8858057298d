//! `stats` output: the runtime's counters and the engine's, under memcached's names.

use crate::session::Session;

/// The `stats` groups fogcached answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsGroup {
    General,
    Settings,
    Items,
    Slabs,
    Sizes,
    Conns,
}

impl StatsGroup {
    /// Maps the argument of `stats <group>` (empty for plain `stats`).
    pub fn from_name(name: &[u8]) -> Option<StatsGroup> {
        match name {
            b"" => Some(StatsGroup::General),
            b"settings" => Some(StatsGroup::Settings),
            b"items" => Some(StatsGroup::Items),
            b"slabs" => Some(StatsGroup::Slabs),
            b"sizes" => Some(StatsGroup::Sizes),
            b"conns" => Some(StatsGroup::Conns),
            _ => None,
        }
    }
}

/// Calls `emit` once per statistic of `group`, in memcached's order.
pub fn collect(session: &Session<'_>, group: StatsGroup, emit: &mut dyn FnMut(&str, &str)) {
    let mut engine_emit = |name: &str, value: engine::StatValue| emit(name, &value.to_string());
    match group {
        StatsGroup::General => session.engine.stats(&mut engine_emit),
        StatsGroup::Settings => session.engine.stats_settings(&mut engine_emit),
        StatsGroup::Items => session.engine.stats_items(&mut engine_emit),
        StatsGroup::Slabs => session.engine.stats_slabs(&mut engine_emit),
        StatsGroup::Sizes => session.engine.stats_sizes(&mut engine_emit),
        StatsGroup::Conns => {}
    }
}

/// `stats reset`: clears the resettable counters of the runtime and the engine.
pub fn reset(session: &Session<'_>) {
    session.engine.reset_stats();
}
