//! The admin client of `Scenario::Lifecycle`: it creates the counters, changes their lives while
//! the clients write and the faults go on (resets, deletes, expiries set by `PATCH` and by
//! writes carrying `ttlSeconds`), then makes each counter's last change once the cluster has
//! settled, waits until every slot has learned of it, and lets the writers write again
//! ([`Quiet`]). What the last changes left ([`Left`]) and which counters were written again say
//! what every tier must show at the end ([`crate::ledger::Ledger::existence`]).
//!
//! The rule every tier reads by (docs/architecture.md, "Reset, delete and expiry"): a reset or
//! delete of generation g wipes, in each slot, every write the slot applied before it learned
//! of g, and none it applied after; an expiry is a delete of generation `expiresAtMs` that
//! every tier makes by its own clock.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use geocount_model::HlcTimestamp;
use geocount_net::{Answer, ClientError, HttpClient};
use hyper::{Method, StatusCode};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::cluster::{DATACENTERS, SHARDS_PER_DATACENTER, base_url, shard_host};
use crate::ledger::{COUNTERS, Change, Changed, Left, Quiet, SharedLedger};
use crate::seams::sim_connector;
use crate::workload::{OBSERVE_EVERY, wait_for};

/// The `ttlSeconds` of every expiry the admin client sets: short, so expiries pass within the
/// faults.
pub const TTL_SECS: u64 = 1;

/// How long the admin client waits for an answer (as long as the writers).
const ADMIN_TIMEOUT: Duration = Duration::from_millis(2_000);

/// The changes made while the faults go on are sent within this long of the start.
const CHANGES_UNTIL: Duration = Duration::from_millis(1_500);

/// How long the admin client waits for the shard nodes to agree, for a last change to be
/// answered, and for every slot to learn of the last changes, once the faults have healed.
const SETTLE_WITHIN: Duration = Duration::from_secs(10);

/// One change made while the faults go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// When, since the start.
    pub at: Duration,
    /// The datacenter of the shard node it is sent to.
    pub datacenter: usize,
    /// The counter.
    pub counter: &'static str,
    /// What.
    pub change: Change,
}

/// What the admin client does in a run, drawn from the seed.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The changes made while the faults go on, by time.
    pub changes: Vec<Planned>,
    /// Each counter's last change: one counter is reset, one deleted, one given an expiry.
    pub last: Vec<(&'static str, Change)>,
    /// The counters written again after their last changes: the reset one always (its value
    /// after the reset is checked exactly), each other one half the time (a write makes a
    /// deleted or expired counter again, from zero).
    pub again: Vec<&'static str>,
    /// The seed of the admin client's own choices (which shard node it asks).
    pub seed: u64,
}

impl Plan {
    /// Draws a plan from `rng`.
    pub fn draw(rng: &mut StdRng) -> Self {
        let until = CHANGES_UNTIL.as_millis() as u64;
        let mut changes: Vec<Planned> = (0..rng.random_range(4..=7))
            .map(|_| Planned {
                at: Duration::from_millis(rng.random_range(100..=until)),
                datacenter: rng.random_range(0..DATACENTERS.len()),
                counter: COUNTERS[rng.random_range(0..COUNTERS.len())],
                change: match rng.random_range(0..10) {
                    0..=2 => Change::Reset,
                    3 | 4 => Change::Delete,
                    5 | 6 => Change::Expire,
                    7 => Change::KeepForever,
                    _ => Change::WriteWithTtl,
                },
            })
            .collect();
        changes.sort_by_key(|planned| planned.at);
        let mut last = [Change::Reset, Change::Delete, Change::Expire];
        last.shuffle(rng);
        let last: Vec<_> = COUNTERS.into_iter().zip(last).collect();
        let again = (last.iter())
            .filter(|(_, change)| *change == Change::Reset || rng.random_bool(0.5))
            .map(|(counter, _)| *counter)
            .collect();
        Self {
            changes,
            last,
            again,
            seed: rng.random(),
        }
    }
}

/// Runs `plan`: creates the counters; makes the planned changes, each once, at their times;
/// waits until the `writers` are done with their first writes, the driver has healed every
/// fault, every expiry set has passed on every clock (`max_clock_skew` apart) and every shard
/// node's own read of each counter agrees (all 404, or all of one generation); makes each
/// counter's last change and records what it left; waits until every shard node's own read
/// shows it ([`Left`]); then lets the writers write again. A failure is recorded in the ledger
/// and ends the run's lifecycle early (the writers write nothing more).
pub async fn admin(
    plan: Plan,
    writers: usize,
    max_clock_skew: Duration,
    ledger: SharedLedger,
) -> turmoil::Result {
    let mut admin = Admin {
        client: HttpClient::with_connector(ADMIN_TIMEOUT, sim_connector()),
        rng: StdRng::seed_from_u64(plan.seed),
        ledger: ledger.clone(),
    };
    let outcome = admin.run(&plan, writers, max_clock_skew).await;
    let mut ledger = ledger.borrow_mut();
    if let Err(error) = outcome {
        ledger.lifecycle_error = Some(error);
        ledger.counters_created = true;
        ledger.quiet.get_or_insert(Quiet {
            since: now(),
            counters: Vec::new(),
        });
    }
    Ok(())
}

