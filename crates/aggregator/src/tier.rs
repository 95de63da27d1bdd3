//! What both tiers run alike: the pullers that fill the replica, the top-K index over it, and
//! the answers that do not depend on the tier (metrics, copies of a slot, `POST /sync`,
//! ranking scans, the window of a read).

use std::sync::Arc;
use std::time::Duration;

use geocount_http::routing::{self, RequestError, WindowQuery};
use geocount_http::{Access, parse_top_query, parse_trending_query};
use geocount_model::Clock;
use geocount_model::wire::SlotFreshness;
use geocount_net::{Connector, HttpClient, Listener, Response, json_response};
use geocount_ranking::{Answer, LiveRanking, Ranked, Scope};
use geocount_sync::{answer_slot_copy, parse_copy_query};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use crate::error::AggregatorError;
use crate::ranking::Asked;
use crate::ranking::RankingRequest;
use crate::replica::{
    HeldCounter, PullSource, Pullers, Replica, ReplicaMetrics, Scans, ScansBusy, SharedReplica,
    serve_sync, start_pulling,
};
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

/// The rankings of what `asked` asks at `now_ms`, one per scope of `scopes`, from `replica`'s
/// index; or the scan that finds them.
pub fn rank(replica: &Replica, scopes: &[Scope], asked: &Asked, now_ms: u64) -> Answer {
    let mut index = replica.top_index().expect("indexed at start");
    let (prefix, k, min_value, window) = asked.ranking();
    let counters = replica.ranked_at(now_ms);
    index.rank(scopes, prefix, k, min_value, window, &counters)
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

/// What an aggregator holds, as its `/healthz` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Held {
    /// Counters with any copy.
    pub counters: usize,
    /// The bytes of its copies, as its byte bound counts them.
    pub state_bytes: u64,
    /// Its byte bound.
    pub max_state_bytes: u64,
    /// Once entries were refused past the bound: what to report, naming the setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_bound: Option<String>,
}

impl Held {
    /// What `replica` holds.
    pub fn of(replica: &Replica) -> Self {
        Self {
            counters: replica.copies().len(),
            state_bytes: replica.copies().bytes().held(),
            max_state_bytes: replica.copies().bytes().max(),
            over_bound: replica.over_bound(),
        }
    }
}

/// The header every aggregator answer carries: which replica of its tier answered.
pub const REPLICA_HEADER: &str = "geocount-replica";

/// A 200 answer's body with the replica that answered it.
#[derive(serde::Serialize)]
struct Answered<'a, T> {
    replica: usize,
    #[serde(flatten)]
    body: &'a T,
}

impl Core {
    /// `body` as a 200 JSON answer, saying which replica answered (`"replica": N`): each
    /// replica has its own staleness.
    pub fn answer<T: serde::Serialize>(&self, body: &T) -> Response {
        let replica = self.settings.replica;
        json_response(StatusCode::OK, &Answered { replica, body })
    }

    /// `response` with the [`REPLICA_HEADER`] of this replica.
    pub fn mark(&self, mut response: Response) -> Response {
        response.headers_mut().insert(
            REPLICA_HEADER,
            hyper::header::HeaderValue::from(self.settings.replica),
        );
        response
    }

    /// Prometheus text of its metrics at `now_ms`, in the format `headers` ask for.
    pub fn scrape(&self, now_ms: u64, headers: &hyper::HeaderMap) -> Response {
        let replica = self.replica.read().expect("replica lock");
        self.metrics.scrape(&replica, now_ms, headers)
    }

    /// The OpenAPI document `document` as its answer, rendered for this process's `[auth]`.
    pub fn openapi(&self, document: geocount_http::ApiDoc) -> Response {
        json_response(StatusCode::OK, &document.to_json(&self.access))
    }

    /// A page of the copy of `slot` (`query`: where from, how many), or `unknown` when it
    /// holds no such slot.
    pub fn slot_copy(
        &self,
        slot: String,
        query: Option<&str>,
        unknown: impl FnOnce(String) -> AggregatorError,
    ) -> Result<Response, AggregatorError> {
        let (from, limit) = parse_copy_query(query, self.settings.sync.page_entries)?;
        let copy = (self.replica.read().expect("replica lock")).slot_copy(&slot, from, limit);
        match copy {
            Some(copy) => Ok(answer_slot_copy(&copy)),
            None => Err(unknown(slot)),
        }
    }

    /// `POST /sync` answered as `name`, each page with the `freshness` of its slots.
    pub async fn sync(
        &self,
        request: Request<Incoming>,
        name: &str,
        now_ms: u64,
        freshness: impl FnOnce(&Replica) -> Vec<SlotFreshness>,
    ) -> Result<Response, RequestError> {
        let limit = self.settings.sync.page_entries;
        serve_sync(request, &self.replica, name, limit, now_ms, freshness).await
    }

    /// Refuses a `window` a read of `counter` cannot have: any for a unique counter, and one
    /// longer than the counter's window.
    pub fn check_window(
        &self,
        counter: &HeldCounter<'_>,
        window: Option<&WindowQuery>,
    ) -> Result<(), RequestError> {
        let Some(window) = window else {
            return Ok(());
        };
        if counter.is_unique() {
            return Err(routing::no_window_for_unique());
        }
        window.check(counter.window_seconds(self.settings.default_window_seconds))
    }

    /// The rankings `ask` gives at `now_ms`, or the scan it asks for, run off the runtime.
    pub async fn rank(
        &self,
        now_ms: u64,
        ask: impl FnOnce(&Replica) -> Answer,
    ) -> Result<Vec<Vec<Ranked>>, ScansBusy> {
        self.scans.rank(&self.replica, now_ms, ask).await
    }

    /// What the ranking `ranking` asks at route `route` (`/topk` or `/trending`); query keys
    /// of its own go to `other`, which returns whether it took them.
    pub fn asked(
        &self,
        route: Route,
        ranking: &RankingRequest,
        other: impl FnMut(&str, &str) -> Result<bool, RequestError>,
    ) -> Result<Asked, AggregatorError> {
        let at_secs = ranking.at_ms / 1000;
        if route == Route::TopK {
            return Ok(Asked::Top(parse_top_query(
                ranking.query(),
                at_secs,
                other,
            )?));
        }
        let prefix = parse_trending_query(ranking.query(), other)?;
        let trending = &self.settings.trending;
        let threshold = trending
            .threshold(&prefix)
            .map_err(AggregatorError::NoTrendingPrefix)?;
        let window = WindowQuery {
            seconds: trending.window_seconds,
            at: at_secs,
        };
        Ok(Asked::Trending(prefix, threshold, window))
    }
}
