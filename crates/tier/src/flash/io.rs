//! The one seam every flash read and write goes through ([`FlashIo`]), so that a test can
//! put [`FaultyIo`] in front of a device and make chosen reads or writes fail as a dying
//! device would (`EIO`), and check what the tier above does: a failed read is a miss and
//! retires its segment, a failed write drops its segment, and neither reaches a client.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::AlignedBuf;

/// Reads and writes of whole aligned buffers by offset. Offsets and lengths are
/// multiples of [`super::IO_ALIGN_BYTES`], inside `size_bytes`.
pub trait FlashIo: Send + Sync {
    /// Bytes of the device the tier uses.
    fn size_bytes(&self) -> u64;
    /// Fills `buf` from `offset_bytes`; an error leaves its contents unspecified.
    fn read_at(&self, offset_bytes: u64, buf: &mut AlignedBuf) -> std::io::Result<()>;
    /// Writes all of `buf` at `offset_bytes`.
    fn write_at(&self, offset_bytes: u64, buf: &AlignedBuf) -> std::io::Result<()>;
}

/// Which operation a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    Read,
    Write,
}

/// One injected fault: operations of kind `op` that touch `offsets` fail with `errno`,
/// `times` more times (`None`: always).
#[derive(Clone, Debug)]
struct Fault {
    op: IoOp,
    offsets: Range<u64>,
    errno: i32,
    times: Option<u32>,
}

/// A [`FlashIo`] that fails the operations a test chose and passes the rest to `inner`.
pub struct FaultyIo<I> {
    inner: I,
    faults: Mutex<Vec<Fault>>,
    injected: AtomicU64,
}

impl<I: FlashIo> FaultyIo<I> {
    pub fn new(inner: I) -> FaultyIo<I> {
        FaultyIo {
            inner,
            faults: Mutex::new(Vec::new()),
            injected: AtomicU64::new(0),
        }
    }

    /// Operations of kind `op` touching any byte of `offsets` fail with `EIO`, the next
    /// `times` of them (`None`: every one from now on).
    pub fn fail(&self, op: IoOp, offsets: Range<u64>, times: Option<u32>) {
        self.fail_with(op, offsets, times, libc::EIO);
    }

    /// [`FaultyIo::fail`] with another `errno` (e.g. `ENOSPC` for a write).
    pub fn fail_with(&self, op: IoOp, offsets: Range<u64>, times: Option<u32>, errno: i32) {
        if times == Some(0) {
            return;
        }
        self.lock_faults().push(Fault {
            op,
            offsets,
            errno,
            times,
        });
    }

    /// Removes every fault not used up yet.
    pub fn heal(&self) {
        self.lock_faults().clear();
    }

    /// Operations failed on purpose so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    pub fn inner(&self) -> &I {
        &self.inner
    }

    fn lock_faults(&self) -> std::sync::MutexGuard<'_, Vec<Fault>> {
        // A test that panicked while holding it left nothing half-done: a list.
        self.faults
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The error an operation of kind `op` on `[offset, offset + len)` is to fail with.
    fn fault_for(&self, op: IoOp, offset_bytes: u64, len_bytes: usize) -> Option<std::io::Error> {
        let end = offset_bytes.saturating_add(len_bytes as u64);
        let mut faults = self.lock_faults();
        let index = faults.iter().position(|fault| {
            fault.op == op && fault.offsets.start < end && offset_bytes < fault.offsets.end
        })?;
        let errno = faults[index].errno;
        if let Some(times) = faults[index].times.as_mut() {
            *times -= 1;
            if *times == 0 {
                faults.remove(index);
            }
        }
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some(std::io::Error::from_raw_os_error(errno))
    }
}

impl<I: FlashIo> FlashIo for FaultyIo<I> {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut AlignedBuf) -> std::io::Result<()> {
        match self.fault_for(IoOp::Read, offset_bytes, buf.len()) {
            Some(error) => Err(error),
            None => self.inner.read_at(offset_bytes, buf),
        }
    }

    fn write_at(&self, offset_bytes: u64, buf: &AlignedBuf) -> std::io::Result<()> {
        match self.fault_for(IoOp::Write, offset_bytes, buf.len()) {
            Some(error) => Err(error),
            None => self.inner.write_at(offset_bytes, buf),
        }
    }
}
