//! Messages between processes, encoded with postcard.
//!
//! Replication: every tier pulls from the tier below with `POST /sync` (a [`SyncRequest`]
//! answered by a [`SyncPage`]): the slot states and descriptions changed since the puller's
//! [`Cursor`]. Descriptions also flow down the same way. A shard node restoring its slot asks for
//! `GET /slots/{slot}/copy` ([`SlotCopy`]). In `replicated` durability a shard node sends each
//! group it logged to its peers ([`HeldBatch`]) and restores from their logs
//! ([`HeldCopy`]).
//!
//! The batched write path: a client sends a [`BatchRequest`] as the body of `POST /batch` with
//! content type [`POSTCARD_CONTENT_TYPE`], and gets a [`BatchResponse`] with one [`EntryOutcome`]
//! per entry, in order. Entries borrow from the request body, so decoding allocates only the
//! entry list.
//!
//! Unique counters take items rather than deltas: `POST /batch/items` takes an
//! [`ItemBatchRequest`] and answers the same [`BatchResponse`].
//!
//! A batch sent with `Prefer: return=minimal` is answered by a [`BatchSummary`] instead: the
//! count applied and the refused entries only.
//!
//! A shard node answering a world read asks the global aggregator for the other datacenters'
//! parts of many counters at once: `POST /parts` takes a [`PartsRequest`] and answers
//! [`PartsAnswer`], one [`CounterParts`] per counter, in order.

use serde::{Deserialize, Serialize};

use crate::{
    CounterId, HlcTimestamp, IdempotencyRecord, Partitions, Room, SlotId, SlotRecord,
    VersionedDescription,
};

/// The content type of postcard bodies.
pub const POSTCARD_CONTENT_TYPE: &str = "application/x-postcard";

/// Many writes in one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRequest<'a> {
    /// The writes, applied in order.
    #[serde(borrow)]
    pub entries: Vec<BatchEntry<'a>>,
}

impl<'a> BatchRequest<'a> {
    /// A batch of +1 to each of `ids`, without idempotency keys or timestamps.
    pub fn increments(ids: &'a [String]) -> Self {
        let entries = ids
            .iter()
            .map(|id| BatchEntry {
                id,
                delta: 1,
                idempotency_key: None,
                timestamp: None,
            })
            .collect();
        Self { entries }
    }
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchEntry<'a> {
    /// The counter's id (validated by the node; an invalid one refuses this entry only).
    pub id: &'a str,
    /// The signed change to apply.
    pub delta: i64,
    /// A retry of an entry with the same key is applied once and answered as the first was.
    pub idempotency_key: Option<&'a str>,
    /// When the hit happened, in unix seconds; the node's clock when absent.
    pub timestamp: Option<u64>,
}

/// Many items for unique counters in one request (`POST /batch/items`), answered by a
/// [`BatchResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemBatchRequest<'a> {
    /// The items, applied in order.
    #[serde(borrow)]
    pub entries: Vec<ItemEntry<'a>>,
}

/// One item of an [`ItemBatchRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemEntry<'a> {
    /// The unique counter's id (validated by the node; an invalid one refuses this entry only).
    /// A counter the node has not heard of is created as a unique counter.
    pub id: &'a str,
    /// The item to count once however often it is written (1 to 1,024 bytes).
    pub item: &'a str,
    /// A retry of an entry with the same key is answered as the first was.
    pub idempotency_key: Option<&'a str>,
    /// When the item was seen, in unix seconds (checked like a delta's, not kept).
    pub timestamp: Option<u64>,
}

/// The answer to a [`BatchRequest`] or an [`ItemBatchRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// The slot this node owns, e.g. `DC_USA_0_VAL_1`.
    pub slot: String,
    /// One outcome per entry, in the request's order.
    pub outcomes: Vec<EntryOutcome>,
}

