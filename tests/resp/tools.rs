//! What the Redis protocol tests run beside geocount: Debian's `redis-server` (the oracle),
//! `redis-cli` and `redis-benchmark`, and a python with the `redis` client (PyPI) for the
//! scripts of this folder. `scripts/resp-clients.sh` installs them (`scripts/test.sh` runs it
//! and names the python in [`PYTHON_ENV`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use geocount_net::{Connector, Stream, tcp_connector};
use geocount_test_support::ports::free_addr;
use geocount_test_support::process::run_to_exit;
use geocount_test_support::{TestTopology, tls};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The environment variable naming the python that has the `redis` client (default `python3`).
pub const PYTHON_ENV: &str = "E2E_PYTHON";

const INSTALL: &str = "scripts/resp-clients.sh installs it (scripts/test.sh runs it)";

/// `tool`'s path on `PATH`; fails the test naming the installer when it is missing.
pub fn require(tool: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(tool))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{tool} is missing: {INSTALL}"))
}

/// The python with the `redis` client, checked once.
pub fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let python = std::env::var(PYTHON_ENV).unwrap_or_else(|_| "python3".to_owned());
        let check = Command::new(&python)
            .args(["-c", "import redis, redis._parsers"])
            .output();
        match check {
            Ok(output) if output.status.success() => python,
            _ => panic!("{python} lacks the Python client `redis`: {INSTALL}"),
        }
    })
}

/// This folder: the scripts.
pub fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("resp")
}

/// Runs `command` to its exit (at most `within`) and fails the test, with its output, unless
/// it succeeded; its stdout.
pub fn succeed(command: &mut Command, within: Duration) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = run_to_exit(command, within);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr),
    );
    assert!(
        status.success(),
        "{command:?} exited with {status}:\n{stdout}\n{stderr}"
    );
    stdout
}

/// A `redis-server` of its own on a free port, without persistence, with one database (as a
/// geocount node has); killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    _dir: TempDir,
}

impl RedisServer {
    /// Starts one and waits until it answers PING.
    pub fn start() -> Self {
        let addr = free_addr();
        let dir = tempfile::Builder::new()
            .prefix("geocount-redis-")
            .tempdir()
            .expect("temporary directory");
        let port = addr.port().to_string();
        let dir_arg = dir.path().display().to_string();
        let args = [
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--databases",
            "1",
            "--dir",
            &dir_arg,
        ];
        let child = Command::new(require("redis-server"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let server = Self {
            child,
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.cli(&["PING"]) != "PONG" {
            assert!(
                Instant::now() < deadline,
                "redis-server never answered PING"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// `redis-cli` against it: its output, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let port = self.addr.port().to_string();
        let mut command = Command::new(require("redis-cli"));
        command.args(["-h", "127.0.0.1", "-p", &port]).args(args);
        let output = run_to_exit(&mut command, Duration::from_secs(10));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A geocount shard node's RESP listener, reached as the test process reaches the tiers:
/// over TLS trusting the test CA when the topology has `[tls]`.
#[derive(Debug, Clone)]
pub struct RespNode {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The CA file to trust, with `[tls]`.
    pub ca: Option<PathBuf>,
}

impl RespNode {
    /// Shard `slot` of `dc`'s listener; waits (up to 10 s) until it answers.
    pub fn of(topology: &TestTopology, dc: &str, slot: usize, token: Option<&str>) -> Self {
        let node = Self {
            addr: topology.resp_addr(dc, slot),
            ca: topology.topology.tls.as_ref().map(|tls| tls.ca.clone()),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut ping = vec!["PING"];
        if let Some(token) = token {
            ping = vec!["--no-auth-warning", "-a", token, "PING"];
        }
        loop {
            let answer = node.cli(&ping);
            if answer == "PONG" {
                return node;
            }
            assert!(
                Instant::now() < deadline,
                "{} never answered PING: {answer:?}",
                node.addr
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `-h HOST -p PORT`, and `--tls --cacert CA` with `[tls]`: how `redis-cli` and
    /// `redis-benchmark` reach it.
    pub fn tool_args(&self) -> Vec<String> {
        let mut args = vec![
            "-h".to_owned(),
            self.addr.ip().to_string(),
            "-p".to_owned(),
            self.addr.port().to_string(),
        ];
        if let Some(ca) = &self.ca {
            args.extend(["--tls".to_owned(), "--cacert".to_owned()]);
            args.push(ca.display().to_string());
        }
        args
    }

    /// `redis-cli` with `args`: its output (replies, errors included), trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut command = Command::new(require("redis-cli"));
        command.args(self.tool_args()).args(args);
        let output = run_to_exit(&mut command, Duration::from_secs(10));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// With `[tls]`, `tls_flag` and the CA file: how this folder's scripts are told to speak TLS
    /// to it (nothing without).
    pub fn script_args(&self, tls_flag: &str) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(ca) = &self.ca {
            args.extend([tls_flag.to_owned(), ca.display().to_string()]);
        }
        args
    }

    /// A connection of its own, bytes both ways.
    pub async fn connect(&self) -> Box<dyn Stream> {
        self.connect_over(tcp_connector()).await
    }

    /// Like [`RespNode::connect`], over a connection `inner` opens.
    pub async fn connect_over(&self, inner: Connector) -> Box<dyn Stream> {
        let connector: Connector = match self.ca {
            Some(_) => tls::test_ca().connector_over(inner),
            None => inner,
        };
        let host = self.addr.ip().to_string();
        connector
            .connect(&host, self.addr.port())
            .await
            .expect("connect to the RESP listener")
    }
}

/// Sends PING on `stream` and checks that PONG comes back.
pub async fn ping(stream: &mut Box<dyn Stream>) {
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
    let mut reply = [0u8; 7];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut reply))
        .await
        .expect("PONG within 5 s")
        .expect("PONG");
    assert_eq!(&reply, b"+PONG\r\n");
}

/// Reads `stream` until the server closes it (at most 5 s): what came before.
pub async fn read_to_close(stream: &mut Box<dyn Stream>) -> Vec<u8> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut received));
    match read.await {
        Ok(_) => received, // closed (cleanly or reset)
        Err(_) => panic!(
            "the connection stayed open 5 s after a malformed frame; received {:?}",
            String::from_utf8_lossy(&received)
        ),
    }
}
