//! The placement-policy seam. The engine owns the mechanism — index, item layout, slabs
//! and free lists, LRU and queue data structures, expiry and CAS, the crawler, page
//! evacuation, and one `move_item` (`moves.rs`) — and asks a [`Policy`] at every
//! decision point:
//!
//! | decision | method |
//! |---|---|
//! | where a new item goes | [`Policy::alloc_new_item`], [`Policy::on_link`] |
//! | what a hit (or touch) does in each tier | [`Policy::on_access`] |
//! | what a full class gives up: the victim, evicted or demoted | [`Policy::make_room`] |
//! | whether a move is admitted, where its chunk comes from | [`Policy::destination`] |
//! | where a moved item is linked | [`Policy::after_move`] |
//! | what the maintainer does each pass | [`Policy::begin_pass`], [`Policy::maintain_class`] |
//! | how a class's need for pages is measured | [`Policy::class_need`] |
//!
//! A policy sees the engine only through [`EngineOps`] (`engine_ops.rs`: every engine
//! operation a policy may use, each with its lock contract), never `Engine` itself.
//! The trait's defaults are memcached's segmented LRU inside each tier and no moves, so
//! a policy that only places items (`uniform`, `random`) writes `alloc_new_item` alone.
//!
//! One file per policy: `dual_lru.rs` (Fogcached), `hotspot/` (HMCached, and its
//! HM-HC variant with hyperbolic caching in DRAM), `uniform.rs` (HM-UNI),
//! `two_level.rs` (HM-TLC), `random.rs` (a baseline). `slru.rs` holds memcached's
//! segmented-LRU rules the policies use inside each tier, `tiering.rs` the DRAM-room
//! helpers the migrating policies share, and `access.rs` the decayed access counter.
//! The registry (`registry!`, below) names each policy once: it declares
//! [`PlacementPolicy`] (the `--policy` names, and what each policy is for modules
//! outside `policy/`, which ask it rather than match on a name) and [`AnyPolicy`], an
//! enum whose methods match on the variant, so the call on every request is a direct,
//! inlinable call, not a virtual one. A new policy is its file and its registry line
//! (which declares the file's module).

pub(crate) mod access;
pub(crate) mod engine_ops;
pub(crate) mod slru;
pub(crate) mod tiering;
// The policies' own modules are declared by their registry lines (`registry!`, below).

use crate::api::TierId;
use crate::config::EngineConfig;
use crate::index::ShardGuard;
use crate::item::{Fresh, HeaderRead, HeaderWrite};
use crate::moves::Direction;
use crate::slab::ClassState;
use engine_ops::EngineOps;
use engine_ops::SlabTier;

/// Why a move got no destination chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The policy's admission rule said no: the item stays where it is.
    NotAdmitted,
    /// No chunk could be found or made in the destination tier.
    NoSpace,
}

/// What the engine knows of an item that asks to move, read under its shard lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    /// The header's policy-owned byte.
    pub access: u8,
    pub last_access_s: u32,
}

