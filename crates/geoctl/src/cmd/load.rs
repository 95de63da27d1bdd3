//! `geoctl load`: drives writes at a cluster and measures what it does with them.
//!
//! `concurrency` workers send writes with random deltas (mostly increments, some decrements)
//! to the counters `<prefix>-0..N` (uniform or Zipf), through the single-write path
//! (`PATCH /counter/{id}/write`) or the batched path (postcard `POST /batch`), taking turns over
//! every shard node of every datacenter and sent to the node owning each write's slot, or to
//! the node whose turn it is ([`crate::load::route`]), each node's batches filled up to the batch
//! size before they are sent ([`crate::load::fill`]); at a target rate paced globally
//! ([`crate::load::pacing`]) or as fast as they can. Every write carries its own idempotency
//! key, and a failed request is retried once with the same keys ([`crate::load::send`]).
//!
//! Meanwhile a probe writes +1 to a fresh counter every 100 ms and times how long the global
//! aggregator takes to show it ([`crate::load::probe`]). Afterwards every written counter's
//! global total must equal the sum of its acknowledged deltas ([`crate::load::exactness`]);
//! otherwise the command fails. The figures are printed, and optionally written as JSON and as
//! an SVG plot.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use geocount_model::CounterId;
use geocount_net::HttpClient;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::cluster::{ClusterClient, counter_path, parse_body, status_error};
use crate::error::GeoctlError;
use crate::load::exactness::{Expected, settle};
use crate::load::fill::{BatchFill, FILL_BOUND};
use crate::load::pacing::Pacer;
use crate::load::plot::render_svg;
use crate::load::probe::{PROBE_INTERVAL, run_probes};
use crate::load::progress::{LoadProgress, RateWindow, live_message};
use crate::load::report::{LoadReport, LoadSettings, assemble, grouped, render};
use crate::load::route::{LoadRouter, WriteRoute};
use crate::load::send::{PlannedWrite, RunClock, send_batch, send_single};
use crate::load::tally::{Tally, WriteOutcome};
use crate::load::workload::{
    CounterPicker, KeyDistribution, WritePath, counter_id, probe_id, random_delta, random_prefix,
};

/// How long writes are sent unless asked otherwise, in seconds.
pub const DEFAULT_DURATION_SECS: u64 = 10;
/// How many counters unless asked otherwise.
pub const DEFAULT_COUNTERS: usize = 1000;
/// The Zipf exponent unless asked otherwise.
pub const DEFAULT_ZIPF_EXPONENT: f64 = 1.1;
/// Writes per batch unless asked otherwise.
pub const DEFAULT_BATCH_SIZE: usize = 1000;
/// The most writes per batch (the shard nodes' default `max_batch_entries`).
pub const MAX_BATCH_SIZE: usize = 100_000;
/// Requests in flight at once unless asked otherwise.
pub const DEFAULT_CONCURRENCY: usize = 32;
/// How long the exactness check waits for the global totals to catch up.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the progress bar is redrawn.
const PROGRESS_TICK: Duration = Duration::from_millis(200);

/// What `geoctl load` was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOptions {
    /// How long to send writes, in seconds (at least 1).
    pub duration_secs: u64,
    /// Target writes per second over all workers; 0: as fast as possible.
    pub rate: u64,
    /// How many counters the writes are spread over.
    pub counters: usize,
    /// How writes are spread over the counters.
    pub distribution: KeyDistribution,
    /// The Zipf exponent (for [`KeyDistribution::Zipf`]).
    pub zipf_exponent: f64,
    /// Single writes or batches.
    pub path: WritePath,
    /// Writes per batch (for [`WritePath::Batch`]).
    pub batch_size: usize,
    /// Which node each write is sent to.
    pub route: WriteRoute,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Counters are `<prefix>-<i>`, probes `<prefix>-probe-<k>`; `None`: `load-<random hex>`.
    /// They must be fresh: the exactness check expects them to start at 0.
    pub counter_prefix: Option<String>,
    /// Also write the report as JSON to this file.
    pub json: Option<PathBuf>,
    /// Also draw the write rate and the lag over time as SVG to this file.
    pub plot: Option<PathBuf>,
    /// Show a progress bar on standard output (when it is a terminal).
    pub progress: bool,
    /// Send every write with its own idempotency key (exactly once). Without keys a write
    /// whose first attempt may have applied is not sent again (at least once, at most once
    /// per attempt): for measuring what keys cost.
    pub keyed: bool,
}

