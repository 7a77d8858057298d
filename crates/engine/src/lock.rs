//! The engine's mutex: parking_lot's, with a rank in the lock order, checked in test and
//! debug builds (issue 24: a deadlock must be a test failure, not a hang).
//!
//! Every lock of the engine is a [`Mutex`] made with a [`Rank`]. The rule: a thread may
//! *block* on a lock only if its rank is above the rank of every engine lock the thread
//! already holds. `try_lock` is exempt (it cannot wait, so it cannot close a cycle), but
//! a lock it took counts as held for what the thread blocks on next. Two threads that
//! both follow the rule cannot deadlock on these locks: each waits only for a lock ranked
//! above all it holds, so a cycle of waiters would need a rank above itself. Checking the
//! rule at each acquisition catches an inverted order the first time a test runs through
//! it, whether or not another thread happened to be in the opposite order then (which a
//! cycle detector such as parking_lot's `deadlock_detection` needs).
//!
//! The order (lowest first): index shard -> hotspot tuning -> hotspot reassignment ->
//! class (either tier) -> page pool (either tier) -> Move queue -> the leaves (event log,
//! recovery report, group commit, background handles, automover, test pauses: no other
//! engine lock is taken under them). So holders of a class lock only `try_lock` shards,
//! and no thread waits for a second shard, or a second class or pool of either tier.
//!
//! Builds with `debug_assertions` or the `test-hooks` feature (every test build of the
//! engine, through its dev-dependency on itself) check the rule with a per-thread list
//! of the ranks held, and panic on a violation naming both locks. Release builds (the
//! server's) compile the check away: [`Mutex::lock`] is parking_lot's `lock`, and the
//! guard a newtype around parking_lot's.

use std::ops::{Deref, DerefMut};

/// A lock's place in the engine's lock order: a thread blocks only on a lock ranked above
/// every lock it holds (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// An index shard's table (`index.rs`).
    Shard,
    /// A hotspot class's threshold tuning (`policy/hotspot/thresholds.rs::tune`, which reads its
    /// class's free chunks under it).
    HotspotTuning,
    /// The hotspot policy's DRAM reassignment plan (`policy/hotspot/reassignment.rs`), which reads
    /// DRAM's free pages under it.
    HotspotReassignment,
    /// A slab class of either tier: free chunks and LRU lists (`engine.rs::ClassLock`).
    /// One rank for both tiers: no thread waits for a class lock while holding another,
    /// of its tier or of the other.
    Class,
    /// A tier's page pool (`slab.rs::PagePool`), taken under a class lock; one rank for
    /// both tiers, as for classes.
    Pool,
    /// A Move queue (`moves.rs`), offered to under a shard or a class lock.
    MoveQueue,
    /// The slab automover's windows (`automove.rs`).
    Automove,
    /// The event log's queue (`events.rs`), recorded to under any of the above.
    Events,
    /// The last recovery's report (`recovery.rs`).
    Recovery,
    /// The persistent pool's group commit (`records.rs::make_durable`).
    Flushing,
    /// The background threads' handles (`background.rs`).
    Background,
    /// Test builds: the armed migration pause (`pause.rs`).
    #[cfg(feature = "test-hooks")]
    PauseArm,
    /// Test builds: a migration pause's phase (`pause.rs`).
    #[cfg(feature = "test-hooks")]
    PausePhase,
}

/// A mutex of the engine: parking_lot's, with its [`Rank`].
pub(crate) struct Mutex<T> {
    #[cfg_attr(not(any(debug_assertions, feature = "test-hooks")), allow(dead_code))]
    rank: Rank,
    inner: parking_lot::Mutex<T>,
}

/// A held [`Mutex`]; unlocks when dropped.
#[must_use = "if unused the Mutex will immediately unlock"]
pub(crate) struct Guard<'a, T> {
    inner: parking_lot::MutexGuard<'a, T>,
    _held: order::Held,
}

impl<T> Mutex<T> {
    pub const fn new(rank: Rank, value: T) -> Mutex<T> {
        Mutex {
            rank,
            inner: parking_lot::Mutex::new(value),
        }
    }

    /// Waits for the lock. Checked builds: panics if the thread holds a lock ranked at
    /// or above this one.
    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        order::before_blocking(self.rank);
        let inner = self.inner.lock();
        Guard {
            inner,
            _held: order::Held::new(self.rank),
        }
    }

    /// Takes the lock if it is free (never waits, so never checked).
    #[inline]
    pub fn try_lock(&self) -> Option<Guard<'_, T>> {
        let inner = self.inner.try_lock()?;
        Some(Guard {
            inner,
            _held: order::Held::new(self.rank),
        })
    }
}

