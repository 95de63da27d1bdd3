//! `global-aggregator --config FILE`: the global aggregator of a topology.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use geocount_model::role::GLOBAL_PROCESS;
use geocount_model::{SystemClock, Topology};
use geocount_net::tls::secure;
use geocount_net::{ProcessSetup, tcp_connector};
use geocount_sync::tls::tier_tls;
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

/// mimalloc rather than glibc's malloc, which is slower when memory is freed on another thread
/// than the one that allocated it (ARCHITECTURE.md, "Dependencies beyond the design set").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    geocount_net::idle::release_memory_with(geocount_net::idle::release_mimalloc_memory);
    let config = Topology::load(&args.config).and_then(|t| {
        t.check_listen(&args.config, t.global.listen)?;
        let tls = tier_tls(&t, &args.config, GLOBAL_PROCESS)?;
        Ok((GlobalAggregatorConfig::from_topology(&t), tls))
    });
    geocount_net::run_tier(
        "global-aggregator",
        config,
        |(config, _)| ProcessSetup {
            listen: config.listen,
            huge_pages: config.huge_pages,
        },
        |(config, tls), listener, shutdown| {
            let (listener, connector) = secure(listener, tcp_connector(), tls.as_ref());
            global_aggregator::run(config, listener, Arc::new(SystemClock), connector, shutdown)
        },
    )
}
