//! Protocol dispatchers: parse one request with the `protocol` crate, apply it to the
//! engine, encode the reply. One module per protocol family.

pub mod binary;
pub mod meta;
pub mod text;
