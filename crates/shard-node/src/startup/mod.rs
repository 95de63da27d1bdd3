//! Startup: what the node serves from, before it takes its first write.
//!
//! - [`recovery`]: reads the store and the log as plain records (or marks an empty data
//!   directory for a restore).
//! - [`resume`]: rebuilds from them exactly what was acknowledged.
//! - [`restore`]: rebuilds a lost disk's slot from its datacenter's copies, and
//!   [`key_restore`] its idempotency keys from the peers', each waiting for more pages until
//!   [`settle`] says none came for `restore_timeout_ms`; [`coverage`] says when copies of
//!   some partitions each make up the whole slot; in `replicated` durability
//!   [`held_restore`] adds the peers' logs of the slot's replicated writes; [`take_over`]
//!   logs what was restored through the commit loop before writes are let in.

pub(crate) mod coverage;
pub(crate) mod held_restore;
pub(crate) mod key_restore;
pub(crate) mod recovery;
pub(crate) mod restore;
pub mod resume;
pub(crate) mod settle;
pub(crate) mod take_over;
