//! The shard node's errors, and the one place that maps each to its HTTP status.

use geocount_http::routing::RequestError;
use std::sync::Arc;

use geocount_model::{Bound, CounterType, ModelError};

use crate::write::WriteRequest;
use geocount_net::{BodyError, HttpError};
use hyper::StatusCode;

/// Everything a shard node can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The model refused the input (bad id, bad delta, overflow).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A batch with more entries than the configured maximum.
    #[error("batch has {entries} entries; the limit is {limit}")]
    TooManyEntries {
        /// Entries sent.
        entries: usize,
        /// The configured limit.
        limit: usize,
    },
    /// Refused as any tier refuses a request: unknown path or method, bad counter id, a body
    /// too large or unreadable, malformed JSON or postcard, a bad query or header.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A counter this node has never seen.
    #[error("counter {0:?} does not exist on this node")]
    NotFound(String),
    /// `POST /counter` for an id that already exists.
    #[error("counter {0:?} already exists")]
    AlreadyExists(String),
    /// Bounds for a counter some slot already holds writes of that no bounds weighed: that
    /// slot's rights could not account for them.
    #[error(
        "counter {counter:?} already exists: slots {} hold writes of it made without bounds, so it cannot be made bounded",
        .slots.join(", ")
    )]
    WrittenUnbounded {
        /// The counter.
        counter: String,
        /// The slots holding such writes.
        slots: Vec<String>,
    },
    /// A write timestamped too far ahead of this node's clock.
    #[error(
        "timestamp {timestamp} is {ahead} s ahead of this node's clock; at most {allowed} s is accepted"
    )]
    TimestampAhead {
        /// The write's timestamp, in unix seconds.
        timestamp: u64,
        /// How far ahead it is, in seconds.
        ahead: u64,
        /// The configured skew allowed.
        allowed: u64,
    },
    /// A counter's description pushed from a clock too far ahead of this node's.
    #[error(transparent)]
    DescriptionAhead(#[from] geocount_sync::AheadOfClock),
    /// An `Idempotency-Key` reused for a different write.
    #[error(
        "Idempotency-Key {key:?} was already used for a different write (counter {counter:?}, {write})"
    )]
    IdempotencyKeyReused {
        /// The key.
        key: String,
        /// The counter of the first write with this key.
        counter: String,
        /// What the first write with this key was: `delta 5`, or `an item`.
        write: String,
    },
    /// A delta for a unique counter, or an item for a sum counter.
    #[error("{0}")]
    WrongType(String),
    /// A write of a bounded counter that would take its world total past a bound: no slot
    /// that could be asked held the rights for it.
    #[error(
        "counter {counter:?} is at its bound: delta {delta} would take its world total past {} {limit}{}",
        bound.name(),
        unreachable_note(unreachable)
    )]
    BoundReached {
        /// The counter.
        counter: String,
        /// The bound it would pass.
        bound: Bound,
        /// That bound's value.
        limit: i64,
        /// The refused delta.
        delta: i64,
        /// Datacenters whose slots could not be asked for rights.
        unreachable: Vec<String>,
    },
    /// A write of a bounded counter its slot holds too few rights for (what the commit loop
    /// answers; the node asks other slots for rights and tries it again).
    #[error("counter {:?}: this slot holds too few rights for the write", .0.write.id.as_str())]
    ShortOfRights(Box<Shortage>),
    /// The disk is full: nothing was written. One failure refuses every write of its group,
    /// so each refusal shares it.
    #[error("storage is full: {0}")]
    StorageFull(#[source] Arc<StorageError>),
    /// The node holds `shard.max_counters` counters: a write or create that would add one more
    /// is refused; existing counters keep working.
    #[error(
        "this node holds its limit of {limit} counters (shard.max_counters): writes and creates that would add a counter are refused; existing counters keep working"
    )]
    CounterLimit {
        /// The configured limit.
        limit: usize,
    },
    /// A write would grow one counter's state past `shard.max_counter_bytes`: refused, the
    /// counter keeps what it holds.
    #[error(
        "shard.max_counter_bytes ({limit}) reached: counter {id:?} would hold {bytes} bytes; writes that would grow it are refused, writes to other counters keep working"
    )]
    CounterBytes {
        /// The counter.
        id: String,
        /// What it would hold, in bytes.
        bytes: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The node holds `shard.max_state_bytes` of state: a write or create that would add more
    /// is refused; reads, and writes that add nothing, keep working.
    #[error(
        "shard.max_state_bytes ({limit}) reached: this node holds {held} bytes of state; writes and creates that would add more are refused, reads and writes that add no state keep working"
    )]
    StateBytes {
        /// What the node holds, in bytes.
        held: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The node holds `shard.max_idempotency_keys` keys: a write with a new key is refused
    /// until older keys expire.
    #[error(
        "this node holds its limit of {limit} idempotency keys (shard.max_idempotency_keys): writes with a new Idempotency-Key are refused until older keys expire (shard.idempotency_retention_secs); retries of held keys and writes without a key keep working"
    )]
    IdempotencyKeyLimit {
        /// The configured limit.
        limit: usize,
    },
    /// The log or the store failed: nothing of this request was acknowledged.
    #[error("storage failed: {0}")]
    Storage(#[source] Arc<StorageError>),
    /// The node failed at something of its own, not the client's and not its storage's: it
    /// could not encode its own answer or a write it forwards. Nothing was sent on.
    #[error("internal: {context}{}", .source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Internal {
        /// What was being done.
        context: &'static str,
        /// Why it failed, if a library said.
        #[source]
        source: Option<postcard::Error>,
    },
    /// The node a write must go to cannot be reached; nothing was applied.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The node a single write was forwarded to refused it: its status and answer, passed on
    /// as they are.
    #[error("{error}")]
    PassedOn {
        /// The status it answered.
        status: u16,
        /// Its answer's message.
        error: String,
    },
    /// The node a write must go to refused it whole (restoring, stopping, a bad request):
    /// nothing was applied; its status and answer are passed on.
    #[error("{slot} refused the write: {error}")]
    TargetRefused {
        /// The slot it was sent to.
        slot: String,
        /// The status it answered.
        status: u16,
        /// Its answer's body.
        error: String,
    },
    /// A forwarded write may or may not have been applied.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The node is starting, shutting down, or stopped taking writes after a storage failure.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// In `replicated` durability, a write this node logged that no peer shard node held
    /// durably in time: not acknowledged, though it may still apply (it is in this node's
    /// log), so its outcome is unknown; a retry with the same key applies it at most once.
    #[error(
        "not acknowledged: {0}; the write is in this node's log and may or may not apply (its outcome is unknown); a retry with the same Idempotency-Key applies it at most once"
    )]
    NotReplicated(String),
    /// In `replicated` durability, a write refused before it was logged (nothing applied)
    /// while a refused one still waits for a peer shard node to hold it.
    #[error(
        "not applied: {0}; writes are taken again once a peer shard node holds the writes refused before"
    )]
    WaitingForPeers(String),
    /// Another process serves this node's slot at the same time, at the slot's configured
    /// address while this one is not: it takes no writes until an operator stops one of them.
    #[error("unavailable: {0}")]
    SlotServedTwice(String),
    /// The slot was restored without a whole copy of its idempotency keys: a new key may be the
    /// retry of a write applied before the disk was lost, so it is refused until every key
    /// that could be lost has expired.
    #[error(
        "this slot was restored without a whole copy of its idempotency keys: a write with an Idempotency-Key it does not hold may retry one it applied, so it is refused for {retry_secs} s more, until shard.idempotency_retention_secs has passed since the restore; writes without a key are taken"
    )]
    KeysUnknown {
        /// Seconds until the lost keys have expired.
        retry_secs: u32,
    },
    /// The node's slot is being restored from its datacenter: it takes no writes and serves no
    /// reads of the slot until the restored state is durable.
    #[error("restoring slot {slot} from the datacenter: {progress}")]
    Restoring {
        /// The slot.
        slot: String,
        /// Where the restore stands.
        progress: String,
    },
}

