//! The global aggregator's errors, and the one place that maps each to its HTTP status.

use geocount_net::{HttpError, Response, json_response};
use geocount_sync::http::RequestError;
use geocount_sync::{SCAN_RETRY_AFTER_SECS, ScansBusy};
use hyper::StatusCode;

use crate::state::StaleRead;
use crate::trends::{DatacenterTop, DatacenterTrending};

/// Everything the global aggregator refuses.
#[derive(Debug, thiserror::Error)]
pub enum GlobalError {
    /// Refused before reaching this tier's logic: bad path, method, id, query or body.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A counter no slot holds, while no datacenter is stale.
    #[error("counter {0:?} is held by no slot of any datacenter")]
    CounterNotFound(String),
    /// Datacenters staler than the read allows, and no partial answer allowed.
    #[error("{}", .0.error)]
    Stale(Box<StaleRead>),
    /// A `/topk` with datacenters staler than it allows, and no partial answer allowed.
    #[error("{}", .0.error)]
    StaleTop(Box<StaleRead<DatacenterTop>>),
    /// A `/trending` with datacenters staler than it allows, and no partial answer allowed.
    #[error("{}", .0.error)]
    StaleTrending(Box<StaleRead<DatacenterTrending>>),
    /// `GET /trending` for a prefix with no configured threshold (the message names those
    /// that have one).
    #[error("{0}")]
    NoTrendingPrefix(String),
    /// `GET /slots/{slot}/copy` for a slot of no configured datacenter.
    #[error("slot {0:?} is not a slot of any configured datacenter")]
    UnknownSlot(String),
    /// A ranking that scans every counter while the most allowed at once are under way.
    #[error(transparent)]
    ScansBusy(#[from] ScansBusy),
}

impl HttpError for GlobalError {
    fn status(&self) -> StatusCode {
        match self {
            GlobalError::Request(error) => error.status(),
            GlobalError::CounterNotFound(_)
            | GlobalError::NoTrendingPrefix(_)
            | GlobalError::UnknownSlot(_) => StatusCode::NOT_FOUND,
            GlobalError::Stale(_) | GlobalError::StaleTop(_) | GlobalError::StaleTrending(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            GlobalError::ScansBusy(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn retry_after_secs(&self) -> Option<u32> {
        matches!(self, GlobalError::ScansBusy(_)).then_some(SCAN_RETRY_AFTER_SECS)
    }

    /// `{"error": ...}`; a stale read also names the stale datacenters and gives every
    /// datacenter's part.
    fn to_response(&self) -> Response {
        match self {
            GlobalError::Stale(refusal) => json_response(self.status(), refusal),
            GlobalError::StaleTop(refusal) => json_response(self.status(), refusal),
            GlobalError::StaleTrending(refusal) => json_response(self.status(), refusal),
            other => geocount_net::error_answer(other),
        }
    }
}
