//! A timer with microsecond precision for the workers' event loops.
//!
//! `epoll_wait` (and so `mio::Poll::poll`) takes its timeout in whole milliseconds, rounded
//! up: a worker that sleeps until the next open-loop send or the end of an origin delay
//! would wake up to a millisecond late, and that lateness would be charged to the server
//! (open-loop latency is measured from the intended send time). A `timerfd` registered in
//! the same poll wakes the loop at the due instant instead.
//!
//! This is the crate's only `unsafe` code: three libc calls on a file descriptor that
//! this type owns.
//! Invariants relied on:
//! - `fd` is a timerfd opened by `new` and owned (closed on drop by `OwnedFd`), so every
//!   call below passes a valid descriptor;
//! - the `itimerspec` and the 8-byte read buffer live on the stack for the whole call;
//! - the descriptor is non-blocking, so `clear` never blocks the event loop.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use mio::event::Source;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

pub struct PreciseTimer {
    fd: OwnedFd,
}

impl PreciseTimer {
    pub fn new() -> io::Result<PreciseTimer> {
        // SAFETY: timerfd_create takes no pointers; a negative result is an error.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(PreciseTimer { fd })
    }

    /// Fires once, `after` from now (at least 1 ns: a zero value would disarm it).
    pub fn arm_after(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(after.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::from(after.subsec_nanos() as i32),
            },
        };
        // SAFETY: valid owned fd; `spec` outlives the call; a null old-value pointer is
        // allowed.
        let result =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Consumes a pending expiry so that the next one wakes the poll again.
    pub fn clear(&self) {
        let mut expirations = [0u8; 8];
        // SAFETY: valid owned fd; the buffer is 8 writable bytes, as timerfd requires.
        // EAGAIN (nothing pending) is fine: the result is ignored on purpose.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                expirations.as_mut_ptr().cast(),
                expirations.len(),
            )
        };
    }
}

impl Source for PreciseTimer {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).deregister(registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Poll};
    use std::time::Instant;

    #[test]
    fn the_timer_wakes_a_poll_before_its_millisecond_timeout() {
        let mut poll = Poll::new().expect("poll");
        let mut timer = PreciseTimer::new().expect("timerfd");
        poll.registry()
            .register(&mut timer, Token(7), Interest::READABLE)
            .expect("register");
        let mut events = Events::with_capacity(4);
        timer.arm_after(Duration::from_micros(200)).expect("arm");
        let start = Instant::now();
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .expect("poll");
        // Woken by the timer (not by the 5 s timeout), and the expiry can be consumed.
        assert!(events.iter().any(|e| e.token() == Token(7)));
        assert!(start.elapsed() < Duration::from_secs(5));
        timer.clear();
        // Once consumed and not re-armed, nothing wakes the poll.
        poll.poll(&mut events, Some(Duration::from_millis(20)))
            .expect("poll");
        assert!(events.iter().all(|e| e.token() != Token(7)));
    }
}
