//! Running the processes: finding binaries, spawning with logs, waiting until healthy, stopping.

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
use crate::role::{Launch, Role};

/// How many lines of a failed process's log are shown.
pub const TAIL_LINES: usize = 20;
/// How long one `/healthz` probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause between two rounds of probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// A started process.
#[derive(Debug)]
pub struct Process {
    /// What it is.
    pub role: Role,
    /// Its role's name.
    pub name: String,
    /// Where it listens.
    pub address: SocketAddr,
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

/// Starts `role` by running `binary` with `launch`'s arguments, stdout and stderr to
/// `<log_dir>/<name>.log`. The process gets its own process group, so that a terminal's Ctrl-C
/// reaches only the launcher, which then stops it in order; it is killed if its [`Process`] is
/// dropped without being stopped.
pub fn spawn(
    role: Role,
    launch: &Launch,
    binary: &Path,
    log_dir: &Path,
) -> Result<Process, ClusterError> {
    spawn_without_env(role, launch, binary, log_dir, &[])
}

/// [`spawn`], with the launcher's environment less the variables named in `env_remove`.
pub fn spawn_without_env(
    role: Role,
    launch: &Launch,
    binary: &Path,
    log_dir: &Path,
    env_remove: &[OsString],
) -> Result<Process, ClusterError> {
    let name = role.name();
    let log = log_dir.join(format!("{name}.log"));
    let io_error = |action, source| ClusterError::Io {
        action,
        path: log.clone(),
        source,
    };
    let stdout = File::create(&log).map_err(|e| io_error("create", e))?;
    let stderr = stdout.try_clone().map_err(|e| io_error("open", e))?;
    let mut command = Command::new(binary);
    for variable in env_remove {
        command.env_remove(variable);
    }
    let child = command
        .args(&launch.args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ClusterError::Spawn {
            name: name.clone(),
            binary: binary.to_owned(),
            source,
        })?;
    let pid = child.id().expect("a process just started has an id");
    Ok(Process {
        role,
        name,
        address: launch.address,
        log,
        pid,
        child,
        exit: None,
    })
}

impl Process {
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
                    name: self.name.clone(),
                    source,
                })?;
        }
        Ok(self.exit)
    }

    /// The error saying it failed to start for `reason`, with the end of its log.
    fn not_healthy(&self, reason: String) -> ClusterError {
        ClusterError::NotHealthy {
            name: self.name.clone(),
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
            let client = match processes[i].role {
                Role::WanEmulator => plain.clone(),
                _ => tiers.clone(),
            };
            let url = client.url(processes[i].address, "/healthz");
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
                let others: Vec<&str> = pending[1..]
                    .iter()
                    .map(|&i| processes[i].name.as_str())
                    .collect();
                reason += &format!(" (nor were {})", others.join(", "));
            }
            return Err(processes[first].not_healthy(reason));
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// Stops every process still running: SIGTERM to each, then waits until `grace` has passed
/// and SIGKILLs those still running, with their process groups. Returns how many were running.
pub async fn stop_all(processes: &mut [Process], grace: Duration) -> usize {
    let mut stopping = Vec::new();
    for process in processes.iter_mut() {
        // A process whose status cannot be read is treated as running: SIGKILL settles it.
        if !matches!(process.poll_exit(), Ok(Some(_))) {
            terminate(process);
            stopping.push(process);
        }
    }
    let deadline = Instant::now() + grace;
    for process in &mut stopping {
        let status = match tokio::time::timeout_at(deadline, process.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            Ok(Err(error)) => {
                eprintln!("cannot wait for {}: {error}; killing it", process.name);
                force_kill(process).await
            }
            Err(_) => {
                eprintln!(
                    "{} did not stop within {} s; killing it",
                    process.name,
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
    kill_group(process);
    // Also SIGKILLs it, should it have left its group; this only fails if it is gone already.
    let _ = process.child.kill().await;
    process.child.try_wait().ok().flatten()
}

/// Sends SIGTERM to `process`; one that is already gone is not an error.
fn terminate(process: &Process) {
    if let Ok(pid) = i32::try_from(process.pid) {
        report_signal_error(
            process,
            "SIGTERM",
            kill(Pid::from_raw(pid), Signal::SIGTERM),
        );
    }
}

/// Sends SIGKILL to `process`'s whole process group (its own, see [`spawn`]), so that nothing
/// it started survives it either.
fn kill_group(process: &Process) {
    if let Ok(pid) = i32::try_from(process.pid) {
        report_signal_error(
            process,
            "SIGKILL",
            killpg(Pid::from_raw(pid), Signal::SIGKILL),
        );
    }
}

/// Reports a failure to signal `process`; one that is already gone is not a failure.
fn report_signal_error(process: &Process, signal: &str, result: nix::Result<()>) {
    match result {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => eprintln!("cannot send {signal} to {}: {error}", process.name),
    }
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
