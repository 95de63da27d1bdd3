//! What the simulated clients do: write with idempotency keys until every write is acknowledged
//! ([`writer`]), and, once the faults have healed, watch every tier until it shows the exact
//! totals ([`observer`]). Both record into the run's [`Ledger`], through which the driver may
//! also pause a writer.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use geocount_net::{Answer, HttpClient};
use hyper::{Method, StatusCode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::cluster::{
    DATACENTERS, GLOBAL, SHARDS_PER_DATACENTER, aggregator_host, base_url, shard_host,
};
use crate::seams::sim_connector;

/// The counters every client writes (each has one slot per datacenter, wherever placement puts
/// it, so most writes are forwarded between shard nodes).
pub const COUNTERS: [&str; 3] = ["likes:a", "likes:b", "views:c"];

/// How long a client waits for an answer before it retries (longer than a forward's timeout,
/// so a forwarded write answers 504 before the client gives up on it).
const CLIENT_TIMEOUT: Duration = Duration::from_millis(2_000);

/// How often the observer reads every tier.
pub const OBSERVE_EVERY: Duration = Duration::from_millis(10);

/// One acknowledged write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The datacenter it was written in (an index into [`DATACENTERS`]).
    pub datacenter: usize,
    /// The counter.
    pub counter: &'static str,
    /// The signed delta.
    pub delta: i64,
    /// How many requests it took.
    pub attempts: u32,
    /// When it was acknowledged (simulated time since the start).
    pub at: Duration,
}

/// What one run's clients and driver recorded.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Every acknowledged write, in order.
    pub acks: Vec<Ack>,
    /// Writers that have every write acknowledged.
    pub writers_done: usize,
    /// When the last fault healed (set by the driver).
    pub healed_at: Option<Duration>,
    /// When the observer started watching: the later of the heal and the last acknowledgement.
    pub settled_at: Option<Duration>,
    /// When every tier first showed the exact totals.
    pub converged_at: Option<Duration>,
    /// What the tiers showed at the observer's last reading, where it differed from the
    /// acknowledged totals.
    pub last_mismatch: Option<String>,
    /// Answers that break the protocol (a 4xx to a valid write, a reused key refused).
    pub protocol_errors: Vec<String>,
    /// Requests refused because their slot's node was restoring the slot (503, or 504 through
    /// the node that forwarded them), then retried.
    pub restoring_refusals: u64,
    /// Datacenters whose writer must not start another write until the driver takes them out
    /// (the write it is sending is still retried until acknowledged).
    pub paused: BTreeSet<usize>,
    /// Datacenters whose writer has every write it sent acknowledged and sends no other: paused,
    /// or done.
    pub idle: BTreeSet<usize>,
}

/// A total per counter.
pub type Totals = BTreeMap<&'static str, i64>;

impl Ledger {
    /// The sum of the acknowledged deltas per counter: in datacenter `dc`, or everywhere.
    pub fn expected(&self, dc: Option<usize>) -> Totals {
        let mut totals: Totals = COUNTERS.iter().map(|&c| (c, 0)).collect();
        for ack in self
            .acks
            .iter()
            .filter(|a| dc.is_none_or(|dc| a.datacenter == dc))
        {
            *totals.entry(ack.counter).or_default() += ack.delta;
        }
        totals
    }
}

/// The run's ledger, shared by the simulated clients and the driver (all on one thread).
pub type SharedLedger = Rc<RefCell<Ledger>>;

fn now() -> Duration {
    turmoil::sim_elapsed().expect("inside the simulation")
}

