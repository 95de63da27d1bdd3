//! Which tier process a connection comes from: the `geocount:<name>` URI of the client
//! certificate it presented in its TLS handshake, verified against the cluster CA
//! ([`crate::tls`]). The accept loop puts it in every request's extensions ([`PeerProcess`]),
//! and serves such connections from a budget of their own, apart from the clients'.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use x509_parser::extensions::GeneralName;

/// The scheme of the URI that names a process in its certificate (`geocount:<name>`).
const PROCESS_URI_SCHEME: &str = "geocount:";

/// The process a request's connection proved to be, by a client certificate the cluster CA
/// signed: in the extensions of every request [`serve`](crate::serve) hands its handler over
/// such a connection. The name is as the certificate says it; what it may call is the
/// handler's to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerProcess(pub Arc<str>);

/// The process name the certificate `der` carries in a `geocount:<name>` URI subject
/// alternative name: `None` when it has none, or is not a certificate. A certificate with two
/// such URIs names no process.
pub fn certificate_process(der: &[u8]) -> Option<Arc<str>> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    let names = certificate.subject_alternative_name().ok()??;
    let mut processes = names
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::URI(uri) => uri.strip_prefix(PROCESS_URI_SCHEME),
            _ => None,
        });
    let process = processes.next().filter(|name| !name.is_empty())?;
    processes.next().is_none().then(|| Arc::from(process))
}

/// A connection with the process it proved to be, if any.
pub struct Identified<S> {
    inner: S,
    process: Option<Arc<str>>,
}

impl<S> Identified<S> {
    /// `inner`, from `process` if it proved one.
    pub fn new(inner: S, process: Option<Arc<str>>) -> Self {
        Self { inner, process }
    }

    /// The process it proved to be.
    pub fn process(&self) -> Option<Arc<str>> {
        self.process.clone()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Identified<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Identified<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
