//! The request verbs of the cache: what `get`, `set`, `delete`, `incr`, `touch` and
//! `flush_all` (and their meta and binary forms) do to items. Each takes the key's shard
//! lock once; allocation happens before it (or, for `append`, under it with shard locks
//! only tried). Placement of a new item and the effect of a hit are the policy's
//! (`self.policy`).

use std::sync::atomic::Ordering;

use crate::api::*;
use crate::counters::{C, G};
use crate::engine::Engine;
use crate::events::{kind, EventWhat, ItemFacts};
use crate::index::{ShardEntry, ShardGuard};
use crate::item::{header_bytes, state, HeaderRead, ITEM_HEADER_BYTES};
use crate::lifecycle::Found;
use crate::lru::{HOT, WARM};
use crate::policy::engine_ops::EngineOps;
use crate::policy::Policy;

/// What a store does after its checks, decided under the shard lock.
enum Verdict {
    Store { stale: bool },
    Refuse(StoreOutcome),
}

impl Engine {
    pub fn read<R>(
        &self,
        key: &[u8],
        opts: &ReadOptions,
        on_hit: impl FnOnce(&ItemView<'_>) -> R,
    ) -> ReadOutcome<R> {
        let count = !opts.no_stats;
        // Converted before the lock: it may read the clock.
        let touch_rel = opts.touch_exptime.map(|e| self.exptime_to_rel(e));
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = opts.now_s.unwrap_or_else(|| self.now_s());
        let Some(found) = self.find_live_item(&mut table, key_hash, key, now, count) else {
            if count {
                if opts.is_touch_command && !opts.miss_counts_as_get {
                    self.counters.add(G::CmdTouch, 1);
                    self.counters.add(G::TouchMisses, 1);
                } else {
                    self.counters.add(G::CmdGet, 1);
                    self.counters.add(G::GetMisses, 1);
                }
            }
            if count && self.events.wants(kind::FETCHES) {
                let what = EventWhat::Fetched {
                    hit: None,
                    requester: opts.requester,
                };
                self.events.record(kind::FETCHES, key, what);
            }
            let vivified = match opts.vivify_exptime.map(|e| self.exptime_to_rel(e)) {
                Some(Some(rel)) => {
                    self.vivify(&mut table, key_hash, key, rel, now, opts.vivify_key_binary)
                }
                _ => false,
            };
            return ReadOutcome::Miss { vivified };
        };
        let Found { tier, item } = found;
        let addr = item.addr();
        let h = item.header();
        let ttl_before_touch_s = Self::ttl_remaining(h, now);
        // What this request rewrites in the header besides the policy's access word (a
        // touch's expiry, a recache token): charged once, when the edit ends, less the
        // access word's line if the policy's hit charged it. Only a request that may
        // rewrite them opens it (a plain `get` does not).
        let mut edit =
            (touch_rel.is_some() || opts.claim_recache_token).then(|| h.edit(header_bytes::TOUCH));
        let mut retimed = false;
        if let (Some(rel), Some(edit)) = (touch_rel, edit.as_mut()) {
            // A negative touch time still returns the item (memcached): it expires now.
            let rel = rel.unwrap_or(1);
            retimed = h.exptime_rel_s() != rel;
            if retimed {
                // A pool record changes in place: unsealed first, sealed again below.
                self.unseal(tier, h, header_bytes::TOUCH);
                edit.write().set_exptime_rel_s(rel);
                self.note_expiry(rel);
            }
            edit.mark_dirty();
        }
        let state_bits = h.state();
        let ttl_remaining_s = Self::ttl_remaining(h, now);
        // `R` sees the TTL as it is where `R` stands among the request's flags.
        let recache_ttl_s = if opts.recache_before_touch {
            ttl_before_touch_s
        } else {
            ttl_remaining_s
        };
        let mut win = false;
        let mut win_token_already_sent = false;
        if state_bits & state::TOKEN_SENT != 0 {
            win_token_already_sent = true;
        } else if opts.claim_recache_token
            && (state_bits & state::STALE != 0
                || opts
                    .recache_below_s
                    .is_some_and(|r| recache_ttl_s.is_some_and(|t| i64::from(t) < r)))
        {
            // The edit is open: the request claims a token.
            if let Some(edit) = edit.as_mut() {
                edit.write().set(state::TOKEN_SENT);
                win = true;
            }
        }
        let class_id = tier.class_of(addr);
        let segment = h.segment();
        // The index probe charged header and key; the value's read continues it.
        let (item_key, value) = item.read_key_and_value();
        let view = ItemView {
            key: item_key,
            value,
            client_flags: h.client_flags(),
            cas: self.visible_cas(h.cas()),
            ttl_remaining_s,
            ttl_before_touch_s,
            last_access_ago_s: now.saturating_sub(h.last_access_s()),
            fetched_before: state_bits & state::FETCHED != 0,
            stale: state_bits & state::STALE != 0,
            win,
            win_token_already_sent,
            key_binary: state_bits & state::KEY_BINARY != 0,
            slab_class: class_id as u8,
            total_size_bytes: h.total_bytes(),
            tier: tier.id,
        };
        // Logged before the caller's callback, so that nothing of it lives past the call.
        if count && self.events.wants(kind::FETCHES) {
            let item = ItemFacts {
                tier: tier.id,
                class_id: class_id as u8,
                value_bytes: value.len() as u32,
            };
            let what = EventWhat::Fetched {
                hit: Some(item),
                requester: opts.requester,
            };
            self.events.record(kind::FETCHES, key, what);
        }
        let result = on_hit(&view);
        if retimed {
            self.reseal(h, item.proof());
        }
        let access_charged = !opts.no_bump
            && self.policy.on_access(
                EngineOps::new(self),
                tier,
                h,
                class_id,
                now,
                &mut ShardEntry::new(&mut table, key_hash),
            );
        if let Some(mut edit) = edit {
            if access_charged {
                // A touch (`gat`, `mg T`) or a recache token rewrote expiry or state:
                // the lines not already charged by the access update.
                edit.except(header_bytes::ACCESS);
            }
            edit.finish();
        }
        if count {
            if opts.is_touch_command {
                self.counters.add(G::CmdTouch, 1);
                self.counters.add_class(class_id, C::TouchHits, 1);
            } else {
                let (global, per_class) = if tier.id == TierId::Dram {
                    (G::DramGetHits, C::DramHits)
                } else {
                    (G::SlowGetHits, C::SlowHits)
                };
                let c = match segment {
                    HOT => C::HitsToHot,
                    WARM => C::HitsToWarm,
                    _ => C::HitsToCold,
                };
                self.counters.add_get_hit(global, class_id, per_class, c);
            }
        }
        if touch_rel == Some(None) {
            self.unlink(&mut table, key_hash, addr);
        }
        ReadOutcome::Hit(result)
    }

    /// `mg N`: stores an empty placeholder whose recache token the caller holds.
    fn vivify(
        &self,
        table: &mut ShardGuard<'_>,
        key_hash: u32,
        key: &[u8],
        rel: u32,
        now: u32,
        key_binary: bool,
    ) -> bool {
        let Ok(item) = self.new_item(key, key_hash, &[], 0, rel, now) else {
            return false;
        };
        let h = item.view();
        h.set_cas(self.next_cas());
        h.set(state::TOKEN_SENT | key_binary_bit(key_binary));
        self.link(table, key_hash, item, None);
        true
    }

    pub fn store(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        if self.events.wants(kind::MUTATIONS) {
            return self.store_logged(key, value, opts);
        }
        self.store_counted(key, value, opts)
    }

    /// [`Engine::store`] while `watch mutations` listens: the store, then its outcome in
    /// the event log. Apart from `store` so that the unwatched path keeps nothing alive
    /// across the store.
    #[cold]
    #[inline(never)]
    fn store_logged(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        let outcome = self.store_counted(key, value, opts);
        self.record_store(key, value.len(), opts, outcome);
        outcome
    }

    /// Logs a store's outcome for `watch mutations`.
    fn record_store(
        &self,
        key: &[u8],
        value_len: usize,
        opts: &StoreOptions,
        outcome: StoreOutcome,
    ) {
        let ttl_s = match self.exptime_to_rel(opts.exptime) {
            Some(0) | None => 0,
            Some(rel) => rel.saturating_sub(self.now_s()),
        };
        let what = EventWhat::Stored {
            mode: opts.mode,
            compare: opts.compare_cas.is_some(),
            outcome,
            ttl_s,
            class_id: self.slab_class_for(key.len(), value_len),
            value_bytes: u32::try_from(value_len).unwrap_or(u32::MAX),
            requester: opts.requester,
        };
        self.events.record(kind::MUTATIONS, key, what);
    }

    fn store_counted(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        // memcached unlinks the old value when a plain `set` (not `cas`) cannot allocate
        // its item, so a reader never keeps seeing the value the client replaced.
        let unlink_on_failure = opts.mode == StoreMode::Set && opts.compare_cas.is_none();
        if !self.item_fits(key.len(), value.len()) {
            self.refuse_too_large(key, unlink_on_failure);
            return StoreOutcome::TooLarge;
        }
        let outcome = match opts.mode {
            StoreMode::Append | StoreMode::Prepend => self.store_concat(key, value, opts),
            _ => self.store_whole(key, value, opts),
        };
        match outcome {
            StoreOutcome::OutOfMemory => {
                self.counters.add(G::StoreNoMemory, 1);
                if unlink_on_failure {
                    self.unlink_key(key);
                }
            }
            StoreOutcome::TooLarge => self.counters.add(G::StoreTooLarge, 1),
            _ => {}
        }
        outcome
    }

    /// A store refused because its item can never fit, typically before the server has
    /// read the payload (memcached's failed `item_alloc`): counts `store_too_large` and,
    /// with `unlink_old`, removes the current value of `key` without counting a delete.
    pub fn refuse_too_large(&self, key: &[u8], unlink_old: bool) {
        self.counters.add(G::StoreTooLarge, 1);
        if unlink_old {
            self.unlink_key(key);
        }
    }

    /// Removes `key` without counting a delete, as memcached does when a store fails to
    /// allocate (meta `ms` in every mode). Returns whether a live item was removed.
    pub fn unlink_key(&self, key: &[u8]) -> bool {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.now_s();
        match self
            .find_live(&mut table, key_hash, key, now, false)
            .map(|item| item.addr())
        {
            Some(addr) => {
                self.unlink(&mut table, key_hash, addr);
                true
            }
            None => false,
        }
    }

    /// CAS and mode checks shared by every store, under the shard lock. `existing`: the
    /// live item's header (its look-up paid for it).
    fn verdict(
        &self,
        opts: &StoreOptions,
        existing: Option<HeaderRead<'_>>,
        class_id: usize,
    ) -> Verdict {
        let mut stale = false;
        if let Some(expected) = opts.compare_cas {
            match existing {
                None => {
                    self.counters.add(G::CasMisses, 1);
                    return Verdict::Refuse(StoreOutcome::NotFound);
                }
                Some(h) => {
                    let current = self.visible_cas(h.cas());
                    if current != expected {
                        if opts.invalidate && expected < current {
                            stale = true;
                        } else {
                            let class_of_existing = self.class_of(h.addr());
                            self.counters.add_class(class_of_existing, C::CasBadval, 1);
                            return Verdict::Refuse(StoreOutcome::Exists);
                        }
                    }
                    self.counters.add_class(class_id, C::CasHits, 1);
                }
            }
        }
        match (opts.mode, existing) {
            (StoreMode::Add, Some(_)) | (StoreMode::Replace, None) => {
                Verdict::Refuse(StoreOutcome::NotStored)
            }
            _ => Verdict::Store { stale },
        }
    }

    /// `set`, `add`, `replace`, `cas`: the new item is written before the shard lock.
    fn store_whole(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        let exptime_rel = self.exptime_to_rel(opts.exptime);
        let now = self.now_s();
        let total = ITEM_HEADER_BYTES + key.len() + value.len();
        let class_id = self.geometry.class_for(total);
        self.counters.add_class(class_id, C::CmdSet, 1);
        let key_hash = self.index.hash(key);
        // An already-expired item is never allocated: the checks still run and the old
        // value is removed, as if the item was stored and expired at once.
        let new_item = match exptime_rel {
            Some(rel) => {
                let parts = [value];
                let made = self.new_item_in_class(
                    class_id,
                    key,
                    key_hash,
                    &parts,
                    opts.client_flags,
                    rel,
                    now,
                );
                match made {
                    Ok(chunk) => Some(chunk),
                    Err(outcome) => return outcome,
                }
            }
            None => None,
        };
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.now_s();
        // The found item's header (its look-up paid for it); its proof ends here (the
        // header view needs none: item.rs invariant 2).
        let existing = self
            .find_live_item(&mut table, key_hash, key, now, false)
            .map(|found| found.item.header());
        let stale = match self.verdict(opts, existing, class_id) {
            Verdict::Refuse(outcome) => {
                if outcome == StoreOutcome::NotStored && opts.mode == StoreMode::Add {
                    // memcached bumps the item an `add` collided with (its access time).
                    if let Some(h) = existing {
                        if h.last_access_s() != now {
                            h.charge_write(header_bytes::ACCESS).touch_last_access(now);
                        }
                    }
                }
                drop(table);
                if let Some(item) = new_item {
                    self.free_unlinked(item);
                }
                return outcome;
            }
            Verdict::Store { stale } => stale,
        };
        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
        match new_item {
            Some(item) => {
                let h = item.view();
                h.set_cas(cas);
                h.set(key_binary_bit(opts.key_binary));
                if let (true, Some(old_h)) = (stale, existing) {
                    // memcached's `do_store_item`: a value stored stale (an `ms I` with an
                    // older CAS) keeps the old item's expiry and its "token sent" mark, so
                    // the recache already handed out is not handed out again.
                    h.set_exptime_rel_s(old_h.exptime_rel_s());
                    h.set(state::STALE | (old_h.state() & state::TOKEN_SENT));
                }
                self.link(&mut table, key_hash, item, existing);
            }
            None => {
                if let Some(old) = existing {
                    self.unlink(&mut table, key_hash, old.addr());
                }
            }
        }
        StoreOutcome::Stored {
            cas: self.visible_cas(cas),
        }
    }

    /// `append`/`prepend`: the new item is built from the old one under the shard lock.
    fn store_concat(&self, key: &[u8], value: &[u8], opts: &StoreOptions) -> StoreOutcome {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.now_s();
        let existing = self.find_live_item(&mut table, key_hash, key, now, false);
        let Some(Found {
            tier: old_tier,
            item: old_item,
        }) = existing
        else {
            // memcached allocates the appended data before it looks for the item: with
            // `-M` and no room for it, the answer is "out of memory", found or not.
            if opts.vivify_exptime.is_none()
                && !self.config.evictions_enabled
                && !self.room_for(key, key_hash, value, now)
            {
                return StoreOutcome::OutOfMemory;
            }
            if let Some(vivify) = opts.vivify_exptime {
                // `ms` with N: an append to a missing item creates it.
                let total = ITEM_HEADER_BYTES + key.len() + value.len();
                let class_id = self.geometry.class_for(total);
                self.counters.add_class(class_id, C::CmdSet, 1);
                if let Verdict::Refuse(outcome) = self.verdict(opts, None, class_id) {
                    return outcome;
                }
                let Some(rel) = self.exptime_to_rel(vivify) else {
                    return StoreOutcome::Stored {
                        cas: self.visible_cas(self.next_cas()),
                    };
                };
                return match self.new_item(key, key_hash, &[value], opts.client_flags, rel, now) {
                    Ok(item) => {
                        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
                        let h = item.view();
                        h.set_cas(cas);
                        h.set(key_binary_bit(opts.key_binary));
                        self.link(&mut table, key_hash, item, None);
                        StoreOutcome::Stored {
                            cas: self.visible_cas(cas),
                        }
                    }
                    Err(outcome) => outcome,
                };
            }
            if opts.compare_cas.is_some() {
                self.counters.add(G::CasMisses, 1);
                return StoreOutcome::NotFound;
            }
            return StoreOutcome::NotStored;
        };
        let old_h = old_item.header();
        let class_id = old_tier.class_of(old_h.addr());
        self.counters.add_class(class_id, C::CmdSet, 1);
        let stale = match self.verdict(opts, Some(old_h), class_id) {
            Verdict::Refuse(outcome) => return outcome,
            Verdict::Store { stale } => stale,
        };
        // The look-up charged header and key; the value's read continues it.
        let old_value = old_item.read_value();
        if !self.item_fits(key.len(), old_value.len() + value.len()) {
            // memcached 1.6 answers NOT_STORED when the result would be too large.
            return StoreOutcome::NotStored;
        }
        let parts: [&[u8]; 2] = if opts.mode == StoreMode::Append {
            [old_value, value]
        } else {
            [value, old_value]
        };
        let flags = old_h.client_flags();
        let exptime = old_h.exptime_rel_s();
        let item = match self.new_item(key, key_hash, &parts, flags, exptime, now) {
            Ok(item) => item,
            // memcached allocates the appended data alone first, then the whole item: a
            // refusal once the data found room is NOT_STORED (`do_store_item`), not "out
            // of memory", and keeps the old item.
            Err(StoreOutcome::OutOfMemory) if self.room_for(key, key_hash, value, now) => {
                return StoreOutcome::NotStored;
            }
            Err(outcome) => return outcome,
        };
        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
        let h = item.view();
        h.set_cas(cas);
        // The key is the old item's, and so is how it was given (memcached's new item
        // forgets it and echoes a base64 key's raw bytes).
        h.set(old_h.state() & state::KEY_BINARY);
        if stale {
            h.set(state::STALE);
        }
        // The allocation may have evicted the old item (only if its shard was free,
        // which it is not: we hold it), so the old item is still linked here.
        self.link(&mut table, key_hash, item, Some(old_h));
        StoreOutcome::Stored {
            cas: self.visible_cas(cas),
        }
    }

    /// Whether an item of `key` and `value` could be allocated now (memcached's first
    /// allocation of an append, which holds the data alone): allocated and freed again.
    fn room_for(&self, key: &[u8], key_hash: u32, value: &[u8], now: u32) -> bool {
        match self.new_item(key, key_hash, &[value], 0, 0, now) {
            Ok(chunk) => {
                self.free_unlinked(chunk);
                true
            }
            Err(outcome) => outcome != StoreOutcome::OutOfMemory,
        }
    }

    pub fn delete(&self, key: &[u8], opts: &DeleteOptions) -> DeleteOutcome {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.now_s();
        let Some(Found { tier, item }) = self.find_live_item(&mut table, key_hash, key, now, false)
        else {
            self.counters.add(G::DeleteMisses, 1);
            return DeleteOutcome::NotFound;
        };
        let addr = item.addr();
        let h = item.header();
        if let Some(expected) = opts.compare_cas {
            if expected != self.visible_cas(h.cas()) {
                return DeleteOutcome::Exists;
            }
        }
        self.counters
            .add_class(tier.class_of(addr), C::DeleteHits, 1);
        if opts.invalidate {
            // memcached: mark stale, let the next reader win the token, bump the CAS.
            let w = h.charge_write(header_bytes::TOUCH);
            self.unseal(tier, h, header_bytes::TOUCH);
            w.set(state::STALE);
            w.clear(state::TOKEN_SENT);
            if let Some(e) = opts.new_exptime {
                let rel = self.exptime_to_rel(e).unwrap_or(1);
                w.set_exptime_rel_s(rel);
                self.note_expiry(rel);
            }
            let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
            w.set_cas(cas);
            self.reseal(h, item.proof());
            return DeleteOutcome::Deleted;
        }
        if opts.remove_value_only {
            let exptime = h.exptime_rel_s();
            let cas = h.cas();
            let bits = h.state() & (state::STALE | state::TOKEN_SENT);
            match self.new_item(key, key_hash, &[], 0, exptime, now) {
                Ok(new) => {
                    let nh = new.view();
                    nh.set_cas(cas);
                    nh.set(bits);
                    self.link(&mut table, key_hash, new, Some(h));
                }
                // No memory even for an empty item: removing it entirely is the
                // closest outcome that never serves the old value.
                Err(_) => self.unlink(&mut table, key_hash, addr),
            }
            return DeleteOutcome::Deleted;
        }
        self.unlink(&mut table, key_hash, addr);
        DeleteOutcome::Deleted
    }

    pub fn arith(&self, key: &[u8], opts: &ArithOptions) -> ArithOutcome {
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.now_s();
        let miss_counter = if opts.increment {
            G::IncrMisses
        } else {
            G::DecrMisses
        };
        let Some(Found { tier, mut item }) =
            self.find_live_item(&mut table, key_hash, key, now, false)
        else {
            let Some((initial, exptime)) = opts.vivify else {
                if !opts.creates_on_miss {
                    self.counters.add(miss_counter, 1);
                }
                return ArithOutcome::NotFound;
            };
            let rel = self.exptime_to_rel(exptime).unwrap_or(1);
            let digits = DecimalBuf::new(initial);
            return match self.new_item(key, key_hash, &[digits.as_bytes()], 0, rel, now) {
                Ok(new) => {
                    let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
                    let h = new.view();
                    h.set_cas(cas);
                    h.set(key_binary_bit(opts.key_binary));
                    self.link(&mut table, key_hash, new, None);
                    ArithOutcome::Value {
                        value: initial,
                        cas: self.visible_cas(cas),
                        ttl_remaining_s: if rel == 0 {
                            None
                        } else {
                            Some(rel.saturating_sub(now))
                        },
                        ttl_before_touch_s: None,
                    }
                }
                Err(_) => ArithOutcome::OutOfMemory,
            };
        };
        let addr = item.addr();
        let h = item.header();
        if let Some(expected) = opts.compare_cas {
            if expected != self.visible_cas(h.cas()) {
                return ArithOutcome::Exists;
            }
        }
        // The look-up charged header and key; the value's read continues it.
        let old_value = item.read_value();
        // memcached's `do_add_delta` reads the value with `safe_strtoull`, as the
        // protocol reads a client's number.
        let Some(current) = protocol::common::parse_u64(old_value) else {
            return ArithOutcome::NonNumeric;
        };
        let value = if opts.increment {
            current.wrapping_add(opts.delta)
        } else {
            current.saturating_sub(opts.delta)
        };
        self.counters.add_class(
            tier.class_of(addr),
            if opts.increment {
                C::IncrHits
            } else {
                C::DecrHits
            },
            1,
        );
        let digits = DecimalBuf::new(value);
        let ttl_before_touch_s = Self::ttl_remaining(h, now);
        let cas = opts.new_cas.unwrap_or_else(|| self.next_cas());
        let new_exptime = opts
            .touch_exptime
            .map(|e| self.exptime_to_rel(e).unwrap_or(1));
        let old_value_len = old_value.len();
        // The header of the item that holds the new value, with its write paid for.
        let target = if digits.len() <= old_value_len {
            // memcached rewrites in place, padding with spaces, when the number fits. A
            // pool record is unsealed first and sealed again after.
            self.unseal(tier, h, header_bytes::TOUCH);
            item.overwrite_value_padded(digits.as_bytes());
            // CAS, access time and (with `ma T`) expiry: one header update.
            let w = h.charge_write(header_bytes::TOUCH);
            w.set_cas(cas);
            if let Some(rel) = new_exptime {
                w.set_exptime_rel_s(rel);
                self.note_expiry(rel);
            }
            self.reseal(h, item.proof());
            w
        } else {
            let flags = h.client_flags();
            let exptime = new_exptime.unwrap_or(h.exptime_rel_s());
            let key_binary = h.state() & state::KEY_BINARY;
            match self.new_item(key, key_hash, &[digits.as_bytes()], flags, exptime, now) {
                Ok(new) => {
                    let w = new.view().header();
                    w.set_cas(cas);
                    w.set(key_binary);
                    self.link(&mut table, key_hash, new, Some(h));
                    w
                }
                Err(_) => return ArithOutcome::OutOfMemory,
            }
        };
        target.touch_last_access(now);
        ArithOutcome::Value {
            value,
            cas: self.visible_cas(cas),
            ttl_remaining_s: Self::ttl_remaining(target.read(), now),
            ttl_before_touch_s,
        }
    }

    pub fn touch(&self, key: &[u8], exptime: ClientExptime) -> TouchOutcome {
        self.counters.add(G::CmdTouch, 1);
        let rel = self.exptime_to_rel(exptime);
        let key_hash = self.index.hash(key);
        let mut table = self.index.shard(key_hash).table.lock();
        let now = self.now_s();
        let Some(Found { tier, item }) = self.find_live_item(&mut table, key_hash, key, now, false)
        else {
            self.counters.add(G::TouchMisses, 1);
            return TouchOutcome::NotFound;
        };
        let addr = item.addr();
        let h = item.header();
        self.counters
            .add_class(tier.class_of(addr), C::TouchHits, 1);
        match rel {
            Some(rel) => {
                // A touch rewrites expiry and access time: charged once when the edit
                // ends, less the access word's line if the policy's hit charged it.
                let mut edit = h.edit(header_bytes::TOUCH);
                edit.mark_dirty();
                if h.exptime_rel_s() != rel {
                    // A pool record changes in place: unsealed, retimed, sealed again.
                    self.unseal(tier, h, header_bytes::TOUCH);
                    edit.write().set_exptime_rel_s(rel);
                    self.reseal(h, item.proof());
                    self.note_expiry(rel);
                }
                if self.policy.on_access(
                    EngineOps::new(self),
                    tier,
                    h,
                    tier.class_of(addr),
                    now,
                    &mut ShardEntry::new(&mut table, key_hash),
                ) {
                    edit.except(header_bytes::ACCESS);
                }
                edit.finish();
            }
            None => self.unlink(&mut table, key_hash, addr),
        }
        TouchOutcome::Touched
    }

    /// Counts a `flush_all` that was refused (`-F`, or a delay that is not a number), as
    /// memcached counts every one in `cmd_flush`.
    pub fn count_flush_command(&self) {
        self.counters.add(G::CmdFlush, 1);
    }

    /// `flush_all [delay]`: invalidates every item now, or `delay_s` seconds from now
    /// (an absolute Unix time above 30 days). Items are removed lazily and by the
    /// crawler, as memcached does.
    pub fn flush_all(&self, delay_s: i64) {
        self.counters.add(G::CmdFlush, 1);
        let now = self.now_s();
        if delay_s <= 0 {
            // memcached takes a CAS value for the flush (`get_cas_id`): every item stored
            // before it has a smaller CAS, and the next store's CAS skips one value.
            self.flush_oldest_cas
                .store(self.next_cas(), Ordering::Relaxed);
            self.flush_at_s.store(now.max(1), Ordering::Relaxed);
        } else {
            let when = self.exptime_to_rel(delay_s).unwrap_or(now).max(1);
            self.flush_at_s.store(when, Ordering::Relaxed);
        }
        self.note_expiry(self.flush_at_s.load(Ordering::Relaxed));
        // A persistent pool keeps the flush, before it is acknowledged: flushed items
        // must not come back after a restart.
        if let Some(pool) = self.slow().and_then(|t| t.pool_file.as_ref()) {
            let stored = pool.store_flush_state(
                self.flush_oldest_cas.load(Ordering::Relaxed),
                self.flush_at_s.load(Ordering::Relaxed),
            );
            if let Err(e) = stored {
                eprintln!("fogcached: cannot persist flush_all in the pool: {e}");
            }
        }
    }
}

/// The state bit a new item gets for a request whose key came base64-encoded.
fn key_binary_bit(key_binary: bool) -> u16 {
    if key_binary {
        state::KEY_BINARY
    } else {
        0
    }
}

/// A u64 formatted in decimal on the stack.
struct DecimalBuf {
    buf: [u8; 20],
    start: usize,
}

impl DecimalBuf {
    fn new(mut v: u64) -> DecimalBuf {
        let mut buf = [0u8; 20];
        let mut start = buf.len();
        loop {
            start -= 1;
            buf[start] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        DecimalBuf { buf, start }
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
    fn len(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_parsing_follows_memcached() {
        use protocol::common::parse_u64;
        assert_eq!(parse_u64(b"42"), Some(42));
        assert_eq!(parse_u64(b"42  "), Some(42));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"000000000000000000000000042"), Some(42));
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"  "), None);
        assert_eq!(parse_u64(b"\t\n"), None);
        assert_eq!(parse_u64(b"1a"), None);
        assert_eq!(parse_u64(b"a1"), None);
        assert_eq!(parse_u64(b"+"), None);
        // Checked against memcached 1.6.18 (`incr k 1` on each value): `+3` -> 4,
        // ` 7` -> 8, `12 abc` -> 13, `12\r\nab` -> 13, `-0` -> 1, `1\0a` -> 2,
        // `1\t` -> 2, `9 0` (decr 0) -> 9; `-1 ` and `1a` are non-numeric.
        assert_eq!(parse_u64(b"+3"), Some(3));
        assert_eq!(parse_u64(b" 7"), Some(7));
        assert_eq!(parse_u64(b"12 abc"), Some(12));
        assert_eq!(parse_u64(b"12\r\nab"), Some(12));
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"1\0a"), Some(1));
        assert_eq!(parse_u64(b"1\t"), Some(1));
        assert_eq!(parse_u64(b"9 0"), Some(9));
        assert_eq!(parse_u64(b"-1 "), None);
        assert_eq!(parse_u64(b"-18446744073709551615"), Some(1));
        assert_eq!(DecimalBuf::new(0).as_bytes(), b"0");
        assert_eq!(
            DecimalBuf::new(u64::MAX).as_bytes(),
            b"18446744073709551615"
        );
    }
}
