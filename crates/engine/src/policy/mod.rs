//! The placement-policy seam. The engine owns the mechanism — index, item layout, slabs
//! and free lists, LRU and queue data structures, expiry and CAS, the crawler, page
//! evacuation, and one `move_item` (`moves.rs`) — and asks a [`Policy`] at every
//! decision point:
//!
//! | decision | method |
//! |---|---|
//! | where a new item goes | [`Policy::new_item_plan`], [`Policy::on_link`] |
//! | what a hit (or touch) does in each tier | [`Policy::on_access`] |
//! | what a full class gives up: the victims the engine evicts | [`Policy::eviction_step`] |
//! | whether a move is admitted, where its chunk comes from | [`Policy::destination`], [`Policy::admits_promotion`] |
//! | which DRAM item a demotion making room takes | [`Policy::demotion_victim`] |
//! | where a moved item is linked | [`Policy::after_move`] |
//! | what the maintainer does each pass | [`Policy::begin_pass`], [`Policy::maintain_class`] |
//! | how a class's need for pages is measured | [`Policy::class_need`] |
//!
//! A policy sees the engine only through [`EngineOps`] (`engine_ops.rs`: every engine
//! operation a policy may use, each with its lock contract), never `Engine` itself, and
//! the seam runs one way: the engine calls the policy, the policy answers, and none of
//! the operations it may call calls the policy back ([`one_way`] checks it in debug
//! builds). What a policy decides about chunks it returns, and the engine carries out
//! (`room.rs`): where a new item's chunk comes from ([`NewItemPlan`]), where a move
//! goes ([`Destination`]), which live item a full class gives up ([`EvictionStep`]).
//! Eviction order and placement are apart: the order picks victims
//! ([`Policy::eviction_step`], [`Policy::demotion_victim`]), placement decides tiers
//! and admission ([`Policy::new_item_plan`], [`Policy::destination`],
//! [`Policy::admits_promotion`]).
//! The trait's defaults are memcached's segmented LRU inside each tier and no moves, so
//! a policy that only places items (`uniform`, `random`) writes `new_item_plan` alone.
//!
//! One file per policy: `dual_lru.rs` (Fogcached), `hotspot/` (HMCached, and its
//! HM-HC variant with hyperbolic caching in DRAM), `uniform.rs` (HM-UNI),
//! `two_level.rs` (HM-TLC), `random.rs` (a baseline). `slru.rs` holds memcached's
//! segmented-LRU rules the policies use inside each tier, `tiering.rs` what the
//! migrating policies ask of the tiers' fullness and DRAM's COLD-tail victim, and `access.rs` the decayed access counter.
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
use crate::index::ShardEntry;
use crate::item::{Fresh, HeaderRead, HeaderWrite, ItemAddr};
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
    /// Where a new item's chunk comes from when both tiers can take it (the engine
    /// carries the plan out, `room.rs`; with one tier there is nothing to choose). The
    /// caller may hold a shard lock. By default a free DRAM chunk, else the slow tier's
    /// (evicting there), else DRAM's by eviction: a store never waits for a demotion
    /// (the maintainer's reserve of free DRAM chunks takes new items). Always inlined
    /// (into the store path).
    #[inline(always)]
    fn new_item_plan(&self, _e: EngineOps<'_>, _key_hash: u32) -> NewItemPlan {
        NewItemPlan::DramIfFree
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
    /// being published (its descriptor is in `entry`'s shard, replacing `old`'s if the key had
    /// one; `old`, the header its look-up paid for, is still allocated). Returns the LRU
    /// segment it is linked at. The caller holds the shard lock.
    fn on_link(
        &self,
        _e: EngineOps<'_>,
        _entry: &mut ShardEntry<'_, '_>,
        tier: &SlabTier,
        _item: HeaderWrite<'_>,
        _old: Option<HeaderRead<'_>>,
    ) -> usize {
        self.segment_for_new_item(tier.id)
    }

    /// A read or touch of the live item `item` (its header, which the look-up paid to
    /// read), of slab class `class_id` (the caller holds its shard lock, whose `entry` for the key it hands on, and
    /// looked the class up already): update what the policy tracks, maybe offer the item
    /// for a move. What it writes it writes through an edit of the header
    /// (`HeaderRead::edit`), charged once. Returns whether it charged a write of the
    /// header's access word (`header_bytes::ACCESS`).
    ///
    /// By default memcached's read inside the item's tier (`slru::touch_hit`): the
    /// last-access time, FETCHED, then ACTIVE (and COLD to WARM).
    fn on_access(
        &self,
        _e: EngineOps<'_>,
        tier: &SlabTier,
        item: HeaderRead<'_>,
        _class_id: usize,
        now_s: u32,
        _entry: &mut ShardEntry<'_, '_>,
    ) -> bool {
        // The hit's header writes, charged once when the edit ends.
        let mut edit = item.edit(crate::item::header_bytes::ACCESS);
        slru::touch_hit(tier, &mut edit, now_s);
        edit.finish()
    }

    /// One step of the search for room in `cs`'s full class of `tier`, which an
    /// allocation found without a free chunk (the caller, the engine's `make_room` in
    /// `room.rs`, holds the class lock): the next live item the policy's order gives
    /// up, which the engine evicts if its shard is free, or the search's end. `search`
    /// carries the policy's place from step to step, and the victim whose shard was
    /// busy (`search.busy`) into the next step. A step may reclaim dead items and
    /// reorder the lists on its way (counted in `search.removed`); it never evicts. By
    /// default memcached's: the COLD tail, then HOT and WARM flow into COLD.
    fn eviction_step<'t>(
        &self,
        e: EngineOps<'t>,
        tier: &'t SlabTier,
        cs: &mut ClassState,
        now_s: u32,
        search: &mut EvictionSearch<'t>,
    ) -> EvictionStep<'t> {
        slru::cold_tail_eviction_step(e, tier, cs, now_s, search)
    }

    /// Where a move of an item of `total_bytes` in `class_id` goes (the engine takes the
    /// chunk, `room.rs`), or why it does not. No lock is held. By default nowhere: a
    /// policy that does not move items never queues one.
    fn destination<'e>(
        &self,
        _e: EngineOps<'e>,
        _direction: Direction,
        _class_id: usize,
        _total_bytes: usize,
        _candidate: Candidate,
    ) -> Result<Destination<'e>, Refusal> {
        Err(Refusal::NotAdmitted)
    }

    /// The DRAM item of `cs`'s class a demotion that makes room would take (the
    /// caller holds the class lock), its header read paid for. By default the first
    /// live item from the segmented LRU's COLD tail (`tiering::dram_victim`).
    fn demotion_victim<'e>(
        &self,
        e: EngineOps<'e>,
        cs: &mut ClassState,
        now_s: u32,
    ) -> Option<HeaderRead<'e>> {
        tiering::dram_victim(e, cs, now_s)
    }

    /// Whether a promotion whose candidate scored `score` (the policy's own measure,
    /// from its [`Destination::DramByDemoting`]) may displace `victim`, the item
    /// [`Policy::demotion_victim`] picked (the caller holds its class lock). By
    /// default every promotion is admitted.
    fn admits_promotion(&self, _score: u8, _victim: HeaderRead<'_>) -> bool {
        true
    }

    /// A moved item's copy (`dst`: its header, written with the copy and paid for) is
    /// published (its descriptor in `entry`'s shard now points at it; the caller holds the
    /// shard lock). Returns the LRU segment it is linked at in its new tier.
    fn after_move(
        &self,
        _entry: &mut ShardEntry<'_, '_>,
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

/// Where a new item's chunk comes from when both tiers can take it: a policy's choice
/// ([`Policy::new_item_plan`]), which the engine carries out (`room.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NewItemPlan {
    /// A free DRAM chunk, else the slow tier (evicting there), else DRAM by eviction.
    DramIfFree,
    /// A free DRAM chunk, else one freed by demoting DRAM's victim on the store's path
    /// (its shard only tried), else as [`NewItemPlan::DramIfFree`].
    DramByDemoting,
    /// The key's home tier, for a policy that homes keys and never moves them: homed in
    /// DRAM, a free DRAM chunk, else a free slow-tier one, else DRAM by eviction (a
    /// class short of DRAM chunks sends its newcomers to the slow tier rather than
    /// evicting); homed in the slow tier, the slow tier (evicting there), else DRAM.
    Home(TierId),
}

