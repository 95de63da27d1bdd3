//! The one supervisor of tier processes: finding binaries, spawning with logs, waiting until
//! healthy, signalling (SIGKILL, SIGSTOP/SIGCONT, SIGTERM with a grace period) and stopping.
//! The launcher, the benchmark and the end-to-end tests all start their processes here.

use std::ffi::OsString;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use geocount_net::{Connector, HttpClient, tcp_connector};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::ClusterError;
use crate::member::{Launch, Member};

/// How many lines of a failed process's log are shown.
pub const TAIL_LINES: usize = 20;
/// How long one `/healthz` probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause between two rounds of probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);
/// The pause between two looks at a process that is being stopped synchronously.
const REAP_INTERVAL: Duration = Duration::from_millis(10);

/// Who runs a process, which decides its process group, log and environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The launcher: a process group of its own (a terminal's Ctrl-C reaches only the launcher,
    /// which then stops it in order), a fresh log, `NO_COLOR=1`.
    Launcher,
    /// A test: the test's process group (interrupting the test run reaches it too), a log
    /// appended to across restarts, `RUST_LOG=info`.
    Test,
}

/// How to start one process; kept by its [`Process`] so that it can be started again.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its name, unique in the cluster; its log is `<name>.log`.
    pub name: String,
    /// Which member of the cluster it is, when it is one of the topology's processes.
    pub member: Option<Member>,
    /// The binary run.
    pub binary: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Where it listens; it is healthy once `GET /healthz` there answers 200.
    pub address: SocketAddr,
    /// Who runs it.
    pub owner: Owner,
    /// Variables of the caller's environment it does not inherit.
    pub env_remove: Vec<OsString>,
}

impl Spec {
    /// `member` started by the launcher as `launch` says, with `binary`.
    pub fn of_member(member: Member, launch: Launch, binary: PathBuf) -> Self {
        Self {
            name: member.name(),
            member: Some(member),
            binary,
            args: launch.args,
            address: launch.address,
            owner: Owner::Launcher,
            env_remove: Vec::new(),
        }
    }

    /// Whether its `/healthz` is plain HTTP even in a topology with `[tls]`: the WAN emulator's.
    fn plain_health(&self) -> bool {
        self.member == Some(Member::WanEmulator)
    }
}

/// A started process; killed (SIGKILL) if dropped while it runs.
#[derive(Debug)]
pub struct Process {
    /// How it was started.
    pub spec: Spec,
    /// The file its stdout and stderr go to.
    pub log: PathBuf,
    /// Its process id.
    pub pid: u32,
    child: Child,
    exit: Option<ExitStatus>,
}

/// The path of `binary` in `bin_dir`, or an error if it is not there.
pub fn find_binary(bin_dir: &Path, binary: &str) -> Result<PathBuf, ClusterError> {
    let path = bin_dir.join(binary);
    if path.is_file() {
        Ok(path)
    } else {
        Err(ClusterError::MissingBinary { path })
    }
}

/// Fails if `address` cannot be listened on (most often: a process of another cluster holds it),
/// so that a stale process answering `/healthz` is not mistaken for a new one.
pub fn check_address(name: &str, address: SocketAddr) -> Result<(), ClusterError> {
    TcpListener::bind(address)
        .map(drop)
        .map_err(|source| ClusterError::Address {
            name: name.to_owned(),
            address,
            source,
        })
}

