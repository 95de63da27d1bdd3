//! The commit loop and what it writes.

pub mod budget;
pub mod checkpoint;
pub mod commit;
pub mod hot;
pub mod idempotency;
pub mod key_scope;
pub mod slot_table;
pub mod store;
pub mod wal;
pub mod write;
