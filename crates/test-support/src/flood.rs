//! One host (127.0.0.2) flooding a node with idle connections, the check that the tiers still
//! reach it, and a connector opening connections from that host.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use geocount_net::{Connect, Connecting, connecting};
use tokio::net::{TcpSocket, TcpStream};

use crate::{NodeProcess, TestTopology};

/// A TCP connection to `addr` from 127.0.0.2: another host, as far as the node can tell.
async fn from_other_host(addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from(([127, 0, 0, 2], 0)))?;
    socket.connect(addr).await
}

/// Up to `count` idle connections to `addr` from 127.0.0.2; a connect not made within
/// `give_up` is left out.
pub async fn from_one_host(addr: SocketAddr, count: usize, give_up: Duration) -> Vec<TcpStream> {
    let mut flood = Vec::new();
    for _ in 0..count {
        if let Ok(Ok(stream)) = tokio::time::timeout(give_up, from_other_host(addr)).await {
            flood.push(stream);
        }
    }
    flood
}

/// Opens its connections from 127.0.0.2, for a connector (TLS over it, say) to speak on.
#[derive(Debug, Clone, Copy, Default)]
pub struct OtherHost;

impl Connect for OtherHost {
    fn connect(&self, host: &str, port: u16) -> Connecting {
        let addr = format!("{host}:{port}").parse::<SocketAddr>();
        connecting(async move {
            let addr = addr.map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            from_other_host(addr).await
        })
    }
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
