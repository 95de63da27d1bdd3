//! `datacenter-aggregator --config FILE --dc NAME`: aggregates datacenter NAME.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use geocount_aggregator::{DatacenterConfig, datacenter, process};
use geocount_model::role::aggregator_process;

/// Runs one geocount datacenter aggregator: it pulls its datacenter's shard nodes and sums
/// their slots of every counter.
#[derive(Debug, Parser)]
#[command(
    name = "datacenter-aggregator",
    version,
    about = "The geocount datacenter aggregator: pulls its datacenter's shard nodes and sums their \
             slots of every counter, from memory."
)]
struct Args {
    /// The datacenter to aggregate, as named in the topology.
    #[arg(long)]
    dc: String,
    /// The topology file (TOML); `GEOCOUNT_*` environment variables override its keys.
    #[arg(long)]
    config: PathBuf,
}

/// mimalloc rather than glibc's malloc, which is slower when memory is freed on another thread
/// than the one that allocated it (docs/architecture.md, "Dependencies").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    process::serve(
        "datacenter-aggregator",
        &args.config,
        |topology| {
            let config = DatacenterConfig::from_topology(topology, &args.config, &args.dc)?;
            Ok((config, aggregator_process(&args.dc)))
        },
        |config| &config.settings,
        datacenter::run,
    )
}
