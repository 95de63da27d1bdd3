//! Where a write goes.

pub(crate) mod forward;
pub(crate) mod slots;
