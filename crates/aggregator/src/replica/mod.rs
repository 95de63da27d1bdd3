//! What an aggregator holds of the tier below it, how its pullers feed it, and the top-K index
//! it keeps beside its copies.
//!
//! Both aggregators keep the same things in memory: copies of slots ([`SlotCopies`]), counter
//! descriptions ([`DescriptionTable`]), one [`SourceStatus`] per source they pull, and a
//! [`TopIndex`] over the copies. Reads, `POST /sync` answers ([`Replica::sync_page`]) and slot
//! copies ([`Replica::slot_copy`]) are served from the same tables, so nothing a reader does
//! waits on a source.
//!
//! - [`source`]: the sources pulled ([`PullSource`]) and what kind each is ([`SourceKind`]).
//! - [`merge`]: the one path a pulled page takes into the replica ([`merge_pulled`]).
//! - [`top`]: the top-K index beside the copies, fed by what each merge changed, and answering
//!   a ranking over it ([`with_ranked`]).
//! - [`scans`]: rankings and sums that scan every counter, without holding up merges and reads
//!   ([`Scans`]).
//! - [`sums`]: sums over the counters with an id prefix ([`SumScan`]).
//! - [`metrics`]: the metrics every aggregator exports ([`ReplicaMetrics`]).
//! - [`pulling`]: the pullers that feed a replica, one per source ([`start_pulling`]).
//! - [`serve`]: answering `POST /sync` from the replica ([`serve_sync`]).

pub mod merge;
pub mod metrics;
pub mod pulling;
pub mod scans;
pub mod serve;
pub mod source;
pub mod sums;
pub mod top;

use std::sync::{Arc, Mutex, RwLock};

use geocount_model::wire::{SlotCopy, SlotFreshness, SyncPage, SyncRequest};
use geocount_model::{CounterType, Partitions, SlotRecord, VersionedDescription};
use geocount_ranking::TopIndex;
use geocount_sync::byte_bound::Refusals;
use geocount_sync::{
    Conflict, DescriptionTable, SlotCopies, SlotIncarnations, SlotProcess, SourceStatus,
};
use serde::Serialize;

use crate::lifecycle::Life;

pub use merge::{PageIntake, merge_pulled};
pub use metrics::ReplicaMetrics;
pub use pulling::{Pullers, ReplicaSink, spawn_pullers, start_pulling};
pub use scans::{SCAN_RETRY_AFTER_SECS, Scans, ScansBusy};
pub use serve::serve_sync;
pub use source::{PullSource, SourceFence, SourceKind};
pub use sums::{Sum, SumScan, Sums};
use top::Expiries;
pub use top::{RANK_CHUNK, RankedAt, with_ranked};

/// An aggregator's copy of the tier below it.
#[derive(Debug)]
pub struct Replica {
    /// The slot copies, merged by version; every merge goes through the replica, so `top`
    /// hears of it.
    copies: SlotCopies,
    /// The counter descriptions, merged by version.
    pub descriptions: DescriptionTable,
    /// One status per source, in the order the sources were given to [`spawn_pullers`].
    pub sources: Vec<SourceStatus>,
    /// What this replica has heard of each slot, by slot index.
    pub slots: Vec<SlotHeard>,
    /// Each slot's incarnations lately heard at its address and announced in pulls, by slot
    /// index.
    pub incarnations: Vec<SlotIncarnations>,
    /// Per source, what its pages may carry.
    fences: Vec<SourceFence>,
    /// How far ahead of this process's clock a copy's version may be (`sync.max_clock_skew_ms`).
    pub max_clock_skew_ms: u64,
    /// Pulled entries refused past the copies' byte bound, and the setting that bounds them.
    refusals: Refusals,
    /// The partitions this replica holds, when not all (its sources send only theirs).
    pub partitions: Option<Partitions>,
    /// Counters ranked by total ([`top`]); every merge that changes one marks it. Behind a
    /// lock of its own, so ranking needs only shared access to the replica: reads and sync
    /// pages are served meanwhile, and only merges wait.
    top: Option<Mutex<TopIndex>>,
    /// The expiries still to come, each marking its counter for `top` once passed.
    expiries: Mutex<Expiries>,
}

