//! A tier's TLS from its topology: what each tier's binary loads before it serves.

use std::path::Path;

use geocount_model::{Topology, TopologyError};
use geocount_net::tls::TierTls;

/// The TLS of process `name` (`global`, `aggregator_<DC>` or `DC_<DC>_VAL_<n>`) of the topology
/// read from `topology_file`: its certificate and key from `tls.cert_dir` and the CA of
/// `tls.ca`; `None` without a `[tls]` section. A file that cannot be read or used is a one-line
/// error naming the topology file, the key and the file.
pub fn tier_tls(
    topology: &Topology,
    topology_file: &Path,
    name: &str,
) -> Result<Option<TierTls>, TopologyError> {
    let Some(tls) = &topology.tls else {
        return Ok(None);
    };
    TierTls::load(&tls.ca, &tls.cert(name), &tls.key(name))
        .map(Some)
        .map_err(|e| tls.file_error(topology_file, &e.file, e.message))
}
