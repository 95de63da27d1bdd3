//! The bounded counters of `Scenario::Bounded` ([`BOUNDED`]): a client creates them before the
//! writers start ([`create`]), and watchers check their bounds while the run goes on
//! ([`watch`]) until the observer is done. What they find is recorded in the ledger; the run
//! fails on any of it.
//!
//! The invariants (docs/architecture.md, "Bounded counters"): the values the slots hold, summed
//! over every slot of every datacenter, never leave the bounds (each slot applies a write only
//! within its rights, and rights are given before they are received, which the slots' rights
//! show); and no read of the world total, at a shard node or the global tier, is outside them
//! (parts of different ages are clamped). A datacenter aggregator reads its datacenter's part,
//! which is no world total.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use geocount_net::HttpClient;
use hyper::{Method, StatusCode};

use crate::cluster::{
    DATACENTERS, SHARDS_PER_DATACENTER, base_url, global_host, global_partitions, holds, shard_host,
};
use crate::ledger::{BOUNDED, Bounded, SharedLedger};
use crate::seams::sim_connector;
use crate::workload::wait_for;

/// How long a watcher or the creating client waits for an answer.
const TIMEOUT: Duration = Duration::from_millis(2_000);

/// The pause between two rounds of a watcher's reads.
const WATCH_EVERY: Duration = Duration::from_millis(20);

/// How long the creating client keeps asking: creation answers 503 while some shard node cannot
/// be reached, and the same request again finishes it.
const CREATE_WITHIN: Duration = Duration::from_secs(10);

fn now() -> Duration {
    turmoil::sim_elapsed().expect("inside the simulation")
}

fn shard_url(dc: &str, slot: usize) -> String {
    base_url(turmoil::lookup(shard_host(dc, slot)))
}

