//! `run`: a whole datacenter aggregator on a listener, until shutdown. The binary and the tests
//! call it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use geocount_model::Clock;
use geocount_model::role::aggregator_process;
use geocount_net::{Connector, HttpClient, Listener};
use geocount_sync::{Access, LiveRanking, Scans, start_pulling};

use crate::api;
use crate::config::AggregatorConfig;
use crate::metrics::PREFIX;
use crate::state::AggregatorState;

/// Starts pulling every shard of the datacenter and the global aggregator (connecting through
/// `connector`), and serves `listener` until `shutdown` completes; then stops the pullers and
/// drains requests. Time comes from `clock`.
pub async fn run<L: Listener>(
    config: AggregatorConfig,
    listener: L,
    clock: Arc<dyn Clock>,
    connector: Connector,
    shutdown: impl Future<Output = ()>,
) {
    let slot_names = config.slot_names();
    let limits = geocount_sync::http::serve_limits(&config.http);
    let process = aggregator_process(&config.datacenter);
    let access = Access::new(&config.auth, &process, config.certificates);
    let client = access.cluster_client(HttpClient::with_connector(
        Duration::from_millis(config.sync.timeout_ms),
        connector,
    ));
    let (replica, metrics, mut pullers) = start_pulling(
        slot_names.clone(),
        &config.sources(),
        client,
        clock.clone(),
        PREFIX,
    );
    // Set before the first pull can land: nothing has yielded to the pullers yet.
    replica.write().expect("replica lock").max_clock_skew_ms = config.sync.max_clock_skew_ms;
    replica.write().expect("replica lock").set_byte_bound(
        "aggregator.datacenter_max_state_bytes",
        config.max_state_bytes,
    );
    // One datacenter: every slot in one group. What the pullers merged already is indexed too.
    replica.write().expect("replica lock").copies.index_top(
        vec![0; slot_names.len()],
        LiveRanking {
            seconds: config.trending.window_seconds,
            now: clock.now_unix_ms() / 1000,
            hold_from: config.trending.smallest_threshold().map(i128::from),
        },
    );
    pullers.keep_ranked(&replica, clock.clone());
    tracing::info!(addr = %config.listen, datacenter = %config.datacenter, "serving");
    let scans = Scans::new(config.http.max_concurrent_scans);
    let state = Arc::new(AggregatorState {
        config,
        scans,
        slot_names,
        replica,
        clock,
        metrics,
        router: api::router(),
        access,
    });
    let handler = move |request| api::handle(state.clone(), request);
    pullers.serve(listener, limits, handler, shutdown).await;
    tracing::info!("stopped");
}
