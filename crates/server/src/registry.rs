//! Runtime state shared between the listener, the workers and `stats`: per-worker
//! counters and the table of open connections behind `stats conns`.
//!
//! Hot-path rule: a worker only touches its own [`WorkerCounters`] (one relaxed add per
//! read or write syscall, on its own cache line) and its connections' [`ConnEntry`]
//! (relaxed stores). The registry lock is taken only when a connection opens or closes,
//! and by `stats conns`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

/// Counters one worker thread adds to; `stats` sums them over all workers.
/// Aligned to a cache line so that workers never share one.
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct WorkerCounters {
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub conn_yields: AtomicU64,
    /// Connections closed by `-o idle_timeout` (memcached's `idle_kicks`).
    pub idle_kicks: AtomicU64,
}

impl WorkerCounters {
    /// Adds to a counter only this worker writes. A relaxed add on an uncontended line.
    #[inline]
    pub fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }

    fn reset(&self) {
        self.bytes_read.store(0, Ordering::Relaxed);
        self.bytes_written.store(0, Ordering::Relaxed);
        self.conn_yields.store(0, Ordering::Relaxed);
        self.idle_kicks.store(0, Ordering::Relaxed);
    }
}

/// memcached's connection states, as `stats conns` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    Listening = 0,
    /// Waiting for the next request.
    Waiting = 1,
    /// Running requests.
    ParseCmd = 2,
    /// Holding part of a request, waiting for the rest (e.g. a value).
    Nread = 3,
    /// Discarding the payload of a refused store.
    Swallow = 4,
    /// Output is waiting for the socket to drain.
    Mwrite = 5,
    Closing = 6,
    /// Streaming the event log (`watch`).
    Watch = 7,
    /// A UDP socket waiting for datagrams (memcached's state of its UDP connections).
    Read = 8,
}

impl ConnState {
    pub fn name(self) -> &'static str {
        match self {
            ConnState::Listening => "conn_listening",
            ConnState::Waiting => "conn_waiting",
            ConnState::ParseCmd => "conn_parse_cmd",
            ConnState::Nread => "conn_nread",
            ConnState::Swallow => "conn_swallow",
            ConnState::Mwrite => "conn_mwrite",
            ConnState::Closing => "conn_closing",
            ConnState::Watch => "conn_watch",
            ConnState::Read => "conn_read",
        }
    }

    fn from_u8(value: u8) -> ConnState {
        match value {
            0 => ConnState::Listening,
            1 => ConnState::Waiting,
            2 => ConnState::ParseCmd,
            3 => ConnState::Nread,
            4 => ConnState::Swallow,
            5 => ConnState::Mwrite,
            7 => ConnState::Watch,
            8 => ConnState::Read,
            _ => ConnState::Closing,
        }
    }
}

/// One open connection (or listening socket) as `stats conns` shows it.
#[derive(Debug)]
pub struct ConnEntry {
    /// `tcp:<ip>:<port>` of the peer (of the socket itself for a listener).
    pub addr: String,
    /// `tcp:<ip>:<port>` of the listening socket that accepted it; None for a listener.
    pub listen_addr: Option<String>,
    state: AtomicU8,
    /// Engine-clock second of the last request.
    last_cmd_s: AtomicU32,
}

impl ConnEntry {
    pub fn new(addr: String, listen_addr: Option<String>, state: ConnState, now_s: u32) -> Self {
        ConnEntry {
            addr,
            listen_addr,
            state: AtomicU8::new(state as u8),
            last_cmd_s: AtomicU32::new(now_s),
        }
    }

    #[inline]
    pub fn set_state(&self, state: ConnState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    pub fn state(&self) -> ConnState {
        ConnState::from_u8(self.state.load(Ordering::Relaxed))
    }

    #[inline]
    pub fn set_last_cmd_s(&self, now_s: u32) {
        self.last_cmd_s.store(now_s, Ordering::Relaxed);
    }

    pub fn last_cmd_s(&self) -> u32 {
        self.last_cmd_s.load(Ordering::Relaxed)
    }
}

/// Open connections by file descriptor, in fd order as memcached lists them.
#[derive(Debug, Default)]
pub struct ConnectionRegistry {
    entries: Mutex<BTreeMap<i32, Arc<ConnEntry>>>,
}

impl ConnectionRegistry {
    pub fn insert(&self, fd: i32, entry: Arc<ConnEntry>) {
        self.entries.lock().insert(fd, entry);
    }

