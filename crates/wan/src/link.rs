//! One link: its state ([`Link`]: shaping, the cut switch, counters) and its proxy loop
//! ([`Link::serve`]).
//!
//! Every connection accepted on the link's address gets its own connection to the target, and
//! two pipes, one per direction. A pipe's reader timestamps each chunk as it is read and gives
//! it a release time from the link's current shaping ([`DelayLine`]); its writer sleeps until
//! then, cuts the chunk into pieces under the bandwidth cap ([`Pacer`], shared by every
//! connection of the link in that direction), and writes each piece when its last byte would
//! have arrived. End of stream is delayed like data, so half-closes cross the link in order.
//!
//! The bytes in flight in one direction of one connection are bounded by a window
//! ([`WINDOW_BYTES`]): a writer held back by the delay or the cap stops its reader, and TCP
//! pushes back on the sender, as a real path's window would.
//!
//! A cut link accepts new connections and closes them at once, and closes every established
//! one, dropping whatever was in flight; healing it lets new connections through again.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::{Instant, sleep_until};

use crate::config::LinkConfig;
use crate::shaping::{DelayLine, Pacer, Shaping, piece_size};

/// The most bytes read from a socket at once.
const READ_BYTES: usize = 64 * 1024;
/// The most bytes in flight (read, not yet written) in one direction of one connection.
pub const WINDOW_BYTES: usize = 8 * 1024 * 1024;
/// How long connecting to the target may take before the client's connection is closed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How much a capped direction may catch up after its writer was held up by a slow receiver.
const MAX_CATCH_UP: Duration = Duration::from_millis(20);

/// Which way bytes go through a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the connecting client to the target.
    ToTarget,
    /// From the target back to the client.
    ToClient,
}

/// One direction's shared state: its bandwidth cap and how much it carried.
#[derive(Debug, Default)]
struct Way {
    pacer: Pacer,
    bytes: AtomicU64,
}

/// A link's state, shared by its accept loop, its connections and the control API.
#[derive(Debug)]
pub struct Link {
    name: String,
    listen: SocketAddr,
    target: SocketAddr,
    shaping: Mutex<Shaping>,
    cut: watch::Sender<bool>,
    to_target: Way,
    to_client: Way,
    connections_open: AtomicU64,
    connections_total: AtomicU64,
    connections_refused: AtomicU64,
}

/// What `GET /links` says about one link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkStatus {
    /// Its name.
    pub name: String,
    /// The address its proxy listens on.
    pub listen: SocketAddr,
    /// Where it forwards.
    pub target: SocketAddr,
    /// One-way delay in each direction, ms.
    pub delay_ms: u64,
    /// Jitter of each chunk's delay, ± ms.
    pub jitter_ms: u64,
    /// Cap of each direction, bytes per second (0: none).
    pub bandwidth_bytes_per_sec: u64,
    /// Whether it is cut.
    pub cut: bool,
    /// Bytes delivered to the target since start.
    pub bytes_to_target: u64,
    /// Bytes delivered back to clients since start.
    pub bytes_to_client: u64,
    /// Connections carried right now.
    pub connections_open: u64,
    /// Connections carried since start.
    pub connections_total: u64,
    /// Connections closed at once because the link was cut.
    pub connections_refused: u64,
}

