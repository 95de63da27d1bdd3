//! `geoctl storm connections|scans`: what a careless or hostile client does to a node, for the
//! fault campaign to check that the tiers keep serving through it.
//!
//! - `connections`: holds `--connections` idle TCP connections to `--target` from the local
//!   address `--from` (e.g. 127.0.0.2, so per-address limits see one host), opening a new one
//!   whenever the node closes one, for `--duration-secs`.
//! - `scans`: runs `--loops` loops of `GET --path` (the worst-case top-K by default) at the
//!   global aggregator, and meanwhile reads `GET /counter/--probe` ten times a second.
//!
//! Each prints one line of what happened; `scans` exits 1 if a probe read was answered 503.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpSocket;
use tokio::task::JoinSet;

use crate::cluster::{ClusterClient, counter_path};
use crate::error::GeoctlError;

/// The top-K a scan storm asks for by default: a window other than the live one, so every
/// counter is looked at.
pub const DEFAULT_SCAN_PATH: &str = "/topk?k=1000&window=60&at=1";

/// What `geoctl storm` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StormOptions {
    /// Which storm.
    pub kind: StormKind,
    /// How long it lasts.
    pub duration_secs: u64,
}

/// The two storms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StormKind {
    /// Idle connections held open.
    Connections {
        /// The node to flood.
        target: SocketAddr,
        /// How many to hold at once.
        connections: usize,
        /// The local address they come from.
        from: IpAddr,
    },
    /// Scans at the global aggregator, and probe reads meanwhile.
    Scans {
        /// How many scan loops run at once.
        loops: usize,
        /// The path each loop asks for.
        path: String,
        /// The counter the probe reads.
        probe: String,
    },
}

/// Runs the storm and prints its summary to `out`.
pub async fn run(
    cluster: &ClusterClient,
    options: &StormOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let until = Instant::now() + Duration::from_secs(options.duration_secs);
    match &options.kind {
        StormKind::Connections {
            target,
            connections,
            from,
        } => {
            let (opened, closed) = hold_connections(*target, *connections, *from, until).await;
            writeln!(
                out,
                "connection storm on {target} from {from}: {opened} connections opened, {closed} closed by the node"
            )?;
            Ok(())
        }
        StormKind::Scans { loops, path, probe } => {
            let scans = Arc::new(Tally::default());
            let mut tasks = JoinSet::new();
            for _ in 0..*loops {
                let (client, url, scans) = (
                    cluster.client().clone(),
                    cluster.global_url(path),
                    scans.clone(),
                );
                tasks.spawn(async move {
                    while Instant::now() < until {
                        let started = Instant::now();
                        let status = client.get(&url).await.map(|a| a.status.as_u16()).ok();
                        scans.count(status, started.elapsed());
                    }
                });
            }
            let probes = Tally::default();
            let probe_url = cluster.global_url(&counter_path(probe));
            while Instant::now() < until {
                let started = Instant::now();
                let answer = cluster.client().get(&probe_url).await;
                probes.count(answer.map(|a| a.status.as_u16()).ok(), started.elapsed());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            while tasks.join_next().await.is_some() {}
            writeln!(out, "scans ({loops} loops of {path}): {}", scans.summary())?;
            writeln!(out, "probe reads of {probe}: {}", probes.summary())?;
            let refused = probes.unavailable.load(Ordering::Relaxed);
            if refused > 0 {
                return Err(GeoctlError::StaleUnderScans { refused });
            }
            Ok(())
        }
    }
}

/// Keeps `connections` idle connections open until `until`; returns how many were opened and
/// how many the node closed.
async fn hold_connections(
    target: SocketAddr,
    connections: usize,
    from: IpAddr,
    until: Instant,
) -> (u64, u64) {
    let opened = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicU64::new(0));
    let mut holders = JoinSet::new();
    for _ in 0..connections {
        let (opened, closed) = (opened.clone(), closed.clone());
        holders.spawn(async move {
            while Instant::now() < until {
                let Ok(mut stream) = connect(target, from).await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                opened.fetch_add(1, Ordering::Relaxed);
                let mut byte = [0u8; 1];
                let left = until.saturating_duration_since(Instant::now());
                // Sends nothing: the node either closes it or it is held to the end.
                if let Ok(Ok(_)) = tokio::time::timeout(left, stream.read(&mut byte)).await {
                    closed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while holders.join_next().await.is_some() {}
    (
        opened.load(Ordering::Relaxed),
        closed.load(Ordering::Relaxed),
    )
}

async fn connect(target: SocketAddr, from: IpAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = match from {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(target).await
}

/// Answers by status, and the slowest.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    too_many: AtomicU64,
    unavailable: AtomicU64,
    other: AtomicU64,
    slowest_us: AtomicU64,
}

impl Tally {
    fn count(&self, status: Option<u16>, took: Duration) {
        let counter = match status {
            Some(200) => &self.ok,
            Some(429) => &self.too_many,
            Some(503) => &self.unavailable,
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.slowest_us
            .fetch_max(took.as_micros() as u64, Ordering::Relaxed);
    }

    fn summary(&self) -> String {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        format!(
            "200: {}, 429: {}, 503: {}, other or failed: {}; slowest {:.1} ms",
            load(&self.ok),
            load(&self.too_many),
            load(&self.unavailable),
            load(&self.other),
            load(&self.slowest_us) as f64 / 1000.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_by_status_and_keeps_the_slowest() {
        let tally = Tally::default();
        tally.count(Some(200), Duration::from_millis(3));
        tally.count(Some(429), Duration::from_millis(1));
        tally.count(Some(503), Duration::from_millis(9));
        tally.count(None, Duration::from_millis(2));
        assert_eq!(
            tally.summary(),
            "200: 1, 429: 1, 503: 1, other or failed: 1; slowest 9.0 ms"
        );
    }

    #[tokio::test]
    async fn held_connections_that_the_node_closes_are_opened_again() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        // A node that closes every connection at once.
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });
        let until = Instant::now() + Duration::from_millis(300);
        let (opened, closed) =
            hold_connections(target, 2, "127.0.0.1".parse().unwrap(), until).await;
        assert!(opened > 2, "opened {opened}");
        assert!(closed >= opened - 2, "opened {opened}, closed {closed}");
    }
}
