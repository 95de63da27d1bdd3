//! HTTP plumbing shared by every geocount tier, so that each tier's crate holds only its own
//! routes and logic.
//!
//! - [`listener`]: the seam of incoming connections ([`Listener`]): tokio's TCP listener in
//!   production, a simulated one under a simulation.
//! - [`server`]: the accept loop with graceful shutdown and limits on connections and slow
//!   clients ([`serve`], [`ServeLimits`]), and the per-address cap other listeners share
//!   ([`PeerConnections`]).
//! - [`client`]: a pooled HTTP/1.1 client for tools, tests and calls between tiers ([`HttpClient`]).
//! - [`connect`]: the seam of outgoing connections ([`Connect`]): tokio's TCP in production, a
//!   simulated network under a simulation.
//! - [`body`]: reading a request body under a size and a time limit ([`read_body`]).
//! - [`response`]: JSON answers and the `{"error": ...}` shape every error takes ([`HttpError`]).
//! - [`tls`]: TLS between tiers: a [`tls::TlsListener`] around any listener, a TLS connector
//!   around any connector, certificates and keys from PEM files.
//! - [`identity`]: the tier process a connection proved to be by its client certificate
//!   ([`PeerProcess`]).
//! - [`prefer`]: the `Prefer` request header (RFC 7240): does a write ask for the short answer
//!   ([`prefers_minimal_return`]).
//! - [`idle`]: what a tier's thread does when it runs out of work: hands freed memory back to
//!   the system, at most once a second ([`idle::thread_parked`]).
//! - [`ports`]: free loopback ports for tools and tests ([`free_loopback_address`]).
//! - [`binary`]: what every tier's binary does around its server: logging, exit codes, huge
//!   pages on or off, the listener, stopping on SIGTERM or Ctrl-C ([`run_tier`]).

pub mod binary;
pub mod body;
pub mod client;
pub mod connect;
pub mod identity;
pub mod idle;
pub mod listener;
pub mod ports;
pub mod prefer;
pub mod response;
pub mod server;
pub mod tls;

pub use binary::{ProcessSetup, run_tier};
pub use body::{BodyError, BodyReadTimeout, DEFAULT_BODY_READ_TIMEOUT, read_body};
pub use client::{Answer, ClientError, DEFAULT_MAX_RESPONSE_BYTES, HttpClient};
pub use connect::{Connect, Connecting, Connector, Stream, TcpConnect, connecting, tcp_connector};
pub use identity::PeerProcess;
pub use listener::Listener;
pub use ports::free_loopback_address;
pub use prefer::prefers_minimal_return;
pub use response::{
    HttpError, Response, bytes_response, error_answer, error_response, json_response,
};
pub use server::{Handler, Peer, PeerConnections, PeerSlot, ServeLimits, serve, serve_with_limits};
