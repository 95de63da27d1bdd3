//! Real node processes that never outlive their test, run by the launcher's supervisor
//! ([`geocount_cluster::process`]).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use geocount_cluster::Member;
use geocount_cluster::process::{self, Owner, Process, Spec};
use geocount_net::{Connector, tcp_connector};
use nix::sys::signal::Signal;

use crate::api::Api;

/// The environment variable naming the directory of the binaries the tests run. Outside the
/// `GEOCOUNT_` prefix: the nodes inherit it, and there it would be read as a topology key.
pub const BIN_DIR_ENV: &str = "E2E_BIN_DIR";

/// The directory holding the workspace's built binaries: [`BIN_DIR_ENV`], or the profile
/// directory of the running test (`target/<profile>`).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        return dir.into();
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps")
        .to_owned()
}

/// The path of binary `name`, which must have been built.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`; scripts/test.sh does)",
        path.display()
    );
    path
}

/// Runs `command` until it exits, at most `within` (then kills it and fails the test): its
/// output.
pub fn run_to_exit(command: &mut Command, within: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the binary");
    let deadline = Instant::now() + within;
    while child.try_wait().expect("poll the binary").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("reap the binary");
            panic!(
                "{command:?} still running after {within:?}:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
        .wait_with_output()
        .expect("collect the binary's output")
}

/// Runs `command`, a binary that must refuse its configuration: it exits with code 2 and one
/// line on stderr, which is returned. One that starts instead fails the test once it has had
/// as long as a process has to start.
pub fn config_error(command: &mut Command) -> String {
    let output = run_to_exit(command, STARTUP);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{command:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

/// How long a process may take to become healthy.
const STARTUP: Duration = Duration::from_secs(15);
/// How long a process asked to stop (SIGTERM) may take.
const GRACE: Duration = Duration::from_secs(15);
/// How long a process stopped gracefully on drop may take before it is SIGKILLed.
const DROP_GRACE: Duration = Duration::from_secs(25);
/// How many lines of a log failure messages show.
const TAIL_LINES: usize = 30;

/// A running binary, killed (SIGKILL) when dropped, or first asked to stop (SIGTERM) if
/// [`NodeProcess::terminate_on_drop`] says so.
#[derive(Debug)]
pub struct NodeProcess {
    process: Option<Process>,
    spec: Spec,
    log_dir: PathBuf,
    terminate_on_drop: bool,
    /// The binary's name.
    pub binary: String,
    /// The node's name, e.g. `DC_USA_0_VAL_1`.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its combined stdout and stderr.
    pub log: PathBuf,
}

impl NodeProcess {
    /// Starts `binary` with `args`, logging into `log_dir`, and waits until `GET /healthz`
    /// at `addr` answers 200 (over TLS when the test process runs with it).
    pub async fn start(
        binary: &str,
        name: &str,
        args: &[String],
        addr: SocketAddr,
        log_dir: &Path,
    ) -> Self {
        Self::start_first(binary, name, args, &[], addr, log_dir).await
    }

    /// Like [`NodeProcess::start`], with `first_start_args` added to this start only, not to
    /// restarts.
    pub async fn start_first(
        binary: &str,
        name: &str,
        args: &[String],
        first_start_args: &[String],
        addr: SocketAddr,
        log_dir: &Path,
    ) -> Self {
        let spec = test_spec(None, binary, name, args, addr);
        Self::start_spec(spec, first_start_args, log_dir).await
    }

    /// Like [`NodeProcess::start_first`] for one of the topology's members: its binary and its
    /// name ([`Member::name`]) are the member's.
    pub async fn start_member(
        member: Member,
        args: &[String],
        first_start_args: &[String],
        addr: SocketAddr,
        log_dir: &Path,
    ) -> Self {
        let (binary, name) = (member.binary(), member.name());
        let spec = test_spec(Some(member), binary, &name, args, addr);
        Self::start_spec(spec, first_start_args, log_dir).await
    }

    async fn start_spec(spec: Spec, first_start_args: &[String], log_dir: &Path) -> Self {
        let mut first = spec.clone();
        first
            .args
            .extend(first_start_args.iter().map(OsString::from));
        let binary = spec.binary.file_name().unwrap_or_default();
        let mut node = Self {
            process: None,
            terminate_on_drop: false,
            binary: binary.to_string_lossy().into_owned(),
            name: spec.name.clone(),
            addr: spec.address,
            log: log_dir.join(format!("{}.log", spec.name)),
            log_dir: log_dir.to_owned(),
            spec,
        };
        node.spawn(first);
        node.wait_healthy().await;
        node
    }

    fn spawn(&mut self, spec: Spec) {
        let process = process::spawn(spec, &self.log_dir)
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary));
        self.process = Some(process);
    }

    /// Starts the same process again after it stopped, without waiting for it to be healthy
    /// (a node that restores its slot answers 503 meanwhile).
    pub fn respawn(&mut self) {
        assert!(self.process.is_none(), "{} is still running", self.name);
        self.spawn(self.spec.clone());
    }

    /// Starts the same process again (same arguments, same data) after it stopped.
    pub async fn restart(&mut self) {
        self.respawn();
        self.wait_healthy().await;
    }

    /// Waits (up to 15 s) until the node answers `GET /healthz` with 200.
    pub async fn wait_healthy(&mut self) {
        let process = self.process.as_mut().expect("process is running");
        let probed = std::slice::from_mut(process);
        if let Err(error) = process::wait_healthy_over(probed, STARTUP, &tier_connector()).await {
            panic!("{error}:\n{}", self.log_tail());
        }
    }

    /// Makes dropping it send SIGTERM and wait (up to 25 s) before SIGKILL: a launcher
    /// (`geocount-cluster`) stops its own processes then, which SIGKILL would leave running
    /// (they have process groups of their own).
    pub fn terminate_on_drop(&mut self) {
        self.terminate_on_drop = true;
    }

    /// Waits (up to `within`) until the process's log contains `text`; panics with the log if it
    /// does not, or if the process exits first.
    pub async fn wait_for_log(&mut self, text: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(text) {
                return log;
            }
            let exited = self
                .process
                .as_mut()
                .and_then(|p| p.poll_exit().ok().flatten());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "{} never logged {text:?} ({}):\n{}",
                self.name,
                exited.map_or("timed out".to_owned(), |s| format!("exited with {s}")),
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The first line of the log holding `text`, waiting for it as [`Self::wait_for_log`] does.
    pub async fn log_line(&mut self, text: &str, within: Duration) -> String {
        let log = self.wait_for_log(text, within).await;
        let line = log.lines().find(|l| l.contains(text));
        line.expect("a line holding the text").to_owned()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.pid)
    }

    fn signal(&self, signal: Signal) {
        if let Some(process) = &self.process {
            process.signal(signal);
        }
    }

    /// kill -9, and reaps the process.
    pub fn kill9(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill_blocking();
        }
    }

    /// SIGTERM, then waits (up to 15 s) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut process = self.process.take().expect("process is running");
        if let Some(status) = process.terminate_blocking(GRACE) {
            return status;
        }
        process.kill_blocking();
        panic!(
            "{} ignored SIGTERM for 15 s:\n{}",
            self.name,
            self.log_tail()
        );
    }

    /// SIGSTOP: the process freezes, its sockets stay open.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT after [`NodeProcess::pause`].
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// The last lines of the node's log, for failure messages.
    pub fn log_tail(&self) -> String {
        process::log_tail(&self.log, TAIL_LINES)
    }

    /// An API client for this node.
    pub fn api(&self) -> Api {
        Api::new(self.addr)
    }
}

/// How a test starts `binary` (which must have been built) as `name`.
fn test_spec(
    member: Option<Member>,
    binary: &str,
    name: &str,
    args: &[String],
    address: SocketAddr,
) -> Spec {
    Spec {
        name: name.to_owned(),
        member,
        binary: self::binary(binary),
        args: args.iter().map(OsString::from).collect(),
        address,
        owner: Owner::Test,
        env_remove: Vec::new(),
    }
}

/// How the tiers are reached: over TLS trusting the test CA when the test process runs with it.
fn tier_connector() -> Connector {
    if crate::tls::enabled() {
        crate::tls::test_ca().connector()
    } else {
        tcp_connector()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            // A stopped process must be continued to die promptly on some kernels.
            process.signal(Signal::SIGCONT);
            if self.terminate_on_drop {
                process.terminate_blocking(DROP_GRACE);
            }
            process.kill_blocking();
        }
    }
}
