//! Asking for rights: a bounded counter's write its slot lacks the rights for is tried again
//! after the node asked the counter's other slots, this datacenter's first (no call leaves
//! it while they hold enough), then every other datacenter's at once. What each gives is
//! taken in durably before the write is tried again; a write still short after an ask that
//! brought nothing is refused at its bound (409). A slot that did not answer is not asked
//! again for [`super::SILENCE`].

use std::net::SocketAddr;

use bytes::Bytes;
use futures_util::future::join_all;
use geocount_model::wire::POSTCARD_CONTENT_TYPE;
use geocount_model::{Bound, CounterId, HlcTimestamp, RightsAnswer, RightsMessage, Room, SlotId};
use hyper::{Method, StatusCode};

use super::{ASK_TIMEOUT, Donor, RightsNetwork, RightsNode};
use crate::engine::write::{Command, RightsRequest, WriteResults};
use crate::error::{ShardError, Shortage};

/// How many times a write short of rights is tried again, each after an ask that brought
/// some: enough for writers racing for the same rights on one node.
const ATTEMPTS: usize = 4;

/// What one ask brought.
#[derive(Debug, Default)]
struct Asked {
    /// Rights taken in, in the direction asked.
    got: u64,
    /// Datacenters some slot of which did not answer.
    unreachable: Vec<String>,
}

/// Tries again each write of `results` that came back short of rights, asking for rights
/// first; each ends applied, refused at its bound, or refused otherwise.
pub async fn retry_short<N: RightsNode>(state: &N, results: &mut WriteResults) {
    for result in results.iter_mut() {
        if !matches!(result, Err(ShardError::ShortOfRights(_))) {
            continue;
        }
        let Err(ShardError::ShortOfRights(shortage)) =
            std::mem::replace(result, Ok(Default::default()))
        else {
            unreachable!("matched above");
        };
        *result = apply_with_rights(state, *shortage).await;
    }
}

async fn apply_with_rights<N: RightsNode>(
    state: &N,
    mut shortage: Shortage,
) -> Result<geocount_model::SlotState, ShardError> {
    let network = state.rights();
    let lock = network.asking(&shortage.write.id);
    // A write that waited for another's ask tries again first: that ask may have brought
    // enough for both.
    let (_asking, waited) = match lock.try_lock() {
        Ok(asking) => (asking, false),
        Err(_) => (lock.lock().await, true),
    };
    let mut unreachable = Vec::new();
    for attempt in 0..=ATTEMPTS {
        if attempt > 0 || waited {
            let mut results = state.submit_once(vec![shortage.write]).await?;
            match results.pop().expect("one result per write") {
                Err(ShardError::ShortOfRights(again)) => shortage = *again,
                done => return done,
            }
        }
        if attempt == ATTEMPTS {
            break;
        }
        let asked = ask(network, state, &shortage).await;
        unreachable = asked.unreachable;
        if asked.got == 0 {
            break;
        }
    }
    let id = shortage.write.id.to_string();
    let bounds = state
        .descriptions()
        .read()
        .expect("descriptions lock")
        .get(&id)
        .and_then(|d| d.description.bounds());
    let delta = match shortage.write.change {
        crate::engine::write::Change::Delta(delta) => delta,
        crate::engine::write::Change::Item { .. } => 0,
    };
    Err(ShardError::BoundReached {
        counter: id,
        bound: shortage.bound,
        limit: bounds.map_or(0, |b| b.limit(shortage.bound)),
        delta,
        unreachable,
    })
}

/// Asks the counter's other slots for what `shortage` lacks: this datacenter's, then, if
/// they gave too little, every other datacenter's at once. A slot holding less than the
/// need gives nothing and says what it holds; once the slots asked hold the need between
/// them, each is asked again for its part. A write they cannot meet together moves no
/// rights.
async fn ask<N: RightsNode>(network: &RightsNetwork, state: &N, shortage: &Shortage) -> Asked {
    let id = &shortage.write.id;
    let generation = generation_of(state, id);
    let (own_dc, remote) = network.others();
    let mut asked = Asked::default();
    // Slots that hold some but less than the need, and what they hold.
    let mut offers: Vec<(SlotId, SocketAddr, u64)> = Vec::new();
    for donors in [own_dc, remote] {
        if donors.is_empty() {
            continue;
        }
        let answers = ask_each(network, shortage, generation, &donors, shortage.need);
        for ((slot, address), answer) in donors.iter().zip(answers.await) {
            let Some(answer) = answer else {
                if !asked.unreachable.contains(&slot.datacenter) {
                    asked.unreachable.push(slot.datacenter.clone());
                }
                continue;
            };
            if answer.generation != generation {
                continue;
            }
            asked.got += take_in(state, id, slot, generation, answer.given, shortage.bound).await;
            let holds = match shortage.bound {
                Bound::Max => answer.up,
                Bound::Min => answer.down,
            };
            let holds = holds.map_or(0, |held| u64::try_from(held).unwrap_or(0));
            if holds > 0 {
                offers.push((slot.clone(), *address, holds));
            }
        }
        if asked.got >= shortage.need {
            break;
        }
        let offered: u64 = (offers.iter()).fold(0, |sum, (.., holds)| sum.saturating_add(*holds));
        if asked.got.saturating_add(offered) < shortage.need {
            continue;
        }
        // Enough between them: each gives its part, in turn, until the need is met.
        for (slot, address, holds) in std::mem::take(&mut offers) {
            let left = shortage.need.saturating_sub(asked.got);
            if left == 0 {
                break;
            }
            let donor = [(slot.clone(), address)];
            let part = ask_each(network, shortage, generation, &donor, holds.min(left));
            if let Some(Some(answer)) = part.await.pop()
                && answer.generation == generation
            {
                asked.got +=
                    take_in(state, id, &slot, generation, answer.given, shortage.bound).await;
            }
        }
        break;
    }
    asked
}