impl ShardError {
    /// A request that cannot be understood (400).
    pub fn bad_request(message: String) -> Self {
        ShardError::Request(RequestError::BadRequest(message))
    }
}

impl From<BodyError> for ShardError {
    fn from(refusal: BodyError) -> Self {
        ShardError::Request(refusal.into())
    }
}

impl HttpError for ShardError {
    fn status(&self) -> StatusCode {
        match self {
            ShardError::Model(ModelError::Overflow { .. }) => StatusCode::UNPROCESSABLE_ENTITY,
            ShardError::Model(_) | ShardError::WrongType(_) => StatusCode::BAD_REQUEST,
            ShardError::TooManyEntries { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ShardError::Request(refusal) => refusal.status(),
            ShardError::NotFound(_) => StatusCode::NOT_FOUND,
            ShardError::AlreadyExists(_)
            | ShardError::WrittenUnbounded { .. }
            | ShardError::BoundReached { .. }
            | ShardError::ShortOfRights(_) => StatusCode::CONFLICT,
            ShardError::IdempotencyKeyReused { .. }
            | ShardError::TimestampAhead { .. }
            | ShardError::DescriptionAhead(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ShardError::StorageFull(_)
            | ShardError::CounterLimit { .. }
            | ShardError::CounterBytes { .. }
            | ShardError::StateBytes { .. }
            | ShardError::IdempotencyKeyLimit { .. } => StatusCode::INSUFFICIENT_STORAGE,
            ShardError::Storage(_) | ShardError::Internal { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ShardError::Unavailable(_)
            | ShardError::NotReplicated(_)
            | ShardError::WaitingForPeers(_)
            | ShardError::Unreachable(_)
            | ShardError::Restoring { .. }
            | ShardError::KeysUnknown { .. }
            | ShardError::SlotServedTwice(_) => StatusCode::SERVICE_UNAVAILABLE,
            ShardError::OutcomeUnknown(_) => StatusCode::GATEWAY_TIMEOUT,
            ShardError::TargetRefused { status, .. } | ShardError::PassedOn { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
        }
    }

    fn to_response(&self) -> geocount_net::Response {
        let (bound, limit) = match self {
            ShardError::BoundReached { bound, limit, .. } => (*bound, *limit),
            // The owner of the slot refused it at its bound: said again as it said it.
            ShardError::PassedOn { status: 409, error }
            | ShardError::TargetRefused {
                status: 409, error, ..
            } => match passed_bound(error) {
                Some(passed) => passed,
                None => return geocount_net::error_answer(self),
            },
            _ => return geocount_net::error_answer(self),
        };
        let body = serde_json::json!({
            "error": self.to_string(),
            "bound": bound.name(),
            "limit": limit,
        });
        geocount_net::json_response(self.status(), &body)
    }

    fn retry_after_secs(&self) -> Option<u32> {
        if let ShardError::KeysUnknown { retry_secs } = self {
            return Some(*retry_secs);
        }
        let unavailable = matches!(self, ShardError::TargetRefused { status: 503, .. });
        let replicating = matches!(
            self,
            ShardError::NotReplicated(_) | ShardError::WaitingForPeers(_)
        );
        (matches!(self, ShardError::Restoring { .. }) || unavailable || replicating).then_some(1)
    }
}

impl ShardError {
    /// The refusal of a write that does not fit counter `id`'s type: an item for a sum
    /// counter, or a delta for a unique one.
    pub fn wrong_type(id: &str, counter_type: CounterType) -> Self {
        ShardError::WrongType(match counter_type {
            CounterType::Sum => format!(
                "counter {id:?} is a sum counter: its writes carry a \"delta\", not an \"item\""
            ),
            CounterType::Unique => format!(
                "counter {id:?} is a unique counter: its writes carry an \"item\", not a \"delta\""
            ),
        })
    }

    /// Wraps a storage failure, telling a full disk apart.
    pub fn from_storage(error: Arc<StorageError>) -> Self {
        if error.is_disk_full() {
            ShardError::StorageFull(error)
        } else {
            ShardError::Storage(error)
        }
    }

    /// The node's own failure to encode something (`context`).
    pub fn internal(context: &'static str, source: postcard::Error) -> Self {
        ShardError::Internal {
            context,
            source: Some(source),
        }
    }

    /// The node's own failure, with no library error behind it.
    pub fn internal_message(context: &'static str) -> Self {
        ShardError::Internal {
            context,
            source: None,
        }
    }
}

/// A write the commit loop handed back for want of rights, with what it lacked.
#[derive(Debug)]
pub struct Shortage {
    /// The write, as asked.
    pub write: WriteRequest,
    /// The bound it would pass with the rights held.
    pub bound: Bound,
    /// The rights it lacked.
    pub need: u64,
}

/// The bound and limit a [`ShardError::BoundReached`]'s message names (`... past max 10`).
fn passed_bound(message: &str) -> Option<(Bound, i64)> {
    if !message.contains("is at its bound") {
        return None;
    }
    [Bound::Max, Bound::Min].into_iter().find_map(|bound| {
        let (_, rest) = message.split_once(&format!(" past {} ", bound.name()))?;
        let end = (rest.char_indices())
            .find(|&(at, c)| !(c.is_ascii_digit() || (at == 0 && c == '-')))
            .map_or(rest.len(), |(at, _)| at);
        Some((bound, rest[..end].parse().ok()?))
    })
}

/// `; datacenters X, Y could not be asked` when some could not.
fn unreachable_note(unreachable: &[String]) -> String {
    if unreachable.is_empty() {
        return String::new();
    }
    format!(
        " (datacenters {} could not be asked for their rights)",
        unreachable.join(", ")
    )
}

/// Failures of the log and the store.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A log segment has a bad record that is no torn tail: corruption. The node does not
    /// start on it, and leaves the file as it is.
    #[error(
        "log segment {file} is corrupt at byte {offset}: {reason}; move the data directory aside and start the node again to restore its slot from the datacenter (README, \"Guarantees\")"
    )]
    Corrupt {
        /// The segment file.
        file: String,
        /// Where its first bad record starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The embedded store failed.
    #[error("store: {0}")]
    Store(#[from] redb::Error),
    /// A record could not be encoded or decoded.
    #[error("record encoding: {0}")]
    Encoding(#[from] postcard::Error),
    /// The store holds a counter id no client could have written.
    #[error("stored counter id: {0}")]
    CounterId(#[from] geocount_model::ModelError),
}

impl StorageError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StorageError::Io {
            context: context.into(),
            source,
        }
    }

    /// Whether the disk ran out of space.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn a_bound_passed_on_from_another_node_is_named_again() {
        let reached = ShardError::BoundReached {
            counter: "q".into(),
            bound: Bound::Min,
            limit: -5,
            delta: -2,
            unreachable: vec!["ASIA_0".into()],
        };
        let message = reached.to_string();
        assert_eq!(passed_bound(&message), Some((Bound::Min, -5)), "{message}");
        assert_eq!(
            passed_bound(
                "counter \"q\" is at its bound: delta 1 would take its world total past max 10"
            ),
            Some((Bound::Max, 10))
        );
        assert_eq!(passed_bound("storage failed"), None);
        let passed = ShardError::PassedOn {
            status: 409,
            error: message,
        };
        assert_eq!(passed.status(), StatusCode::CONFLICT);
    }

    #[test]
    fn the_nodes_own_failures_are_internal_and_storage_failures_keep_their_source() {
        let internal = ShardError::internal_message("cannot forward deltas and items in one batch");
        assert_eq!(internal.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            internal.to_string(),
            "internal: cannot forward deltas and items in one batch"
        );
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let full = ShardError::from_storage(Arc::new(StorageError::io("appending", full)));
        assert_eq!(full.status(), StatusCode::INSUFFICIENT_STORAGE);
        assert!(full.to_string().starts_with("storage is full: appending: "));
        assert!(full.source().is_some_and(|s| s.is::<Arc<StorageError>>()));
    }
}
