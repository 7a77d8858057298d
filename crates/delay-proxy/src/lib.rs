//! A TCP proxy on loopback that delays every byte by a fixed time in each direction: the
//! "cloud 1 ms away" of the fog-layer tests, and a way to make an upstream stop
//! answering (pause) or die (cut) without touching the server behind it.
//!
//! It is a delay line, not a store-and-forward hop: bytes read at time t are written at
//! t + delay, so pipelined requests stay pipelined and throughput is not capped by the
//! delay.
#![forbid(unsafe_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

/// How often blocked threads look at the stop flag.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
const CHUNK_BYTES: usize = 64 * 1024;

struct State {
    target: Mutex<SocketAddr>,
    one_way_delay: Duration,
    stop: AtomicBool,
    paused: AtomicBool,
    /// Both ends of every proxied connection, to cut them.
    streams: Mutex<Vec<TcpStream>>,
    accepted: AtomicU64,
}

/// See the module documentation. Stops (and closes every connection) on drop.
pub struct DelayProxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept_thread: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Listens on a free 127.0.0.1 port and forwards to `target`, each direction
    /// delayed by `one_way_delay`.
    pub fn start(target: SocketAddr, one_way_delay: Duration) -> anyhow::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the delay proxy")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            target: Mutex::new(target),
            one_way_delay,
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
        });
        let accept_state = Arc::clone(&state);
        let accept_thread = std::thread::Builder::new()
            .name("delay-proxy".to_owned())
            .spawn(move || accept_loop(&listener, &accept_state))?;
        Ok(DelayProxy {
            addr,
            state,
            accept_thread: Some(accept_thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// New connections go to `target` (existing ones keep theirs).
    pub fn set_target(&self, target: SocketAddr) {
        if let Ok(mut current) = self.state.target.lock() {
            *current = target;
        }
    }

    /// While paused, nothing is forwarded in either direction (bytes wait): an upstream
    /// that stopped answering.
    pub fn set_paused(&self, paused: bool) {
        self.state.paused.store(paused, Ordering::SeqCst);
    }

    /// Closes every proxied connection, as the death of the server behind would.
    pub fn cut_connections(&self) {
        if let Ok(mut streams) = self.state.streams.lock() {
            for stream in streams.drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.cut_connections();
        if let Some(thread) = self.accept_thread.take() {
            let _ = thread.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, state: &Arc<State>) {
    while !state.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                state.accepted.fetch_add(1, Ordering::SeqCst);
                let target = match state.target.lock() {
                    Ok(target) => *target,
                    Err(_) => return,
                };
                // A dead target: the client sees its connection closed at once.
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(1)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(mut streams), Ok(c), Ok(s)) =
                    (state.streams.lock(), client.try_clone(), server.try_clone())
                {
                    streams.push(c);
                    streams.push(s);
                }
                for (from, to) in [(&client, &server), (&server, &client)] {
                    if let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) {
                        spawn_direction(from, to, Arc::clone(state));
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL_INTERVAL / 4),
            Err(_) => std::thread::sleep(POLL_INTERVAL),
        }
    }
}

/// A reader thread stamps each chunk; a writer thread writes it at stamp + delay.
fn spawn_direction(mut from: TcpStream, mut to: TcpStream, state: Arc<State>) {
    let (sender, receiver) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader_state = Arc::clone(&state);
    let _ = from.set_read_timeout(Some(POLL_INTERVAL));
    let _ = std::thread::Builder::new()
        .name("delay-proxy-read".to_owned())
        .spawn(move || {
            let mut chunk = vec![0u8; CHUNK_BYTES];
            while !reader_state.stop.load(Ordering::SeqCst) {
                match from.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        if sender.send((Instant::now(), chunk[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
    let _ = std::thread::Builder::new()
        .name("delay-proxy-write".to_owned())
        .spawn(move || {
            loop {
                let (stamp, bytes) = match receiver.recv_timeout(POLL_INTERVAL) {
                    Ok(item) => item,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if state.stop.load(Ordering::SeqCst) {
                            break;
                        }
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                };
                let due = stamp + state.one_way_delay;
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                while state.paused.load(Ordering::SeqCst) && !state.stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if state.stop.load(Ordering::SeqCst) || to.write_all(&bytes).is_err() {
                    break;
                }
            }
            // The other side learns that this direction ended.
            let _ = to.shutdown(Shutdown::Write);
        });
}
