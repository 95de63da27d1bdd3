//! TLS between tiers (rustls on the `ring` provider): a [`TlsListener`] that wraps any
//! [`Listener`] and completes each handshake off the accept path, a [`Connect`] that wraps any
//! connector and verifies the server against a CA, and the loading of certificates, keys and
//! CAs from PEM files.
//!
//! Both sides authenticate between tiers: every tier serves with its own certificate, and
//! presents the same certificate as a client when it calls another tier; both are verified
//! against the one cluster CA. The server name checked is the host of the address dialled (an
//! IP address or a name), so a certificate must name the addresses it is reached at (`127.0.0.1`
//! and `localhost` for a cluster on one machine). A client certificate is asked for but not
//! required: clients of the API present none, and the routes between tiers refuse a request
//! whose connection proved no process ([`crate::identity`]).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{NoClientAuth, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::task::JoinSet;
use tokio_rustls::{TlsAcceptor, TlsConnector, server};

use crate::connect::{Connect, Connecting, Connector, Stream, connecting};
use crate::identity::{Identified, certificate_process};
use crate::listener::Listener;

/// How long an accepted connection may take to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most handshakes a [`TlsListener`] runs at once; a connection past it is closed at once.
const MAX_HANDSHAKES: usize = 1_024;

/// A TLS file that could not be used. Displays as one line: `<file>: <what is wrong>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", file.display())]
pub struct TlsError {
    /// The file at fault.
    pub file: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl TlsError {
    fn new(file: &Path, message: impl fmt::Display) -> Self {
        Self {
            file: file.to_owned(),
            message: message.to_string(),
        }
    }
}

/// The crypto provider of every TLS configuration here, named rather than taken from the
/// process default, so nothing depends on which rustls features other crates turn on.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(file: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(file).map_err(|e| TlsError::new(file, format!("cannot read: {e}")))
}

/// Every certificate of the PEM file `file` (at least one).
fn certificates(file: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_slice_iter(&read(file)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(file, format!("bad PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(TlsError::new(file, "no certificate in it"));
    }
    Ok(certificates)
}

/// A client configuration that trusts the certificates of the PEM file `ca`, and only them.
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    client_config_trusting(certificates(ca)?)
        .map_err(|e| TlsError::new(ca, format!("not a usable CA certificate: {e}")))
}

/// A client configuration that trusts the CA certificates `roots`, and only them.
pub fn client_config_trusting(
    roots: Vec<CertificateDer<'static>>,
) -> Result<Arc<ClientConfig>, rustls::Error> {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add(root)?;
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The private key of the PEM file `key`.
fn private_key(key: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::new(key, "no private key in it"),
        e => TlsError::new(key, format!("bad PEM: {e}")),
    })
}

/// The CA certificates of the PEM file `ca` as a root store.
fn roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for root in certificates(ca)? {
        store
            .add(root)
            .map_err(|e| TlsError::new(ca, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(store)
}

/// A server configuration presenting the certificate chain of the PEM file `cert` with the
/// private key of the PEM file `key`; clients need no certificate.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    serving(cert, key, Arc::new(NoClientAuth))
}

/// [`server_config`], also asking each client for a certificate and verifying the one it
/// presents against the CA of the PEM file `ca` (a client presenting none is let in: it is no
/// tier process).
pub fn tier_server_config(
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> Result<Arc<ServerConfig>, TlsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::new(ca, format!("cannot verify clients with it: {e}")))?;
    serving(cert, key, verifier)
}

/// A server configuration presenting `cert` with `key`, checking clients with `clients`.
fn serving(
    cert: &Path,
    key: &Path,
    clients: Arc<dyn ClientCertVerifier>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(cert, e))?
        .with_client_cert_verifier(clients)
        .with_single_cert(certificates(cert)?, private_key(key)?)
        .map_err(|e| TlsError::new(key, format!("does not go with {}: {e}", cert.display())))?;
    Ok(Arc::new(config))
}

/// A client configuration that trusts the CA of the PEM file `ca` and presents the
/// certificate chain of `cert` with the key of `key` to the servers that ask for one.
pub fn tier_client_config(
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> Result<Arc<ClientConfig>, TlsError> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(ca, e))?
        .with_root_certificates(roots(ca)?)
        .with_client_auth_cert(certificates(cert)?, private_key(key)?)
        .map_err(|e| TlsError::new(key, format!("does not go with {}: {e}", cert.display())))?;
    Ok(Arc::new(config))
}

