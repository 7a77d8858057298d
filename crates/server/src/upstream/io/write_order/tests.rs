//! The rules of a key's line, without sockets: who goes out when, and when a line ends.

use super::*;

#[test]
fn a_key_s_first_write_goes_at_once_and_the_next_waits_for_it() {
    let mut lines = Lines::default();
    assert_eq!(lines.join(b"k", 1), Joined::Outstanding);
    assert_eq!(lines.join(b"k", 2), Joined::Waiting);
    assert_eq!(
        lines.join(b"other", 3),
        Joined::Outstanding,
        "keys are apart"
    );
    assert_eq!(
        lines.next(b"k"),
        Next::Hold,
        "while the first is in the backlog, the second has nowhere to follow it"
    );
    assert_eq!(lines.waiting().collect::<Vec<_>>(), vec![2]);
}

#[test]
fn a_sent_line_s_waiting_writes_follow_on_its_connection_only() {
    let mut lines = Lines::default();
    lines.join(b"k", 1);
    lines.join(b"k", 2);
    lines.join(b"k", 3);
    assert!(lines.bind(b"k", 4, 9), "some wait to follow the first");
    assert_eq!(
        lines.next(b"k"),
        Next::Behind {
            slot: 4,
            serial: 9,
            id: 2
        }
    );
    lines.go_behind(b"k");
    assert!(
        !lines.release(b"k"),
        "one still outstanding: the third stays behind it, on the same connection"
    );
    assert_eq!(
        lines.next(b"k"),
        Next::Behind {
            slot: 4,
            serial: 9,
            id: 3
        }
    );
}

#[test]
fn once_none_is_outstanding_the_next_goes_alone_to_any_connection() {
    let mut lines = Lines::default();
    lines.join(b"k", 1);
    lines.join(b"k", 2);
    lines.bind(b"k", 4, 9);
    // Connection 4 takes nothing (a late reply awaited): 2 stays; then 1 ends.
    assert!(lines.release(b"k"), "the line moves on");
    assert_eq!(
        lines.next(b"k"),
        Next::Alone(2),
        "not tied to connection 4 any more"
    );
    lines.go_alone(b"k");
    assert_eq!(lines.waiting().count(), 0);
    assert_eq!(lines.next(b"k"), Next::Nothing);
    assert!(!lines.bind(b"k", 5, 1), "a new connection, nothing waiting");
    assert!(!lines.release(b"k"));
    assert_eq!(
        lines.join(b"k", 3),
        Joined::Outstanding,
        "the line ended with its last request"
    );
}

#[test]
fn a_waiting_write_that_ends_before_its_turn_leaves_and_an_empty_line_ends() {
    let mut lines = Lines::default();
    lines.join(b"k", 1);
    lines.join(b"k", 2);
    lines.join(b"k", 3);
    lines.leave(b"k", 2);
    assert_eq!(lines.waiting().collect::<Vec<_>>(), vec![3]);
    lines.drop_first(b"k");
    assert_eq!(lines.waiting().count(), 0);
    assert!(!lines.release(b"k"), "nothing waits: no move");
    assert_eq!(lines.next(b"k"), Next::Nothing);
    assert_eq!(
        lines.join(b"k", 4),
        Joined::Outstanding,
        "the line had ended"
    );
}