/// What a replica has heard of one slot since its process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotHeard {
    /// When (this process's clock) the replica last held the slot's whole state: its owner's
    /// newest change, directly or through a complete tier below. `None`: never since it started,
    /// so its copy may lack anything the slot holds.
    pub complete_as_of_ms: Option<u64>,
    /// The owner's incarnation last heard (0: none).
    pub owner_incarnation: u64,
    /// Entries of the slot were refused past this replica's byte bound: its copy lacks them
    /// until the process restarts.
    pub refused_past_bound: bool,
    /// The source it was pulled from last said its own copy is incomplete.
    pub source_incomplete: bool,
}

impl SlotHeard {
    /// Marks the slot complete as of `as_of_ms` (never moving back), heard from `incarnation`.
    /// Whether the copy lacks entries refused past a byte bound, here or below.
    pub fn is_incomplete(&self) -> bool {
        self.refused_past_bound || self.source_incomplete
    }

    fn heard(&mut self, as_of_ms: u64, incarnation: u64) {
        self.complete_as_of_ms = Some(self.complete_as_of_ms.map_or(as_of_ms, |t| t.max(as_of_ms)));
        if incarnation != 0 {
            self.owner_incarnation = incarnation;
        }
    }
}

/// How far ahead of a process's clock a copy's version may be when no setting says otherwise.
pub const DEFAULT_MAX_CLOCK_SKEW_MS: u64 = 60_000;

/// A [`Replica`] shared by the pullers and the HTTP handlers.
pub type SharedReplica = Arc<RwLock<Replica>>;

/// A source's freshness as `/healthz` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceHealth {
    /// How long ago the copy of the source was complete (`None`: never).
    pub staleness_ms: Option<u64>,
    /// The last pull failure, cleared by the next success.
    pub last_error: Option<String>,
    /// The copy lacks entries refused past a byte bound (this aggregator's or the source's):
    /// sums over it are incomplete.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// Entries of the source the clock fence refused, versioned further ahead of this
    /// process's clock than `sync.max_clock_skew_ms`: pulled again until taken, and the copy
    /// grows stale meanwhile (0: none).
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_ahead: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One counter as a [`Replica`] holds it, found once for a read: its slots' copies and its
/// description.
#[derive(Debug, Clone, Copy)]
pub struct HeldCounter<'a> {
    /// The copies of its slots (`None`: no slot holds it).
    pub copies: Option<&'a [(u16, SlotRecord)]>,
    /// Its description, if one has arrived.
    pub description: Option<&'a VersionedDescription>,
}

impl HeldCounter<'_> {
    /// Whether the counter counts distinct items: its description says so or, while no
    /// description has arrived, a copy of one of its slots holds a sketch.
    pub fn is_unique(&self) -> bool {
        match self.description {
            Some(d) => d.description.counter_type == CounterType::Unique,
            None => self
                .copies
                .is_some_and(|copies| copies.iter().any(|(_, r)| r.uniques().is_some())),
        }
    }

    /// How the lifecycle rule reads it at `now_ms`: whether it exists, and which records count.
    pub fn life(&self, now_ms: u64) -> Life {
        Life::of(self.description, self.copies.unwrap_or_default(), now_ms)
    }

    /// The counter's window length: its description's, else `default_window_seconds`.
    pub fn window_seconds(&self, default_window_seconds: u32) -> u32 {
        self.description
            .map_or(default_window_seconds, |d| d.description.window_seconds)
    }
}

