//! Helpers shared by geocount's tests. Every end-to-end test starts the real binaries:
//!
//! - [`ports`]: free loopback addresses, never handed out twice in one test process.
//! - [`topology`]: [`TestTopology`], a topology file on fresh ports in a temporary directory.
//! - [`cluster`]: [`TestCluster`], every process of a [`TestTopology`] started and kept running
//!   for one test.
//! - [`process`]: [`NodeProcess`], a running binary that is killed when dropped (so a failing
//!   test leaves no process behind), with kill -9, SIGTERM, SIGSTOP and SIGCONT; it runs on the
//!   launcher's supervisor ([`geocount_cluster::process`]); and a binary run to its exit
//!   ([`process::run_to_exit`]), or to its refusal of a configuration ([`process::config_error`]).
//! - [`api`]: [`Api`], a client for the nodes' HTTP API and the batched postcard path.
//! - [`access`]: the tokens and cluster secret of the access-control tests.
//! - [`openapi`]: the requests a tier's OpenAPI document describes, one per operation.
//! - [`flood`]: one host's idle connections flooding a node, and the tiers still reaching it;
//!   a connector whose connections come from that host ([`flood::OtherHost`]).
//! - [`resp`]: a shard node's Redis port, one command and its one-line reply at a time.
//! - [`tls`]: a test CA issuing every test process a certificate, and TLS clients trusting it
//!   (`E2E_TLS=1` runs the end-to-end tests over TLS).
//! - [`wait`]: [`eventually`], polling a condition until it holds or a deadline passes.

pub mod access;
pub mod api;
pub mod cluster;
pub mod flood;
pub mod openapi;
pub mod ports;
pub mod process;
pub mod resp;
pub mod tls;
pub mod topology;
pub mod wait;

pub use api::Api;
pub use cluster::TestCluster;
pub use hyper::Method;
pub use process::NodeProcess;
pub use topology::{Aggregation, TestTopology};
pub use wait::eventually;
