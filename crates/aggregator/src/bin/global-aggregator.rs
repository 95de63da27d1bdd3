//! `global-aggregator --config FILE`: the global aggregator of a topology.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use geocount_aggregator::{GlobalConfig, global, process};
use geocount_model::role::GLOBAL_PROCESS;

/// Runs the geocount global aggregator: it pulls every datacenter aggregator and sums
/// datacenters, refusing or flagging stale ones.
#[derive(Debug, Parser)]
#[command(
    name = "global-aggregator",
    version,
    about = "The geocount global aggregator: pulls every datacenter aggregator and sums \
             datacenters, refusing or flagging stale ones."
)]
struct Args {
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
        "global-aggregator",
        &args.config,
        |topology| {
            Ok((
                GlobalConfig::from_topology(topology),
                GLOBAL_PROCESS.to_owned(),
            ))
        },
        |config| &config.settings,
        global::run,
    )
}
