//! `global-aggregator --config FILE`: the global aggregator of a topology.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use geocount_model::{SystemClock, Topology};
use global_aggregator::GlobalAggregatorConfig;

/// Runs the geocount global aggregator: it pulls every datacenter aggregator and sums
/// datacenters, refusing or flagging stale ones.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The topology file (TOML); `GEOCOUNT_*` environment variables override its keys.
    #[arg(long)]
    config: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = Topology::load(&args.config).map(|t| GlobalAggregatorConfig::from_topology(&t));
    geocount_net::run_tier(
        "global-aggregator",
        config,
        |config| config.listen,
        |config, listener, shutdown| {
            global_aggregator::run(
                config,
                listener,
                Arc::new(SystemClock),
                geocount_net::tcp_connector(),
                shutdown,
            )
        },
    )
}
