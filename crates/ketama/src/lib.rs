//! Ketama consistent hashing, as libmemcached (`MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED` with
//! the MD5 key hash) and twemproxy (`distribution: ketama`, `hash: md5`) place keys on
//! several servers, so that a fogbench run over N servers, and a fogcached edge over N upstreams
//! (`--upstream a,b`), spread keys the way those clients would.
//!
//! The continuum: for each server, 160 points at weight 1 (all servers here have equal
//! weight). They come from MD5 digests of `"<host>:<port>-<i>"` for i in 0..40, each
//! 16-byte digest giving 4 points (its four little-endian 32-bit words). A key goes to
//! the server of the first point whose value is >= the key's hash (the first four bytes
//! of MD5(key), little-endian), wrapping to the first point past the end.
//!
//! Checked against libmemcached 1.0.18 (see the tests). One difference from it: for a
//! server on the default port 11211 it hashes `"<host>-<i>"`, without the port, so a
//! list that includes port 11211 maps differently there; twemproxy always includes the
//! port, as here.
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use md5::{Digest, Md5};

/// Points per server at weight 1 (libmemcached's `MEMCACHED_POINTS_PER_SERVER_KETAMA`).
pub const POINTS_PER_SERVER: usize = 160;
/// Points taken from one MD5 digest.
const POINTS_PER_DIGEST: usize = 4;

/// The continuum of a fixed list of equally weighted servers.
#[derive(Debug, Clone)]
pub struct Ketama {
    /// (point, server index), sorted by point then index (ties broken deterministically).
    points: Vec<(u32, usize)>,
    servers: usize,
}

/// The four little-endian 32-bit words of `md5(bytes)`.
fn md5_words(bytes: &[u8]) -> [u32; 4] {
    let digest = Md5::digest(bytes);
    let mut words = [0u32; 4];
    for (i, word) in words.iter_mut().enumerate() {
        *word = u32::from_le_bytes([
            digest[4 * i],
            digest[4 * i + 1],
            digest[4 * i + 2],
            digest[4 * i + 3],
        ]);
    }
    words
}

/// The hash ketama places a key with: the first four bytes of MD5(key), little-endian
/// (libmemcached's `MEMCACHED_HASH_MD5`).
pub fn key_hash(key: &[u8]) -> u32 {
    md5_words(key)[0]
}

impl Ketama {
    /// The continuum of servers named `"host:port"`, in list order (a key's server is
    /// reported as its index in `names`).
    pub fn new<S: AsRef<str>>(names: &[S]) -> Ketama {
        let mut points = Vec::with_capacity(names.len() * POINTS_PER_SERVER);
        for (index, name) in names.iter().enumerate() {
            for i in 0..POINTS_PER_SERVER / POINTS_PER_DIGEST {
                let label = format!("{}-{i}", name.as_ref());
                for word in md5_words(label.as_bytes()) {
                    points.push((word, index));
                }
            }
        }
        points.sort_unstable();
        Ketama {
            points,
            servers: names.len(),
        }
    }

    /// The continuum of socket addresses, named as `SocketAddr` displays them
    /// (`127.0.0.1:11211`).
    pub fn for_addrs(servers: &[SocketAddr]) -> Ketama {
        let names: Vec<String> = servers.iter().map(SocketAddr::to_string).collect();
        Ketama::new(&names)
    }

    pub fn servers(&self) -> usize {
        self.servers
    }

    /// Index of the server that holds `key` (0 when there is only one server or none).
    pub fn server_for(&self, key: &[u8]) -> usize {
        if self.servers <= 1 {
            // Skip the MD5: one server holds everything.
            return 0;
        }
        self.server_for_hash(key_hash(key))
    }