impl<T: Default> Mutex<T> {
    /// A mutex of `rank` around `T::default()`.
    pub fn with_default(rank: Rank) -> Mutex<T> {
        Mutex::new(rank, T::default())
    }
}

impl<T> Guard<'_, T> {
    /// Waits on `condvar` (which releases and retakes the lock), until `deadline`.
    /// Returns whether it timed out. (Test hooks only.)
    #[cfg(feature = "test-hooks")]
    pub fn wait_until(
        &mut self,
        condvar: &parking_lot::Condvar,
        deadline: std::time::Instant,
    ) -> bool {
        condvar.wait_until(&mut self.inner, deadline).timed_out()
    }
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

/// Checked builds: the ranks each thread holds.
#[cfg(any(debug_assertions, feature = "test-hooks"))]
mod order {
    use std::cell::RefCell;

    use super::Rank;

    thread_local! {
        /// Ranks of the engine locks this thread holds, in the order taken (a rank may
        /// appear twice: a shard held and another one `try_lock`ed).
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    /// Panics if the thread holds a lock that `rank` is not above.
    pub fn before_blocking(rank: Rank) {
        let violation = HELD
            .try_with(|held| {
                let held = held.borrow();
                let highest = held.iter().copied().max()?;
                (highest >= rank).then(|| (highest, held.clone()))
            })
            .ok()
            .flatten();
        if let Some((highest, held)) = violation {
            panic!(
                "lock order violated: blocking on a {rank:?} lock while holding a \
                 {highest:?} lock (held: {held:?}); a thread may wait only for a lock ranked \
                 above every lock it holds (engine/src/lock.rs: shard -> class -> pool)"
            );
        }
    }

    /// A lock of `rank` held by this thread, until dropped.
    pub struct Held {
        rank: Rank,
    }

    impl Held {
        pub fn new(rank: Rank) -> Held {
            let _ = HELD.try_with(|held| held.borrow_mut().push(rank));
            Held { rank }
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            let _ = HELD.try_with(|held| {
                let mut held = held.borrow_mut();
                if let Some(at) = held.iter().rposition(|&r| r == self.rank) {
                    held.remove(at);
                }
            });
        }
    }
}

/// Release builds: nothing is checked or recorded.
#[cfg(not(any(debug_assertions, feature = "test-hooks")))]
mod order {
    use super::Rank;

    #[inline(always)]
    pub fn before_blocking(_rank: Rank) {}

    pub struct Held;

    impl Held {
        #[inline(always)]
        pub fn new(_rank: Rank) -> Held {
            Held
        }
    }
}

#[cfg(all(test, any(debug_assertions, feature = "test-hooks")))]
mod tests {
    use super::*;

    #[test]
    fn blocking_in_order_and_trying_out_of_order_pass() {
        let shard = Mutex::new(Rank::Shard, ());
        let class = Mutex::new(Rank::Class, ());
        let pool = Mutex::new(Rank::Pool, ());
        {
            let _s = shard.lock();
            let _c = class.lock();
            let _p = pool.lock();
        }
        let _c = class.lock();
        let _s = shard.try_lock().expect("free");
        let _p = pool.lock();
    }

    #[test]
    #[should_panic(expected = "blocking on a Shard lock while holding a Class lock")]
    fn blocking_on_a_shard_under_a_class_panics() {
        let shard = Mutex::new(Rank::Shard, ());
        let class = Mutex::new(Rank::Class, ());
        let _c = class.lock();
        let _s = shard.lock();
    }

    #[test]
    #[should_panic(expected = "blocking on a Shard lock while holding a Shard lock")]
    fn blocking_on_a_second_shard_panics() {
        let a = Mutex::new(Rank::Shard, ());
        let b = Mutex::new(Rank::Shard, ());
        let _a = a.lock();
        let _b = b.lock();
    }

    #[test]
    fn a_lock_released_out_of_order_is_forgotten() {
        let shard = Mutex::new(Rank::Shard, ());
        let class = Mutex::new(Rank::Class, ());
        let s = shard.lock();
        let c = class.lock();
        drop(s);
        drop(c);
        let _s = shard.lock();
    }
}
