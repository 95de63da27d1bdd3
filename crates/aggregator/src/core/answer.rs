//! The answers a tier gives alike, whichever tier it is: its metrics, copies of a slot,
//! `POST /sync`, the check of a read's window, and every 200 marked with the replica that
//! gave it (each replica has its own staleness).

use geocount_http::routing::{self, RequestError};
use geocount_model::WindowQuery;
use geocount_model::wire::SlotFreshness;
use geocount_net::{Response, json_response};
use geocount_sync::{answer_slot_copy, parse_copy_query};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::Core;
use crate::error::AggregatorError;
use crate::replica::{HeldCounter, Replica, serve_sync};

/// The header every aggregator answer carries: which replica of its tier answered.
pub const REPLICA_HEADER: &str = "geocount-replica";

/// A 200 answer's body with the replica that answered it.
#[derive(serde::Serialize)]
struct Answered<'a, T> {
    replica: usize,
    #[serde(flatten)]
    body: &'a T,
}

impl Core {
    /// `body` as a 200 JSON answer, saying which replica answered (`"replica": N`): each
    /// replica has its own staleness.
    pub fn answer<T: serde::Serialize>(&self, body: &T) -> Response {
        let replica = self.settings.replica;
        json_response(StatusCode::OK, &Answered { replica, body })
    }

    /// `response` with the [`REPLICA_HEADER`] of this replica.
    pub fn mark(&self, mut response: Response) -> Response {
        response.headers_mut().insert(
            REPLICA_HEADER,
            hyper::header::HeaderValue::from(self.settings.replica),
        );
        response
    }

    /// Prometheus text of its metrics at `now_ms`, in the format `headers` ask for.
    pub fn scrape(&self, now_ms: u64, headers: &hyper::HeaderMap) -> Response {
        let replica = self.replica.read().expect("replica lock");
        self.metrics.scrape(&replica, now_ms, headers)
    }

    /// The OpenAPI document `document` as its answer, rendered for this process's `[auth]`.
    pub fn openapi(&self, document: geocount_http::ApiDoc) -> Response {
        json_response(StatusCode::OK, &document.to_json(&self.access))
    }

    /// A page of the copy of `slot` (`query`: where from, how many), or `unknown` when it
    /// holds no such slot.
    pub fn slot_copy(
        &self,
        slot: String,
        query: Option<&str>,
        unknown: impl FnOnce(String) -> AggregatorError,
    ) -> Result<Response, AggregatorError> {
        let (from, limit) = parse_copy_query(query, self.settings.sync.page_entries)?;
        let copy = (self.replica.read().expect("replica lock")).slot_copy(&slot, from, limit);
        match copy {
            Some(copy) => Ok(answer_slot_copy(&copy)),
            None => Err(unknown(slot)),
        }
    }

    /// `POST /sync` answered as `name`, each page with the `freshness` of its slots.
    pub async fn sync(
        &self,
        request: Request<Incoming>,
        name: &str,
        now_ms: u64,
        freshness: impl FnOnce(&Replica) -> Vec<SlotFreshness>,
    ) -> Result<Response, RequestError> {
        let limit = self.settings.sync.page_entries;
        serve_sync(request, &self.replica, name, limit, now_ms, freshness).await
    }

    /// Refuses a `window` a read of `counter` cannot have: any for a unique counter, and one
    /// longer than the counter's window.
    pub fn check_window(
        &self,
        counter: &HeldCounter<'_>,
        window: Option<&WindowQuery>,
    ) -> Result<(), RequestError> {
        let Some(window) = window else {
            return Ok(());
        };
        if counter.is_unique() {
            return Err(routing::no_window_for_unique());
        }
        let window_seconds = counter.window_seconds(self.settings.default_window_seconds);
        routing::check_window_length(window, window_seconds)
    }
}
