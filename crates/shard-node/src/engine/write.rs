//! The write vocabulary: what a write asks ([`WriteRequest`], [`Change`]) and what a handler
//! asks of the commit loop ([`Command`]). Parsing, routing, forwarding, idempotency, rights and
//! the commit loop all name writes, and a refusal may carry one back
//! ([`crate::error::Shortage`]); none of them needs the commit loop to do so.

use geocount_model::{
    CounterDescription, CounterId, CounterType, HlcTimestamp, IdempotencyRecord, RightsAnswer,
    Room, SlotId, SlotRecord, SlotState, VersionedDescription,
};
use tokio::sync::oneshot;

use crate::error::{ShardError, StorageError};

/// What a write changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Adds a signed delta to a sum counter's total.
    Delta(i64),
    /// Adds an item to a unique counter's sketch.
    Item {
        /// The item, as written (forwarded writes carry it on).
        item: Box<str>,
        /// Its hash ([`geocount_model::unique::hash_item`]).
        hash: u64,
    },
}

impl Change {
    /// An item change, hashed.
    pub fn item(item: &str) -> Self {
        Change::Item {
            item: item.into(),
            hash: geocount_model::unique::hash_item(item),
        }
    }

    /// The counter type this change is for.
    pub fn counter_type(&self) -> CounterType {
        match self {
            Change::Delta(_) => CounterType::Sum,
            Change::Item { .. } => CounterType::Unique,
        }
    }
}

/// One write asked of the node.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// The counter.
    pub id: CounterId,
    /// A delta or an item.
    pub change: Change,
    /// Deduplicates retries of this write.
    pub idempotency_key: Option<Box<str>>,
    /// When the hit happened, in unix seconds (kept for rolling windows).
    pub timestamp_secs: u64,
    /// Sets the counter's expiry this many seconds ahead, in the same group as the write,
    /// when it has none (increment with expiry).
    pub ttl_secs: Option<u32>,
}

impl LifecycleChange {
    /// What a retry with the same `Idempotency-Key` must ask again: which change, and for an
    /// expiry the time to live it was asked with (`u64::MAX`: none), not the time it gave.
    pub fn asked(request: &LifecycleRequest) -> (i64, u64) {
        match request {
            LifecycleRequest::Reset => (1, 0),
            LifecycleRequest::Delete => (2, 0),
            LifecycleRequest::Expire(ttl) => (3, ttl.map_or(u64::MAX, u64::from)),
        }
    }
}

/// A change of a counter's life as a client asks it, before this node's clock turns a time to
/// live into a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleRequest {
    /// `POST /counter/{id}/reset`.
    Reset,
    /// `DELETE /counter/{id}`.
    Delete,
    /// `PATCH /counter/{id}` with `{"ttlSeconds": n | null}`.
    Expire(Option<u32>),
}

/// A change of a counter's life: what `DELETE /counter/{id}`, `POST /counter/{id}/reset` and
/// `PATCH /counter/{id}` ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleChange {
    /// Every slot counts from zero once it learns of it.
    Reset,
    /// The counter is gone; a later write makes it again from zero.
    Delete,
    /// Deleted at this time (unix ms), or never (`None`).
    Expire(Option<u64>),
    /// Deleted at this time (unix ms) if the write it comes with makes the counter: made with
    /// it (the defaults and this type, or again from its tombstone) when it is unknown here or
    /// gone; a live counter is left as it is. What a node does before it forwards a write
    /// carrying `ttlSeconds` to another slot: the expiry is durable before the write.
    ExpireIfMade {
        /// When it is deleted.
        expires_at_ms: u64,
        /// The forwarded write's counter type.
        counter_type: CounterType,
    },
}

