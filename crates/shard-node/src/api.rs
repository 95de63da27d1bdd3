//! The shard node's HTTP API: routes, request parsing, and answers.
//!
//! | route | does |
//! |---|---|
//! | `POST /counter` | create a counter (`{"id"?, "numberOfShards"?, "windowSeconds"?, "type"?}`) |
//! | `GET /counter/{id}` | this slot's `{id, slot, value, version}` |
//! | `PATCH /counter/{id}/write?op=INCREMENT\|DECREMENT` | write `{"delta"?: n > 0, "timestamp"?}` |
//! | `POST /counters/{id}/increment` | write `{"delta"?: n ≠ 0, "timestamp"?}` |
//! | `POST /batch` | many writes, postcard [`BatchRequest`] → [`BatchResponse`] |
//! | `GET /healthz`, `GET /metrics` | health, Prometheus text |
//!
//! Writes may carry an `Idempotency-Key` header. Every refusal is `{"error": ...}` with a 4xx.

use std::sync::Arc;

use bytes::Bytes;
use geocount_model::counter_id::validate as validate_counter_id;
use geocount_model::wire::{BatchRequest, BatchResponse, EntryOutcome, POSTCARD_CONTENT_TYPE};
use geocount_model::{CounterDescription, CounterId, CounterType, ModelError, SlotState};
use geocount_net::{HttpError, Response, bytes_response, json_response, read_body};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use percent_encoding::percent_decode_str;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::commit::{Command, WriteRequest, WriteResults};
use crate::error::ShardError;
use crate::idempotency::MAX_IDEMPOTENCY_KEY_BYTES;
use crate::server::NodeState;

/// The most slots a counter may be spread over.
pub const MAX_SHARDS_PER_COUNTER: u32 = 1024;
/// The longest rolling window a counter may have, in seconds.
pub const MAX_WINDOW_SECONDS: u32 = 86_400;

/// The endpoints, as matched by the router.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    /// `/counter`
    Create,
    /// `/counter/{id}`
    Counter,
    /// `/counter/{id}/write`
    Write,
    /// `/counters/{id}/increment`
    Increment,
    /// `/batch`
    Batch,
    /// `/healthz`
    Health,
    /// `/metrics`
    Metrics,
}

/// Builds the router once per node.
pub fn router() -> matchit::Router<Route> {
    let mut router = matchit::Router::new();
    let routes = [
        ("/counter", Route::Create),
        ("/counter/{id}", Route::Counter),
        ("/counter/{id}/write", Route::Write),
        ("/counters/{id}/increment", Route::Increment),
        ("/batch", Route::Batch),
        ("/healthz", Route::Health),
        ("/metrics", Route::Metrics),
    ];
    for (path, route) in routes {
        router.insert(path, route).expect("routes do not conflict");
    }
    router
}

/// Answers one request; every error becomes its JSON answer here.
pub async fn handle(state: Arc<NodeState>, request: Request<Incoming>) -> Response {
    match dispatch(&state, request).await {
        Ok(response) => response,
        Err(error) => {
            if error.status().is_server_error() {
                tracing::warn!(%error, "request failed");
            }
            error.to_response()
        }
    }
}

async fn dispatch(state: &NodeState, request: Request<Incoming>) -> Result<Response, ShardError> {
    let path = request.uri().path();
    let matched = state
        .router
        .at(path)
        .map_err(|_| ShardError::NoRoute(path.to_owned()))?;
    let route = *matched.value;
    let id = matched
        .params
        .get("id")
        .map(decode_counter_id)
        .transpose()?;
    let method = request.method().clone();
    match (route, method, id) {
        (Route::Create, Method::POST, _) => create(state, request).await,
        (Route::Counter, Method::GET, Some(id)) => read(state, &id),
        (Route::Write, Method::PATCH, Some(id)) => write(state, id, request).await,
        (Route::Increment, Method::POST, Some(id)) => increment(state, id, request).await,
        (Route::Batch, Method::POST, _) => batch(state, request).await,
        (Route::Health, Method::GET, _) => Ok(health(state)),
        (Route::Metrics, Method::GET, _) => Ok(bytes_response(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            state.metrics.encode().into(),
        )),
        (_, method, _) => Err(ShardError::MethodNotAllowed {
            method: method.to_string(),
            path: request.uri().path().to_owned(),
        }),
    }
}

fn decode_counter_id(raw: &str) -> Result<CounterId, ShardError> {
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| ModelError::InvalidCounterId("it is not valid UTF-8"))?;
    Ok(CounterId::new(decoded)?)
}

