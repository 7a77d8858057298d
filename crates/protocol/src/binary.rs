//! placeholder: filled in by the binary protocol work.
