//! Bounded counters (#40) under the emulated WAN: the topology's shape on free ports, run by the
//! launcher's `--wan` mode with the topology's `[wan]` delays, in `replicated` durability.
//!
//! - Writes while rights are local: wrk on one shard node of the datacenter farthest from the
//!   global aggregator, the same script over as many bounded counters (a `max` far above what
//!   the runs write) as unbounded ones, every one owned by that node (one slot each), in turns.
//! - A transfer: a fresh counter whose `max` gives that datacenter's home slot a share of
//!   [`SHARE`], the share spent by one write, then the next write of 1 timed: it waits for
//!   rights from another region. Its `GET /counter/{id}/rights` must then show rights received
//!   from another datacenter.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use geocount_cluster::{Options, wan};
use geocount_model::{DatacenterConfig, Durability, SlotId, Topology, WanSettings};
use geocount_net::HttpClient;
use hdrhistogram::Histogram;
use hyper::Method;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::figure::{Figure, Goal, Row, Unit, show_value};
use crate::procs::free_address;
use crate::steps::{Plan, WrkFigures, wrk_repeated};
use crate::topo::{self, Tiers};
use crate::wrk;

/// Counters in each key space of the latency runs.
pub const COUNTERS: usize = 2_000;
/// The bounded counters' `max`: no run comes near any datacenter's share of it.
const FAR_MAX: i64 = 1_000_000_000_000_000;
/// The home slot's share of each transfer sample's counter, spent before the timed write.
pub const SHARE: i64 = 100;
/// How long the processes get to answer `/healthz` under the launcher.
const STARTUP: Duration = Duration::from_secs(60);
/// A request's timeout: past `shard.rights_ask_timeout_ms` for every datacenter.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests in flight while the counters are created and first written.
const IN_FLIGHT: usize = 32;
/// Rounds of the latency runs (one with `--quick`): more than other steps' repeats, as a p99
/// under wrk flat out on two shared cores moves by a quarter from run to run.
const ROUNDS: usize = 5;
/// Transfer samples (20 with `--quick`).
const TRANSFERS: usize = 50;
/// The most the latency targets allow: bounded within 20 % of unbounded.
const LATENCY_RATIO: f64 = 1.2;

/// The step's figures.
#[derive(Debug, Clone, Serialize)]
pub struct BoundsFigures {
    /// The datacenter written (the farthest from the global aggregator).
    pub datacenter: String,
    /// The shard node wrk wrote to, by its slot.
    pub node: String,
    /// Counters in each key space.
    pub counters: usize,
    /// wrk over the bounded counters, rights local.
    pub bounded: WrkFigures,
    /// The same wrk over as many unbounded counters, in the same rounds.
    pub unbounded: WrkFigures,
    /// The longest round trip from the datacenter's region to another region's, milliseconds.
    pub round_trip_ms: f64,
    /// The timed writes that needed rights from another region, milliseconds, in order.
    pub transfer_ms: Vec<f64>,
    /// Their median, from an HDR histogram of microseconds.
    pub transfer_p50_ms: f64,
    /// Their 99th percentile, from the same histogram.
    pub transfer_p99_ms: f64,
    /// The other datacenters' slots each sample received rights from.
    pub donors: Vec<Vec<String>>,
    /// How long each transfer sample's `POST /counter` took to answer 201, milliseconds.
    pub create_ms: Vec<f64>,
}

