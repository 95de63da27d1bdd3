//! The accept loop: serves HTTP/1.1 on every connection a [`Listener`] yields until shutdown,
//! then lets in-flight requests finish. [`ServeLimits`] bound how many connections it keeps, in
//! all and from one address, and how long a slow client may take.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::Semaphore;

use crate::body::BodyReadTimeout;
use crate::identity::PeerProcess;
use crate::{Listener, Response};

/// The address a request came from: every request [`serve`] hands its handler carries it in
/// its extensions (for logs naming the peer, such as a refused call between tiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// How long in-flight requests get to finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// What the accept loop allows each client. Every timer runs on tokio's clock, so a simulation
/// drives them with its own time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// The most connections open at once from clients. One more is accepted and closed at
    /// once (the client sees the connection closed rather than hanging in the listen backlog).
    /// Connections from tier processes ([`crate::PeerProcess`]) have a budget of their own as
    /// large.
    pub max_connections: usize,
    /// The most connections open at once from one IP address, so one client (or one host
    /// opening idle sockets) cannot take every connection from the others, the tiers' pulls
    /// among them. One more from it is accepted and closed at once.
    pub max_connections_per_peer: usize,
    /// How long a client may take to send a request's whole header, counted from when the
    /// connection is ready for it (opened, or the previous answer sent): an idle keep-alive
    /// connection is closed after it too.
    pub header_read_timeout: Duration,
    /// How long a request's whole body may take once the handler reads it
    /// ([`read_body`](crate::read_body) fails with `BodyError::TimedOut` after it).
    pub body_read_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_connections_per_peer: 1_000,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: crate::body::DEFAULT_BODY_READ_TIMEOUT,
        }
    }
}

/// Connections open per IP address, each bounded: the per-address cap of every listener that
/// has one (HTTP's here, the shard nodes' RESP listener).
#[derive(Debug, Clone)]
pub struct PeerConnections {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    limit: usize,
}

/// One open connection of a peer: dropping it closes its place.
#[derive(Debug)]
pub struct PeerSlot {
    peers: PeerConnections,
    ip: IpAddr,
}

impl PeerConnections {
    /// At most `limit` connections from each address.
    pub fn new(limit: usize) -> Self {
        Self {
            open: Arc::default(),
            limit,
        }
    }

    /// A place for one more connection from `ip`, if it has fewer than the limit open.
    pub fn open(&self, ip: IpAddr) -> Option<PeerSlot> {
        let mut open = self.open.lock().expect("peer connections lock");
        let count = open.entry(ip).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().expect("peer connections lock");
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// What answers a server's requests: a cloneable function from a request to its answer.
pub trait Handler: Fn(Request<Incoming>) -> Self::Answer + Clone + Send + Sync + 'static {
    /// The future of one answer.
    type Answer: Future<Output = Response> + Send + 'static;
}

impl<H, F> Handler for H
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    type Answer = F;
}

/// Serves `handler` on every connection from `listener` until `shutdown` completes, then waits
/// (up to a bound) for open connections to finish their requests; under the default
/// [`ServeLimits`].
pub async fn serve(
    listener: impl Listener,
    handler: impl Handler,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_limits(listener, ServeLimits::default(), handler, shutdown).await;
}

/// [`serve`] under `limits`. A connection whose client certificate proved a tier process
/// ([`Listener::peer_process`]) is served from a budget of its own, `limits.max_connections`
/// more, and is not counted against its address: clients holding every connection they may
/// have cannot starve the pulls, copies and forwarded writes between tiers.
pub async fn serve_with_limits<L: Listener>(
    mut listener: L,
    limits: ServeLimits,
    handler: impl Handler,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let tiers_open = Arc::new(Semaphore::new(limits.max_connections));
    let per_peer = PeerConnections::new(limits.max_connections_per_peer);
    let body_timeout = BodyReadTimeout(limits.body_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let process = L::peer_process(&io);
        let (peer_slot, open) = match &process {
            Some(_) => (None, &tiers_open),
            None => match per_peer.open(peer.ip()) {
                Some(slot) => (Some(slot), &open),
                None => {
                    // Debug, not warn: a flood would flood the log too.
                    tracing::debug!(%peer, limit = limits.max_connections_per_peer, "too many connections from this address; closing the new one");
                    drop(io);
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(open).try_acquire_owned() else {
            tracing::warn!(%peer, process = process.as_deref(), limit = limits.max_connections, "too many connections; closing the new one");
            drop(io);
            continue;
        };
        let handler = handler.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(body_timeout);
            request.extensions_mut().insert(Peer(peer));
            if let Some(process) = &process {
                request
                    .extensions_mut()
                    .insert(PeerProcess(process.clone()));
            }
            let response = handler(request);
            async move { Ok::<_, Infallible>(response.await) }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
            drop(permit);
            drop(peer_slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain timeout; closing them");
    }
}
