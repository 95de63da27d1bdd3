//! Where the cluster is: the topology, the global aggregator's address, picking shard nodes, and
//! the helpers every command shares to build URLs and read answers.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use geocount_model::Topology;
use geocount_net::tls::{client_config, tls_connector};
use geocount_net::{Answer, HttpClient, tcp_connector};
use hyper::Method;
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
pub struct Cluster {
    topology: Topology,
    client: HttpClient,
}

impl Cluster {
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

    /// `<scheme>://<global aggregator><path>`.
    pub fn global_url(&self, path: &str) -> String {
        self.client.url(self.topology.global.listen, path)
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

    /// [`Cluster::random_shard`] first, then every other shard node in random order.
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
    const TOPOLOGY: &str = r#"
[global]
listen = "127.0.0.1:7000"

[[datacenters]]
name = "USA_0"
aggregator = "127.0.0.1:7100"
shards = ["127.0.0.1:7101", "127.0.0.1:7102"]

[[datacenters]]
name = "ASIA_0"
aggregator = "127.0.0.1:7200"
shards = ["127.0.0.1:7201"]
"#;

    /// A cluster of [`TOPOLOGY`].
    pub(crate) fn cluster() -> Cluster {
        let topology = Topology::from_toml("test.toml", TOPOLOGY).unwrap();
        Cluster::new(topology, HttpClient::new(Duration::from_secs(1)))
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
        let cluster = Cluster::new(topology, HttpClient::new(Duration::from_secs(2)));
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