/// A change of the own slot's rights of one counter (docs/architecture.md, "Bounded
/// counters").
#[derive(Debug, Clone)]
pub enum RightsRequest {
    /// Give slot `to` up to `want` (at least `need` where held), in `generation`.
    Give {
        /// The asking slot.
        to: SlotId,
        /// The generation it counts in.
        generation: HlcTimestamp,
        /// What it lacks.
        need: Room,
        /// What it would take.
        want: Room,
    },
    /// Record that slot `from` gave `total` in all, in `generation`.
    Receive {
        /// The giving slot.
        from: SlotId,
        /// The generation it gave in.
        generation: HlcTimestamp,
        /// What it gave in all.
        total: Room,
    },
    /// Hold a bounded counter's description its creation pushed, unless the slot holds
    /// writes of the counter its bounds never weighed.
    Hold(VersionedDescription),
    /// Take the bounds off this description of a creation another slot refused: the
    /// counter stays as its writes made it, with the defaults.
    Withdraw(VersionedDescription),
}

/// The answer to each write of a [`Command::Write`], in order.
pub type WriteResults = Vec<Result<SlotState, ShardError>>;

/// What handlers ask of the commit loop.
#[derive(Debug)]
pub enum Command {
    /// Apply writes; answered once they are durable (or refused).
    Write {
        /// The writes, applied in order.
        writes: Vec<WriteRequest>,
        /// Where the results go.
        reply: oneshot::Sender<WriteResults>,
    },
    /// Create a counter with this description.
    Create {
        /// The new counter.
        description: CounterDescription,
        /// Where the result goes.
        reply: oneshot::Sender<Result<CounterDescription, ShardError>>,
    },
    /// Reset, delete or change the expiry of a counter; answered with its new description
    /// once durable.
    Lifecycle {
        /// The counter.
        id: CounterId,
        /// What happens to it.
        change: LifecycleChange,
        /// The type the world knows it by, when this node has heard of it neither by a
        /// description nor by a record of its slot (`None`: not asked, or no one knows it).
        elsewhere: Option<CounterType>,
        /// Its `Idempotency-Key` (scoped) and what a retry must ask again to be answered
        /// without applying ([`LifecycleChange::asked`]).
        key: Option<(Box<str>, (i64, u64))>,
        /// Where the result goes.
        reply: oneshot::Sender<Result<CounterDescription, ShardError>>,
    },
    /// Give or take in rights of a bounded counter's slot: answered once durable.
    Rights {
        /// The counter.
        id: CounterId,
        /// What is asked.
        request: RightsRequest,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<RightsAnswer, ShardError>>,
    },
    /// Adopt descriptions learned from other nodes (kept where newer than what is known),
    /// each past the clock fence ([`geocount_sync::ClockFence`]): the commit loop's clock
    /// observes them.
    Describe(Vec<VersionedDescription>),
    /// Take in part of the slot restored from the datacenter's copies: logged and fsynced as
    /// one record, merged by version, and every later change versioned above it.
    Restore {
        /// Counters with their restored records.
        records: Vec<(CounterId, SlotRecord)>,
        /// Answered once the part is durable.
        reply: oneshot::Sender<Result<(), StorageError>>,
    },
    /// Take in the slot's idempotency keys restored from its peers: logged and fsynced as one
    /// record. `unknown_until_ms`: until when keys the restore did not find may still be
    /// retried (`None`: the peers' copies reach the newest restored version).
    RestoreKeys {
        /// Each key with its record.
        keys: Vec<(Box<str>, IdempotencyRecord)>,
        /// Until when a key not held may be a lost one.
        unknown_until_ms: Option<u64>,
        /// Answered once the keys are durable.
        reply: oneshot::Sender<Result<(), StorageError>>,
    },
    /// Periodic: flush in async mode, expire idempotency keys, start due checkpoints.
    Tick,
    /// Flush, checkpoint, and stop.
    Shutdown,
}

impl Command {
    /// How many writes the command counts for in a group.
    pub(crate) fn writes(&self) -> usize {
        match self {
            Command::Write { writes, .. } => writes.len(),
            _ => 1,
        }
    }
}
