//! `run`: the whole global aggregator on a listener, until shutdown. The binary and the tests
//! call it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use geocount_model::Clock;
use geocount_model::role::GLOBAL_PROCESS;
use geocount_net::{Connector, HttpClient, Listener};
use geocount_sync::{Access, LiveRanking, Scans, start_pulling};

use crate::api;
use crate::config::GlobalAggregatorConfig;
use crate::metrics::PREFIX;
use crate::state::GlobalState;

/// Starts pulling every datacenter aggregator (connecting through `connector`), and serves
/// `listener` until `shutdown` completes; then stops the pullers and drains requests. Time
/// comes from `clock`.
pub async fn run<L: Listener>(
    config: GlobalAggregatorConfig,
    listener: L,
    clock: Arc<dyn Clock>,
    connector: Connector,
    shutdown: impl Future<Output = ()>,
) {
    let sources = config.sources();
    let limits = geocount_sync::http::serve_limits(&config.http);
    let access = Access::new(&config.auth, GLOBAL_PROCESS, config.certificates);
    let client = access.cluster_client(HttpClient::with_connector(
        Duration::from_millis(config.sync.timeout_ms),
        connector,
    ));
    let (replica, metrics, mut pullers) =
        start_pulling(config.slot_names(), &sources, client, clock.clone(), PREFIX);
    // Set before the first pull can land: nothing has yielded to the pullers yet.
    replica.write().expect("replica lock").max_clock_skew_ms = config.sync.max_clock_skew_ms;
    replica
        .write()
        .expect("replica lock")
        .set_byte_bound("aggregator.global_max_state_bytes", config.max_state_bytes);
    // Each datacenter's slots in its own group, so /topk ranks each datacenter and the world.
    replica.write().expect("replica lock").copies.index_top(
        config.slot_datacenters(),
        LiveRanking {
            seconds: config.trending.window_seconds,
            now: clock.now_unix_ms() / 1000,
            hold_from: config.trending.smallest_threshold().map(i128::from),
        },
    );
    pullers.keep_ranked(&replica, clock.clone());
    tracing::info!(addr = %config.listen, datacenters = sources.len(), "serving");
    let scans = Scans::new(config.http.max_concurrent_scans);
    let state = Arc::new(GlobalState {
        scans,
        names: sources.into_iter().map(|source| source.name).collect(),
        slot_datacenters: config.slot_datacenters(),
        config,
        replica,
        clock,
        metrics,
        router: api::router(),
        access,
    });
    pullers
        .serve(
            listener,
            limits,
            move |request| api::handle(state.clone(), request),
            shutdown,
        )
        .await;
    tracing::info!("stopped");
}
