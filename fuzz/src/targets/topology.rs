//! The topology file (TOML, read with figment), validated as every binary reads it, then
//! resolved as each binary does: every shard node's, every aggregator replica's and every
//! global aggregator replica's configuration, the placement ring of every datacenter, regions
//! and WAN links.

use std::path::Path;

use geocount_aggregator::{DatacenterSettings, GlobalSettings};
use geocount_model::{Placement, SlotId, Topology};
use shard_node::NodeConfig;

/// The most ring points built per input: the ring of a valid topology is bounded
/// (`MAX_VIRTUAL_NODES` per slot), but a large one only slows the fuzzer down.
const MAX_RING_POINTS: usize = 1 << 16;

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(topology) = Topology::from_toml("fuzz.toml", text) else {
        return false;
    };
    let file = Path::new("fuzz.toml");
    // Every replica of the global aggregator the topology lists, and one past them.
    let global_replicas = topology.global.addresses().len();
    for replica in 0..=global_replicas {
        let global = GlobalSettings::from_topology(&topology, file, replica);
        assert_eq!(
            global.is_ok(),
            replica < global_replicas,
            "global replica {replica}"
        );
        if let Ok(global) = global {
            let _ = (
                global.slot_names(),
                global.slot_datacenters(),
                global.sources(),
            );
        }
    }
    for prefix in topology.trending.thresholds.keys() {
        assert!(topology.trending.threshold(prefix).is_ok());
    }
    let _ = topology.trending.threshold("");
    for dc in &topology.datacenters {
        let region = dc.region();
        if let Some(wan) = &topology.wan {
            let _ = wan.link(&wan.global_region, region);
        }
        let aggregators = dc.aggregators().len();
        for replica in 0..=aggregators {
            let aggregator = DatacenterSettings::from_topology(&topology, file, &dc.name, replica);
            assert_eq!(
                aggregator.is_ok(),
                replica < aggregators,
                "{} replica {replica}",
                dc.name
            );
            if let Ok(aggregator) = aggregator {
                let _ = (aggregator.slot_names(), aggregator.sources());
            }
        }
        let slots = u32::try_from(dc.shards.len()).expect("at most 65535 slots");
        for slot in 0..=slots {
            let node = NodeConfig::from_topology(&topology, file, &dc.name, slot, None);
            assert_eq!(node.is_ok(), slot < slots, "slot {slot} of {slots}");
            let _ = topology.shard_address(&SlotId::new(&dc.name, slot));
        }
        if dc.shards.len() * topology.shard.virtual_nodes as usize <= MAX_RING_POINTS {
            let placement = Placement::new(&dc.name, slots, topology.shard.virtual_nodes);
            let chosen =
                placement.slots_for("tweet:1:likes", topology.shard.default_number_of_shards);
            assert!(!chosen.is_empty() && chosen.iter().all(|s| *s < slots));
        }
    }
    let _ = topology.datacenter("NO_SUCH_DC");
    true
}
