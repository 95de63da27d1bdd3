//! The counter commands. A key is a counter id; each command does what the HTTP route of the
//! same meaning does, through the same code:
//!
//! - `INCR`/`INCRBY`/`DECR`/`DECRBY` and `PFADD` are single writes: forwarded to the node of
//!   the slot they are routed to, or handed to this node's commit loop, answered once durable
//!   in the configured durability; the reply is the counter's world value read right after.
//! - `DEL`/`UNLINK`, `EXPIRE`/`PEXPIRE` and `PERSIST` are the lifecycle changes of
//!   `DELETE /counter/{id}` and `PATCH /counter/{id}`.
//! - `GET`, `MGET`, `PFCOUNT`, `TTL` and `PTTL` read the world value ([`crate::read::world`])
//!   and the counter's description.
//!
//! Refusals are mapped onto Redis's error words in [`refusal`].

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use geocount_model::{CounterId, ModelError};
use geocount_net::HttpError;
use geocount_resp::{Args, Reply, words};

use geocount_model::wire::EntryOutcome;

use crate::engine::write::{Change, Command, LifecycleChange, WriteRequest};
use crate::error::ShardError;
use crate::node::NodeState;
use crate::read::world::WorldValue;
use crate::route::forward;

/// The counter id of key `key`, or why it can be none (non-UTF-8, empty, too long, a control
/// character).
fn counter_id(key: &[u8]) -> Result<CounterId, ShardError> {
    let text = std::str::from_utf8(key)
        .map_err(|_| ShardError::Model(ModelError::InvalidCounterId("it is not UTF-8")))?;
    Ok(CounterId::new(text)?)
}

/// The refusal of `error` in Redis's words: its kind first (`ERR`, `WRONGTYPE`, `LOADING`
/// while the slot is restored, `TRYAGAIN` for what a retry may pass, `OOM` for a node at its
/// limits), then geocount's own message. `unique`: the command was for a unique counter, so a
/// wrong type is said as `PFADD` says it.
pub(crate) fn refusal(error: &ShardError, unique: bool) -> Reply {
    let wrong_type = || {
        if unique {
            words::NOT_HLL
        } else {
            words::WRONGTYPE
        }
    };
    let passed_on = match error {
        ShardError::PassedOn { error, .. } | ShardError::TargetRefused { error, .. } => {
            Some(error.as_str())
        }
        _ => None,
    };
    let line = match (error, passed_on) {
        (ShardError::Model(ModelError::Overflow { .. }), _) => words::OVERFLOW.to_owned(),
        (ShardError::WrongType(_), _) => wrong_type().to_owned(),
        // Another node's refusal comes back as its message.
        (_, Some(message)) if message.contains("would overflow") => words::OVERFLOW.to_owned(),
        (_, Some(message))
            if message.contains("is a sum counter") || message.contains("is a unique counter") =>
        {
            wrong_type().to_owned()
        }
        (ShardError::Restoring { .. }, _) => format!("LOADING {error}"),
        _ => match error.status().as_u16() {
            503 => format!("TRYAGAIN {error}"),
            507 => format!("OOM {error}"),
            _ => format!("ERR {error}"),
        },
    };
    Reply::error(line)
}

/// Refuses every counter command while the slot is restored, and writes while another
/// process serves the slot, as the HTTP routes do.
fn check_node(state: &NodeState, write: bool) -> Result<(), ShardError> {
    if state.restore.is_restoring() {
        return Err(ShardError::Restoring {
            slot: state.slot_name.clone(),
            progress: state.restore.summary(),
        });
    }
    match state.health.conflict() {
        Some(conflict) if write => Err(ShardError::SlotServedTwice(conflict)),
        _ => Ok(()),
    }
}

/// The reply of a world value read for `GET`: the total or estimate as a bulk string.
fn bulk_value(value: Option<WorldValue>) -> Reply {
    match value {
        None => Reply::Nil,
        Some(WorldValue::Sum(total)) => Reply::text(total.to_string()),
        Some(WorldValue::Unique(estimate)) => Reply::text(estimate.to_string()),
    }
}

