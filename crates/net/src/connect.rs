//! The network seam of outgoing connections: where [`HttpClient`](crate::HttpClient) connects
//! to. tokio's TCP in production ([`TcpConnect`]), a simulated network under a simulation.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connected byte stream, both ways.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A connection being opened.
pub type Connecting = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send>>;

/// A [`Connecting`] from any future of a stream.
pub fn connecting<S: Stream>(
    stream: impl Future<Output = io::Result<S>> + Send + 'static,
) -> Connecting {
    Box::pin(async move { Ok(Box::new(stream.await?) as Box<dyn Stream>) })
}

/// Opens connections.
pub trait Connect: Send + Sync + 'static {
    /// Connects to `host:port`, where `host` is an IP address or a name.
    fn connect(&self, host: &str, port: u16) -> Connecting;

    /// The URL scheme of what its connections speak: `http`, or `https` over TLS.
    fn scheme(&self) -> &'static str {
        "http"
    }
}

/// A shared [`Connect`], as every tier's `run` takes it.
pub type Connector = Arc<dyn Connect>;

/// tokio's TCP, with Nagle's algorithm off (requests are small and latency matters).
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnect;

impl Connect for TcpConnect {
    fn connect(&self, host: &str, port: u16) -> Connecting {
        let host = host.to_owned();
        connecting(async move {
            let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            stream.set_nodelay(true)?;
            Ok(stream)
        })
    }
}

/// The production connector: [`TcpConnect`].
pub fn tcp_connector() -> Connector {
    Arc::new(TcpConnect)
}

/// Adapts a [`Connector`] to what hyper's pooled client calls, with a connect timeout.
#[derive(Clone)]
pub(crate) struct ConnectService {
    connector: Connector,
    timeout: Duration,
}

impl ConnectService {
    pub(crate) fn new(connector: Connector, timeout: Duration) -> Self {
        Self { connector, timeout }
    }
}

impl fmt::Debug for ConnectService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectService")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl tower_service::Service<Uri> for ConnectService {
    type Response = TokioIo<Conn>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Conn>>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let timeout = self.timeout;
        let default_port = if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        };
        let port = uri.port_u16().unwrap_or(default_port);
        // An IPv6 host comes bracketed in a URI, and unbracketed in a socket address.
        let connecting = uri.host().map(|host| {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            self.connector.connect(host, port)
        });
        Box::pin(async move {
            let connecting = connecting
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host in the URL"))?;
            match tokio::time::timeout(timeout, connecting).await {
                Ok(stream) => Ok(TokioIo::new(Conn(stream?))),
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
            }
        })
    }
}

/// One connection a [`Connector`] opened, as hyper's client holds it.
pub(crate) struct Conn(Box<dyn Stream>);

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}