/// What one step of a policy's search for room in a full class found
/// ([`Policy::eviction_step`]).
pub(crate) enum EvictionStep<'t> {
    /// This live item (its header, read and paid for by the search) goes: the engine
    /// evicts it if its shard is free, else hands it back in `EvictionSearch::busy`.
    Evict(HeaderRead<'t>),
    /// The search is over without an eviction; nonzero if it made room or changed the
    /// lists another way (dead items reclaimed, items moved between lists), so that
    /// the allocation looks for a chunk again.
    Done(usize),
}

/// A search for room in a full class, carried from one [`Policy::eviction_step`] to the
/// next. The engine starts it empty and writes only `busy`; the rest is the policy's
/// place in its own order.
pub(crate) struct EvictionSearch<'t> {
    /// The last victim the engine could not evict: its shard was locked by a request
    /// in flight.
    pub busy: Option<HeaderRead<'t>>,
    /// Whether the policy has begun the search (its first step sets it).
    pub started: bool,
    /// The policy's phase, for a search in several parts.
    pub phase: u8,
    /// The next item the policy looks at in its list.
    pub cursor: ItemAddr,
    /// Looks or rounds the policy has left or has made (its own bound).
    pub tries: usize,
    /// Items the search removed or moved by itself (dead items reclaimed, ...).
    pub removed: usize,
    /// A figure the policy noted when it began (e.g. the class's free chunks).
    pub noted: u64,
}

