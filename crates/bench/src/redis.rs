//! The peer: redis-server on a loopback port, persistence off or `appendfsync always`, driven by
//! `redis-benchmark -t incr -c 50 -r 100000` at pipelines of 1, 16 and 128 with a fixed number
//! of requests each. The same command lines drive a shard node's RESP port ([`crate::resp`]).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::procs::{Server, free_address, output};

/// redis-benchmark clients.
pub const CLIENTS: u32 = 50;
/// The INCR keys of the Redis step are spread over this many counters (`-r`), like geocount's.
pub const KEYSPACE: u32 = 100_000;

/// How redis keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// No RDB, no AOF.
    Off,
    /// AOF with `appendfsync always`: every write fsynced before the answer.
    Always,
}

/// A running redis-server.
pub struct Redis {
    server: Server,
}

impl Redis {
    /// Starts redis-server with `persistence`, its files in `dir` (emptied first).
    pub async fn start(persistence: Persistence, dir: &Path) -> anyhow::Result<Self> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let address = free_address()?;
        let mut args: Vec<String> = [
            "--bind",
            "127.0.0.1",
            "--port",
            &address.port().to_string(),
            "--save",
            "",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--dir",
            &dir.display().to_string(),
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend(
            match persistence {
                Persistence::Off => vec!["--appendonly", "no"],
                Persistence::Always => vec!["--appendonly", "yes", "--appendfsync", "always"],
            }
            .into_iter()
            .map(str::to_owned),
        );
        let server = Server::start(
            Path::new("redis-server"),
            &args,
            address,
            &dir.join("redis.log"),
        )
        .await?;
        wait_pong(address).await?;
        Ok(Self { server })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.server.address
    }

    /// INCRs per second of one `redis-benchmark` run of `requests` at pipeline `pipeline` over
    /// `keyspace` keys.
    pub async fn incr(&self, pipeline: u32, keyspace: u32, requests: u64) -> anyhow::Result<f64> {
        incr(self.address(), pipeline, keyspace, requests).await
    }

    /// Stops it.
    pub async fn stop(self) {
        self.server.stop().await;
    }
}

/// Waits until the server at `address` answers `PING` with `PONG` (listening is not quite
/// ready).
pub async fn wait_pong(address: SocketAddr) -> anyhow::Result<()> {
    let args = [
        "-h",
        &address.ip().to_string(),
        "-p",
        &address.port().to_string(),
        "ping",
    ]
    .map(str::to_owned);
    let mut last = String::new();
    for _ in 0..100 {
        match output("redis-cli", &args, Duration::from_secs(5)).await {
            Ok(answer) if answer.trim() == "PONG" => return Ok(()),
            Ok(answer) => last = answer,
            Err(error) => last = format!("{error:#}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{address} never answered PING with PONG; the last answer: {last}")
}

/// The arguments of `redis-benchmark -t incr -c 50 -r keyspace -n requests -P pipeline -q`
/// against `address`.
pub fn incr_args(address: SocketAddr, pipeline: u32, keyspace: u32, requests: u64) -> Vec<String> {
    [
        "-h".to_owned(),
        address.ip().to_string(),
        "-p".to_owned(),
        address.port().to_string(),
        "-t".to_owned(),
        "incr".to_owned(),
        "-c".to_owned(),
        CLIENTS.to_string(),
        "-r".to_owned(),
        keyspace.to_string(),
        "-n".to_owned(),
        requests.to_string(),
        "-P".to_owned(),
        pipeline.to_string(),
        "-q".to_owned(),
    ]
    .to_vec()
}

/// INCRs per second of one `redis-benchmark` run against `address` (Redis or a shard node's
/// RESP port) of `requests` at pipeline `pipeline` over `keyspace` keys; fails with
/// redis-benchmark's own words if it does (it exits at the first error reply).
pub async fn incr(
    address: SocketAddr,
    pipeline: u32,
    keyspace: u32,
    requests: u64,
) -> anyhow::Result<f64> {
    let args = incr_args(address, pipeline, keyspace, requests);
    let text = output("redis-benchmark", &args, Duration::from_secs(300)).await?;
    parse_rate(&text).with_context(|| format!("cannot read redis-benchmark's output: {text:?}"))
}

/// The rate of `INCR: 95238.10 requests per second, p50=0.263 msec` (progress lines before it
/// are separated by carriage returns).
fn parse_rate(text: &str) -> Option<f64> {
    let line = text
        .split(['\r', '\n'])
        .find(|l| l.contains("requests per second"))?;
    let rate = line.split_once(':')?.1.split_whitespace().next()?;
    rate.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_quiet_output() {
        let text = "INCR: rps=91234.0 (overall: 90000.0) avg_msec=0.3 (overall: 0.3)\r\
                    INCR: 95238.10 requests per second, p50=0.263 msec\n\n";
        assert_eq!(parse_rate(text), Some(95_238.10));
        assert_eq!(
            parse_rate("INCR: 1500000.00 requests per second\n"),
            Some(1.5e6)
        );
        assert_eq!(parse_rate("error"), None);
    }
}
