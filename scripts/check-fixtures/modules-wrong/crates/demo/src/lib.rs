//! A crate whose modules look fine to a check that reads only `crate::x` and `super::x`, and
//! only up to a file's first `#[cfg(test)]`.
pub mod core;
pub mod ledger;
pub mod net;
pub mod peer;
pub mod record;

pub use ledger::Ledger;
pub use record::Record;
