//! The local cluster launcher: starts every process a topology needs on this machine, waits
//! until all answer `/healthz`, prints where they are, and stops them all on a signal.
//!
//! - [`member`]: the processes of a topology ([`Member`], listed by [`members`]) and how to
//!   start each ([`Member::launch`]: binary, arguments, address).
//! - [`process`]: the one supervisor of tier processes: finding binaries, spawning with logs,
//!   waiting until healthy, signalling, stopping ([`Process`], started from a [`Spec`]).
//! - [`harness`]: [`Cluster`], a topology's processes started, looked up by name and stopped
//!   together; the benchmark runs its clusters through it too.
//! - [`wan`]: `--wan`: the WAN emulator's links for the topology's `[wan]` section, and each
//!   process's copy of the topology wired through them.
//! - [`error`]: this crate's error enum ([`ClusterError`]).
//!
//! [`run`] ties them together on a [`Cluster`]; the `geocount-cluster` binary only parses flags and calls it.

pub mod error;
pub mod harness;
pub mod member;
pub mod process;
pub mod wan;

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::Duration;

use geocount_model::role::{GLOBAL_PROCESS, replica_name};
use geocount_model::{Topology, WanSettings};
use geocount_wan::WanConfig;

pub use error::ClusterError;
pub use harness::{Cluster, create_dir};
pub use member::{Launch, Member, members};
pub use process::{Owner, Process, Spec};

/// How long every process together has to become healthy.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long each process has to exit after SIGTERM before it is SIGKILLed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often running processes are checked for unexpected exits.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

// What to run and where: the launcher's flags. The doc comments below are its `--help`; one
// paragraph each, so that `--help` shows the package's description and one line a flag.
/// Starts every process of a geocount topology on this machine, waits until all are healthy,
/// and stops them all on Ctrl-C (SIGINT), SIGTERM or SIGHUP.
#[derive(Debug, Clone, clap::Parser)]
#[command(version, about)]
pub struct Options {
    /// The topology file (TOML); `GEOCOUNT_*` environment variables override its keys.
    #[arg(long)]
    pub config: PathBuf,
    /// Where the binaries are [default: the directory of this executable].
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Where data and logs go [default: the topology's `shard.data_dir`].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Delete the data directory before starting.
    #[arg(long)]
    pub fresh: bool,
    /// A new cluster: every shard node starts its slot empty, even where its data directory
    /// exists already (a mounted, empty disk). Without it, a node whose directory exists but
    /// is empty treats it as a lost disk and restores its slot from the datacenter.
    #[arg(long)]
    pub new_cluster: bool,
    /// Emulate the WAN between regions: start `wan-emulator` first, with one delayed link each
    /// way between every datacenter aggregator outside the global aggregator's region and the
    /// global aggregator, and one from every datacenter to each shard node of another region
    /// (delays from the topology's `[wan]` section), and give every process its own copy of the
    /// topology, under <data dir>/wan/, dialing those links' proxies.
    #[arg(long)]
    pub wan: bool,
}

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
    /// The file `member` is started with: `wan.toml` for the emulator, `<name>.toml` (its copy of
    /// the topology) for every other process.
    fn config_of(&self, member: &Member) -> PathBuf {
        match member {
            Member::WanEmulator => self.run_dir.join("wan.toml"),
            _ => self.run_dir.join(format!("{}.toml", member.name())),
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
    let log_dir = data_dir.join("logs");
    let mut cluster = Cluster::new(options.config.clone(), topology, data_dir, log_dir, bin_dir)?;

    // Everything that can be checked is checked before anything is deleted or started.
    let mut members = members(&cluster.topology);
    if wan.is_some() {
        members.insert(0, Member::WanEmulator);
    }
    if options.fresh {
        // Before the launches are planned: a slot whose directory is gone starts empty.
        remove_data_dir(&cluster.data_dir)?;
    }
    let mut plan = Vec::new();
    for member in members {
        let config = match &wan {
            Some(wan) => wan.config_of(&member),
            None => options.config.clone(),
        };
        let shard = matches!(member, Member::Shard { .. });
        let resp = member.resp_address(&cluster.topology);
        let mut spec = cluster.plan(member, &config)?;
        if options.new_cluster && shard && !spec.args.iter().any(|a| a == "--restore") {
            spec.args.extend(["--restore".into(), "empty".into()]);
        }
        process::check_address(&spec.name, spec.address)?;
        if let Some(resp) = resp {
            process::check_address(&format!("{} (RESP)", spec.name), resp)?;
        }
        plan.push(spec);
    }
    create_dir(&cluster.log_dir)?;
    if let Some(wan) = &wan {
        create_dir(&wan.run_dir)?;
    }

    println!(
        "starting {} processes; logs in {}",
        plan.len(),
        cluster.log_dir.display()
    );
    let mut shutdown = pin!(shutdown);
    let started = tokio::select! {
        result = start(&mut cluster, plan, wan.as_ref()) => Some(result),
        () = &mut shutdown => None,
    };
    match started {
        Some(Ok(proxies)) => print_table(&cluster, wan.as_ref().map(|wan| (wan, &proxies))),
        Some(Err(error)) => {
            cluster.stop(STOP_GRACE).await;
            return Err(error);
        }
        None => return stop(&mut cluster).await,
    }

    let mut ticker = tokio::time::interval(WATCH_INTERVAL);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => return stop(&mut cluster).await,
            _ = ticker.tick() => {
                if let Err(error) = report_exits(&mut cluster.processes) {
                    cluster.stop(STOP_GRACE).await;
                    return Err(error);
                }
            }
        }
    }
}

