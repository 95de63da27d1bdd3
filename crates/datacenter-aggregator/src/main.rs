//! `datacenter-aggregator --config FILE --dc NAME`: aggregates datacenter NAME.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use datacenter_aggregator::AggregatorConfig;
use geocount_model::role::aggregator_process;
use geocount_model::{SystemClock, Topology};
use geocount_net::tls::secure;
use geocount_net::{ProcessSetup, tcp_connector};
use geocount_sync::tls::tier_tls;

/// Runs one geocount datacenter aggregator: it pulls its datacenter's shard nodes and sums
/// their slots of every counter.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The datacenter to aggregate, as named in the topology.
    #[arg(long)]
    dc: String,
    /// The topology file (TOML); `GEOCOUNT_*` environment variables override its keys.
    #[arg(long)]
    config: PathBuf,
}

/// mimalloc rather than glibc's malloc, which is slower when memory is freed on another thread
/// than the one that allocated it (ARCHITECTURE.md, "Dependencies beyond the design set").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    geocount_net::idle::release_memory_with(geocount_net::idle::release_mimalloc_memory);
    let config = Topology::load(&args.config).and_then(|topology| {
        let config = AggregatorConfig::from_topology(&topology, &args.config, &args.dc)?;
        topology.check_listen(&args.config, config.listen)?;
        let tls = tier_tls(&topology, &args.config, &aggregator_process(&args.dc))?;
        Ok((config, tls))
    });
    geocount_net::run_tier(
        "datacenter-aggregator",
        config,
        |(config, _)| ProcessSetup {
            listen: config.listen,
            huge_pages: config.huge_pages,
        },
        |(config, tls), listener, shutdown| {
            let (listener, connector) = secure(listener, tcp_connector(), tls.as_ref());
            datacenter_aggregator::run(config, listener, Arc::new(SystemClock), connector, shutdown)
        },
    )
}
