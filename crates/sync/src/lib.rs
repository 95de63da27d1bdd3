//! Replication between geocount's tiers.
//!
//! Every tier pulls from its neighbours with `POST /sync`: a shard's datacenter aggregator and
//! its peers pull its slot, the global aggregator pulls each datacenter aggregator, and
//! descriptions flow back down the same way. Every copy merges by version, so a page delivered
//! twice, late or out of order changes nothing.
//!
//! - [`journal`]: the change journal behind cursors ([`ChangeJournal`]) and the paging of a
//!   journaled table ([`page`]) or of a copy ([`copy_range`]).
//! - [`slot_copies`]: copies of many slots of many counters ([`SlotCopies`]), as aggregators and
//!   peers hold them.
//! - [`descriptions`]: versioned counter descriptions ([`DescriptionTable`]).
//! - [`serve`]: answering `POST /sync` and `GET /slots/{slot}/copy` ([`answer_sync`]).
//! - [`incarnations`]: telling when two processes serve one slot at once ([`SlotIncarnations`]).
//! - [`puller`]: the pull loop ([`spawn_puller`]) and the freshness of a source
//!   ([`SourceStatus`]).
//! - [`replica`]: what an aggregator holds of the tier below ([`Replica`]).
//! - [`pulling`]: the pullers that feed a replica, one per source ([`start_pulling`]).
//! - [`topk`]: the top-K index aggregators rank from ([`TopIndex`]), a module tree of its
//!   own: [`topk::leaders`] (one ranking's leaders and the walk of them), [`topk::live`] (the
//!   live window), [`topk::ranked`] (what every ranking shares: [`Ranked`], [`Scope`]),
//!   and [`topk::scan`] (a ranking by a scan of every counter, a run at a time).
//! - [`scans`]: answering a ranking over a replica without holding up merges and reads
//!   ([`Scans`]).
//! - [`metrics`]: the metrics every aggregator exports ([`ReplicaMetrics`]).
//!
//! The HTTP layer every tier shares (routing, access and roles, TLS, OpenAPI parts, the
//! queries of rankings) is `geocount-http`; this crate builds on it.

pub mod byte_bound;
pub mod descriptions;
pub mod incarnations;
pub mod journal;
pub mod metrics;
pub mod puller;
pub mod pulling;
pub mod replica;
pub mod scans;
pub mod serve;
pub mod slot_copies;
pub mod topk;

pub use byte_bound::ByteBound;
pub use descriptions::DescriptionTable;
pub use incarnations::{Conflict, SlotIncarnations, incarnation_made_at_ms, new_incarnation};
pub use journal::{ChangeJournal, Journaled, copy_range, page, page_where};
pub use metrics::ReplicaMetrics;
pub use puller::{PullSink, SourceStatus, spawn_puller};
pub use pulling::{Pullers, ReplicaSink, spawn_pullers, start_pulling};
pub use replica::{
    DEFAULT_MAX_CLOCK_SKEW_MS, HeldCounter, PullSource, Replica, SharedReplica, SlotHeard,
    SourceHealth, with_ranked, worst_staleness,
};
pub use scans::{SCAN_RETRY_AFTER_SECS, Scans, ScansBusy};
pub use serve::{
    MAX_SYNC_REQUEST_BYTES, answer_key_copy, answer_slot_copy, answer_sync, parse_copy_query,
    serve_sync,
};
pub use slot_copies::{PageFence, PageMerge, SlotCopies, record_weight};
pub use topk::{Answer, LiveRanking, Ranked, RankedCounters, Scan, Scope, TopIndex};
