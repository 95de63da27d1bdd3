//! What a handler asks of the commit loop ([`Command`]) and a slot's rights changes
//! ([`RightsRequest`]). The write vocabulary these carry lives in [`crate::write`].

use geocount_model::{
    CounterDescription, CounterId, CounterType, HlcTimestamp, IdempotencyRecord, RightsAnswer,
    Room, SlotId, SlotRecord, SlotState, VersionedDescription,
};
use tokio::sync::oneshot;

use crate::error::{ShardError, StorageError};
pub use crate::write::{Change, LifecycleChange, LifecycleRequest, WriteRequest};

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