impl EvictionSearch<'_> {
    pub(crate) fn new() -> Self {
        EvictionSearch {
            busy: None,
            started: false,
            phase: 0,
            cursor: crate::item::NIL,
            tries: 0,
            removed: 0,
            noted: 0,
        }
    }
}

/// Where a move goes: a policy's choice ([`Policy::destination`]), whose chunk the
/// engine takes (`room.rs`).
pub(crate) enum Destination<'e> {
    /// This chunk, which the policy took free through [`EngineOps::take_chunk`].
    Chunk(Fresh<'e>),
    /// A slow-tier chunk, evicting from the slow tier when it is full (the only place a
    /// tiered cache loses items).
    SlowTier,
    /// A free DRAM chunk, else one made by demoting DRAM's victims
    /// ([`Policy::demotion_victim`]) a few times, each admitted first
    /// ([`Policy::admits_promotion`], given `score`).
    DramByDemoting { score: u8 },
}

impl Destination<'_> {
    /// A move that every promotion may make: a demotion goes to the slow tier, a
    /// promotion to DRAM, demoting DRAM's victims for room (the default
    /// `admits_promotion` admits it over each).
    pub(crate) fn admitting_all(direction: Direction) -> Self {
        match direction {
            Direction::ToSlow => Destination::SlowTier,
            Direction::ToDram => Destination::DramByDemoting { score: 0 },
        }
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
// does not see the modules these lines declare: `scripts/fmt.sh` formats them too.
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

/// The seam runs one way, checked in debug builds (every test): the engine calls the
/// policy, and the policy answers, calling only [`EngineOps`]' operations, none of
/// which calls the policy back. So no policy method is entered while another is
/// running on the same thread; an operation that called back (as allocating with
/// eviction, or moving an item, would: they ask the policy) panics here. Release builds
/// check nothing and pay nothing.
pub(crate) mod one_way {
    #[cfg(debug_assertions)]
    thread_local! {
        /// The policy method this thread is in, if any.
        static IN_POLICY: std::cell::Cell<Option<&'static str>> =
            const { std::cell::Cell::new(None) };
    }

    /// A policy method being run (the guard of its call).
    pub(crate) struct Entered(());

    impl Entered {
        #[inline(always)]
        pub(crate) fn enter(method: &'static str) -> Entered {
            #[cfg(debug_assertions)]
            IN_POLICY.with(|in_policy| {
                if let Some(outer) = in_policy.replace(Some(method)) {
                    panic!("the policy's `{method}` was called from within its `{outer}`");
                }
            });
            #[cfg(not(debug_assertions))]
            let _ = method;
            Entered(())
        }
    }

    impl Drop for Entered {
        #[inline(always)]
        fn drop(&mut self) {
            #[cfg(debug_assertions)]
            IN_POLICY.with(|in_policy| in_policy.set(None));
        }
    }

    #[cfg(all(test, debug_assertions))]
    mod tests {
        use super::Entered;

        #[test]
        #[should_panic(
            expected = "the policy's `eviction_step` was called from within its `destination`"
        )]
        fn a_policy_method_entered_from_within_another_panics() {
            let _outer = Entered::enter("destination");
            let _inner = Entered::enter("eviction_step");
        }

        #[test]
        fn policy_methods_called_one_after_another_are_fine() {
            drop(Entered::enter("destination"));
            drop(Entered::enter("eviction_step"));
        }
    }
}

