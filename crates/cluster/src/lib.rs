//! The local cluster launcher: starts every process a topology needs on this machine, waits
//! until all answer `/healthz`, prints where they are, and stops them all on a signal.
//!
//! - [`role`]: the processes of a topology ([`Role`], listed by [`roles`]) and how to start each
//!   ([`Role::launch`]: binary, arguments, address).
//! - [`process`]: finding binaries, spawning with logs, waiting until healthy, stopping
//!   ([`Process`]).
//! - [`wan`]: `--wan`: the WAN emulator's links for the topology's `[wan]` section, and each
//!   process's copy of the topology wired through them.
//! - [`error`]: this crate's error enum ([`ClusterError`]).
//!
//! [`run`] ties them together; the `geocount-cluster` binary only parses flags and calls it.

pub mod error;
pub mod process;
pub mod role;
pub mod wan;

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::Duration;

use geocount_model::{TlsSettings, Topology, WanSettings};
use geocount_net::tls::{client_config, tls_connector};
use geocount_net::{Connector, tcp_connector};
use geocount_wan::WanConfig;

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
    /// Start every shard node's slot empty (`shard-node --restore empty`), whatever its data
    /// directory holds: the first start of a new cluster whose directories exist already.
    /// Without it (or `fresh`), only a node whose directory does not exist yet starts empty,
    /// and one that finds its directory empty restores its slot.
    pub new_cluster: bool,
    /// Run every cross-region connection through a WAN emulator shaped by the topology's
    /// `[wan]` section ([`wan`]).
    pub wan: bool,
}

/// A process to start: its role, how, and which binary.
type Planned = (Role, Launch, PathBuf);

/// `--wan`'s set-up: the emulator's links and where each process's topology copy goes.
struct WanMode {
    /// The topology, whose copies are written once the emulator's proxies are known.
    topology: Topology,
    /// Its `[wan]` section.
    settings: WanSettings,
    /// The emulator's configuration, as written to `<run_dir>/wan.toml`.
    emulator: WanConfig,
    /// Where the copies and `wan.toml` go: `<data dir>/wan`.
    run_dir: PathBuf,
}

impl WanMode {
    /// The file `role` is started with: `wan.toml` for the emulator, `<name>.toml` (its copy of
    /// the topology) for every other process.
    fn config_of(&self, role: &Role) -> PathBuf {
        match role {
            Role::WanEmulator => self.run_dir.join("wan.toml"),
            _ => self.run_dir.join(format!("{}.toml", role.name())),
        }
    }
}

/// Starts the cluster described by `options`, prints a table of its processes once all are
/// healthy, and runs until `shutdown` completes; then stops every process and returns.
///
/// If a process exits or is not healthy within [`STARTUP_TIMEOUT`], the others are stopped and
/// the error names it and carries the end of its log. A process that exits later is reported on
/// stderr and the others keep running.
///
/// With `options.wan`, the WAN emulator starts first and stops last; every other process gets
/// its own copy of the topology under `<data dir>/wan/`, wired through the emulator's proxies.
pub async fn run(options: Options, shutdown: impl Future<Output = ()>) -> Result<(), ClusterError> {
    let topology = Topology::load(&options.config)?;
    let tiers = tier_connector(&topology, &options.config)?;
    let bin_dir = match options.bin_dir {
        Some(dir) => dir,
        None => executable_dir()?,
    };
    let data_dir = options
        .data_dir
        .unwrap_or_else(|| topology.shard.data_dir.clone());
    let wan = match (options.wan, &topology.wan) {
        (false, _) => None,
        (true, None) => {
            return Err(ClusterError::NoWan {
                config: options.config,
            });
        }
        (true, Some(settings)) => Some(WanMode {
            emulator: wan::emulator_config(&topology, settings),
            settings: settings.clone(),
            topology: topology.clone(),
            run_dir: data_dir.join("wan"),
        }),
    };

    // Everything that can be checked is checked before anything is deleted or started.
    let mut roles = roles(&topology);
    if wan.is_some() {
        roles.insert(0, Role::WanEmulator);
    }
    if options.fresh {
        // Before the launches are planned: a slot whose directory is gone starts empty.
        remove_data_dir(&data_dir)?;
    }
    let mut plan = Vec::new();
    for role in roles {
        let config = match &wan {
            Some(wan) => wan.config_of(&role),
            None => options.config.clone(),
        };
        let mut launch = role.launch(&topology, &config, &data_dir)?;
        if options.new_cluster
            && matches!(role, Role::Shard { .. })
            && !launch.args.iter().any(|a| a == "--restore")
        {
            launch.args.extend(["--restore".into(), "empty".into()]);
        }
        let binary = process::find_binary(&bin_dir, launch.binary)?;
        process::check_address(&role.name(), launch.address)?;
        plan.push((role, launch, binary));
    }
    let log_dir = data_dir.join("logs");
    create_dir(&log_dir)?;
    if let Some(wan) = &wan {
        create_dir(&wan.run_dir)?;
    }

    println!(
        "starting {} processes; logs in {}",
        plan.len(),
        log_dir.display()
    );
    let mut processes = Vec::with_capacity(plan.len());
    let mut shutdown = pin!(shutdown);
    let started = tokio::select! {
        result = start(&mut processes, plan, &log_dir, wan.as_ref(), &tiers) => Some(result),
        () = &mut shutdown => None,
    };
    match started {
        Some(Ok(proxies)) => print_table(
            &processes,
            wan.as_ref().map(|wan| (wan, &proxies)),
            topology.tls.as_ref(),
        ),
        Some(Err(error)) => {
            stop_all(&mut processes).await;
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
                    stop_all(&mut processes).await;
                    return Err(error);
                }
            }
        }
    }
}