impl LoadOptions {
    /// Writes per request.
    pub fn writes_per_request(&self) -> usize {
        match self.path {
            WritePath::Http => 1,
            WritePath::Batch => self.batch_size,
        }
    }

    fn validate(&self) -> Result<(), GeoctlError> {
        let invalid = |message: String| Err(GeoctlError::InvalidArgument(message));
        if self.duration_secs == 0 {
            return invalid("--duration-secs must be at least 1".to_owned());
        }
        if self.concurrency == 0 {
            return invalid("--concurrency must be at least 1".to_owned());
        }
        if !(1..=MAX_BATCH_SIZE).contains(&self.batch_size) {
            return invalid(format!("--batch-size must be 1 to {MAX_BATCH_SIZE}"));
        }
        Ok(())
    }
}

/// The live counts the progress bar shows.
#[derive(Debug, Default)]
struct Live {
    acknowledged: AtomicU64,
    failed: AtomicU64,
}

/// What every worker shares.
#[derive(Debug)]
struct Shared {
    cluster: Arc<ClusterClient>,
    router: LoadRouter,
    ids: Vec<String>,
    paths: Vec<String>,
    picker: CounterPicker,
    path: WritePath,
    per_request: usize,
    key_prefix: String,
    next_key: AtomicU64,
    keyed: bool,
    pacer: Option<Pacer>,
    /// Each node's batches filling up (for [`WritePath::Batch`]).
    fill: Option<BatchFill>,
    clock: RunClock,
    end: Instant,
    live: Live,
}

impl Shared {
    /// A key no other write of any run shares: `geoctl-load-<random run id>-<n>` (`None` when
    /// the writes go without keys).
    fn next_key(&self) -> Option<String> {
        if !self.keyed {
            return None;
        }
        let n = self.next_key.fetch_add(1, Ordering::Relaxed);
        Some(format!("{}-{n}", self.key_prefix))
    }

    /// How many writes the next request carries and when they are due (`None`: at once);
    /// `None` when the run is over.
    fn next_claim(&self) -> Option<(usize, Option<Instant>)> {
        if Instant::now() >= self.end {
            return None;
        }
        let Some(pacer) = &self.pacer else {
            return Some((self.per_request, None));
        };
        let claim = pacer.claim(self.per_request as u64)?;
        Some((claim.count as usize, Some(self.clock.start + claim.due)))
    }
}

/// Sends `writes` to node `node` (its index in the router) and counts them, live too.
async fn send(
    shared: &Shared,
    client: &HttpClient,
    node: usize,
    writes: &[PlannedWrite],
    tally: &mut Tally,
) {
    let shard = &shared.router.shards()[node];
    let failed_before = tally.refused + tally.unknown;
    let acknowledged = match shared.path {
        WritePath::Http => {
            let mut acknowledged = 0;
            for write in writes {
                let path = &shared.paths[write.counter];
                let outcome = send_single(client, shard, path, write, shared.clock, tally).await;
                acknowledged += u64::from(outcome == WriteOutcome::Acknowledged);
            }
            acknowledged
        }
        WritePath::Batch => {
            send_batch(client, shard, &shared.ids, writes, shared.clock, tally).await
        }
    };
    let live = &shared.live;
    live.acknowledged.fetch_add(acknowledged, Ordering::Relaxed);
    let failed = tally.refused + tally.unknown - failed_before;
    live.failed.fetch_add(failed, Ordering::Relaxed);
}

/// Sends the batches `taken` from the fill.
async fn send_taken(
    shared: &Shared,
    client: &HttpClient,
    taken: Vec<(usize, Vec<PlannedWrite>)>,
    tally: &mut Tally,
) {
    for (node, writes) in taken {
        send(shared, client, node, &writes, tally).await;
    }
}

