//! Forwarding: each checked write goes to the node of the slot it is routed to
//! ([`crate::route::slots`] picks the slot) or to this node's commit loop, and its outcome comes
//! back. A batch's entries for other slots go out concurrently with the local ones; a write
//! whose node cannot be reached before anything was sent is taken here if it carries no
//! idempotency key (a keyed one must wait for its slot, so that retries stay deduplicated).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use geocount_model::SlotState;
use geocount_model::wire::{
    BatchEntry, BatchRequest, BatchResponse, EntryOutcome, ItemBatchRequest, ItemEntry,
};
use geocount_net::HttpError;
use geocount_sync::DescriptionTable;

use crate::engine::write::{Change, WriteRequest};
use crate::error::ShardError;
use crate::http::state::NodeState;
use crate::route::slots::ForwardError;

/// A write applied, by this node or the one it was forwarded to.
#[derive(Debug)]
pub struct Applied<'a> {
    /// The slot that applied it.
    pub slot: &'a str,
    /// The slot's state after the write.
    pub state: SlotState,
}

/// Applies one write here, or forwards it to the node owning the slot it is routed to.
pub async fn apply_one(
    state: &NodeState,
    write: WriteRequest,
    forwarded: bool,
) -> Result<Applied<'_>, ShardError> {
    let target = {
        let descriptions = state.descriptions.read().expect("descriptions lock");
        check_type(&descriptions, &write)?;
        if forwarded {
            state.router.own_slot()
        } else {
            state.router.target_of(&descriptions, &write)
        }
    };
    if target != state.router.own_slot() {
        // `None`: the target was unreachable before anything was sent, so the write is taken here.
        if let Some(applied) = forward_one(state, target, &write).await? {
            return Ok(applied);
        }
    }
    let mut results = state.submit(vec![write]).await?;
    let applied = results.pop().ok_or_else(|| state.stopped())??;
    Ok(Applied {
        slot: &state.slot_name,
        state: applied,
    })
}

/// Forwards one write. `None` when the target could not be reached and the write carries no
/// idempotency key, so it may safely be applied here instead.
async fn forward_one<'a>(
    state: &'a NodeState,
    target: u32,
    write: &WriteRequest,
) -> Result<Option<Applied<'a>>, ShardError> {
    let (path, body) = encode_forward(&[write])?;
    state.metrics.writes_forwarded.inc();
    let slot_name = state.router.slot_name(target);
    match state.router.forward(target, path, body).await {
        Ok(mut answer) => match answer.outcomes.pop() {
            Some(EntryOutcome::Applied { value, version }) => Ok(Some(Applied {
                slot: slot_name,
                state: SlotState { value, version },
            })),
            Some(EntryOutcome::Refused { status, error }) => {
                Err(ShardError::PassedOn { status, error })
            }
            None => Err(ShardError::OutcomeUnknown(format!(
                "{slot_name} answered no outcome"
            ))),
        },
        Err(ForwardError::Refused { status, error }) => Err(ShardError::TargetRefused {
            slot: slot_name.to_owned(),
            status,
            error,
        }),
        Err(error) if error.is_connect() && write.idempotency_key.is_none() => {
            tracing::warn!(%error, "forwarding target unreachable; applying the write here");
            Ok(None)
        }
        Err(error) if error.is_connect() => Err(ShardError::Unreachable(format!(
            "{slot_name}, which takes writes with this Idempotency-Key, is unreachable ({error}); retry later"
        ))),
        Err(error) => Err(ShardError::OutcomeUnknown(format!(
            "forwarding to {slot_name} failed after sending ({error}); retry with an Idempotency-Key to be safe"
        ))),
    }
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
pub async fn apply_batch(
    state: &Arc<NodeState>,
    checked: Vec<Result<WriteRequest, ShardError>>,
    forwarded: bool,
) -> Result<Vec<EntryOutcome>, ShardError> {
    let count = checked.len();
    // The writes for this node's slot and their positions in the batch, apart, so that the
    // common batch (every entry local) goes to the commit loop and back without a copy.
    let mut local = Vec::with_capacity(count);
    let mut local_positions = Vec::with_capacity(count);
    let mut refusals = Vec::new();
    let mut remote: HashMap<u32, Vec<(usize, WriteRequest)>> = HashMap::new();
    let own = state.router.own_slot();
    {
        // Each entry checked and routed under one read of the descriptions, released before
        // anything waits.
        let descriptions = state.descriptions.read().expect("descriptions lock");
        for (position, write) in checked.into_iter().enumerate() {
            let write = match write.and_then(|w| check_type(&descriptions, &w).map(|()| w)) {
                Ok(write) => write,
                Err(error) => {
                    refusals.push((position, refused(&error)));
                    continue;
                }
            };
            let target = if forwarded {
                own
            } else {
                state.router.target_of(&descriptions, &write)
            };
            if target == own {
                local.push(write);
                local_positions.push(position);
            } else {
                remote.entry(target).or_default().push((position, write));
            }
        }
    }
    let all_local = local.len() == count;
    let mut forwards = tokio::task::JoinSet::new();
    for (target, group) in remote {
        let writes: Vec<&WriteRequest> = group.iter().map(|(_, w)| w).collect();
        let (path, body) = match encode_forward(&writes) {
            Ok(encoded) => encoded,
            // The node's own failure: nothing was sent.
            Err(error) => {
                refusals.extend(
                    group
                        .iter()
                        .map(|(position, _)| (*position, refused(&error))),
                );
                continue;
            }
        };
        let state = Arc::clone(state);
        forwards.spawn(async move {
            state.metrics.writes_forwarded.inc_by(group.len() as u64);
            let result = state.router.forward(target, path, body).await;
            (target, group, result)
        });
    }
    let local_results = if local.is_empty() {
        Vec::new()
    } else {
        state.submit(local).await?
    };
    Ok(if all_local {
        local_results.into_iter().map(outcome_of).collect()
    } else {
        let mut outcomes: Vec<Option<EntryOutcome>> = vec![None; count];
        for (position, outcome) in refusals {
            outcomes[position] = Some(outcome);
        }
        for (position, result) in local_positions.into_iter().zip(local_results) {
            outcomes[position] = Some(outcome_of(result));
        }
        collect_forwarded(state, forwards, &mut outcomes).await?;
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| refused(&state.stopped())))
            .collect()
    })
}

