//! One host flooding a node with idle connections, and the check that the tiers still reach it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

use crate::{NodeProcess, TestTopology};

/// Up to `count` idle connections to `addr` from 127.0.0.2; a connect not made within
/// `give_up` is left out.
pub async fn from_one_host(addr: SocketAddr, count: usize, give_up: Duration) -> Vec<TcpStream> {
    let mut flood = Vec::new();
    for _ in 0..count {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        if let Ok(Ok(stream)) = tokio::time::timeout(give_up, socket.connect(addr)).await {
            flood.push(stream);
        }
    }
    flood
}

/// Starts USA_0's aggregator (its connections come from 127.0.0.1) and checks that within
/// `within` it has pulled counter `id` at 5 from the flooded node: the running aggregator.
pub async fn still_pulled(topology: &TestTopology, id: &str, within: Duration) -> NodeProcess {
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let body = aggregator
        .api()
        .read_until(within, &format!("/counter/{id}"), |s, b| {
            s == 200 && b["value"] == 5
        })
        .await;
    assert!(body["staleness_ms"].is_u64(), "{body}");
    aggregator
}
