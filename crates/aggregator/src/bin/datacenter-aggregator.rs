//! `datacenter-aggregator --config FILE --dc NAME [--replica N]`: aggregates datacenter NAME.

use std::process::ExitCode;

use clap::Parser;
use geocount_aggregator::process::{self, TierFlags};
use geocount_aggregator::{DatacenterSettings, datacenter};
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
    #[command(flatten)]
    tier: TierFlags,
}

/// mimalloc rather than glibc's malloc, which is slower when memory is freed on another thread
/// than the one that allocated it (docs/architecture.md, "Dependencies").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let Args { dc, tier } = Args::parse();
    process::serve(
        "datacenter-aggregator",
        &tier,
        datacenter::run,
        |topology| {
            let config =
                DatacenterSettings::from_topology(topology, &tier.config, &dc, tier.replica)?;
            Ok((config, aggregator_process(&dc)))
        },
    )
}
