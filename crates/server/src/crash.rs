//! What a panic does to the `fogcached` process: it ends it, at once and loudly, as
//! memcached's and TigerBeetle's assertion failures do.
//!
//! Why not let the panicking thread die and serve on: the engine's structures are shared
//! by every thread under parking_lot locks, which do not poison, so a thread that panics
//! half-way through an update (an LRU relink, a move's index swap, a page handed to
//! another class) leaves them half-updated for the others to serve from; and a
//! background thread that dies (a migration, maintainer, crawler, automover, logger,
//! metrics or upstream thread) would leave the server answering with that work silently
//! stopped. Threads are joined only at shutdown, so nobody would notice.
//!
//! So `main` installs [`install_panic_hook`] before anything else: a panic in any thread
//! writes one report to stderr (`fogcached: panic in thread '<name>': <message>, at
//! <file>:<line>:<column>`, then a backtrace) and calls `abort`: the process ends with
//! SIGABRT (a shell's status 134; systemd's `status=6/ABRT`, which `Restart=on-failure`
//! restarts; a core file where the core limit allows, e.g. `-r` or `LimitCORE=`). The
//! next start recovers the slow tier from its pool as after `kill -9` (the pool is not
//! marked clean). The release profile also builds with `panic = "abort"`, so no unwinding
//! code runs even before the hook; the hook is what ends the process in every build,
//! including the test builds, which must unwind (cargo builds tests with
//! `panic = "unwind"` whatever the profile says).
//!
//! Test builds (cargo feature `test-hooks`) can make any kind of thread panic on purpose:
//! with [`TEST_PANIC_THREAD_ENV`] naming a thread (`fc-worker`, `fc-migrate`, ...), a
//! SIGUSR2 arms `engine::fault`'s panic point for it (`tests/panic_process.rs`).

use std::any::Any;
use std::io::Write;

/// Test builds only: the environment variable naming the thread that SIGUSR2 makes
/// panic (`fc-worker` for any worker, `fc-worker-1` for one).
#[cfg(feature = "test-hooks")]
pub const TEST_PANIC_THREAD_ENV: &str = "FOGCACHED_TEST_PANIC_THREAD";

/// Makes every panic of the process, in any thread, print [`panic_report`] on stderr and
/// abort. Call it first in `main`, before any thread exists.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let location = info
            .location()
            .map(|at| format!("{}:{}:{}", at.file(), at.line(), at.column()));
        // Captured whatever RUST_BACKTRACE says: the process is ending, and the
        // operator's report should say where it was.
        let backtrace = std::backtrace::Backtrace::force_capture().to_string();
        let report = panic_report(
            thread.name().unwrap_or("<unnamed>"),
            payload_text(info.payload()),
            location.as_deref(),
            &backtrace,
        );
        // One write, so that two threads panicking at once do not interleave their
        // lines; a failed write (stderr closed) must not stop the abort.
        let _ = std::io::stderr().lock().write_all(report.as_bytes());
        std::process::abort();
    }));
}

/// What the panic hook prints: a first line an operator (or a log search) finds, naming
/// the thread, the message and where; what happens next; the backtrace.
pub fn panic_report(
    thread: &str,
    message: &str,
    location: Option<&str>,
    backtrace: &str,
) -> String {
    let at = location.map_or(String::new(), |at| format!(", at {at}"));
    format!(
        "fogcached: panic in thread '{thread}': {message}{at}\n\
         fogcached: aborting: a panic may leave shared state half-updated; a restart \
         recovers the slow tier from its pool as after a crash\n\
         stack backtrace:\n{backtrace}\n"
    )
}

/// The text of a panic's payload: `panic!`'s message (a `&str` or a `String`).
pub fn payload_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "(a panic payload that is not text)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_thread_message_and_place_on_its_first_line() {
        let report = panic_report(
            "fc-migrate",
            "index out of bounds",
            Some("crates/engine/src/moves.rs:12:5"),
            "   0: somewhere",
        );
        let first = report.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            "fogcached: panic in thread 'fc-migrate': index out of bounds, at \
             crates/engine/src/moves.rs:12:5"
        );
        assert!(report.contains("a restart recovers the slow tier"));
        assert!(report.ends_with("   0: somewhere\n"));
    }

    #[test]
    fn payloads_of_both_panic_forms_are_text() {
        let literal: Box<dyn Any + Send> = Box::new("literal");
        let formatted: Box<dyn Any + Send> = Box::new(format!("formatted {}", 1));
        let other: Box<dyn Any + Send> = Box::new(7u32);
        assert_eq!(payload_text(literal.as_ref()), "literal");
        assert_eq!(payload_text(formatted.as_ref()), "formatted 1");
        assert_eq!(
            payload_text(other.as_ref()),
            "(a panic payload that is not text)"
        );
    }
}
