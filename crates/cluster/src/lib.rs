//! The local cluster launcher: starts every process a topology needs on this machine, waits
//! until all answer `/healthz`, prints where they are, and stops them all on a signal.
//!
//! - [`role`]: the processes of a topology ([`Role`], listed by [`roles`]) and how to start each
//!   ([`Role::launch`]: binary, arguments, address).
//! - [`process`]: finding binaries, spawning with logs, waiting until healthy, stopping
//!   ([`Process`]).
//! - [`error`]: this crate's error enum ([`ClusterError`]).
//!
//! [`run`] ties them together; the `geocount-cluster` binary only parses flags and calls it.

pub mod error;
pub mod process;
pub mod role;

use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::Duration;

use geocount_model::Topology;

pub use error::ClusterError;
pub use process::Process;
pub use role::{Launch, Role, roles};

/// How long every process together has to become healthy.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long each process has to exit after SIGTERM before it is SIGKILLed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often running processes are checked for unexpected exits.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// What to run and where.
#[derive(Debug, Clone)]
pub struct Options {
    /// The topology file; it is also passed to every process.
    pub config: PathBuf,
    /// Where the binaries are; `None` means the directory of the running executable.
    pub bin_dir: Option<PathBuf>,
    /// Where data and logs go; `None` means the topology's `shard.data_dir`.
    pub data_dir: Option<PathBuf>,
    /// Delete the data directory before starting.
    pub fresh: bool,
}

/// Starts the cluster described by `options`, prints a table of its processes once all are
/// healthy, and runs until `shutdown` completes; then stops every process and returns.
///
/// If a process exits or is not healthy within [`STARTUP_TIMEOUT`], the others are stopped and
/// the error names it and carries the end of its log. A process that exits later is reported on
/// stderr and the others keep running.
pub async fn run(options: Options, shutdown: impl Future<Output = ()>) -> Result<(), ClusterError> {
    let topology = Topology::load(&options.config)?;
    let bin_dir = match options.bin_dir {
        Some(dir) => dir,
        None => executable_dir()?,
    };
    let data_dir = options
        .data_dir
        .unwrap_or_else(|| topology.shard.data_dir.clone());

    // Everything that can be checked is checked before anything is deleted or started.
    let mut plan = Vec::new();
    for role in roles(&topology) {
        let launch = role.launch(&topology, &options.config, &data_dir)?;
        let binary = process::find_binary(&bin_dir, launch.binary)?;
        process::check_address(&role.name(), launch.address)?;
        plan.push((role, launch, binary));
    }
    if options.fresh {
        remove_data_dir(&data_dir)?;
    }
    let log_dir = data_dir.join("logs");
    std::fs::create_dir_all(&log_dir).map_err(|source| ClusterError::Io {
        action: "create",
        path: log_dir.clone(),
        source,
    })?;

    println!(
        "starting {} processes; logs in {}",
        plan.len(),
        log_dir.display()
    );
    let mut processes = Vec::with_capacity(plan.len());
    for (role, launch, binary) in plan {
        match process::spawn(role, &launch, &binary, &log_dir) {
            Ok(process) => processes.push(process),
            Err(error) => {
                process::stop_all(&mut processes, STOP_GRACE).await;
                return Err(error);
            }
        }
    }

    let mut shutdown = pin!(shutdown);
    let started = tokio::select! {
        result = process::wait_healthy(&mut processes, STARTUP_TIMEOUT) => Some(result),
        () = &mut shutdown => None,
    };
    match started {
        Some(Ok(())) => print_table(&processes),
        Some(Err(error)) => {
            process::stop_all(&mut processes, STOP_GRACE).await;
            return Err(error);
        }
        None => return stop(&mut processes).await,
    }

    let mut ticker = tokio::time::interval(WATCH_INTERVAL);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => return stop(&mut processes).await,
            _ = ticker.tick() => {
                if let Err(error) = report_exits(&mut processes) {
                    process::stop_all(&mut processes, STOP_GRACE).await;
                    return Err(error);
                }
            }
        }
    }
}

/// The directory of the running executable: the default bin directory.
fn executable_dir() -> Result<PathBuf, ClusterError> {
    let exe = std::env::current_exe().map_err(ClusterError::BinDir)?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| ClusterError::BinDir(std::io::Error::other("it has no parent directory")))
}

/// Deletes `data_dir` for `--fresh`, unless it is the current directory or one of its
/// ancestors (a mistyped `--data-dir .` must not delete the checkout).
fn remove_data_dir(data_dir: &Path) -> Result<(), ClusterError> {
    let io_error = |action, source| ClusterError::Io {
        action,
        path: data_dir.to_owned(),
        source,
    };
    let resolved = match data_dir.canonicalize() {
        Ok(resolved) => resolved,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(io_error("resolve", error)),
    };
    let current = std::env::current_dir().map_err(|e| io_error("resolve", e))?;
    if current.starts_with(&resolved) {
        return Err(ClusterError::UnsafeFresh {
            path: data_dir.to_owned(),
        });
    }
    std::fs::remove_dir_all(data_dir).map_err(|e| io_error("delete", e))
}

/// Prints, on stderr, every process seen to exit since the last call.
fn report_exits(processes: &mut [Process]) -> Result<(), ClusterError> {
    for process in processes.iter_mut().filter(|p| p.is_running()) {
        if let Some(status) = process.poll_exit()? {
            eprintln!(
                "{} exited unexpectedly ({status}); log: {}",
                process.name,
                process.log.display()
            );
        }
    }
    Ok(())
}

/// Stops every process and says how many there were.
async fn stop(processes: &mut [Process]) -> Result<(), ClusterError> {
    let stopped = process::stop_all(processes, STOP_GRACE).await;
    println!("stopped {stopped} processes");
    Ok(())
}

/// Prints the table of processes and how to use the cluster.
fn print_table(processes: &[Process]) {
    let header = ["ROLE", "NAME", "ADDRESS", "PID", "LOG"].map(str::to_owned);
    let rows: Vec<[String; 5]> = processes
        .iter()
        .map(|p| {
            [
                p.role.kind().to_owned(),
                p.name.clone(),
                p.address.to_string(),
                p.pid.to_string(),
                p.log.display().to_string(),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    println!();
    let shard = processes
        .iter()
        .find(|p| matches!(p.role, Role::Shard { .. }));
    if let Some(shard) = shard {
        let base = format!("http://{}/counter/tweet:1:likes", shard.address);
        println!("writes: curl -X PATCH '{base}/write?op=INCREMENT'   (any shard node)");
    }
    let global = processes
        .iter()
        .find(|p| matches!(p.role, Role::GlobalAggregator));
    if let Some(global) = global {
        println!(
            "reads:  curl http://{}/counter/tweet:1:likes",
            global.address
        );
    }
    let aggregator = processes
        .iter()
        .find(|p| matches!(p.role, Role::DatacenterAggregator { .. }));
    if let Some(aggregator) = aggregator {
        println!(
            "        curl http://{}/counter/tweet:1:likes   (one datacenter's part)",
            aggregator.address
        );
    }
    println!("Ctrl-C stops the cluster");
}
