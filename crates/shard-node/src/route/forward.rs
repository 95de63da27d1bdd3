//! Forwarding: each checked write goes to the node of the slot it is routed to
//! ([`super::slots`] picks the slot) or to this node's commit loop, and its outcome comes
//! back. A batch's entries for other slots go out concurrently with the local ones; a write
//! whose node cannot be reached before anything was sent is taken here if it carries no
//! idempotency key (a keyed one must wait for its slot, so that retries stay deduplicated).
//!
//! The writes for one node go as one postcard batch ([`WriteRouter::forward`]) marked with
//! [`FORWARDED_HEADER`]: a forwarded write is applied where it lands, so a write never takes
//! two hops even while nodes disagree about a counter's slot count. A keyed change of a
//! counter's life goes to the node its key picks with its scoped key and its client's body in
//! one postcard envelope ([`ForwardedChange`], [`forward_change`]), as a batch carries its
//! keys: the key's scope crosses a forward one way. Whatever is sent, a failure to get an outcome is told the client one
//! way (`not_forwarded`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use geocount_model::wire::{
    BatchEntry, BatchRequest, BatchResponse, EntryOutcome, ItemBatchRequest, ItemEntry,
};
use geocount_model::{CounterDescription, CounterId, CounterType, SlotState};
use geocount_net::HttpError;
use geocount_sync::DescriptionTable;
use hyper::Method;
use serde::{Deserialize, Serialize};

use crate::engine::write::{Change, LifecycleChange, WriteRequest, WriteResults};
use crate::error::ShardError;
use crate::metrics::ShardMetrics;
use crate::route::slots::{FORWARDED_HEADER, ForwardError, WriteRouter};

/// The node a write arrived at, as forwarding needs it: its slot choice, what it knows of the
/// counters, and the way to its commit loop. The state the HTTP handlers share is one; naming
/// it through this trait keeps forwarding below the handlers.
pub trait LocalNode: Send + Sync + 'static {
    /// Picks the slots and holds the client forwarding sends with.
    fn router(&self) -> &WriteRouter;
    /// The counter descriptions this node knows.
    fn descriptions(&self) -> &RwLock<DescriptionTable>;
    /// The node's metrics.
    fn metrics(&self) -> &ShardMetrics;
    /// The own slot's name.
    fn slot_name(&self) -> &str;
    /// The node's clock, in unix milliseconds.
    fn now_ms(&self) -> u64;
    /// Applies `writes` to this node's slot: answered once they are durable (or refused).
    fn submit(
        &self,
        writes: Vec<WriteRequest>,
    ) -> impl Future<Output = Result<WriteResults, ShardError>> + Send;
    /// Resets, deletes or changes the expiry of a counter here: its new description, once
    /// durable.
    fn change_life(
        &self,
        id: CounterId,
        change: LifecycleChange,
    ) -> impl Future<Output = Result<CounterDescription, ShardError>> + Send;
    /// The type of counter `id` when this node has heard nothing of it but the world knows
    /// it live; `None` otherwise.
    fn lives_unheard(
        &self,
        id: &CounterId,
    ) -> impl Future<Output = Result<Option<CounterType>, ShardError>> + Send;
    /// The refusal of a request the stopping node can no longer take.
    fn stopped(&self) -> ShardError;
    /// Notes that the node of slot `slot` acknowledged a sum write of counter `id` this node
    /// forwarded, its slot's state after it `state` (world reads count it at once).
    fn acknowledged(&self, _id: &CounterId, _slot: u32, _state: SlotState) {}
}

/// A write applied, by this node or the one it was forwarded to.
#[derive(Debug)]
pub struct Applied<'a> {
    /// The slot that applied it.
    pub slot: &'a str,
    /// The slot's state after the write.
    pub state: SlotState,
}

/// Applies one write here, or forwards it to the node owning the slot it is routed to.
pub async fn apply_one<N: LocalNode>(
    node: &N,
    mut write: WriteRequest,
    forwarded: bool,
) -> Result<Applied<'_>, ShardError> {
    if write.ttl_secs.is_some() && node.lives_unheard(&write.id).await?.is_some() {
        // A write's expiry is only for a counter it makes; this one lives elsewhere.
        write.ttl_secs = None;
    }
    let target = {
        let descriptions = node.descriptions().read().expect("descriptions lock");
        check_type(&descriptions, &write)?;
        if forwarded {
            node.router().own_slot()
        } else {
            node.router().target_of(&descriptions, &write)
        }
    };
    if target != node.router().own_slot() {
        if let Some(ttl_secs) = write.ttl_secs {
            // The expiry is made durable here before the write goes: no counter the write
            // makes is ever without it.
            let change = LifecycleChange::ExpireIfMade {
                expires_at_ms: node.now_ms() + u64::from(ttl_secs) * 1000,
                counter_type: write.change.counter_type(),
            };
            node.change_life(write.id.clone(), change).await?;
        }
        // `None`: the target was unreachable before anything was sent, so the write is taken here.
        if let Some(applied) = forward_one(node, target, &write).await? {
            if write.change.counter_type() == CounterType::Sum {
                node.acknowledged(&write.id, target, applied.state);
            }
            return Ok(applied);
        }
    }
    let mut results = node.submit(vec![write]).await?;
    let applied = results.pop().ok_or_else(|| node.stopped())??;
    Ok(Applied {
        slot: node.slot_name(),
        state: applied,
    })
}

