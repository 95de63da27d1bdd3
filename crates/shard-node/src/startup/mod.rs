//! Startup: what a node serves from.

pub(crate) mod key_restore;
pub(crate) mod recovery;
pub(crate) mod restore;
pub mod resume;
