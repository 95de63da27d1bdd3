//! End-to-end tests of the aggregation tiers: real shard nodes, datacenter aggregators and the
//! global aggregator on loopback ports, with the topology's default sync intervals (shards →
//! datacenter every 50 ms, datacenters → global every 250 ms, pulls time out after 1 s).

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use geocount_model::SlotId;
use geocount_test_support::process::{binary, config_error};
use geocount_test_support::{Api, TestCluster, TestTopology};
use serde_json::Value;

const DATACENTERS: [&str; 2] = ["USA_0", "ASIA_0"];
const SHARDS_PER_DATACENTER: usize = 2;
/// Ids that need percent-encoding travel too.
const COUNTERS: [&str; 4] = ["likes", "views:home", "a/b c", "#日本"];
/// How long a value may take to reach an aggregator.
const CONVERGE: Duration = Duration::from_secs(5);

/// Shard nodes start empty; they need not wait long for peers to hand back their slot.
fn topology() -> TestTopology {
    TestTopology::new(
        &[
            ("USA_0", SHARDS_PER_DATACENTER),
            ("ASIA_0", SHARDS_PER_DATACENTER),
        ],
        "restore_timeout_ms = 200",
    )
}

/// A small deterministic generator (the end-to-end tests do without `rand`).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A delta in -50..=50 other than 0.
    fn delta(&mut self) -> i64 {
        let magnitude = (self.next() % 50) as i64 + 1;
        if self.next().is_multiple_of(2) {
            magnitude
        } else {
            -magnitude
        }
    }
}

/// The acknowledged deltas: per counter, per datacenter index.
#[derive(Debug, Default, Clone)]
struct Sent(HashMap<String, [i64; 2]>);

impl Sent {
    fn total(&self, id: &str) -> i64 {
        self.0.get(id).map_or(0, |per_dc| per_dc.iter().sum())
    }

    fn in_datacenter(&self, id: &str, dc: usize) -> i64 {
        self.0.get(id).map_or(0, |per_dc| per_dc[dc])
    }

    fn add(&mut self, other: Sent) {
        for (id, per_dc) in other.0 {
            let mine = self.0.entry(id).or_default();
            for dc in 0..2 {
                mine[dc] += per_dc[dc];
            }
        }
    }
}

/// Sends `per_task` writes from each of `tasks` concurrent tasks: random counters, random
/// deltas of both signs, random shard nodes of the datacenters in `datacenters`. Returns what
/// was acknowledged.
async fn write_concurrently(
    cluster: &TestCluster,
    datacenters: &[usize],
    tasks: u64,
    per_task: usize,
) -> Sent {
    let mut handles = Vec::new();
    for task in 0..tasks {
        let targets: Vec<(usize, Api)> = datacenters
            .iter()
            .flat_map(|&dc| cluster.shards[dc].iter().map(move |node| (dc, node.api())))
            .collect();
        handles.push(tokio::spawn(async move {
            let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (task + 1).wrapping_mul(0x2545_F491));
            let mut sent = Sent::default();
            for _ in 0..per_task {
                let (dc, api) = &targets[rng.below(targets.len())];
                let id = COUNTERS[rng.below(COUNTERS.len())];
                let delta = rng.delta();
                let (status, body) = api.add(id, delta).await.expect("write answered");
                assert_eq!(status, 200, "write {id} {delta}: {body}");
                sent.0.entry(id.to_owned()).or_default()[*dc] += delta;
            }
            sent
        }));
    }
    let mut sent = Sent::default();
    for handle in handles {
        sent.add(handle.await.expect("writer task"));
    }
    sent
}