/// Waits until `due`, sending meanwhile the batches that waited the fill's bound.
async fn wait_until(shared: &Shared, client: &HttpClient, due: Instant, tally: &mut Tally) {
    loop {
        let stale = shared.fill.as_ref().and_then(BatchFill::next_stale);
        match (stale, &shared.fill) {
            (Some(stale), Some(fill)) if stale < due => {
                tokio::time::sleep_until(stale.into()).await;
                send_taken(shared, client, fill.take_stale(Instant::now()), tally).await;
            }
            _ => {
                tokio::time::sleep_until(due.into()).await;
                return;
            }
        }
    }
}

/// One worker: sends requests one after another until the run is over; the last worker to
/// stop leaves no batch unsent, as each stopping worker sends what the fill holds.
async fn worker(shared: Arc<Shared>) -> Tally {
    let mut tally = Tally::default();
    let mut rng = StdRng::from_os_rng();
    let client = shared.cluster.client();
    while let Some((count, due)) = shared.next_claim() {
        if let Some(due) = due {
            wait_until(&shared, client, due, &mut tally).await;
        }
        let writes: Vec<PlannedWrite> = (0..count)
            .map(|_| PlannedWrite {
                counter: shared.picker.pick(&mut rng),
                delta: random_delta(&mut rng),
                key: shared.next_key(),
            })
            .collect();
        let Some(fill) = &shared.fill else {
            for (node, writes) in shared.router.split(writes) {
                send(&shared, client, node, &writes, &mut tally).await;
            }
            continue;
        };
        let now = Instant::now();
        for (node, group) in shared.router.split(writes) {
            for batch in fill.add(node, group, now) {
                send(&shared, client, node, &batch, &mut tally).await;
            }
        }
        send_taken(&shared, client, fill.take_stale(Instant::now()), &mut tally).await;
    }
    if let Some(fill) = &shared.fill {
        send_taken(&shared, client, fill.take_all(), &mut tally).await;
    }
    tally
}

/// Checks that `<prefix>-0` and the first probe counter are fresh (the global aggregator has
/// no value for them); this also checks that the global aggregator answers.
async fn check_fresh(cluster: &ClusterClient, prefix: &str) -> Result<(), GeoctlError> {
    #[derive(serde::Deserialize)]
    struct ValueOnly {
        value: i128,
    }
    for id in [counter_id(prefix, 0), probe_id(prefix, 0)] {
        let path = format!("{}?allow_partial=true", counter_path(&id));
        let (url, answer) = cluster.get_global(&id, &path).await?;
        match answer.status.as_u16() {
            404 => {}
            200 => {
                let ValueOnly { value } = parse_body(&url, &answer)?;
                if value != 0 {
                    return Err(GeoctlError::InvalidArgument(format!(
                        "counter {id:?} already holds {value}: the exactness check needs fresh counters; use another --counter-prefix"
                    )));
                }
            }
            _ => return Err(status_error(&url, &answer)),
        }
    }
    Ok(())
}

/// The first line: what the run will do.
fn describe(options: &LoadOptions, prefix: &str, shards: usize) -> String {
    let pace = match options.rate {
        0 => "flat out".to_owned(),
        rate => format!("at {} writes/s", grouped(rate)),
    };
    let path = match options.path {
        WritePath::Http => "single writes (PATCH /counter/{id}/write)".to_owned(),
        WritePath::Batch => format!(
            "batches of {} (POST /batch, postcard)",
            grouped(options.batch_size as u64)
        ),
    };
    let distribution = match options.distribution {
        KeyDistribution::Uniform => "uniform".to_owned(),
        KeyDistribution::Zipf => format!("zipf (exponent {})", options.zipf_exponent),
    };
    let route = match options.route {
        WriteRoute::Owner => "each write to the node owning its slot",
        WriteRoute::Any => "each request whole to the next node",
    };
    let keys = if options.keyed {
        ""
    } else {
        " without idempotency keys,"
    };
    format!(
        "load: {} s {pace}, {path},{keys} {} at a time, {distribution} over {} counters {prefix}-0..{}, turns over {shards} shard nodes, {route}; lag probes {prefix}-probe-* every {} ms\n",
        options.duration_secs,
        options.concurrency,
        grouped(options.counters as u64),
        options.counters - 1,
        PROBE_INTERVAL.as_millis(),
    )
}