    pub fn remove(&self, fd: i32) {
        self.entries.lock().remove(&fd);
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot, so that formatting happens outside the lock.
    pub fn snapshot(&self) -> Vec<(i32, Arc<ConnEntry>)> {
        self.entries
            .lock()
            .iter()
            .map(|(fd, entry)| (*fd, Arc::clone(entry)))
            .collect()
    }
}

/// What the runtime shares with `stats` beyond [`crate::session::ServerSettings`].
#[derive(Debug, Default)]
pub struct RuntimeState {
    /// One entry per worker thread, registered at start-up.
    pub workers: RwLock<Vec<Arc<WorkerCounters>>>,
    pub connections: ConnectionRegistry,
    /// `-o idle_timeout` in seconds, 0 = off (for `stats settings`).
    pub idle_timeout_s: AtomicU32,
    /// `-R` (for `stats settings`).
    pub reqs_per_event: AtomicU32,
    /// Connections that are `watch`ing (taken when a worker hands one to the logger,
    /// given back when the logger closes it).
    pub watchers: AtomicU32,
    /// Lines the logger queued for watchers (memcached's `log_watcher_sent`).
    pub watcher_lines_sent: AtomicU64,
    /// Lines a watcher missed because its buffer was full (`log_watcher_skipped`).
    pub watcher_lines_skipped: AtomicU64,
    /// The workers' event loop, once resolved at start-up (for `stats settings`).
    io_engine: std::sync::OnceLock<&'static str>,
    /// How the io_uring loop receives, once resolved (`none` under epoll).
    io_uring_recv: std::sync::OnceLock<&'static str>,
}

impl RuntimeState {
    /// Registers a worker's counters and returns them for the worker to add to.
    pub fn add_worker(&self) -> Arc<WorkerCounters> {
        let counters = Arc::new(WorkerCounters::default());
        self.workers.write().push(Arc::clone(&counters));
        counters
    }

    pub fn set_io_engine(&self, name: &'static str) {
        let _ = self.io_engine.set(name);
    }

    pub fn set_io_uring_recv(&self, name: &'static str) {
        let _ = self.io_uring_recv.set(name);
    }

    /// `multishot` or `single` under io_uring; `none` under epoll or before the workers
    /// start.
    pub fn io_uring_recv(&self) -> &'static str {
        self.io_uring_recv.get().copied().unwrap_or("none")
    }

    /// `io_uring` or `epoll`; `none` before the workers start.
    pub fn io_engine(&self) -> &'static str {
        self.io_engine.get().copied().unwrap_or("none")
    }

    /// Sums one counter over all workers.
    pub fn sum(&self, counter: impl Fn(&WorkerCounters) -> &AtomicU64) -> u64 {
        self.workers
            .read()
            .iter()
            .map(|w| counter(w).load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    pub fn reset_counters(&self) {
        for worker in self.workers.read().iter() {
            worker.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_over_workers_and_reset() {
        let state = RuntimeState::default();
        let a = state.add_worker();
        let b = state.add_worker();
        WorkerCounters::add(&a.bytes_read, 10);
        WorkerCounters::add(&b.bytes_read, 5);
        WorkerCounters::add(&b.conn_yields, 1);
        assert_eq!(state.sum(|w| &w.bytes_read), 15);
        assert_eq!(state.sum(|w| &w.conn_yields), 1);
        state.reset_counters();
        assert_eq!(state.sum(|w| &w.bytes_read), 0);
    }

    #[test]
    fn registry_lists_in_fd_order() {
        let registry = ConnectionRegistry::default();
        let entry = |addr: &str| Arc::new(ConnEntry::new(addr.into(), None, ConnState::Waiting, 2));
        registry.insert(9, entry("tcp:127.0.0.1:2"));
        registry.insert(7, entry("tcp:127.0.0.1:1"));
        let fds: Vec<i32> = registry.snapshot().iter().map(|(fd, _)| *fd).collect();
        assert_eq!(fds, vec![7, 9]);
        registry.remove(7);
        assert_eq!(registry.len(), 1);
        let (_, e) = &registry.snapshot()[0];
        e.set_state(ConnState::Nread);
        assert_eq!(e.state().name(), "conn_nread");
    }
}
