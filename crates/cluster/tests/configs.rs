//! Every topology shipped in `config/` loads, and the launcher plans every process of it: each
//! aggregator replica included, each with its own address; with `--wan`, the emulator accepts its
//! links and every process gets its copy of the topology.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;

use geocount_cluster::{members, wan};
use geocount_model::Topology;
use geocount_wan::WanConfig;

#[test]
fn every_shipped_topology_plans_every_replica() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    for (file, processes) in [
        ("local.toml", 1 + 3 + 6),
        ("geo-10dc.toml", 1 + 10 + 27),
        ("partitioned.toml", 4 + 6 + 6),
    ] {
        let path = config.join(file);
        let topology = Topology::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let planned = members(&topology);
        let mut addresses = HashSet::new();
        for member in &planned {
            let launch = member.launch(&topology, &path, Path::new("data")).unwrap();
            assert!(
                addresses.insert(launch.address),
                "{file}: {}",
                member.name()
            );
        }
        assert_eq!(planned.len(), processes, "{file}");
    }
}

#[test]
fn every_shipped_wan_gives_links_the_emulator_accepts_and_a_view_to_each_process() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    // Two per remote datacenter's aggregator, and one per (datacenter, shard node of another
    // region): local 3 + 4 + 5, geo-10dc 7 × 6 + 23 + 23 + 25.
    for (file, links) in [("local.toml", 4 + 12), ("geo-10dc.toml", 6 + 113)] {
        let topology = Topology::load(&config.join(file)).unwrap_or_else(|e| panic!("{e}"));
        let settings = topology.wan.clone().expect("[wan]");
        let emulator = wan::emulator_config(&topology, &settings);
        assert_eq!(emulator.links.len(), links, "{file}");
        let text = toml::to_string(&emulator).unwrap();
        let parsed = WanConfig::from_toml("wan.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed, emulator, "{file}");
        let proxies: HashMap<String, SocketAddr> = (emulator.links.iter().zip(20_000u16..))
            .map(|(link, port)| (link.name.clone(), SocketAddr::from(([127, 0, 0, 1], port))))
            .collect();
        for member in members(&topology) {
            let view = wan::view(&topology, &settings, &member, &proxies)
                .unwrap_or_else(|e| panic!("{file}: {}: {e}", member.name()));
            let text = toml::to_string(&view).unwrap();
            Topology::from_toml(file, &text).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
