//! Test support: start `fogcached` (or Debian's `memcached`) on a free loopback port and
//! talk raw bytes to it.
