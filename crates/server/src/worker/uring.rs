//! The io_uring event loop (`--io-engine io-uring`, chosen by `auto` when the kernel
//! allows it).
//!
//! One ring per worker. Each turn of the loop is one `io_uring_enter`: it submits every
//! receive and send the last turn asked for, across all of the worker's connections, and
//! waits for at least one completion. The completions are then handed to the same
//! connection state machine the epoll loop drives (`Connection::receive`, `service`,
//! `take_output`), so the protocols cannot tell the loops apart. The kernel's work for
//! those completions runs inside that same `io_uring_enter` ([`TaskRun`]), never by
//! interrupting the worker.
//!
//! - **Receive**: into a buffer chosen by the kernel from a provided buffer ring
//!   (`IORING_REGISTER_PBUF_RING`, Linux 5.19). The bytes are copied into the
//!   connection's input and the buffer goes back to the ring at once, so the ring's
//!   buffers are shared by all the worker's connections and an idle connection holds
//!   none. Two ways (`--io-uring-recv`, `stats settings` shows `io_uring_recv`):
//!   - *multishot* (Linux 6.0; `auto` takes it when [`probe_multishot_recv`] passes): one
//!     receive is armed when the connection first wants input and stays armed, each
//!     arrival a completion with `IORING_CQE_F_MORE` and a buffer of its own, so a
//!     request-reply exchange submits no receive at all. A completion without F_MORE ends
//!     it (no buffer left, `ENOBUFS`, is asked for again next turn; a cancel's
//!     `ECANCELED`; an error; the peer's end of file); it is armed again when the
//!     connection wants input.
//!   - *single*: one receive asked for each time the connection wants input, i.e. has
//!     run every complete request it holds (the point where the epoll loop reads).
//!
//!   Input stays bounded exactly as under epoll, where a connection is read only when it
//!   has run every complete request it holds and its output is under the high-water mark
//!   (a client that pipelines without reading replies stops being read once its replies
//!   back up). The single-shot receive is asked for only then. A multishot receive goes
//!   on delivering: bytes that arrive while the connection does not want input (its
//!   output over the mark, its turn yielded with requests left, parked on the upstream,
//!   closing) are appended to its input all the same (dropping them would lose
//!   requests), and the receive is cancelled (`AsyncCancel` by its `user_data`); it is
//!   armed again once the connection wants input. Why that bounds memory: when the
//!   connection stopped wanting input its input held at most one partial request plus
//!   one receive's bytes (it wanted input before the last receive). Afterwards only
//!   completions posted before the cancel takes effect can add to it: the cancel is
//!   queued at the first such completion and reaches the kernel at the turn's next
//!   `io_uring_enter`, after which the kernel delivers nothing more on that receive (a
//!   cancelled multishot receive checks the cancel before it reads again). Each
//!   completion posted meanwhile holds a buffer of the worker's ring, [`RECV_BUFFERS`] of
//!   [`RECV_BUFFER_BYTES`]: at most all of them unhandled in this turn's batch, plus all
//!   of them again if the buffers handed back in this turn are filled before its end (the
//!   kernel runs deferred work on the way out of any system call the turn makes). So the
//!   input grows past the largest request by at most [`UNWANTED_INPUT_MAX_BYTES`]
//!   (2 x 128 x 16 KiB + 16 KiB, about 4 MiB) per connection; `Connection::receive`
//!   closes a connection past that (it cannot happen; debug builds assert it). And the
//!   receive is re-armed only when the connection wants input again, i.e. after it ran
//!   every complete request, so the excess never accumulates over rounds.
//! - **Send**: the connection's reply buffer is swapped out (no copy) and sent; while it
//!   is in flight the connection fills its other buffer.
//! - **Everything else** arrives through the worker's `mio::Poll`, which the ring watches
//!   with a multishot poll of its file descriptor: the waker (the listener's hand-off,
//!   shutdown, any thread that must wake the worker) and connections that cannot use
//!   completion I/O ([`Stream::completion_io`], e.g. a TLS stream), which are served by
//!   readiness exactly as under epoll.
//! - **Closing**: a closed connection's receive is cancelled and the connection kept (its
//!   socket open, its slot taken) until the kernel returned every operation on it (a
//!   send in flight finishes, as the epoll loop writes a closing connection's last
//!   replies; a multishot receive's bytes delivered before the cancel go back to the
//!   ring, and its final completion, without F_MORE, frees the slot), so the kernel never
//!   writes into or reads from memory freed or reused, and a completion never reaches a
//!   later connection of the slot.
//!
//! Every `unsafe` block of the server's event loop is in this file; each says why the
//! memory it hands the kernel stays valid.

use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use mio::{Events, Poll};

use super::{LoopIo, Worker, EVENTS_CAPACITY};
use crate::connection::{Connection, Outcome, ServiceContext, TakeOutput};
use crate::registry::WorkerCounters;
use crate::stream::Stream;

/// Which event loop the workers run (`--io-engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoEngine {
    /// io_uring when the kernel allows it (see [`probe`]), else epoll.
    Auto,
    IoUring,
    Epoll,
}

impl IoEngine {
    /// The name `--io-engine` takes and `stats settings` shows.
    pub fn name(self) -> &'static str {
        match self {
            IoEngine::Auto => "auto",
            IoEngine::IoUring => "io_uring",
            IoEngine::Epoll => "epoll",
        }
    }

    /// The `--io-engine` the environment variable [`IO_ENGINE_ENV`] asks for, if set.
    pub fn from_env() -> Result<Option<IoEngine>, String> {
        match std::env::var(IO_ENGINE_ENV) {
            Ok(value) if !value.is_empty() => IoEngine::parse(&value).map(Some).ok_or_else(|| {
                format!("unknown {IO_ENGINE_ENV}={value:?} (valid: auto, io-uring, epoll)")
            }),
            _ => Ok(None),
        }
    }

    /// Parses `--io-engine` (`io-uring` and `io_uring` both accepted).
    pub fn parse(value: &str) -> Option<IoEngine> {
        match value {
            "auto" => Some(IoEngine::Auto),
            "io-uring" | "io_uring" | "uring" => Some(IoEngine::IoUring),
            "epoll" => Some(IoEngine::Epoll),
            _ => None,
        }
    }
}

/// The environment variable that sets `--io-engine`'s default (the test suite runs
/// against each loop with it).
pub const IO_ENGINE_ENV: &str = "FOGCACHED_IO_ENGINE";

/// How the io_uring loop receives (`--io-uring-recv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoUringRecv {
    /// Multishot when the kernel has it (see [`probe_multishot_recv`]), else single.
    Auto,
    /// One multishot receive stays armed per connection while it wants input (Linux 6.0).
    Multishot,
    /// One receive per batch of input, asked for each time the connection wants input.
    Single,
}