/// Writes `writes` random deltas to [`COUNTERS`] through the shard nodes of datacenter
/// `datacenter`, each with its own idempotency key, retrying each (against the next node of the
/// same datacenter) until it is acknowledged.
pub async fn writer(
    datacenter: usize,
    writes: usize,
    max_gap: Duration,
    seed: u64,
    ledger: SharedLedger,
) -> turmoil::Result {
    let mut rng = StdRng::seed_from_u64(seed);
    let client = HttpClient::with_connector(CLIENT_TIMEOUT, sim_connector());
    let dc = DATACENTERS[datacenter];
    let shards: Vec<String> = (0..SHARDS_PER_DATACENTER)
        .map(|slot| base_url(turmoil::lookup(shard_host(dc, slot))))
        .collect();
    for n in 0..writes {
        tokio::time::sleep(max_gap.mul_f64(rng.random::<f64>())).await;
        wait_while_paused(datacenter, &ledger).await;
        let counter = COUNTERS[rng.random_range(0..COUNTERS.len())];
        let delta: i64 = match rng.random_range(0..4) {
            0 => -rng.random_range(1..=5),
            _ => rng.random_range(1..=9),
        };
        let key = format!("{dc}-{n}");
        let (op, magnitude) = if delta < 0 {
            ("DECREMENT", -delta)
        } else {
            ("INCREMENT", delta)
        };
        let body = Bytes::from(format!("{{\"delta\": {magnitude}}}"));
        let headers = [
            ("idempotency-key", key.as_str()),
            ("content-type", "application/json"),
        ];
        let mut node = rng.random_range(0..shards.len());
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let url = format!("{}/counter/{counter}/write?op={op}", shards[node]);
            match client
                .send(Method::PATCH, &url, &headers, body.clone())
                .await
            {
                Ok(answer) if answer.status == StatusCode::OK => break,
                Ok(answer) if answer.status.is_client_error() => {
                    let error = format!(
                        "{key}: {counter} {delta:+} answered {}: {}",
                        answer.status,
                        String::from_utf8_lossy(&answer.body)
                    );
                    ledger.borrow_mut().protocol_errors.push(error);
                    break;
                }
                // A node restoring its lost slot takes no writes until the slot is durable.
                Ok(answer) if restoring(&answer) => {
                    ledger.borrow_mut().restoring_refusals += 1;
                    node = (node + 1) % shards.len();
                    let backoff = Duration::from_millis(rng.random_range(20..=150));
                    tokio::time::sleep(backoff).await;
                }
                // Refused (503/504/500), no answer, or cut off: the outcome is unknown, and the
                // key makes the retry safe.
                _ => {
                    node = (node + 1) % shards.len();
                    let backoff = Duration::from_millis(rng.random_range(20..=150));
                    tokio::time::sleep(backoff).await;
                }
            }
        }
        ledger.borrow_mut().acks.push(Ack {
            datacenter,
            counter,
            delta,
            attempts,
            at: now(),
        });
    }
    let mut ledger = ledger.borrow_mut();
    ledger.writers_done += 1;
    ledger.idle.insert(datacenter);
    Ok(())
}

/// Whether `answer` is a node's refusal while it restores its slot: its own 503, or the 504 of
/// the node that forwarded the write to it (which says what it was answered).
fn restoring(answer: &Answer) -> bool {
    answer.status.is_server_error()
        && String::from_utf8_lossy(&answer.body).contains("restoring slot")
}

