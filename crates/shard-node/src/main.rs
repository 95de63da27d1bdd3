//! `shard-node --config FILE --dc DC --slot N [--data-dir DIR]`: runs slot `DC_<DC>_VAL_<N>`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use geocount_model::{SystemClock, Topology};
use shard_node::{NodeConfig, Storage};

/// Runs one geocount shard node: the owner of one slot of every counter.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The topology file (TOML); `GEOCOUNT_*` environment variables override its keys.
    #[arg(long)]
    config: PathBuf,
    /// The datacenter this node is in, as named in the topology.
    #[arg(long)]
    dc: String,
    /// The slot this node owns: its index in the datacenter's `shards` list.
    #[arg(long)]
    slot: u32,
    /// Where to keep data [default: `<shard.data_dir>/DC_<dc>_VAL_<slot>`].
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = Topology::load(&args.config).and_then(|topology| {
        NodeConfig::from_topology(&topology, &args.config, &args.dc, args.slot, args.data_dir)
    });
    geocount_net::run_tier(
        "shard-node",
        config,
        |config| config.listen,
        |config, listener, shutdown| {
            shard_node::run(
                config,
                listener,
                Arc::new(SystemClock),
                geocount_net::tcp_connector(),
                Storage::os(),
                shutdown,
            )
        },
    )
}
