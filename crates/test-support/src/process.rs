//! Real node processes that never outlive their test.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::api::Api;

/// The directory holding the workspace's built binaries: `GEOCOUNT_BIN_DIR`, or the profile
/// directory of the running test (`target/<profile>`).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GEOCOUNT_BIN_DIR") {
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

/// How long a process stopped gracefully on drop may take before it is SIGKILLed.
const DROP_GRACE: Duration = Duration::from_secs(25);

/// A running binary, killed (SIGKILL) when dropped, or first asked to stop (SIGTERM) if
/// [`NodeProcess::terminate_on_drop`] says so.
#[derive(Debug)]
pub struct NodeProcess {
    child: Option<Child>,
    terminate_on_drop: bool,
    /// The binary's name.
    pub binary: String,
    /// The node's name, e.g. `DC_USA_0_VAL_1`.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its combined stdout and stderr.
    pub log: PathBuf,
    args: Vec<String>,
    /// Arguments of the first start only (a shard node's `--restore empty`): a restart after a
    /// lost disk must restore.
    first_start_args: Vec<String>,
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
        let log = log_dir.join(format!("{name}.log"));
        let mut node = Self {
            child: None,
            terminate_on_drop: false,
            binary: binary.to_owned(),
            name: name.to_owned(),
            addr,
            log,
            args: args.to_vec(),
            first_start_args: first_start_args.to_vec(),
        };
        node.spawn();
        node.first_start_args.clear();
        node.wait_healthy().await;
        node
    }

    fn spawn(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log file");
        let child = Command::new(binary(&self.binary))
            .args(&self.args)
            .args(&self.first_start_args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary));
        self.child = Some(child);
    }

    /// Starts the same process again after it stopped, without waiting for it to be healthy
    /// (a node that restores its slot answers 503 meanwhile).
    pub fn respawn(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.name);
        self.spawn();
    }

    /// Starts the same process again (same arguments, same data) after it stopped.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.name);
        self.spawn();
        self.wait_healthy().await;
    }

    /// Waits (up to 15 s) until the node answers `GET /healthz` with 200.
    pub async fn wait_healthy(&mut self) {
        let api = Api::new(self.addr);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "{} exited with {status} before it was healthy:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            if api.get("/healthz").await.is_ok_and(|a| a.status == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not healthy after 15 s:\n{}",
                self.name,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
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
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
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
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            kill(Pid::from_raw(pid as i32), signal).expect("send signal");
        }
    }

    /// kill -9, and reaps the process.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits (up to 15 s) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(Signal::SIGTERM);
        let mut child = self.child.take().expect("process is running");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().expect("wait for child") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} ignored SIGTERM for 15 s:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
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
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// An API client for this node.
    pub fn api(&self) -> Api {
        Api::new(self.addr)
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A stopped process must be continued to die promptly on some kernels.
            let pid = Pid::from_raw(child.id() as i32);
            let _ = kill(pid, Signal::SIGCONT);
            if self.terminate_on_drop && kill(pid, Signal::SIGTERM).is_ok() {
                let deadline = Instant::now() + DROP_GRACE;
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
