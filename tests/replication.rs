//! End-to-end tests of routing and replication inside a datacenter, and of descriptions
//! crossing every tier: real binaries on loopback ports.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use geocount_model::wire::{BatchEntry, BatchRequest, EntryOutcome};
use geocount_test_support::api::entry;
use geocount_test_support::{Api, NodeProcess, TestTopology, eventually};
use serde_json::{Value, json};

async fn start_shards(topology: &TestTopology, dc: &str, count: usize) -> Vec<NodeProcess> {
    let mut nodes = Vec::new();
    for slot in 0..count {
        nodes.push(topology.start_shard(dc, slot).await);
    }
    nodes
}

/// The global aggregator, then USA_0's and ASIA_0's, then every shard node of USA_0 and of
/// ASIA_0: ([global, USA_0's, ASIA_0's], USA_0's shard nodes, ASIA_0's).
async fn start_usa_and_asia(
    topology: &TestTopology,
) -> ([NodeProcess; 3], Vec<NodeProcess>, Vec<NodeProcess>) {
    let aggregators = [
        topology.start_global_aggregator().await,
        topology.start_datacenter_aggregator("USA_0").await,
        topology.start_datacenter_aggregator("ASIA_0").await,
    ];
    let count = |d: usize| topology.topology.datacenters[d].shards.len();
    let usa = start_shards(topology, "USA_0", count(0)).await;
    let asia = start_shards(topology, "ASIA_0", count(1)).await;
    (aggregators, usa, asia)
}

/// The counter's route as a node sees it: (numberOfShards, slot names).
async fn route(api: &Api, id: &str) -> (u64, Vec<String>) {
    let answer = api.get(&format!("/counter/{id}/route")).await.unwrap();
    assert_eq!(answer.status, 200);
    let body = answer.json();
    let slots = body["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["slot"].as_str().unwrap().to_owned())
        .collect();
    (body["numberOfShards"].as_u64().unwrap(), slots)
}

/// Waits until every one of `nodes` routes counter `id` over `shards` slots (across
/// datacenters, a description takes two aggregators' pulls and more).
async fn until_every_node_routes(nodes: &[NodeProcess], id: &str, shards: u64) {
    for node in nodes {
        let api = node.api();
        eventually(
            Duration::from_secs(8),
            &format!("{id}'s description at {}", node.name),
            || async { (route(&api, id).await.0 == shards).then_some(()) },
        )
        .await;
    }
}

/// Each node's own-slot value of counter `id` (absent where it holds none).
async fn slot_values(nodes: &[NodeProcess], id: &str) -> HashMap<String, i64> {
    let mut values = HashMap::new();
    for node in nodes {
        let (status, body) = node.api().read(id).await;
        if status == 200 {
            values.insert(
                body["slot"].as_str().unwrap().to_owned(),
                body["value"].as_i64().unwrap(),
            );
        }
    }
    values
}

#[tokio::test]
async fn writes_land_on_the_counters_slot_from_any_node() {
    let topology = TestTopology::new(&[("USA_0", 3)], "restore_timeout_ms = 200");
    let nodes = start_shards(&topology, "USA_0", 3).await;
    let (shards, slots) = route(&nodes[0].api(), "tweet:9:likes").await;
    assert_eq!((shards, slots.len()), (1, 1));
    // Every node agrees on the route.
    for node in &nodes {
        assert_eq!(route(&node.api(), "tweet:9:likes").await.1, slots);
    }
    for (i, node) in nodes.iter().enumerate() {
        let (status, body) = node.api().add("tweet:9:likes", i as i64 + 1).await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["slot"],
            slots[0].as_str(),
            "the answer names the slot that took it"
        );
    }
    let values = slot_values(&nodes, "tweet:9:likes").await;
    assert_eq!(
        values,
        HashMap::from([(slots[0].clone(), 6)]),
        "all three writes in the counter's one slot"
    );

    // A batch through one node reaches each counter's own slot.
    let ids: Vec<String> = (0..30).map(|n| format!("batch-{n}")).collect();
    let entries: Vec<BatchEntry> = ids.iter().map(|id| entry(id, 2)).collect();
    let answer = nodes[1].api().batch(&entries).await.unwrap();
    assert!(
        answer
            .outcomes
            .iter()
            .all(|o| matches!(o, EntryOutcome::Applied { value: 2, .. })),
        "{answer:?}"
    );
    let mut slots_used = std::collections::HashSet::new();
    for id in &ids {
        let (_, slots) = route(&nodes[0].api(), id).await;
        assert_eq!(
            slot_values(&nodes, id).await,
            HashMap::from([(slots[0].clone(), 2)]),
            "{id}"
        );
        slots_used.insert(slots[0].clone());
    }
    assert_eq!(
        slots_used.len(),
        3,
        "thirty counters spread over all three slots"
    );
    let metrics =
        String::from_utf8(nodes[1].api().get("/metrics").await.unwrap().body.to_vec()).unwrap();
    let forwarded: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("geocount_shard_writes_forwarded_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no forwarded-writes counter in\n{metrics}"));
    assert!(forwarded > 0, "{metrics}");
    for peer in ["DC_USA_0_VAL_0", "DC_USA_0_VAL_2"] {
        let line = format!("geocount_shard_source_staleness_seconds{{source=\"{peer}\"}}");
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }
}

