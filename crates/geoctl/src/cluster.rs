//! Where the cluster is: the topology, the global aggregator's address, picking shard nodes, and
//! the helpers every command shares to build URLs and read answers.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use geocount_model::Topology;
use geocount_net::tls::{client_config, tls_connector};
use geocount_net::{Answer, ClientError, HttpClient, tcp_connector};
use hyper::{Method, StatusCode};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use rand::seq::{IndexedRandom, SliceRandom};
use serde::de::DeserializeOwned;

use crate::error::GeoctlError;

/// The bytes a counter id keeps unescaped in a path: letters, digits and `-_.~:` (as the nodes'
/// own clients encode them); every other byte is percent-encoded.
const ID_ESCAPES: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b':');

/// Percent-encodes a counter id for use as one path segment.
pub fn encode_id(id: &str) -> String {
    utf8_percent_encode(id, ID_ESCAPES).to_string()
}

/// `/counter/{id}`, the id percent-encoded.
pub fn counter_path(id: &str) -> String {
    format!("/counter/{}", encode_id(id))
}

/// One shard node of the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardNode {
    /// Its datacenter's name.
    pub datacenter: String,
    /// Its index in the datacenter: it owns slot `DC_<datacenter>_VAL_<index>`.
    pub index: usize,
    /// Where it listens.
    pub address: SocketAddr,
    /// What it speaks: `http`, or `https` in a topology with `[tls]`.
    pub scheme: &'static str,
}

impl ShardNode {
    /// `<scheme>://<address><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.address)
    }
}

/// A loaded topology and an HTTP client to talk to it.
#[derive(Debug, Clone)]
pub struct ClusterClient {
    topology: Topology,
    client: HttpClient,
}

impl ClusterClient {
    /// Reads the topology file `config`; requests give up after `timeout`. With a `[tls]`
    /// section every request goes over TLS and trusts the topology's CA only.
    pub fn load(config: &Path, timeout: Duration) -> Result<Self, GeoctlError> {
        let topology = Topology::load(config)?;
        let connector = match &topology.tls {
            None => tcp_connector(),
            Some(tls) => tls_connector(
                tcp_connector(),
                client_config(&tls.ca).map_err(|e| tls.file_error(config, &e.file, e.message))?,
            ),
        };
        let client = HttpClient::with_connector(timeout, connector);
        Ok(Self::new(topology, client))
    }

    /// A cluster from an already loaded topology.
    pub fn new(topology: Topology, client: HttpClient) -> Self {
        Self { topology, client }
    }

