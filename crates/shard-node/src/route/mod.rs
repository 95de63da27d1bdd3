//! Where a write goes.

pub mod forward;
pub mod slots;