impl IoUringRecv {
    /// The name `--io-uring-recv` takes and `stats settings` shows (`io_uring_recv`).
    pub fn name(self) -> &'static str {
        match self {
            IoUringRecv::Auto => "auto",
            IoUringRecv::Multishot => "multishot",
            IoUringRecv::Single => "single",
        }
    }

    /// Parses `--io-uring-recv`.
    pub fn parse(value: &str) -> Option<IoUringRecv> {
        match value {
            "auto" => Some(IoUringRecv::Auto),
            "multishot" | "multi" => Some(IoUringRecv::Multishot),
            "single" | "single-shot" | "singleshot" => Some(IoUringRecv::Single),
            _ => None,
        }
    }

    /// The `--io-uring-recv` the environment variable [`IO_URING_RECV_ENV`] asks for, if
    /// set.
    pub fn from_env() -> Result<Option<IoUringRecv>, String> {
        match std::env::var(IO_URING_RECV_ENV) {
            Ok(value) if !value.is_empty() => {
                IoUringRecv::parse(&value).map(Some).ok_or_else(|| {
                    format!(
                        "unknown {IO_URING_RECV_ENV}={value:?} (valid: auto, multishot, single)"
                    )
                })
            }
            _ => Ok(None),
        }
    }
}

/// The environment variable that sets `--io-uring-recv`'s default (so that the test suite
/// and the measurement scripts can run the single-shot receive too).
pub const IO_URING_RECV_ENV: &str = "FOGCACHED_IO_URING_RECV";

/// Submission queue entries per ring (the completion queue has twice as many).
const RING_ENTRIES: u32 = 1024;
/// Size of each provided receive buffer: a typical request batch fits in one.
const RECV_BUFFER_BYTES: usize = 16 * 1024;
/// Provided receive buffers per worker (a power of two). Buffers are returned as soon as
/// their completion is handled, so this bounds only how many connections can receive in
/// one turn; a receive that finds none left is asked for again the next turn.
const RECV_BUFFERS: u16 = 128;
/// The buffer group of a worker's ring (each ring has its own).
const BUFFER_GROUP: u16 = 0;
/// How far past the largest request the input of a connection that does not want input
/// may grow: what a multishot receive can deliver before its cancel takes effect (see the
/// module comment). Every buffer of the ring twice over, and the receive before.
const UNWANTED_INPUT_MAX_BYTES: usize = (2 * RECV_BUFFERS as usize + 1) * RECV_BUFFER_BYTES;

/// Longest a turn waits for completions beyond its quiet sends' (see `Uring::quiet_sends`).
const QUIET_SEND_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(10);

/// Longest one wait under valgrind (see [`running_under_valgrind`]).
const VALGRIND_WAIT_SLICE: std::time::Duration = std::time::Duration::from_millis(5);

/// Whether the process runs under valgrind (its preload library is in `LD_PRELOAD`).
/// Valgrind up to 3.20 does not know that `io_uring_enter` may block, and holds its
/// one-thread-at-a-time lock through the wait, so no other thread (the listener handing
/// over connections) would ever run: there the loop waits in slices of
/// [`VALGRIND_WAIT_SLICE`] and yields after each (scripts/callgrind-per-request.sh
/// measures the loop so; an idle slice is cheap: docs/results/speed.md, "Figures moved
/// out of the server's comments").
fn running_under_valgrind() -> bool {
    std::env::var_os("LD_PRELOAD")
        .is_some_and(|preload| preload.to_string_lossy().contains("vgpreload"))
}

/// What a completion is for: the low byte of its `user_data`; the slot is above it.
const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_CANCEL: u64 = 3;
/// The multishot poll of the worker's `mio::Poll` (no slot).
const OP_POLL: u64 = 4;

fn user_data(slot: usize, op: u64) -> u64 {
    ((slot as u64) << 8) | op
}

/// The environment variable that makes every ring use cooperative task work even where
/// the kernel takes deferred (`cooperative`; unset or `auto`: deferred where possible):
/// the set-up a kernel from 5.19 to 6.0 gets, so that the test suite can run it here.
pub const IO_URING_TASKRUN_ENV: &str = "FOGCACHED_IO_URING_TASKRUN";

/// How a ring hands completions to its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskRun {
    /// DEFER_TASKRUN (Linux 6.1), with SINGLE_ISSUER: the kernel's work for the ring's
    /// operations (a socket's data arriving for a receive, a send's end) is queued for the
    /// worker and run only inside the worker's own `io_uring_enter` that waits for
    /// completions, in one batch, never by interrupting the worker or on another CPU. The
    /// ring is made disabled (R_DISABLED) on the thread that starts the worker and enabled
    /// by the worker's first turn: SINGLE_ISSUER ties it to the thread that enables it.
    /// TASKRUN_FLAG marks the ring when work waits, so that a turn that does not wait
    /// (a yielded connection's) still enters the kernel to run it.
    Deferred,
    /// COOP_TASKRUN (Linux 5.19), where DEFER_TASKRUN is refused: the same work runs at the
    /// worker's next entry to the kernel rather than by an inter-processor interrupt.
    Cooperative,
}

impl TaskRun {
    /// How `-v` names it.
    pub fn name(self) -> &'static str {
        match self {
            TaskRun::Deferred => "deferred",
            TaskRun::Cooperative => "cooperative",
        }
    }
}

/// The builder of every worker's ring (and the start-up probe's) for `task_run`.
fn ring_builder(task_run: TaskRun) -> io_uring::Builder {
    let mut builder = IoUring::builder();
    match task_run {
        TaskRun::Deferred => {
            builder
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_taskrun_flag()
                .setup_r_disabled();
        }
        TaskRun::Cooperative => {
            builder.setup_coop_taskrun();
        }
    }
    builder
}

/// A ring of `entries` submissions (and twice as many completions), deferred task work
/// if the kernel takes it (a kernel before 6.1 refuses the flags with EINVAL) and
/// [`IO_URING_TASKRUN_ENV`] does not ask for cooperative, else cooperative. A deferred
/// ring is disabled until [`enable_on_this_thread`].
fn build_ring(entries: u32) -> std::io::Result<(IoUring, TaskRun)> {
    let build = |task_run: TaskRun| {
        ring_builder(task_run)
            .setup_cqsize(entries * 2)
            .build(entries)
            .map(|ring| (ring, task_run))
    };
    match std::env::var(IO_URING_TASKRUN_ENV).as_deref() {
        Ok("cooperative") => build(TaskRun::Cooperative),
        Ok("" | "auto") | Err(_) => match build(TaskRun::Deferred) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => build(TaskRun::Cooperative),
            built => built,
        },
        Ok(value) => Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            format!("unknown {IO_URING_TASKRUN_ENV}={value:?} (valid: auto, cooperative)"),
        )),
    }
}