fn now() -> Duration {
    turmoil::sim_elapsed().expect("inside the simulation")
}

struct Admin {
    client: HttpClient,
    rng: StdRng,
    ledger: SharedLedger,
}

impl Admin {
    async fn run(
        &mut self,
        plan: &Plan,
        writers: usize,
        max_clock_skew: Duration,
    ) -> Result<(), String> {
        let deadline = now() + SETTLE_WITHIN;
        for counter in COUNTERS {
            let body = format!("{{\"id\": \"{counter}\"}}");
            loop {
                let answer = self.send(Method::POST, 0, "/counter", body.clone()).await;
                match answer.map(|a| a.status) {
                    Ok(StatusCode::CREATED | StatusCode::CONFLICT) => break,
                    _ if now() > deadline => return Err(format!("{counter} was never created")),
                    _ => self.back_off().await,
                }
            }
        }
        self.ledger.borrow_mut().counters_created = true;

        for planned in &plan.changes {
            if let Some(wait) = planned.at.checked_sub(now()) {
                tokio::time::sleep(wait).await;
            }
            let (counter, change) = (planned.counter, planned.change);
            let answer = self.change(planned.datacenter, counter, change).await;
            if let Ok(answer) = &answer {
                let status = answer.status;
                if status.is_client_error() && status != StatusCode::NOT_FOUND {
                    return Err(refused(counter, change, answer));
                }
            }
        }
        // An expiry set by the last change passes by then on every clock.
        let expired = now() + Duration::from_secs(TTL_SECS) + max_clock_skew;
        wait_for(&self.ledger, |l| {
            l.first_batches_done == writers && l.first_healed_at.is_some()
        })
        .await;
        if let Some(wait) = expired.checked_sub(now()) {
            tokio::time::sleep(wait).await;
        }
        // Every node's description of each counter is the same one (all 404, or all of one
        // generation, and every answer a read's), so the last change, made at any node, is
        // newer than every earlier one everywhere.
        let deadline = now() + SETTLE_WITHIN;
        self.until(
            deadline,
            "the shard nodes agreed on every counter",
            |views| {
                let mut disagreeing = None;
                for (counter, views) in views {
                    let unknown = views.iter().any(|view| matches!(view, View::Unknown(_)));
                    if unknown || views.iter().any(|view| view != &views[0]) {
                        disagreeing = Some(format!("{counter}: {views:?}"));
                    }
                }
                disagreeing
            },
        )
        .await?;

        let mut left = BTreeMap::new();
        for &(counter, change) in &plan.last {
            left.insert(counter, self.last_change(counter, change).await?);
        }
        self.ledger.borrow_mut().left = left.clone();
        let deadline = now() + SETTLE_WITHIN;
        self.until(
            deadline,
            "every slot learned of the last changes",
            |views| {
                let mut behind = None;
                for (counter, views) in views {
                    let want = match left[counter] {
                        Left::Live(generation) => View::Generation(generation),
                        Left::Gone | Left::Expiring(_) => View::Gone,
                    };
                    if views.iter().any(|view| *view != want) {
                        behind = Some(format!("{counter}: {views:?} (want {want:?})"));
                    }
                }
                behind
            },
        )
        .await?;
        self.ledger.borrow_mut().quiet = Some(Quiet {
            since: now(),
            counters: plan.again.clone(),
        });
        Ok(())
    }

    /// Makes `change` of `counter` at a shard node of datacenter `datacenter`, until it is
    /// answered (200, or 404 for a counter already gone); returns what it left.
    async fn last_change(&mut self, counter: &'static str, change: Change) -> Result<Left, String> {
        let datacenter = self.rng.random_range(0..DATACENTERS.len());
        let deadline = now() + SETTLE_WITHIN;
        loop {
            match self.change(datacenter, counter, change).await {
                Ok(answer) if answer.status == StatusCode::OK => {
                    return left_by(counter, change, &answer.json());
                }
                Ok(answer) if answer.status == StatusCode::NOT_FOUND => return Ok(Left::Gone),
                Ok(answer) if answer.status.is_client_error() => {
                    return Err(refused(counter, change, &answer));
                }
                _ if now() > deadline => {
                    return Err(format!(
                        "the last {change:?} of {counter} was never answered"
                    ));
                }
                _ => self.back_off().await,
            }
        }
    }

