//! A tier's TLS from its topology: what each tier's binary loads before it serves.

use std::path::Path;

use geocount_model::{Topology, TopologyError};
use geocount_net::tls::TierTls;

/// The TLS of process `name` (`global`, `aggregator_<DC>` or `DC_<DC>_VAL_<n>`) of the topology
/// read from `topology_file`: its certificate and key from `tls.cert_dir` and the CA of
/// `tls.ca`; `None` without a `[tls]` section. A file that cannot be read or used, or a
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
    Ok(Some(loaded))
}