    /// Index of the server of the first point >= `hash`, wrapping around.
    pub fn server_for_hash(&self, hash: u32) -> usize {
        let at = self.points.partition_point(|&(point, _)| point < hash);
        match self.points.get(at).or_else(|| self.points.first()) {
            Some(&(_, server)) => server,
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{}:11211", i + 1)).collect()
    }

    #[test]
    fn md5_words_are_little_endian() {
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e.
        assert_eq!(
            md5_words(b""),
            [0xd98c_1dd4, 0x04b2_008f, 0x9809_80e9, 0x7e42_f8ec]
        );
        assert_eq!(key_hash(b""), 0xd98c_1dd4);
    }

    #[test]
    fn keys_map_as_libmemcached_maps_them() {
        // libmemcached 1.0.18 (Debian's libmemcached11) with
        // MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED over these three servers (not on port
        // 11211, whose name libmemcached writes without the port) placed fb:0..fb:23 so;
        // the same held for all of fb:0..fb:19999 when this was written.
        let ring = Ketama::new(&["127.0.0.1:20001", "127.0.0.1:20002", "127.0.0.1:20003"]);
        let libmemcached = [
            0, 1, 2, 2, 2, 2, 2, 0, 2, 1, 1, 0, 2, 2, 1, 0, 1, 0, 2, 1, 0, 1, 1, 2,
        ];
        for (id, &expected) in libmemcached.iter().enumerate() {
            assert_eq!(
                ring.server_for(format!("fb:{id}").as_bytes()),
                expected,
                "fb:{id}"
            );
        }
    }

    #[test]
    fn the_continuum_has_160_points_per_server() {
        let ring = Ketama::new(&names(3));
        assert_eq!(ring.points.len(), 3 * POINTS_PER_SERVER);
        assert!(ring.points.windows(2).all(|w| w[0] <= w[1]));
        for server in 0..3 {
            let count = ring.points.iter().filter(|&&(_, s)| s == server).count();
            assert_eq!(count, POINTS_PER_SERVER);
        }
    }

    #[test]
    fn lookup_takes_the_first_point_at_or_after_the_hash_and_wraps() {
        let ring = Ketama::new(&names(2));
        let (first_point, first_server) = ring.points[0];
        let (last_point, last_server) = ring.points[ring.points.len() - 1];
        assert_eq!(ring.server_for_hash(first_point), first_server);
        assert_eq!(ring.server_for_hash(0), first_server);
        assert_eq!(ring.server_for_hash(last_point), last_server);
        // Past the last point: wrap to the first.
        if last_point < u32::MAX {
            assert_eq!(ring.server_for_hash(last_point + 1), first_server);
        }
        // A hash just above a point goes to the next point's server.
        let (point, _) = ring.points[10];
        let (_, next_server) = ring.points[11];
        if ring.points[11].0 > point {
            assert_eq!(ring.server_for_hash(point + 1), next_server);
        }
    }

    #[test]
    fn mapping_is_stable_for_the_same_server_list() {
        let a = Ketama::new(&names(4));
        let b = Ketama::new(&names(4));
        for i in 0..10_000u32 {
            let key = format!("fb:{i}");
            assert_eq!(
                a.server_for(key.as_bytes()),
                b.server_for(key.as_bytes()),
                "{key}"
            );
        }
        // And it does not depend on anything but the key: a known key maps the same way
        // as its hash does.
        let key = b"fb:12345";
        assert_eq!(a.server_for(key), a.server_for_hash(key_hash(key)));
    }

    #[test]
    fn keys_are_balanced_over_two_to_four_servers() {
        const KEYS: u32 = 100_000;
        for n in 2..=4 {
            let ring = Ketama::new(&names(n));
            let mut counts = vec![0u32; n];
            for i in 0..KEYS {
                counts[ring.server_for(format!("fb:{i}").as_bytes())] += 1;
            }
            let fair = f64::from(KEYS) / n as f64;
            for (server, &count) in counts.iter().enumerate() {
                // 160 points per server keep each share within ~20% of fair.
                let deviation = (f64::from(count) - fair).abs() / fair;
                assert!(
                    deviation < 0.2,
                    "{n} servers: server {server} has {count} of {KEYS} keys {counts:?}"
                );
            }
        }
    }

    #[test]
    fn removing_a_server_moves_only_its_keys() {
        let all = names(4);
        let full = Ketama::new(&all);
        // Drop server 2; indexes of the survivors shift, so compare names.
        let survivors: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 2)
            .map(|(_, name)| name.clone())
            .collect();
        let reduced = Ketama::new(&survivors);
        let mut moved = 0;
        for i in 0..20_000u32 {
            let key = format!("fb:{i}");
            let before = &all[full.server_for(key.as_bytes())];
            let after = &survivors[reduced.server_for(key.as_bytes())];
            if before == &all[2] {
                moved += 1;
                assert_ne!(after, &all[2]);
            } else {
                assert_eq!(before, after, "{key} moved off a surviving server");
            }
        }
        assert!(moved > 0);
    }

    #[test]
    fn one_server_takes_every_key() {
        let ring = Ketama::new(&names(1));
        assert_eq!(ring.server_for(b"anything"), 0);
        assert_eq!(ring.server_for_hash(u32::MAX), 0);
        let empty = Ketama::new::<String>(&[]);
        assert_eq!(empty.server_for_hash(7), 0);
    }
}