/// Counts an open connection until dropped.
struct OpenConnection<'a>(&'a AtomicU64);

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Link {
    /// The link `config`, whose proxy listens on `listen` (the address actually bound).
    pub fn new(config: &LinkConfig, listen: SocketAddr) -> Self {
        Self {
            name: config.name.clone(),
            listen,
            target: config.target,
            shaping: Mutex::new(config.shaping()),
            cut: watch::Sender::new(false),
            to_target: Way::default(),
            to_client: Way::default(),
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address its proxy listens on.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// Its current shaping.
    pub fn shaping(&self) -> Shaping {
        *self.shaping.lock().expect("shaping lock")
    }

    /// Changes its shaping; chunks read from now on get the new delay and jitter, and pieces
    /// written from now on the new cap. Chunks already in flight keep their release times.
    pub fn set_shaping(&self, shaping: Shaping) {
        *self.shaping.lock().expect("shaping lock") = shaping;
        tracing::info!(
            link = %self.name,
            delay_ms = shaping.delay_ms,
            jitter_ms = shaping.jitter_ms,
            bandwidth_bytes_per_sec = shaping.bandwidth_bytes_per_sec,
            "shaping changed"
        );
    }

    /// Cuts the link: established connections are closed, new ones closed at once.
    pub fn cut(&self) {
        self.cut.send_replace(true);
        tracing::info!(link = %self.name, "cut");
    }

    /// Heals the link: new connections are carried again.
    pub fn heal(&self) {
        self.cut.send_replace(false);
        tracing::info!(link = %self.name, "healed");
    }

    /// Whether the link is cut.
    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }

    /// Its state and counters.
    pub fn status(&self) -> LinkStatus {
        let shaping = self.shaping();
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LinkStatus {
            name: self.name.clone(),
            listen: self.listen,
            target: self.target,
            delay_ms: shaping.delay_ms,
            jitter_ms: shaping.jitter_ms,
            bandwidth_bytes_per_sec: shaping.bandwidth_bytes_per_sec,
            cut: self.is_cut(),
            bytes_to_target: load(&self.to_target.bytes),
            bytes_to_client: load(&self.to_client.bytes),
            connections_open: load(&self.connections_open),
            connections_total: load(&self.connections_total),
            connections_refused: load(&self.connections_refused),
        }
    }

    /// Accepts connections on `listener` until `stop` turns true (or its sender is dropped),
    /// carrying each to the target in its own task. Connections end when `stop` turns true.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
        tracing::info!(link = %self.name, listen = %self.listen, target = %self.target, "listening");
        loop {
            let (client, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(link = %self.name, %error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = turns_true(&mut stop) => break,
            };
            if self.is_cut() {
                self.connections_refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(link = %self.name, %peer, "cut: closing a new connection");
                drop(client);
                continue;
            }
            let link = self.clone();
            let stop = stop.clone();
            tokio::spawn(async move { link.carry(client, peer, stop).await });
        }
    }

    /// Carries one connection until both directions end, either fails, the link is cut or the
    /// emulator stops; then closes both sockets.
    async fn carry(&self, client: TcpStream, peer: SocketAddr, mut stop: watch::Receiver<bool>) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
        let _open = OpenConnection(&self.connections_open);
        let mut cut = self.cut.subscribe();
        let proxied = async {
            let target = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(self.target))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
            // Delays are the point here: no batching on top of them.
            target.set_nodelay(true)?;
            client.set_nodelay(true)?;
            let (client_read, client_write) = client.into_split();
            let (target_read, target_write) = target.into_split();
            tokio::try_join!(
                self.pipe(client_read, target_write, Direction::ToTarget),
                self.pipe(target_read, client_write, Direction::ToClient),
            )
            .map(|_| ())
        };
        tokio::select! {
            result = proxied => match result {
                Ok(()) => tracing::debug!(link = %self.name, %peer, "connection ended"),
                Err(error) => tracing::debug!(link = %self.name, %peer, %error, "connection failed"),
            },
            () = turns_true(&mut cut) => {
                tracing::debug!(link = %self.name, %peer, "cut: closing an established connection");
            }
            () = turns_true(&mut stop) => {}
        }
    }

    /// Carries one direction of a connection until its end of stream has been delivered.
    async fn pipe(
        &self,
        mut from: OwnedReadHalf,
        mut to: OwnedWriteHalf,
        direction: Direction,
    ) -> io::Result<()> {
        let way = match direction {
            Direction::ToTarget => &self.to_target,
            Direction::ToClient => &self.to_client,
        };
        let window = Semaphore::new(WINDOW_BYTES);
        let (chunks, mut released) = mpsc::unbounded_channel::<Chunk>();
        let read = async {
            let mut line = DelayLine::new();
            let mut rng = StdRng::from_os_rng();
            let mut buffer = vec![0; READ_BYTES];
            loop {
                // Room for a whole read, so a read is never held after it returns.
                window
                    .acquire_many(READ_BYTES as u32)
                    .await
                    .expect("the window is never closed")
                    .forget();
                let n = from.read(&mut buffer).await?;
                window.add_permits(READ_BYTES - n);
                let release =
                    line.release_at(Instant::now(), self.shaping().sample_delay(&mut rng));
                let chunk = if n == 0 {
                    Chunk::End(release)
                } else {
                    Chunk::Data(release, buffer[..n].to_vec())
                };
                // The writer only stops after an end of stream or an error, which also ends
                // this connection, so a failed send needs no handling.
                let _ = chunks.send(chunk);
                if n == 0 {
                    return Ok::<(), io::Error>(());
                }
            }
        };
        let write = async {
            while let Some(chunk) = released.recv().await {
                match chunk {
                    Chunk::Data(release, bytes) => {
                        wait_until(release).await;
                        let bandwidth = self.shaping().bandwidth_bytes_per_sec;
                        for piece in bytes.chunks(piece_size(bandwidth)) {
                            let now = Instant::now();
                            let ready = release.max(now.checked_sub(MAX_CATCH_UP).unwrap_or(now));
                            wait_until(way.pacer.reserve(ready, piece.len(), bandwidth)).await;
                            to.write_all(piece).await?;
                            way.bytes.fetch_add(piece.len() as u64, Ordering::Relaxed);
                        }
                        window.add_permits(bytes.len());
                    }
                    Chunk::End(release) => {
                        wait_until(release).await;
                        to.shutdown().await?;
                        break;
                    }
                }
            }
            Ok::<(), io::Error>(())
        };
        tokio::try_join!(read, write).map(|_| ())
    }
}

