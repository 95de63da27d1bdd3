//! The global aggregator's errors, and the one place that maps each to its HTTP status.

use geocount_net::{HttpError, Response, json_response};
use geocount_sync::http::RequestError;
use hyper::StatusCode;

use crate::state::StaleRead;

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
}

impl HttpError for GlobalError {
    fn status(&self) -> StatusCode {
        match self {
            GlobalError::Request(error) => error.status(),
            GlobalError::CounterNotFound(_) => StatusCode::NOT_FOUND,
            GlobalError::Stale(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// `{"error": ...}`; a stale read also names the stale datacenters and gives every
    /// datacenter's part.
    fn to_response(&self) -> Response {
        match self {
            GlobalError::Stale(refusal) => json_response(self.status(), refusal),
            other => geocount_net::error_response(other.status(), &other.to_string()),
        }
    }
}