    /// The same cluster, sending `Authorization: Bearer <token>` with every request when a
    /// token is given (a cluster with `[auth]` tokens needs one).
    pub fn with_token(self, token: Option<&str>) -> Result<Self, GeoctlError> {
        let Some(token) = token else {
            return Ok(self);
        };
        let client = self
            .client
            .with_header("authorization", &format!("Bearer {token}"))?;
        Ok(Self { client, ..self })
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The HTTP client (pooled; cheap to clone).
    pub fn client(&self) -> &HttpClient {
        &self.client
    }

    /// `<scheme>://<global aggregator replica 0><path>`.
    pub fn global_url(&self, path: &str) -> String {
        self.client.url(self.topology.global.listen, path)
    }

    /// `GET <path>`, a read of counter `id`, at a global aggregator that holds the counter's
    /// partition: the first such replica, then the next one whenever a replica does not answer
    /// (a read is safe to repeat) or answers 503 (a replica that restarted is stale until it
    /// has heard every datacenter). The URL that answered and its answer; when none answers
    /// better, the last 503, else the last failure.
    pub async fn get_global(&self, id: &str, path: &str) -> Result<(String, Answer), ClientError> {
        let replicas = self.topology.global.replicas_of(self.topology.partitions);
        let holders = (replicas.into_iter())
            .filter(|(_, held)| held.holds(id))
            .map(|(address, _)| address);
        self.get_first(holders, path, &[StatusCode::SERVICE_UNAVAILABLE])
            .await
    }

    /// `GET <path>`, a read any global aggregator replica answers whole (it asks the replicas
    /// holding other partitions for their parts): replica 0 first, then the next one whenever
    /// a replica does not answer, answers 503 (stale) or 429 (its scans are busy; each
    /// replica bounds its own). Answers as [`ClusterClient::get_global`] does.
    pub async fn get_any_global(&self, path: &str) -> Result<(String, Answer), ClientError> {
        let addresses = self.topology.global.addresses();
        self.get_any_aggregator(&addresses, path).await
    }

    /// `GET <path>` at the first of `replicas` (one tier's aggregator replicas, replica 0
    /// first) that answers whole, moving on as [`ClusterClient::get_any_global`] does.
    pub async fn get_any_aggregator(
        &self,
        replicas: &[SocketAddr],
        path: &str,
    ) -> Result<(String, Answer), ClientError> {
        let next_on = [
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::TOO_MANY_REQUESTS,
        ];
        self.get_first(replicas.iter().copied(), path, &next_on)
            .await
    }

    /// `GET <path>` at each of `replicas` in turn until one answers with another status than
    /// `next_on`; else the last such answer, else the last failure.
    async fn get_first(
        &self,
        replicas: impl IntoIterator<Item = SocketAddr>,
        path: &str,
        next_on: &[StatusCode],
    ) -> Result<(String, Answer), ClientError> {
        let mut unavailable = None;
        let mut failure = None;
        for address in replicas {
            let url = self.client.url(address, path);
            match self.client.get(&url).await {
                Ok(answer) if next_on.contains(&answer.status) => {
                    unavailable = Some((url, answer));
                }
                Ok(answer) => return Ok((url, answer)),
                Err(error) => failure = Some(error),
            }
        }
        match (unavailable, failure) {
            (Some(answered), _) => Ok(answered),
            (None, Some(error)) => Err(error),
            (None, None) => unreachable!("every tier has a replica 0"),
        }
    }

    /// Counter `id`'s global total, partial if a datacenter is stale (0 when no datacenter
    /// reported it yet), or why it could not be read.
    pub async fn read_total(&self, id: &str) -> Result<i128, String> {
        /// The one field a total needs from a global reading.
        #[derive(serde::Deserialize)]
        struct ValueOnly {
            value: i128,
        }
        let path = format!("{}?allow_partial=true", counter_path(id));
        let (url, answer) = self
            .get_global(id, &path)
            .await
            .map_err(|e| e.to_string())?;
        match answer.status.as_u16() {
            200 => serde_json::from_slice::<ValueOnly>(&answer.body)
                .map(|v| v.value)
                .map_err(|e| format!("{url}: unexpected answer: {e}")),
            // Never reported by any datacenter (yet): nothing of it counted.
            404 => Ok(0),
            status => Err(format!("{url}: {status}: {}", error_message(&answer))),
        }
    }

    /// What the cluster's processes speak: `http`, or `https` with `[tls]`.
    fn scheme(&self) -> &'static str {
        if self.topology.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Every shard node, in topology order.
    pub fn shards(&self) -> Vec<ShardNode> {
        self.topology
            .datacenters
            .iter()
            .flat_map(|dc| {
                dc.shards
                    .iter()
                    .enumerate()
                    .map(|(index, &address)| ShardNode {
                        datacenter: dc.name.clone(),
                        index,
                        address,
                        scheme: self.scheme(),
                    })
            })
            .collect()
    }

    /// A shard node of a datacenter, both chosen at random (each datacenter equally likely,
    /// whatever its size).
    pub fn random_shard(&self) -> ShardNode {
        let mut rng = rand::rng();
        // The topology is validated: at least one datacenter, each with at least one shard.
        let dc = self
            .topology
            .datacenters
            .choose(&mut rng)
            .expect("a topology has datacenters");
        let index = rand::random_range(0..dc.shards.len());
        ShardNode {
            datacenter: dc.name.clone(),
            index,
            address: dc.shards[index],
            scheme: self.scheme(),
        }
    }

    /// [`ClusterClient::random_shard`] first, then every other shard node in random order.
    pub fn shards_to_try(&self) -> Vec<ShardNode> {
        let first = self.random_shard();
        let mut rest: Vec<ShardNode> = self.shards().into_iter().filter(|s| *s != first).collect();
        rest.shuffle(&mut rand::rng());
        let mut order = vec![first];
        order.append(&mut rest);
        order
    }

    /// Sends a request to a random shard node; when a node cannot be connected to (so the
    /// request certainly never arrived), to the next one. The node that answered, the URL and
    /// its answer.
    pub async fn send_to_any_shard(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<(ShardNode, String, Answer), GeoctlError> {
        let order = self.shards_to_try();
        let tried = order.len();
        let mut last = None;
        for shard in order {
            let url = shard.url(path);
            match (self.client)
                .send(method.clone(), &url, headers, body.clone())
                .await
            {
                Ok(answer) => return Ok((shard, url, answer)),
                Err(error) if error.is_connect() => last = Some(error),
                Err(error) => return Err(error.into()),
            }
        }
        Err(GeoctlError::NoShardReachable {
            tried,
            last: last.expect("at least one shard node was tried"),
        })
    }
}

/// The `op` and the positive `delta` a signed change is sent as.
pub fn write_op(delta: i64) -> Result<(&'static str, i64), GeoctlError> {
    match delta {
        0 => Err(GeoctlError::InvalidArgument(
            "--delta must not be 0".to_owned(),
        )),
        d if d > 0 => Ok(("INCREMENT", d)),
        d => d.checked_neg().map(|m| ("DECREMENT", m)).ok_or_else(|| {
            GeoctlError::InvalidArgument(format!(
                "--delta {d} is out of range: a decrement is at most {}",
                i64::MAX
            ))
        }),
    }
}

/// The message of an error answer: its JSON `error`, else its body as text.
pub fn error_message(answer: &Answer) -> String {
    match answer.json().get("error").and_then(|e| e.as_str()) {
        Some(message) => message.to_owned(),
        None => {
            let text = String::from_utf8_lossy(&answer.body);
            let text = text.trim();
            if text.is_empty() {
                "(empty body)".to_owned()
            } else {
                text.to_owned()
            }
        }
    }
}

/// The error for an answer whose status was not the expected one.
pub fn status_error(url: &str, answer: &Answer) -> GeoctlError {
    GeoctlError::Status {
        url: url.to_owned(),
        status: answer.status.as_u16(),
        message: error_message(answer),
    }
}

/// Writes `answer`'s body to `out` as it came, ending in a newline: what `--json` prints.
pub fn write_raw(out: &mut dyn std::io::Write, answer: &Answer) -> Result<(), GeoctlError> {
    out.write_all(&answer.body)?;
    if !answer.body.ends_with(b"\n") {
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The body of a successful answer parsed as `T`.
pub fn parse_body<T: DeserializeOwned>(url: &str, answer: &Answer) -> Result<T, GeoctlError> {
    serde_json::from_slice(&answer.body).map_err(|e| GeoctlError::BadAnswer {
        url: url.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two datacenters: USA_0 of two shard nodes, ASIA_0 of one.
    const TOPOLOGY: &str = geocount_model::fixtures::TWO_DATACENTERS;

    /// A cluster of [`TOPOLOGY`].
    pub(crate) fn cluster() -> ClusterClient {
        let topology = Topology::from_toml("test.toml", TOPOLOGY).unwrap();
        ClusterClient::new(topology, HttpClient::new(Duration::from_secs(1)))
    }

    /// Shard node `k` of [`cluster`] in topology order: 0 and 1 in USA_0, 2 in ASIA_0.
    pub(crate) fn shard(k: usize) -> ShardNode {
        cluster().shards().swap_remove(k)
    }

    #[test]
    fn ids_are_encoded_like_the_nodes_clients_do() {
        assert_eq!(encode_id("page-views_1.a~b:c"), "page-views_1.a~b:c");
        assert_eq!(encode_id("a b/c?d%"), "a%20b%2Fc%3Fd%25");
        assert_eq!(encode_id("é"), "%C3%A9");
        assert_eq!(counter_path("x/y"), "/counter/x%2Fy");
    }

    #[tokio::test]
    async fn shards_cover_the_topology_and_random_picks_are_real_nodes() {
        let cluster = cluster();
        let all = cluster.shards();
        assert_eq!(all.len(), 3);
        assert_eq!(all[1].datacenter, "USA_0");
        assert_eq!(all[1].index, 1);
        assert_eq!(all[2].address, "127.0.0.1:7201".parse().unwrap());
        for _ in 0..50 {
            assert!(all.contains(&cluster.random_shard()));
            let mut order = cluster.shards_to_try();
            order.sort_by_key(|s| s.address);
            assert_eq!(order, all);
        }
        assert_eq!(cluster.global_url("/x"), "http://127.0.0.1:7000/x");
        assert_eq!(all[0].url("/healthz"), "http://127.0.0.1:7101/healthz");
    }

    #[tokio::test]
    async fn an_unreachable_cluster_is_an_error() {
        // Port 1 on loopback: nothing listens there, so every connection is refused.
        let topology = Topology::from_toml(
            "test.toml",
            &TOPOLOGY
                .replace("127.0.0.1:7101", "127.0.0.1:1")
                .replace("127.0.0.1:7102", "127.0.0.2:1")
                .replace("127.0.0.1:7201", "127.0.0.3:1"),
        )
        .unwrap();
        let cluster = ClusterClient::new(topology, HttpClient::new(Duration::from_secs(2)));
        let error = cluster
            .send_to_any_shard(Method::GET, "/healthz", &[], Bytes::new())
            .await
            .unwrap_err();
        // Every node was tried when the client reports refusals as connection errors; a client
        // that reports them as transport errors stops at the first node, which is also safe.
        match &error {
            GeoctlError::NoShardReachable { tried, .. } => assert_eq!(*tried, 3),
            GeoctlError::Client(client) => assert!(client.to_string().contains(":1/healthz")),
            other => panic!("unexpected error: {other}"),
        }
    }

    #[test]
    fn error_messages_prefer_the_json_error() {
        let answer = |body: &'static str| Answer {
            status: hyper::StatusCode::BAD_REQUEST,
            headers: hyper::HeaderMap::new(),
            body: Bytes::from_static(body.as_bytes()),
        };
        assert_eq!(error_message(&answer(r#"{"error":"nope"}"#)), "nope");
        assert_eq!(error_message(&answer(" plain text\n")), "plain text");
        assert_eq!(error_message(&answer("")), "(empty body)");
        let error = status_error("http://x/y", &answer(r#"{"error":"bad"}"#));
        assert_eq!(error.to_string(), "http://x/y: 400: bad");
    }
}