/// Parses an optional JSON body: empty means every field takes its default.
fn json_body<T: DeserializeOwned + Default>(bytes: &Bytes) -> Result<T, ShardError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ShardError::BadRequest(format!("malformed JSON body: {e}")))
}

fn idempotency_key(request: &Request<Incoming>) -> Result<Option<Box<str>>, ShardError> {
    let Some(value) = request.headers().get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .map_err(|_| ShardError::BadRequest("Idempotency-Key must be visible ASCII".into()))?;
    check_idempotency_key(key)?;
    Ok(Some(key.into()))
}

fn check_idempotency_key(key: &str) -> Result<(), ShardError> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(ShardError::BadRequest(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
        )));
    }
    Ok(())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateBody {
    id: Option<String>,
    number_of_shards: Option<u32>,
    window_seconds: Option<u32>,
    #[serde(rename = "type")]
    counter_type: Option<CounterType>,
}

async fn create(state: &NodeState, request: Request<Incoming>) -> Result<Response, ShardError> {
    let body: CreateBody = json_body(&read_body(request, state.settings.max_body_bytes).await?)?;
    let id = match body.id {
        Some(id) => CounterId::new(id)?,
        None => CounterId::new(format!(
            "c-{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        ))?,
    };
    let number_of_shards = body
        .number_of_shards
        .unwrap_or(state.settings.default_number_of_shards);
    if !(1..=MAX_SHARDS_PER_COUNTER).contains(&number_of_shards) {
        return Err(ShardError::BadRequest(format!(
            "numberOfShards must be 1 to {MAX_SHARDS_PER_COUNTER}, got {number_of_shards}"
        )));
    }
    let window_seconds = body
        .window_seconds
        .unwrap_or(state.settings.default_window_seconds);
    if !(1..=MAX_WINDOW_SECONDS).contains(&window_seconds) {
        return Err(ShardError::BadRequest(format!(
            "windowSeconds must be 1 to {MAX_WINDOW_SECONDS}, got {window_seconds}"
        )));
    }
    let description = CounterDescription {
        id,
        counter_type: body.counter_type.unwrap_or_default(),
        number_of_shards,
        window_seconds,
        created_at_ms: state.clock.now_unix_ms(),
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    state.send(Command::Create { description, reply }).await?;
    let created = answer.await.map_err(|_| state.stopped())??;
    Ok(json_response(StatusCode::CREATED, &created))
}

/// The answer to a read or a write: this slot's share of the counter.
#[derive(Debug, Serialize)]
struct SlotAnswer<'a> {
    id: &'a str,
    slot: &'a str,
    value: i64,
    version: u64,
}

fn slot_answer(state: &NodeState, id: &CounterId, slot: SlotState) -> Response {
    json_response(
        StatusCode::OK,
        &SlotAnswer {
            id: id.as_str(),
            slot: &state.slot_name,
            value: slot.value,
            version: slot.version,
        },
    )
}

fn read(state: &NodeState, id: &CounterId) -> Result<Response, ShardError> {
    let slot = state
        .table
        .read()
        .expect("slot table lock")
        .get(id.as_str())
        .ok_or_else(|| ShardError::NotFound(id.to_string()))?;
    Ok(slot_answer(state, id, slot))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteBody {
    delta: Option<i64>,
    timestamp: Option<u64>,
}

async fn write(
    state: &NodeState,
    id: CounterId,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    let query = request.uri().query().unwrap_or("");
    let op = form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "op")
        .map(|(_, value)| value.into_owned())
        .ok_or_else(|| {
            ShardError::BadRequest("missing query parameter op=INCREMENT|DECREMENT".into())
        })?;
    let sign = match op.as_str() {
        "INCREMENT" => 1,
        "DECREMENT" => -1,
        other => {
            return Err(ShardError::BadRequest(format!(
                "op must be INCREMENT or DECREMENT, got {other:?}"
            )));
        }
    };
    let key = idempotency_key(&request)?;
    let body: WriteBody = json_body(&read_body(request, state.settings.max_body_bytes).await?)?;
    let delta = body.delta.unwrap_or(1);
    if delta <= 0 {
        return Err(ModelError::NonPositiveDelta(delta).into());
    }
    let timestamp_secs = body
        .timestamp
        .unwrap_or_else(|| state.clock.now_unix_secs());
    write_one(state, id, sign * delta, key, timestamp_secs).await
}

async fn increment(
    state: &NodeState,
    id: CounterId,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    let key = idempotency_key(&request)?;
    let body: WriteBody = json_body(&read_body(request, state.settings.max_body_bytes).await?)?;
    let delta = body.delta.unwrap_or(1);
    if delta == 0 {
        return Err(ShardError::BadRequest("delta must not be 0".into()));
    }
    let timestamp_secs = body
        .timestamp
        .unwrap_or_else(|| state.clock.now_unix_secs());
    write_one(state, id, delta, key, timestamp_secs).await
}

async fn write_one(
    state: &NodeState,
    id: CounterId,
    delta: i64,
    idempotency_key: Option<Box<str>>,
    timestamp_secs: u64,
) -> Result<Response, ShardError> {
    let request = WriteRequest {
        id,
        delta,
        idempotency_key,
        timestamp_secs,
    };
    let id = request.id.clone();
    let mut results = state.submit(vec![request]).await?;
    let slot = results.pop().ok_or_else(|| state.stopped())??;
    Ok(slot_answer(state, &id, slot))
}

async fn batch(state: &NodeState, request: Request<Incoming>) -> Result<Response, ShardError> {
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let (batch, rest): (BatchRequest, _) = postcard::take_from_bytes(&body)
        .map_err(|e| ShardError::BadRequest(format!("malformed postcard batch: {e}")))?;
    if !rest.is_empty() {
        return Err(ShardError::BadRequest(format!(
            "malformed postcard batch: {} trailing bytes",
            rest.len()
        )));
    }
    let limit = state.settings.max_batch_entries;
    if batch.entries.len() > limit {
        return Err(ShardError::TooManyEntries {
            entries: batch.entries.len(),
            limit,
        });
    }
    state
        .metrics
        .batch_entries
        .observe(batch.entries.len() as f64);
    let now_secs = state.clock.now_unix_secs();
    let mut outcomes: Vec<Option<EntryOutcome>> = vec![None; batch.entries.len()];
    let mut writes = Vec::with_capacity(batch.entries.len());
    let mut positions = Vec::with_capacity(batch.entries.len());
    for (position, entry) in batch.entries.iter().enumerate() {
        let checked = (|| {
            validate_counter_id(entry.id)?;
            if entry.delta == 0 {
                return Err(ShardError::BadRequest("delta must not be 0".into()));
            }
            if let Some(key) = entry.idempotency_key {
                check_idempotency_key(key)?;
            }
            Ok(WriteRequest {
                id: CounterId::new(entry.id)?,
                delta: entry.delta,
                idempotency_key: entry.idempotency_key.map(Into::into),
                timestamp_secs: entry.timestamp.unwrap_or(now_secs),
            })
        })();
        match checked {
            Ok(write) => {
                writes.push(write);
                positions.push(position);
            }
            Err(error) => outcomes[position] = Some(refused(&error)),
        }
    }
    if !writes.is_empty() {
        let results = state.submit(writes).await?;
        for (position, result) in positions.into_iter().zip(results) {
            outcomes[position] = Some(match result {
                Ok(slot) => EntryOutcome::Applied {
                    value: slot.value,
                    version: slot.version,
                },
                Err(error) => refused(&error),
            });
        }
    }
    let response = BatchResponse {
        slot: state.slot_name.clone(),
        outcomes: outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| refused(&state.stopped())))
            .collect(),
    };
    let bytes = postcard::to_allocvec(&response)
        .map_err(|e| ShardError::Storage(format!("cannot encode the batch answer: {e}")))?;
    Ok(bytes_response(
        StatusCode::OK,
        POSTCARD_CONTENT_TYPE,
        bytes.into(),
    ))
}

fn refused(error: &ShardError) -> EntryOutcome {
    EntryOutcome::Refused {
        status: error.status().as_u16(),
        error: error.to_string(),
    }
}

fn health(state: &NodeState) -> Response {
    #[derive(Serialize)]
    struct Health<'a> {
        status: &'a str,
        slot: &'a str,
        counters: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    }
    let counters = state.table.read().expect("slot table lock").len();
    let error = state.health.storage_error();
    let (status, word) = match error {
        None => (StatusCode::OK, "ok"),
        Some(_) => (StatusCode::SERVICE_UNAVAILABLE, "storage failing"),
    };
    json_response(
        status,
        &Health {
            status: word,
            slot: &state.slot_name,
            counters,
            error,
        },
    )
}

impl NodeState {
    async fn send(&self, command: Command) -> Result<(), ShardError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| self.stopped())
    }

    async fn submit(&self, writes: Vec<WriteRequest>) -> Result<WriteResults, ShardError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.send(Command::Write { writes, reply }).await?;
        answer.await.map_err(|_| self.stopped())
    }

    fn stopped(&self) -> ShardError {
        ShardError::Unavailable("the node is shutting down".into())
    }
}