/// The short answer to a [`BatchRequest`] or an [`ItemBatchRequest`], sent instead of a
/// [`BatchResponse`] when the request asks for it with `Prefer: return=minimal` (RFC 7240; the
/// answer then says `Preference-Applied: return=minimal`): how many entries were applied, and
/// only the refused ones. For clients that fire increments and need no slot state back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSummary {
    /// The slot this node owns, e.g. `DC_USA_0_VAL_1`.
    pub slot: String,
    /// Entries applied (or, for a retried idempotency key, applied earlier).
    pub applied: u32,
    /// The refused entries, in the request's order; every other entry was applied.
    pub refused: Vec<RefusedEntry>,
}

/// One refused entry of a [`BatchSummary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedEntry {
    /// Its position in the request, from 0.
    pub index: u32,
    /// The HTTP status the same write would get on its own (400, 422, ...).
    pub status: u16,
    /// What is wrong.
    pub error: String,
}

impl BatchSummary {
    /// The summary of `outcomes`.
    pub fn of(slot: String, outcomes: Vec<EntryOutcome>) -> Self {
        let mut applied = 0;
        let mut refused = Vec::new();
        for (index, outcome) in (0u32..).zip(outcomes) {
            match outcome {
                EntryOutcome::Applied { .. } => applied += 1,
                EntryOutcome::Refused { status, error } => refused.push(RefusedEntry {
                    index,
                    status,
                    error,
                }),
            }
        }
        Self {
            slot,
            applied,
            refused,
        }
    }
}

/// What happened to one entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryOutcome {
    /// Applied (or, for a retried idempotency key, applied earlier): the slot's state after it.
    /// For an item, the slot's estimate and version (unchanged when the item changed nothing).
    Applied {
        /// The slot's value after the write.
        value: i64,
        /// The slot's version after the write.
        version: u64,
    },
    /// Refused; nothing of it was applied.
    Refused {
        /// The HTTP status the same write would get on its own (400, 422, ...).
        status: u16,
        /// What is wrong.
        error: String,
    },
}

/// Where a puller is in a source's change stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Cursor {
    /// Nothing pulled yet: the source sends everything.
    #[default]
    Start,
    /// Part-way through a full copy: resume at entry `next_index`, then continue with the
    /// changes after `resume_seq`.
    Scan {
        /// The source's incarnation: a cursor from an earlier one starts over.
        epoch: u64,
        /// The change sequence number when the full copy began.
        resume_seq: u64,
        /// The next entry of the copy.
        next_index: u64,
    },
    /// Caught up to change `seq` of incarnation `epoch`.
    Seq {
        /// The source's incarnation.
        epoch: u64,
        /// The last change seen.
        seq: u64,
    },
}

/// A pull: which streams the puller wants, from which cursors.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SyncRequest {
    /// Slot states changed since this cursor; `None` to skip them.
    pub slots: Option<Cursor>,
    /// Descriptions changed since this cursor; `None` to skip them.
    pub descriptions: Option<Cursor>,
    /// The shard node pulling, if one is: which slot it serves and as which incarnation, so the
    /// datacenter aggregator can tell when two processes serve one slot at once.
    pub puller: Option<Puller>,
    /// A shard node's idempotency keys recorded since this cursor (peers ask for them, to hand
    /// them back to the owner should it lose its disk); `None` to skip them.
    pub keys: Option<Cursor>,
    /// Only the counters of these partitions (slot states and descriptions); `None`: every
    /// counter. The cursors move on over the others.
    pub partitions: Option<Partitions>,
}

impl SyncRequest {
    /// A first pull: slot states and/or descriptions from the start.
    pub fn from_start(slots: bool, descriptions: bool) -> Self {
        Self {
            slots: slots.then_some(Cursor::Start),
            descriptions: descriptions.then_some(Cursor::Start),
            ..Self::default()
        }
    }
}

/// A shard node announcing itself in its pulls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Puller {
    /// The slot it serves, e.g. `DC_USA_0_VAL_1`.
    pub slot: String,
    /// Its data directory's incarnation.
    pub incarnation: u64,
    /// Drawn at random when the process started: two processes started from one data
    /// directory (a copy) carry one incarnation but differ here.
    pub nonce: u64,
}

/// One slot state of one counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotEntry {
    /// Index into [`SlotPage::slot_names`].
    pub slot: u16,
    /// The counter.
    pub id: String,
    /// Its total, version and window in that slot.
    pub record: SlotRecord,
}

