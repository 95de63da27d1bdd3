//! What the status routes ask of the tier below: JSON or text from many processes at once,
//! each with a short timeout, so a status answer never waits on a process that hangs. The
//! caller's `Authorization` header is passed on: the routes asked need the read right the
//! caller already proved here.
//!
//! A burst of callers costs the tier below one gathering per [`SHARED_FOR`]: callers asking
//! the same path with the same credentials join the gathering in flight, or share its answers
//! for [`SHARED_FOR`] after it ends; and at most [`MAX_CALLS_IN_FLIGHT`] calls of the process
//! are in flight at once, whatever is asked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use geocount_net::{Connector, HttpClient};
use hyper::Request;
use hyper::body::Incoming;
use prometheus_client::metrics::counter::Counter;
use serde_json::Value;

use crate::error::AggregatorError;

/// How long the datacenter tier's status routes wait for a shard node.
pub const SHARD_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long the global tier's status routes wait for a datacenter aggregator: longer than
/// [`SHARD_TIMEOUT`], so that a hung shard node shows in its datacenter's answer rather than
/// hiding the whole datacenter.
pub const AGGREGATOR_TIMEOUT: Duration = Duration::from_millis(2000);

/// The longest answer a status route takes from one process below.
const FANOUT_MAX_BYTES: usize = 4 << 20;

/// How long the answers of one gathering are shared after it ends.
pub const SHARED_FOR: Duration = Duration::from_secs(1);

/// The most calls to the processes below in flight at once, over every fan-out of the
/// process: enough for every process of a large datacenter, few enough that many distinct
/// asks (rights of many counters) cannot flood the tier below.
pub const MAX_CALLS_IN_FLIGHT: usize = 32;

/// The answers of one gathering, in the order of its addresses.
pub type Gathered = Arc<Vec<Reply>>;

/// One gathering: joined while in flight, then shared until [`SHARED_FOR`] has passed.
#[derive(Default)]
struct Flight(tokio::sync::OnceCell<(Instant, Gathered)>);

impl Flight {
    /// Whether a caller at `now` may still take this flight's answers.
    fn is_current(&self, now: Instant) -> bool {
        (self.0.get()).is_none_or(|(ended, _)| now.duration_since(*ended) < SHARED_FOR)
    }
}

/// What a gathering is shared by: the path asked and the credentials passed on.
type FlightKey = (String, Option<String>);

/// How the status routes ask the tier below: gatherings shared by every caller asking the same
/// thing, calls bounded in flight, each given up after a timeout and counted
/// (`fanout_calls_total`). A path's addresses are the same for every caller of a tier.
pub struct Fanout {
    client: HttpClient,
    calls: Counter,
    permits: Arc<tokio::sync::Semaphore>,
    flights: Mutex<HashMap<FlightKey, Arc<Flight>>>,
}

impl Fanout {
    /// Asks through `connector`, each request given up after `timeout`, counting calls in
    /// `calls`.
    pub fn new(connector: Connector, timeout: Duration, calls: Counter) -> Self {
        let client = HttpClient::with_connector(timeout, connector)
            .with_max_response_bytes(FANOUT_MAX_BYTES);
        Self {
            client,
            calls,
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_CALLS_IN_FLIGHT)),
            flights: Mutex::new(HashMap::new()),
        }
    }

    /// `GET path` at every address of `addresses`, with `authorization`; the answers in the
    /// order of `addresses`, shared with every caller asking the same within [`SHARED_FOR`].
    pub async fn get_all(
        &self,
        addresses: impl IntoIterator<Item = String>,
        path: &str,
        authorization: Option<&str>,
    ) -> Gathered {
        let flight = self.flight((path.to_owned(), authorization.map(str::to_owned)));
        let gather = || async {
            let calls = (&self.calls, &self.permits);
            let answers = get_all(&self.client, calls, addresses, path, authorization).await;
            (Instant::now(), Arc::new(answers))
        };
        // A caller that goes away mid-flight leaves the gathering to the next one waiting.
        let (_, answers) = flight.0.get_or_init(gather).await;
        answers.clone()
    }

    /// The current flight of `key`, or a new one; flights past their time, and abandoned ones,
    /// go.
    fn flight(&self, key: FlightKey) -> Arc<Flight> {
        let now = Instant::now();
        let mut flights = self.flights.lock().expect("fan-out flights lock");
        flights.retain(|_, flight| match flight.0.initialized() {
            true => flight.is_current(now),
            false => Arc::strong_count(flight) > 1,
        });
        flights.entry(key).or_default().clone()
    }
}

/// The caller's `Authorization` header, to pass on.
pub fn authorization(request: &Request<Incoming>) -> Option<String> {
    let value = request.headers().get(hyper::header::AUTHORIZATION)?;
    value.to_str().ok().map(str::to_owned)
}

/// One answer from a process below: its status and body, or why there is none.
#[derive(Debug, Clone)]
pub enum Reply {
    /// It answered: the status and the body.
    Answered(u16, bytes::Bytes),
    /// It did not answer in time, or could not be reached.
    Failed(String),
}

impl Reply {
    /// The body as JSON when it answered 2xx with JSON.
    pub fn ok_json(&self) -> Option<Value> {
        match self {
            Reply::Answered(status, body) if (200..300).contains(status) => {
                serde_json::from_slice(body).ok()
            }
            _ => None,
        }
    }

