//! Where a write goes.
pub mod slots;
