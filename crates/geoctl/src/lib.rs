//! geoctl: a command line for a geocount cluster, for people and for measurements.
//!
//! - [`cluster`]: where the cluster is: the topology file, the global aggregator's address,
//!   picking shard nodes at random ([`ClusterClient`]), encoding ids in paths, reading answers.
//! - [`cmd`]: one module per subcommand:
//!   - [`cmd::get`]: read a counter from the global aggregator and summarize it per datacenter;
//!   - [`cmd::sum`]: the sum over the counters with an id prefix at the global aggregator, per
//!     datacenter;
//!   - [`cmd::create`]: `POST /counter` through a random shard node;
//!   - [`cmd::incr`]: one write through a random shard node;
//!   - [`cmd::lag`]: measure how long a write takes to show at the global aggregator;
//!   - [`cmd::lifecycle`]: delete or reset a counter, or set its expiry;
//!   - [`cmd::load`]: drive writes at the cluster and measure throughput, latency, lag under
//!     load, and that the global totals are exact;
//!   - [`cmd::storm`]: flood a node with idle connections, or the global aggregator with
//!     scans, as the fault campaign does;
//!   - [`cmd::top`]: the top K or trending counters, world or one datacenter, as a table
//!     refreshed in place;
//!   - [`cmd::status`]: the health of every datacenter and process, one line each.
//! - [`error`]: this crate's error enum ([`GeoctlError`]).
//! - [`load`]: the parts of `geoctl load` (workload, pacing, sending, tallies, probes,
//!   exactness, report, plot, progress bar).
//! - [`visibility`]: one write watched until the global aggregator shows it, and the lags of
//!   many counted (`lag` and the load's probes).
//!
//! [`run`] loads the topology and runs one [`Command`]; the `geoctl` binary only parses flags
//! and calls it.

pub mod cluster;
pub mod cmd;
pub mod error;
pub mod load;
pub mod visibility;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

pub use cluster::ClusterClient;
pub use error::GeoctlError;

/// How long `get`, `sum`, `create` and `incr` wait for an answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One subcommand with its options.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Read a counter from the global aggregator.
    Get(cmd::get::GetOptions),
    /// Read a counter's history from the global aggregator.
    History(cmd::history::HistoryOptions),
    /// Sum the counters with an id prefix at the global aggregator.
    Sum(cmd::sum::SumOptions),
    /// Create a counter.
    Create(cmd::create::CreateOptions),
    /// Write to a counter once.
    Incr(cmd::incr::IncrOptions),
    /// Measure visibility lag.
    Lag(cmd::lag::LagOptions),
    /// Delete or reset a counter, or set its expiry.
    Life(cmd::lifecycle::LifecycleOptions),
    /// Drive writes at the cluster and measure it.
    Load(cmd::load::LoadOptions),
    /// Flood a node with connections or scans.
    Storm(cmd::storm::StormOptions),
    /// The top K or trending counters as a table.
    Top(cmd::top::TopOptions),
    /// The health of every datacenter and process.
    Status(cmd::status::StatusOptions),
}

/// Loads the topology file `config` and runs `command`, printing to `out`; every request
/// carries `token` as a bearer token when one is given.
pub async fn run(
    config: &Path,
    token: Option<&str>,
    command: &Command,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let cluster = ClusterClient::load(config, REQUEST_TIMEOUT)?.with_token(token)?;
    match command {
        Command::Get(options) => cmd::get::run(&cluster, options, out).await,
        Command::History(options) => cmd::history::run(&cluster, options, out).await,
        Command::Sum(options) => cmd::sum::run(&cluster, options, out).await,
        Command::Create(options) => cmd::create::run(&cluster, options, out).await,
        Command::Incr(options) => cmd::incr::run(&cluster, options, out).await,
        Command::Lag(options) => cmd::lag::run(&cluster, options, out).await.map(drop),
        Command::Life(options) => cmd::lifecycle::run(&cluster, options, out).await,
        Command::Load(options) => cmd::load::run(&cluster, options, out).await.map(drop),
        Command::Storm(options) => cmd::storm::run(&cluster, options, out).await,
        Command::Top(options) => cmd::top::run(&cluster, options, out).await,
        Command::Status(options) => cmd::status::run(&cluster, options, out).await,
    }?;
    out.flush()?;
    Ok(())
}
