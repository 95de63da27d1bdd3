//! `geocount-cluster --config FILE [--bin-dir DIR] [--data-dir DIR] [--fresh] [--new-cluster] [--wan]`: runs a
//! whole topology on this machine until Ctrl-C, with `--wan` behind an emulated WAN.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use geocount_cluster::Options;
use tokio::signal::unix::{SignalKind, signal};

/// Starts every process of a geocount topology on this machine, waits until all are healthy,
/// and stops them all on Ctrl-C (SIGINT), SIGTERM or SIGHUP.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The topology file (TOML); `GEOCOUNT_*` environment variables override its keys.
    #[arg(long)]
    config: PathBuf,
    /// Where the binaries are [default: the directory of this executable].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where data and logs go [default: the topology's `shard.data_dir`].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Delete the data directory before starting.
    #[arg(long)]
    fresh: bool,
    /// A new cluster: every shard node starts its slot empty, even where its data directory
    /// exists already (a mounted, empty disk). Without it, a node whose directory exists but
    /// is empty treats it as a lost disk and restores its slot from the datacenter.
    #[arg(long)]
    new_cluster: bool,
    /// Emulate the WAN between regions: start `wan-emulator` first, with one delayed link each
    /// way between every datacenter aggregator outside the global aggregator's region and the
    /// global aggregator (delays from the topology's `[wan]` section), and give every process
    /// its own copy of the topology, under <data dir>/wan/, dialing those links' proxies.
    #[arg(long)]
    wan: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("geocount-cluster: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // The handlers are installed before any process starts, so no signal can end the launcher
    // without it stopping its processes.
    let shutdown = match runtime.block_on(async { shutdown_signal() }) {
        Ok(shutdown) => shutdown,
        Err(error) => {
            eprintln!("geocount-cluster: cannot listen for signals: {error}");
            return ExitCode::FAILURE;
        }
    };
    let options = Options {
        config: args.config,
        bin_dir: args.bin_dir,
        data_dir: args.data_dir,
        fresh: args.fresh,
        new_cluster: args.new_cluster,
        wan: args.wan,
    };
    match runtime.block_on(geocount_cluster::run(options, shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("geocount-cluster: {error}");
            if let Some(tail) = error.log_tail() {
                eprintln!("its log ends with:");
                for line in tail.lines() {
                    eprintln!("  | {line}");
                }
            }
            ExitCode::from(error.exit_code())
        }
    }
}

/// Completes on SIGINT (Ctrl-C), SIGTERM or SIGHUP (the terminal closed). The handlers are
/// installed at once, so a signal arriving before the future is first polled is not lost.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
            _ = hangup.recv() => {}
        }
    })
}