/// Asks each of `donors` at once for `need` of what `shortage` lacks (and half of the rest
/// beyond it: `want` is no cap), in `generation`.
async fn ask_each(
    network: &RightsNetwork,
    shortage: &Shortage,
    generation: HlcTimestamp,
    donors: &[Donor],
    need: u64,
) -> Vec<Option<RightsAnswer>> {
    let room = |amount: u64| match shortage.bound {
        Bound::Max => Room {
            up: amount,
            down: 0,
        },
        Bound::Min => Room {
            up: 0,
            down: amount,
        },
    };
    let message = RightsMessage::Ask {
        counter: shortage.write.id.clone(),
        generation,
        to: network.own.clone(),
        need: room(need),
        want: room(u64::MAX),
    };
    let body = match postcard::to_allocvec(&message) {
        Ok(body) => Bytes::from(body),
        Err(error) => {
            tracing::error!(%error, "encoding an ask for rights");
            return vec![None; donors.len()];
        }
    };
    join_all((donors.iter()).map(|(slot, address)| async {
        if network.is_silent(slot) {
            return None;
        }
        let answer = ask_one(network, slot, *address, body.clone()).await;
        network.heard(slot, answer.is_some());
        answer
    }))
    .await
}

/// One slot's answer, `None` when it could not be had in time.
async fn ask_one(
    network: &RightsNetwork,
    slot: &SlotId,
    address: SocketAddr,
    body: Bytes,
) -> Option<RightsAnswer> {
    let url = network.client.url(address, "/rights");
    let headers = [("content-type", POSTCARD_CONTENT_TYPE)];
    let sent = network.client.send(Method::POST, &url, &headers, body);
    let answer = match tokio::time::timeout(ASK_TIMEOUT, sent).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) => {
            tracing::debug!(%slot, %error, "asking for rights");
            return None;
        }
        Err(_) => {
            tracing::debug!(%slot, "asking for rights timed out");
            return None;
        }
    };
    if answer.status != StatusCode::OK {
        tracing::debug!(%slot, status = %answer.status, "asking for rights refused");
        return None;
    }
    postcard::from_bytes(&answer.body).ok()
}

/// Takes in durably that `from` gave `total` in all; returns what it adds in `bound`'s
/// direction.
async fn take_in<N: RightsNode>(
    state: &N,
    id: &CounterId,
    from: &SlotId,
    generation: HlcTimestamp,
    total: Room,
    bound: Bound,
) -> u64 {
    let known = state
        .table()
        .read()
        .expect("slot table lock")
        .get_record(id.as_str())
        .filter(|record| record.generation() == generation)
        .map_or(Room::default(), |record| {
            record.rights().received_from(from)
        });
    let added = match bound {
        Bound::Max => total.up.saturating_sub(known.up),
        Bound::Min => total.down.saturating_sub(known.down),
    };
    if total.max(known) == known {
        return 0;
    }
    let (reply, answer) = tokio::sync::oneshot::channel();
    let request = RightsRequest::Receive {
        from: from.clone(),
        generation,
        total,
    };
    let command = Command::Rights {
        id: id.clone(),
        request,
        reply,
    };
    if state.send(command).await.is_err() {
        return 0;
    }
    match answer.await {
        Ok(Ok(_)) => added,
        _ => 0,
    }
}

/// The generation counter `id`'s slot here counts in: its description's, or its record's
/// when newer.
pub(crate) fn generation_of<N: RightsNode>(state: &N, id: &CounterId) -> HlcTimestamp {
    let now_ms = state.now_ms();
    let described = (state.descriptions().read().expect("descriptions lock"))
        .get(id.as_str())
        .map(|d| d.generation_at(now_ms))
        .unwrap_or_default();
    let held = (state.table().read().expect("slot table lock"))
        .get_record(id.as_str())
        .map(|record| record.generation())
        .unwrap_or_default();
    described.max(held)
}
