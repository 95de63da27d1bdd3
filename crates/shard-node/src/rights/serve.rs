//! Answering for rights: `POST /rights` from other shard nodes (an ask, given from this
//! node's slot once durable; or a bounded counter's description, held once durable), and
//! `GET /counter/{id}/rights` (what this node's slot holds). A bounded counter's creation
//! pushes its description to every shard node before it is answered ([`push_description`]).

use std::net::SocketAddr;

use bytes::Bytes;
use futures_util::future::join_all;
use geocount_model::wire::POSTCARD_CONTENT_TYPE;
use geocount_model::{
    CounterId, HlcTimestamp, RightsAnswer, RightsMessage, Room, SlotId, VersionedDescription,
};
use geocount_net::{Response, bytes_response, json_response};
use hyper::{Method, StatusCode};
use serde::Serialize;

use super::{ASK_TIMEOUT, RightsNode};
use crate::engine::write::{Command, RightsRequest};
use crate::error::ShardError;

/// `POST /rights`: another node's message, answered once durable.
pub async fn answer_message<N: RightsNode>(state: &N, body: &[u8]) -> Result<Response, ShardError> {
    let message: RightsMessage = postcard::from_bytes(body)
        .map_err(|e| ShardError::bad_request(format!("undecodable rights message: {e}")))?;
    match message {
        RightsMessage::Ask {
            counter,
            generation,
            to,
            need,
            want,
        } => {
            let request = RightsRequest::Give {
                to,
                generation,
                need,
                want,
            };
            let answer = change_rights(state, counter, request).await?;
            let body = postcard::to_allocvec(&answer)
                .map_err(|e| ShardError::internal("encoding a rights answer", e))?;
            Ok(bytes_response(
                StatusCode::OK,
                POSTCARD_CONTENT_TYPE,
                Bytes::from(body),
            ))
        }
        RightsMessage::Describe(description) => {
            hold_description(state, description).await?;
            Ok(bytes_response(
                StatusCode::OK,
                POSTCARD_CONTENT_TYPE,
                Bytes::new(),
            ))
        }
    }
}

/// Hands a request of a bounded counter's rights to the commit loop; its answer once durable.
pub(crate) async fn change_rights<N: RightsNode>(
    state: &N,
    id: CounterId,
    request: RightsRequest,
) -> Result<RightsAnswer, ShardError> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    state.send(Command::Rights { id, request, reply }).await?;
    answer.await.map_err(|_| state.stopped())?
}

/// Holds a pushed description once durable, unless this node's slot holds writes of the
/// counter its bounds never weighed (409 naming the slot). One from a clock too far ahead is
/// refused before the commit loop's clock observes it, as a pulled one is.
async fn hold_description<N: RightsNode>(
    state: &N,
    description: VersionedDescription,
) -> Result<(), ShardError> {
    description.description.check()?;
    if let Err(refusal) = state.description_fence().admit(&description) {
        state.refused_description();
        tracing::warn!(%refusal, "refused a pushed counter description");
        return Err(refusal.into());
    }
    let id = description.description.id.clone();
    match change_rights(state, id, RightsRequest::Hold(description)).await {
        Err(ShardError::WrittenUnbounded { counter, .. }) => Err(ShardError::WrittenUnbounded {
            counter,
            slots: vec![state.rights().own.to_string()],
        }),
        held => held.map(|_| ()),
    }
}

/// What pushing a description to every other shard node came to.
#[derive(Debug, Default)]
pub struct Pushed {
    /// Slots that did not answer that they hold it in time, each with why.
    pub missing: Vec<(SlotId, String)>,
    /// Slots that refused it: they hold writes of the counter made without its bounds.
    pub refused: Vec<SlotId>,
}

