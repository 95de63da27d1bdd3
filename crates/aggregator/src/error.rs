//! Every refusal of either tier, and the one place that maps each to its HTTP status.

use geocount_http::routing::RequestError;
use geocount_net::{HttpError, Response, json_response};
use geocount_sync::{SCAN_RETRY_AFTER_SECS, ScansBusy};
use hyper::StatusCode;

use crate::global::parts::{DatacenterTop, DatacenterTrending, StaleRead};

/// Everything an aggregator refuses.
#[derive(Debug, thiserror::Error)]
pub enum AggregatorError {
    /// Refused ahead of the tier's logic: bad path, method, id, query or body.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A counter no slot holds (at the global tier: while no datacenter is stale).
    #[error("counter {id:?} is held by no slot of {held_by}")]
    CounterNotFound {
        /// The counter asked for.
        id: String,
        /// Whose slots: `this datacenter` or `any datacenter`.
        held_by: &'static str,
    },
    /// `GET /slots/{slot}/copy` for a slot the tier does not hold.
    #[error("slot {slot:?} is not a slot of {held_by}")]
    UnknownSlot {
        /// The slot asked for.
        slot: String,
        /// Whose slots: `datacenter USA_0` or `any configured datacenter`.
        held_by: String,
    },
    /// `GET /trending` for a prefix with no configured threshold (the message names those
    /// that have one).
    #[error("{0}")]
    NoTrendingPrefix(String),
    /// A ranking that scans every counter while the most allowed at once are under way.
    #[error(transparent)]
    ScansBusy(#[from] ScansBusy),
    /// A global read with datacenters staler than it allows, and no partial answer allowed.
    #[error("{}", .0.error)]
    Stale(Box<StaleRead>),
    /// A global `/topk` with datacenters staler than it allows, and no partial answer allowed.
    #[error("{}", .0.error)]
    StaleTop(Box<StaleRead<DatacenterTop>>),
    /// A global `/trending` with datacenters staler than it allows, and no partial answer
    /// allowed.
    #[error("{}", .0.error)]
    StaleTrending(Box<StaleRead<DatacenterTrending>>),
}

impl HttpError for AggregatorError {
    fn status(&self) -> StatusCode {
        match self {
            AggregatorError::Request(error) => error.status(),
            AggregatorError::CounterNotFound { .. }
            | AggregatorError::UnknownSlot { .. }
            | AggregatorError::NoTrendingPrefix(_) => StatusCode::NOT_FOUND,
            AggregatorError::Stale(_)
            | AggregatorError::StaleTop(_)
            | AggregatorError::StaleTrending(_) => StatusCode::SERVICE_UNAVAILABLE,
            AggregatorError::ScansBusy(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn retry_after_secs(&self) -> Option<u32> {
        matches!(self, AggregatorError::ScansBusy(_)).then_some(SCAN_RETRY_AFTER_SECS)
    }

    /// `{"error": ...}`; a stale read also names the stale datacenters and gives every
    /// datacenter's part.
    fn to_response(&self) -> Response {
        match self {
            AggregatorError::Stale(refusal) => json_response(self.status(), refusal),
            AggregatorError::StaleTop(refusal) => json_response(self.status(), refusal),
            AggregatorError::StaleTrending(refusal) => json_response(self.status(), refusal),
            other => geocount_net::error_answer(other),
        }
    }
}