/// The TLS of one tier process: the certificate it serves with and presents when it calls
/// other tiers, and the CA it verifies them against both ways.
#[derive(Clone)]
pub struct TierTls {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    process: Option<Arc<str>>,
    expected: Arc<Expected>,
}

/// The process each address of the cluster is served by: a server there must present its
/// certificate.
pub type Expected = HashMap<SocketAddr, Arc<str>>;

impl fmt::Debug for TierTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TierTls").finish_non_exhaustive()
    }
}

impl TierTls {
    /// Loads the CA (`ca`) and the process's certificate chain and key (`cert`, `key`).
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<Self, TlsError> {
        Ok(Self {
            server: tier_server_config(ca, cert, key)?,
            client: tier_client_config(ca, cert, key)?,
            process: certificate_process(&certificates(cert)?[0]),
            expected: Arc::default(),
        })
    }

    /// The same, expecting the server at each address of `expected` to present the certificate
    /// of the process it names there: a call to one of them that meets another process's
    /// certificate fails like a broken connection, before anything is sent.
    pub fn expecting(mut self, expected: Expected) -> Self {
        self.expected = Arc::new(expected);
        self
    }

    /// The process its certificate names (its `geocount:<name>` URI), if it names one.
    pub fn process(&self) -> Option<&str> {
        self.process.as_deref()
    }

    /// `inner`'s connections, each after a TLS handshake as the server.
    pub fn listener<L: Listener>(&self, inner: L) -> TlsListener<L> {
        TlsListener::new(inner, self.server.clone())
    }

    /// `inner`'s connections, each after a TLS handshake verifying the server (and, at an
    /// address it expects a process at, that the server is that process).
    pub fn connector(&self, inner: Connector) -> Connector {
        Arc::new(TlsConnect {
            inner,
            tls: TlsConnector::from(self.client.clone()),
            expected: self.expected.clone(),
        })
    }
}

/// What a tier's binary serves on and calls other tiers through: `listener` and `connector`
/// as they are without TLS, wrapped in it with.
pub fn secure<L: Listener>(
    listener: L,
    connector: Connector,
    tls: Option<&TierTls>,
) -> (MaybeTlsListener<L>, Connector) {
    match tls {
        Some(tls) => (
            MaybeTlsListener::Tls(tls.listener(listener)),
            tls.connector(connector),
        ),
        None => (MaybeTlsListener::Plain(listener), connector),
    }
}

/// A listener whose connections are TLS or not, chosen at start-up.
pub enum MaybeTlsListener<L: Listener> {
    /// Plain TCP (no `[tls]`).
    Plain(L),
    /// TLS.
    Tls(TlsListener<L>),
}

impl<L: Listener> Listener for MaybeTlsListener<L> {
    type Io = Identified<Box<dyn Stream>>;

    async fn accept(&mut self) -> io::Result<(Self::Io, SocketAddr)> {
        match self {
            MaybeTlsListener::Plain(inner) => {
                let (io, peer) = inner.accept().await?;
                let process = L::peer_process(&io);
                Ok((Identified::new(Box::new(io), process), peer))
            }
            MaybeTlsListener::Tls(inner) => {
                let (io, peer) = inner.accept().await?;
                let process = TlsListener::<L>::peer_process(&io);
                Ok((Identified::new(Box::new(io), process), peer))
            }
        }
    }

    fn peer_process(io: &Self::Io) -> Option<Arc<str>> {
        io.process()
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            MaybeTlsListener::Plain(inner) => inner.local_addr(),
            MaybeTlsListener::Tls(inner) => inner.local_addr(),
        }
    }
}

/// A handshake that ended: its peer, and the connection unless it failed (already logged).
type Handshake<Io> = (SocketAddr, Option<server::TlsStream<Io>>);

/// The most handshakes one IP address may have under way at once: more from it are closed at
/// once, so one host opening sockets and never finishing a handshake cannot hold every
/// handshake place while the tiers' connections wait.
const MAX_HANDSHAKES_PER_PEER: usize = 256;

/// The TLS side of a [`Listener`]: each accepted connection does its handshake in a task of its
/// own (up to [`HANDSHAKE_TIMEOUT`]), so a slow or silent client never holds up the others; a
/// failed handshake is logged and its connection dropped. Accepting never waits for handshakes:
/// past [`MAX_HANDSHAKES`] under way, or [`MAX_HANDSHAKES_PER_PEER`] from one address, a new
/// connection is closed at once.
pub struct TlsListener<L: Listener> {
    inner: L,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Handshake<L::Io>>,
    per_peer: HashMap<IpAddr, usize>,
}

