//! Test builds only (cargo feature `test-hooks`, which the engine's own tests turn on
//! through the engine's dev-dependency on itself; `cargo build -p server` never does):
//! one pause point in a migration, after the destination chunk is allocated and before
//! the item's shard is locked again for the re-check and the copy (between steps 2 and
//! 3 of `move_item`, `moves.rs`). No lock is held there, so a test can run a request on the
//! key while the migration waits, and check that the re-check makes the request win;
//! or a stress test can have every migration yield its thread there, as a preemption
//! would, so that concurrent requests meet the re-check often rather than rarely.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Condvar;

use crate::api::TierId;
use crate::engine::Engine;
use crate::lock::{Mutex, Rank};
use crate::moves::{Direction, Migration, MoveReq};

/// A paused migration goes on by itself after this long (a backstop for a test that
/// neither releases nor drops its `MigrationPause`; `release` then reports it).
const PAUSE_MAX: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Armed,
    Paused,
    Released,
    GaveUp,
}

pub(crate) struct PausePoint {
    key_hash: u32,
    direction: Direction,
    phase: Mutex<Phase>,
    changed: Condvar,
}

/// Holds the next migration of one key in one direction at the pause point (see the
/// module). Dropping it releases the migration, or disarms the pause if no migration
/// reached it, so a failing test never leaves a migration thread stuck.
#[must_use = "dropping the pause releases the migration at once"]
pub struct MigrationPause<'e> {
    moves: &'e Migration,
    point: Arc<PausePoint>,
}

impl Engine {
    /// Test builds only: arms a pause for the next migration of `key` to tier `to`
    /// (`TierId::Dram`: a promotion; `TierId::Slow`: a demotion), wherever it runs
    /// (a migration thread, a store making DRAM room, a page move). One at a time.
    pub fn pause_migration_before_relock(&self, key: &[u8], to: TierId) -> MigrationPause<'_> {
        let point = Arc::new(PausePoint {
            key_hash: self.index.hash(key),
            direction: match to {
                TierId::Dram => Direction::ToDram,
                TierId::Slow => Direction::ToSlow,
            },
            phase: Mutex::new(Rank::PausePhase, Phase::Armed),
            changed: Condvar::new(),
        });
        let mut armed = self.moves.pause_before_relock.lock();
        assert!(armed.is_none(), "one migration pause at a time");
        *armed = Some(Arc::clone(&point));
        MigrationPause {
            moves: &self.moves,
            point,
        }
    }
}

/// A shard lock held by a test (see [`Engine::hold_shard_of`]); dropping it unlocks.
#[must_use = "dropping the hold unlocks the shard at once"]
pub struct ShardHold<'e> {
    _table: crate::index::ShardGuard<'e>,
}

impl Engine {
    /// Test builds only: locks the index shard of `key` until the hold is dropped (what
    /// any request on a key of that shard does for its duration).
    pub fn hold_shard_of(&self, key: &[u8]) -> ShardHold<'_> {
        ShardHold {
            _table: self.index.shard(self.index.hash(key)).table.lock(),
        }
    }

    /// Test builds only: with `on`, every migration yields its thread at the pause
    /// point (what a preemption there does in production), which widens the window
    /// only the re-check covers from a few instructions to a scheduling slice.
    pub fn yield_migrations_before_relock(&self, on: bool) {
        self.moves.yield_before_relock.store(on, Ordering::Relaxed);
    }
}

impl MigrationPause<'_> {
    /// Waits until the migration is held at the pause point; false if none got there
    /// within `timeout`.
    pub fn wait_until_paused(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut phase = self.point.phase.lock();
        while *phase == Phase::Armed {
            if phase.wait_until(&self.point.changed, deadline) {
                break;
            }
        }
        *phase == Phase::Paused
    }

    /// Lets the migration go on (to its re-check). Returns whether it was still held
    /// here: false if it never arrived or gave up waiting.
    pub fn release(&self) -> bool {
        {
            let mut armed = self.moves.pause_before_relock.lock();
            if armed.as_ref().is_some_and(|p| Arc::ptr_eq(p, &self.point)) {
                *armed = None;
            }
        }
        let mut phase = self.point.phase.lock();
        let was_paused = *phase == Phase::Paused;
        *phase = Phase::Released;
        self.point.changed.notify_all();
        was_paused
    }
}

impl Drop for MigrationPause<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

impl Migration {
    /// The pause point itself: holds this migration if a test armed a pause for it.
    pub(crate) fn pause_point_before_relock(&self, req: &MoveReq, direction: Direction) {
        if self.yield_before_relock.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
        let point = {
            let mut armed = self.pause_before_relock.lock();
            match armed.as_ref() {
                Some(p) if p.key_hash == req.key_hash && p.direction == direction => armed.take(),
                _ => None,
            }
        };
        let Some(point) = point else {
            return;
        };
        let mut phase = point.phase.lock();
        if *phase != Phase::Armed {
            return;
        }
        *phase = Phase::Paused;
        point.changed.notify_all();
        let deadline = Instant::now() + PAUSE_MAX;
        while *phase == Phase::Paused {
            if phase.wait_until(&point.changed, deadline) {
                *phase = Phase::GaveUp;
            }
        }
    }
}
