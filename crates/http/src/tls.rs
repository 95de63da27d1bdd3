//! A tier's TLS from its topology: what each tier's binary loads before it serves.

use std::path::Path;
use std::sync::Arc;

use geocount_model::role::{GLOBAL_PROCESS, aggregator_process};
use geocount_model::{SlotId, Topology, TopologyError};
use geocount_net::tls::{Expected, TierTls};

/// The TLS of process `name` (`global`, `aggregator_<DC>` or `DC_<DC>_VAL_<n>`) of the topology
/// read from `topology_file`: its certificate and key from `tls.cert_dir` and the CA of
/// `tls.ca`, expecting each address of the topology to be served by its process (a puller
/// then takes pages, descriptions among them, only from the process it means to pull); `None`
/// without a `[tls]` section. A file that cannot be read or used, or a
/// certificate that does not name the process (URI `geocount:<name>`: the other tiers would
/// refuse its calls), is a one-line error naming the topology file, the key and the file.
pub fn tier_tls(
    topology: &Topology,
    topology_file: &Path,
    name: &str,
) -> Result<Option<TierTls>, TopologyError> {
    let Some(tls) = &topology.tls else {
        return Ok(None);
    };
    let cert = tls.cert(name);
    let loaded = TierTls::load(&tls.ca, &cert, &tls.key(name))
        .map_err(|e| tls.file_error(topology_file, &e.file, e.message))?;
    if loaded.process() != Some(name) {
        let message = format!(
            "names process {:?}, not {name:?}: it needs the URI geocount:{name} \
             (scripts/make-certs.sh writes it)",
            loaded.process().unwrap_or("(none)")
        );
        return Err(tls.file_error(topology_file, &cert, message));
    }
    Ok(Some(loaded.expecting(processes(topology))))
}

/// The process at each address of `topology`.
fn processes(topology: &Topology) -> Expected {
    let mut expected = Expected::new();
    // Replicas of a tier are one process to the others: same name, same routes.
    for global in topology.global.addresses() {
        expected.insert(global, Arc::from(GLOBAL_PROCESS));
    }
    for dc in &topology.datacenters {
        for aggregator in dc.aggregators() {
            expected.insert(aggregator, Arc::from(aggregator_process(&dc.name)));
        }
        for (n, shard) in dc.shards.iter().enumerate() {
            let slot = SlotId::new(dc.name.as_str(), n as u32);
            expected.insert(*shard, Arc::from(slot.to_string()));
        }
    }
    expected
}