/// Forwards one write. `None` when the target could not be reached and the write carries no
/// idempotency key, so it may safely be applied here instead.
async fn forward_one<'a, N: LocalNode>(
    node: &'a N,
    target: u32,
    write: &WriteRequest,
) -> Result<Option<Applied<'a>>, ShardError> {
    let (path, body) = encode_forward(&[write])?;
    node.metrics().writes_forwarded.inc();
    let slot_name = node.router().slot_name(target);
    let answer = match node.router().forward(target, path, body).await {
        Ok(answer) => answer,
        Err(error) => {
            return match not_forwarded(slot_name, &error, write.idempotency_key.is_some()) {
                Some(refusal) => Err(refusal),
                None => {
                    tracing::warn!(%error, "forwarding target unreachable; applying the write here");
                    Ok(None)
                }
            };
        }
    };
    match answer.outcomes.as_slice() {
        [EntryOutcome::Applied { value, version }] => Ok(Some(Applied {
            slot: slot_name,
            state: SlotState {
                value: *value,
                version: *version,
            },
        })),
        [EntryOutcome::Refused { status, error }] => Err(ShardError::PassedOn {
            status: *status,
            error: error.clone(),
        }),
        _ => Err(miscounted(slot_name)),
    }
}

/// A keyed change of a counter's life as one node forwards it to another: the key scoped
/// already (a token's name may be any text, which no header carries) and the client's body.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ForwardedChange {
    /// The scoped `Idempotency-Key`.
    pub idempotency_key: String,
    /// The body the client sent.
    pub body: Vec<u8>,
}

impl ForwardedChange {
    /// Decodes a forwarded change's body; 400 for one that is not one.
    pub(crate) fn decode(body: &[u8]) -> Result<Self, ShardError> {
        postcard::from_bytes(body)
            .map_err(|e| ShardError::bad_request(format!("invalid forwarded change: {e}")))
    }
}

/// Sends a keyed change of a counter's life on to slot `target`'s node, which its scoped
/// `Idempotency-Key` picks, and gives its answer as it is (status and body).
pub async fn forward_change<N: LocalNode>(
    node: &N,
    target: u32,
    (method, path): (Method, &str),
    key: &str,
    body: Bytes,
) -> Result<geocount_net::Answer, ShardError> {
    let envelope = ForwardedChange {
        idempotency_key: key.to_owned(),
        body: body.to_vec(),
    };
    let envelope = postcard::to_allocvec(&envelope)
        .map_err(|e| ShardError::internal("cannot encode a forwarded change", e))?;
    let headers = [
        ("content-type", "application/octet-stream"),
        (FORWARDED_HEADER, "1"),
    ];
    let router = node.router();
    (router
        .send(target, method, path, &headers, Bytes::from(envelope))
        .await)
        .map_err(|error| {
            let slot_name = router.slot_name(target);
            not_forwarded(slot_name, &error.into(), true).unwrap_or_else(|| node.stopped())
        })
}

/// Why something sent to slot `slot_name`'s node has no outcome from it, as the client is
/// told. `None` when nothing reached the node and nothing `keyed` was sent, so it may be
/// taken here instead; something keyed must wait for its slot so that retries stay
/// deduplicated.
fn not_forwarded(slot_name: &str, error: &ForwardError, keyed: bool) -> Option<ShardError> {
    match error {
        ForwardError::Refused { status, error } => Some(ShardError::TargetRefused {
            slot: slot_name.to_owned(),
            status: *status,
            error: error.clone(),
        }),
        error if error.is_connect() && !keyed => None,
        error if error.is_connect() => Some(ShardError::Unreachable(format!(
            "{slot_name}, which takes writes with this Idempotency-Key, is unreachable ({error}); retry later"
        ))),
        error => {
            let retry = if keyed {
                "retry with the same Idempotency-Key"
            } else {
                "retry with an Idempotency-Key to be safe"
            };
            Some(ShardError::OutcomeUnknown(format!(
                "forwarding to {slot_name} failed after sending ({error}); {retry}"
            )))
        }
    }
}

/// The refusal of an answer with another number of outcomes than writes sent.
fn miscounted(slot_name: &str) -> ShardError {
    ShardError::OutcomeUnknown(format!(
        "{slot_name} answered a different number of outcomes"
    ))
}

