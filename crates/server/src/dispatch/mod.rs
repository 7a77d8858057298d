//! Protocol dispatchers: parse one request with the `protocol` crate, apply it to the
//! engine, encode the reply. One module per protocol family.

pub mod admin;
pub mod binary;
pub mod fog;
pub mod meta;
#[cfg(test)]
mod test_server;
pub mod text;

use crate::session::{Session, Step};

/// Sends the error reply of a malformed request (`protocol::Parsed::Invalid`) and tells
/// the runtime what to do with the bytes: drop the request, swallow a refused payload as
/// it arrives, or close the connection.
fn refuse(
    session: &mut Session<'_>,
    reply: &[u8],
    consumed: usize,
    swallow_bytes: usize,
    close: bool,
) -> Step {
    session.out.extend_from_slice(reply);
    if close {
        Step::Close
    } else if swallow_bytes > 0 {
        Step::Swallow {
            consumed,
            bytes: swallow_bytes,
        }
    } else {
        Step::Consumed(consumed)
    }
}