/// `INCR`, `INCRBY`, `DECR`, `DECRBY` pipelined on one connection, in order: each adds its
/// delta to its counter (a sum counter, made at its first write), all of them as one batch
/// through forwarding and the commit loop (`POST /batch`'s path), durable before the replies.
/// Each reply is the counter's world total read right after the batch, less the deltas of the
/// same counter applied after it in the batch: what the increments one by one would have
/// answered. `INCRBY key 0` writes nothing.
pub(crate) async fn incr(state: Arc<NodeState>, increments: Vec<(Bytes, i64)>) -> Vec<Reply> {
    if let Err(error) = check_node(&state, true) {
        return vec![refusal(&error, false); increments.len()];
    }
    let ids: Vec<Result<CounterId, ShardError>> =
        increments.iter().map(|(key, _)| counter_id(key)).collect();
    let (writes, positions) = increment_writes(&ids, &increments, state.clock.now_unix_secs());
    let outcomes = if writes.is_empty() {
        Vec::new()
    } else {
        match forward::apply_batch(&state, writes, false).await {
            Ok(outcomes) => outcomes,
            Err(error) => return vec![refusal(&error, false); increments.len()],
        }
    };
    let valid: Vec<CounterId> = ids.iter().flatten().cloned().collect();
    let mut totals = state.world.values(&valid).await.into_iter();
    let mut replies: Vec<Reply> = Vec::with_capacity(increments.len());
    // Each increment's total, from the last one back: the deltas applied after it, by counter.
    let mut later: HashMap<&str, i128> = HashMap::new();
    let totals: Vec<Option<Result<Option<WorldValue>, ShardError>>> = ids
        .iter()
        .map(|id| id.as_ref().ok().map(|_| totals.next().unwrap_or(Ok(None))))
        .collect();
    for (((id, (_, delta)), position), total) in ids
        .iter()
        .zip(&increments)
        .zip(&positions)
        .zip(totals)
        .rev()
    {
        let id = match id {
            Ok(id) => id,
            Err(error) => {
                replies.push(refusal(error, false));
                continue;
            }
        };
        let applied = match position.map(|p| &outcomes[p]) {
            None => None,
            Some(EntryOutcome::Applied { value, .. }) => Some(*value),
            Some(EntryOutcome::Refused { status, error }) => {
                let error = ShardError::PassedOn {
                    status: *status,
                    error: error.clone(),
                };
                replies.push(refusal(&error, false));
                continue;
            }
        };
        let after = later.get(id.as_str()).copied().unwrap_or(0);
        if applied.is_some() {
            *later.entry(id.as_str()).or_default() += i128::from(*delta);
        }
        replies.push(increment_reply(total.unwrap_or(Ok(None)), applied, after));
    }
    replies.reverse();
    replies
}

/// The writes of pipelined increments, and for each increment its position among them
/// (`None`: nothing written, for a bad key or a delta of 0).
fn increment_writes(
    ids: &[Result<CounterId, ShardError>],
    increments: &[(Bytes, i64)],
    now_secs: u64,
) -> (Vec<Result<WriteRequest, ShardError>>, Vec<Option<usize>>) {
    let mut writes = Vec::with_capacity(increments.len());
    let mut positions = Vec::with_capacity(increments.len());
    for (id, (_, delta)) in ids.iter().zip(increments) {
        match id {
            Ok(id) if *delta != 0 => {
                positions.push(Some(writes.len()));
                writes.push(Ok(WriteRequest {
                    id: id.clone(),
                    change: Change::Delta(*delta),
                    idempotency_key: None,
                    timestamp_secs: now_secs,
                    ttl_secs: None,
                }));
            }
            _ => positions.push(None),
        }
    }
    (writes, positions)
}

/// One increment's reply: the counter's world `total` read after the batch less the deltas
/// applied `after` it, its own slot's value when `applied` but no longer live.
fn increment_reply(
    total: Result<Option<WorldValue>, ShardError>,
    applied: Option<i64>,
    after: i128,
) -> Reply {
    match (total, applied) {
        (Ok(Some(WorldValue::Sum(total))), _) => Reply::number(total - after),
        (Ok(Some(WorldValue::Unique(_))), None) => Reply::error(words::WRONGTYPE),
        (Ok(_), None) => Reply::Integer(0),
        // Deleted again between the write and the read: the write's own slot is all there is.
        (Ok(_), Some(slot_value)) => Reply::Integer(slot_value),
        (Err(error), None) => refusal(&error, false),
        (Err(error), Some(_)) => Reply::error(format!(
            "ERR the increment was applied and is durable, but the counter's world value \
             cannot be answered ({error}): do not retry it"
        )),
    }
}