/// Sends a bounded counter's description to every other shard node of every datacenter.
pub async fn push_description<N: RightsNode>(
    state: &N,
    description: &VersionedDescription,
) -> Pushed {
    let network = state.rights();
    let message = RightsMessage::Describe(description.clone());
    let Ok(body) = postcard::to_allocvec(&message) else {
        return Pushed::default();
    };
    let body = Bytes::from(body);
    let targets: Vec<(SlotId, SocketAddr)> = (network.datacenters.iter())
        .flat_map(|dc| {
            (dc.shards.iter().enumerate())
                .map(move |(index, address)| (SlotId::new(&dc.name, index as u32), *address))
        })
        .filter(|(slot, _)| *slot != network.own)
        .collect();
    let sends = targets.iter().map(|(_, address)| {
        let url = network.client.url(address, "/rights");
        let body = body.clone();
        async move {
            let headers = [("content-type", POSTCARD_CONTENT_TYPE)];
            let sent = network.client.send(Method::POST, &url, &headers, body);
            let timeout = ASK_TIMEOUT.saturating_mul(2);
            match tokio::time::timeout(timeout, sent).await {
                Ok(Ok(answer)) if answer.status == StatusCode::OK => Ok(()),
                Ok(Ok(answer)) if answer.status == StatusCode::CONFLICT => Err(None),
                Ok(Ok(answer)) => Err(Some(refusal_of(answer.status, &answer.body))),
                Ok(Err(error)) => Err(Some(error.to_string())),
                Err(_) => Err(Some(format!("no answer within {timeout:?}"))),
            }
        }
    });
    let answers = join_all(sends).await;
    let mut pushed = Pushed::default();
    for ((slot, _), answer) in targets.into_iter().zip(answers) {
        match answer {
            Ok(()) => {}
            Err(None) => pushed.refused.push(slot),
            Err(Some(why)) => pushed.missing.push((slot, why)),
        }
    }
    pushed
}

/// What a node's refusal of a pushed description says: its JSON `error`, else its status.
fn refusal_of(status: StatusCode, body: &[u8]) -> String {
    let error = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|answer| answer["error"].as_str().map(str::to_owned));
    error.unwrap_or_else(|| format!("answered {status}"))
}

/// `GET /counter/{id}/rights`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RightsView<'a> {
    counter: &'a str,
    slot: &'a str,
    /// The generation the rights are of (a reset or delete starts another).
    generation: HlcTimestamp,
    min: Option<i64>,
    max: Option<i64>,
    /// This slot's share of the counter's total.
    value: i64,
    /// Increments it may apply without asking (`null`: no ceiling).
    up: Option<i64>,
    /// Decrements it may apply without asking (`null`: no floor).
    down: Option<i64>,
    /// What it starts its generation with.
    share: Room,
    given: Vec<Transfer>,
    received: Vec<Transfer>,
}

#[derive(Debug, Serialize)]
struct Transfer {
    slot: String,
    up: u64,
    down: u64,
}

/// What this node's slot holds of counter `id`'s rights: 404 for a counter not bounded here.
pub fn read_rights<N: RightsNode>(state: &N, id: &CounterId) -> Result<Response, ShardError> {
    let now_ms = state.now_ms();
    let bounds = (state.descriptions().read().expect("descriptions lock"))
        .get(id.as_str())
        .filter(|d| d.is_live(now_ms))
        .and_then(|d| d.description.bounds())
        .ok_or_else(|| ShardError::NotFound(id.to_string()))?;
    let generation = super::ask::generation_of(state, id);
    let table = state.table().read().expect("slot table lock");
    let record = table
        .get_record(id.as_str())
        .filter(|record| record.generation() == generation);
    let value = record.map_or(0, |r| r.state.value);
    let ledger = record.map(|r| r.rights().clone()).unwrap_or_default();
    drop(table);
    let share = state.rights().share_of(id, &bounds);
    let available = bounds.available(share, &ledger, value);
    let answer = RightsAnswer::new(generation, Room::default(), available);
    let transfers = |entries: &[(SlotId, Room)]| {
        entries
            .iter()
            .map(|(slot, room)| Transfer {
                slot: slot.to_string(),
                up: room.up,
                down: room.down,
            })
            .collect()
    };
    let own = state.rights().own.to_string();
    Ok(json_response(
        StatusCode::OK,
        &RightsView {
            counter: id.as_str(),
            slot: &own,
            generation,
            min: bounds.min,
            max: bounds.max,
            value,
            up: answer.up,
            down: answer.down,
            share,
            given: transfers(&ledger.given),
            received: transfers(&ledger.received),
        },
    ))
}