/// Slot states changed since the puller's cursor.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SlotPage {
    /// The slot names the entries refer to by index.
    pub slot_names: Vec<String>,
    /// The changed states.
    pub entries: Vec<SlotEntry>,
    /// The cursor to ask from next time.
    pub next: Cursor,
    /// Whether the page reaches the source's newest change (else pull again at once).
    pub caught_up: bool,
}

/// Descriptions changed since the puller's cursor.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DescriptionPage {
    /// The changed descriptions.
    pub items: Vec<VersionedDescription>,
    /// The cursor to ask from next time.
    pub next: Cursor,
    /// Whether the page reaches the source's newest change.
    pub caught_up: bool,
}

/// How fresh a source's copy of one slot is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotFreshness {
    /// The slot's name.
    pub slot: String,
    /// How long ago the source last had the slot's complete state; `None`: never.
    pub staleness_ms: Option<u64>,
    /// The incarnation of the slot's owner the source last heard (0: none heard).
    pub owner_incarnation: u64,
    /// The source refused entries of the slot past its byte bound: its copy lacks them, so
    /// neither it nor anything pulled from it is complete.
    pub incomplete: bool,
}

/// The answer to a [`SyncRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SyncPage {
    /// Who answers (a slot or datacenter name).
    pub source: String,
    /// The slot states asked for.
    pub slots: Option<SlotPage>,
    /// The descriptions asked for.
    pub descriptions: Option<DescriptionPage>,
    /// An aggregator's view of each of its slots' freshness (empty from a shard node, whose own
    /// slot is fresh by definition).
    pub freshness: Vec<SlotFreshness>,
    /// Writes per second the source applied lately (for least-loaded routing).
    pub load: u64,
    /// A shard node's incarnation: drawn when its data directory was made, so a node restored
    /// on a new disk, or a second node started for the same slot, tells itself apart (0 from an
    /// aggregator).
    pub incarnation: u64,
    /// A shard node's start nonce, drawn at random when the process started, beside its
    /// incarnation (0 from an aggregator).
    pub nonce: u64,
    /// To a shard node that announced itself: another process served its slot at the same
    /// time and this one must take no writes until an operator stops one.
    pub conflict: Option<String>,
    /// The idempotency keys asked for.
    pub keys: Option<KeyPage>,
}

/// Idempotency keys a shard node recorded since the puller's cursor, oldest first.
///
/// The cursor is [`Cursor::Seq`] with the owner's key epoch and the number of the next record;
/// a cursor of another epoch, or [`Cursor::Start`], gets every key the owner still retains.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyPage {
    /// Each key (scoped by its token) with what its first write did.
    pub keys: Vec<(String, IdempotencyRecord)>,
    /// The cursor to ask from next time.
    pub next: Cursor,
    /// Whether the page reaches the owner's newest key.
    pub caught_up: bool,
    /// Whether the owner holds every key it recorded within the retention: not while it
    /// restores its slot, nor after a restore that found no whole copy of its keys, until the
    /// keys it may have lost have expired.
    pub whole: bool,
    /// On a caught-up page of an owner holding every key (`whole`): its newest slot version.
    /// Every key of a write at that version or below is in this page or an earlier one of the
    /// cursor's pass (0 on any other page: nothing promised).
    pub reach: u64,
}

/// One page of a peer's copy of a slot's idempotency keys, for a node restoring its own slot
/// (`GET /slots/{slot}/keys?from=N&limit=M`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyCopy {
    /// The slot.
    pub slot: String,
    /// The page's keys with their records.
    pub keys: Vec<(String, IdempotencyRecord)>,
    /// The owner's slot version up to which the peer holds every key the owner recorded
    /// within the retention (0: none): a restored value of a later version may have been
    /// written with a key the copy lacks.
    pub reach: u64,
    /// Drawn at random when the peer process starts: pages of one answer all carry the same.
    pub source_epoch: u64,
    /// Where the next page starts (`from`); `None` on the last page.
    pub next: Option<u64>,
}

