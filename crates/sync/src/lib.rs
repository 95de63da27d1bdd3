//! Replication between geocount's tiers.
//!
//! Every tier pulls from its neighbours with `POST /sync`: a shard's datacenter aggregator and
//! its peers pull its slot, the global aggregator pulls each datacenter aggregator, and
//! descriptions flow back down the same way. Every copy merges by version, so a page delivered
//! twice, late or out of order changes nothing.
//!
//! - [`journal`]: the change journal behind cursors ([`ChangeJournal`]) and the paging of a
//!   journaled table ([`page`]) or of a copy ([`copy_range`]).
//! - [`byte_bound`]: the bytes a table holds against its bound ([`ByteBound`]).
//! - [`slot_copies`]: copies of many slots of many counters ([`SlotCopies`]), as aggregators and
//!   peers hold them.
//! - [`descriptions`]: versioned counter descriptions ([`DescriptionTable`]).
//! - [`encoded`]: slot pages assembled from entries encoded once for every puller
//!   ([`encoded_slot_page`], [`encode_sync_page`]).
//! - [`serve`]: answering `POST /sync` and `GET /slots/{slot}/copy` ([`answer_sync`]).
//! - [`incarnations`]: telling when two processes serve one slot at once ([`SlotIncarnations`]),
//!   each known by its incarnation and start nonce ([`SlotProcess`]).
//! - [`error`]: why a pull failed or a pulled page was refused ([`SyncError`]).
//! - [`puller`]: the pull loop ([`spawn_puller`]) and the freshness of a source
//!   ([`SourceStatus`]).
//!
//! What an aggregator holds of the tier below is the aggregator's own
//! (`geocount_aggregator::replica`). The HTTP layer every tier shares
//! (routing, access and roles, TLS, OpenAPI parts) is `geocount-http`; this crate builds on it.

pub mod byte_bound;
pub mod descriptions;
pub mod encoded;
pub mod error;
pub mod incarnations;
pub mod journal;
pub mod puller;
pub mod serve;
pub mod slot_copies;

pub use byte_bound::ByteBound;
pub use descriptions::{AheadOfClock, ClockFence, DescriptionTable, Intake};
pub use encoded::{
    EncodeItems, EncodedEntries, EncodedRows, SlotEntryRef, encode_sync_page, encoded_slot_page,
};
pub use error::SyncError;
pub use incarnations::{
    Conflict, SlotIncarnations, SlotProcess, incarnation_made_at_ms, new_incarnation,
};
pub use journal::{ChangeJournal, Journaled, copy_range, page, page_where, walk};
pub use puller::{PullSink, SourceStatus, spawn_puller, worst_staleness};
pub use serve::{
    MAX_SYNC_REQUEST_BYTES, answer_key_copy, answer_slot_copy, answer_sync, answer_sync_encoded,
    parse_copy_query,
};
pub use slot_copies::{PageFence, PageMerge, SlotCopies, record_weight, slot_page};