/// Runs the load, prints the report to `out` (and writes `--json`, `--plot`), and returns it.
/// Fails with [`GeoctlError::NotExact`] when a global total does not equal the acknowledged
/// deltas, and with [`GeoctlError::NothingAcknowledged`] when no write was acknowledged.
pub async fn run(
    cluster: &ClusterClient,
    options: &LoadOptions,
    out: &mut dyn Write,
) -> Result<LoadReport, GeoctlError> {
    options.validate()?;
    let picker = CounterPicker::new(
        options.distribution,
        options.counters,
        options.zipf_exponent,
    )?;
    let prefix = options.counter_prefix.clone().unwrap_or_else(random_prefix);
    let probes_at_most = options.duration_secs * 1000 / PROBE_INTERVAL.as_millis() as u64 + 1;
    for id in [
        counter_id(&prefix, options.counters - 1),
        probe_id(&prefix, probes_at_most),
    ] {
        CounterId::new(id.as_str()).map_err(|e| {
            GeoctlError::InvalidArgument(format!(
                "--counter-prefix gives invalid counter ids ({id:?}): {e}"
            ))
        })?;
    }
    check_fresh(cluster, &prefix).await?;

    let ids: Vec<String> = (0..options.counters)
        .map(|i| counter_id(&prefix, i))
        .collect();
    let router = LoadRouter::new(cluster, &ids, options.route);
    let shards = router.shards().len();
    out.write_all(describe(options, &prefix, shards).as_bytes())?;
    out.flush()?;

    let duration = Duration::from_secs(options.duration_secs);
    let paths = ids.iter().map(|id| counter_path(id)).collect();
    let cluster = Arc::new(cluster.clone());
    let start = Instant::now();
    let shared = Arc::new(Shared {
        cluster: cluster.clone(),
        router,
        ids,
        paths,
        picker,
        path: options.path,
        per_request: options.writes_per_request(),
        key_prefix: format!("geoctl-load-{:016x}", rand::random::<u64>()),
        next_key: AtomicU64::new(0),
        keyed: options.keyed,
        pacer: (options.rate > 0).then(|| Pacer::new(options.rate, duration)),
        fill: (options.path == WritePath::Batch)
            .then(|| BatchFill::new(shards, options.batch_size, FILL_BOUND)),
        clock: RunClock { start },
        end: start + duration,
        live: Live::default(),
    });

    let probes = tokio::spawn(run_probes(
        cluster.clone(),
        prefix.clone(),
        shared.key_prefix.clone(),
        start,
        start + duration,
    ));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..options.concurrency {
        workers.spawn(worker(shared.clone()));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = tokio::spawn(show_progress(
        shared.clone(),
        LoadProgress::new(options.progress, duration),
        stop.clone(),
    ));

    let mut tally = Tally::default();
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok(worker_tally) => tally.merge(worker_tally),
            Err(error) => {
                tally.error("worker failed", || format!("a load worker failed: {error}"));
            }
        }
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    let probes = probes.await.unwrap_or_default();

    writeln!(
        out,
        "sent for {:.2} s: {} writes acknowledged; checking that the global totals of {} counters equal the acknowledged deltas ...",
        elapsed.as_secs_f64(),
        grouped(tally.acknowledged),
        grouped(tally.counters.len() as u64)
    )?;
    out.flush()?;
    let mut written: Vec<(usize, Expected)> =
        tally.counters.iter().map(|(&i, &e)| (i, e)).collect();
    written.sort_unstable_by_key(|&(i, _)| i);
    let written = written
        .into_iter()
        .map(|(i, expected)| (shared.ids[i].clone(), expected))
        .collect();
    let exactness = settle(&cluster, written, SETTLE_TIMEOUT, options.concurrency).await;

    let settings = LoadSettings {
        duration_secs: options.duration_secs,
        rate: options.rate,
        counters: options.counters,
        distribution: options.distribution.to_string(),
        zipf_exponent: (options.distribution == KeyDistribution::Zipf)
            .then_some(options.zipf_exponent),
        path: options.path.to_string(),
        batch_size: (options.path == WritePath::Batch).then_some(options.batch_size),
        concurrency: options.concurrency,
        counter_prefix: prefix,
        shard_nodes: shared.router.shards().len(),
        route: shared.router.route().to_string(),
        keyed: options.keyed,
    };
    let report = assemble(settings, elapsed, &tally, &probes, exactness);
    out.write_all(render(&report).as_bytes())?;
    if let Some(path) = &options.json {
        let mut text = serde_json::to_string_pretty(&report).expect("a report serializes");
        text.push('\n');
        write_file(path, text)?;
    }
    if let Some(path) = &options.plot {
        write_file(path, render_svg(&report)?)?;
    }
    if !report.exactness.is_exact() {
        return Err(GeoctlError::NotExact {
            differing: report.exactness.mismatches.len(),
            counters: report.exactness.counters,
        });
    }
    if report.writes.acknowledged == 0 {
        return Err(GeoctlError::NothingAcknowledged {
            sent: report.writes.sent,
        });
    }
    Ok(report)
}