/// Makes the calling thread a deferred ring's single issuer (a cooperative ring is
/// enabled already).
fn enable_on_this_thread(ring: &IoUring, task_run: TaskRun) -> std::io::Result<()> {
    match task_run {
        TaskRun::Deferred => ring.submitter().register_enable_rings(),
        TaskRun::Cooperative => Ok(()),
    }
}

/// Checks that this kernel and its sandbox let the server run the io_uring loop: a ring
/// can be made with the loop's set-up flags (containers' seccomp profiles often forbid
/// it), the operations the loop uses exist, and provided buffer rings (Linux 5.19) can be
/// registered. The error says what is missing.
pub fn probe() -> Result<TaskRun, String> {
    let (ring, task_run) = build_ring(8).map_err(|e| match e.kind() {
        ErrorKind::InvalidInput => e.to_string(),
        _ => format!("io_uring_setup failed (COOP_TASKRUN needs Linux 5.19): {e}"),
    })?;
    enable_on_this_thread(&ring, task_run)
        .map_err(|e| format!("a disabled io_uring cannot be enabled: {e}"))?;
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("io_uring probe failed: {e}"))?;
    for (code, name) in [
        (opcode::Recv::CODE, "recv"),
        (opcode::Send::CODE, "send"),
        (opcode::PollAdd::CODE, "poll"),
        (opcode::AsyncCancel::CODE, "cancel"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("the kernel's io_uring has no {name} operation"));
        }
    }
    if !ring.params().is_feature_ext_arg() {
        return Err("the kernel's io_uring cannot wait with a timeout (Linux 5.11)".to_owned());
    }
    BufRing::new(2, 64)
        .and_then(|buffers| buffers.register(&ring))
        .map_err(|e| format!("provided buffer rings unavailable (Linux 5.19): {e}"))?;
    Ok(task_run)
}

/// Checks that this kernel's io_uring has multishot receive (Linux 6.0; [`probe`] passed
/// first). The receive opcode is the same as the single-shot one, so the operation table
/// cannot tell: a multishot receive is armed on one end of a socket pair, a byte is sent
/// from the other, and the kernel must deliver it with `IORING_CQE_F_MORE` (a kernel
/// without it refuses the flag with `EINVAL`).
pub fn probe_multishot_recv() -> Result<(), String> {
    const PROBE: u64 = 1;
    const PROBE_CANCEL: u64 = 2;
    // Declared before the ring: dropped after it (the ring unregisters the buffers).
    let buffers = BufRing::new(2, 64).map_err(|e| format!("provided buffer ring: {e}"))?;
    let (mut ring, task_run) = build_ring(8).map_err(|e| format!("io_uring_setup failed: {e}"))?;
    enable_on_this_thread(&ring, task_run)
        .map_err(|e| format!("a disabled io_uring cannot be enabled: {e}"))?;
    buffers
        .register(&ring)
        .map_err(|e| format!("provided buffer rings unavailable: {e}"))?;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| format!("socket pair for the probe: {e}"))?;
    std::io::Write::write_all(&mut &theirs, b"x")
        .map_err(|e| format!("socket pair for the probe: {e}"))?;
    let entry = opcode::RecvMulti::new(types::Fd(ours.as_raw_fd()), BUFFER_GROUP)
        .build()
        .user_data(PROBE);
    let wait = types::Timespec::new().sec(1);
    let wait_for = |ring: &mut IoUring, entry: Option<squeue::Entry>| {
        if let Some(entry) = entry {
            // SAFETY: the entries name no memory of ours (the kernel picks a buffer of
            // `buffers`, which outlives the ring).
            unsafe { ring.submission().push(&entry) }
                .map_err(|_| "the probe ring's queue is full".to_owned())?;
        }
        let args = types::SubmitArgs::new().timespec(&wait);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(()),
            Err(e) => Err(format!("io_uring_enter failed: {e}")),
        }
    };
    wait_for(&mut ring, Some(entry))?;
    let first = ring.completion().next();
    let still_armed = first.as_ref().is_some_and(|cqe| cqueue::more(cqe.flags()));
    let supported = match first {
        Some(cqe) if cqe.result() == 1 && cqueue::more(cqe.flags()) => Ok(()),
        Some(cqe) if cqe.result() == -libc::EINVAL => {
            Err("the kernel's io_uring has no multishot receive (Linux 6.0)".to_owned())
        }
        Some(cqe) => Err(format!(
            "a multishot receive returned {} (flags {:#x})",
            cqe.result(),
            cqe.flags()
        )),
        None => Err("a multishot receive did not complete".to_owned()),
    };
    if still_armed {
        // Ended (and waited for, a bounded time) before the socket and the ring go.
        let cancel = opcode::AsyncCancel::new(PROBE)
            .build()
            .user_data(PROBE_CANCEL);
        wait_for(&mut ring, Some(cancel))?;
        for _ in 0..2 {
            if ring.completion().any(|cqe| cqe.user_data() == PROBE) {
                break;
            }
            wait_for(&mut ring, None)?;
        }
    }
    supported
}

/// A provided buffer ring: `count` buffers of `size` bytes, and the ring of descriptors
/// through which they are lent to the kernel.
///
/// The kernel writes into the buffers behind the compiler's back, so the buffers' memory
/// is a raw allocation that no Rust reference ever covers whole. Invariants (every
/// `unsafe` below relies on them):
///
/// 1. `memory` points to `count * size` bytes allocated in [`BufRing::new`] with
///    [`BufRing::buffers_layout`], owned by this struct and freed only in its `Drop`.
///    `ring` likewise, with [`BufRing::ring_layout`].
/// 2. Buffer `bid` (`bid < count`) is bytes `[bid * size, (bid + 1) * size)` of `memory`.
///    It is either *lent* (the kernel may write it at any moment: from [`BufRing::provide`]
///    until the completion that names `bid`, [`BufRing::taken`]) or *ours*. Its address
///    goes to the kernel as a number computed by pointer arithmetic, never through a
///    reference; a reference into it is made only while it is ours, and only over the
///    bytes the kernel reported ([`BufRing::bytes`], whose borrow of `self` ends before
///    `provide` can lend the buffer again).
/// 3. The kernel reads a descriptor only below the published tail; a descriptor is
///    written before the release store of the tail that publishes it.
/// 4. The `IoUring` the ring is registered with is dropped (which unregisters the ring)
///    before the `BufRing` (the field order of [`Uring`]; the probes declare the
///    `BufRing` before the ring), so the kernel never touches the memory after `Drop`.
struct BufRing {
    /// The buffers' bytes (invariants 1 and 2).
    memory: std::ptr::NonNull<u8>,
    /// The descriptor ring, page-aligned as the kernel requires (invariants 1 and 3).
    ring: std::ptr::NonNull<types::BufRingEntry>,
    count: u16,
    size: usize,
    /// Our copy of the ring's tail: descriptors published so far.
    tail: u16,
    /// Debug builds: which buffers are lent to the kernel, to check that each buffer a
    /// completion names comes back to the ring exactly once.
    #[cfg(debug_assertions)]
    lent: Vec<bool>,
}

