//! Every topology shipped in `config/` loads, and the launcher plans every process of it: each
//! aggregator replica included, each with its own address.

use std::collections::HashSet;
use std::path::Path;

use geocount_cluster::members;
use geocount_model::Topology;

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