impl<L: Listener> TlsListener<L> {
    /// Serves TLS with `config` on `inner`'s connections.
    pub fn new(inner: L, config: Arc<ServerConfig>) -> Self {
        Self {
            inner,
            acceptor: TlsAcceptor::from(config),
            handshakes: JoinSet::new(),
            per_peer: HashMap::new(),
        }
    }

    /// Starts the handshake of a connection from `peer`, or closes it when there is no room.
    fn start(&mut self, io: L::Io, peer: SocketAddr) {
        let pending = self.per_peer.entry(peer.ip()).or_default();
        if *pending >= MAX_HANDSHAKES_PER_PEER || self.handshakes.len() >= MAX_HANDSHAKES {
            tracing::debug!(%peer, "too many TLS handshakes under way; closing the new connection");
            return;
        }
        *pending += 1;
        let acceptor = self.acceptor.clone();
        self.handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
                Ok(Ok(stream)) => (peer, Some(stream)),
                Ok(Err(error)) => {
                    tracing::warn!(%peer, %error, "TLS handshake failed");
                    (peer, None)
                }
                Err(_) => {
                    tracing::warn!(%peer, "TLS handshake timed out");
                    (peer, None)
                }
            }
        });
    }

    fn ended(&mut self, peer: SocketAddr) {
        if let Some(pending) = self.per_peer.get_mut(&peer.ip()) {
            *pending -= 1;
            if *pending == 0 {
                self.per_peer.remove(&peer.ip());
            }
        }
    }
}

impl<L: Listener> Listener for TlsListener<L> {
    type Io = server::TlsStream<L::Io>;

    async fn accept(&mut self) -> io::Result<(Self::Io, SocketAddr)> {
        loop {
            tokio::select! {
                accepted = self.inner.accept() => {
                    let (io, peer) = accepted?;
                    self.start(io, peer);
                }
                Some(ended) = self.handshakes.join_next() => {
                    if let Ok((peer, stream)) = ended {
                        self.ended(peer);
                        if let Some(stream) = stream {
                            return Ok((stream, peer));
                        }
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The process the client certificate names, when the client presented one (rustls has
    /// verified it against the CA by then).
    fn peer_process(io: &Self::Io) -> Option<Arc<str>> {
        let (_, connection) = io.get_ref();
        certificate_process(connection.peer_certificates()?.first()?)
    }
}

/// A [`Connector`] that opens `inner`'s connections and then speaks TLS on them, verifying the
/// server's certificate with `config` against the host dialled.
pub fn tls_connector(inner: Connector, config: Arc<ClientConfig>) -> Connector {
    Arc::new(TlsConnect {
        inner,
        tls: TlsConnector::from(config),
        expected: Arc::default(),
    })
}

/// See [`tls_connector`] and [`TierTls::connector`].
struct TlsConnect {
    inner: Connector,
    tls: TlsConnector,
    expected: Arc<Expected>,
}

impl Connect for TlsConnect {
    fn connect(&self, host: &str, port: u16) -> Connecting {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host}: not a server name: {e}"),
            )
        });
        let stream = self.inner.connect(host, port);
        let tls = self.tls.clone();
        let address = format!("{host}:{port}").parse::<SocketAddr>().ok();
        let expected = address.and_then(|a| self.expected.get(&a).cloned());
        let host = host.to_owned();
        connecting(async move {
            let name = name?;
            let stream = stream.await?;
            let stream = tls.connect(name, stream).await?;
            if let Some(expected) = expected {
                let (_, connection) = stream.get_ref();
                let found = connection
                    .peer_certificates()
                    .and_then(|chain| certificate_process(chain.first()?));
                if found.as_deref() != Some(&*expected) {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{host}:{port} is process {expected}'s, but its certificate names {}",
                            found.as_deref().unwrap_or("no process")
                        ),
                    ));
                }
            }
            Ok(stream)
        })
    }

    fn scheme(&self) -> &'static str {
        "https"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_files_are_named() {
        let dir = std::env::temp_dir().join(format!("geocount-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let error = client_config(&missing).unwrap_err();
        assert_eq!(error.file, missing);
        assert!(error.to_string().contains("cannot read"), "{error}");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = client_config(&empty).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("{}: no certificate in it", empty.display())
        );
        let error = server_config(&empty, &missing).unwrap_err();
        assert_eq!(error.file, empty);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