/// Every decision a placement policy makes. The engine calls these; a policy calls the
/// engine's mechanism (`alloc`, `take_free`, `move_item`, the LRU lists) to carry them
/// out. Locks: each method says what the caller holds.
pub(crate) trait Policy {
    /// The chunk for a new item of `class_id` (a store): which tier, and what to give
    /// up when it is full. The caller may hold a shard lock, so shards are only tried.
    /// By default a free DRAM chunk, else the slow tier's (evicting there), else DRAM's
    /// by eviction: a store never waits for a demotion (the maintainer's reserve of
    /// free DRAM chunks takes new items). Always inlined (into the store path): two
    /// registry entries share the hotspot policy's body, and as a call it cost a store.
    #[inline(always)]
    fn alloc_new_item<'e>(
        &self,
        e: EngineOps<'e>,
        _key_hash: u32,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh<'e>> {
        // A match, not `alloc_in_tiers`' closure, which was left a call.
        let (dram, slow) = match new_item_tiers(e) {
            NewItemTiers::One(tier) => return e.alloc(tier, class_id, total_bytes),
            NewItemTiers::Both { dram, slow } => (dram, slow),
        };
        e.take_free(dram, class_id, total_bytes)
            .or_else(|| e.alloc(slow, class_id, total_bytes))
            .or_else(|| e.alloc(dram, class_id, total_bytes))
    }

    /// The policy byte a new item starts with.
    fn new_item_access(&self, _now_s: u32) -> u8 {
        0
    }

    /// LRU segment a newly stored item is linked at.
    fn segment_for_new_item(&self, _tier: TierId) -> usize {
        crate::lru::HOT
    }

    /// A newly stored item (`item`: its header, written with the item and paid for) is
    /// being published (its descriptor is in `table`, replacing `old`'s if the key had
    /// one; `old`, the header its look-up paid for, is still allocated). Returns the LRU
    /// segment it is linked at. The caller holds the shard lock.
    fn on_link(
        &self,
        _e: EngineOps<'_>,
        _table: &mut ShardGuard<'_>,
        _key_hash: u32,
        tier: &SlabTier,
        _item: HeaderWrite<'_>,
        _old: Option<HeaderRead<'_>>,
    ) -> usize {
        self.segment_for_new_item(tier.id)
    }

    /// A read or touch of the live item `item` (its header, which the look-up paid to
    /// read), of slab class `class_id` (the caller holds its shard lock, `table`, and
    /// looked the class up already): update what the policy tracks, maybe offer the item
    /// for a move. What it writes it writes through an edit of the header
    /// (`HeaderRead::edit`), charged once. Returns whether it charged a write of the
    /// header's access word (`header_bytes::ACCESS`).
    #[allow(clippy::too_many_arguments)]
    ///
    /// By default memcached's read inside the item's tier (`slru::touch_hit`): the
    /// last-access time, FETCHED, then ACTIVE (and COLD to WARM).
    #[allow(clippy::too_many_arguments)]
    fn on_access(
        &self,
        _e: EngineOps<'_>,
        tier: &SlabTier,
        item: HeaderRead<'_>,
        _class_id: usize,
        now_s: u32,
        _table: &mut ShardGuard<'_>,
        _key_hash: u32,
    ) -> bool {
        // The hit's header writes, charged once when the edit ends.
        let mut edit = item.edit(crate::item::header_bytes::ACCESS);
        slru::touch_hit(tier, &mut edit, now_s);
        edit.finish()
    }

    /// An allocation in `tier` found `cs`'s class full (the caller holds its lock): free
    /// room by evicting or demoting. Returns how many items were removed or moved (0:
    /// nothing could be done). By default memcached's: evict the COLD tail.
    fn make_room(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        cs: &mut ClassState,
        now_s: u32,
    ) -> usize {
        slru::evict_cold_tail(e, tier, cs, now_s)
    }

    /// The destination chunk of a move of an item of `total_bytes` in `class_id`, or
    /// why there is none. No lock is held. By default none: a policy that does not move
    /// items never queues one.
    fn destination<'e>(
        &self,
        _e: EngineOps<'e>,
        _direction: Direction,
        _class_id: usize,
        _total_bytes: usize,
        _candidate: Candidate,
    ) -> Result<Fresh<'e>, Refusal> {
        Err(Refusal::NotAdmitted)
    }

    /// A moved item's copy (`dst`: its header, written with the copy and paid for) is
    /// published (its descriptor in `table` now points at it; the caller holds the
    /// shard lock). Returns the LRU segment it is linked at in its new tier.
    fn after_move(
        &self,
        _table: &mut ShardGuard<'_>,
        _key_hash: u32,
        direction: Direction,
        _dst_tier: &SlabTier,
        _dst: HeaderWrite<'_>,
        _now_s: u32,
    ) -> usize {
        match direction {
            // Fogcached: promoted items enter DRAM's HOT head, demoted items the slow
            // tier's COLD head.
            Direction::ToDram => crate::lru::HOT,
            Direction::ToSlow => crate::lru::COLD,
        }
    }

    /// Start of a maintainer pass over `tier` (no lock held).
    fn begin_pass(&self, _e: EngineOps<'_>, _tier: &SlabTier) {}

    /// One maintainer pass over one class of `tier` (no lock held). Returns the rounds
    /// that moved something (0 when settled).
    /// By default memcached's segmented-LRU juggling of the class, nothing more.
    fn maintain_class(&self, e: EngineOps<'_>, tier: &SlabTier, class_id: usize) -> usize {
        slru::juggle_class(e, tier, class_id, &slru::NoHooks)
    }

    /// A class's need for pages so far, monotonic (the automover looks at deltas). The
    /// caller holds the class lock.
    fn class_need(&self, _tier: &SlabTier, cs: &ClassState) -> u64 {
        cs.stats.evicted
    }

    /// The policy's own choice of a DRAM page move for this automover step: `None` to
    /// leave it to the automover's rules, `Some(None)` for no move, `Some(Some((src,
    /// dst)))` to move a page from class `src` to class `dst`. No lock is held.
    fn plan_page_move(&self, _e: EngineOps<'_>) -> Option<Option<(usize, usize)>> {
        None
    }

    /// The access count a slow-tier item of `class_id` must exceed to be promoted, for
    /// `stats slabs`, if the policy has one per class.
    fn migration_threshold(&self, _class_id: usize) -> Option<u8> {
        None
    }
}