fn write_file(path: &Path, text: String) -> Result<(), GeoctlError> {
    std::fs::write(path, text).map_err(|source| GeoctlError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Redraws the progress bar until `stop`, then removes it.
async fn show_progress(shared: Arc<Shared>, progress: LoadProgress, stop: Arc<AtomicBool>) {
    let mut window = RateWindow::default();
    let mut ticks = tokio::time::interval(PROGRESS_TICK);
    while !stop.load(Ordering::Relaxed) {
        ticks.tick().await;
        let elapsed = shared.clock.now();
        let acknowledged = shared.live.acknowledged.load(Ordering::Relaxed);
        let failed = shared.live.failed.load(Ordering::Relaxed);
        let rate = window.push(elapsed, acknowledged);
        progress.update(elapsed, live_message(acknowledged, rate, failed));
    }
    progress.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> LoadOptions {
        LoadOptions {
            duration_secs: 8,
            rate: 0,
            counters: 1000,
            distribution: KeyDistribution::Zipf,
            zipf_exponent: 1.1,
            path: WritePath::Batch,
            batch_size: 1000,
            route: WriteRoute::Owner,
            concurrency: 32,
            counter_prefix: None,
            json: None,
            plot: None,
            progress: false,
            keyed: true,
        }
    }

    #[test]
    fn options_are_checked() {
        assert!(options().validate().is_ok());
        for bad in [
            LoadOptions {
                duration_secs: 0,
                ..options()
            },
            LoadOptions {
                concurrency: 0,
                ..options()
            },
            LoadOptions {
                batch_size: 0,
                ..options()
            },
            LoadOptions {
                batch_size: MAX_BATCH_SIZE + 1,
                ..options()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert_eq!(options().writes_per_request(), 1000);
        let http = LoadOptions {
            path: WritePath::Http,
            ..options()
        };
        assert_eq!(http.writes_per_request(), 1);
    }

    #[test]
    fn the_first_line_says_what_runs() {
        let text = describe(&options(), "p", 6);
        assert_eq!(
            text,
            "load: 8 s flat out, batches of 1,000 (POST /batch, postcard), 32 at a time, zipf (exponent 1.1) over 1,000 counters p-0..999, turns over 6 shard nodes, each write to the node owning its slot; lag probes p-probe-* every 100 ms\n"
        );
        let keyless = LoadOptions {
            keyed: false,
            ..options()
        };
        assert!(
            describe(&keyless, "p", 6)
                .contains("(POST /batch, postcard), without idempotency keys, 32 at a time")
        );
        let any = LoadOptions {
            route: WriteRoute::Any,
            ..options()
        };
        assert!(
            describe(&any, "p", 6)
                .contains("turns over 6 shard nodes, each request whole to the next node;")
        );
        let http = LoadOptions {
            path: WritePath::Http,
            rate: 2000,
            distribution: KeyDistribution::Uniform,
            ..options()
        };
        assert!(describe(&http, "p", 6).starts_with(
            "load: 8 s at 2,000 writes/s, single writes (PATCH /counter/{id}/write), 32 at a time, uniform over"
        ));
    }
}
