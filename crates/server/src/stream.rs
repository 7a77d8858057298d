//! A client connection's socket, TCP or unix-domain (`-s`): one type, so that a
//! connection, its worker and the dispatchers do not care which one a client used.
//! The match per `read`/`write` is the whole cost (one branch per batch).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Disables Nagle on TCP: replies are written whole, once per batch, so Nagle could
    /// only delay them. A unix socket has nothing to disable.
    pub fn set_nodelay(&self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_nodelay(true),
            Stream::Unix(_) => Ok(()),
        }
    }
}

impl Stream {
    /// Whether the io_uring loop may move this stream's bytes itself (plain sockets: the
    /// bytes on the wire are the protocol's). A stream that must transform them (e.g.
    /// TLS) is served by readiness through the worker's `mio::Poll` under either loop.
    pub fn completion_io(&self) -> bool {
        match self {
            Stream::Tcp(_) | Stream::Unix(_) => true,
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
        }
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match *self {
            Stream::Tcp(stream) => (&*stream).read(buf),
            Stream::Unix(stream) => (&*stream).read(buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match *self {
            Stream::Tcp(stream) => (&*stream).write(buf),
            Stream::Unix(stream) => (&*stream).write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match *self {
            Stream::Tcp(stream) => (&*stream).flush(),
            Stream::Unix(stream) => (&*stream).flush(),
        }
    }
}

impl Source for Stream {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.register(registry, token, interests),
            Stream::Unix(stream) => stream.register(registry, token, interests),
        }
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.reregister(registry, token, interests),
            Stream::Unix(stream) => stream.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.deregister(registry),
            Stream::Unix(stream) => stream.deregister(registry),
        }
    }
}