/// `PFADD key element...`: adds each element to unique counter `key` (made at its first
/// write); replies 1 when the counter's world estimate changed or the counter was made, else
/// 0. Without elements it makes the counter when there is none.
pub(crate) async fn pfadd(state: Arc<NodeState>, key: Bytes, elements: Args) -> Reply {
    let id = match counter_id(&key).and_then(|id| check_node(&state, true).map(|()| id)) {
        Ok(id) => id,
        Err(error) => return refusal(&error, true),
    };
    let before = match state.world_value(&id).await {
        Ok(Some(WorldValue::Sum(_))) => return Reply::error(words::NOT_HLL),
        Ok(before) => before,
        Err(error) => return refusal(&error, true),
    };
    if elements.is_empty() {
        if before.is_some() {
            return Reply::Integer(0);
        }
        return match create_unique(&state, id).await {
            Ok(()) => Reply::Integer(1),
            Err(ShardError::AlreadyExists(_)) => Reply::Integer(0),
            Err(error) => refusal(&error, true),
        };
    }
    let now_secs = state.clock.now_unix_secs();
    let writes = elements
        .iter()
        .map(|element| {
            let element = String::from_utf8_lossy(&element);
            geocount_model::unique::validate_item(&element)?;
            Ok(WriteRequest {
                id: id.clone(),
                change: Change::item(&element),
                idempotency_key: None,
                timestamp_secs: now_secs,
                ttl_secs: None,
            })
        })
        .collect::<Result<Vec<_>, ShardError>>();
    let writes = match writes {
        Ok(writes) => writes,
        Err(error) => return refusal(&error, true),
    };
    // One batch, as `POST /batch/items` takes them: one group commit for every element.
    let outcomes =
        match forward::apply_batch(&state, writes.into_iter().map(Ok).collect(), false).await {
            Ok(outcomes) => outcomes,
            Err(error) => return refusal(&error, true),
        };
    for outcome in outcomes {
        if let EntryOutcome::Refused { status, error } = outcome {
            return refusal(&ShardError::PassedOn { status, error }, true);
        }
    }
    match state.world_value(&id).await {
        Ok(after) => Reply::Integer(i64::from(after != before)),
        Err(_) => Reply::Integer(1),
    }
}

/// Makes unique counter `id` with the defaults, as `POST /counter` with `{"type": "unique"}`.
async fn create_unique(state: &NodeState, id: CounterId) -> Result<(), ShardError> {
    let body = format!(
        r#"{{"id": {}, "type": "unique"}}"#,
        serde_json::json!(id.as_str())
    );
    let now_ms = state.clock.now_unix_ms();
    let description =
        crate::http::requests::parse_create(body.as_bytes(), &state.settings, now_ms)?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    state.send(Command::Create { description, reply }).await?;
    answer.await.map_err(|_| state.stopped())?.map(|_| ())
}

/// `DEL`/`UNLINK key...`: deletes each live counter (`DELETE /counter/{id}`); replies how
/// many were live.
pub(crate) async fn del(state: Arc<NodeState>, keys: Args) -> Reply {
    if let Err(error) = check_node(&state, false) {
        return refusal(&error, false);
    }
    let ids: Vec<CounterId> = keys
        .iter()
        .filter_map(|key| counter_id(&key).ok())
        .collect();
    let values = state.world.values(&ids).await;
    let mut deleted = 0;
    for (id, value) in ids.into_iter().zip(values) {
        match value {
            Ok(Some(_)) => {}
            Ok(None) => continue,
            Err(error) => return refusal(&error, false),
        }
        match state.change_life(id, LifecycleChange::Delete, None).await {
            Ok(_) => deleted += 1,
            Err(ShardError::NotFound(_)) => {}
            Err(error) => return refusal(&error, false),
        }
    }
    Reply::Integer(deleted)
}