#[tokio::test]
async fn an_idempotent_retry_is_deduplicated_wherever_it_arrives() {
    let topology = TestTopology::new(&[("USA_0", 3)], "restore_timeout_ms = 200");
    let nodes = start_shards(&topology, "USA_0", 3).await;
    // Spread the counter over every slot: only the key then decides the slot.
    nodes[0]
        .api()
        .created(json!({"id": "spread", "numberOfShards": 3}))
        .await;
    until_every_node_routes(&nodes, "spread", 3).await;
    let mut first = None;
    for node in nodes.iter().cycle().take(9) {
        let answer = node
            .api()
            .write(
                "spread",
                "INCREMENT",
                Some(json!({"delta": 4})),
                Some("payment-77"),
            )
            .await
            .unwrap();
        assert_eq!(answer.0, 200, "{answer:?}");
        let first = first.get_or_insert_with(|| answer.clone());
        assert_eq!(&answer, first, "every retry answers as the first write");
    }
    let total: i64 = slot_values(&nodes, "spread").await.values().sum();
    assert_eq!(total, 4, "nine retries through three nodes applied once");
}

#[tokio::test]
async fn a_keyed_retry_is_deduplicated_after_the_counters_slot_count_changes() {
    let topology = TestTopology::new(&[("USA_0", 3)], "restore_timeout_ms = 200");
    let nodes = start_shards(&topology, "USA_0", 3).await;
    let keys: Vec<String> = (0..20).map(|n| format!("order-{n}")).collect();
    let write_all = |node: &NodeProcess| {
        let api = node.api();
        let keys = keys.clone();
        async move {
            let mut answers = Vec::new();
            for key in &keys {
                let answer = api.write_keyed("late", json!({"delta": 1}), key).await;
                assert_eq!(answer.0, 200, "{answer:?}");
                answers.push(answer);
            }
            answers
        }
    };
    // First attempts before any node has heard of the counter: one slot, the default.
    let first = write_all(&nodes[1]).await;
    let held = slot_values(&nodes, "late").await;
    assert_eq!(held.values().sum::<i64>(), 20, "{held:?}");
    // Then it is created with three slots at a node that holds none of it.
    let creator = nodes
        .iter()
        .find(|node| !held.contains_key(&node.name))
        .expect("a node without the counter");
    creator
        .api()
        .created(json!({"id": "late", "numberOfShards": 3}))
        .await;
    until_every_node_routes(&nodes, "late", 3).await;
    // Retries through every node meet their first attempts.
    for node in &nodes {
        assert_eq!(
            write_all(node).await,
            first,
            "retries through {}",
            node.name
        );
    }
    let total: i64 = slot_values(&nodes, "late").await.values().sum();
    assert_eq!(total, 20, "sixty retries applied nothing more");
}

#[tokio::test]
async fn a_description_created_anywhere_reaches_every_node_of_every_datacenter() {
    let topology = TestTopology::new(&[("USA_0", 2), ("ASIA_0", 2)], "restore_timeout_ms = 500");
    let (_aggregators, mut nodes, asia) = start_usa_and_asia(&topology).await;
    nodes.extend(asia);
    nodes[0]
        .api()
        .created(json!({"id": "launch", "numberOfShards": 2, "windowSeconds": 60}))
        .await;
    until_every_node_routes(&nodes, "launch", 2).await;
    for node in &nodes {
        // Known there, so it reads as 0 rather than 404.
        let (status, body) = node.api().read("launch").await;
        assert_eq!(
            (status, body["value"].as_i64()),
            (200, Some(0)),
            "{}",
            node.name
        );
    }
    // A second create of the same id anywhere is a conflict once the description arrived.
    let (status, _) = nodes[3].api().create(json!({"id": "launch"})).await;
    assert_eq!(status, 409);
}

/// Writes `rounds` increments of 1 to each counter through every node in turn; returns the
/// acknowledged total per counter.
async fn write_through_all(
    nodes: &[NodeProcess],
    ids: &[String],
    rounds: usize,
) -> HashMap<String, i64> {
    let mut acknowledged = HashMap::new();
    for round in 0..rounds {
        for id in ids {
            let node = &nodes[round % nodes.len()];
            let (status, body) = node.api().add(id, 1).await.unwrap();
            assert_eq!(status, 200, "{body}");
            *acknowledged.entry(id.clone()).or_default() += 1;
        }
    }
    acknowledged
}