/// Fills in the outcomes of the entries forwarded to other slots' nodes as their answers
/// arrive. Unkeyed entries whose node could not be reached are applied here instead.
async fn collect_forwarded(
    state: &NodeState,
    mut forwards: tokio::task::JoinSet<ForwardedGroup>,
    outcomes: &mut [Option<EntryOutcome>],
) -> Result<(), ShardError> {
    while let Some(joined) = forwards.join_next().await {
        let (target, group, result) =
            joined.map_err(|e| ShardError::OutcomeUnknown(e.to_string()))?;
        let slot_name = state.router.slot_name(target).to_owned();
        match result {
            Ok(answer) if answer.outcomes.len() == group.len() => {
                for ((position, _), outcome) in group.iter().zip(answer.outcomes) {
                    outcomes[*position] = Some(outcome);
                }
            }
            Ok(_) => {
                let error = ShardError::OutcomeUnknown(format!(
                    "{slot_name} answered a different number of outcomes"
                ));
                for (position, _) in &group {
                    outcomes[*position] = Some(refused(&error));
                }
            }
            Err(ForwardError::Refused { status, error }) => {
                let refusal = ShardError::TargetRefused {
                    slot: slot_name.clone(),
                    status,
                    error,
                };
                for (position, _) in &group {
                    outcomes[*position] = Some(refused(&refusal));
                }
            }
            Err(error) if error.is_connect() => {
                // Nothing reached the target: unkeyed entries may be taken here; keyed ones
                // must wait for their slot so retries stay deduplicated.
                let (keyed, unkeyed): (Vec<_>, Vec<_>) = group
                    .into_iter()
                    .partition(|(_, w)| w.idempotency_key.is_some());
                let unreachable = ShardError::Unreachable(format!(
                    "{slot_name} is unreachable ({error}); retry later"
                ));
                for (position, _) in &keyed {
                    outcomes[*position] = Some(refused(&unreachable));
                }
                apply_locally(state, unkeyed, outcomes).await?;
            }
            Err(error) => {
                let unknown = ShardError::OutcomeUnknown(format!(
                    "forwarding to {slot_name} failed after sending ({error}); retry with an Idempotency-Key to be safe"
                ));
                for (position, _) in &group {
                    outcomes[*position] = Some(refused(&unknown));
                }
            }
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
async fn apply_locally(
    state: &NodeState,
    writes: Vec<(usize, WriteRequest)>,
    outcomes: &mut [Option<EntryOutcome>],
) -> Result<(), ShardError> {
    if writes.is_empty() {
        return Ok(());
    }
    let (positions, writes): (Vec<usize>, Vec<WriteRequest>) = writes.into_iter().unzip();
    let results = state.submit(writes).await?;
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
