//! `geocount-cluster --config FILE [--bin-dir DIR] [--data-dir DIR] [--fresh] [--new-cluster] [--wan]`: runs a
//! whole topology on this machine until Ctrl-C, with `--wan` behind an emulated WAN.

use std::process::ExitCode;

use clap::Parser;
use geocount_cluster::Options;
use tokio::signal::unix::{SignalKind, signal};

fn main() -> ExitCode {
    let options = Options::parse();
    let runtime = match tokio::runtime::Runtime::new() {
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