/// Starts `plan` into `cluster` and waits until every process is healthy. With `wan`, the
/// emulator (first in `plan`) starts alone; once it is healthy its proxies' addresses go into
/// every other process's copy of the topology, and those are started. Returns the proxies (link
/// name → listen address; none without `wan`).
async fn start(
    cluster: &mut Cluster,
    plan: Vec<Spec>,
    wan: Option<&WanMode>,
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
        wan::write_toml(&wan.config_of(&Member::WanEmulator), &wan.emulator)?;
        spawn_all(cluster, plan.by_ref().take(1), &env_remove)?;
        cluster.wait_healthy(STARTUP_TIMEOUT).await?;
        proxies = wan::proxy_addresses(wan.settings.control).await?;
        for member in plan
            .as_slice()
            .iter()
            .filter_map(|spec| spec.member.as_ref())
        {
            let view = wan::view(&wan.topology, &wan.settings, member, &proxies)?;
            wan::write_toml(&wan.config_of(member), &view)?;
        }
    }
    spawn_all(cluster, plan, &env_remove)?;
    cluster.wait_healthy(STARTUP_TIMEOUT).await?;
    Ok(proxies)
}

/// Spawns every process of `plan` into `cluster`, without the variables `env_remove` names,
/// stopping at the first that fails.
fn spawn_all(
    cluster: &mut Cluster,
    plan: impl Iterator<Item = Spec>,
    env_remove: &[OsString],
) -> Result<(), ClusterError> {
    for mut spec in plan {
        spec.env_remove = env_remove.to_vec();
        cluster.spawn(spec)?;
    }
    Ok(())
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
                process.name(),
                process.log.display()
            );
        }
    }
    Ok(())
}

/// Stops every process and says how many there were.
async fn stop(cluster: &mut Cluster) -> Result<(), ClusterError> {
    let stopped = cluster.stop(STOP_GRACE).await;
    println!("stopped {stopped} processes");
    Ok(())
}

/// Prints the table of processes, the emulator's links (with `--wan`: the set-up and each
/// proxy's address), and how to use the cluster.
/// The counter the printed example commands write and read.
const EXAMPLE: &str = "tweet:1:likes";

fn print_table(cluster: &Cluster, wan: Option<(&WanMode, &HashMap<String, SocketAddr>)>) {
    let rows = cluster.processes.iter().map(|p| {
        [
            p.spec.member.as_ref().map_or("", Member::kind).to_owned(),
            p.name().to_owned(),
            p.address().to_string(),
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
    let (curl, scheme) = match &cluster.topology.tls {
        Some(tls) => (format!("curl --cacert {}", tls.ca.display()), "https"),
        None => ("curl".to_owned(), "http"),
    };
    if let Some(shard) = cluster.find(|r| matches!(r, Member::Shard { .. })) {
        let base = format!("{scheme}://{}/counter/{EXAMPLE}", shard.address());
        println!("writes: {curl} -X PATCH '{base}/write?op=INCREMENT'   (any shard node)");
    }
    // A global aggregator holding the example counter's partition (the others redirect).
    let topology = &cluster.topology;
    let replicas = topology.global.replicas_of(topology.partitions);
    let holder = replicas.iter().position(|(_, held)| held.holds(EXAMPLE));
    if let Some(global) = holder.and_then(|r| cluster.process(&replica_name(GLOBAL_PROCESS, r))) {
        println!(
            "reads:  {curl} {scheme}://{}/counter/{EXAMPLE}",
            global.address()
        );
    }
    let holds = |r: &Member| match r {
        Member::DatacenterAggregator {
            datacenter,
            replica,
        } => topology.datacenter(datacenter).is_ok_and(|dc| {
            dc.aggregator_replicas_of(topology.partitions)[*replica]
                .1
                .holds(EXAMPLE)
        }),
        _ => false,
    };
    if let Some(aggregator) = cluster.find(holds) {
        println!(
            "        {curl} {scheme}://{}/counter/{EXAMPLE}   (one datacenter's part)",
            aggregator.address()
        );
    }
    print_redis_cli(cluster);
    println!("Ctrl-C stops the cluster");
}

/// Prints the `redis-cli` line of every shard node serving the Redis protocol: with `[tls]`
/// it trusts the cluster CA, with client tokens it asks for one (`AUTH`).
fn print_redis_cli(cluster: &Cluster) {
    let topology = &cluster.topology;
    let mut cli = "redis-cli".to_owned();
    if let Some(tls) = &topology.tls {
        cli += &format!(" --tls --cacert {}", tls.ca.display());
    }
    let askpass = if topology.auth.tokens.is_empty() {
        ""
    } else {
        " --askpass"
    };
    for process in &cluster.processes {
        let Some(resp) = (process.spec.member.as_ref()).and_then(|m| m.resp_address(topology))
        else {
            continue;
        };
        let host = match resp.ip() {
            ip if ip.is_loopback() => String::new(),
            ip => format!(" -h {ip}"),
        };
        println!(
            "redis:  {cli}{host} -p {}{askpass}   ({}; then INCR {EXAMPLE}, GET {EXAMPLE})",
            resp.port(),
            process.name()
        );
    }
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