// SAFETY: both allocations are owned by this struct exclusively (invariant 1, as a Box
// would be); they are only touched through `&mut self` or `&self` by the thread that owns
// the worker, and by the kernel on that ring's behalf.
unsafe impl Send for BufRing {}

impl BufRing {
    fn ring_layout(count: u16) -> std::alloc::Layout {
        let bytes = usize::from(count) * std::mem::size_of::<types::BufRingEntry>();
        // A valid layout: 4096 is a power of two and `bytes` is small.
        std::alloc::Layout::from_size_align(bytes.max(4096), 4096)
            .unwrap_or(std::alloc::Layout::new::<[u8; 4096]>())
    }

    /// The buffers' layout: page-aligned (the kernel does not require it; a buffer then
    /// starts on a cache line whatever `size`'s alignment).
    fn buffers_layout(count: u16, size: usize) -> std::io::Result<std::alloc::Layout> {
        usize::from(count)
            .checked_mul(size)
            .filter(|&bytes| bytes > 0)
            .and_then(|bytes| std::alloc::Layout::from_size_align(bytes, 4096).ok())
            .ok_or_else(|| {
                std::io::Error::new(
                    ErrorKind::InvalidInput,
                    format!("buffer ring of {count} buffers of {size} bytes"),
                )
            })
    }

    fn new(count: u16, size: usize) -> std::io::Result<BufRing> {
        debug_assert!(count.is_power_of_two());
        // Every length handed to the kernel fits its u32 field.
        let _: u32 = size
            .try_into()
            .map_err(|_| std::io::Error::new(ErrorKind::InvalidInput, "buffer too large"))?;
        let buffers_layout = Self::buffers_layout(count, size)?;
        // SAFETY: the layout has a non-zero size (checked by `buffers_layout`).
        let memory = unsafe { std::alloc::alloc_zeroed(buffers_layout) };
        let memory = std::ptr::NonNull::new(memory)
            .ok_or_else(|| std::io::Error::new(ErrorKind::OutOfMemory, "ring buffers"))?;
        let ring_layout = Self::ring_layout(count);
        // SAFETY: the layout has a non-zero size.
        let ring = unsafe { std::alloc::alloc_zeroed(ring_layout) }.cast::<types::BufRingEntry>();
        let Some(ring) = std::ptr::NonNull::new(ring) else {
            // SAFETY: allocated just above with this layout, and not yet owned by a
            // `BufRing` (whose `Drop` would free it again).
            unsafe { std::alloc::dealloc(memory.as_ptr(), buffers_layout) };
            return Err(std::io::Error::new(ErrorKind::OutOfMemory, "buffer ring"));
        };
        let mut buffers = BufRing {
            memory,
            ring,
            count,
            size,
            tail: 0,
            #[cfg(debug_assertions)]
            lent: vec![false; usize::from(count)],
        };
        for bid in 0..count {
            buffers.provide(bid);
        }
        Ok(buffers)
    }

    /// Registers the ring with `ring` as [`BUFFER_GROUP`].
    fn register(&self, ring: &IoUring) -> std::io::Result<()> {
        // SAFETY: the descriptor ring and the buffers live as long as `self`, and the
        // `IoUring` is dropped (unregistering them) before the `BufRing` (invariant 4).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                self.ring.as_ptr() as u64,
                self.count,
                BUFFER_GROUP,
                0,
            )
        }
    }

    /// The start of buffer `bid`, or `None` for a `bid` outside the ring (the kernel
    /// names only buffers we lent it: debug builds assert that).
    fn buffer(&self, bid: u16) -> Option<*mut u8> {
        if bid >= self.count {
            debug_assert!(false, "buffer {bid} outside a ring of {}", self.count);
            return None;
        }
        // SAFETY: `bid < count`, so the offset `bid * size` is inside the allocation of
        // `count * size` bytes (invariants 1 and 2); no reference is made.
        Some(unsafe { self.memory.as_ptr().add(usize::from(bid) * self.size) })
    }

    /// Lends buffer `bid` to the kernel again (it was ours: invariant 2).
    fn provide(&mut self, bid: u16) {
        let Some(addr) = self.buffer(bid) else {
            return;
        };
        #[cfg(debug_assertions)]
        {
            let lent = &mut self.lent[usize::from(bid)];
            debug_assert!(!*lent, "buffer {bid} lent to the kernel twice");
            *lent = true;
        }
        let index = usize::from(self.tail & (self.count - 1));
        // SAFETY: `index < count`, so the entry is inside the descriptor ring we own; the
        // kernel reads only entries below the published tail, and this one is not yet
        // (invariant 3). The buffer's address is a number, not a reference (invariant 2).
        unsafe {
            let entry = &mut *self.ring.as_ptr().add(index);
            entry.set_addr(addr as u64);
            entry.set_len(self.size as u32);
            entry.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the `resv` field of the first descriptor, a naturally
        // aligned u16 the kernel reads with acquire ordering; the release store publishes
        // the descriptor written above (invariant 3).
        unsafe {
            let tail = types::BufRingEntry::tail(self.ring.as_ptr()).cast_mut();
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }

    /// A completion named buffer `bid`: it is ours until [`BufRing::provide`] lends it
    /// again (debug builds check that it was the kernel's).
    #[inline]
    fn taken(&mut self, bid: u16) {
        #[cfg(debug_assertions)]
        {
            let lent = self.lent.get_mut(usize::from(bid));
            debug_assert!(
                lent.as_deref() == Some(&true),
                "buffer {bid} returned twice"
            );
            if let Some(lent) = lent {
                *lent = false;
            }
        }
        let _ = bid;
    }

    /// The first `len` bytes of buffer `bid`, which a completion just returned (so the
    /// buffer is ours, [`BufRing::taken`], and the kernel wrote those bytes).
    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        #[cfg(debug_assertions)]
        debug_assert!(
            !self.lent.get(usize::from(bid)).copied().unwrap_or(true),
            "buffer {bid} read while lent to the kernel"
        );
        let Some(start) = self.buffer(bid) else {
            return &[];
        };
        // SAFETY: the buffer is ours until `provide`, which takes `&mut self` and so
        // cannot run while this borrow lives (invariant 2); `len.min(size)` bytes from its
        // start lie inside it, initialised (zeroed at allocation, then written by the
        // kernel).
        unsafe { std::slice::from_raw_parts(start, len.min(self.size)) }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts, and freed only here; the kernel
        // no longer uses them (invariant 4).
        unsafe {
            std::alloc::dealloc(self.ring.as_ptr().cast(), Self::ring_layout(self.count));
            if let Ok(layout) = Self::buffers_layout(self.count, self.size) {
                std::alloc::dealloc(self.memory.as_ptr(), layout);
            }
        }
    }
}

