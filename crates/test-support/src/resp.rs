//! A shard node's Redis port spoken one command at a time, for tests that need no Redis
//! client: a connection (plain or TLS as the topology says) and a command's one-line reply.

use std::time::Duration;

use geocount_net::{Connector, Stream, tcp_connector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{TestTopology, tls};

/// A connection to the RESP listener of shard `slot` of datacenter `dc` (a topology made with
/// [`TestTopology::with_resp`]).
pub async fn connect(topology: &TestTopology, dc: &str, slot: usize) -> Box<dyn Stream> {
    let addr = topology.resp_addr(dc, slot);
    let connector: Connector = match topology.topology.tls {
        Some(_) => tls::test_ca().connector(),
        None => tcp_connector(),
    };
    connector
        .connect(&addr.ip().to_string(), addr.port())
        .await
        .expect("connect to the RESP listener")
}

/// Sends one RESP command on `stream` and reads its one-line reply (an integer or an error).
pub async fn line(stream: &mut Box<dyn Stream>, args: &[&str]) -> String {
    let mut frame = format!("*{}\r\n", args.len());
    for arg in args {
        frame.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(frame.as_bytes()).await.expect("send");
    let mut line = Vec::new();
    while !line.ends_with(b"\r\n") {
        let mut byte = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut byte))
            .await
            .expect("a reply within 5 s")
            .expect("a reply");
        line.push(byte[0]);
    }
    String::from_utf8_lossy(&line).trim_end().to_owned()
}