/// Starts `spec`, stdout and stderr to `<log_dir>/<name>.log`.
pub fn spawn(spec: Spec, log_dir: &Path) -> Result<Process, ClusterError> {
    let log = log_dir.join(format!("{}.log", spec.name));
    let io_error = |action, source| ClusterError::Io {
        action,
        path: log.clone(),
        source,
    };
    let appends = spec.owner == Owner::Test;
    let stdout = File::options()
        .create(true)
        .write(true)
        .append(appends)
        .truncate(!appends)
        .open(&log)
        .map_err(|e| io_error("create", e))?;
    let stderr = stdout.try_clone().map_err(|e| io_error("open", e))?;
    let mut command = Command::new(&spec.binary);
    for variable in &spec.env_remove {
        command.env_remove(variable);
    }
    match spec.owner {
        Owner::Launcher => command.env("NO_COLOR", "1").process_group(0),
        Owner::Test => command.env("RUST_LOG", "info"),
    };
    let child = command
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ClusterError::Spawn {
            name: spec.name.clone(),
            binary: spec.binary.clone(),
            source,
        })?;
    let pid = child.id().expect("a process just started has an id");
    Ok(Process {
        spec,
        log,
        pid,
        child,
        exit: None,
    })
}

impl Process {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.spec.address
    }

    /// Whether it has not been seen to exit.
    pub fn is_running(&self) -> bool {
        self.exit.is_none()
    }

    /// Its exit status if it has exited (now or earlier), without waiting.
    pub fn poll_exit(&mut self) -> Result<Option<ExitStatus>, ClusterError> {
        if self.exit.is_none() {
            self.exit = self
                .child
                .try_wait()
                .map_err(|source| ClusterError::Watch {
                    name: self.spec.name.clone(),
                    source,
                })?;
        }
        Ok(self.exit)
    }

    /// Sends `signal` to it (SIGKILL to its whole process group when it has one of its own, so
    /// that nothing it started survives it); one that is gone already is not an error.
    pub fn signal(&self, signal: Signal) {
        let Ok(pid) = i32::try_from(self.pid) else {
            return;
        };
        let pid = Pid::from_raw(pid);
        let result = match (signal, self.spec.owner) {
            (Signal::SIGKILL, Owner::Launcher) => killpg(pid, signal),
            _ => kill(pid, signal),
        };
        match result {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(error) => eprintln!("cannot send {signal} to {}: {error}", self.spec.name),
        }
    }

    /// Waits, blocking the thread, at most `within` for it to exit; its status if it did.
    pub fn wait_blocking(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = std::time::Instant::now().checked_add(within);
        loop {
            // A status that cannot be read counts as still running: SIGKILL settles it.
            if let Ok(Some(status)) = self.poll_exit() {
                return Some(status);
            }
            if deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
                return None;
            }
            std::thread::sleep(REAP_INTERVAL);
        }
    }

    /// SIGTERM, then waits (blocking) at most `grace` for it to exit; its status if it did.
    pub fn terminate_blocking(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.signal(Signal::SIGTERM);
        self.wait_blocking(grace)
    }

    /// SIGKILL (continuing it first, should it be stopped), and reaps it.
    pub fn kill_blocking(&mut self) -> Option<ExitStatus> {
        if self.is_running() {
            self.signal(Signal::SIGCONT);
            self.signal(Signal::SIGKILL);
            // Also SIGKILLs it, should it have left its group; this only fails if it is gone.
            let _ = self.child.start_kill();
        }
        self.wait_blocking(Duration::MAX)
    }

    /// The error saying it failed to start for `reason`, with the end of its log.
    fn not_healthy(&self, reason: String) -> ClusterError {
        ClusterError::NotHealthy {
            name: self.spec.name.clone(),
            reason,
            log: self.log.clone(),
            tail: log_tail(&self.log, TAIL_LINES),
        }
    }
}

/// Waits until every process answers `GET /healthz` with 200 over plain HTTP, for at most
/// `timeout` overall. Fails with the first process that exits before it is healthy, or the
/// first one still not healthy when the time is up.
pub async fn wait_healthy(
    processes: &mut [Process],
    timeout: Duration,
) -> Result<(), ClusterError> {
    wait_healthy_over(processes, timeout, &tcp_connector()).await
}

