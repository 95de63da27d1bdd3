//! Every refusal of either tier, and the one place that maps each to its HTTP status.

use crate::replica::{SCAN_RETRY_AFTER_SECS, ScansBusy};
use geocount_http::routing::RequestError;
use geocount_net::{HttpError, Response, bytes_response, json_response};
use hyper::StatusCode;

use crate::lifecycle::Presence;
use crate::parts::{DatacenterRanking, DatacenterSum, StaleRead};

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
    /// A counter deleted, or whose expiry has passed.
    #[error("counter {id:?} {}", gone_as(*.expired_at_ms))]
    CounterGone {
        /// The counter asked for.
        id: String,
        /// When it expired (unix ms); `None`: it was deleted.
        expired_at_ms: Option<u64>,
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
    /// A global `/topk` or `/trending` with datacenters staler than it allows, and no partial
    /// answer allowed.
    #[error("{}", .0.error)]
    StaleRanking(Box<StaleRead<DatacenterRanking>>),
    /// A global `/aggregate` with datacenters staler than it allows, and no partial answer
    /// allowed.
    #[error("{}", .0.error)]
    StaleSum(Box<StaleRead<DatacenterSum>>),
    /// A read of a counter in partitions this replica does not hold: 307 to one that does.
    #[error("counter {id:?} is in a partition this replica does not hold: read it at {location}")]
    Elsewhere {
        /// The counter asked for.
        id: String,
        /// The same read at a replica that holds it.
        location: String,
    },
    /// Another replica refused its part of a ranking or a sum (a stale read's 503, a busy
    /// 429): its answer, passed on.
    #[error("a replica holding other partitions refused its part of the answer ({status})")]
    PartRefused {
        /// Its status.
        status: StatusCode,
        /// Its JSON body.
        body: bytes::Bytes,
    },
    /// This replica's own ranking could not be encoded to merge the others' parts into (a
    /// total beyond what JSON numbers carry).
    #[error("cannot encode this replica's part of the ranking: {0}")]
    Encode(#[from] serde_json::Error),
    /// Another replica answered its part of a sum with a body that is not one.
    #[error("a replica holding other partitions answered its part of the sum unreadably: {0}")]
    BadPart(serde_json::Error),
    /// `GET /counter/{id}/rights` for a counter that no slot asked holds as a bounded counter.
    #[error("counter {id:?} is not a bounded counter held by any slot of {held_by}")]
    NotBounded {
        /// The counter asked for.
        id: String,
        /// Whose slots: `datacenter USA_0` or `any datacenter`.
        held_by: String,
    },
    /// A status route whose processes below all failed to answer.
    #[error("no process asked answered: {0}")]
    BelowUnreachable(String),
    /// A status route with a query key (it takes none).
    #[error("no query keys are taken here, got {0:?}")]
    NoQuery(String),
    /// No replica holding a group of partitions answered its part of a ranking or a sum.
    #[error("no replica holding partitions {partitions} answered its part of the answer: {last}")]
    PartitionsUnreachable {
        /// The partitions.
        partitions: String,
        /// The last replica's failure.
        last: String,
    },
}

impl AggregatorError {
    /// The 404 of counter `id`, which does not exist (`presence`): never heard of by
    /// `held_by`'s slots, deleted or expired.
    pub fn not_found(id: String, presence: Presence, held_by: &'static str) -> Self {
        match presence {
            Presence::Deleted => AggregatorError::CounterGone {
                id,
                expired_at_ms: None,
            },
            Presence::Expired(at_ms) => AggregatorError::CounterGone {
                id,
                expired_at_ms: Some(at_ms),
            },
            Presence::Exists | Presence::Unknown => {
                AggregatorError::CounterNotFound { id, held_by }
            }
        }
    }
}

/// How a counter that is gone went.
fn gone_as(expired_at_ms: Option<u64>) -> String {
    match expired_at_ms {
        Some(at_ms) => format!("expired at {at_ms} (unix ms)"),
        None => "is deleted".to_owned(),
    }
}

impl HttpError for AggregatorError {
    fn status(&self) -> StatusCode {
        match self {
            AggregatorError::Request(error) => error.status(),
            AggregatorError::CounterNotFound { .. }
            | AggregatorError::CounterGone { .. }
            | AggregatorError::UnknownSlot { .. }
            | AggregatorError::NotBounded { .. }
            | AggregatorError::NoTrendingPrefix(_) => StatusCode::NOT_FOUND,
            AggregatorError::NoQuery(_) => StatusCode::BAD_REQUEST,
            AggregatorError::Stale(_)
            | AggregatorError::StaleRanking(_)
            | AggregatorError::StaleSum(_)
            | AggregatorError::BelowUnreachable(_)
            | AggregatorError::PartitionsUnreachable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            AggregatorError::Elsewhere { .. } => StatusCode::TEMPORARY_REDIRECT,
            AggregatorError::PartRefused { status, .. } => *status,
            AggregatorError::ScansBusy(_) => StatusCode::TOO_MANY_REQUESTS,
            AggregatorError::Encode(_) => StatusCode::INTERNAL_SERVER_ERROR,
            AggregatorError::BadPart(_) => StatusCode::BAD_GATEWAY,
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
            AggregatorError::StaleRanking(refusal) => json_response(self.status(), refusal),
            AggregatorError::StaleSum(refusal) => json_response(self.status(), refusal),
            AggregatorError::Elsewhere { location, .. } => {
                let mut response = geocount_net::error_answer(self);
                if let Ok(value) = hyper::header::HeaderValue::from_str(location) {
                    response
                        .headers_mut()
                        .insert(hyper::header::LOCATION, value);
                }
                response
            }
            AggregatorError::PartRefused { status, body } => {
                bytes_response(*status, "application/json", body.clone())
            }
            other => geocount_net::error_answer(other),
        }
    }
}
