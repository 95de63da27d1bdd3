//! Where a checked write goes: which slot takes it, and the way there.
//!
//! - [`slots`]: the router ([`slots::WriteRouter`]): picks the slot of each write (consistent
//!   hashing over the datacenter's slots, idempotency keys and unique items pinned to theirs)
//!   and sends to each slot's node.
//! - [`forward`]: sends a write, a batch's writes or a keyed change of a counter's life for
//!   another node's slot to that node and brings its outcome back, or hands a write for this
//!   node's slot to the commit loop.

pub(crate) mod forward;
pub(crate) mod slots;
