//! placeholder: filled in by the meta protocol work.
