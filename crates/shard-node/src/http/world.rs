//! `GET /counter/{id}/world`: a counter's world value as this node answers it
//! ([`crate::read::world`]), the value Redis `GET` and `PFCOUNT` answer.

use geocount_model::CounterId;
use geocount_model::unique::STANDARD_ERROR;
use geocount_net::{Response, json_response};
use hyper::StatusCode;
use serde::Serialize;

use crate::error::ShardError;
use crate::node::NodeState;
use crate::read::world::WorldValue;

/// The answer: the world value, and how stale its other datacenters' parts may be.
#[derive(Debug, Serialize)]
struct WorldAnswer<'a> {
    id: &'a str,
    value: i128,
    /// A unique counter's estimate's relative standard error.
    #[serde(skip_serializing_if = "Option::is_none")]
    standard_error: Option<f64>,
    /// The age of the other datacenters' parts at most (milliseconds): the cached answer's age
    /// plus the staleness the global aggregator reported; this datacenter's part is current.
    staleness_ms: u64,
}

/// Counter `id`'s world value: 404 when no live counter has the id, 503 when the other
/// datacenters' parts are refused as stale or the global tier cannot be reached.
pub(super) async fn answer(state: &NodeState, id: CounterId) -> Result<Response, ShardError> {
    let reading = state.world.read(std::slice::from_ref(&id)).await;
    let reading = reading.into_iter().next().expect("one answer per id")?;
    let Some(reading) = reading else {
        return Err(ShardError::NotFound(id.to_string()));
    };
    let (value, standard_error) = match reading.value {
        WorldValue::Sum(value) => (value, None),
        WorldValue::Unique(count) => (i128::from(count), Some(STANDARD_ERROR)),
    };
    Ok(json_response(
        StatusCode::OK,
        &WorldAnswer {
            id: id.as_str(),
            value,
            standard_error,
            staleness_ms: reading.staleness_ms,
        },
    ))
}
