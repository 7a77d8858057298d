//! The engine's public vocabulary: options and outcomes of each cache operation.
//!
//! These types are the contract between the `server` crate (which speaks the wire
//! protocols) and the engine (which owns the items). They carry memcached's semantics,
//! not its wire format: an exptime is the raw client value (0 = never, negative = already
//! expired, above 30 days = absolute Unix time), and outcomes are enums the dispatcher
//! maps to reply strings.

/// A client-supplied expiration time, exactly as sent on the wire.
///
/// `0` never expires; a negative value is already expired; a value above
/// [`RELATIVE_EXPTIME_MAX_S`] is an absolute Unix time; anything else is seconds from now.
pub type ClientExptime = i64;

/// memcached's boundary between relative and absolute expiration times (30 days).
pub const RELATIVE_EXPTIME_MAX_S: i64 = 60 * 60 * 24 * 30;

/// Which memory tier an item lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TierId {
    Dram,
    Slow,
}

/// A read-only view of one live item, valid only inside the callback that receives it
/// (the item cannot move or change while the callback runs).
#[derive(Debug)]
pub struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub client_flags: u32,
    pub cas: u64,
    /// Seconds until expiry, or `None` when the item never expires.
    pub ttl_remaining_s: Option<u32>,
    /// [`ItemView::ttl_remaining_s`] before this request's touch (`mg T`): memcached
    /// applies meta flags in the order sent, so a `t` before the `T` reports this one.
    pub ttl_before_touch_s: Option<u32>,
    /// Seconds since the item was last accessed (before this access).
    pub last_access_ago_s: u32,
    /// Whether the item had been fetched before this request (meta `h`).
    pub fetched_before: bool,
    /// The item was marked stale by `md <key> I` or `ms ... I` (meta `X`).
    pub stale: bool,
    /// This request won the right to recache the item (meta `W`).
    pub win: bool,
    /// Another request already holds the recache token (meta `Z`).
    pub win_token_already_sent: bool,
    /// The item was stored with a base64 key (meta `b`): meta `k` and `me` echo its key
    /// base64-encoded, whatever the encoding of the request that reads it.
    pub key_binary: bool,
    /// Slab class of the item (meta `me` prints it as `cls=`).
    pub slab_class: u8,
    /// Total bytes the item occupies in its slab chunk (header + key + value).
    pub total_size_bytes: usize,
    pub tier: TierId,
}

/// Options of a read (`get`, `gets`, `gat`, `gats`, `mg`, `me`).
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Update the expiration time (`gat`, `mg T`).
    pub touch_exptime: Option<ClientExptime>,
    /// Do not bump the item in the LRU or mark it fetched (`mg u`, `me`).
    pub no_bump: bool,
    /// On a miss, create an empty placeholder with this exptime and hand the caller the
    /// recache token (`mg N`).
    pub vivify_exptime: Option<ClientExptime>,
    /// The placeholder `vivify_exptime` creates was asked for with a base64 key (`mg b`).
    pub vivify_key_binary: bool,
    /// If the remaining TTL is below this many seconds, the first caller wins the
    /// recache token (`mg R`).
    pub recache_below_s: Option<i64>,
    /// `recache_below_s` compares the TTL before `touch_exptime` applies (an `mg` whose
    /// `R` comes before its `T`: memcached applies meta flags in the order sent).
    pub recache_before_touch: bool,
    /// Count this read as a touch (`gat`, `gats`, binary `touch`/`gat`, `mg T`) instead
    /// of a get: memcached counts `cmd_touch` and `touch_hits`/`touch_misses` for these,
    /// not `cmd_get`.
    pub is_touch_command: bool,
    /// With `is_touch_command`, count a miss as a get miss (`cmd_get`, `get_misses`)
    /// rather than a touch miss: memcached's `mg` with `T` does this.
    pub miss_counts_as_get: bool,
    /// A stale item, or one whose TTL is below `recache_below_s`, hands this reader the
    /// recache token (meta `W`). memcached does this only for `mg`; `get` and `me` read
    /// such an item without taking the token.
    pub claim_recache_token: bool,
    /// Do not count statistics (used by `me`, the debug command).
    pub no_stats: bool,
    /// Who asks, as the event log reports it (the server passes the connection's file
    /// descriptor); the engine only copies it into [`crate::EventWhat::Fetched`].
    pub requester: i32,
    /// The engine-clock second to read at (`Engine::clock().now_s()`, taken once by the
    /// caller of a multi-key retrieval instead of once per key); None reads the clock.
    pub now_s: Option<u32>,
}

/// Result of [`crate::Engine::read`].
#[derive(Debug)]
pub enum ReadOutcome<R> {
    /// The item was found; the callback's result.
    Hit(R),
    /// No live item. `vivified` is true when `vivify_exptime` created a placeholder,
    /// in which case the caller holds the recache token (meta `EN` + `W`).
    Miss { vivified: bool },
}

/// How a store treats an existing item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// Options of a store (`set add replace append prepend cas`, `ms`).
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub mode: StoreMode,
    pub client_flags: u32,
    pub exptime: ClientExptime,
    /// Store only if the item's CAS equals this (`cas`, `ms C`).
    pub compare_cas: Option<u64>,
    /// Use this value as the new CAS instead of the next counter value (`ms E`).
    pub new_cas: Option<u64>,
    /// `ms I`: if `compare_cas` is older than the item's CAS, store anyway but mark the
    /// item stale.
    pub invalidate: bool,
    /// `ms N`: an append/prepend on a missing item creates it with this exptime.
    pub vivify_exptime: Option<ClientExptime>,
    /// The key came base64-encoded (`ms b`): a new item remembers it (see
    /// [`ItemView::key_binary`]); an append or prepend keeps the old item's.
    pub key_binary: bool,
    /// Who asks, as the event log reports it (see [`ReadOptions::requester`]).
    pub requester: i32,
}

