//! The launcher's error enum.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use geocount_model::TopologyError;

/// Why the cluster could not start or run. Displays as one line; a process that failed during
/// startup also carries the end of its log ([`ClusterError::log_tail`]).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The topology file could not be read or is inconsistent.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// `--bin-dir` was not given and the running executable's directory is unknown.
    #[error("cannot find the directory of this executable ({0}); pass --bin-dir")]
    BinDir(io::Error),
    /// A binary a member needs is not there.
    #[error("missing binary {}: run `cargo build --release` first (or pass --bin-dir)", path.display())]
    MissingBinary {
        /// Where the binary was looked for.
        path: PathBuf,
    },
    /// A member names something the topology does not have.
    #[error("{name}: {message}")]
    Member {
        /// The member's name.
        name: String,
        /// What is missing.
        message: String,
    },
    /// A member's address cannot be listened on, most often because another cluster holds it.
    #[error("{name}: cannot listen on {address} ({source}); is another cluster running?")]
    Address {
        /// The member's name.
        name: String,
        /// Its address.
        address: SocketAddr,
        /// Why binding failed.
        source: io::Error,
    },
    /// `--fresh` was asked to delete a directory that holds the current directory, or the root.
    #[error("refusing to delete {} for --fresh: it contains the current directory", path.display())]
    UnsafeFresh {
        /// The data directory.
        path: PathBuf,
    },
    /// A file or directory operation failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. `create`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// A process could not be started.
    #[error("cannot start {name} ({}): {source}", binary.display())]
    Spawn {
        /// The member's name.
        name: String,
        /// The binary run.
        binary: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// A process could not be watched (its exit status could not be read).
    #[error("cannot watch {name}: {source}")]
    Watch {
        /// The member's name.
        name: String,
        /// The failure.
        source: io::Error,
    },
    /// `--wan` was given for a topology without a `[wan]` section.
    #[error("{}: --wan needs a [wan] section (global_region, control, [[wan.links]]); see the README", config.display())]
    NoWan {
        /// The topology file.
        config: PathBuf,
    },
    /// WAN mode could not be set up: the emulator's links or a topology copy.
    #[error("WAN mode: {message}")]
    Wan {
        /// What went wrong.
        message: String,
    },
    /// A process exited, or did not answer `/healthz`, before the cluster was up.
    #[error("{name} {reason}; log: {}", log.display())]
    NotHealthy {
        /// The member's name.
        name: String,
        /// What happened, e.g. `exited before it was healthy (exit status: 2)`.
        reason: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        tail: String,
    },
}

impl ClusterError {
    /// The exit code for this error: 2 for a bad topology file (or one without `[wan]` for
    /// `--wan`), 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClusterError::Topology(_) | ClusterError::NoWan { .. } => 2,
            _ => 1,
        }
    }

    /// The last lines of the failed process's log, when the error is about one.
    pub fn log_tail(&self) -> Option<&str> {
        match self {
            ClusterError::NotHealthy { tail, .. } => Some(tail),
            _ => None,
        }
    }
}