/// Where a new item can go, whatever the policy.
pub(crate) enum NewItemTiers<'e> {
    /// One tier to put it in: DRAM without a slow tier, the slow tier when DRAM has no
    /// pages.
    One(&'e SlabTier),
    /// Both: the policy chooses.
    Both {
        dram: &'e SlabTier,
        slow: &'e SlabTier,
    },
}

/// The tiers a new item can go to (no lock).
#[inline(always)]
pub(crate) fn new_item_tiers(e: EngineOps<'_>) -> NewItemTiers<'_> {
    let dram = e.dram();
    match e.slow() {
        None => NewItemTiers::One(dram),
        Some(slow) if dram.page_count == 0 => NewItemTiers::One(slow),
        Some(slow) => NewItemTiers::Both { dram, slow },
    }
}

/// The chunk for a new item: in the one tier there is ([`new_item_tiers`]), or where
/// `choose(dram, slow)`, the policy's choice, puts it. The caller may hold a shard
/// lock.
#[inline(always)]
pub(crate) fn alloc_in_tiers<'e>(
    e: EngineOps<'e>,
    class_id: usize,
    total_bytes: usize,
    choose: impl FnOnce(&'e SlabTier, &'e SlabTier) -> Option<Fresh<'e>>,
) -> Option<Fresh<'e>> {
    match new_item_tiers(e) {
        NewItemTiers::One(tier) => e.alloc(tier, class_id, total_bytes),
        NewItemTiers::Both { dram, slow } => choose(dram, slow),
    }
}

/// The chunk for a new item whose home tier a placement policy chose (`home_in_dram`)
/// and that never moves: a key homed in DRAM whose class has no free DRAM chunk goes to
/// the slow tier rather than evicting, and DRAM evicts only when the slow tier cannot
/// take it either; a key homed in the slow tier is stored there (evicting there), or in
/// DRAM if the slow tier cannot take it. The caller may hold a shard lock.
#[inline]
pub(crate) fn alloc_at_home<'e>(
    e: EngineOps<'e>,
    dram: &'e SlabTier,
    slow: &'e SlabTier,
    home_in_dram: bool,
    class_id: usize,
    total_bytes: usize,
) -> Option<Fresh<'e>> {
    if home_in_dram {
        e.take_free(dram, class_id, total_bytes)
            .or_else(|| e.take_free(slow, class_id, total_bytes))
            .or_else(|| e.alloc(dram, class_id, total_bytes))
    } else {
        e.alloc(slow, class_id, total_bytes)
            .or_else(|| e.alloc(dram, class_id, total_bytes))
    }
}

/// What the registry needs of a policy besides its decisions: how to make it, and what
/// it is, for the modules outside `policy/` that must know (they ask
/// [`PlacementPolicy`], never match on a policy's name).
pub(crate) trait Registered: Policy + Sized {
    /// Whether the policy moves items between tiers at all.
    const MOVES_ITEMS: bool;
    /// Whether a class's LRU lists are the policy's own queues (`q0`, `q1`, ...) rather
    /// than memcached's HOT, WARM and COLD segments.
    const LISTS_ARE_QUEUES: bool = false;

    fn new(config: &EngineConfig) -> Self;
}

