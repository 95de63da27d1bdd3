//! What the two binaries share: resolving the topology, TLS between tiers, and running a tier
//! until SIGTERM or Ctrl-C.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use geocount_http::tls::tier_tls;
use geocount_model::{Clock, SystemClock, Topology, TopologyError};
use geocount_net::binary::Shutdown;
use geocount_net::tls::{MaybeTlsListener, secure};
use geocount_net::{Connector, ProcessSetup, tcp_connector};
use tokio::net::TcpListener;

use crate::settings::Settings;

/// Runs binary `binary` on the topology in `file`: `resolve` gives the tier's configuration,
/// its settings and the process name it proves itself by; `run` serves until shutdown.
pub fn serve<C, F>(
    binary: &str,
    file: &Path,
    resolve: impl FnOnce(&Topology) -> Result<(C, String), TopologyError>,
    settings: impl Fn(&C) -> &Settings,
    run: impl FnOnce(C, MaybeTlsListener<TcpListener>, Arc<dyn Clock>, Connector, Shutdown) -> F,
) -> ExitCode
where
    F: Future<Output = ()>,
{
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