/// Encodes writes of one kind for forwarding: deltas as a [`BatchRequest`] for `/batch`, items
/// as an [`ItemBatchRequest`] for `/batch/items`. Returns the path and the body.
fn encode_forward(writes: &[&WriteRequest]) -> Result<(&'static str, Bytes), ShardError> {
    let items: Option<Vec<ItemEntry<'_>>> = writes
        .iter()
        .map(|w| match &w.change {
            Change::Item { item, .. } => Some(ItemEntry {
                id: w.id.as_str(),
                item,
                idempotency_key: w.idempotency_key.as_deref(),
                timestamp: Some(w.timestamp_secs),
            }),
            Change::Delta(_) => None,
        })
        .collect();
    let encoded = match items {
        Some(entries) if !entries.is_empty() => {
            postcard::to_allocvec(&ItemBatchRequest { entries }).map(|b| ("/batch/items", b))
        }
        _ => {
            let entries = writes
                .iter()
                .map(|w| match w.change {
                    Change::Delta(delta) => Ok(BatchEntry {
                        id: w.id.as_str(),
                        delta,
                        idempotency_key: w.idempotency_key.as_deref(),
                        timestamp: Some(w.timestamp_secs),
                    }),
                    Change::Item { .. } => Err(ShardError::internal_message(
                        "cannot forward deltas and items in one batch",
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            postcard::to_allocvec(&BatchRequest { entries }).map(|b| ("/batch", b))
        }
    };
    encoded
        .map(|(path, bytes)| (path, Bytes::from(bytes)))
        .map_err(|e| ShardError::internal("cannot encode a forwarded batch", e))
}

/// Applies a batch's checked writes (in request order; refused ones answered as such): entries
/// for other slots go to their nodes, concurrently with the local ones. Gives each entry's
/// outcome, in order.
pub async fn apply_batch<N: LocalNode>(
    node: &Arc<N>,
    checked: Vec<Result<WriteRequest, ShardError>>,
    forwarded: bool,
) -> Result<Vec<EntryOutcome>, ShardError> {
    let count = checked.len();
    let Routed {
        local,
        local_positions,
        mut refusals,
        remote,
    } = route_batch(node.as_ref(), checked, forwarded);
    let all_local = local.len() == count;
    let forwards = send_forwards(node, remote, &mut refusals);
    let local_results = if local.is_empty() {
        Vec::new()
    } else {
        node.submit(local).await?
    };
    if all_local {
        return Ok(local_results.into_iter().map(outcome_of).collect());
    }
    let mut outcomes: Vec<Option<EntryOutcome>> = vec![None; count];
    for (position, outcome) in refusals {
        outcomes[position] = Some(outcome);
    }
    for (position, result) in local_positions.into_iter().zip(local_results) {
        outcomes[position] = Some(outcome_of(result));
    }
    collect_forwarded(node.as_ref(), forwards, &mut outcomes).await?;
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| refused(&node.stopped())))
        .collect())
}

/// A batch's entries by where they go.
struct Routed {
    /// The writes for this node's slot, apart, so that the common batch (every entry local)
    /// goes to the commit loop and back without a copy.
    local: Vec<WriteRequest>,
    /// Their positions in the batch.
    local_positions: Vec<usize>,
    /// The entries refused before they went anywhere, by position.
    refusals: Vec<(usize, EntryOutcome)>,
    /// The writes for other slots, with their positions, by slot.
    remote: HashMap<u32, Vec<(usize, WriteRequest)>>,
}

/// Checks and routes each entry under one read of the descriptions, released before anything
/// waits.
fn route_batch<N: LocalNode>(
    node: &N,
    checked: Vec<Result<WriteRequest, ShardError>>,
    forwarded: bool,
) -> Routed {
    let mut routed = Routed {
        local: Vec::with_capacity(checked.len()),
        local_positions: Vec::with_capacity(checked.len()),
        refusals: Vec::new(),
        remote: HashMap::new(),
    };
    let own = node.router().own_slot();
    let descriptions = node.descriptions().read().expect("descriptions lock");
    for (position, write) in checked.into_iter().enumerate() {
        let write = match write.and_then(|w| check_type(&descriptions, &w).map(|()| w)) {
            Ok(write) => write,
            Err(error) => {
                routed.refusals.push((position, refused(&error)));
                continue;
            }
        };
        let target = if forwarded {
            own
        } else {
            node.router().target_of(&descriptions, &write)
        };
        if target == own {
            routed.local.push(write);
            routed.local_positions.push(position);
        } else {
            let group = routed.remote.entry(target).or_default();
            group.push((position, write));
        }
    }
    routed
}

/// Sends each slot's group of writes to its node, concurrently; a group that cannot be
/// encoded is refused (the node's own failure: nothing was sent).
fn send_forwards<N: LocalNode>(
    node: &Arc<N>,
    remote: HashMap<u32, Vec<(usize, WriteRequest)>>,
    refusals: &mut Vec<(usize, EntryOutcome)>,
) -> tokio::task::JoinSet<ForwardedGroup> {
    let mut forwards = tokio::task::JoinSet::new();
    for (target, group) in remote {
        let writes: Vec<&WriteRequest> = group.iter().map(|(_, w)| w).collect();
        let (path, body) = match encode_forward(&writes) {
            Ok(encoded) => encoded,
            Err(error) => {
                let positions = group.iter().map(|(position, _)| *position);
                refusals.extend(positions.map(|position| (position, refused(&error))));
                continue;
            }
        };
        let node = Arc::clone(node);
        forwards.spawn(async move {
            node.metrics().writes_forwarded.inc_by(group.len() as u64);
            let result = node.router().forward(target, path, body).await;
            (target, group, result)
        });
    }
    forwards
}

/// Fills in the outcomes of the entries forwarded to other slots' nodes as their answers
/// arrive. Unkeyed entries whose node could not be reached are applied here instead.
async fn collect_forwarded<N: LocalNode>(
    node: &N,
    mut forwards: tokio::task::JoinSet<ForwardedGroup>,
    outcomes: &mut [Option<EntryOutcome>],
) -> Result<(), ShardError> {
    while let Some(joined) = forwards.join_next().await {
        let (target, group, result) =
            joined.map_err(|e| ShardError::OutcomeUnknown(e.to_string()))?;
        let slot_name = node.router().slot_name(target);
        let answer = match result {
            Ok(answer) if answer.outcomes.len() == group.len() => answer,
            Ok(_) => {
                let error = miscounted(slot_name);
                for (position, _) in &group {
                    outcomes[*position] = Some(refused(&error));
                }
                continue;
            }
            Err(error) => {
                let mut taken_here = Vec::new();
                for (position, write) in group {
                    match not_forwarded(slot_name, &error, write.idempotency_key.is_some()) {
                        Some(refusal) => outcomes[position] = Some(refused(&refusal)),
                        None => taken_here.push((position, write)),
                    }
                }
                if !taken_here.is_empty() {
                    tracing::warn!(%error, "forwarding target unreachable; applying the writes here");
                }
                apply_locally(node, taken_here, outcomes).await?;
                continue;
            }
        };
        for ((position, write), outcome) in group.iter().zip(answer.outcomes) {
            // Noted before the batch is answered: a world read right after it (the reply of
            // a Redis INCR, a read after `POST /batch`) counts the write although this node's
            // copy of the target's slot does not hold it yet.
            if let EntryOutcome::Applied { value, version } = outcome
                && write.change.counter_type() == CounterType::Sum
            {
                node.acknowledged(&write.id, target, SlotState { value, version });
            }
            outcomes[*position] = Some(outcome);
        }
    }
    Ok(())
}

/// What a forwarding task gives back: the target slot, the entries it was sent (with their
/// positions in the batch), and the target's answer.
type ForwardedGroup = (
    u32,
    Vec<(usize, WriteRequest)>,
    Result<BatchResponse, ForwardError>,
);

/// Applies writes to this node's slot, filling in their outcomes.
async fn apply_locally<N: LocalNode>(
    node: &N,
    writes: Vec<(usize, WriteRequest)>,
    outcomes: &mut [Option<EntryOutcome>],
) -> Result<(), ShardError> {
    if writes.is_empty() {
        return Ok(());
    }
    let (positions, writes): (Vec<usize>, Vec<WriteRequest>) = writes.into_iter().unzip();
    let results = node.submit(writes).await?;
    for (position, result) in positions.into_iter().zip(results) {
        outcomes[position] = Some(outcome_of(result));
    }
    Ok(())
}

/// A write's result as a batch answers it.
fn outcome_of(result: Result<SlotState, ShardError>) -> EntryOutcome {
    match result {
        Ok(slot) => EntryOutcome::Applied {
            value: slot.value,
            version: slot.version,
        },
        Err(error) => refused(&error),
    }
}

fn refused(error: &ShardError) -> EntryOutcome {
    EntryOutcome::Refused {
        status: error.status().as_u16(),
        error: error.to_string(),
    }
}

/// Refuses a write whose kind does not fit the counter's type as `descriptions` know it, before
/// it is forwarded (the commit loop where it lands checks again, against what it knows then).
fn check_type(descriptions: &DescriptionTable, write: &WriteRequest) -> Result<(), ShardError> {
    match descriptions.get(write.id.as_str()) {
        Some(d) if d.description.counter_type != write.change.counter_type() => Err(
            ShardError::wrong_type(write.id.as_str(), d.description.counter_type),
        ),
        _ => Ok(()),
    }
}
