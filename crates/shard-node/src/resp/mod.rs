//! The Redis protocol: the handler stage beside [`crate::http`], on the node's `resp` address
//! (docs/api.md, "Redis protocol").
//!
//! - this module: the listener (plain, or TLS with `[tls]`), its connection limits (in all and
//!   per client address) and the counts `INFO` reports.
//! - [`connection`]: one client's loop: commands taken off its bytes, up to `max_pipeline` and
//!   `max_pipeline_bytes` in flight at once, answered in order in the protocol version it
//!   chose; closed once idle for `idle_timeout_ms`.
//! - [`session`]: what one connection holds (protocol version, `AUTH` and its rights, name,
//!   id) and the connection commands that change it.
//! - [`counters`]: the counter commands: writes through the same path as HTTP single writes
//!   (forwarding, then the commit loop, where every connection's writes share group commits),
//!   `DEL`/`EXPIRE`/`PERSIST` onto the lifecycle, reads of the world value.
//! - [`about`]: what the node says of itself: `INFO`, `CONFIG GET`, `COMMAND`.
//!
//! The wire itself (framing, the command vocabulary, reply encoding) is `geocount-resp`.

pub(crate) mod about;
pub(crate) mod connection;
pub(crate) mod counters;
pub(crate) mod session;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use geocount_model::RespSettings;
use geocount_net::{Listener, PeerConnections};
use geocount_resp::{Protocol, Reply, words};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::node::NodeState;

/// What every connection of the listener shares.
pub(crate) struct Shared {
    /// The node.
    pub state: Arc<NodeState>,
    /// `[resp]`.
    pub settings: RespSettings,
    /// Counts for `INFO`.
    pub stats: Stats,
    /// Where the listener listens, for `INFO`.
    pub port: u16,
}

/// What `INFO` reports of the listener.
#[derive(Debug)]
pub(crate) struct Stats {
    /// When the listener started.
    pub started: Instant,
    /// Connections open now.
    pub connected: AtomicUsize,
    /// Connections accepted since the start.
    pub connections: AtomicU64,
    /// Connections refused past `max_connections` or `max_connections_per_peer`.
    pub rejected: AtomicU64,
    /// Commands answered.
    pub commands: AtomicU64,
    /// The last client id given; each connection takes the next.
    pub last_id: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            connected: AtomicUsize::new(0),
            connections: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            last_id: AtomicU64::new(0),
        }
    }
}

/// The Redis protocol's listener, serving beside the HTTP one.
pub(crate) struct Server {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Serves `listener`, if any, for `state` within `settings`.
    pub fn start<L: Listener>(
        listener: Option<L>,
        state: &Arc<NodeState>,
        settings: &RespSettings,
    ) -> Self {
        let (stop, stopping) = watch::channel(false);
        let task = listener.map(|listener| {
            tokio::spawn(serve(listener, state.clone(), settings.clone(), stopping))
        });
        Self { stop, task }
    }

    /// Stops accepting and drops the open connections.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

/// Serves the Redis protocol on `listener` until `stop` turns true; then the open connections
/// are dropped (the HTTP side has drained by then, and the commit loop flushes after).
async fn serve<L: Listener>(
    mut listener: L,
    state: Arc<NodeState>,
    settings: RespSettings,
    mut stop: watch::Receiver<bool>,
) {
    let port = listener.local_addr().map_or(0, |addr| addr.port());
    let shared = Arc::new(Shared {
        state,
        settings,
        stats: Stats::default(),
        port,
    });
    let per_peer = PeerConnections::new(shared.settings.max_connections_per_peer);
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (mut io, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // A connection that failed before it was ours (reset, out of descriptors).
                tracing::debug!(%error, "cannot accept a RESP connection");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        let stats = &shared.stats;
        let place = per_peer.open(peer.ip());
        let full = stats.connected.load(Ordering::Relaxed) >= shared.settings.max_connections;
        let Some(place) = place.filter(|_| !full) else {
            // Debug, not warn: a flood would flood the log too.
            tracing::debug!(%peer, full, "too many RESP connections; refusing the new one");
            stats.rejected.fetch_add(1, Ordering::Relaxed);
            connections.spawn(async move {
                let mut refusal = Vec::new();
                Reply::error(words::MAX_CLIENTS).encode(Protocol::Resp2, &mut refusal);
                let _ = io.write_all(&refusal).await;
                let _ = io.shutdown().await;
            });
            continue;
        };
        stats.connected.fetch_add(1, Ordering::Relaxed);
        stats.connections.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        connections.spawn(async move {
            connection::run(io, peer, &shared).await;
            shared.stats.connected.fetch_sub(1, Ordering::Relaxed);
            drop(place);
        });
    }
    connections.shutdown().await;
}
