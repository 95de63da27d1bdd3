//! What an aggregator holds of the tier below it, and how its pullers feed it.
//!
//! Both aggregators keep the same three things in memory: copies of slots ([`SlotCopies`]),
//! counter descriptions ([`DescriptionTable`]) and one [`SourceStatus`] per source they pull.
//! [`spawn_pullers`] starts one puller per source, each feeding a [`ReplicaSink`] that merges
//! the pulled page into the tables and moves that source's cursors and freshness on. Reads,
//! `POST /sync` answers ([`Replica::sync_page`]) and slot copies ([`Replica::slot_copy`]) are
//! served from the same tables, so nothing a reader does waits on a source.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use geocount_model::wire::{SlotCopy, SlotFreshness, SyncPage, SyncRequest};
use geocount_model::{Clock, CounterType, SlotRecord, VersionedDescription, max_slot_version};
use geocount_net::{Handler, HttpClient, Listener};
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::byte_bound::Refusals;
use crate::incarnations::{Conflict, SlotIncarnations};
use crate::metrics::{PullCounters, ReplicaMetrics};
use crate::slot_copies::{PageFence, PageMerge};
use crate::{DescriptionTable, PullSink, SlotCopies, SourceStatus, spawn_puller};

/// An aggregator's copy of the tier below it.
#[derive(Debug)]
pub struct Replica {
    /// The slot copies, merged by version.
    pub copies: SlotCopies,
    /// The counter descriptions, merged by version.
    pub descriptions: DescriptionTable,
    /// One status per source, in the order the sources were given to [`spawn_pullers`].
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
                .map(|s| SourceStatus::new(s.slots, s.descriptions))
                .collect(),
            fences,
            source_names: sources.iter().map(|s| s.name.clone()).collect(),
            max_clock_skew_ms: DEFAULT_MAX_CLOCK_SKEW_MS,
            refusals: Refusals::default(),
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
        let Some(slots) = &page.slots else {
            return Ok(PageMerge::default());
        };
        let merge = self.copies.apply_page(slots, &fence);
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
        if slots.caught_up {
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
        Ok(merge)
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
        SyncPage {
            source: source.to_owned(),
            slots: request.slots.map(|cursor| self.copies.page(cursor, limit)),
            descriptions: request
                .descriptions
                .map(|cursor| self.descriptions.page(cursor, limit)),
            freshness,
            load: 0,
            incarnation: 0,
            conflict: None,
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
/// The index is brought up to date and `answer` runs under the same read lock, so no merge
/// slips in between.
pub fn with_ranked<T>(replica: &SharedReplica, now: u64, answer: impl FnOnce(&Replica) -> T) -> T {
    let replica = replica.read().expect("replica lock");
    replica.copies.rank_all(now);
    answer(&replica)
}

/// How many marked counters the background ranker ranks per hold of the read lock. A merge
/// waits for the hold to end, and reads that come after the merge wait for both, so holds are
/// kept short: with 32 rather than 1,024, the global aggregator's read p99 under flat-out
/// writes was 38 ms against 46 ms (medians of nine alternated rounds). (When the ranker held
/// the write lock, holds of 4,096 made the visibility lag p99 35 % worse than holds of 512.)
const RANK_CHUNK: usize = 32;

/// The worst of several stalenesses: `None` (never complete) if any is `None`, else the largest
/// (0 for none at all).
pub fn worst_staleness(staleness: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
    staleness
        .into_iter()
        .try_fold(0u64, |worst, s| s.map(|s| worst.max(s)))
}

/// Merges the pages pulled from one source into a [`Replica`].
pub struct ReplicaSink {
    replica: SharedReplica,
    source: usize,
    clock: Arc<dyn Clock>,
    metrics: PullCounters,
}

impl PullSink for ReplicaSink {
    fn request(&self) -> SyncRequest {
        self.replica.read().expect("replica lock").sources[self.source].request()
    }

    fn apply(&self, page: SyncPage, sent_at_ms: u64) {
        let now_ms = self.clock.now_unix_ms();
        let (states, descriptions) = {
            let mut replica = self.replica.write().expect("replica lock");
            let merge = match replica.apply_page(self.source, &page, sent_at_ms, now_ms) {
                Ok(merge) => merge,
                Err(error) => {
                    drop(replica);
                    let entries = page.slots.as_ref().map_or(0, |p| p.entries.len());
                    self.metrics.refused(PageMerge {
                        refused_slot: entries,
                        ..PageMerge::default()
                    });
                    tracing::warn!(source = self.source, %error, "refused a pulled page");
                    self.failed(error);
                    return;
                }
            };
            self.metrics.refused(merge);
            let states = merge.changed;
            // Descriptions are bounded by the same clock skew as the copies' versions.
            let skew_ms = replica.max_clock_skew_ms;
            let intake = page
                .descriptions
                .as_ref()
                .map(|p| replica.descriptions.apply_page(p, now_ms, skew_ms))
                .unwrap_or_default();
            intake.warn_refused(&page.source);
            self.metrics
                .descriptions_refused
                .inc_by(intake.refused as u64);
            let descriptions = intake.taken.len();
            replica.sources[self.source].advance(&page, sent_at_ms, now_ms);
            (states, descriptions)
        };
        let merged_ms = self.clock.now_unix_ms();
        let seconds_since = |ms: u64| merged_ms.saturating_sub(ms) as f64 / 1000.0;
        let (pull_seconds, merge_seconds) = (seconds_since(sent_at_ms), seconds_since(now_ms));
        self.metrics.succeeded(
            self.source,
            states,
            descriptions,
            pull_seconds,
            merge_seconds,
        );
    }

    fn failed(&self, error: String) {
        tracing::debug!(source = self.source, %error, "pull failed");
        self.replica.write().expect("replica lock").sources[self.source].last_error = Some(error);
        self.metrics.failed(self.source);
    }
}

/// One source to pull: its name, where it listens, how often and what to pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSource {
    /// Its name (a slot, a datacenter, `global`), for logs and metrics.
    pub name: String,
    /// Its `host:port`.
    pub address: String,
    /// How often a pull starts once caught up.
    pub interval: Duration,
    /// Whether slot states are pulled.
    pub slots: bool,
    /// Whether descriptions are pulled.
    pub descriptions: bool,
    /// The slots whose states this source may deliver (a shard node its own, a datacenter
    /// aggregator its datacenter's): entries of any other slot are refused.
    pub delivers: Vec<String>,
}

/// The running pullers of a replica; dropping this aborts them.
#[derive(Debug)]
pub struct Pullers(Vec<JoinHandle<()>>);

impl Pullers {
    /// Stops every puller at once (a pull in flight is abandoned; its page is never merged).
    pub fn abort(self) {
        drop(self);
    }

    /// Also, every [`crate::topk::RANK_INTERVAL`] until the pullers stop, moves the live window
    /// of `replica`'s top-K index on to `clock`'s second and ranks the counters merges marked,
    /// a chunk at a time: rankings then never wait for more than an interval's changes, and
    /// only hits timestamped ahead of the clock wait to enter the live window.
    pub fn keep_ranked(&mut self, replica: &SharedReplica, clock: Arc<dyn Clock>) {
        let replica = replica.clone();
        self.0.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(crate::topk::RANK_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let now = clock.now_unix_secs();
                replica
                    .read()
                    .expect("replica lock")
                    .copies
                    .advance_live(now);
                while !replica
                    .read()
                    .expect("replica lock")
                    .copies
                    .rank_pending(RANK_CHUNK)
                {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }

    /// Serves `handler` on `listener` under `limits` until `shutdown` completes: the pullers
    /// stop as soon as it does, then in-flight requests drain.
    pub async fn serve(
        self,
        listener: impl Listener,
        limits: geocount_net::ServeLimits,
        handler: impl Handler,
        shutdown: impl Future<Output = ()>,
    ) {
        let shutdown = async move {
            shutdown.await;
            self.abort();
        };
        geocount_net::serve_with_limits(listener, limits, handler, shutdown).await;
    }
}

impl Drop for Pullers {
    fn drop(&mut self) {
        for puller in &self.0 {
            puller.abort();
        }
    }
}

/// An aggregator's replica of the slots `slot_names` pulled from `sources`, with its metrics
/// (named `<metrics_prefix>_<name>`) and its running pullers ([`spawn_pullers`]).
pub fn start_pulling(
    slot_names: Vec<String>,
    sources: &[PullSource],
    client: HttpClient,
    clock: Arc<dyn Clock>,
    metrics_prefix: &str,
) -> (SharedReplica, ReplicaMetrics, Pullers) {
    let replica = Replica::new(slot_names, sources).shared();
    let metrics = ReplicaMetrics::new(metrics_prefix, sources);
    let pullers = spawn_pullers(&replica, sources, client, clock, &metrics);
    for source in sources {
        tracing::info!(source = %source.name, address = %source.address, "pulling");
    }
    (replica, metrics, pullers)
}

/// Starts one puller per source: `sources[i]` feeds `replica.sources[i]` (the replica was made
/// from the same list) and is counted as source `i` in `metrics`. A pull that has not answered
/// within `client`'s timeout fails, so a dead or stopped source only grows its own staleness.
pub fn spawn_pullers(
    replica: &SharedReplica,
    sources: &[PullSource],
    client: HttpClient,
    clock: Arc<dyn Clock>,
    metrics: &ReplicaMetrics,
) -> Pullers {
    let handles = sources
        .iter()
        .enumerate()
        .map(|(index, source)| {
            let sink = ReplicaSink {
                replica: replica.clone(),
                source: index,
                clock: clock.clone(),
                metrics: metrics.pulls.clone(),
            };
            spawn_puller(
                source.address.clone(),
                source.interval,
                client.clone(),
                clock.clone(),
                Arc::new(sink),
            )
        })
        .collect();
    Pullers(handles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::SlotState;
    use geocount_model::wire::{Cursor, SlotEntry, SlotPage};

    use crate::Scope;

    struct FixedClock(u64);
    impl Clock for FixedClock {
        fn now_unix_ms(&self) -> u64 {
            self.0
        }
    }

    fn page(value: i64, version: u64) -> SyncPage {
        SyncPage {
            source: "DC_A_VAL_0".into(),
            slots: Some(SlotPage {
                slot_names: vec!["DC_A_VAL_0".into()],
                entries: vec![SlotEntry {
                    slot: 0,
                    id: "c".into(),
                    record: SlotState { value, version }.into(),
                }],
                next: Cursor::Seq { epoch: 1, seq: 1 },
                caught_up: true,
            }),
            ..SyncPage::default()
        }
    }

    #[test]
    fn a_sink_merges_pages_and_tracks_its_source() {
        let names = vec!["DC_A_VAL_0".to_owned(), "DC_A_VAL_1".to_owned()];
        let sources: Vec<PullSource> = names
            .iter()
            .map(|name| PullSource {
                name: name.clone(),
                address: "127.0.0.1:1".into(),
                interval: Duration::from_millis(50),
                slots: true,
                descriptions: false,
                delivers: vec![name.clone()],
            })
            .collect();
        let replica = Replica::new(names, &sources).shared();
        let metrics = ReplicaMetrics::new("test", &sources);
        let sink = ReplicaSink {
            replica: replica.clone(),
            source: 0,
            clock: Arc::new(FixedClock(1_000)),
            metrics: metrics.pulls.clone(),
        };
        assert_eq!(sink.request().slots, Some(Cursor::Start));
        sink.apply(page(5, 2), 900);
        sink.apply(page(3, 1), 950);
        sink.failed("refused".into());
        let r = replica.read().unwrap();
        assert_eq!(
            r.copies.get("c").unwrap(),
            &[(
                0,
                SlotState {
                    value: 5,
                    version: 2
                }
                .into()
            )]
        );
        assert_eq!(r.source_health(0, 1_100).staleness_ms, Some(150));
        assert_eq!(
            r.source_health(0, 1_100).last_error.as_deref(),
            Some("refused")
        );
        assert_eq!(r.source_health(1, 1_100).staleness_ms, None, "never heard");
        assert_eq!(r.sources[0].slots, Some(Cursor::Seq { epoch: 1, seq: 1 }));
        let copy = r.slot_copy("DC_A_VAL_0", 0, 100).unwrap();
        assert!(copy.complete, "heard whole from its owner");
        assert!(!r.slot_copy("DC_A_VAL_1", 0, 100).unwrap().complete);
        assert_eq!(
            copy.entries,
            vec![(
                "c".to_owned(),
                SlotState {
                    value: 5,
                    version: 2
                }
                .into()
            )]
        );
        assert!(r.slot_copy("DC_B_VAL_0", 0, 100).is_none());
        let answer = r.sync_page(
            &SyncRequest {
                slots: None,
                descriptions: Some(Cursor::Start),
                puller: None,
            },
            "A",
            10,
            Vec::new(),
        );
        assert!(answer.slots.is_none() && answer.descriptions.is_some());
        assert_eq!(metrics.pulls.states_merged.get(), 1);
    }

    /// Merges only mark counters; a ranking answered through `with_ranked` still counts every
    /// merge, whether the background ranker ran or not.
    #[tokio::test]
    async fn rankings_count_every_merge_with_or_without_the_ranker() {
        let names = vec!["DC_A_VAL_0".to_owned()];
        let replica = Replica::new(names, &[]).shared();
        replica
            .write()
            .unwrap()
            .copies
            .index_top(vec![0], crate::LiveRanking::new(300, 1_000));
        let top = |replica: &SharedReplica| {
            with_ranked(replica, 1_000, |r| {
                let copies = &r.copies;
                let mut index = copies.top_index().unwrap();
                let ranked = index.all_time(Scope::All, "", 10, copies);
                ranked
                    .into_iter()
                    .map(|r| (r.id, r.value))
                    .collect::<Vec<_>>()
            })
        };
        let merge = |id: &str, value, version| {
            let record = SlotState { value, version }.into();
            replica.write().unwrap().copies.merge(
                0,
                &geocount_model::CounterId::new(id).unwrap(),
                &record,
            );
        };
        merge("a", 5, 1);
        merge("b", 7, 1);
        assert_eq!(top(&replica), [("b".into(), 7), ("a".into(), 5)]);
        merge("a", 9, 2);
        let mut pullers = Pullers(Vec::new());
        pullers.keep_ranked(&replica, Arc::new(FixedClock(2_000_000)));
        // The ranker's first round runs at once; wait for it, not for the next interval.
        let ranked = async {
            while !replica.read().unwrap().copies.ranking_is_current(2_000) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), ranked)
            .await
            .expect("the ranker ranks the merge");
        assert_eq!(top(&replica), [("a".into(), 9), ("b".into(), 7)]);
        // ... and moved the live window on to the clock's second.
        let live = replica
            .read()
            .unwrap()
            .copies
            .top_index()
            .unwrap()
            .live_window();
        assert_eq!(live.at, 2_000);
    }

    #[test]
    fn the_worst_staleness_is_never_when_any_is_never() {
        assert_eq!(worst_staleness([Some(5), Some(80), Some(3)]), Some(80));
        assert_eq!(worst_staleness([Some(5), None]), None);
        assert_eq!(worst_staleness([]), Some(0));
    }

    /// A description versioned far ahead of the aggregator's clock would pin its counter's
    /// description everywhere: the sink refuses it, counts it, and takes the rest of the page.
    #[test]
    fn a_sink_refuses_descriptions_from_far_ahead_of_its_clock() {
        use geocount_model::wire::DescriptionPage;
        use geocount_model::{CounterDescription, CounterId, HlcTimestamp};

        let sources = [PullSource {
            name: "DC_A_VAL_0".into(),
            address: "127.0.0.1:1".into(),
            interval: Duration::from_millis(50),
            slots: false,
            descriptions: true,
            delivers: Vec::new(),
        }];
        let replica = Replica::new(vec!["DC_A_VAL_0".to_owned()], &sources).shared();
        let metrics = ReplicaMetrics::new("test", &sources);
        let now = 1_800_000_000_000;
        let sink = ReplicaSink {
            replica: replica.clone(),
            source: 0,
            clock: Arc::new(FixedClock(now)),
            metrics: metrics.pulls.clone(),
        };
        let skew = replica.read().unwrap().max_clock_skew_ms;
        let described = |id: &str, physical_ms| VersionedDescription {
            description: CounterDescription {
                id: CounterId::new(id).unwrap(),
                counter_type: CounterType::Sum,
                number_of_shards: 1,
                base_number_of_shards: 1,
                window_seconds: 300,
                created_at_ms: now,
            },
            version: HlcTimestamp {
                physical_ms,
                logical: 0,
                node: 1,
            },
        };
        let page = SyncPage {
            source: "DC_A_VAL_0".into(),
            descriptions: Some(DescriptionPage {
                items: vec![
                    described("ahead", now + skew + 1),
                    described("near", now + skew),
                ],
                next: Cursor::Seq { epoch: 1, seq: 2 },
                caught_up: true,
            }),
            ..SyncPage::default()
        };
        sink.apply(page, now - 10);
        let r = replica.read().unwrap();
        assert!(r.descriptions.get("ahead").is_none(), "refused");
        assert!(r.descriptions.get("near").is_some(), "within the bound");
        assert_eq!(metrics.pulls.descriptions_refused.get(), 1);
        assert_eq!(metrics.pulls.descriptions_merged.get(), 1);
    }
}
