//! Slots are fenced: a node started with a stale topology, listening at the address the
//! datacenter pulls for another slot, cannot feed its writes into the slot it believes it owns.

use std::time::Duration;

use geocount_test_support::{NodeProcess, TestTopology, eventually};

/// The counters written, all of which slot 0 owns.
async fn ids_of_slot_0(node: &geocount_test_support::Api, want: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0.. {
        let id = format!("fenced-{n}");
        let (_, route) = node.get_json(&format!("/counter/{id}/route")).await;
        if route["slots"][0]["slot"] == "DC_USA_0_VAL_0" {
            ids.push(id);
            if ids.len() == want {
                break;
            }
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_stale_topology_cannot_feed_another_slot() {
    let topology = TestTopology::new(&[("USA_0", 2)], "restore_timeout_ms = 200");
    let _global = topology.start_global_aggregator().await;
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let owner = topology.start_shard("USA_0", 0).await;

    // The same topology with the two shard addresses swapped: the stale node believes it owns
    // slot 0 and listens where the datacenter pulls slot 1.
    let (a0, a1) = (
        topology.shard_addr("USA_0", 0),
        topology.shard_addr("USA_0", 1),
    );
    let text = std::fs::read_to_string(&topology.path).unwrap().replace(
        &format!("\"{a0}\", \"{a1}\""),
        &format!("\"{a1}\", \"{a0}\""),
    );
    let stale_file = topology.dir().join("stale.toml");
    std::fs::write(&stale_file, text).unwrap();
    let stale_dir = topology.dir().join("stale-data");
    let args = [
        "--config",
        stale_file.to_str().unwrap(),
        "--dc",
        "USA_0",
        "--slot",
        "0",
        "--data-dir",
        stale_dir.to_str().unwrap(),
    ]
    .map(String::from);
    let first = ["--restore", "empty"].map(String::from);
    let stale =
        NodeProcess::start_first("shard-node", "stale", &args, &first, a1, topology.dir()).await;

    let ids = ids_of_slot_0(&owner.api(), 5).await;
    for id in &ids {
        assert_eq!(owner.api().add(id, 5).await.unwrap().0, 200);
    }
    // Later, so newer by version: on its own copy of "slot 0".
    for id in &ids {
        assert_eq!(stale.api().add(id, 100).await.unwrap().0, 200);
    }

    let agg = aggregator.api();
    for id in &ids {
        agg.read_until(
            Duration::from_secs(10),
            &format!("/counter/{id}"),
            |s, _| s == 200,
        )
        .await;
    }
    // Several pulls of both addresses later, only the owner's writes count.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for id in &ids {
        let (_, body) = agg.read(id).await;
        assert_eq!(
            body["value"], 5,
            "{id}: only the owner's writes count: {body}"
        );
    }
    eventually(
        Duration::from_secs(10),
        "the aggregator refuses the stale pages",
        || {
            let agg = agg.clone();
            async move {
                let metrics = agg.get("/metrics").await.ok()?;
                let text = String::from_utf8_lossy(&metrics.body).into_owned();
                text.lines()
                    .any(|l| {
                        l.starts_with("geocount_datacenter_entries_refused_total{reason=\"slot\"}")
                            && !l.ends_with(" 0")
                    })
                    .then_some(())
            }
        },
    )
    .await;
    let (_, health) = agg.get_json("/healthz").await;
    let error = health["slots"]["DC_USA_0_VAL_1"]["last_error"].to_string();
    assert!(error.contains("DC_USA_0_VAL_0"), "{health}");
    // The owner refuses the stale node's pages too.
    let owner_api = owner.api();
    eventually(
        Duration::from_secs(10),
        "the owner refuses the stale pages",
        || {
            let owner_api = owner_api.clone();
            async move {
                let metrics = owner_api.get("/metrics").await.ok()?;
                let text = String::from_utf8_lossy(&metrics.body).into_owned();
                text.lines()
                    .any(|l| {
                        l.starts_with("geocount_shard_entries_refused_total") && !l.ends_with(" 0")
                    })
                    .then_some(())
            }
        },
    )
    .await;
    for id in &ids {
        assert_eq!(owner.api().value(id).await, 5);
    }
}