/// Polls `read` (every 50 ms, up to [`CONVERGE`]) until `done` holds for its answer; returns
/// that answer, or panics with the last one.
async fn poll_until<F, Fut>(what: &str, mut read: F, done: impl Fn(u16, &Value) -> bool) -> Value
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (u16, Value)>,
{
    let deadline = Instant::now() + CONVERGE;
    loop {
        let (status, body) = read().await;
        if done(status, &body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reached after {CONVERGE:?}; last answer {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the global read of every counter is 200, complete, with the acknowledged total.
async fn await_global_totals(global: &Api, sent: &Sent) {
    for id in COUNTERS {
        let total = sent.total(id);
        poll_until(
            &format!("global total of {id} = {total}"),
            || global.global_read(id, ""),
            |status, body| {
                status == 200 && body["value"].as_i64() == Some(total) && body["complete"] == true
            },
        )
        .await;
    }
}

/// Asserts that a staleness field is a number below two seconds.
fn assert_fresh(what: &str, staleness: &Value) {
    let ms = staleness
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: staleness_ms is not a number: {staleness}"));
    assert!(ms < 2_000, "{what}: staleness_ms {ms} is not small");
}

#[tokio::test]
async fn concurrent_writes_sum_exactly_at_every_tier() {
    let cluster = TestCluster::start(topology()).await;
    let global = cluster.global.api();
    let sent = write_concurrently(&cluster, &[0, 1], 8, 40).await;

    await_global_totals(&global, &sent).await;
    for id in COUNTERS {
        let (_, answer) = global.global_read(id, "").await;
        assert_eq!(answer["value"].as_i64(), Some(sent.total(id)), "{answer}");
        assert_fresh("global", &answer["staleness_ms"]);
        for (dc, name) in DATACENTERS.iter().enumerate() {
            let part = &answer["datacenters"][name];
            assert_eq!(part["value"].as_i64(), Some(sent.in_datacenter(id, dc)));
            assert_eq!(part["heard"], true);
            assert_fresh(name, &part["staleness_ms"]);
        }
    }

    for (dc, name) in DATACENTERS.iter().enumerate() {
        let aggregator = cluster.aggregator(dc).api();
        for id in COUNTERS {
            let (status, answer) = aggregator.read(id).await;
            assert_eq!(status, 200, "{name} {id}: {answer}");
            assert_eq!(answer["value"].as_i64(), Some(sent.in_datacenter(id, dc)));
            assert_eq!(
                (&answer["datacenter"], &answer["complete"]),
                (&Value::from(*name), &Value::from(true))
            );
            assert_fresh(name, &answer["staleness_ms"]);
            let slots = answer["slots"].as_object().expect("slots object");
            assert_eq!(slots.len(), SHARDS_PER_DATACENTER, "every slot listed");
            let mut sum = 0;
            for (slot, state) in slots {
                assert!(slot.starts_with(&format!("DC_{name}_VAL_")), "{slot}");
                let version = state["version"].as_u64().expect("a version");
                let value = state["value"].as_i64().expect("a value");
                assert!(
                    version > 0 || value == 0,
                    "{slot}: a value without a version"
                );
                assert_fresh(slot, &state["staleness_ms"]);
                sum += value;
            }
            assert_eq!(
                sum,
                sent.in_datacenter(id, dc),
                "the slots sum to the value"
            );
            assert!(
                slots.values().any(|s| s["version"].as_u64() > Some(0)),
                "some slot holds {id}: {answer}"
            );
        }
        let (status, missing) = aggregator.read("never-written").await;
        assert_eq!(status, 404, "{missing}");
        assert!(missing["error"].is_string());
    }
    let (status, missing) = global.global_read("never-written", "").await;
    assert_eq!(status, 404, "{missing}");
    let (status, bad) = global.global_read("likes", "max_staleness_ms=soon").await;
    assert_eq!(status, 400, "{bad}");
    let (status, bad) = global.global_read("likes", "colour=blue").await;
    assert_eq!(status, 400, "{bad}");
}

#[tokio::test]
async fn a_stopped_datacenter_is_refused_or_flagged_and_catches_up() {
    let cluster = TestCluster::start(topology()).await;
    let global = cluster.global.api();
    let mut sent = write_concurrently(&cluster, &[0, 1], 4, 20).await;
    await_global_totals(&global, &sent).await;

    let asia = 1;
    cluster.aggregator(asia).pause();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let id = COUNTERS[0];
    let started = Instant::now();
    let (status, refusal) = global.global_read(id, "max_staleness_ms=300").await;
    let refused_in = started.elapsed();
    assert_eq!(status, 503, "{refusal}");
    let stale: Vec<&str> = refusal["stale_datacenters"]
        .as_array()
        .expect("stale_datacenters")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(stale.contains(&"ASIA_0"), "{refusal}");
    assert!(
        refusal["error"]
            .as_str()
            .unwrap()
            .contains("ASIA_0 (staleness"),
        "{refusal}"
    );
    assert!(refusal["datacenters"]["ASIA_0"]["staleness_ms"].as_u64() > Some(300));

    let started = Instant::now();
    let (status, partial) = global
        .global_read(id, "max_staleness_ms=300&allow_partial=true")
        .await;
    let partial_in = started.elapsed();
    assert_eq!(status, 200, "{partial}");
    assert_eq!(partial["complete"], false, "{partial}");
    assert_eq!(
        partial["value"].as_i64(),
        Some(sent.total(id)),
        "last known values"
    );
    assert_eq!(partial["datacenters"]["ASIA_0"]["heard"], true);
    for elapsed in [refused_in, partial_in] {
        assert!(
            elapsed < Duration::from_millis(500),
            "a read took {elapsed:?}"
        );
    }

    // Writes go on in the stopped aggregator's datacenter; the global cannot see them yet.
    sent.add(write_concurrently(&cluster, &[asia], 2, 10).await);
    let started = Instant::now();
    let (status, _) = global.global_read(id, "allow_partial=true").await;
    assert_eq!(status, 200);
    assert!(started.elapsed() < Duration::from_millis(500));

    cluster.aggregator(asia).resume();
    await_global_totals(&global, &sent).await;
}

#[tokio::test]
async fn a_datacenter_never_heard_is_named_and_flagged() {
    let cluster = TestCluster::start_with(topology(), |dc| dc == 0).await;
    let global = cluster.global.api();
    let sent = write_concurrently(&cluster, &[0], 2, 10).await;
    let id = COUNTERS[1];

    let (status, refusal) = global.global_read(id, "").await;
    assert_eq!(status, 503, "{refusal}");
    assert_eq!(refusal["stale_datacenters"], serde_json::json!(["ASIA_0"]));
    assert!(
        refusal["error"]
            .as_str()
            .unwrap()
            .contains("ASIA_0 (never heard)"),
        "{refusal}"
    );

    let usa_total = sent.in_datacenter(id, 0);
    let partial = poll_until(
        "a partial answer with USA_0's total",
        || global.global_read(id, "allow_partial=true"),
        |status, body| {
            status == 200 && body["datacenters"]["USA_0"]["value"].as_i64() == Some(usa_total)
        },
    )
    .await;
    assert_eq!(partial["value"].as_i64(), Some(usa_total));
    assert_eq!(partial["complete"], false);
    assert_eq!(partial["staleness_ms"], Value::Null, "{partial}");
    let asia = &partial["datacenters"]["ASIA_0"];
    assert_eq!(
        (
            &asia["heard"],
            &asia["staleness_ms"],
            asia["value"].as_i64()
        ),
        (&Value::from(false), &Value::Null, Some(0)),
        "{partial}"
    );
    assert_eq!(partial["datacenters"]["USA_0"]["heard"], true);

    let (status, datacenters) = global.get_json("/datacenters").await;
    assert_eq!(status, 200, "{datacenters}");
    let asia = &datacenters["datacenters"]["ASIA_0"];
    assert_eq!(asia["heard"], false, "{datacenters}");
    assert_eq!(asia["last_heard_ms_ago"], Value::Null);
    assert_eq!(asia["staleness_ms"], Value::Null);
    assert_eq!(asia["counters"], 0);
    assert_eq!(
        asia["aggregator"],
        cluster.topology.topology.datacenters[1]
            .aggregator
            .to_string()
    );
    assert!(asia["last_error"].is_string(), "{datacenters}");
    let usa = &datacenters["datacenters"]["USA_0"];
    assert_eq!(usa["heard"], true, "{datacenters}");
    assert!(usa["counters"].as_u64() > Some(0), "{datacenters}");
}

#[tokio::test]
async fn a_restarted_datacenter_aggregator_rebuilds_from_its_shards() {
    let mut cluster = TestCluster::start(topology()).await;
    let global = cluster.global.api();
    let mut sent = write_concurrently(&cluster, &[0, 1], 4, 20).await;
    await_global_totals(&global, &sent).await;

    let usa = 0;
    let aggregator = cluster.aggregator_mut(usa);
    aggregator.kill9();
    aggregator.restart().await;
    let api = aggregator.api();
    for id in COUNTERS {
        let expected = sent.in_datacenter(id, usa);
        poll_until(
            &format!("rebuilt USA_0 total of {id} = {expected}"),
            || api.read(id),
            |status, body| {
                status == 200
                    && body["value"].as_i64() == Some(expected)
                    && body["complete"] == true
            },
        )
        .await;
    }
    await_global_totals(&global, &sent).await;

    sent.add(write_concurrently(&cluster, &[0, 1], 2, 10).await);
    await_global_totals(&global, &sent).await;
}

#[tokio::test]
async fn a_killed_shard_counts_with_its_last_value_and_grows_stale() {
    let mut cluster = TestCluster::start(topology()).await;
    let usa = 0;
    let sent = write_concurrently(&cluster, &[usa], 4, 20).await;
    let aggregator = cluster.aggregator(usa).api();
    let mut answers = HashMap::new();
    for id in COUNTERS {
        let expected = sent.in_datacenter(id, usa);
        let answer = poll_until(
            &format!("USA_0 total of {id} = {expected}"),
            || aggregator.read(id),
            |status, body| status == 200 && body["value"].as_i64() == Some(expected),
        )
        .await;
        answers.insert(id, answer);
    }
    // The slot holding the most counters' values: kill its shard.
    let slot = (0..SHARDS_PER_DATACENTER)
        .max_by_key(|n| {
            let name = SlotId::new("USA_0", *n as u32).to_string();
            answers
                .values()
                .filter(|a| a["slots"][&name]["version"].as_u64() > Some(0))
                .count()
        })
        .unwrap();
    let name = SlotId::new("USA_0", slot as u32).to_string();
    cluster.shards[usa][slot].kill9();

    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, first) = aggregator.read(COUNTERS[0]).await;
    assert_eq!(status, 200, "{first}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    for id in COUNTERS {
        let (status, answer) = aggregator.read(id).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer["value"].as_i64(),
            Some(sent.in_datacenter(id, usa)),
            "the killed shard's slot counts with its last value: {answer}"
        );
        let (now, then) = (&answer["slots"][&name], &answers[id]["slots"][&name]);
        assert_eq!(
            (&now["value"], &now["version"]),
            (&then["value"], &then["version"])
        );
    }
    let (_, second) = aggregator.read(COUNTERS[0]).await;
    let before = first["slots"][&name]["staleness_ms"]
        .as_u64()
        .expect("heard");
    let after = second["slots"][&name]["staleness_ms"]
        .as_u64()
        .expect("heard");
    assert!(
        after >= before + 300,
        "staleness grows: {before} ms, then {after} ms"
    );
    assert!(second["staleness_ms"].as_u64() >= Some(after), "{second}");

    let (status, health) = aggregator.get_json("/healthz").await;
    assert_eq!(status, 200);
    assert!(health["slots"][&name]["last_error"].is_string(), "{health}");
}

#[tokio::test]
async fn aggregators_refuse_a_bad_configuration_and_stop_on_sigterm() {
    let topology = topology();
    let stderr = config_error(
        Command::new(binary("datacenter-aggregator"))
            .arg("--config")
            .arg(&topology.path)
            .args(["--dc", "MARS"]),
    );
    let file_and_key = format!(
        "datacenter-aggregator: {}: datacenters:",
        topology.path.display()
    );
    assert!(stderr.starts_with(&file_and_key), "{stderr}");

    let mut aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let mut global = topology.start_global_aggregator().await;
    let (status, health) = global.api().get_json("/healthz").await;
    assert_eq!(status, 200, "{health}");
    assert!(
        aggregator.terminate().success(),
        "{}",
        aggregator.log_tail()
    );
    assert!(global.terminate().success(), "{}", global.log_tail());
}
