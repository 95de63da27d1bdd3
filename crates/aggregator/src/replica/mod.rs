//! What an aggregator holds of the tier below it, and how its pullers feed it.
//!
//! Both aggregators keep the same three things in memory: copies of slots ([`SlotCopies`]),
//! counter descriptions ([`DescriptionTable`]) and one [`SourceStatus`] per source they pull.
//! [`spawn_pullers`](crate::spawn_pullers) starts one puller per source, each feeding a [`ReplicaSink`](crate::ReplicaSink) that merges
//! the pulled page into the tables and moves that source's cursors and freshness on. Reads,
//! `POST /sync` answers ([`Replica::sync_page`]) and slot copies ([`Replica::slot_copy`]) are
//! served from the same tables, so nothing a reader does waits on a source.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use geocount_model::wire::{SlotCopy, SlotFreshness, SyncPage, SyncRequest};
use geocount_model::{CounterType, Partitions, SlotRecord, VersionedDescription, max_slot_version};

use serde::Serialize;

use crate::byte_bound::Refusals;
use crate::incarnations::{Conflict, SlotIncarnations};
use crate::slot_copies::{PageFence, PageMerge};
use crate::{DescriptionTable, SlotCopies, SourceStatus};

/// An aggregator's copy of the tier below it.
#[derive(Debug)]
pub struct Replica {
    /// The slot copies, merged by version.
    pub copies: SlotCopies,
    /// The counter descriptions, merged by version.
    pub descriptions: DescriptionTable,
    /// One status per source, in the order the sources were given to [`spawn_pullers`](crate::spawn_pullers).
    pub sources: Vec<SourceStatus>,
    /// What this replica has heard of each slot, by slot index.
    pub slots: Vec<SlotHeard>,
    /// Each slot's incarnations lately heard at its address and announced in pulls, by slot
    /// index.
    pub incarnations: Vec<SlotIncarnations>,
    /// Per source, the indices of the slots it may deliver.
    fences: Vec<Vec<u16>>,
    /// Per source, the name its pages must carry (its slot's, or its datacenter's).
    source_names: Vec<String>,
    /// How far ahead of this process's clock a copy's version may be (`sync.max_clock_skew_ms`).
    pub max_clock_skew_ms: u64,
    /// Pulled entries refused past the copies' byte bound, and the setting that bounds them.
    refusals: Refusals,
    /// The partitions this replica holds, when not all (its sources send only theirs).
    pub partitions: Option<Partitions>,
}

