//! How an aggregator's pullers feed its [`Replica`]: one puller per source, each merging what
//! it pulls through a [`ReplicaSink`] ([`merge_pulled`]) and counting it.

use std::future::Future;
use std::sync::Arc;

use geocount_model::Clock;
use geocount_model::wire::{SyncPage, SyncRequest};
use geocount_net::{Handler, HttpClient, Listener};
use tokio::task::JoinHandle;

use geocount_sync::{PageMerge, PullSink, spawn_puller};

use super::merge::merge_pulled;
use super::metrics::{PullCounters, ReplicaMetrics};
use super::source::PullSource;
use super::top::RANK_CHUNK;
use super::{Replica, SharedReplica};

/// Merges the pages pulled from one source into a [`Replica`].
pub struct ReplicaSink {
    pub(crate) replica: SharedReplica,
    pub(crate) source: usize,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) metrics: PullCounters,
}

impl PullSink for ReplicaSink {
    fn request(&self) -> SyncRequest {
        self.replica.read().expect("replica lock").sources[self.source].request()
    }

    fn apply(&self, page: SyncPage, sent_at_ms: u64) {
        let now_ms = self.clock.now_unix_ms();
        let intake = match merge_pulled(&self.replica, self.source, &page, sent_at_ms, now_ms) {
            Ok(intake) => intake,
            Err(error) => {
                let entries = page.slots.as_ref().map_or(0, |p| p.entries.len());
                self.metrics.refused(PageMerge {
                    refused_slot: entries,
                    ..PageMerge::default()
                });
                tracing::warn!(source = self.source, %error, "refused a pulled page");
                self.failed(error.to_string());
                return;
            }
        };
        self.metrics.refused(intake.merge);
        (self.metrics.descriptions_refused).inc_by(intake.descriptions_refused as u64);
        let merged_ms = self.clock.now_unix_ms();
        let seconds_since = |ms: u64| merged_ms.saturating_sub(ms) as f64 / 1000.0;
        let (pull_seconds, merge_seconds) = (seconds_since(sent_at_ms), seconds_since(now_ms));
        self.metrics.succeeded(
            self.source,
            intake.merge.changed,
            intake.descriptions,
            pull_seconds,
            merge_seconds,
        );
    }

    fn failed(&self, error: String) {
        tracing::debug!(source = self.source, %error, "pull failed");
        self.replica.write().expect("replica lock").sources[self.source].last_error = Some(error);
        self.metrics.failed(self.source);
    }
}

/// The running pullers of a replica; dropping this aborts them.
#[derive(Debug)]
pub struct Pullers(pub(crate) Vec<JoinHandle<()>>);

impl Pullers {
    /// Stops every puller at once (a pull in flight is abandoned; its page is never merged).
    pub fn abort(self) {
        drop(self);
    }

    /// Also, every [`geocount_ranking::RANK_INTERVAL`] until the pullers stop, moves the live window
    /// of `replica`'s top-K index on to `clock`'s second and ranks the counters merges marked,
    /// a chunk at a time: rankings then never wait for more than an interval's changes, and
    /// only hits timestamped ahead of the clock wait to enter the live window.
    pub fn keep_ranked(&mut self, replica: &SharedReplica, clock: Arc<dyn Clock>) {
        let replica = replica.clone();
        self.0.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(geocount_ranking::RANK_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let now_ms = clock.now_unix_ms();
                replica.read().expect("replica lock").advance_live(now_ms);
                while !replica
                    .read()
                    .expect("replica lock")
                    .rank_pending(RANK_CHUNK, now_ms)
                {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }

    /// Serves `handler` on `listener` under `limits` until `shutdown` completes: the pullers
    /// stop as soon as it does, then in-flight requests drain.
    pub async fn serve(
        self,
        listener: impl Listener,
        limits: geocount_net::ServeLimits,
        handler: impl Handler,
        shutdown: impl Future<Output = ()>,
    ) {
        let shutdown = async move {
            shutdown.await;
            self.abort();
        };
        geocount_net::serve_with_limits(listener, limits, handler, shutdown).await;
    }
}

impl Drop for Pullers {
    fn drop(&mut self) {
        for puller in &self.0 {
            puller.abort();
        }
    }
}

/// An aggregator's replica of the slots `slot_names` pulled from `sources`, with its metrics
/// (named `<metrics_prefix>_<name>`) and its running pullers ([`spawn_pullers`]).
pub fn start_pulling(
    slot_names: Vec<String>,
    sources: &[PullSource],
    client: HttpClient,
    clock: Arc<dyn Clock>,
    metrics_prefix: &str,
) -> (SharedReplica, ReplicaMetrics, Pullers) {
    let replica = Replica::new(slot_names, sources).shared();
    let names: Vec<String> = sources.iter().map(|source| source.name.clone()).collect();
    let metrics = ReplicaMetrics::new(metrics_prefix, &names);
    let pullers = spawn_pullers(&replica, sources, client, clock, &metrics);
    for source in sources {
        tracing::info!(source = %source.name, address = %source.address, "pulling");
    }
    (replica, metrics, pullers)
}

/// Starts one puller per source: `sources[i]` feeds `replica.sources[i]` (the replica was made
/// from the same list) and is counted as source `i` in `metrics`. A pull that has not answered
/// within `client`'s timeout fails, so a dead or stopped source only grows its own staleness.
pub fn spawn_pullers(
    replica: &SharedReplica,
    sources: &[PullSource],
    client: HttpClient,
    clock: Arc<dyn Clock>,
    metrics: &ReplicaMetrics,
) -> Pullers {
    let handles = sources
        .iter()
        .enumerate()
        .map(|(index, source)| {
            let sink = ReplicaSink {
                replica: replica.clone(),
                source: index,
                clock: clock.clone(),
                metrics: metrics.pulls.clone(),
            };
            spawn_puller(
                source.address.clone(),
                source.interval,
                client.clone(),
                clock.clone(),
                Arc::new(sink),
            )
        })
        .collect();
    Pullers(handles)
}
