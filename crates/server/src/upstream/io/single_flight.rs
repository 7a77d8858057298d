//! Single flight: N concurrent misses of a key make one upstream read. A plain read
//! joins the read of its key in flight, if any; a read that an ordered request of its
//! key overtook (the read may have seen the value before it) is *poisoned*: it still
//! answers its waiters, but stores nothing at the edge and is joined no more, so a
//! client that got its write's reply is not answered with the value from before it.
//! [`SingleFlight`] is the bookkeeping alone, so that its rules are tested here.

use std::collections::HashMap;

use super::{FlightId, UpstreamLoop};
use crate::upstream::UpstreamOp;

/// The plain reads in flight that later reads of their key may join, by key.
#[derive(Default)]
pub(super) struct SingleFlight {
    reads_by_key: HashMap<Vec<u8>, FlightId>,
}

impl SingleFlight {
    /// Whether a request may share a read: a plain read. A `gat` writes its key's TTL:
    /// it is ordered with the key's writes, never shared.
    pub(super) fn joinable(op: &UpstreamOp) -> bool {
        matches!(
            op,
            UpstreamOp::Get {
                touch_exptime: None
            }
        )
    }

    /// The read of `key` a new read joins, if one is in flight and not poisoned.
    pub(super) fn in_flight(&self, key: &[u8]) -> Option<FlightId> {
        self.reads_by_key.get(key).copied()
    }

    /// Read `id` of `key` went out: later reads of `key` join it.
    pub(super) fn started(&mut self, key: Vec<u8>, id: FlightId) {
        self.reads_by_key.insert(key, id);
    }

    /// An ordered request of `key` ended: the read in flight, if any, is joined no more;
    /// returned so that its value is kept from the edge.
    pub(super) fn detach(&mut self, key: &[u8]) -> Option<FlightId> {
        self.reads_by_key.remove(key)
    }

    /// Read `id` of `key` ended. A read detached before leaves the key to the read
    /// started after it.
    pub(super) fn ended(&mut self, key: &[u8], id: FlightId) {
        if self.reads_by_key.get(key) == Some(&id) {
            self.reads_by_key.remove(key);
        }
    }
}

impl UpstreamLoop {
    /// Keeps the read of `key` in flight, if any, from storing its value (it may have
    /// seen the value before an ordered request that just ended), and lets later reads
    /// ask again rather than join it (a client that got its write's reply must not be
    /// answered with the value from before it).
    pub(super) fn poison_read(&mut self, key: &[u8]) {
        if let Some(read) = self.reads.detach(key) {
            if let Some(read) = self.flights.get_mut(&read) {
                read.poisoned = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read() -> UpstreamOp {
        UpstreamOp::Get {
            touch_exptime: None,
        }
    }

    #[test]
    fn concurrent_reads_of_a_key_share_one_flight_until_it_ends() {
        let mut reads = SingleFlight::default();
        assert!(SingleFlight::joinable(&read()));
        assert_eq!(reads.in_flight(b"k"), None, "the first read goes out");
        reads.started(b"k".to_vec(), 1);
        assert_eq!(reads.in_flight(b"k"), Some(1), "the second joins it");
        assert_eq!(reads.in_flight(b"other"), None, "another key has its own");
        reads.ended(b"k", 1);
        assert_eq!(
            reads.in_flight(b"k"),
            None,
            "after it ended, a read asks again"
        );
    }

    #[test]
    fn a_read_overtaken_by_a_write_is_joined_no_more_and_its_end_leaves_the_next_read() {
        let mut reads = SingleFlight::default();
        reads.started(b"k".to_vec(), 1);
        assert_eq!(reads.detach(b"k"), Some(1), "the write's end spoils read 1");
        assert_eq!(
            reads.in_flight(b"k"),
            None,
            "a read after the write asks again"
        );
        reads.started(b"k".to_vec(), 2);
        reads.ended(b"k", 1);
        assert_eq!(
            reads.in_flight(b"k"),
            Some(2),
            "the spoiled read's end does not end the read after it"
        );
        assert_eq!(reads.detach(b"k"), Some(2));
        assert_eq!(reads.detach(b"k"), None);
    }

    #[test]
    fn a_gat_and_writes_are_never_shared() {
        assert!(!SingleFlight::joinable(&UpstreamOp::Get {
            touch_exptime: Some(60)
        }));
        assert!(!SingleFlight::joinable(&UpstreamOp::Delete {
            compare_cas: None
        }));
    }
}
