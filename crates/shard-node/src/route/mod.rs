//! Where a checked write goes: which slot takes it, and the way there.
//!
//! - [`slots`]: picks the slot of each write (consistent hashing over the datacenter's slots,
//!   idempotency keys and unique items pinned to theirs).
//! - [`forward`]: sends a write for another node's slot to that node and brings its outcome
//!   back, or hands one for this node's slot to the commit loop.

pub(crate) mod forward;
pub(crate) mod slots;
