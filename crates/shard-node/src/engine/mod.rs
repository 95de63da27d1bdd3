//! The commit loop and what it writes.

pub(crate) mod budget;
pub mod checkpoint;
pub mod commit;
pub(crate) mod hot;
pub(crate) mod idempotency;
pub mod key_scope;
pub mod slot_table;
pub(crate) mod store;
pub(crate) mod wal;
pub mod write;
