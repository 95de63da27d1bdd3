//! What the HTTP handlers of either tier share ([`Core`]): started once per process with the
//! pullers that fill its replica and the top-K index over it. Its stages:
//! - [`answer`]: the answers that do not depend on the tier (metrics, copies of a slot,
//!   `POST /sync`, the window of a read), each marked with the replica that gave it.
//! - [`rank`]: what a ranking asks, and its answer from the index or a scan.
//! - [`spread`]: partitions held by the tier's other replicas: reads redirected there, and
//!   rankings and sums merged from every group's part.
//! - [`sum`]: sums over an id prefix (`GET /aggregate`) and their parts.

pub mod answer;
pub mod rank;
pub mod spread;
pub mod sum;

pub use answer::REPLICA_HEADER;

use std::sync::Arc;
use std::time::Duration;

use geocount_http::Access;
use geocount_http::routing;
use geocount_model::Clock;
use geocount_net::{Connector, HttpClient, Listener};
use geocount_ranking::LiveRanking;

use crate::replica::{PullSource, Pullers, ReplicaMetrics, Scans, SharedReplica, start_pulling};
use crate::routes::Route;
use crate::settings::{Settings, SlotGroups};

/// What tells one tier from the other when it starts.
pub struct Tier<'a> {
    /// The process name it proves itself by (`geocount_model::tls`).
    pub process: &'a str,
    /// The sources it pulls.
    pub sources: &'a [PullSource],
    /// Its slots and their parts.
    pub groups: &'a SlotGroups,
    /// The config key of its byte bound, named when it is reached.
    pub byte_bound_key: &'static str,
    /// The prefix of its metric names.
    pub metrics_prefix: &'static str,
    /// The paths it answers.
    pub routes: &'a [(&'static str, Route)],
    /// How long its status routes wait for any one process below ([`crate::fanout`]).
    pub fanout_timeout: Duration,
}

/// What the HTTP handlers of either tier share.
pub struct Core {
    /// The settings it runs with.
    pub settings: Settings,
    /// The copies of its slots, fed by the pullers.
    pub replica: SharedReplica,
    /// The time seam.
    pub clock: Arc<dyn Clock>,
    /// The aggregator's metrics.
    pub metrics: ReplicaMetrics,
    /// The endpoints.
    pub router: matchit::Router<Route>,
    /// Who may call which route (`[auth]`).
    pub access: Access,
    /// The rankings that scan every counter, at most `http.max_concurrent_scans` at once.
    pub scans: Scans,
    /// Each source's name, by source index.
    pub source_names: Vec<String>,
    /// The client of the tier's other replicas, for their parts of a ranking.
    pub peers: HttpClient,
    /// How the status routes ask the tier below ([`crate::fanout`]).
    pub fanout: crate::fanout::Fanout,
}

/// Starts pulling `tier`'s sources (connecting through `connector`) into a replica indexed
/// for top-K by `tier.groups`; the pullers serve once the tier has its handler.
pub fn start(
    tier: Tier<'_>,
    settings: Settings,
    clock: Arc<dyn Clock>,
    connector: Connector,
) -> (Core, Pullers) {
    let access = Access::new(&settings.auth, tier.process, settings.certificates);
    let timeout = Duration::from_millis(settings.sync.timeout_ms);
    let peers = HttpClient::with_connector(timeout, connector.clone());
    let client = access.cluster_client(HttpClient::with_connector(timeout, connector.clone()));
    let (replica, metrics, mut pullers) = start_pulling(
        tier.groups.names.clone(),
        tier.sources,
        client,
        clock.clone(),
        tier.metrics_prefix,
    );
    {
        // Set while nothing has yielded to the pullers yet, so the first page merged obeys them.
        let mut held = replica.write().expect("replica lock");
        held.max_clock_skew_ms = settings.sync.max_clock_skew_ms;
        held.tombstone_retention_ms = settings.sync.tombstone_retention_secs.saturating_mul(1_000);
        held.set_byte_bound(tier.byte_bound_key, settings.max_state_bytes);
        held.partitions = settings.partitions.filter();
        // What the pullers merged already is indexed too.
        held.index_top(
            tier.groups.part_of.clone(),
            LiveRanking {
                seconds: settings.trending.window_seconds,
                now: clock.now_unix_ms() / 1000,
                hold_from: settings.trending.smallest_threshold().map(i128::from),
            },
        );
    }
    pullers.keep_ranked(&replica, clock.clone());
    let calls = metrics.fanout_calls.clone();
    let fanout = crate::fanout::Fanout::new(connector, tier.fanout_timeout, calls);
    let core = Core {
        peers,
        fanout,
        source_names: tier.sources.iter().map(|s| s.name.clone()).collect(),
        scans: Scans::new(settings.http.max_concurrent_scans),
        router: routing::router(tier.routes.iter().copied()),
        settings,
        replica,
        clock,
        metrics,
        access,
    };
    (core, pullers)
}

/// Serves `listener` with `handler` until `shutdown` completes; then stops the pullers and
/// drains requests.
pub async fn serve<L: Listener>(
    pullers: Pullers,
    settings: &Settings,
    listener: L,
    handler: impl geocount_net::Handler,
    shutdown: impl Future<Output = ()>,
) {
    let limits = geocount_http::routing::serve_limits(&settings.http);
    pullers.serve(listener, limits, handler, shutdown).await;
    tracing::info!("stopped");
}
