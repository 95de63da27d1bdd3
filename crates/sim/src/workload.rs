//! What the simulated clients do: write with idempotency keys until every write is acknowledged
//! or its key's retention is nearly over ([`writer`]), retry acknowledged writes with their
//! keys, and, once the faults have healed, watch every tier until it shows totals the run
//! allows ([`observer`]). Both record into the run's [`crate::ledger::Ledger`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use geocount_net::{Answer, HttpClient};
use hyper::{Method, StatusCode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::cluster::{
    DATACENTERS, SHARDS_PER_DATACENTER, aggregator_host, aggregator_partitions, base_url,
    global_host, global_partitions, holds, shard_host,
};
use crate::ledger::{
    Allowed, BOUNDED, COUNTERS, Ledger, SharedLedger, Shown, Write, bounded, clamped,
};
use crate::seams::sim_connector;

/// How long a client waits for an answer before it retries (longer than a forward's timeout,
/// so a forwarded write answers 504 before the client gives up on it).
const CLIENT_TIMEOUT: Duration = Duration::from_millis(2_000);

/// How often the observer reads every tier.
pub const OBSERVE_EVERY: Duration = Duration::from_millis(10);

/// How long before its key's retention ends a client stops retrying a write: a retry after the
/// key expired would be a new write.
const RETENTION_MARGIN: Duration = Duration::from_secs(1);

/// What a writing client does.
#[derive(Debug, Clone, Copy)]
pub struct Writing {
    /// How many writes.
    pub writes: usize,
    /// The longest pause between two writes.
    pub max_gap: Duration,
    /// `shard.idempotency_retention_secs`: a write is retried only this long (less a margin)
    /// after its first request, then its outcome stays unknown.
    pub retention: Duration,
    /// Whether to send every acknowledged write again with its key once all are written
    /// (within the retention): each must be answered 200 and change nothing.
    pub retry_acknowledged: bool,
    /// Writes made again after the last changes of the counters' lives (`Scenario::Lifecycle`;
    /// zero for none): the client first waits for the counters to be created, and after its
    /// first `writes` for every slot to learn of those changes ([`crate::ledger::Quiet`]).
    pub again: usize,
    /// Whether half the writes go to the [`BOUNDED`] counters (`Scenario::Bounded`): the client
    /// first waits for them to be created.
    pub bounded: bool,
}

fn now() -> Duration {
    turmoil::sim_elapsed().expect("inside the simulation")
}

/// Waits until `ready` holds of the ledger, looking every [`OBSERVE_EVERY`].
pub async fn wait_for(ledger: &SharedLedger, ready: impl Fn(&Ledger) -> bool) {
    while !ready(&ledger.borrow()) {
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
}

/// One keyed write, as a client sends it.
struct Request {
    counter: &'static str,
    delta: i64,
    key: String,
    url_path: String,
    body: Bytes,
    /// When its first request was sent.
    first_sent: Duration,
}

/// How one write's requests ended.
enum Outcome {
    /// Answered 200 by the request sent at `sent`.
    Acknowledged { sent: Duration },
    /// Refused with a 409 naming the bound it would pass, by the request sent at `sent`.
    PastBound { sent: Duration },
    /// Refused with another 4xx: the protocol is broken.
    Refused,
    /// Retried until its key's retention was nearly over.
    GaveUp { sent: Duration },
}

/// Writes `writing.writes` random deltas to [`COUNTERS`] (half of them to [`BOUNDED`] ones in a
/// bounded run) through the shard nodes of datacenter `datacenter`, each with its own
/// idempotency key, retrying each (against the next node of the same datacenter) until it is
/// acknowledged, refused past a bound, or its key's retention is nearly over; then, if
/// asked, sends every acknowledged write again with its key; then, if asked, writes
/// `writing.again` more to the counters written again after their last lifecycle changes.
pub async fn writer(
    datacenter: usize,
    writing: Writing,
    seed: u64,
    ledger: SharedLedger,
) -> turmoil::Result {
    let mut rng = StdRng::seed_from_u64(seed);
    let client = HttpClient::with_connector(CLIENT_TIMEOUT, sim_connector());
    let dc = DATACENTERS[datacenter];
    let shards: Vec<String> = (0..SHARDS_PER_DATACENTER)
        .map(|slot| base_url(turmoil::lookup(shard_host(dc, slot))))
        .collect();
    let batch = Batch {
        datacenter,
        client: &client,
        shards: &shards,
        max_gap: writing.max_gap,
        retry_within: writing.retention.saturating_sub(RETENTION_MARGIN),
        ledger: &ledger,
        bounded: writing.bounded,
    };
    if writing.again > 0 || writing.bounded {
        wait_for(&ledger, |l| l.counters_created).await;
    }
    let acknowledged = batch.write(0..writing.writes, &COUNTERS, &mut rng).await;
    if writing.retry_acknowledged {
        for request in &acknowledged {
            if now() >= request.first_sent + batch.retry_within {
                continue;
            }
            let (outcome, _) = batch.send_until_answered(request, &mut rng).await;
            if let Outcome::Acknowledged { .. } = outcome {
                ledger.borrow_mut().retried += 1;
            }
        }
    }
    if writing.again > 0 {
        ledger.borrow_mut().first_batches_done += 1;
        wait_for(&ledger, |l| l.quiet.is_some()).await;
        let quiet = ledger.borrow().quiet.clone().expect("waited for");
        if !quiet.counters.is_empty() {
            let again = writing.writes..writing.writes + writing.again;
            batch.write(again, &quiet.counters, &mut rng).await;
        }
    }
    ledger.borrow_mut().writers_done += 1;
    Ok(())
}

/// How a writing client sends its writes.
struct Batch<'a> {
    datacenter: usize,
    client: &'a HttpClient,
    /// The base URLs of its datacenter's shard nodes.
    shards: &'a [String],
    max_gap: Duration,
    /// How long after its first request a write is retried.
    retry_within: Duration,
    ledger: &'a SharedLedger,
    /// Whether half the writes go to the [`BOUNDED`] counters instead of `counters`.
    bounded: bool,
}

impl Batch<'_> {
    /// Writes writes number `numbers` (each keyed by its number) to random ones of `counters`,
    /// each after a random pause, recording each in the ledger; returns the acknowledged ones.
    async fn write(
        &self,
        numbers: std::ops::Range<usize>,
        counters: &[&'static str],
        rng: &mut StdRng,
    ) -> Vec<Request> {
        let dc = DATACENTERS[self.datacenter];
        let mut acknowledged = Vec::new();
        for n in numbers {
            tokio::time::sleep(self.max_gap.mul_f64(rng.random::<f64>())).await;
            let counter = match self.bounded && rng.random_bool(0.5) {
                true => BOUNDED[rng.random_range(0..BOUNDED.len())].id,
                false => counters[rng.random_range(0..counters.len())],
            };
            let delta = delta(counter, rng);
            let (op, magnitude) = if delta < 0 {
                ("DECREMENT", -delta)
            } else {
                ("INCREMENT", delta)
            };
            let request = Request {
                counter,
                delta,
                key: format!("{dc}-{n}"),
                url_path: format!("/counter/{counter}/write?op={op}"),
                body: Bytes::from(format!("{{\"delta\": {magnitude}}}")),
                first_sent: now(),
            };
            let (outcome, attempts) = self.send_until_answered(&request, rng).await;
            let write = |sent| Write {
                datacenter: self.datacenter,
                counter,
                delta,
                attempts,
                sent,
                at: now(),
            };
            match outcome {
                Outcome::Acknowledged { sent } => {
                    self.ledger.borrow_mut().acks.push(write(sent));
                    acknowledged.push(request);
                }
                Outcome::GaveUp { sent } => self.ledger.borrow_mut().unknown.push(write(sent)),
                Outcome::PastBound { sent } => self.ledger.borrow_mut().refused.push(write(sent)),
                Outcome::Refused => {}
            }
        }
        acknowledged
    }

    /// Sends `request` until a node answers it 200 or 4xx, or until `retry_within` has passed
    /// since its first request; returns how it ended and how many requests it took.
    async fn send_until_answered(&self, request: &Request, rng: &mut StdRng) -> (Outcome, u32) {
        let (client, shards, ledger) = (self.client, self.shards, self.ledger);
        let retry_within = self.retry_within;
        let headers = [
            ("idempotency-key", request.key.as_str()),
            ("content-type", "application/json"),
        ];
        let mut node = rng.random_range(0..shards.len());
        let mut attempts = 0u32;
        loop {
            let sent = now();
            if attempts > 0 && sent >= request.first_sent + retry_within {
                return (Outcome::GaveUp { sent }, attempts);
            }
            attempts += 1;
            let url = format!("{}{}", shards[node], request.url_path);
            match client
                .send(Method::PATCH, &url, &headers, request.body.clone())
                .await
            {
                Ok(answer) if answer.status == StatusCode::OK => {
                    return (Outcome::Acknowledged { sent }, attempts);
                }
                Ok(answer) if answer.status == StatusCode::CONFLICT => {
                    let bad = match bounded(request.counter) {
                        Some(bounds) => bounds.bad_refusal(request.delta, &answer.json()),
                        None => Some(format!("a 409 for {}", request.counter)),
                    };
                    if let Some(bad) = bad {
                        ledger.borrow_mut().protocol_errors.push(bad);
                        return (Outcome::Refused, attempts);
                    }
                    return (Outcome::PastBound { sent }, attempts);
                }
                Ok(answer) if answer.status.is_client_error() => {
                    let error = format!(
                        "{}: {} {:+} answered {}: {}",
                        request.key,
                        request.counter,
                        request.delta,
                        answer.status,
                        String::from_utf8_lossy(&answer.body)
                    );
                    ledger.borrow_mut().protocol_errors.push(error);
                    return (Outcome::Refused, attempts);
                }
                // A node restoring its lost slot takes no writes until the slot is durable; any
                // other refusal (503/504/500), no answer, or a cut connection leaves the outcome
                // unknown, and the key makes the retry safe.
                answer => {
                    if let Ok(answer) = &answer {
                        let mut ledger = ledger.borrow_mut();
                        ledger.restoring_refusals += u64::from(Refusal::Restoring.is(answer));
                        ledger.keys_unknown_refusals += u64::from(Refusal::KeysUnknown.is(answer));
                        ledger.fenced_refusals += u64::from(Refusal::Fenced.is(answer));
                    }
                    node = (node + 1) % shards.len();
                    let backoff = Duration::from_millis(rng.random_range(20..=150));
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    }
}

/// A random delta for `counter`: increments and decrements, mostly increments, but either way as
/// often for a counter bounded both ways (so that its total meets both bounds).
fn delta(counter: &str, rng: &mut StdRng) -> i64 {
    match bounded(counter) {
        Some(b) if b.min.is_some() && b.max.is_some() => match rng.random_bool(0.5) {
            true => rng.random_range(1..=9),
            false => -rng.random_range(1..=9),
        },
        _ => match rng.random_range(0..4) {
            0 => -rng.random_range(1..=5),
            _ => rng.random_range(1..=9),
        },
    }
}

/// Why a node refused a write, as its answer (503 its own, or the 504 of the node that
/// forwarded the write to it, which says what it was answered) names it.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// The node restores its slot.
    Restoring,
    /// Its slot was restored without a whole copy of its keys, and the key may be a lost one.
    KeysUnknown,
    /// The node was fenced by a failed fsync.
    Fenced,
}

impl Refusal {
    /// Whether `answer` is this refusal.
    fn is(self, answer: &Answer) -> bool {
        let says = match self {
            Refusal::Restoring => "restoring slot",
            Refusal::KeysUnknown => "without a whole copy of its idempotency keys",
            Refusal::Fenced => "takes no more writes until it is restarted",
        };
        answer.status.is_server_error() && String::from_utf8_lossy(&answer.body).contains(says)
    }
}

/// Waits until every writer is done and the driver has healed every fault, then reads every
/// tier every [`OBSERVE_EVERY`] until all agree on totals the run allows ([`Ledger::allowed`]:
/// the shard nodes' own slots and every replica of each datacenter aggregator holding the
/// counter their datacenter's part, every global replica holding it the world's sum and each
/// datacenter's part, answering as fresh) and on which counters exist
/// ([`Ledger::existence`]), or `give_up_after` passes.
pub async fn observer(
    writers: usize,
    give_up_after: Duration,
    ledger: SharedLedger,
) -> turmoil::Result {
    wait_for(&ledger, |l| {
        l.writers_done == writers && l.healed_at.is_some()
    })
    .await;
    let (settled_at, allowed, existence, counters) = {
        let mut ledger = ledger.borrow_mut();
        let last = (ledger.acks.iter().chain(&ledger.unknown))
            .map(|w| w.at)
            .max()
            .unwrap_or_default();
        let settled = last.max(ledger.healed_at.expect("checked above"));
        ledger.settled_at = Some(settled);
        (
            settled,
            ledger.allowed(),
            ledger.existence(),
            ledger.counters(),
        )
    };
    let client = HttpClient::with_connector(CLIENT_TIMEOUT, sim_connector());
    while now() < settled_at + give_up_after {
        match compare(&client, &counters, &allowed, &existence).await {
            Ok(shown) => {
                let mut ledger = ledger.borrow_mut();
                ledger.converged_at = Some(now());
                ledger.shown = shown;
                break;
            }
            Err(found) => ledger.borrow_mut().last_mismatch = Some(found),
        }
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
    ledger.borrow_mut().observed = true;
    Ok(())
}

/// What the tiers show when every one of them agrees on totals `allowed` allows, and shows
/// each counter `existence` names as existing (200) or gone (404) as it says; `Err` names the
/// first tier whose answer does not. A counter `existence` does not name may be unheard of at
/// a tier (404: 0). Each shard node answers its own slot, as durable as its disk made it.
/// World totals of a bounded counter are read clamped to its bounds (a datacenter's part is
/// no world total and may be past them), and every shard node's world read of it must show the
/// world's total too.
async fn compare(
    client: &HttpClient,
    counters: &[&'static str],
    allowed: &Allowed,
    existence: &BTreeMap<&'static str, bool>,
) -> Result<Shown, String> {
    // The shard nodes first, so that a mismatch names the tier that differs from the rule.
    let mut shown = Shown::new();
    for &counter in counters {
        let exists = existence.get(counter).copied();
        for (d, dc) in DATACENTERS.iter().enumerate() {
            let mut sum = 0;
            for slot in 0..SHARDS_PER_DATACENTER {
                let shard = base_url(turmoil::lookup(shard_host(dc, slot)));
                let what = format!("{dc} shard {slot} {counter}");
                let url = format!("{shard}/counter/{counter}");
                sum += value(&read(client, &url, &what, exists).await?["value"]);
            }
            let values = &allowed[&(d, counter)];
            if exists != Some(false) && !values.contains(&sum) {
                return Err(format!(
                    "{dc} shards' own slots of {counter}: {sum} (want {})",
                    one_of(values)
                ));
            }
            shown.insert((d, counter), sum);
        }
    }
    for &counter in counters {
        let exists = existence.get(counter).copied();
        for (d, dc) in DATACENTERS.iter().enumerate() {
            for (replica, held) in aggregator_partitions(dc).iter().enumerate() {
                if !holds(held, counter) {
                    continue;
                }
                let aggregator = base_url(turmoil::lookup(aggregator_host(dc, replica)));
                let what = format!("{dc} aggregator@{replica} {counter}");
                let url = format!("{aggregator}/counter/{counter}");
                let answer = read(client, &url, &what, exists).await?;
                // A datacenter's part is not the world total: never clamped.
                expect(&what, &answer["value"], shown[&(d, counter)])?;
            }
        }
        for (replica, held) in global_partitions().iter().enumerate() {
            if !holds(held, counter) {
                continue;
            }
            let global = base_url(turmoil::lookup(global_host(replica)));
            let what = format!("global@{replica} {counter}");
            let url = format!("{global}/counter/{counter}");
            let answer = read(client, &url, &what, exists).await?;
            let mut sum = 0;
            for (d, dc) in DATACENTERS.iter().enumerate() {
                let part = shown[&(d, counter)];
                let value = &answer["datacenters"][*dc]["value"];
                expect(&format!("{what} part {dc}"), value, part)?;
                sum += part;
            }
            expect(&what, &answer["value"], clamped(counter, sum))?;
        }
        if bounded(counter).is_some() {
            let world: i64 = (0..DATACENTERS.len()).map(|d| shown[&(d, counter)]).sum();
            for dc in DATACENTERS {
                for slot in 0..SHARDS_PER_DATACENTER {
                    let shard = base_url(turmoil::lookup(shard_host(dc, slot)));
                    let what = format!("{dc} shard {slot} world {counter}");
                    let url = format!("{shard}/counter/{counter}/world");
                    let answer = read(client, &url, &what, exists).await?;
                    expect(&what, &answer["value"], clamped(counter, world))?;
                }
            }
        }
    }
    // A counter gone everywhere has no part to show.
    shown.retain(|(_, counter), _| existence.get(counter) != Some(&false));
    Ok(shown)
}

/// `values` as a want: the value, or "one of" them.
fn one_of(values: &BTreeSet<i64>) -> String {
    match values.iter().collect::<Vec<_>>().as_slice() {
        [one] => one.to_string(),
        many => format!("one of {many:?}"),
    }
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

/// A read's JSON: a 200's, or `Null` for a 404 (a counter no one has reported: 0). A 200 of
/// a counter `exists` says is gone, or a 404 of one it says exists, is a mismatch; anything
/// else is not converged (a stale global aggregator answers 503): `Err` names `what` was read.
async fn read(
    client: &HttpClient,
    url: &str,
    what: &str,
    exists: Option<bool>,
) -> Result<serde_json::Value, String> {
    match client.get(url).await {
        Ok(answer) if answer.status == StatusCode::OK && exists != Some(false) => Ok(answer.json()),
        Ok(answer) if answer.status == StatusCode::NOT_FOUND && exists != Some(true) => {
            Ok(serde_json::Value::Null)
        }
        Ok(answer) => {
            let want = match exists {
                Some(true) => " (want it to exist)",
                Some(false) => " (want 404: deleted or expired)",
                None => "",
            };
            Err(format!("{what}: answered {}{want}", answer.status))
        }
        Err(error) => Err(format!("{what}: {error}")),
    }
}