/// The loop's state for one connection slot.
#[derive(Default)]
struct SlotIo {
    /// Completion I/O is on for the connection in this slot.
    attached: bool,
    /// A receive is armed: from its submission to its final completion (for a multishot
    /// receive, the first one without `IORING_CQE_F_MORE`).
    recv_in_flight: bool,
    /// A cancel of the armed multishot receive was queued: none is queued again, and no
    /// receive is armed, until its final completion.
    recv_cancelling: bool,
    send_in_flight: bool,
    /// The replies being sent: the kernel reads `sending[sent..]` while a send is in
    /// flight, so the buffer is not touched until its completion.
    sending: Vec<u8>,
    sent: usize,
    /// A closed connection kept until its operations in flight have completed.
    retired: Option<Connection>,
    /// The retired connection is not closed but handed to the logger as a watcher of
    /// these kinds once its operations completed (`watch`).
    retired_watch: Option<u32>,
}

impl SlotIo {
    fn in_flight(&self) -> bool {
        self.recv_in_flight || self.send_in_flight
    }
}

/// A worker's io_uring loop.
pub struct Uring {
    /// Declared before `buffers`: dropped (closing the ring) first.
    ring: IoUring,
    buffers: BufRing,
    slots: Vec<SlotIo>,
    /// The worker's `mio::Poll`, watched by a multishot poll.
    poll_fd: RawFd,
    poll_armed: bool,
    /// Submissions that found the submission queue full even after a submit (the kernel
    /// could not take entries: e.g. `EBUSY` while completions wait to be reaped), moved to
    /// the queue at the start of the next turn. Every entry, here or in the queue, names
    /// memory that stays valid until its completion (see `recv_entry`, `send_entry`;
    /// cancels and polls name none).
    overflow: Vec<squeue::Entry>,
    /// Slots whose receive found no free buffer: asked for again next turn.
    recv_retry: Vec<usize>,
    /// One multishot receive stays armed per connection (`--io-uring-recv`), rather than
    /// one receive asked for each time the connection wants input.
    multishot: bool,
    /// Sends queued this turn whose completion will need no work: the connection had
    /// nothing more to send and waits for input. The turn's `io_uring_enter` waits for
    /// that many completions more than one, so that a send finishing at once does not end
    /// the wait (which would cost a second system call per request).
    quiet_sends: u32,
    /// How the ring delivers completions; a `Deferred` ring is enabled by `run`.
    task_run: TaskRun,
}

impl Uring {
    /// A worker's ring; `recv` is resolved at start-up (`Multishot` only where
    /// [`probe_multishot_recv`] passed; `Auto` is taken as `Single`).
    pub fn new(poll: &Poll, recv: IoUringRecv) -> std::io::Result<Uring> {
        let (ring, task_run) = build_ring(RING_ENTRIES)?;
        let buffers = BufRing::new(RECV_BUFFERS, RECV_BUFFER_BYTES)?;
        buffers.register(&ring)?;
        Ok(Uring {
            ring,
            buffers,
            slots: Vec::new(),
            poll_fd: poll.as_raw_fd(),
            poll_armed: false,
            recv_retry: Vec::new(),
            overflow: Vec::new(),
            multishot: recv == IoUringRecv::Multishot,
            quiet_sends: 0,
            task_run,
        })
    }

    /// Writes a submission straight into the submission queue (the kernel reads it at the
    /// turn's `io_uring_enter`; no copy is staged, a cost paid on every request: see
    /// docs/results/speed.md, "Figures moved out of the server's comments"); when the
    /// queue is full, submits what it holds first.
    #[inline]
    fn push(&mut self, entry: squeue::Entry) {
        // SAFETY: see `overflow`: each entry's memory outlives its completion.
        if self.overflow.is_empty() && unsafe { self.ring.submission().push(&entry) }.is_ok() {
            return;
        }
        self.push_slow(entry);
    }

    /// [`Uring::push`] when earlier entries wait in `overflow` or the queue is full. Out
    /// of line, so that the common push is the queue write alone (with this in it, every
    /// push paid a call's set-up).
    #[cold]
    #[inline(never)]
    fn push_slow(&mut self, entry: squeue::Entry) {
        if !self.overflow.is_empty() {
            // Keep the order: an earlier entry that did not fit goes first.
            self.overflow.push(entry);
            return;
        }
        // SAFETY: see `overflow`: each entry's memory outlives its completion.
        if unsafe { self.ring.submission().push(&entry) }.is_ok() {
            return;
        }
        if let Err(e) = self.ring.submit() {
            if e.kind() != ErrorKind::Interrupted {
                eprintln!("fogcached: io_uring submit failed: {e}");
            }
        }
        // SAFETY: as above.
        if unsafe { self.ring.submission().push(&entry) }.is_err() {
            self.overflow.push(entry);
        }
    }