    /// Sends `change` of `counter` once to a shard node of datacenter `datacenter`, and
    /// records it and its answer.
    async fn change(
        &mut self,
        datacenter: usize,
        counter: &'static str,
        change: Change,
    ) -> Result<Answer, ClientError> {
        let ttl = format!("\"ttlSeconds\": {TTL_SECS}");
        let (method, path, body) = match change {
            Change::Reset => (
                Method::POST,
                format!("/counter/{counter}/reset"),
                String::new(),
            ),
            Change::Delete => (Method::DELETE, format!("/counter/{counter}"), String::new()),
            Change::Expire => (
                Method::PATCH,
                format!("/counter/{counter}"),
                format!("{{{ttl}}}"),
            ),
            Change::KeepForever => (
                Method::PATCH,
                format!("/counter/{counter}"),
                "{\"ttlSeconds\": null}".to_owned(),
            ),
            Change::WriteWithTtl => {
                let delta = self.rng.random_range(1..=9);
                let path = format!("/counter/{counter}/write?op=INCREMENT");
                (
                    Method::PATCH,
                    path,
                    format!("{{\"delta\": {delta}, {ttl}}}"),
                )
            }
        };
        let at = now();
        let answer = self.send(method, datacenter, &path, body).await;
        self.ledger.borrow_mut().changes.push(Changed {
            at,
            datacenter,
            counter,
            change,
            status: answer.as_ref().ok().map(|a| a.status.as_u16()),
        });
        answer
    }

    /// Sends a request to a random shard node of datacenter `datacenter`.
    async fn send(
        &mut self,
        method: Method,
        datacenter: usize,
        path: &str,
        body: String,
    ) -> Result<Answer, ClientError> {
        let slot = self.rng.random_range(0..SHARDS_PER_DATACENTER);
        let shard = base_url(turmoil::lookup(shard_host(DATACENTERS[datacenter], slot)));
        let headers: &[(&str, &str)] = if body.is_empty() {
            &[]
        } else {
            &[("content-type", "application/json")]
        };
        let url = format!("{shard}{path}");
        self.client
            .send(method, &url, headers, Bytes::from(body))
            .await
    }

    async fn back_off(&mut self) {
        let backoff = Duration::from_millis(self.rng.random_range(20..=150));
        tokio::time::sleep(backoff).await;
    }

    /// Reads every shard node's own slot of every counter every [`OBSERVE_EVERY`] until
    /// `pending` finds nothing to wait for in what they show, or `deadline` passes (an error
    /// naming `what` and what was last pending).
    async fn until(
        &self,
        deadline: Duration,
        what: &str,
        pending: impl Fn(&BTreeMap<&'static str, Vec<View>>) -> Option<String>,
    ) -> Result<(), String> {
        loop {
            let views = self.views().await;
            let Some(found) = pending(&views) else {
                return Ok(());
            };
            if now() > deadline {
                return Err(format!("not {what} within {SETTLE_WITHIN:?}: {found}"));
            }
            tokio::time::sleep(OBSERVE_EVERY).await;
        }
    }

    /// What every shard node's own read of each counter shows, by counter.
    async fn views(&self) -> BTreeMap<&'static str, Vec<View>> {
        let mut views = BTreeMap::new();
        for counter in COUNTERS {
            let mut shown = Vec::new();
            for dc in DATACENTERS {
                for slot in 0..SHARDS_PER_DATACENTER {
                    let shard = base_url(turmoil::lookup(shard_host(dc, slot)));
                    let answer = self.client.get(&format!("{shard}/counter/{counter}")).await;
                    shown.push(View::of(answer));
                }
            }
            views.insert(counter, shown);
        }
        views
    }
}

/// What a shard node's own read of a counter shows of its life.
#[derive(Debug, Clone, PartialEq, Eq)]
enum View {
    /// It exists, its slot counting from this generation.
    Generation(HlcTimestamp),
    /// 404: deleted or expired (every counter was created).
    Gone,
    /// Any other answer, or none.
    Unknown(String),
}

impl View {
    fn of(answer: Result<Answer, ClientError>) -> Self {
        match answer {
            Ok(answer) if answer.status == StatusCode::OK => {
                match serde_json::from_value(answer.json()["generation"].clone()) {
                    Ok(generation) => View::Generation(generation),
                    Err(error) => View::Unknown(format!("no generation: {error}")),
                }
            }
            Ok(answer) if answer.status == StatusCode::NOT_FOUND => View::Gone,
            Ok(answer) => View::Unknown(answer.status.to_string()),
            Err(error) => View::Unknown(error.to_string()),
        }
    }
}

/// What a last `change` of `counter` answered with its new `description` left of it.
fn left_by(counter: &str, change: Change, description: &serde_json::Value) -> Result<Left, String> {
    let deleted = description["deleted"].as_bool();
    let expires = description["expiresAtMs"].as_u64();
    let generation = serde_json::from_value(description["generation"].clone());
    match (change, deleted, expires, generation) {
        // Every expiry set before has passed: a live counter has none left.
        (Change::Reset, Some(false), None, Ok(generation)) => Ok(Left::Live(generation)),
        (Change::Delete, Some(true), _, _) => Ok(Left::Gone),
        (Change::Expire, Some(false), Some(expires), _) => Ok(Left::Expiring(expires)),
        _ => Err(format!(
            "the last {change:?} of {counter} answered {description}"
        )),
    }
}

/// The error of a `change` of `counter` refused with `answer`, a 4xx the protocol does not
/// give it.
fn refused(counter: &str, change: Change, answer: &Answer) -> String {
    format!(
        "{change:?} of {counter} answered {}: {}",
        answer.status,
        String::from_utf8_lossy(&answer.body)
    )
}
