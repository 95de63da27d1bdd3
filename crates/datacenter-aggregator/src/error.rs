//! The datacenter aggregator's errors, and the one place that maps each to its HTTP status.

use geocount_net::HttpError;
use geocount_sync::http::RequestError;
use geocount_sync::{SCAN_RETRY_AFTER_SECS, ScansBusy};
use hyper::StatusCode;

/// Everything a datacenter aggregator refuses.
#[derive(Debug, thiserror::Error)]
pub enum AggregatorError {
    /// Refused before reaching this tier's logic: bad path, method, id or body.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A counter no slot of this datacenter holds.
    #[error("counter {0:?} is held by no slot of this datacenter")]
    CounterNotFound(String),
    /// A slot that is not one of this datacenter's.
    #[error("slot {slot:?} is not a slot of datacenter {datacenter}")]
    UnknownSlot {
        /// The slot asked for.
        slot: String,
        /// This datacenter.
        datacenter: String,
    },
    /// `GET /trending` for a prefix with no configured threshold (the message names those
    /// that have one).
    #[error("{0}")]
    NoTrendingPrefix(String),
    /// A ranking that scans every counter while the most allowed at once are under way.
    #[error(transparent)]
    ScansBusy(#[from] ScansBusy),
}

impl HttpError for AggregatorError {
    fn status(&self) -> StatusCode {
        match self {
            AggregatorError::Request(error) => error.status(),
            AggregatorError::CounterNotFound(_)
            | AggregatorError::UnknownSlot { .. }
            | AggregatorError::NoTrendingPrefix(_) => StatusCode::NOT_FOUND,
            AggregatorError::ScansBusy(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn retry_after_secs(&self) -> Option<u32> {
        matches!(self, AggregatorError::ScansBusy(_)).then_some(SCAN_RETRY_AFTER_SECS)
    }
}