/// One page of a source's copy of one slot, for a node restoring its own slot
/// (`GET /slots/{slot}/copy?from=N&limit=M`).
///
/// The node merges the highest version of every counter over every source whose whole copy
/// came from one process ([`SlotCopy::source_epoch`]) and was [`SlotCopy::complete`]: a source
/// that has not had the slot's whole state since it started (an aggregator that restarted and
/// has not heard the slot yet) holds only part of it, and is no answer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SlotCopy {
    /// The slot.
    pub slot: String,
    /// The page's counters with their records in the slot.
    pub entries: Vec<(String, SlotRecord)>,
    /// Whether the source has had the slot's whole state since it started: pulled from its
    /// owner (or from a complete tier below) up to its newest change at least once.
    pub complete: bool,
    /// When the source's copy was last complete, by the source's clock (unix ms).
    pub complete_as_of_ms: Option<u64>,
    /// Drawn at random when the source process starts: pages of one answer all carry the same.
    pub source_epoch: u64,
    /// Where the next page starts (`from`); `None` on the last page.
    pub next: Option<u64>,
    /// The owner's incarnation the source last heard the slot from (0: none heard).
    pub owner_incarnation: u64,
    /// The partitions the source holds, when not all: its copy, complete or not, has only
    /// their counters.
    pub partitions: Option<Partitions>,
}

/// Groups of writes a shard node logged, sent to a peer of its datacenter in `replicated`
/// durability (`POST /slots/{slot}/replicate`): the peer appends them to its log of the slot
/// and fsyncs them before it answers 200 (`{"groups": n}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HeldBatch<'a> {
    /// The sender's incarnation.
    pub incarnation: u64,
    /// The slot version from which on every group a copy of the slot was shown was held by
    /// some peer first: the first version the sender's process could make (0: its slot
    /// started empty and new). Before it are the versions earlier processes made.
    pub since_version: u64,
    /// The newest slot version the sender had made when it sent this batch: a peer whose data
    /// directory replaced a lost one holds every group after the first such version it took.
    pub made_through: u64,
    /// The groups, oldest first, each one record of the sender's write-ahead log (postcard)
    /// as its log holds it; borrowed from the body, never copied byte by byte.
    #[serde(borrow)]
    pub groups: Vec<&'a [u8]>,
}

/// Everything a peer's log of a slot's replicated groups holds, folded
/// (`GET /slots/{slot}/replica`), for the slot's node restoring it: every group that node
/// acknowledged, or made visible, in `replicated` durability is in at least one peer's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HeldCopy {
    /// The slot.
    pub slot: String,
    /// The latest [`HeldBatch::since_version`] the peer's log took (`None`: it holds no
    /// log of the slot).
    pub owner_since: Option<u64>,
    /// The slot version after which the peer holds every group it took: 0 unless its data
    /// directory replaced a lost one, then the [`HeldBatch::made_through`] of the first
    /// batch its log of the slot took (`u64::MAX` without one).
    pub holds_after: u64,
    /// Each counter's latest record.
    pub entries: Vec<(String, SlotRecord)>,
    /// The latest description of each counter the groups created.
    pub descriptions: Vec<VersionedDescription>,
    /// The groups' idempotency keys still within retention, with their records.
    pub keys: Vec<(String, IdempotencyRecord)>,
}

/// `POST /parts` at the global aggregator: the parts of every datacenter but `datacenter` of
/// each counter, for a shard node of `datacenter` that computes its own datacenter's part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartsRequest {
    /// The asking node's datacenter: left out of the parts, and its staleness refuses nothing.
    pub datacenter: String,
    /// The staleness bound (milliseconds) the other datacenters must be within; `None`: the
    /// global aggregator's own `max_staleness_ms`.
    pub max_staleness_ms: Option<u64>,
    /// Each counter with the generation the asker counts its records from: the parts count
    /// only records at least of it (or of the global aggregator's own, if newer).
    pub counters: Vec<(crate::CounterId, crate::HlcTimestamp)>,
}

/// The answer to a [`PartsRequest`]: one entry per counter asked, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartsAnswer {
    /// Each counter's parts, or why they cannot be given.
    pub counters: Vec<CounterParts>,
}

