//! A cheap monotonic clock for the request path.

/// Nanoseconds of `CLOCK_MONOTONIC_COARSE`: the monotonic clock (the one `Instant` reads)
/// at the kernel's tick resolution, a few milliseconds. It is read from the vDSO without
/// the precise clock's TSC arithmetic, and returned as one integer, so a caller that only
/// needs whole seconds or 1/32-second ticks pays a handful of instructions instead of
/// `Instant::elapsed`'s (about 150 per call, a twentieth of a `get` hit's, measured with
/// scripts/callgrind-per-request.sh).
#[inline]
pub fn monotonic_coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec. CLOCK_MONOTONIC_COARSE exists on every
    // Linux since 2.6.32 and cannot fail with a valid pointer, so the result is not checked
    // (a failure would leave `ts` at 0, which only makes time stand still).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_moves_forward_with_the_precise_one() {
        let coarse_start = monotonic_coarse_ns();
        let precise_start = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let coarse_elapsed_ns = monotonic_coarse_ns() - coarse_start;
        let precise_elapsed_ns = precise_start.elapsed().as_nanos() as u64;
        // Within two kernel ticks (at most 10 ms each at HZ=100) of each other.
        assert!(
            coarse_elapsed_ns.abs_diff(precise_elapsed_ns) < 20_000_000,
            "coarse {coarse_elapsed_ns} ns, precise {precise_elapsed_ns} ns"
        );
    }
}