/// Declares the registry: each policy's module, [`PlacementPolicy`] (the names
/// `--policy` takes, what each policy is, and a one-line summary for `--help`),
/// [`AnyPolicy`] (the configured policy, dispatched statically: a match on the variant,
/// so the call on every request is a direct, inlinable call, not a virtual one),
/// `dispatch!` (which forwards a call to the variant's policy) and
/// [`for_each_policy!`](crate::for_each_policy) (the list the per-policy test suites
/// are made from).
///
/// A line is `Variant => "name", module::Type, "summary";`: it declares `mod module;`
/// (the file `policy/module.rs` or `policy/module/mod.rs`), and the policy's tests are
/// `module::`. A policy whose type lives in another line's module says
/// `module::Type as tests`: it declares no module, and its tests are `tests::`.
macro_rules! registry {
    (@with ($d:tt) $(
        $(#[$attr:meta])*
        $variant:ident => $name:literal, $module:ident::$policy:ident $(as $tests:ident)?,
            $summary:literal;
    )*) => {
        $(registry!(@module $module $(as $tests)?);)*

        /// `--policy`: the placement policies the engine implements (the registry in
        /// `policy/mod.rs`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
        pub enum PlacementPolicy {
            $($(#[$attr])* $variant,)*
        }

        impl PlacementPolicy {
            /// Every policy, in the order `--help` lists them.
            pub const ALL: &'static [PlacementPolicy] = &[$(PlacementPolicy::$variant),*];
            /// Names accepted by [`PlacementPolicy::parse`].
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            pub fn parse(name: &str) -> Option<PlacementPolicy> {
                Self::ALL.iter().copied().find(|p| p.name() == name)
            }

            pub fn name(&self) -> &'static str {
                match self {
                    $(PlacementPolicy::$variant => $name,)*
                }
            }

            /// What the policy is, in one line (the server's `--help` lists it).
            pub fn summary(&self) -> &'static str {
                match self {
                    $(PlacementPolicy::$variant => $summary,)*
                }
            }

            /// Whether the policy moves items between tiers at all (with both tiers and
            /// `--no-migration` off).
            pub fn moves_items(&self) -> bool {
                match self {
                    $(PlacementPolicy::$variant => {
                        <$module::$policy as Registered>::MOVES_ITEMS
                    })*
                }
            }

            /// Whether a class's LRU lists are the policy's own queues (`q0`, `q1`, ...
            /// in `watch` and crawler output) rather than memcached's HOT, WARM and
            /// COLD.
            pub fn lists_are_queues(&self) -> bool {
                match self {
                    $(PlacementPolicy::$variant => {
                        <$module::$policy as Registered>::LISTS_ARE_QUEUES
                    })*
                }
            }
        }

        /// The configured policy, dispatched statically.
        pub(crate) enum AnyPolicy {
            $($variant($module::$policy),)*
        }

        impl AnyPolicy {
            /// Whether the policy moves items between tiers at all (the engine also
            /// needs both tiers and `--no-migration` off).
            #[inline]
            pub fn migrates(&self) -> bool {
                match self {
                    $(AnyPolicy::$variant(_) => <$module::$policy as Registered>::MOVES_ITEMS,)*
                }
            }

            pub fn new(config: &EngineConfig) -> AnyPolicy {
                match config.policy {
                    $(PlacementPolicy::$variant => {
                        AnyPolicy::$variant(<$module::$policy as Registered>::new(config))
                    })*
                }
            }
        }

        /// Forwards a call to the variant's implementation.
        macro_rules! dispatch {
            ($d self_:ident, $d p:ident => $d call:expr) => {
                match $d self_ {
                    $(AnyPolicy::$variant($d p) => $d call,)*
                }
            };
        }

        /// Calls `$callback! { tests => engine::PlacementPolicy::Variant }` once per
        /// policy of the registry, `tests` being the name of its test module: the
        /// per-policy test suites (`tests/policy_invariants.rs`, `tests/policy_stress.rs`)
        /// are `engine::for_each_policy!(suite_macro);`, so a new policy gets them with
        /// its registry line.
        #[macro_export]
        macro_rules! for_each_policy {
            ($d callback:ident) => {
                $($d crate::__policy_tests! { $d callback, $module $(as $tests)?, $variant })*
            };
        }
    };
    (@module $module:ident) => {
        mod $module;
    };
    // Another line declares the module.
    (@module $module:ident as $tests:ident) => {};
    ($($body:tt)*) => {
        registry!(@with ($) $($body)*);
    };
}

/// One policy's call of `for_each_policy!`'s callback, under its test module's name.
#[doc(hidden)]
#[macro_export]
macro_rules! __policy_tests {
    ($callback:ident, $module:ident, $variant:ident) => {
        $callback! { $module => $crate::PlacementPolicy::$variant }
    };
    ($callback:ident, $module:ident as $tests:ident, $variant:ident) => {
        $callback! { $tests => $crate::PlacementPolicy::$variant }
    };
}

// The registry: one line per policy, in the order `--help` lists them. A new policy is
// its file (a type implementing `Policy` and `Registered`) and one line here. rustfmt
// does not see the modules these lines declare: `cargo fmt --all -- $(ls
// crates/engine/src/policy/*.rs)` formats them (scripts/test.sh checks them so).
registry! {
    /// Fogcached's Dual-LRU: a segmented LRU per tier joined by two Move queues, with
    /// promotion admission by decayed access counts.
    #[default]
    DualLru => "dual-lru", dual_lru::DualLru,
        "Fogcached: memcached's segmented LRU in each tier";
    /// HMCached's hotspot-aware policy: decayed access counters, promotion past a
    /// per-class threshold tuned by hill-climbing, multi-queue replacement in DRAM,
    /// CLOCK in the slow tier, slow-tier metadata in the DRAM index.
    Hotspot => "hotspot", hotspot::Hotspot,
        "HMCached: access counters, per-class promotion thresholds, multi-queue DRAM, \
         CLOCK slow tier";
    /// HMCached's HM-HC: the hotspot machinery with hyperbolic caching as DRAM's
    /// replacement (priority = accesses / time in DRAM, victims by sampling).
    Hyperbolic => "hyperbolic", hotspot::Hotspot as hyperbolic,
        "HM-HC: hotspot with hyperbolic caching as DRAM's replacement";
    /// HMCached's HM-UNI: new items spread over the tiers in proportion to their sizes,
    /// never moved.
    Uniform => "uniform", uniform::Uniform,
        "HM-UNI: items spread over the tiers by size, never moved";
    /// HMCached's HM-TLC: every access pulls an item into DRAM, DRAM's LRU tail is
    /// demoted.
    TwoLevel => "two-level", two_level::TwoLevel,
        "HM-TLC: every access pulls the item into DRAM";
    /// A baseline: each key's tier drawn from its hash, half of the keys to each tier
    /// whatever their sizes, never moved.
    Random => "random", random::Random,
        "a baseline: keys spread over the tiers by hash, half to each whatever their \
         sizes, never moved";
}

impl Policy for AnyPolicy {
    #[inline]
    fn alloc_new_item<'e>(
        &self,
        e: EngineOps<'e>,
        key_hash: u32,
        class_id: usize,
        total_bytes: usize,
    ) -> Option<Fresh<'e>> {
        dispatch!(self, p => p.alloc_new_item(e, key_hash, class_id, total_bytes))
    }
    #[inline]
    fn new_item_access(&self, now_s: u32) -> u8 {
        dispatch!(self, p => p.new_item_access(now_s))
    }
    #[inline]
    fn segment_for_new_item(&self, tier: TierId) -> usize {
        dispatch!(self, p => p.segment_for_new_item(tier))
    }
    #[inline]
    fn on_link(
        &self,
        e: EngineOps<'_>,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        tier: &SlabTier,
        item: HeaderWrite<'_>,
        old: Option<HeaderRead<'_>>,
    ) -> usize {
        dispatch!(self, p => p.on_link(e, table, key_hash, tier, item, old))
    }
    // Always inlined (into `Engine::read`): the hotspot policy's DRAM hit is short, and a
    // call in between adds its set-up to every hit.
    #[inline(always)]
    fn on_access(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        item: HeaderRead<'_>,
        class_id: usize,
        now_s: u32,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
    ) -> bool {
        dispatch!(self, p => p.on_access(e, tier, item, class_id, now_s, table, key_hash))
    }
    #[inline]
    fn make_room(
        &self,
        e: EngineOps<'_>,
        tier: &SlabTier,
        cs: &mut ClassState,
        now_s: u32,
    ) -> usize {
        dispatch!(self, p => p.make_room(e, tier, cs, now_s))
    }
    #[inline]
    fn destination<'e>(
        &self,
        e: EngineOps<'e>,
        direction: Direction,
        class_id: usize,
        total_bytes: usize,
        candidate: Candidate,
    ) -> Result<Fresh<'e>, Refusal> {
        dispatch!(self, p => p.destination(e, direction, class_id, total_bytes, candidate))
    }
    #[inline]
    fn after_move(
        &self,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        direction: Direction,
        dst_tier: &SlabTier,
        dst: HeaderWrite<'_>,
        now_s: u32,
    ) -> usize {
        dispatch!(self, p => p.after_move(table, key_hash, direction, dst_tier, dst, now_s))
    }
    #[inline]
    fn begin_pass(&self, e: EngineOps<'_>, tier: &SlabTier) {
        dispatch!(self, p => p.begin_pass(e, tier))
    }
    #[inline]
    fn maintain_class(&self, e: EngineOps<'_>, tier: &SlabTier, class_id: usize) -> usize {
        dispatch!(self, p => p.maintain_class(e, tier, class_id))
    }
    #[inline]
    fn class_need(&self, tier: &SlabTier, cs: &ClassState) -> u64 {
        dispatch!(self, p => p.class_need(tier, cs))
    }
    #[inline]
    fn plan_page_move(&self, e: EngineOps<'_>) -> Option<Option<(usize, usize)>> {
        dispatch!(self, p => p.plan_page_move(e))
    }
    fn migration_threshold(&self, class_id: usize) -> Option<u8> {
        dispatch!(self, p => p.migration_threshold(class_id))
    }
}