/// Waits, idle, while the driver pauses `datacenter`'s writer.
async fn wait_while_paused(datacenter: usize, ledger: &SharedLedger) {
    while ledger.borrow().paused.contains(&datacenter) {
        ledger.borrow_mut().idle.insert(datacenter);
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
    ledger.borrow_mut().idle.remove(&datacenter);
}

/// Waits until every writer is done and the driver has healed every fault, then reads every
/// tier every [`OBSERVE_EVERY`] until each shows the acknowledged totals (the shard nodes'
/// own slots and each datacenter aggregator their datacenter's, the global aggregator the
/// world's and each datacenter's part, answering as fresh), or `give_up_after` passes.
pub async fn observer(
    writers: usize,
    give_up_after: Duration,
    ledger: SharedLedger,
) -> turmoil::Result {
    loop {
        let ready = {
            let ledger = ledger.borrow();
            ledger.writers_done == writers && ledger.healed_at.is_some()
        };
        if ready {
            break;
        }
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
    let settled_at = {
        let mut ledger = ledger.borrow_mut();
        let last_ack = ledger.acks.iter().map(|a| a.at).max().unwrap_or_default();
        let settled = last_ack.max(ledger.healed_at.expect("checked above"));
        ledger.settled_at = Some(settled);
        settled
    };
    let client = HttpClient::with_connector(CLIENT_TIMEOUT, sim_connector());
    let expected = {
        let ledger = ledger.borrow();
        let parts = (0..DATACENTERS.len()).map(|dc| ledger.expected(Some(dc)));
        (ledger.expected(None), parts.collect::<Vec<_>>())
    };
    while now() < settled_at + give_up_after {
        match mismatch(&client, &expected.0, &expected.1).await {
            None => {
                ledger.borrow_mut().converged_at = Some(now());
                return Ok(());
            }
            Some(found) => ledger.borrow_mut().last_mismatch = Some(found),
        }
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
    Ok(())
}

/// What differs between the tiers' answers and the acknowledged totals (`None`: nothing).
async fn mismatch(client: &HttpClient, world: &Totals, parts: &[Totals]) -> Option<String> {
    compare(client, world, parts).await.err()
}

/// `Err` names the first tier whose answer differs from the acknowledged totals.
async fn compare(client: &HttpClient, world: &Totals, parts: &[Totals]) -> Result<(), String> {
    let global = base_url(turmoil::lookup(GLOBAL));
    for counter in COUNTERS {
        let what = format!("global {counter}");
        let answer = read(client, &format!("{global}/counter/{counter}"), &what).await?;
        expect(&what, &answer["value"], world[counter])?;
        for (dc, part) in DATACENTERS.iter().zip(parts) {
            let what = format!("global {counter} part {dc}");
            expect(&what, &answer["datacenters"][*dc]["value"], part[counter])?;
        }
    }
    for (dc, part) in DATACENTERS.iter().zip(parts) {
        let aggregator = base_url(turmoil::lookup(aggregator_host(dc)));
        for counter in COUNTERS {
            // Each shard node answers its own slot, as durable as its disk made it.
            let mut sum = 0;
            for slot in 0..SHARDS_PER_DATACENTER {
                let shard = base_url(turmoil::lookup(shard_host(dc, slot)));
                let what = format!("{dc} shard {slot} {counter}");
                let answer = read(client, &format!("{shard}/counter/{counter}"), &what).await?;
                sum += value(&answer["value"]);
            }
            let what = format!("{dc} shards' own slots of {counter}");
            expect(&what, &serde_json::Value::from(sum), part[counter])?;
            let what = format!("{dc} aggregator {counter}");
            let answer = read(client, &format!("{aggregator}/counter/{counter}"), &what).await?;
            expect(&what, &answer["value"], part[counter])?;
        }
    }
    Ok(())
}

/// `Err` unless `got` is the value `want`.
fn expect(what: &str, got: &serde_json::Value, want: i64) -> Result<(), String> {
    let got = value(got);
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: {got} (want {want})"))
    }
}

/// A counter's value in an answer; a counter the tier has not heard of counts 0.
fn value(json: &serde_json::Value) -> i64 {
    json.as_i64().unwrap_or(0)
}

/// A read's JSON: a 200's, or `Null` for a 404 (a counter no one has reported: 0). Anything
/// else is not converged (a stale global aggregator answers 503): `Err` names `what` was read.
async fn read(client: &HttpClient, url: &str, what: &str) -> Result<serde_json::Value, String> {
    match client.get(url).await {
        Ok(answer) if answer.status == StatusCode::OK => Ok(answer.json()),
        Ok(answer) if answer.status == StatusCode::NOT_FOUND => Ok(serde_json::Value::Null),
        Ok(answer) => Err(format!("{what}: answered {}", answer.status)),
        Err(error) => Err(format!("{what}: {error}")),
    }
}
