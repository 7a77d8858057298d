//! A client connection's socket, TCP, unix-domain (`-s`) or TLS over TCP (`-Z`): one
//! type, so that a connection, its worker and the dispatchers do not care which one a
//! client used. The match per `read`/`write` is the whole cost (one branch per batch).
//!
//! All three read and write plaintext. Only TLS may hold bytes of its own between calls:
//! ciphertext the socket had no room for ([`Stream::wants_write`]), which the connection
//! flushes when the socket becomes writable, as it does its own output. Decrypted bytes
//! never wait inside it unannounced: a TLS read returns short only when the socket is
//! drained (see `tls::TlsStream`'s `read`), as a TCP read does.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use crate::tls::TlsStream;

pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream>),
}

impl Stream {
    /// Disables Nagle on TCP: replies are written whole, once per batch, so Nagle could
    /// only delay them. A unix socket has nothing to disable.
    pub fn set_nodelay(&self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_nodelay(true),
            Stream::Unix(_) => Ok(()),
            Stream::Tls(stream) => stream.tcp().set_nodelay(true),
        }
    }

    /// Bytes of the stream's own (TLS ciphertext) wait for room in the socket.
    #[inline]
    pub fn wants_write(&self) -> bool {
        match self {
            Stream::Tcp(_) | Stream::Unix(_) => false,
            Stream::Tls(stream) => stream.wants_write(),
        }
    }

    /// Best effort: tells a client refused before it was served why (over `-c`). A TLS
    /// client could not read plain text, so it only sees the close.
    pub fn refuse(&mut self, message: &[u8]) {
        // A fresh socket has room for a short line; if not, the client sees the close.
        match self {
            Stream::Tcp(stream) => {
                let _ = stream.write(message);
            }
            Stream::Unix(stream) => {
                let _ = stream.write(message);
            }
            Stream::Tls(_) => {}
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
            Stream::Tls(stream) => stream.tcp().as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buf),
            Stream::Unix(stream) => stream.read(buf),
            Stream::Tls(stream) => stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buf),
            Stream::Unix(stream) => stream.write(buf),
            Stream::Tls(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.flush(),
            Stream::Unix(stream) => stream.flush(),
            Stream::Tls(stream) => stream.flush(),
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
            Stream::Tls(stream) => stream.tcp_mut().register(registry, token, interests),
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
            Stream::Tls(stream) => stream.tcp_mut().reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.deregister(registry),
            Stream::Unix(stream) => stream.deregister(registry),
            Stream::Tls(stream) => stream.tcp_mut().deregister(registry),
        }
    }
}