#[tokio::test]
async fn a_shard_restarted_on_an_empty_disk_restores_its_slot_from_its_peers() {
    let topology = TestTopology::new(&[("USA_0", 3), ("ASIA_0", 2)], "restore_timeout_ms = 3000");
    let ([global, _usa, _asia], mut nodes, asia) = start_usa_and_asia(&topology).await;
    let ids: Vec<String> = (0..40).map(|n| format!("restore-{n}")).collect();
    let mut acknowledged = write_through_all(&nodes, &ids, 3).await;
    for (n, id) in ids[..6].iter().enumerate() {
        asia[n % 2].api().add(id, 10).await.unwrap();
        *acknowledged.get_mut(id).unwrap() += 10;
    }
    // The victim's slot, as its peers hold it, must be complete before the disk is lost.
    let victim_slot = nodes[0].name.clone();
    let victim_values: HashMap<String, i64> = {
        let mut values = HashMap::new();
        for id in &ids {
            let (status, body) = nodes[0].api().read(id).await;
            if status == 200 {
                values.insert(id.clone(), body["value"].as_i64().unwrap());
            }
        }
        values
    };
    assert!(
        victim_values.len() > 5,
        "the victim's slot holds too few counters to test: {}",
        victim_values.len()
    );
    let peer = nodes[1].api();
    eventually(
        Duration::from_secs(5),
        "the peer's replica of the victim's slot",
        || async {
            let answer = peer.get(&format!("/slots/{victim_slot}/copy")).await.ok()?;
            let copy: geocount_model::wire::SlotCopy = postcard::from_bytes(&answer.body).ok()?;
            // Every counter at its last value, not only every counter.
            let held: HashMap<String, i64> = copy
                .entries
                .into_iter()
                .map(|(id, record)| (id, record.state.value))
                .collect();
            (held == victim_values).then_some(())
        },
    )
    .await;

    nodes[0].kill9();
    std::fs::remove_dir_all(topology.shard_data_dir("USA_0", 0)).unwrap();
    nodes[0].restart().await;
    for (id, value) in &victim_values {
        assert_eq!(nodes[0].api().value(id).await, *value, "{id} restored");
    }
    // It keeps taking writes, numbered above everything restored.
    let id = victim_values.keys().next().unwrap().clone();
    let (_, before) = nodes[0].api().read(&id).await;
    let (status, after) = nodes[0].api().add(&id, 1).await.unwrap();
    assert_eq!(status, 200);
    if after["slot"] == before["slot"] {
        assert!(after["version"].as_u64() > before["version"].as_u64());
    }
    *acknowledged.get_mut(&id).unwrap() += 1;

    // And the global totals stay exact.
    let global = global.api();
    for (id, total) in &acknowledged {
        let path = format!("/counter/{id}");
        eventually(
            Duration::from_secs(8),
            &format!("the global total of {id}"),
            || async {
                let body: Value = global.get(&path).await.ok()?.json();
                (body["value"].as_i64() == Some(*total) && body["complete"] == true).then_some(())
            },
        )
        .await;
    }
}

