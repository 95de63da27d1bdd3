//! The engine: the commit loop that makes a write durable, and what it keeps.
//!
//! - [`write`](mod@write): what handlers ask of the commit loop ([`write::Command`]) in the
//!   crate's write vocabulary ([`crate::write`]).
//! - [`commit`]: the single-writer commit loop: groups waiting writes, stages each against the
//!   committed state, logs the group with one fsync, installs it and answers.
//! - [`wal`]: the write-ahead log the groups are appended to, in the framing of [`records`]
//!   (shared with a peer's key file) that tells a torn tail from corruption.
//! - [`held`]: what the commit loop hands its durable groups to in `replicated`
//!   durability, to be answered once a peer holds them.
//! - [`slot_table`]: the committed state of the own slot, in memory; reads are served from it.
//! - [`idempotency`]: the `Idempotency-Key` records a retry is answered from, found through
//!   [`key_index`]; [`key_scope`]: whose a key is.
//! - [`key_blocks`]: the keys of each group as the log encoded them, on their way to the store.
//! - [`budget`]: the bytes of state held, against their bounds.
//! - [`hot`]: the counts of writes per counter that spread a hot counter over more slots.
//! - [`checkpoint`]: the worker that folds closed log segments into the [`store`] (redb).

pub(crate) mod budget;
pub mod checkpoint;
pub mod commit;
pub(crate) mod held;
pub(crate) mod hot;
pub(crate) mod idempotency;
pub(crate) mod key_blocks;
pub(crate) mod key_index;
pub mod key_scope;
pub(crate) mod records;
pub mod slot_table;
pub(crate) mod store;
pub(crate) mod wal;
pub mod write;
