//! The peer: redis-server on a loopback port, persistence off or `appendfsync always`, driven by
//! `redis-benchmark -t incr -c 50 -r 100000` at pipelines of 1, 16 and 128 with a fixed number
//! of requests each.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::procs::{Server, free_address, output};

/// redis-benchmark clients.
pub const CLIENTS: u32 = 50;
/// The INCR keys are spread over this many counters (`-r`), like geocount's.
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
        // Listening is not quite ready: wait for PONG.
        for _ in 0..100 {
            let ping = output(
                "redis-cli",
                &[
                    "-p".to_owned(),
                    address.port().to_string(),
                    "ping".to_owned(),
                ],
                Duration::from_secs(5),
            )
            .await;
            if ping.is_ok_and(|answer| answer.trim() == "PONG") {
                return Ok(Self { server });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("redis-server on {address} never answered PING")
    }

    /// INCRs per second of one `redis-benchmark` run of `requests` at pipeline `pipeline`.
    pub async fn incr(&self, pipeline: u32, requests: u64) -> anyhow::Result<f64> {
        let args: Vec<String> = vec![
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.server.address.port().to_string(),
            "-t".into(),
            "incr".into(),
            "-c".into(),
            CLIENTS.to_string(),
            "-r".into(),
            KEYSPACE.to_string(),
            "-n".into(),
            requests.to_string(),
            "-P".into(),
            pipeline.to_string(),
            "-q".into(),
        ];
        let text = output("redis-benchmark", &args, Duration::from_secs(300)).await?;
        parse_rate(&text).with_context(|| format!("cannot read redis-benchmark's output: {text:?}"))
    }

    /// Stops it.
    pub async fn stop(self) {
        self.server.stop().await;
    }
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