#[tokio::test]
async fn a_hot_counter_spreads_over_more_slots_and_stays_exact() {
    let topology = TestTopology::new(
        &[("USA_0", 3), ("ASIA_0", 2)],
        "restore_timeout_ms = 200\nhot_writes_per_slot = 40",
    );
    let ([global, aggregator, _asia_aggregator], nodes, asia) = start_usa_and_asia(&topology).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    // Six writers hammer the counter in USA_0; one writes it gently in ASIA_0.
    for w in 0..7 {
        let api = if w < 6 {
            nodes[w % 3].api()
        } else {
            asia[0].api()
        };
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut sum = 0i64;
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let delta = if n % 5 == 0 { -2 } else { 3 };
                let (status, body) = api.add("trending", delta).await.unwrap();
                assert_eq!(status, 200, "{body}");
                sum += delta;
            }
            sum
        }));
    }
    let api = nodes[0].api();
    eventually(Duration::from_secs(10), "the hot counter to grow", || {
        let api = api.clone();
        async move { (route(&api, "trending").await.0 > 1).then_some(()) }
    })
    .await;
    // Keep writing a little so the new slots take writes too.
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acknowledged = 0;
    let mut in_asia = 0;
    for (w, writer) in writers.into_iter().enumerate() {
        let sum = writer.await.unwrap();
        if w < 6 {
            acknowledged += sum;
        } else {
            in_asia = sum;
        }
    }
    let values = slot_values(&nodes, "trending").await;
    assert!(
        values.len() > 1,
        "writes spread over several slots: {values:?}"
    );
    assert_eq!(values.values().sum::<i64>(), acknowledged, "{values:?}");
    let aggregator = aggregator.api();
    eventually(Duration::from_secs(5), "the datacenter total", || {
        let aggregator = aggregator.clone();
        async move {
            let body: Value = aggregator.get("/counter/trending").await.ok()?.json();
            (body["value"].as_i64() == Some(acknowledged)).then_some(())
        }
    })
    .await;
    let global = global.api();
    let world = acknowledged + in_asia;
    eventually(Duration::from_secs(5), "the world total", || {
        let global = global.clone();
        async move {
            let body: Value = global.get("/counter/trending").await.ok()?.json();
            (body["value"].as_i64() == Some(world) && body["complete"] == true).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn a_write_for_an_unreachable_slot_is_taken_locally_unless_it_carries_a_key() {
    let topology = TestTopology::new(&[("USA_0", 2)], "restore_timeout_ms = 200");
    let mut nodes = start_shards(&topology, "USA_0", 2).await;
    // A counter whose one slot is node 1's.
    let id = (0..)
        .map(|n| format!("orphan-{n}"))
        .find(|id| placed_on(&topology, id, 1))
        .unwrap();
    nodes[1].kill9();
    let (status, body) = nodes[0].api().add(&id, 5).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["slot"],
        nodes[0].name.as_str(),
        "taken by the node that received it"
    );
    let (status, body) = nodes[0]
        .api()
        .write(&id, "INCREMENT", None, Some("k-1"))
        .await
        .unwrap();
    assert_eq!(status, 503, "a keyed write waits for its slot: {body}");
    // Batches follow the same rule entry by entry.
    let entries = [
        entry(&id, 1),
        BatchEntry {
            id: &id,
            delta: 1,
            idempotency_key: Some("k-2"),
            timestamp: None,
        },
    ];
    let answer = nodes[0].api().batch(&entries).await.unwrap();
    assert!(
        matches!(answer.outcomes[0], EntryOutcome::Applied { value: 6, .. }),
        "{answer:?}"
    );
    assert!(
        matches!(
            answer.outcomes[1],
            EntryOutcome::Refused { status: 503, .. }
        ),
        "{answer:?}"
    );
    nodes[1].restart().await;
    let values = slot_values(&nodes, &id).await;
    assert_eq!(values.values().sum::<i64>(), 6, "{values:?}");
}

/// Whether counter `id` (one slot) is placed on slot `slot` of USA_0.
fn placed_on(topology: &TestTopology, id: &str, slot: u32) -> bool {
    let dc = topology.topology.datacenter("USA_0").unwrap();
    let placement = geocount_model::Placement::new(
        "USA_0",
        dc.shards.len() as u32,
        topology.topology.shard.virtual_nodes,
    );
    placement.slots_for(id, 1) == [slot]
}

/// A batch is routed while the node learns descriptions: its handler must not hold the
/// descriptions' lock while the router takes it again, or a create waiting to write between
/// the two reads deadlocks the node (found by the benchmark's cluster step).
#[tokio::test]
async fn batches_keep_being_answered_while_counters_are_created() {
    let topology = TestTopology::new(&[("USA_0", 2)], "");
    let nodes = start_shards(&topology, "USA_0", 2).await;
    let api = nodes[0].api();
    let ids: Vec<String> = (0..500).map(|n| format!("routed-{n}")).collect();
    let entries = BatchRequest::increments(&ids).entries;
    let creating = Arc::new(AtomicBool::new(true));
    let creator = {
        let api = api.clone();
        let creating = Arc::clone(&creating);
        tokio::spawn(async move {
            let mut created = 0;
            while creating.load(Ordering::Relaxed) {
                api.created(json!({"id": format!("made-{created}")})).await;
                created += 1;
            }
            created
        })
    };
    let started = std::time::Instant::now();
    let mut batches = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let answer = tokio::time::timeout(Duration::from_secs(10), api.batch(&entries))
            .await
            .expect("a batch is answered while counters are created")
            .expect("the batch is taken");
        assert!(
            answer
                .outcomes
                .iter()
                .all(|o| matches!(o, EntryOutcome::Applied { .. })),
            "{answer:?}"
        );
        batches += 1;
    }
    creating.store(false, Ordering::Relaxed);
    let created = tokio::time::timeout(Duration::from_secs(10), creator)
        .await
        .expect("creates are answered")
        .unwrap();
    assert!(
        batches > 0 && created > 0,
        "{batches} batches, {created} creates"
    );
}
