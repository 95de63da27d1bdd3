//! geoctl's error enum. Every error displays as one line; the binary prints it after `geoctl: `
//! and exits 1.

use std::path::PathBuf;

use geocount_model::TopologyError;
use geocount_net::ClientError;

/// Why a geoctl command failed.
#[derive(Debug, thiserror::Error)]
pub enum GeoctlError {
    /// The topology file could not be read or is inconsistent.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A flag's value cannot be sent as asked.
    #[error("{0}")]
    InvalidArgument(String),
    /// No answer: the node could not be reached, the connection broke, or it timed out.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Every shard node of the topology refused the connection.
    #[error("no shard node could be reached (tried {tried}); last error: {last}")]
    NoShardReachable {
        /// How many nodes were tried.
        tried: usize,
        /// The last connection error.
        last: ClientError,
    },
    /// The global aggregator holds the counter in no slot of any datacenter (HTTP 404).
    #[error("counter {id:?}: not found")]
    NotFound {
        /// The counter asked for.
        id: String,
    },
    /// The global aggregator refused the read because datacenters are stale (HTTP 503).
    #[error("{message}; pass --allow-partial for a partial answer, or a larger --max-staleness-ms")]
    Stale {
        /// The aggregator's `error`.
        message: String,
        /// The stale datacenters' names.
        stale_datacenters: Vec<String>,
    },
    /// A node answered with an error status.
    #[error("{url}: {status}: {message}")]
    Status {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The answer's `error`, or its body when it has none.
        message: String,
    },
    /// A node answered 2xx with a body geoctl cannot read.
    #[error("{url}: unexpected answer: {message}")]
    BadAnswer {
        /// The URL asked.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The plot could not be drawn.
    #[error("cannot draw the plot: {0}")]
    Plot(String),
    /// After the load, some counters' global totals did not equal their acknowledged deltas.
    #[error("not exact: {differing} of {counters} counters differ from the acknowledged deltas")]
    NotExact {
        /// Counters whose total differed.
        differing: usize,
        /// Counters checked.
        counters: usize,
    },
    /// The load sent writes but none was acknowledged.
    #[error("none of the {sent} writes sent was acknowledged")]
    NothingAcknowledged {
        /// Writes sent.
        sent: u64,
    },
    /// The global aggregator answered reads 503 (stale) during a scan storm.
    #[error("the global aggregator answered {refused} of the probe reads 503 during the scans")]
    StaleUnderScans {
        /// How many probe reads were answered 503.
        refused: u64,
    },
    /// `geoctl status` found lines `DOWN`.
    #[error("unhealthy: {count} of {lines} lines are DOWN: {}", names.join(", "))]
    Unhealthy {
        /// How many lines are `DOWN`.
        count: usize,
        /// How many lines there are.
        lines: usize,
        /// Their tiers and names.
        names: Vec<String>,
    },
    /// Standard output could not be written (e.g. a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}