/// One counter's parts of the datacenters other than the asker's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CounterParts {
    /// What the global aggregator holds of the counter.
    Held(HeldParts),
    /// A datacenter other than the asker's is staler than the bound (the reason).
    Stale(String),
    /// This replica does not hold the counter's partition.
    NotHeld,
}

/// The other datacenters' parts of a counter, as one global aggregator replica holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldParts {
    /// The generation the records counted from: the larger of the asker's and the global
    /// aggregator's (its description's and its newest record's).
    pub from: crate::HlcTimestamp,
    /// Whether the counter exists, is unknown, or is deleted or expired, by the lifecycle rule.
    pub presence: PartsPresence,
    /// The sum of the other datacenters' records that count.
    pub value: i128,
    /// For a unique counter, the union of the other datacenters' sketches that count.
    pub sketch: Option<crate::UniqueSketch>,
    /// The largest staleness of the other datacenters (`None`: none other).
    pub staleness_ms: Option<u64>,
}

/// Whether a counter exists, as the global aggregator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartsPresence {
    /// It exists.
    Exists,
    /// Neither described nor held.
    Unknown,
    /// Deleted or expired at generation `from`.
    Gone,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_counts_the_applied_and_keeps_the_refused_with_their_positions() {
        let outcomes = vec![
            EntryOutcome::Applied {
                value: 1,
                version: 7,
            },
            EntryOutcome::Refused {
                status: 400,
                error: "bad id".into(),
            },
            EntryOutcome::Applied {
                value: 2,
                version: 8,
            },
            EntryOutcome::Refused {
                status: 422,
                error: "a unique counter takes items".into(),
            },
        ];
        let summary = BatchSummary::of("DC_USA_0_VAL_1".into(), outcomes);
        assert_eq!(summary.slot, "DC_USA_0_VAL_1");
        assert_eq!(summary.applied, 2);
        assert_eq!(
            summary.refused,
            vec![
                RefusedEntry {
                    index: 1,
                    status: 400,
                    error: "bad id".into()
                },
                RefusedEntry {
                    index: 3,
                    status: 422,
                    error: "a unique counter takes items".into()
                },
            ]
        );
        let all_applied = BatchSummary::of(
            "s".into(),
            vec![
                EntryOutcome::Applied {
                    value: 1,
                    version: 1
                };
                1000
            ],
        );
        assert_eq!((all_applied.applied, all_applied.refused.len()), (1000, 0));
        // The whole answer to 1,000 applied writes is a few bytes.
        assert!(postcard::to_allocvec(&all_applied).unwrap().len() < 8);
    }
}

/// `POST /rights` between shard nodes (postcard): what a slot short of rights asks another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RightsMessage {
    /// Give slot `to` up to `want` of counter `counter`'s rights (at least `need`, or
    /// nothing where less than `need` is held), in generation `generation`.
    Ask {
        /// The counter.
        counter: CounterId,
        /// The generation the asker counts in.
        generation: HlcTimestamp,
        /// The asking slot.
        to: SlotId,
        /// What it lacks.
        need: Room,
        /// What it would take.
        want: Room,
    },
    /// Hold this bounded counter's description before answering (its creation waits for
    /// every shard node to).
    Describe(VersionedDescription),
}

/// A slot's answer to [`RightsMessage::Ask`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RightsAnswer {
    /// The generation the answering slot counts in (a transfer counts only in its own).
    pub generation: HlcTimestamp,
    /// What it gave the asker in all, this time included.
    pub given: Room,
    /// The increments it may still apply (`None`: no ceiling).
    pub up: Option<i64>,
    /// The decrements it may still apply (`None`: no floor).
    pub down: Option<i64>,
}

impl RightsAnswer {
    /// The answer of a slot holding `available` in `generation`, having given `given`.
    pub fn new(
        generation: HlcTimestamp,
        given: Room,
        available: (Option<i128>, Option<i128>),
    ) -> Self {
        let narrow = |n: i128| i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX });
        Self {
            generation,
            given,
            up: available.0.map(narrow),
            down: available.1.map(narrow),
        }
    }
}