/// One source to pull: its name, where it listens, how often and what to pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSource {
    /// Its name (a slot, a datacenter, `global`; `@<n>` after it for replica n > 0), for logs
    /// and metrics.
    pub name: String,
    /// The name its pages carry (a slot's, a datacenter's, `global`): a page under another name
    /// comes from a process configured for something else, and is refused.
    pub answers_as: String,
    /// Its `host:port`.
    pub address: String,
    /// How often a pull starts once caught up.
    pub interval: Duration,
    /// The first pull: the streams asked for from the start (slot states, descriptions), and
    /// the partitions (`None`: every counter).
    pub first: SyncRequest,
    /// The slots whose states this source may deliver (a shard node its own, a datacenter
    /// aggregator its datacenter's): entries of any other slot are refused.
    pub delivers: Vec<String>,
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

    /// Empty copies of the slots named `slot_names`, to be pulled from `sources` (none heard
    /// yet).
    pub fn new(slot_names: Vec<String>, sources: &[PullSource]) -> Self {
        let fences = sources
            .iter()
            .map(|source| {
                source
                    .delivers
                    .iter()
                    .filter_map(|name| slot_names.iter().position(|n| n == name))
                    .map(|index| index as u16)
                    .collect()
            })
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
            source_names: sources.iter().map(|s| s.answers_as.clone()).collect(),
            max_clock_skew_ms: DEFAULT_MAX_CLOCK_SKEW_MS,
            refusals: Refusals::default(),
            partitions: None,
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

    /// Merges a page pulled from source `source` at `sent_at_ms`, fenced to the slots that
    /// source may deliver and to versions the clock allows at `now_ms`, and notes each slot
    /// the page shows complete.
    ///
    /// A page answered under another name than the source's (a node configured for another
    /// slot listens at the address pulled for this one) is refused whole: the error says so.
    pub fn apply_page(
        &mut self,
        source: usize,
        page: &SyncPage,
        sent_at_ms: u64,
        now_ms: u64,
    ) -> Result<PageMerge, String> {
        let fence = self.open_page(source, page, now_ms)?;
        let merge = page
            .slots
            .as_ref()
            .map_or_else(PageMerge::default, |slots| {
                self.copies
                    .apply_entries(&slots.slot_names, &slots.entries, &fence)
            });
        self.close_page(source, page, &fence, merge, sent_at_ms);
        Ok(merge)
    }

    /// The first step of [`Replica::apply_page`]: checks the page's name, notes its source's
    /// incarnation, and gives the fence its entries merge under.
    pub(crate) fn open_page(
        &mut self,
        source: usize,
        page: &SyncPage,
        now_ms: u64,
    ) -> Result<PageFence, String> {
        let expected = &self.source_names[source];
        if page.source != *expected {
            return Err(format!(
                "answered as {:?}, not {expected:?}: a process configured for another slot or datacenter listens there; its pages are refused",
                page.source
            ));
        }
        let fence = PageFence {
            slots: self.fences[source].clone(),
            max_version: max_slot_version(now_ms, self.max_clock_skew_ms),
        };
        if page.freshness.is_empty()
            && let Some(index) = self.copies.slot_index(&page.source)
        {
            self.incarnations[index as usize].heard(page.incarnation, now_ms);
        }
        Ok(fence)
    }

    /// The last step of [`Replica::apply_page`], once every entry merged (`merge`): notes each
    /// slot the page shows complete.
    pub(crate) fn close_page(
        &mut self,
        source: usize,
        page: &SyncPage,
        fence: &PageFence,
        merge: PageMerge,
        sent_at_ms: u64,
    ) {
        let Some(slots) = &page.slots else {
            return;
        };
        if merge.refused_bytes > 0 {
            // The source's cursor moves past them: the copy lacks them for good.
            self.refusals.entries += merge.refused_bytes as u64;
            self.sources[source].refused_past_bound = true;
            for &index in &fence.slots {
                self.slots[usize::from(index)].refused_past_bound = true;
            }
            tracing::warn!(
                source = %page.source,
                refused = merge.refused_bytes,
                bound = self.refusals.key,
                "refused pulled entries past this aggregator's byte bound; its sums are incomplete"
            );
        }
        if merge.refused_slot + merge.refused_version > 0 {
            tracing::warn!(
                source = %page.source,
                refused_slot = merge.refused_slot,
                refused_version = merge.refused_version,
                "refused pulled entries: of a slot this source does not serve, or versioned beyond the clock"
            );
        }
        if !slots.caught_up {
            return;
        }
        if page.freshness.is_empty() {
            // A shard node's page: its own slot, complete as of when the pull was sent.
            if let Some(index) = self.copies.slot_index(&page.source)
                && fence.slots.contains(&index)
            {
                self.slots[index as usize].heard(sent_at_ms, page.incarnation);
            }
        } else {
            // An aggregator's page: each slot as complete as the aggregator's copy of it.
            for freshness in &page.freshness {
                if let Some(index) = self.copies.slot_index(&freshness.slot)
                    && fence.slots.contains(&index)
                {
                    self.slots[index as usize].source_incomplete = freshness.incomplete;
                }
                if let (Some(index), Some(staleness)) = (
                    self.copies.slot_index(&freshness.slot),
                    freshness.staleness_ms,
                ) && fence.slots.contains(&index)
                {
                    self.slots[index as usize].heard(
                        sent_at_ms.saturating_sub(staleness),
                        freshness.owner_incarnation,
                    );
                }
            }
        }
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
            conflict: None,
            // Aggregators keep no idempotency keys: a shard node's peers do.
            keys: None,
        }
    }

    /// Notes the shard node announced in `request` (if any) at `now_ms`, and returns what its
    /// answer must tell it: that it is the newer of two processes serving its slot at once.
    pub fn announced(&mut self, request: &SyncRequest, now_ms: u64) -> Option<String> {
        let puller = request.puller.as_ref()?;
        let index = self.copies.slot_index(&puller.slot)? as usize;
        let slot = &mut self.incarnations[index];
        slot.announced(puller.incarnation, now_ms);
        let conflict = slot.conflict(now_ms)?;
        (conflict.newer() == puller.incarnation).then(|| conflict.describe(&puller.slot))
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
        }
    }
}

/// Answers a ranking at `now` (unix seconds) with `answer`, given `replica` with its top-K
/// index current: every merge ranked, and the live window moved on to end at `now` (so a
/// ranking of the trending window ending now is a walk of the kept order rather than a scan).
/// A backlog of marked counters is ranked [`RANK_CHUNK`] per hold of the read lock first, so
/// merges wait for no long hold; the last few are ranked and `answer` runs under one read
/// lock, so no merge slips in between.
pub fn with_ranked<T>(replica: &SharedReplica, now: u64, answer: impl FnOnce(&Replica) -> T) -> T {
    let backlog = {
        let replica = replica.read().expect("replica lock");
        replica.copies.advance_live(now);
        replica.copies.top_index().map_or(0, |top| top.pending())
    };
    // Bounded by the backlog seen, so merges marking more meanwhile cannot keep it going.
    for _ in 0..backlog.div_ceil(RANK_CHUNK) {
        let replica = replica.read().expect("replica lock");
        if replica.copies.rank_pending(RANK_CHUNK) {
            break;
        }
    }
    let replica = replica.read().expect("replica lock");
    replica.copies.rank_all(now);
    answer(&replica)
}

/// How many marked counters the background ranker, and a ranking catching up, rank per hold
/// of the read lock. A merge waits for the hold to end, and reads that come after the merge
/// wait for both, so holds are kept short (docs/architecture.md, "Top-K and trending").
pub(crate) const RANK_CHUNK: usize = 32;

/// The worst of several stalenesses: `None` (never complete) if any is `None`, else the largest
/// (0 for none at all).
pub fn worst_staleness(staleness: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
    staleness
        .into_iter()
        .try_fold(0u64, |worst, s| s.map(|s| worst.max(s)))
}

#[cfg(test)]
mod tests;