/// `EXPIRE`/`PEXPIRE key amount`: the counter expires `millis` from now (`PATCH
/// /counter/{id}`), or is deleted at once when `millis` is 0 or less; replies 1, or 0 when no
/// live counter has the key.
pub(crate) async fn expire(
    state: Arc<NodeState>,
    key: Bytes,
    millis: i64,
    command: &'static str,
) -> Reply {
    let now_ms = state.clock.now_unix_ms();
    // Past the end of time, as Redis refuses it (`now + millis` beyond a signed 64-bit count).
    let at_ms = match u64::try_from(millis) {
        Ok(0) | Err(_) => None,
        Ok(millis) => match now_ms
            .checked_add(millis)
            .filter(|at| i64::try_from(*at).is_ok())
        {
            Some(at_ms) => Some(at_ms),
            None => return Reply::error(format!("ERR invalid expire time in '{command}' command")),
        },
    };
    let (id, _) = match live(&state, &key).await {
        Ok(Some(live)) => live,
        Ok(None) => return Reply::Integer(0),
        Err(reply) => return reply,
    };
    let Some(at_ms) = at_ms else {
        return match state.change_life(id, LifecycleChange::Delete, None).await {
            Ok(_) => Reply::Integer(1),
            Err(ShardError::NotFound(_)) => Reply::Integer(0),
            Err(error) => refusal(&error, false),
        };
    };
    match state
        .change_life(id, LifecycleChange::Expire(Some(at_ms)), None)
        .await
    {
        Ok(_) => Reply::Integer(1),
        Err(ShardError::NotFound(_)) => Reply::Integer(0),
        Err(error) => refusal(&error, false),
    }
}

/// The id of `key` and its world value when a live counter has it (`None`: none has, or the
/// key is no counter id); a refused read, or the node refusing, as its reply.
async fn live(state: &NodeState, key: &[u8]) -> Result<Option<(CounterId, WorldValue)>, Reply> {
    check_node(state, false).map_err(|error| refusal(&error, false))?;
    let Ok(id) = counter_id(key) else {
        return Ok(None);
    };
    match state.world_value(&id).await {
        Ok(Some(value)) => Ok(Some((id, value))),
        Ok(None) => Ok(None),
        Err(error) => Err(refusal(&error, false)),
    }
}

/// When counter `id` expires by its description, in unix milliseconds.
fn expiry_of(state: &NodeState, id: &CounterId) -> Option<u64> {
    let descriptions = state.descriptions.read().expect("descriptions lock");
    descriptions.get(id.as_str())?.description.expires_at_ms
}

/// `PERSIST key`: removes the counter's expiry (`PATCH /counter/{id}` with
/// `{"ttlSeconds": null}`); replies 1, or 0 when it has none or no live counter has the key.
pub(crate) async fn persist(state: Arc<NodeState>, key: Bytes) -> Reply {
    let id = match live(&state, &key).await {
        Ok(Some((id, _))) => id,
        Ok(None) => return Reply::Integer(0),
        Err(reply) => return reply,
    };
    if expiry_of(&state, &id).is_none() {
        return Reply::Integer(0);
    }
    match state
        .change_life(id, LifecycleChange::Expire(None), None)
        .await
    {
        Ok(_) => Reply::Integer(1),
        Err(ShardError::NotFound(_)) => Reply::Integer(0),
        Err(error) => refusal(&error, false),
    }
}

/// `TTL`/`PTTL key`: the time left before the counter expires, in seconds (rounded as Redis
/// rounds) or milliseconds; -1 without an expiry, -2 when no live counter has the key.
pub(crate) async fn ttl(state: Arc<NodeState>, key: Bytes, millis: bool) -> Reply {
    let id = match live(&state, &key).await {
        Ok(Some((id, _))) => id,
        Ok(None) => return Reply::Integer(-2),
        Err(reply) => return reply,
    };
    let Some(at_ms) = expiry_of(&state, &id) else {
        return Reply::Integer(-1);
    };
    let left = at_ms.saturating_sub(state.clock.now_unix_ms());
    let left = if millis { left } else { (left + 500) / 1000 };
    Reply::Integer(i64::try_from(left).unwrap_or(i64::MAX))
}

/// The world value of each key: `Ok(None)` where no live counter has it (a key that is no
/// counter id included).
async fn values_of(
    state: &NodeState,
    keys: impl Iterator<Item = impl AsRef<[u8]>>,
) -> Vec<Result<Option<WorldValue>, ShardError>> {
    let ids: Vec<Option<CounterId>> = keys.map(|key| counter_id(key.as_ref()).ok()).collect();
    let valid: Vec<CounterId> = ids.iter().flatten().cloned().collect();
    let mut values = state.world.values(&valid).await.into_iter();
    ids.iter()
        .map(|id| match id {
            Some(_) => values.next().unwrap_or(Ok(None)),
            None => Ok(None),
        })
        .collect()
}