    /// The body as JSON whatever the status (a 503 health answer says why).
    pub fn json(&self) -> Option<Value> {
        match self {
            Reply::Answered(_, body) => serde_json::from_slice(body).ok(),
            Reply::Failed(_) => None,
        }
    }

    /// The status it answered with.
    pub fn status(&self) -> Option<u16> {
        match self {
            Reply::Answered(status, _) => Some(*status),
            Reply::Failed(_) => None,
        }
    }

    /// Why it gave no usable answer: the failure, or the error of a refusal.
    pub fn error(&self) -> Option<String> {
        match self {
            Reply::Failed(why) => Some(why.clone()),
            Reply::Answered(status, _) if (200..300).contains(status) => None,
            Reply::Answered(status, body) => {
                let why = serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_owned));
                Some(why.unwrap_or_else(|| format!("answered {status}")))
            }
        }
    }
}

/// `GET path` at every address of `addresses`, with `authorization`, each call counted and
/// holding one of `permits` while in flight; the answers in the order of `addresses`.
async fn get_all(
    client: &HttpClient,
    (calls, permits): (&Counter, &Arc<tokio::sync::Semaphore>),
    addresses: impl IntoIterator<Item = String>,
    path: &str,
    authorization: Option<&str>,
) -> Vec<Reply> {
    let asks: Vec<_> = addresses
        .into_iter()
        .map(|address| {
            let client = client.clone();
            let url = client.url(&address, path);
            let authorization = authorization.map(str::to_owned);
            let (calls, permits) = (calls.clone(), permits.clone());
            tokio::spawn(async move {
                let Ok(_permit) = permits.acquire_owned().await else {
                    return Reply::Failed("the fan-out is closed".to_owned());
                };
                calls.inc();
                let headers: Vec<(&str, &str)> = authorization
                    .iter()
                    .map(|value| ("authorization", value.as_str()))
                    .collect();
                match client
                    .send(hyper::Method::GET, &url, &headers, bytes::Bytes::new())
                    .await
                {
                    Ok(answer) => Reply::Answered(answer.status.as_u16(), answer.body),
                    Err(error) => Reply::Failed(error.to_string()),
                }
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(asks.len());
    for ask in asks {
        answers.push(
            ask.await
                .unwrap_or_else(|e| Reply::Failed(format!("the request failed: {e}"))),
        );
    }
    answers
}

/// Refuses the answers to a rights request unless one holds rights (answered 200): a 404
/// when every one answered 404 (`held_by`'s slots do not hold counter `id` bounded), else a
/// 503 naming why they failed.
pub fn any_rights(
    answers: &[Reply],
    id: &str,
    held_by: impl FnOnce() -> String,
) -> Result<(), AggregatorError> {
    if answers.iter().any(|a| a.status() == Some(200)) {
        return Ok(());
    }
    if answers.iter().all(|a| a.status() == Some(404)) {
        return Err(AggregatorError::NotBounded {
            id: id.to_owned(),
            held_by: held_by(),
        });
    }
    let why: Vec<String> = answers.iter().filter_map(Reply::error).collect();
    Err(AggregatorError::BelowUnreachable(why.join("; ")))
}

/// `id` as one path segment: every byte but the unreserved ones percent-encoded.
pub fn path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The value of the Prometheus sample `name` (no labels) in `text`, if it is there.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.split(' ').next()?.parse().ok())?
        })
}

/// The sum of every sample of `name` in `text`, whatever its labels.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let bare = key.split('{').next().unwrap_or(key);
        if bare == name
            && let Ok(value) = value.parse::<f64>()
        {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_in_flight_are_capped_across_callers() {
        // A listener that never answers: every call stays in flight until it times out.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = silent.local_addr().unwrap().to_string();
        let calls = Counter::default();
        let fanout = Fanout::new(
            geocount_net::tcp_connector(),
            Duration::from_secs(30),
            calls.clone(),
        );
        let addresses = vec![address; MAX_CALLS_IN_FLIGHT + 8];
        let ask = || fanout.get_all(addresses.clone(), "/healthz", None);
        let gathering = async {
            tokio::join!(ask(), ask(), ask());
        };
        let watch = async {
            while calls.get() < MAX_CALLS_IN_FLIGHT as u64 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        tokio::select! {
            () = gathering => panic!("a silent process answered"),
            () = watch => {}
        }
        assert_eq!(calls.get(), MAX_CALLS_IN_FLIGHT as u64);
        assert_eq!(fanout.permits.available_permits(), 0);
    }

    #[test]
    fn ids_become_one_path_segment() {
        assert_eq!(path_segment("tweet:1 likes/x"), "tweet%3A1%20likes%2Fx");
        assert_eq!(path_segment("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(path_segment("é"), "%C3%A9");
    }

    #[test]
    fn metrics_are_read_by_name() {
        let text = "# HELP x\nx_total 12\nx_total_other 3\ny{source=\"a\"} 2\ny{source=\"b\"} 5\n";
        assert_eq!(metric(text, "x_total"), Some(12.0));
        assert_eq!(metric(text, "z"), None);
        assert_eq!(metric_sum(text, "y"), Some(7.0));
        assert_eq!(metric_sum(text, "z"), None);
    }
}
