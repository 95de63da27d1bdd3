//! Startup: what a node serves from.

pub mod key_restore;
pub mod recovery;
pub mod restore;
pub mod resume;
