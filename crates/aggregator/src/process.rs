//! What the two binaries share: resolving the topology, TLS between tiers, and running a tier
//! until SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use geocount_http::tls::tier_tls;
use geocount_model::{Clock, SystemClock, Topology, TopologyError};
use geocount_net::binary::Shutdown;
use geocount_net::tls::{MaybeTlsListener, secure};
use geocount_net::{Connector, ProcessSetup, tcp_connector};
use tokio::net::TcpListener;

use crate::settings::Settings;

/// The flags both binaries take.
#[derive(Debug, clap::Args)]
pub struct TierFlags {
    /// The topology file (TOML); `GEOCOUNT_*` environment variables override its keys.
    #[arg(long)]
    pub config: PathBuf,
    /// Which replica of the tier to run: 0 listens on the tier's first address, N on the N-th
    /// of its replica list (`global.replicas`, `datacenters[i].aggregator_replicas`).
    #[arg(long, default_value_t = 0)]
    pub replica: usize,
}

/// Runs binary `binary` with `flags`: `resolve` gives the tier's configuration from the
/// topology and the process name it proves itself by; `run` serves until shutdown.
pub fn serve<C, F>(
    binary: &str,
    flags: &TierFlags,
    run: impl FnOnce(C, MaybeTlsListener<TcpListener>, Arc<dyn Clock>, Connector, Shutdown) -> F,
    resolve: impl FnOnce(&Topology) -> Result<(C, String), TopologyError>,
) -> ExitCode
where
    C: AsRef<Settings>,
    F: Future<Output = ()>,
{
    let file = flags.config.as_path();
    fn settings<C: AsRef<Settings>>(config: &C) -> &Settings {
        config.as_ref()
    }
    geocount_net::idle::release_memory_with(geocount_net::idle::release_mimalloc_memory);
    let config = Topology::load(file).and_then(|topology| {
        let (config, process) = resolve(&topology)?;
        topology.check_listen(file, settings(&config).listen)?;
        let tls = tier_tls(&topology, file, &process)?;
        Ok((config, tls))
    });
    geocount_net::run_tier(
        binary,
        config,
        |(config, _)| ProcessSetup {
            listen: settings(config).listen,
            huge_pages: settings(config).huge_pages,
        },
        |(config, tls), listener, shutdown| {
            let (listener, connector) = secure(listener, tcp_connector(), tls.as_ref());
            run(config, listener, Arc::new(SystemClock), connector, shutdown)
        },
    )
}
