//! `global-aggregator --config FILE [--replica N]`: a global aggregator of a topology.

use std::process::ExitCode;

use clap::Parser;
use geocount_aggregator::process::{self, TierFlags};
use geocount_aggregator::{GlobalSettings, global};
use geocount_model::role::GLOBAL_PROCESS;

/// Runs a geocount global aggregator: it pulls every datacenter aggregator and sums
/// datacenters, refusing or flagging stale ones.
#[derive(Debug, Parser)]
#[command(
    name = "global-aggregator",
    version,
    about = "The geocount global aggregator: pulls every datacenter aggregator and sums \
             datacenters, refusing or flagging stale ones."
)]
struct Args {
    #[command(flatten)]
    tier: TierFlags,
}

/// mimalloc rather than glibc's malloc, which is slower when memory is freed on another thread
/// than the one that allocated it (docs/architecture.md, "Dependencies").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let Args { tier } = Args::parse();
    process::serve("global-aggregator", &tier, global::run, |topology| {
        let config = GlobalSettings::from_topology(topology, &tier.config, tier.replica)?;
        Ok((config, GLOBAL_PROCESS.to_owned()))
    })
}
