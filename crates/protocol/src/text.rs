//! placeholder: filled in by the text protocol work.
