//! Panic points: one call at the top of every long-lived thread's loop (the engine's
//! background threads here, the server's listener, workers, upstream loops, logger,
//! metrics and signal threads), so a test can make any kind of thread panic and check
//! what the process does then (the `fogcached` binary aborts: `server`'s `process.rs`).
//!
//! Only test builds can panic here (cargo feature `test-hooks`, which the engine's and
//! the server's own tests turn on through their dev-dependencies on themselves; `cargo
//! build --release -p server`, the binary operators run, never does): without the
//! feature [`panic_point`] is an empty inline function and [`arm_panic`] does not
//! exist. Even in a test build nothing a client sends can arm one: only the process
//! itself can, at its operator's request (the server's binary reads the thread's name
//! from the environment and arms on SIGUSR2).
//!
//! The armed state is one per process (a static): a panic point has no engine at hand
//! (the clock thread, the server's threads), and one process is one server.

/// Panics if a test armed a panic for the current thread (see [`arm_panic`]); nothing
/// at all outside test builds.
#[inline(always)]
#[track_caller]
pub fn panic_point() {
    #[cfg(feature = "test-hooks")]
    armed::panic_point();
}

/// Test builds only: from now on, the next panic point reached by a thread named
/// `thread` (or `thread-<n>`, any `n`: one of a numbered set, e.g. `fc-worker` for
/// `fc-worker-1`) panics. One arming per process; returns false if one was made
/// before (the first stays).
#[cfg(feature = "test-hooks")]
pub fn arm_panic(thread: &str) -> bool {
    armed::arm(thread)
}

/// The message of an injected panic (tests look for it in the process's stderr).
pub const INJECTED_PANIC_MESSAGE: &str = "injected panic (test hook)";

#[cfg(feature = "test-hooks")]
mod armed {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    static TARGET: OnceLock<String> = OnceLock::new();
    /// Set after `TARGET`: the panic points read only this until it is.
    static ARMED: AtomicBool = AtomicBool::new(false);

    pub(super) fn arm(thread: &str) -> bool {
        let first = TARGET.set(thread.to_owned()).is_ok();
        ARMED.store(true, Ordering::Release);
        first
    }

    #[track_caller]
    pub(super) fn panic_point() {
        if !ARMED.load(Ordering::Acquire) {
            return;
        }
        let thread = std::thread::current();
        let (Some(target), Some(name)) = (TARGET.get(), thread.name()) else {
            return;
        };
        if names(target, name) {
            panic!("{}", super::INJECTED_PANIC_MESSAGE);
        }
    }

    /// Whether `target` names the thread `name`: the same, or `name` is `target-<n>`.
    pub(super) fn names(target: &str, name: &str) -> bool {
        name == target
            || name
                .strip_prefix(target)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
}

#[cfg(all(test, feature = "test-hooks"))]
mod tests {
    use super::armed::names;

    #[test]
    fn a_target_names_its_thread_or_a_numbered_one_of_its_set() {
        assert!(names("fc-worker", "fc-worker"));
        assert!(names("fc-worker", "fc-worker-0"));
        assert!(names("fc-worker", "fc-worker-12"));
        assert!(names("fc-worker-1", "fc-worker-1"));
        assert!(!names("fc-worker-1", "fc-worker-12"));
        assert!(!names("fc-maint", "fc-maint-slow"));
        assert!(!names("fc-worker", "fc-worker-"));
        assert!(!names("fc-worker", "fc-workers"));
    }
}