/// The step: the shape of `shape` under `--wan`, with `shape`'s `[wan]` section.
pub async fn bounds(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
) -> anyhow::Result<BoundsFigures> {
    let settings = shape
        .wan
        .clone()
        .context("the topology has no [wan] section to emulate")?;
    let step_dir = dir.join("bounds");
    let _ = std::fs::remove_dir_all(&step_dir);
    std::fs::create_dir_all(&step_dir)
        .with_context(|| format!("cannot create {}", step_dir.display()))?;
    let data = step_dir.join("data");
    let mut text = topo::same_shape_with(shape, &data, Tiers::ONE, Durability::Replicated)?;
    text += &wan_section(&settings, free_address()?);
    let file = step_dir.join("topology.toml");
    std::fs::write(&file, &text).with_context(|| format!("cannot write {}", file.display()))?;
    let topology = Topology::from_toml(&file.display().to_string(), &text)?;

    let options = Options {
        config: file,
        bin_dir: Some(bin_dir.to_owned()),
        data_dir: Some(data),
        fresh: true,
        new_cluster: true,
        wan: true,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let mut launcher = tokio::spawn(geocount_cluster::run(options, async move {
        let _ = stopped.await;
    }));
    let result = tokio::select! {
        ended = &mut launcher => Err(match ended {
            Ok(Ok(())) => anyhow::anyhow!("the launcher stopped by itself"),
            Ok(Err(error)) => anyhow::Error::new(error).context("the launcher failed"),
            Err(error) => anyhow::Error::new(error).context("the launcher panicked"),
        }),
        figures = measure(plan, &step_dir, &topology, &settings) => figures,
    };
    let _ = stop.send(());
    if !launcher.is_finished() {
        match launcher.await {
            Ok(Err(error)) => eprintln!("  the launcher, stopping: {error}"),
            Err(error) => eprintln!("  the launcher, stopping: {error}"),
            Ok(Ok(())) => {}
        }
    }
    result
}

/// `settings` as a `[wan]` section whose control API listens on `control`.
fn wan_section(settings: &WanSettings, control: SocketAddr) -> String {
    let mut text = format!(
        "\n[wan]\nglobal_region = \"{}\"\ncontrol = \"{control}\"\n",
        settings.global_region
    );
    for link in &settings.links {
        let [a, b] = &link.between;
        text += &format!(
            "\n[[wan.links]]\nbetween = [\"{a}\", \"{b}\"]\ndelay_ms = {}\njitter_ms = {}\nbandwidth_bytes_per_sec = {}\n",
            link.delay_ms, link.jitter_ms, link.bandwidth_bytes_per_sec
        );
    }
    text
}

/// The datacenter outside the global aggregator's region farthest from it, with the longest
/// round trip from its region to another region's datacenter: a slot short of rights asks
/// every other datacenter at once and takes their answers together.
fn farthest(topology: &Topology, settings: &WanSettings) -> anyhow::Result<(usize, f64)> {
    let delay = |a: &str, b: &str| wan::region_link(settings, a, b).map(|link| link.delay_ms);
    let (index, _) = (topology.datacenters.iter().enumerate())
        .filter_map(|(i, dc)| Some((i, delay(dc.region(), &settings.global_region)?)))
        .max_by_key(|&(_, delay)| delay)
        .context("every datacenter is in the global aggregator's region: nothing to transfer")?;
    let region = topology.datacenters[index].region();
    let longest = (topology.datacenters.iter())
        .filter_map(|dc| delay(region, dc.region()))
        .max()
        .context("no other region")?;
    Ok((index, 2.0 * longest as f64))
}

async fn measure(
    plan: &Plan,
    dir: &Path,
    topology: &Topology,
    settings: &WanSettings,
) -> anyhow::Result<BoundsFigures> {
    let client = HttpClient::new(REQUEST_TIMEOUT);
    let mut every = vec![topology.global.listen];
    every.extend(topology.datacenters.iter().flat_map(|dc| dc.shards.clone()));
    wait_healthy(&client, &every).await?;
    let (index, round_trip_ms) = farthest(topology, settings)?;
    let dc = &topology.datacenters[index];
    let node = dc.shards[0];
    let slot = SlotId::new(&dc.name, 0).to_string();
    println!(
        "  writing at {slot} ({node}); the farthest other region is {round_trip_ms:.0} ms away and back"
    );

    // (a) Writes while rights are local, bounded beside unbounded.
    let owned = |prefix: &str| owned_ids(topology, dc, prefix, COUNTERS);
    let (bounded_ids, unbounded_ids) = (owned("bounded"), owned("unbounded"));
    let started = Instant::now();
    create_all(&client, node, &bounded_ids, Some(FAR_MAX)).await?;
    create_all(&client, node, &unbounded_ids, None).await?;
    println!(
        "  {} bounded and {} unbounded counters created in {:.1} s",
        bounded_ids.len(),
        unbounded_ids.len(),
        started.elapsed().as_secs_f64()
    );
    let bounded_script = wrk::write_script_over(dir, "bounded", &bounded_ids)?;
    let unbounded_script = wrk::write_script_over(dir, "unbounded", &unbounded_ids)?;
    let one_run = Plan {
        repeats: 1,
        ..plan.clone()
    };
    let (mut bounded, mut unbounded) = (Vec::new(), Vec::new());
    let rounds = if plan.repeats > 1 { ROUNDS } else { 1 };
    for round in 0..rounds {
        // Each kind goes first in every other round, so neither always meets a warmer node.
        let mut kinds = [
            ("bounded", &bounded_script, &mut bounded),
            ("unbounded", &unbounded_script, &mut unbounded),
        ];
        if round % 2 == 1 {
            kinds.reverse();
        }
        for (kind, script, runs) in kinds {
            let label = format!("{kind} writes at {slot}");
            let figures = wrk_repeated(&one_run, &label, node, script).await?;
            runs.extend(figures.runs);
        }
    }
    let (bounded, unbounded) = (WrkFigures::new(bounded), WrkFigures::new(unbounded));
    ensure!(
        bounded.errors == 0 && unbounded.errors == 0,
        "writes refused while rights were local: {} bounded, {} unbounded",
        bounded.errors,
        unbounded.errors
    );

    // (b) A write that needs rights from another region.
    let samples = if plan.repeats > 1 { TRANSFERS } else { 20 };
    let shares = i64::try_from(topology.datacenters.len())?;
    let mut histogram = Histogram::<u64>::new(3)?;
    let (mut transfer_ms, mut donors, mut create_ms) = (Vec::new(), Vec::new(), Vec::new());
    for sample in 0..samples {
        let id = format!("transfer-{sample}");
        let started = Instant::now();
        create(&client, node, &id, Some(shares * SHARE)).await?;
        create_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let spent = write(&client, node, &id, SHARE).await?;
        let owner = spent["slot"]
            .as_str()
            .context("a write answer without its slot")?
            .parse::<SlotId>()
            .map_err(|e| anyhow::anyhow!("a write answer's slot: {e}"))?;
        let owner = topology
            .shard_address(&owner)
            .map_err(|(key, message)| anyhow::anyhow!("{key}: {message}"))?;
        let rights = get(&client, owner, &format!("/counter/{id}/rights")).await?;
        ensure!(
            rights["up"] == 0,
            "{id}: its home slot holds {} after spending its share",
            rights["up"]
        );
        let started = Instant::now();
        write(&client, owner, &id, 1).await?;
        let elapsed = started.elapsed();
        let rights = get(&client, owner, &format!("/counter/{id}/rights")).await?;
        let own = format!("DC_{}_VAL_", dc.name);
        let donor: Vec<String> = (rights["received"].as_array().into_iter().flatten())
            .filter_map(|r| r["slot"].as_str())
            .filter(|slot| !slot.starts_with(&own))
            .map(str::to_owned)
            .collect();
        ensure!(
            !donor.is_empty(),
            "{id}: no rights received from another datacenter: {rights}"
        );
        histogram.record(u64::try_from(elapsed.as_micros())?)?;
        transfer_ms.push(elapsed.as_secs_f64() * 1e3);
        donors.push(donor);
    }
    let quantile = |q: f64| histogram.value_at_quantile(q) as f64 / 1e3;
    let (transfer_p50_ms, transfer_p99_ms) = (quantile(0.5), quantile(0.99));
    println!(
        "  {samples} writes past {}'s share: p50 {transfer_p50_ms:.1} ms, p99 {transfer_p99_ms:.1} ms (rights from {})",
        dc.name,
        distinct(&donors.concat())
    );
    Ok(BoundsFigures {
        datacenter: dc.name.clone(),
        node: slot,
        counters: COUNTERS,
        bounded,
        unbounded,
        round_trip_ms,
        transfer_ms,
        transfer_p50_ms,
        transfer_p99_ms,
        donors,
        create_ms,
    })
}

/// The different entries of `names`, in order of first appearance, comma-separated.
fn distinct(names: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for name in names {
        if !seen.contains(&name.as_str()) {
            seen.push(name);
        }
    }
    seen.join(", ")
}

/// `count` ids `<prefix>-<n>` whose one slot in `dc` is its slot 0.
fn owned_ids(
    topology: &Topology,
    dc: &DatacenterConfig,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    let placement = dc.placement(topology.shard.virtual_nodes);
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .filter(|id| placement.slots_for(id, 1)[0] == 0)
        .take(count)
        .collect()
}

/// Waits until every one of `addresses` answers `/healthz` with 200.
async fn wait_healthy(client: &HttpClient, addresses: &[SocketAddr]) -> anyhow::Result<()> {
    let deadline = Instant::now() + STARTUP;
    for &address in addresses {
        let url = format!("http://{address}/healthz");
        loop {
            match client.get(&url).await {
                Ok(answer) if answer.status == 200 => break,
                _ if Instant::now() >= deadline => {
                    bail!("{address} is not healthy after {} s", STARTUP.as_secs())
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    Ok(())
}

/// Sends `method path` with a JSON `body` to `address`; the answer's JSON if its status is
/// `expected`.
async fn call(
    client: &HttpClient,
    address: SocketAddr,
    method: Method,
    path: &str,
    body: Option<&Value>,
    expected: &[u16],
) -> anyhow::Result<Value> {
    let url = format!("http://{address}{path}");
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    let headers: &[(&str, &str)] = &[("content-type", "application/json")];
    let answer = client.send(method.clone(), &url, headers, body).await?;
    let status = answer.status.as_u16();
    if !expected.contains(&status) {
        bail!(
            "{method} {url} answered {status}: {}",
            String::from_utf8_lossy(&answer.body)
        );
    }
    Ok(answer.json())
}

/// Creates counter `id` at `address` (one slot per datacenter), bounded above by `max`.
async fn create(
    client: &HttpClient,
    address: SocketAddr,
    id: &str,
    max: Option<i64>,
) -> anyhow::Result<()> {
    let mut body = json!({"id": id, "numberOfShards": 1});
    if let Some(max) = max {
        body["max"] = json!(max);
    }
    call(
        client,
        address,
        Method::POST,
        "/counter",
        Some(&body),
        &[201],
    )
    .await?;
    Ok(())
}

/// Increments counter `id` by `delta` at `address`; the answer.
async fn write(
    client: &HttpClient,
    address: SocketAddr,
    id: &str,
    delta: i64,
) -> anyhow::Result<Value> {
    let path = format!("/counter/{id}/write?op=INCREMENT");
    let body = json!({ "delta": delta });
    call(client, address, Method::PATCH, &path, Some(&body), &[200]).await
}

async fn get(client: &HttpClient, address: SocketAddr, path: &str) -> anyhow::Result<Value> {
    call(client, address, Method::GET, path, None, &[200]).await
}

/// Creates every one of `ids` at `address` ([`create`]) and writes 1 to each, [`IN_FLIGHT`] at
/// a time: the runs then meet no first write.
async fn create_all(
    client: &HttpClient,
    address: SocketAddr,
    ids: &[String],
    max: Option<i64>,
) -> anyhow::Result<()> {
    let mut tasks = JoinSet::new();
    for lane in 0..IN_FLIGHT {
        let ids: Vec<String> = ids.iter().skip(lane).step_by(IN_FLIGHT).cloned().collect();
        let client = client.clone();
        tasks.spawn(async move {
            for id in ids {
                create(&client, address, &id, max).await?;
                write(&client, address, &id, 1).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// The step's rows.
pub(crate) fn rows(rows: &mut Vec<Row>, figures: &BoundsFigures) {
    let what = format!(
        "bounds, under --wan: PATCH /counter/{{id}}/write at {}, wrk -t{} -c{} over {} bounded counters (rights local)",
        figures.node,
        wrk::THREADS,
        wrk::CONNECTIONS,
        figures.counters
    );
    let peer = format!("the same over {} unbounded counters", figures.counters);
    rows.push(Row::against(
        format!("{what}, p50 latency"),
        figures.bounded.p50.clone(),
        &peer,
        figures.unbounded.p50.clone(),
        Some(Goal::RatioAtMost(LATENCY_RATIO)),
    ));
    rows.push(Row::against(
        "the same, p99 latency",
        figures.bounded.p99.clone(),
        &peer,
        figures.unbounded.p99.clone(),
        Some(Goal::RatioAtMost(LATENCY_RATIO)),
    ));
    rows.push(Row::against(
        "the same, writes/s",
        figures.bounded.rate.clone(),
        &peer,
        figures.unbounded.rate.clone(),
        None,
    ));
    let round_trip = Figure::new(Unit::Ms, vec![figures.round_trip_ms]);
    let peer = format!(
        "one round trip to the farthest other region ({})",
        show_value(Unit::Ms, figures.round_trip_ms)
    );
    rows.push(Row::against(
        format!(
            "bounds: the first write past {}'s share, rights from another region, p50 of {} (HDR histogram)",
            figures.datacenter,
            figures.transfer_ms.len()
        ),
        Figure::new(Unit::Ms, vec![figures.transfer_p50_ms]),
        &peer,
        round_trip.clone(),
        None,
    ));
    rows.push(Row::against(
        "the same, p99",
        Figure::new(Unit::Ms, vec![figures.transfer_p99_ms]),
        &peer,
        round_trip,
        None,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wan_section_round_trips_and_the_farthest_datacenter_is_asia() {
        let local = Topology::load(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/local.toml"
        )))
        .expect("config/local.toml");
        let settings = local.wan.clone().expect("[wan]");
        let mut text = topo::same_shape(&local, Path::new("/tmp/b")).expect("ports");
        let control: SocketAddr = "127.0.0.1:1".parse().expect("address");
        text += &wan_section(&settings, control);
        let copy = Topology::from_toml("copy", &text).expect("valid");
        let wan = copy.wan.clone().expect("[wan]");
        assert_eq!(wan.links, settings.links);
        assert_eq!(wan.control, control);
        let (index, round_trip) = farthest(&copy, &wan).expect("a remote datacenter");
        assert_eq!(copy.datacenters[index].name, "ASIA_0");
        // ASIA-EUROPE, 90 ms one way.
        assert_eq!(round_trip, 180.0);
        let ids = owned_ids(&copy, &copy.datacenters[index], "b", 5);
        let placement = copy.datacenters[index].placement(copy.shard.virtual_nodes);
        assert_eq!(ids.len(), 5);
        assert!(ids.iter().all(|id| placement.slots_for(id, 1) == [0]));
        assert_eq!(distinct(&["a".into(), "b".into(), "a".into()]), "a, b");
    }
}