    /// Moves the submissions that did not fit last turn to the submission queue, submitting
    /// when it is full; what still does not fit waits for the next turn.
    fn flush_overflow(&mut self) {
        let mut start = 0;
        while start < self.overflow.len() {
            let mut queue = self.ring.submission();
            let end = (start + queue.capacity() - queue.len()).min(self.overflow.len());
            // SAFETY: see `overflow`: each entry's memory outlives its completion.
            let pushed = unsafe { queue.push_multiple(&self.overflow[start..end]) };
            drop(queue);
            if pushed.is_ok() {
                start = end;
            }
            if start < self.overflow.len() {
                match self.ring.submit() {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        eprintln!("fogcached: io_uring submit failed: {e}");
                        break;
                    }
                }
            }
        }
        self.overflow.drain(..start);
    }

    /// The slot's state; it exists from `attach` on (completions name only attached
    /// slots, whose state is kept until their last completion).
    #[inline]
    fn slot(&mut self, slot: usize) -> &mut SlotIo {
        &mut self.slots[slot]
    }

    fn arm_poll(&mut self) {
        let entry = opcode::PollAdd::new(types::Fd(self.poll_fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(user_data(0, OP_POLL));
        self.push(entry);
        self.poll_armed = true;
    }

    fn arm_recv(&mut self, slot: usize, fd: RawFd) {
        let io = &mut self.slots[slot];
        debug_assert!(!io.recv_in_flight && !io.recv_cancelling);
        io.recv_in_flight = true;
        self.push(recv_entry(slot, fd, self.multishot));
    }

    /// Queues the cancel of `slot`'s armed receive (once: its final completion ends it).
    fn cancel_recv(&mut self, slot: usize) {
        let io = &mut self.slots[slot];
        if !io.recv_in_flight || io.recv_cancelling {
            return;
        }
        io.recv_cancelling = true;
        let cancel = opcode::AsyncCancel::new(user_data(slot, OP_RECV))
            .build()
            .user_data(user_data(slot, OP_CANCEL));
        self.push(cancel);
    }

    /// Sends `sending[sent..]` of `slot`.
    fn start_send(&mut self, slot: usize, fd: RawFd) {
        let io = &mut self.slots[slot];
        io.send_in_flight = true;
        let entry = send_entry(slot, fd, io);
        self.push(entry);
    }

    /// Runs the worker until shutdown.
    pub fn run(&mut self, worker: &mut Worker) {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut yielded_now: Vec<usize> = Vec::new();
        let mut held_now: Vec<usize> = Vec::new();
        let shared = Arc::clone(&worker.shared);
        let counters = Arc::clone(&worker.counters);
        let idle_timeout_s = shared.config.idle_timeout_s;
        let mut last_sweep_s = shared.engine.clock().now_s();
        let sweep_timeout = types::Timespec::new().sec(super::IDLE_SWEEP_INTERVAL.as_secs());
        let quiet_timeout = types::Timespec::from(QUIET_SEND_WAIT_MAX);
        let valgrind_slice = types::Timespec::from(VALGRIND_WAIT_SLICE);
        let under_valgrind = running_under_valgrind();
        // Made on the thread that spawned the worker: this thread becomes its issuer.
        if let Err(e) = enable_on_this_thread(&self.ring, self.task_run) {
            eprintln!("fogcached: worker cannot enable its io_uring: {e}");
            return;
        }
        loop {
            engine::fault::panic_point();
            if !self.poll_armed {
                self.arm_poll();
            }
            // One system call per turn: submit everything queued, and wait for a
            // completion unless a yielded connection is waiting for its turn.
            if !self.overflow.is_empty() {
                self.flush_overflow();
            }
            let want = 1 + std::mem::take(&mut self.quiet_sends) as usize;
            let timeout = if under_valgrind {
                Some(&valgrind_slice)
            } else if want > 1 {
                // Bounded: a quiet send that did not finish at once (the peer stopped
                // reading) must not hold up the waker or the other connections' turns
                // for more than this.
                Some(&quiet_timeout)
            } else if idle_timeout_s > 0 {
                Some(&sweep_timeout)
            } else {
                None
            };
            let submitted = if worker.has_queued_work() {
                self.ring.submit()
            } else if let Some(timeout) = timeout {
                let args = types::SubmitArgs::new().timespec(timeout);
                self.ring.submitter().submit_with_args(want, &args)
            } else {
                self.ring.submit_and_wait(want)
            };
            if under_valgrind {
                // Lets valgrind hand its lock to the other threads (it does at a yield).
                std::thread::yield_now();
            }
            if let Err(e) = submitted {
                // ETIME: the sweep timeout; EBUSY: completions must be reaped first.
                let expected = matches!(e.raw_os_error(), Some(libc::ETIME | libc::EBUSY))
                    || e.kind() == ErrorKind::Interrupted;
                if !expected {
                    eprintln!("fogcached: io_uring wait failed: {e}");
                    break;
                }
            }
            if shared.settings.shutdown_requested.load(Ordering::Acquire) {
                break;
            }
            let ctx = Worker::context(&shared, &counters);
            // Only the completions there now: handling them can make more (a readiness
            // connection's system call runs the kernel's pending work), which wait for the
            // next turn rather than starve the yielded connections. Each is read straight
            // from the queue (no copy into a buffer).
            let pending = self.ring.completion().len();
            let mut polled = false;
            for _ in 0..pending {
                let Some(cqe) = self.ring.completion().next() else {
                    break;
                };
                let (data, result, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
                let slot = (data >> 8) as usize;
                match data & 0xff {
                    OP_RECV => self.on_recv(worker, slot, result, flags, &ctx),
                    OP_SEND => self.on_send(worker, slot, result, &ctx),
                    OP_POLL => {
                        if !cqueue::more(flags) {
                            self.poll_armed = false;
                        }
                        // Several wake-ups in one turn need one look at the poll.
                        if !polled {
                            polled = true;
                            self.poll_sources(worker, &mut events, &ctx);
                        }
                    }
                    _ => {}
                }
            }
            if !self.recv_retry.is_empty() {
                self.retry_recvs(worker);
            }
            worker.service_queued(&ctx, &mut yielded_now, &mut held_now, self);
            if idle_timeout_s > 0 && ctx.now_s.saturating_sub(last_sweep_s) >= 1 {
                last_sweep_s = ctx.now_s;
                worker.close_idle(&ctx, idle_timeout_s, self);
            }
        }
        worker.close_all(self);
        self.drain_retired(worker);
    }

    /// Asks again for the receives that found no free buffer last turn.
    fn retry_recvs(&mut self, worker: &Worker) {
        for slot in std::mem::take(&mut self.recv_retry) {
            if let Some(Some(connection)) = worker.connections.get(slot) {
                if connection.input_wanted() && !self.slots[slot].recv_in_flight {
                    let fd = connection.fd();
                    self.arm_recv(slot, fd);
                }
            }
        }
    }

    /// Serves the worker's `mio::Poll`: the waker's hand-offs and readiness connections.
    fn poll_sources(&mut self, worker: &mut Worker, events: &mut Events, ctx: &ServiceContext<'_>) {
        loop {
            match worker.poll.poll(events, Some(std::time::Duration::ZERO)) {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("fogcached: worker poll failed: {e}");
                    return;
                }
            }
        }
        worker.handle_poll_events(events, ctx, self);
    }

    fn on_recv(
        &mut self,
        worker: &mut Worker,
        slot: usize,
        result: i32,
        flags: u32,
        ctx: &ServiceContext<'_>,
    ) {
        // Without F_MORE the receive is over (a single-shot one always is): the slot may
        // arm another, or be reused once nothing else is in flight.
        let more = cqueue::more(flags);
        let io = self.slot(slot);
        debug_assert!(
            io.recv_in_flight,
            "a receive completion on slot {slot} with none armed"
        );
        if !more {
            io.recv_in_flight = false;
            io.recv_cancelling = false;
        }
        let retired = io.retired.is_some();
        // Every buffer a completion names goes back to the ring exactly once, after its
        // bytes were copied (or at once, when nobody takes them).
        let bid = cqueue::buffer_select(flags);
        if let Some(bid) = bid {
            self.buffers.taken(bid);
        }
        if retired {
            if let Some(bid) = bid {
                self.buffers.provide(bid);
            }
            if !more {
                self.finish_retired(worker, slot);
            }
            return;
        }
        let Some(Some(connection)) = worker.connections.get_mut(slot) else {
            debug_assert!(false, "a receive completion on empty slot {slot}");
            if let Some(bid) = bid {
                self.buffers.provide(bid);
            }
            return;
        };
        let data = match bid {
            Some(bid) if result > 0 => Some(bid),
            Some(bid) => {
                // Not expected (the kernel keeps the buffer of a receive that got no
                // bytes), but then it is ours: back to the ring.
                self.buffers.provide(bid);
                None
            }
            None => None,
        };
        let outcome = match data {
            Some(bid) => {
                let wanted = connection.input_wanted();
                let bytes = self.buffers.bytes(bid, result as usize);
                let fits = connection.receive(ctx, bytes, UNWANTED_INPUT_MAX_BYTES);
                self.buffers.provide(bid);
                if !fits {
                    Outcome::Close
                } else if wanted || !self.multishot {
                    connection.service(ctx)
                } else {
                    // A multishot receive delivered while the connection does not want
                    // input (its output is over the high-water mark, it yielded with
                    // requests left, it waits for the upstream or a durability flush, or
                    // it is closing). The bytes are kept for when it does (dropping them
                    // would lose requests), and the receive is cancelled so that no more
                    // arrive meanwhile: whatever made the connection stop wanting input
                    // services it again (the send's completion, its turn in the yield or
                    // held queue, the upstream's reply), and once it wants input
                    // `after_service`, or the final completion here, arms a new one. See
                    // the module comment for why this keeps input bounded.
                    if more {
                        self.cancel_recv(slot);
                    }
                    return;
                }
            }
            None if result > 0 => {
                debug_assert!(false, "a receive of {result} bytes without a buffer");
                Outcome::Close
            }
            None if result == 0 => {
                connection.on_peer_closed();
                connection.service(ctx)
            }
            None if result == -libc::ENOBUFS => {
                // Every buffer is in use this turn: they are back by the next. (It ends a
                // multishot receive too.)
                debug_assert!(!more);
                self.recv_retry.push(slot);
                return;
            }
            None if matches!(-result, libc::ECANCELED | libc::EINTR | libc::EAGAIN) => {
                // ECANCELED: the final completion of a multishot receive cancelled above,
                // while the connection did not want input. It is armed again if it wants
                // input now; if not, `after_service` arms one once it does.
                if !more && connection.input_wanted() {
                    let fd = connection.fd();
                    self.arm_recv(slot, fd);
                }
                return;
            }
            // A reset or any other error: as a failed read under epoll.
            None => Outcome::Close,
        };
        worker.apply(slot, outcome, ctx, self);
    }

    fn on_send(&mut self, worker: &mut Worker, slot: usize, result: i32, ctx: &ServiceContext<'_>) {
        let io = self.slot(slot);
        io.send_in_flight = false;
        if io.retired.is_some() {
            io.sending.clear();
            io.sent = 0;
            self.finish_retired(worker, slot);
            return;
        }
        let Some(Some(connection)) = worker.connections.get_mut(slot) else {
            return;
        };
        let fd = connection.fd();
        if result == -libc::EINTR || result == -libc::EAGAIN {
            self.start_send(slot, fd);
            return;
        }
        if result < 0 {
            // The send is over (the peer went): its bytes are dropped with the
            // connection. Emptied here, or a receive still in flight would retire the
            // slot with them, and the slot's next connection would find its reply buffer
            // holding another connection's bytes.
            let io = self.slot(slot);
            io.sending.clear();
            io.sent = 0;
            worker.apply(slot, Outcome::Close, ctx, self);
            return;
        }
        WorkerCounters::add(&ctx.counters.bytes_written, result as u64);
        let io = self.slot(slot);
        io.sent += result as usize;
        if io.sent < io.sending.len() {
            // The socket took part of it: send the rest.
            self.start_send(slot, fd);
            return;
        }
        io.sending.clear();
        io.sent = 0;
        if connection.waits_for_input_only() {
            // The common case (a request answered, its connection's receive in flight or
            // retried): nothing to run, and servicing it anyway is a cost on every request.
            return;
        }
        // The connection may have stopped at the output high-water mark, or be closing
        // once its last reply is out, or have replies made meanwhile: let it go on.
        let outcome = connection.service(ctx);
        worker.apply(slot, outcome, ctx, self);
    }

    /// Frees a retired slot once nothing is in flight on it: closes its socket and gives
    /// the slot back to the worker.
    fn finish_retired(&mut self, worker: &mut Worker, slot: usize) {
        let io = self.slot(slot);
        if io.in_flight() {
            return;
        }
        debug_assert!(!io.recv_cancelling);
        io.attached = false;
        let watch = io.retired_watch.take();
        if let Some(connection) = io.retired.take() {
            match watch {
                Some(kinds) => worker.hand_to_logger(slot, connection, kinds),
                None => {
                    drop(connection);
                    worker.free_slots.push(slot);
                }
            }
        }
    }

    /// At shutdown: waits (a bounded time) for the cancelled operations of closed
    /// connections, so that no buffer is freed under the kernel.
    fn drain_retired(&mut self, worker: &mut Worker) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let timeout = types::Timespec::new().nsec(10_000_000);
        self.flush_overflow();
        while self.slots.iter().any(|io| io.retired.is_some()) {
            if std::time::Instant::now() >= deadline {
                // Whatever is still in flight is ended by closing the ring; the buffers
                // outlive it (`ring` is dropped first).
                break;
            }
            let args = types::SubmitArgs::new().timespec(&timeout);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            let pending = self.ring.completion().len();
            for _ in 0..pending {
                let Some(cqe) = self.ring.completion().next() else {
                    break;
                };
                let (data, flags) = (cqe.user_data(), cqe.flags());
                let slot = (data >> 8) as usize;
                match data & 0xff {
                    OP_RECV => {
                        if let Some(bid) = cqueue::buffer_select(flags) {
                            self.buffers.taken(bid);
                            self.buffers.provide(bid);
                        }
                        // A multishot receive may deliver more before its cancel's final
                        // completion: the slot waits for that one.
                        if !cqueue::more(flags) {
                            let io = self.slot(slot);
                            io.recv_in_flight = false;
                            io.recv_cancelling = false;
                            self.finish_retired(worker, slot);
                        }
                    }
                    OP_SEND => {
                        self.slot(slot).send_in_flight = false;
                        self.finish_retired(worker, slot);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A receive into a buffer the kernel picks from [`BUFFER_GROUP`] when data arrives: no
/// memory of ours is named. A multishot one stays armed, each arrival taking a buffer of
/// its own, until it is cancelled, fails, or finds no buffer left.
#[inline]
fn recv_entry(slot: usize, fd: RawFd, multishot: bool) -> squeue::Entry {
    if multishot {
        return opcode::RecvMulti::new(types::Fd(fd), BUFFER_GROUP)
            .build()
            .user_data(user_data(slot, OP_RECV));
    }
    opcode::Recv::new(
        types::Fd(fd),
        std::ptr::null_mut(),
        RECV_BUFFER_BYTES as u32,
    )
    .buf_group(BUFFER_GROUP)
    .build()
    .flags(squeue::Flags::BUFFER_SELECT)
    .user_data(user_data(slot, OP_RECV))
}

/// A send of `io.sending[io.sent..]`. The caller sets `send_in_flight`: `sending` is not
/// touched until the send's completion, and a Vec's heap buffer does not move when the
/// `SlotIo` holding it does. MSG_WAITALL: the kernel sends the rest of a short send
/// itself, so a completion means the whole reply left (or the connection failed).
#[inline]
fn send_entry(slot: usize, fd: RawFd, io: &SlotIo) -> squeue::Entry {
    let rest = &io.sending[io.sent..];
    opcode::Send::new(types::Fd(fd), rest.as_ptr(), rest.len() as u32)
        .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
        .build()
        .user_data(user_data(slot, OP_SEND))
}

impl LoopIo for Uring {
    fn attach(&mut self, slot: usize, stream: &Stream) -> bool {
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, SlotIo::default);
        }
        let completion_io = stream.completion_io();
        let io = &mut self.slots[slot];
        debug_assert!(!io.in_flight() && !io.recv_cancelling && io.retired.is_none());
        io.attached = completion_io;
        completion_io
    }

    #[inline]
    fn after_service(
        &mut self,
        slot: usize,
        connection: &mut Connection,
        outcome: Outcome,
        ctx: &ServiceContext<'_>,
    ) -> Outcome {
        let Some(io) = self.slots.get_mut(slot) else {
            return outcome;
        };
        if !io.attached {
            return outcome;
        }
        let fd = connection.fd();
        let multishot = self.multishot;
        let mut send = None;
        if !io.send_in_flight {
            match connection.take_output(ctx, &mut io.sending) {
                TakeOutput::Taken => {
                    io.sent = 0;
                    io.send_in_flight = true;
                    send = Some(send_entry(slot, fd, io));
                }
                TakeOutput::Held => return Outcome::Held,
                TakeOutput::Nothing => {}
            }
        }
        let input_wanted = connection.input_wanted();
        let recv = input_wanted && !io.recv_in_flight;
        io.recv_in_flight |= recv;
        if let Some(entry) = send {
            if input_wanted {
                self.quiet_sends += 1;
            }
            self.push(entry);
        }
        if recv {
            self.push(recv_entry(slot, fd, multishot));
        }
        outcome
    }

    fn detach(&mut self, slot: usize, connection: Connection) -> Option<Connection> {
        let io = self.slot(slot);
        if !io.attached || !io.in_flight() {
            io.attached = false;
            io.sending.clear();
            io.sent = 0;
            return Some(connection);
        }
        if !io.send_in_flight {
            // Not the kernel's: nothing of it may reach the slot's next connection.
            io.sending.clear();
            io.sent = 0;
        }
        io.retired = Some(connection);
        // A send in flight finishes (or fails when the peer goes): the epoll loop, too,
        // writes a closing connection's last replies before closing it. A receive is
        // cancelled (unless it already is); the slot is freed at its final completion.
        self.cancel_recv(slot);
        None
    }

    fn detach_watcher(
        &mut self,
        slot: usize,
        connection: Connection,
        kinds: u32,
    ) -> Option<Connection> {
        let connection = self.detach(slot, connection);
        if connection.is_none() {
            self.slot(slot).retired_watch = Some(kinds);
        }
        connection
    }

    fn may_write_directly(&self, slot: usize) -> bool {
        !matches!(self.slots.get(slot), Some(io) if io.send_in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptors `BufRing` publishes, read as the kernel reads them.
    fn descriptors(buffers: &BufRing) -> Vec<(u64, u32, u16)> {
        (0..usize::from(buffers.count))
            .map(|index| {
                // SAFETY: `index < count`: inside the descriptor ring, which `buffers`
                // owns and nothing writes during this shared borrow.
                let entry = unsafe { &*buffers.ring.as_ptr().add(index) };
                (entry.addr(), entry.len(), entry.bid())
            })
            .collect()
    }

    /// Without a kernel: the ring lends each buffer once, at its own address, lets the
    /// kernel write a lent buffer while other buffers come back and are lent again, and
    /// hands back only the bytes a completion reported. `scripts/test.sh` runs it under
    /// Miri too, the writes "of the kernel" made through the addresses the descriptors
    /// named, as the kernel's are. (Miri cannot tell a kernel's write from one through
    /// any pointer the program exposed, so it accepted the former `Box<[u8]>` as well:
    /// the fix is by construction, no reference ever covering a lent buffer.)
    #[test]
    fn the_buffer_ring_lends_disjoint_buffers_and_reads_only_reported_bytes() {
        const SIZE: usize = 64;
        let mut buffers = BufRing::new(4, SIZE).unwrap();
        let lent = descriptors(&buffers);
        for (bid, &(_, len, named)) in lent.iter().enumerate() {
            assert_eq!(usize::from(named), bid);
            assert_eq!(len as usize, SIZE);
        }
        for pair in lent.windows(2) {
            assert_eq!(pair[1].0 - pair[0].0, SIZE as u64, "disjoint, in order");
        }
        // SAFETY: the tail field of the first descriptor, owned by `buffers`.
        let tail = unsafe { *types::BufRingEntry::tail(buffers.ring.as_ptr()) };
        assert_eq!(tail, 4);

        // Buffer 1 completes and is lent again while the kernel holds 2 and 3.
        buffers.taken(1);
        buffers.provide(1);
        // The kernel receives 5 bytes into each of 2 and 3, at the addresses their
        // descriptors named.
        for (bid, text) in [(2, b"hello"), (3, b"world")] {
            let addr = lent[bid].0 as usize as *mut u8;
            // SAFETY: the buffer is lent, i.e. the kernel's to write, and no reference to
            // it exists; 5 bytes fit in it.
            unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), addr, text.len()) };
        }
        for (bid, text) in [(2u16, b"hello"), (3, b"world")] {
            buffers.taken(bid);
            assert_eq!(buffers.bytes(bid, 5), text);
            assert_eq!(
                buffers.bytes(bid, 10 * SIZE).len(),
                SIZE,
                "clamped to the buffer"
            );
            buffers.provide(bid);
        }
        // SAFETY: as above.
        let tail = unsafe { *types::BufRingEntry::tail(buffers.ring.as_ptr()) };
        assert_eq!(tail, 7);
        // The fifth descriptor reuses slot 0 of the ring and names buffer 1 again.
        assert_eq!(descriptors(&buffers)[0], (lent[1].0, SIZE as u32, 1));
    }
}