impl StoreOptions {
    pub fn new(mode: StoreMode, client_flags: u32, exptime: ClientExptime) -> Self {
        StoreOptions {
            mode,
            client_flags,
            exptime,
            compare_cas: None,
            new_cas: None,
            invalidate: false,
            vivify_exptime: None,
            key_binary: false,
            requester: 0,
        }
    }
}

/// Result of [`crate::Engine::store`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    Stored {
        cas: u64,
    },
    /// `add` on an existing item, `replace`/`append`/`prepend` on a missing one.
    NotStored,
    /// CAS mismatch.
    Exists,
    /// `cas` on a missing item.
    NotFound,
    /// The item can never fit (larger than `item_size_max` or the largest slab class).
    /// For `Set` the old value has been unlinked, as memcached does.
    TooLarge,
    /// No memory could be found or freed for the item (memcached's
    /// `SERVER_ERROR out of memory storing object`).
    OutOfMemory,
}

/// Options of a delete (`delete`, `md`).
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub compare_cas: Option<u64>,
    /// `md I`: mark the item stale (and optionally retime it) instead of removing it.
    pub invalidate: bool,
    /// `md T`: with `invalidate`, the new exptime.
    pub new_exptime: Option<ClientExptime>,
    /// `md x`: drop the value (and client flags) but keep the item.
    pub remove_value_only: bool,
    /// `md E`: CAS to assign to an invalidated item.
    pub new_cas: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    Exists,
}

/// Options of an arithmetic command (`incr`, `decr`, `ma`).
#[derive(Clone, Debug)]
pub struct ArithOptions {
    pub increment: bool,
    pub delta: u64,
    pub compare_cas: Option<u64>,
    pub new_cas: Option<u64>,
    /// `ma N`/`J`: on a miss, create the item with this initial value and exptime.
    pub vivify: Option<(u64, ClientExptime)>,
    /// `ma T`: update the exptime on success.
    pub touch_exptime: Option<ClientExptime>,
    /// The key came base64-encoded (`ma b`): an item `vivify` creates remembers it.
    pub key_binary: bool,
    /// The caller creates the item if this request misses (meta `ma N` tries the update
    /// first, then asks again with `vivify`): the miss is not counted, as memcached counts
    /// no `incr_misses`/`decr_misses` for a request that creates its item.
    pub creates_on_miss: bool,
}

impl ArithOptions {
    pub fn new(increment: bool, delta: u64) -> Self {
        ArithOptions {
            increment,
            delta,
            compare_cas: None,
            new_cas: None,
            vivify: None,
            touch_exptime: None,
            key_binary: false,
            creates_on_miss: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The new value; `incr` wraps at 2^64, `decr` stops at 0.
    Value {
        value: u64,
        cas: u64,
        ttl_remaining_s: Option<u32>,
        /// The TTL before this request's `touch_exptime` (`None` for an item `vivify`
        /// created, which memcached creates without an expiry before applying `N`/`T`).
        ttl_before_touch_s: Option<u32>,
    },
    NotFound,
    /// The stored value is not a decimal number of at most 20 digits.
    NonNumeric,
    Exists,
    OutOfMemory,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TouchOutcome {
    Touched,
    NotFound,
}

/// One statistic, named as memcached names it.
#[derive(Clone, Debug, PartialEq)]
pub enum StatValue {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Text(String),
}

impl std::fmt::Display for StatValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatValue::U64(v) => write!(f, "{v}"),
            StatValue::I64(v) => write!(f, "{v}"),
            StatValue::F64(v) => write!(f, "{v:.6}"),
            StatValue::Bool(v) => f.write_str(if *v { "yes" } else { "no" }),
            StatValue::Text(v) => f.write_str(v),
        }
    }
}

/// Occupancy, hits and access accounting of one memory tier ([`crate::Engine::tier_usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierUsage {
    /// Items linked in the tier and the bytes they take (header + key + value).
    pub items: u64,
    pub item_bytes: u64,
    /// The tier's size (whole slab pages) and the pages its classes hold.
    pub limit_bytes: u64,
    pub pages_in_use: u64,
    /// Reads served from the tier.
    pub get_hits: u64,
    /// Bytes and 64-byte lines of the tier read and written (accounting of the region).
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub lines_read: u64,
    pub lines_written: u64,
    /// Microseconds the emulated access cost made threads busy-wait for this tier (0 with
    /// no cost model): how much of the server's time the emulation itself accounts for.
    pub emulated_wait_us: u64,
}

/// Dual-LRU migration counters ([`crate::Engine::migration_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MigrationCounts {
    /// Items copied from the slow tier to DRAM.
    pub promotions: u64,
    /// Items copied from DRAM to the slow tier.
    pub demotions: u64,
    /// Promotions given up: no DRAM chunk even after demoting the COLD tail (a
    /// promotion never evicts); the item stays in the slow tier.
    pub promotions_failed: u64,
    /// Promotions refused by the admission rule (DRAM full and its COLD tail at least
    /// as recently used as the item's last reuse gap); the item stays in the slow tier.
    pub promotions_skipped: u64,
    /// Demotions given up: no slow-tier chunk, or the item's shard was busy.
    pub demotions_failed: u64,
    /// Migrations abandoned because a request changed or removed the item first.
    pub migrations_raced: u64,
    /// Requests refused by a full Move queue (work shed, not memory).
    pub move_queue_dropped: u64,
    /// Entries waiting in each Move queue now.
    pub move_to_dram_queue_len: u64,
    pub move_to_slow_queue_len: u64,
}
