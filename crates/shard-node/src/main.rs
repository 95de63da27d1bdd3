//! `shard-node --config FILE --dc DC --slot N [--data-dir DIR]`: runs slot `DC_<DC>_VAL_<N>`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use geocount_model::{SystemClock, Topology};
use shard_node::NodeConfig;

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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = Topology::load(&args.config).and_then(|topology| {
        NodeConfig::from_topology(&topology, &args.config, &args.dc, args.slot, args.data_dir)
    });
    let config = match config {
        Ok(config) => config,
        Err(error) => {
            eprintln!("shard-node: {error}");
            return ExitCode::from(2);
        }
    };
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("shard-node: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: NodeConfig) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {} for {}", config.listen, config.slot))?;
        shard_node::run(config, listener, Arc::new(SystemClock), shutdown_signal())
            .await
            .context("storage")
    })
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("cannot listen for SIGTERM");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
}