/// Sleeps until `deadline`, unless it has passed: a timer rounds up to the next millisecond,
/// which a link without delay must not add.
async fn wait_until(deadline: Instant) {
    if deadline > Instant::now() {
        sleep_until(deadline).await;
    }
}

/// Completes once `switch` is true, or its sender is gone.
async fn turns_true(switch: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across an await: drop it here.
    let _ = switch.wait_for(|on| *on).await;
}

/// What a pipe's reader hands its writer.
#[derive(Debug)]
enum Chunk {
    /// Bytes to write at (not before) the instant.
    Data(Instant, Vec<u8>),
    /// The end of the stream, to pass on at the instant.
    End(Instant),
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn config(target: SocketAddr, delay_ms: u64) -> LinkConfig {
        LinkConfig {
            name: "test".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            target,
            delay_ms,
            jitter_ms: 0,
            bandwidth_bytes_per_sec: 0,
        }
    }

    /// An echo server on a free port, and a link in front of it; returns the link and the
    /// stop switch (dropping it stops the link).
    async fn echo_link(delay_ms: u64) -> (Arc<Link>, watch::Sender<bool>) {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let link = Arc::new(Link::new(
            &config(target, delay_ms),
            listener.local_addr().unwrap(),
        ));
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(link.clone().serve(listener, stopped));
        (link, stop)
    }

    #[tokio::test]
    async fn bytes_cross_in_order_and_are_counted() {
        let (link, _stop) = echo_link(5).await;
        link.set_shaping(Shaping {
            delay_ms: 5,
            jitter_ms: 5,
            bandwidth_bytes_per_sec: 0,
        });
        let stream = TcpStream::connect(link.listen()).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let sent: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        // Many small writes, each its own chunk with its own jitter sample.
        let (mut r, mut w) = stream.into_split();
        let writes = sent.clone();
        let writer = tokio::spawn(async move {
            for piece in writes.chunks(100) {
                w.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            w.shutdown().await.unwrap();
        });
        let mut received = Vec::new();
        r.read_to_end(&mut received).await.unwrap();
        writer.await.unwrap();
        assert!(received == sent, "bytes were reordered or lost");
        let status = link.status();
        assert_eq!(status.bytes_to_target, 20_000);
        assert_eq!(status.bytes_to_client, 20_000);
        assert_eq!(status.connections_total, 1);
    }

    #[tokio::test]
    async fn stopping_closes_connections() {
        let (link, stop) = echo_link(0).await;
        let mut stream = TcpStream::connect(link.listen()).await.unwrap();
        stream.write_all(b"hi").await.unwrap();
        let mut buffer = [0; 2];
        stream.read_exact(&mut buffer).await.unwrap();
        assert_eq!(link.status().connections_open, 1);
        stop.send_replace(true);
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut rest));
        assert!(read.await.is_ok(), "the connection was not closed");
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn an_unreachable_target_closes_the_client() {
        // Bind then drop: nothing listens there any more.
        let target = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let link = Arc::new(Link::new(
            &config(target, 0),
            listener.local_addr().unwrap(),
        ));
        let (_stop, stopped) = watch::channel(false);
        tokio::spawn(link.clone().serve(listener, stopped));
        let mut stream = TcpStream::connect(link.listen()).await.unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut rest));
        assert!(read.await.is_ok(), "the client was not closed");
        assert!(rest.is_empty());
    }
}