/// How the launcher reaches the tiers: over TLS trusting the topology's CA with `[tls]`, plain
/// TCP without.
fn tier_connector(topology: &Topology, config: &Path) -> Result<Connector, ClusterError> {
    let Some(tls) = &topology.tls else {
        return Ok(tcp_connector());
    };
    let trusted = client_config(&tls.ca).map_err(|e| tls.file_error(config, &e.file, e.message))?;
    Ok(tls_connector(tcp_connector(), trusted))
}

/// Starts `plan` into `processes` and waits until every process is healthy. With `wan`, the
/// emulator (first in `plan`) starts alone; once it is healthy its proxies' addresses go into
/// every other process's copy of the topology, and those are started. Returns the proxies (link
/// name → listen address; none without `wan`).
async fn start(
    processes: &mut Vec<Process>,
    plan: Vec<Planned>,
    log_dir: &Path,
    wan: Option<&WanMode>,
    tiers: &Connector,
) -> Result<HashMap<String, SocketAddr>, ClusterError> {
    let mut plan = plan.into_iter();
    let mut proxies = HashMap::new();
    // The copies already hold the launcher's GEOCOUNT_* overrides; inherited again, a
    // `GEOCOUNT_GLOBAL__LISTEN` would undo the rewiring.
    let mut env_remove = Vec::new();
    if let Some(wan) = wan {
        env_remove = std::env::vars_os()
            .map(|(name, _)| name)
            .filter(|name| name.to_string_lossy().starts_with("GEOCOUNT_"))
            .collect();
        let emulator: Vec<Planned> = plan.by_ref().take(1).collect();
        wan::write_toml(&wan.config_of(&Role::WanEmulator), &wan.emulator)?;
        spawn_all(processes, emulator, log_dir, &env_remove)?;
        process::wait_healthy_over(processes, STARTUP_TIMEOUT, tiers).await?;
        proxies = wan::proxy_addresses(wan.settings.control).await?;
    }
    let rest: Vec<Planned> = plan.collect();
    if let Some(wan) = wan {
        for (role, _, _) in &rest {
            let view = wan::view(&wan.topology, &wan.settings, role, &proxies)?;
            wan::write_toml(&wan.config_of(role), &view)?;
        }
    }
    spawn_all(processes, rest, log_dir, &env_remove)?;
    process::wait_healthy_over(processes, STARTUP_TIMEOUT, tiers).await?;
    Ok(proxies)
}

/// Spawns every process of `plan` into `processes`, stopping at the first that fails.
fn spawn_all(
    processes: &mut Vec<Process>,
    plan: Vec<Planned>,
    log_dir: &Path,
    env_remove: &[OsString],
) -> Result<(), ClusterError> {
    for (role, launch, binary) in plan {
        let process = process::spawn_without_env(role, &launch, &binary, log_dir, env_remove)?;
        processes.push(process);
    }
    Ok(())
}