/// Creates every [`BOUNDED`] counter at a shard node of the first datacenter, sending the same
/// request again until it is answered 201 (or 200: created by an earlier request whose answer
/// was lost or was a 503), then lets the writers start. Any other 4xx, or no creation within
/// [`CREATE_WITHIN`], is recorded as a violation (and the writers start anyway, so the run
/// ends).
pub async fn create(ledger: SharedLedger) -> turmoil::Result {
    let client = HttpClient::with_connector(TIMEOUT, sim_connector());
    let headers = [("content-type", "application/json")];
    let deadline = now() + CREATE_WITHIN;
    let mut node = 0;
    for counter in &BOUNDED {
        let body = Bytes::from(counter.creation());
        loop {
            let url = format!("{}/counter", shard_url(DATACENTERS[0], node));
            let answer = client
                .send(Method::POST, &url, &headers, body.clone())
                .await;
            let failed = match answer {
                Ok(a) if matches!(a.status, StatusCode::CREATED | StatusCode::OK) => {
                    match described(counter, &a.json()) {
                        true => break,
                        false => Some(format!("created as {}", String::from_utf8_lossy(&a.body))),
                    }
                }
                Ok(a) if a.status.is_client_error() => Some(format!(
                    "creation answered {}: {}",
                    a.status,
                    String::from_utf8_lossy(&a.body)
                )),
                _ if now() > deadline => Some(format!("not created within {CREATE_WITHIN:?}")),
                _ => None,
            };
            if let Some(failed) = failed {
                let at = now().as_millis();
                let violation = format!("{at} ms: {}: {failed}", counter.id);
                ledger.borrow_mut().bound_violations.push(violation);
                break;
            }
            node = (node + 1) % SHARDS_PER_DATACENTER;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    ledger.borrow_mut().counters_created = true;
    Ok(())
}

/// Whether a creation's answer describes `counter` with its bounds.
fn described(counter: &Bounded, description: &serde_json::Value) -> bool {
    description["id"].as_str() == Some(counter.id)
        && description["min"].as_i64() == counter.min
        && description["max"].as_i64() == counter.max
}

/// Watches `counter` until the observer is done, a round every [`WATCH_EVERY`]:
///
/// - every shard node's own slot is read (value and version), then every slot's rights, then
///   every own slot again. When no slot changed between its two reads (a gift or receipt of
///   rights is a new version too), every slot held its first reading and the rights read in
///   between at one instant, so the slots' values must sum within the bounds, no slot may hold
///   negative rights, the shares must add up to the room, and what a slot recorded receiving
///   from another must be within what that one gave it. A round torn by a write, or missing a
///   node (crashed, cut off), checks none of these.
/// - every tier's read of the total must be within the bounds: every shard node's world read,
///   every replica of each datacenter aggregator holding it and every global replica holding it
///   (only 200s: a stale global read answers 503).
pub async fn watch(counter: &'static Bounded, ledger: SharedLedger) -> turmoil::Result {
    let client = HttpClient::with_connector(TIMEOUT, sim_connector());
    let id = counter.id;
    let slots: Vec<(String, String)> = (DATACENTERS.iter())
        .flat_map(|dc| (0..SHARDS_PER_DATACENTER).map(move |slot| (*dc, slot)))
        .map(|(dc, slot)| {
            (
                format!("{dc} shard {slot}"),
                format!("{}/counter/{id}", shard_url(dc, slot)),
            )
        })
        .collect();
    let tiers = tiers(id);
    wait_for(&ledger, |l| l.counters_created).await;
    while !ledger.borrow().observed {
        if let Some((held, rights)) = snapshot(&client, &slots).await {
            let sum: i64 = held.iter().map(|(value, _)| value).sum();
            let mut broken = broken_rights(counter, &rights);
            if !counter.contains(sum) {
                let held: Vec<String> = (slots.iter().zip(&held))
                    .map(|((name, _), (value, _))| format!("{name} {value}"))
                    .collect();
                broken.push(format!(
                    "the slots of {id} hold {sum} in all, outside {} ({})",
                    counter.range(),
                    held.join(", ")
                ));
            }
            let received = (rights.iter().flat_map(|r| r.received.values()))
                .map(|(up, down)| up + down)
                .sum();
            let mut ledger = ledger.borrow_mut();
            ledger.snapshots += 1;
            ledger.rights_received.insert(id, received);
            let at = now().as_millis();
            (ledger.bound_violations).extend(broken.into_iter().map(|b| format!("{at} ms: {b}")));
        } else {
            ledger.borrow_mut().torn_snapshots += 1;
        }
        for (tier, url) in &tiers {
            let Ok(answer) = client.get(url).await else {
                continue;
            };
            if answer.status != StatusCode::OK {
                continue;
            }
            let value = &answer.json()["value"];
            let mut ledger = ledger.borrow_mut();
            ledger.bounded_reads += 1;
            if !value.as_i64().is_some_and(|v| counter.contains(v)) {
                ledger.bound_violations.push(format!(
                    "{} ms: {tier} read {id} as {value}, outside {}",
                    now().as_millis(),
                    counter.range()
                ));
            }
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
    Ok(())
}

/// Every slot's reading (value, version) and rights at one instant, read as [`watch`] says;
/// `None` when a write tore the round or a node did not answer.
async fn snapshot(
    client: &HttpClient,
    slots: &[(String, String)],
) -> Option<(Vec<(i64, Option<u64>)>, Vec<Rights>)> {
    let mut first = Vec::new();
    for (_, url) in slots {
        first.push(own_slot(client, url).await?);
    }
    let mut rights_of = Vec::new();
    for (_, url) in slots {
        rights_of.push(rights(client, &format!("{url}/rights")).await?);
    }
    for ((_, url), held) in slots.iter().zip(&first) {
        if own_slot(client, url).await? != *held {
            return None;
        }
    }
    Some((first, rights_of))
}

/// What [`watch`] reads of counter `id`'s total: each tier's name and URL.
fn tiers(id: &str) -> Vec<(String, String)> {
    let mut tiers = Vec::new();
    for dc in DATACENTERS {
        for slot in 0..SHARDS_PER_DATACENTER {
            let url = format!("{}/counter/{id}/world", shard_url(dc, slot));
            tiers.push((format!("{dc} shard {slot} world read"), url));
        }
    }
    for (replica, held) in global_partitions().iter().enumerate() {
        if holds(held, id) {
            let global = base_url(turmoil::lookup(global_host(replica)));
            tiers.push((
                format!("global@{replica}"),
                format!("{global}/counter/{id}"),
            ));
        }
    }
    tiers
}

/// A shard node's own slot of a counter: its value and version (a slot that holds nothing of
/// it: 0, no version); `None` for no answer or any other one.
async fn own_slot(client: &HttpClient, url: &str) -> Option<(i64, Option<u64>)> {
    let answer = client.get(url).await.ok()?;
    match answer.status {
        StatusCode::OK => {
            let json = answer.json();
            Some((json["value"].as_i64()?, Some(json["version"].as_u64()?)))
        }
        StatusCode::NOT_FOUND => Some((0, None)),
        _ => None,
    }
}

/// One slot's rights of a counter, as `GET /counter/{id}/rights` shows them.
#[derive(Debug)]
struct Rights {
    slot: String,
    up: Option<i64>,
    down: Option<i64>,
    share: Room,
    given: BTreeMap<String, Room>,
    received: BTreeMap<String, Room>,
}

/// Rights in both directions.
type Room = (u64, u64);

/// A slot's rights from the answer at `url`; `None` for no answer or any other than a 200.
async fn rights(client: &HttpClient, url: &str) -> Option<Rights> {
    let answer = client.get(url).await.ok()?;
    if answer.status != StatusCode::OK {
        return None;
    }
    let json = answer.json();
    let room = |json: &serde_json::Value| Some((json["up"].as_u64()?, json["down"].as_u64()?));
    let transfers = |json: &serde_json::Value| -> Option<BTreeMap<String, Room>> {
        (json.as_array()?.iter())
            .map(|t| Some((t["slot"].as_str()?.to_owned(), room(t)?)))
            .collect()
    };
    Some(Rights {
        slot: json["slot"].as_str()?.to_owned(),
        up: json["up"].as_i64(),
        down: json["down"].as_i64(),
        share: room(&json["share"])?,
        given: transfers(&json["given"])?,
        received: transfers(&json["received"])?,
    })
}

/// What breaks the rules of rights in every slot's rights of `counter` at one instant.
fn broken_rights(counter: &Bounded, slots: &[Rights]) -> Vec<String> {
    let id = counter.id;
    let mut broken = Vec::new();
    for receiver in slots {
        for (from, got) in &receiver.received {
            let Some(giver) = slots.iter().find(|g| g.slot == *from) else {
                broken.push(format!(
                    "{id}: {} received from unknown {from}",
                    receiver.slot
                ));
                continue;
            };
            let gave = giver.given.get(&receiver.slot).copied().unwrap_or_default();
            if got.0 > gave.0 || got.1 > gave.1 {
                broken.push(format!(
                    "{id}: {} recorded receiving {got:?} (up, down) from {from}, which gave it \
                     {gave:?}",
                    receiver.slot
                ));
            }
        }
    }
    for slot in slots {
        if slot.up.is_some_and(|up| up < 0) || slot.down.is_some_and(|down| down < 0) {
            broken.push(format!(
                "{id}: {} holds rights up {:?}, down {:?}",
                slot.slot, slot.up, slot.down
            ));
        }
    }
    let (up, down) = (slots.iter()).fold((0, 0), |(u, d), s| (u + s.share.0, d + s.share.1));
    let room = |bound: Option<i64>| bound.map(|b| b.unsigned_abs());
    if room(counter.max).is_some_and(|max| up != max)
        || room(counter.min).is_some_and(|min| down != min)
    {
        broken.push(format!(
            "{id}: the slots' shares add up to up {up}, down {down}, not the room of {}",
            counter.range()
        ));
    }
    broken
}