/// [`wait_healthy`], asking the tiers through `tiers` (TLS in a topology with `[tls]`); the
/// WAN emulator is always asked over plain HTTP.
pub async fn wait_healthy_over(
    processes: &mut [Process],
    timeout: Duration,
    tiers: &Connector,
) -> Result<(), ClusterError> {
    let plain = HttpClient::new(PROBE_TIMEOUT);
    let tiers = HttpClient::with_connector(PROBE_TIMEOUT, tiers.clone());
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<usize> = (0..processes.len()).collect();
    loop {
        for &i in &pending {
            if let Some(status) = processes[i].poll_exit()? {
                let reason = format!("exited before it was healthy ({status})");
                return Err(processes[i].not_healthy(reason));
            }
        }
        let mut probes = JoinSet::new();
        for &i in &pending {
            let client = match processes[i].spec.plain_health() {
                true => plain.clone(),
                false => tiers.clone(),
            };
            let url = client.url(processes[i].address(), "/healthz");
            probes.spawn(async move {
                let healthy =
                    matches!(client.get(&url).await, Ok(answer) if answer.status.as_u16() == 200);
                (i, healthy)
            });
        }
        for (i, healthy) in probes.join_all().await {
            if healthy {
                pending.retain(|&p| p != i);
            }
        }
        let Some(&first) = pending.first() else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            let mut reason = format!("was not healthy after {} s", timeout.as_secs());
            if pending.len() > 1 {
                let others: Vec<&str> = pending[1..].iter().map(|&i| processes[i].name()).collect();
                reason += &format!(" (nor were {})", others.join(", "));
            }
            return Err(processes[first].not_healthy(reason));
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// Stops every process still running: SIGTERM to each, then waits until `grace` has passed
/// and SIGKILLs those still running, with their process groups. Returns how many were running.
pub async fn stop_all<'a>(
    processes: impl IntoIterator<Item = &'a mut Process>,
    grace: Duration,
) -> usize {
    let mut stopping = Vec::new();
    for process in processes {
        // A process whose status cannot be read is treated as running: SIGKILL settles it.
        if !matches!(process.poll_exit(), Ok(Some(_))) {
            process.signal(Signal::SIGTERM);
            stopping.push(process);
        }
    }
    let deadline = Instant::now() + grace;
    for process in &mut stopping {
        let status = match tokio::time::timeout_at(deadline, process.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            Ok(Err(error)) => {
                eprintln!("cannot wait for {}: {error}; killing it", process.name());
                force_kill(process).await
            }
            Err(_) => {
                eprintln!(
                    "{} did not stop within {} s; killing it",
                    process.name(),
                    grace.as_secs()
                );
                force_kill(process).await
            }
        };
        process.exit = status;
    }
    stopping.len()
}

/// SIGKILLs `process` with its process group and reaps it; its exit status if that worked.
async fn force_kill(process: &mut Process) -> Option<ExitStatus> {
    process.signal(Signal::SIGKILL);
    // Also SIGKILLs it, should it have left its group; this only fails if it is gone already.
    let _ = process.child.kill().await;
    process.child.try_wait().ok().flatten()
}

/// The last `lines` lines of the file at `path`, or a note saying why there are none.
pub fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            if all.is_empty() {
                "(the log is empty)".to_owned()
            } else {
                all[all.len().saturating_sub(lines)..].join("\n")
            }
        }
        Err(error) => format!("(cannot read the log: {error})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir =
            std::env::temp_dir().join(format!("geocount-cluster-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.log");
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).unwrap();
        let tail = log_tail(&path, TAIL_LINES);
        assert_eq!(tail.lines().count(), 20);
        assert!(
            tail.starts_with("line 11\n") && tail.ends_with("line 30"),
            "{tail}"
        );
        std::fs::write(&path, "").unwrap();
        assert_eq!(log_tail(&path, TAIL_LINES), "(the log is empty)");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(log_tail(&path, TAIL_LINES).starts_with("(cannot read the log: "));
    }

    #[test]
    fn missing_binary_names_the_path_and_the_fix() {
        let error = find_binary(Path::new("/nonexistent/bin"), "shard-node").unwrap_err();
        let message = error.to_string();
        assert!(message.contains("/nonexistent/bin/shard-node"), "{message}");
        assert!(message.contains("cargo build --release"), "{message}");
    }
}
