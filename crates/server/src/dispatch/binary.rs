//! Binary protocol dispatch.
use crate::session::{Session, Step};

/// Handles the request at the front of `input` (binary protocol).
pub fn handle(_session: &mut Session<'_>, _input: &[u8]) -> Step {
    Step::NeedMore
}