impl Policy for AnyPolicy {
    #[inline(always)]
    fn new_item_plan(&self, e: EngineOps<'_>, key_hash: u32) -> NewItemPlan {
        let _seam = one_way::Entered::enter("new_item_plan");
        dispatch!(self, p => p.new_item_plan(e, key_hash))
    }
    #[inline]
    fn new_item_access(&self, now_s: u32) -> u8 {
        let _seam = one_way::Entered::enter("new_item_access");
        dispatch!(self, p => p.new_item_access(now_s))
    }
    #[inline]
    fn segment_for_new_item(&self, tier: TierId) -> usize {
        let _seam = one_way::Entered::enter("segment_for_new_item");
        dispatch!(self, p => p.segment_for_new_item(tier))
    }
    #[inline]
    fn on_link(
        &self,
        e: EngineOps<'_>,
        entry: &mut ShardEntry<'_, '_>,
        tier: &SlabTier,
        item: HeaderWrite<'_>,
        old: Option<HeaderRead<'_>>,
    ) -> usize {
        let _seam = one_way::Entered::enter("on_link");
        dispatch!(self, p => p.on_link(e, entry, tier, item, old))
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
        entry: &mut ShardEntry<'_, '_>,
    ) -> bool {
        let _seam = one_way::Entered::enter("on_access");
        dispatch!(self, p => p.on_access(e, tier, item, class_id, now_s, entry))
    }
    #[inline]
    fn eviction_step<'t>(
        &self,
        e: EngineOps<'t>,
        tier: &'t SlabTier,
        cs: &mut ClassState,
        now_s: u32,
        search: &mut EvictionSearch<'t>,
    ) -> EvictionStep<'t> {
        let _seam = one_way::Entered::enter("eviction_step");
        dispatch!(self, p => p.eviction_step(e, tier, cs, now_s, search))
    }
    #[inline]
    fn destination<'e>(
        &self,
        e: EngineOps<'e>,
        direction: Direction,
        class_id: usize,
        total_bytes: usize,
        candidate: Candidate,
    ) -> Result<Destination<'e>, Refusal> {
        let _seam = one_way::Entered::enter("destination");
        dispatch!(self, p => p.destination(e, direction, class_id, total_bytes, candidate))
    }
    #[inline]
    fn demotion_victim<'e>(
        &self,
        e: EngineOps<'e>,
        cs: &mut ClassState,
        now_s: u32,
    ) -> Option<HeaderRead<'e>> {
        let _seam = one_way::Entered::enter("demotion_victim");
        dispatch!(self, p => p.demotion_victim(e, cs, now_s))
    }
    #[inline]
    fn admits_promotion(&self, score: u8, victim: HeaderRead<'_>) -> bool {
        let _seam = one_way::Entered::enter("admits_promotion");
        dispatch!(self, p => p.admits_promotion(score, victim))
    }
    #[inline]
    fn after_move(
        &self,
        entry: &mut ShardEntry<'_, '_>,
        direction: Direction,
        dst_tier: &SlabTier,
        dst: HeaderWrite<'_>,
        now_s: u32,
    ) -> usize {
        let _seam = one_way::Entered::enter("after_move");
        dispatch!(self, p => p.after_move(entry, direction, dst_tier, dst, now_s))
    }
    #[inline]
    fn begin_pass(&self, e: EngineOps<'_>, tier: &SlabTier) {
        let _seam = one_way::Entered::enter("begin_pass");
        dispatch!(self, p => p.begin_pass(e, tier))
    }
    #[inline]
    fn maintain_class(&self, e: EngineOps<'_>, tier: &SlabTier, class_id: usize) -> usize {
        let _seam = one_way::Entered::enter("maintain_class");
        dispatch!(self, p => p.maintain_class(e, tier, class_id))
    }
    #[inline]
    fn class_need(&self, tier: &SlabTier, cs: &ClassState) -> u64 {
        let _seam = one_way::Entered::enter("class_need");
        dispatch!(self, p => p.class_need(tier, cs))
    }
    #[inline]
    fn plan_page_move(&self, e: EngineOps<'_>) -> Option<Option<(usize, usize)>> {
        let _seam = one_way::Entered::enter("plan_page_move");
        dispatch!(self, p => p.plan_page_move(e))
    }
    fn migration_threshold(&self, class_id: usize) -> Option<u8> {
        let _seam = one_way::Entered::enter("migration_threshold");
        dispatch!(self, p => p.migration_threshold(class_id))
    }
}
