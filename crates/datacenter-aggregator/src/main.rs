//! `datacenter-aggregator --config FILE --dc NAME`: aggregates datacenter NAME.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use datacenter_aggregator::AggregatorConfig;
use geocount_model::{SystemClock, Topology};

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

fn main() -> ExitCode {
    let args = Args::parse();
    let config = Topology::load(&args.config)
        .and_then(|topology| AggregatorConfig::from_topology(&topology, &args.config, &args.dc));
    geocount_net::run_tier(
        "datacenter-aggregator",
        config,
        |config| config.listen,
        |config, listener, shutdown| {
            datacenter_aggregator::run(
                config,
                listener,
                Arc::new(SystemClock),
                geocount_net::tcp_connector(),
                shutdown,
            )
        },
    )
}