/// Creates `dir` and its parents.
fn create_dir(dir: &Path) -> Result<(), ClusterError> {
    std::fs::create_dir_all(dir).map_err(|source| ClusterError::Io {
        action: "create",
        path: dir.to_owned(),
        source,
    })
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
    let stopped = stop_all(processes).await;
    println!("stopped {stopped} processes");
    Ok(())
}

/// Stops every process still running, the WAN emulator last (the tiers keep their links while
/// they shut down); returns how many were running.
async fn stop_all(processes: &mut [Process]) -> usize {
    // The emulator, when there is one, is the first process.
    let emulators = usize::from(
        processes
            .first()
            .is_some_and(|p| p.role == Role::WanEmulator),
    );
    let (emulator, tiers) = processes.split_at_mut(emulators);
    process::stop_all(tiers, STOP_GRACE).await + process::stop_all(emulator, STOP_GRACE).await
}

/// Prints the table of processes, the emulator's links (with `--wan`: the set-up and each
/// proxy's address), and how to use the cluster.
fn print_table(
    processes: &[Process],
    wan: Option<(&WanMode, &HashMap<String, SocketAddr>)>,
    tls: Option<&TlsSettings>,
) {
    let rows = processes.iter().map(|p| {
        [
            p.role.kind().to_owned(),
            p.name.clone(),
            p.address.to_string(),
            p.pid.to_string(),
            p.log.display().to_string(),
        ]
    });
    print_grid(["ROLE", "NAME", "ADDRESS", "PID", "LOG"], rows);
    println!();
    if let Some((wan, proxies)) = wan {
        print_links(wan, proxies);
        println!();
    }
    let (curl, scheme) = match tls {
        Some(tls) => (format!("curl --cacert {}", tls.ca.display()), "https"),
        None => ("curl".to_owned(), "http"),
    };
    let shard = processes
        .iter()
        .find(|p| matches!(p.role, Role::Shard { .. }));
    if let Some(shard) = shard {
        let base = format!("{scheme}://{}/counter/tweet:1:likes", shard.address);
        println!("writes: {curl} -X PATCH '{base}/write?op=INCREMENT'   (any shard node)");
    }
    let global = processes
        .iter()
        .find(|p| matches!(p.role, Role::GlobalAggregator));
    if let Some(global) = global {
        println!(
            "reads:  {curl} {scheme}://{}/counter/tweet:1:likes",
            global.address
        );
    }
    let aggregator = processes
        .iter()
        .find(|p| matches!(p.role, Role::DatacenterAggregator { .. }));
    if let Some(aggregator) = aggregator {
        println!(
            "        {curl} {scheme}://{}/counter/tweet:1:likes   (one datacenter's part)",
            aggregator.address
        );
    }
    println!("Ctrl-C stops the cluster");
}

/// Prints the emulator's links: where each proxy listens, what it forwards to, its shaping.
fn print_links(wan: &WanMode, proxies: &HashMap<String, SocketAddr>) {
    let rows = wan.emulator.links.iter().map(|link| {
        let listen = proxies.get(&link.name).copied().unwrap_or(link.listen);
        let mut delay = format!("{} ms", link.delay_ms);
        if link.jitter_ms > 0 {
            delay = format!("{} ± {} ms", link.delay_ms, link.jitter_ms);
        }
        if link.bandwidth_bytes_per_sec > 0 {
            delay += &format!(", {} B/s", link.bandwidth_bytes_per_sec);
        }
        [
            link.name.clone(),
            listen.to_string(),
            link.target.to_string(),
            delay,
        ]
    });
    print_grid(["LINK", "PROXY", "TARGET", "ONE-WAY DELAY"], rows);
    let control = wan.settings.control;
    println!(
        "links: curl http://{control}/links; cut: curl -X POST http://{control}/links/{}/cut",
        wan.emulator
            .links
            .first()
            .map_or("NAME", |link| link.name.as_str())
    );
}

/// Prints `rows` under `header` in left-aligned columns two spaces apart.
fn print_grid<const N: usize>(header: [&str; N], rows: impl Iterator<Item = [String; N]>) {
    let header = header.map(str::to_owned);
    let rows: Vec<[String; N]> = rows.collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
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
}
