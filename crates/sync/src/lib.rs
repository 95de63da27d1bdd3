//! Replication between geocount's tiers.
//!
//! Every tier pulls from its neighbours with `POST /sync`: a shard's datacenter aggregator and
//! its peers pull its slot, the global aggregator pulls each datacenter aggregator, and
//! descriptions flow back down the same way. Every copy merges by version, so a page delivered
//! twice, late or out of order changes nothing.
//!
//! - [`journal`]: the change journal behind cursors ([`ChangeJournal`]) and the paging of a
//!   journaled table ([`page`]).
//! - [`slot_copies`]: copies of many slots of many counters ([`SlotCopies`]), as aggregators and
//!   peers hold them.
//! - [`descriptions`]: versioned counter descriptions ([`DescriptionTable`]).
//! - [`serve`]: answering `POST /sync` and `GET /slots/{slot}/copy` ([`answer_sync`]).
//! - [`incarnations`]: telling when two processes serve one slot at once ([`SlotIncarnations`]).
//! - [`puller`]: the pull loop ([`spawn_puller`]) and the freshness of a source
//!   ([`SourceStatus`]).
//! - [`replica`]: what an aggregator holds of the tier below ([`Replica`]) and the pullers that
//!   feed it ([`start_pulling`]).
//! - [`topk`]: the leading counters of each ranking by total, kept as merges change them, and
//!   windowed top K ([`TopIndex`]); [`leaders`]: one ranking's leaders and the walk of them.
//! - [`ranked`]: what every ranking shares ([`Ranked`], [`Scope`]); [`scan`]: a ranking by a
//!   scan of every counter, a run at a time ([`Scan`]); [`ranking`]: answering a ranking
//!   without holding up merges and reads, at most so many scans at once ([`Scans`]).
//! - [`top_query`]: the queries of `GET /topk` and `GET /trending` ([`TopQuery`]).
//! - [`metrics`]: the metrics every aggregator exports ([`ReplicaMetrics`]).
//! - [`access`]: the checks of client tokens and of the processes calling between tiers
//!   ([`Access`]).
//! - [`roles`]: how a tier process proves its name, and which processes a route between tiers
//!   accepts ([`Allow`]).
//! - [`http`]: the HTTP pieces both aggregators' APIs share (routing with decoded counter ids,
//!   the common refusals, `/metrics`).
//! - [`tls`]: a tier's TLS as its topology's `[tls]` says ([`tls::tier_tls`]).
//! - [`openapi`]: the OpenAPI documents every tier serves at `GET /openapi.json`, built from
//!   shared parts ([`ApiDoc`]).

pub mod access;
pub mod byte_bound;
pub mod descriptions;
pub mod http;
pub mod incarnations;
pub mod journal;
pub mod leaders;
pub mod metrics;
pub mod openapi;
pub mod puller;
pub mod ranked;
pub mod ranking;
pub mod replica;
pub mod roles;
pub mod scan;
pub mod serve;
pub mod slot_copies;
pub mod tls;
pub mod top_query;
pub mod topk;

pub use access::{Access, AccessError, Caller, Need, TierRefusal};
pub use byte_bound::ByteBound;
pub use descriptions::DescriptionTable;
pub use incarnations::{Conflict, SlotIncarnations, incarnation_made_at_ms, new_incarnation};
pub use journal::{ChangeJournal, Journaled, page};
pub use metrics::ReplicaMetrics;
pub use openapi::{ApiDoc, Operation};
pub use puller::{PullSink, SourceStatus, spawn_puller};
pub use ranked::{Ranked, RankedCounters, Scope};
pub use ranking::{SCAN_RETRY_AFTER_SECS, Scans, ScansBusy};
pub use replica::{
    DEFAULT_MAX_CLOCK_SKEW_MS, HeldCounter, PullSource, Pullers, Replica, SharedReplica, SlotHeard,
    SourceHealth, spawn_pullers, start_pulling, with_ranked, worst_staleness,
};
pub use roles::{Allow, PROCESS_HEADER, PROCESS_KEY_HEADER, ProcessKeys};
pub use scan::Scan;
pub use serve::{answer_key_copy, answer_slot_copy, answer_sync, parse_copy_query};
pub use slot_copies::{PageFence, PageMerge, SlotCopies, record_weight};
pub use top_query::{TopQuery, parse_top_query, parse_trending_query};
pub use topk::{Answer, LiveRanking, TopIndex};