/// Consecutive `GET key`s of one connection, read at once: each counter's world value as a
/// bulk string (a unique counter's estimate), nil where no live counter has the key, an error
/// where the read is refused.
pub(crate) async fn get_each(state: Arc<NodeState>, keys: Vec<Bytes>) -> Vec<Reply> {
    if let Err(error) = check_node(&state, false) {
        return vec![refusal(&error, false); keys.len()];
    }
    let values = values_of(&state, keys.iter()).await;
    values
        .into_iter()
        .map(|value| match value {
            Ok(value) => bulk_value(value),
            Err(error) => refusal(&error, false),
        })
        .collect()
}

/// `MGET key...`: each counter's value as `GET` answers it, in an array; one refused read
/// refuses the command, so a stale answer never passes for one.
pub(crate) async fn mget(state: Arc<NodeState>, keys: Args) -> Reply {
    if let Err(error) = check_node(&state, false) {
        return refusal(&error, false);
    }
    let mut replies = Vec::with_capacity(keys.len());
    for value in values_of(&state, keys.iter()).await {
        match value {
            Ok(value) => replies.push(bulk_value(value)),
            Err(error) => return refusal(&error, false),
        }
    }
    Reply::Array(replies)
}

/// `PFCOUNT key`: the unique counter's world estimate, 0 when no live counter has the key.
/// More than one key is refused: the estimate of a union needs the sketches, which the world
/// value does not carry.
pub(crate) async fn pfcount(state: Arc<NodeState>, keys: Args) -> Reply {
    if keys.len() > 1 {
        return Reply::error(
            "ERR PFCOUNT of more than one key is not supported: geocount estimates each unique \
             counter on its own",
        );
    }
    match live(&state, &keys[0]).await {
        Ok(Some((_, WorldValue::Unique(estimate)))) => {
            Reply::Integer(i64::try_from(estimate).unwrap_or(i64::MAX))
        }
        Ok(Some((_, WorldValue::Sum(_)))) => Reply::error(words::NOT_HLL),
        Ok(None) => Reply::Integer(0),
        Err(reply) => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::CounterType;

    fn line(error: ShardError, unique: bool) -> String {
        match refusal(&error, unique) {
            Reply::Error(line) => line,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refusals_take_redis_words_and_keep_geocount_messages() {
        let overflow = ShardError::Model(ModelError::Overflow { value: 1, delta: 2 });
        assert_eq!(line(overflow, false), words::OVERFLOW);
        assert_eq!(
            line(ShardError::wrong_type("v", CounterType::Unique), false),
            words::WRONGTYPE
        );
        assert_eq!(
            line(ShardError::wrong_type("s", CounterType::Sum), true),
            words::NOT_HLL
        );
        // Another node's refusals come back as status and message.
        let passed = |status, error: ShardError| ShardError::PassedOn {
            status,
            error: error.to_string(),
        };
        let remote = ShardError::Model(ModelError::Overflow { value: 1, delta: 2 });
        assert_eq!(line(passed(422, remote), false), words::OVERFLOW);
        let remote = ShardError::wrong_type("v", CounterType::Unique);
        assert_eq!(line(passed(400, remote), false), words::WRONGTYPE);
        let restoring = ShardError::Restoring {
            slot: "DC_A_VAL_0".into(),
            progress: "half".into(),
        };
        assert!(line(restoring, false).starts_with("LOADING restoring slot DC_A_VAL_0"));
        let stale = ShardError::Unavailable("a datacenter is stale".into());
        assert_eq!(
            line(stale, false),
            "TRYAGAIN unavailable: a datacenter is stale"
        );
        let full = line(ShardError::CounterLimit { limit: 5 }, false);
        assert!(
            full.starts_with("OOM this node holds its limit of 5 counters"),
            "{full}"
        );
        let bad = line(counter_id(b"\xff").unwrap_err(), false);
        assert_eq!(bad, "ERR invalid counter id: it is not UTF-8");
    }
}