impl Replica {
    /// Counter `id`'s copies and description.
    pub fn counter(&self, id: &str) -> HeldCounter<'_> {
        HeldCounter {
            copies: self.copies.get(id),
            description: self.descriptions.get(id),
        }
    }

    /// The slot copies.
    pub fn copies(&self) -> &SlotCopies {
        &self.copies
    }

    /// Empty copies of the slots named `slot_names`, to be pulled from `sources` (none heard
    /// yet).
    pub fn new(slot_names: Vec<String>, sources: &[PullSource]) -> Self {
        let fences = (sources.iter())
            .map(|source| SourceFence::of(source, &slot_names))
            .collect();
        Self {
            slots: vec![SlotHeard::default(); slot_names.len()],
            incarnations: vec![SlotIncarnations::default(); slot_names.len()],
            copies: SlotCopies::new(slot_names),
            descriptions: DescriptionTable::default(),
            sources: sources
                .iter()
                .map(|s| SourceStatus::asking(s.first.clone()))
                .collect(),
            fences,
            max_clock_skew_ms: DEFAULT_MAX_CLOCK_SKEW_MS,
            refusals: Refusals::default(),
            partitions: None,
            top: None,
            expiries: Mutex::default(),
        }
    }

    /// Bounds the bytes of the copies at `max_bytes`, set by the setting `key`: entries past
    /// it are refused and counted, and the slots they belong to are reported incomplete.
    pub fn set_byte_bound(&mut self, key: &'static str, max_bytes: u64) {
        self.refusals.key = key;
        self.copies.set_max_bytes(max_bytes);
    }

    /// Once entries were refused past the byte bound: what to report, naming the setting.
    pub fn over_bound(&self) -> Option<String> {
        self.refusals.report(self.copies.bytes())
    }

    /// The replica behind a lock, for the pullers and the handlers to share.
    pub fn shared(self) -> SharedReplica {
        Arc::new(RwLock::new(self))
    }

    /// The answer to a `POST /sync` from the tier that pulls this one: each stream asked for,
    /// from its cursor, at most `limit` entries, with this replica's `freshness`.
    pub fn sync_page(
        &self,
        request: &SyncRequest,
        source: &str,
        limit: usize,
        freshness: Vec<SlotFreshness>,
    ) -> SyncPage {
        let partitions = request.partitions.as_ref();
        SyncPage {
            source: source.to_owned(),
            slots: (request.slots).map(|cursor| self.copies.page_of(cursor, limit, partitions)),
            descriptions: (request.descriptions)
                .map(|cursor| self.descriptions.page_of(cursor, limit, partitions)),
            freshness,
            load: 0,
            incarnation: 0,
            nonce: 0,
            conflict: None,
            // Aggregators keep no idempotency keys: a shard node's peers do.
            keys: None,
        }
    }

    /// Notes the shard node announced in `request` (if any) at `now_ms`, and returns what its
    /// answer must tell it: that it serves its slot beside another process and must take no
    /// writes ([`Conflict::refusing`]).
    pub fn announced(&mut self, request: &SyncRequest, now_ms: u64) -> Option<String> {
        let puller = request.puller.as_ref()?;
        let index = self.copies.slot_index(&puller.slot)? as usize;
        let process = SlotProcess {
            incarnation: puller.incarnation,
            nonce: puller.nonce,
        };
        let slot = &mut self.incarnations[index];
        slot.announced(process, now_ms);
        let conflict = slot.conflicts(now_ms).find(|c| c.refusing() == process)?;
        Some(conflict.describe(&puller.slot))
    }

    /// Every slot served by two processes at once, at `now_ms`: `(slot, conflict)`.
    pub fn conflicts(&self, now_ms: u64) -> Vec<(String, Conflict)> {
        self.incarnations
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let conflict = slot.conflict(now_ms)?;
                Some((self.copies.slot_names()[index].clone(), conflict))
            })
            .collect()
    }

    /// A page of slot `name`'s copy for a shard node restoring it (counters from table index
    /// `from`, at most `limit` looked at), saying whether this replica holds the slot whole;
    /// `None` when this replica does not hold that slot.
    pub fn slot_copy(&self, name: &str, from: u64, limit: usize) -> Option<SlotCopy> {
        let index = self.copies.slot_index(name)?;
        let heard = self.slots[index as usize];
        let (entries, next) = self.copies.copy_page(index, from, limit);
        Some(SlotCopy {
            slot: name.to_owned(),
            entries,
            complete: heard.complete_as_of_ms.is_some() && !heard.is_incomplete(),
            complete_as_of_ms: heard.complete_as_of_ms.filter(|_| !heard.is_incomplete()),
            source_epoch: self.copies.epoch(),
            next,
            owner_incarnation: heard.owner_incarnation,
            partitions: self.partitions.clone(),
        })
    }

    /// How fresh source `source` is at `now_ms`, and its last error.
    pub fn source_health(&self, source: usize, now_ms: u64) -> SourceHealth {
        let status = &self.sources[source];
        SourceHealth {
            staleness_ms: status.staleness_ms(now_ms),
            last_error: status.last_error.clone(),
            incomplete: status.is_incomplete(),
            refused_ahead: status.refused_ahead(),
        }
    }
}

#[cfg(test)]
mod tests;
