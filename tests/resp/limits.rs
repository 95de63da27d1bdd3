//! What keeps the RESP listener from being exhausted (docs/api.md, "Redis protocol at a shard
//! node", "Limits"): the bytes one connection may have queued, connections per address, the
//! idle timeout, and the cost of a `CONFIG GET` pattern.

use std::sync::Arc;
use std::time::{Duration, Instant};

use geocount_test_support::flood::OtherHost;
use geocount_test_support::{TestCluster, TestTopology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::tools::{RespNode, ping};
use super::{answering, one_node, pipelined};

/// The resident memory of process `pid` in bytes, from `/proc/<pid>/status`.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

/// A RESP frame of `args`.
fn frame(args: &[&[u8]]) -> Vec<u8> {
    let mut bytes = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        bytes.extend(format!("${}\r\n", arg.len()).into_bytes());
        bytes.extend_from_slice(arg);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes
}

/// One connection pipelining 48 MiB of `MGET`s behind a `GET` that waits on a stopped global
/// aggregator: the node stops reading the connection once its queued commands pass
/// `resp.max_pipeline_bytes`, so its memory grows by a few of those, not by what was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_pipelining_behind_a_stalled_read_keeps_its_memory_bounded() {
    // The read waits for the stopped global aggregator longer than the test runs.
    let sync = "[sync]\ntimeout_ms = 60000\n";
    let topology = TestTopology::with_resp(&[("USA_0", 1), ("ASIA_0", 1)], "", sync);
    let cluster = TestCluster::start(topology).await;
    let node = RespNode::of(&cluster.topology, "USA_0", 0, None);
    let pid = cluster.shards[0][0].pid().expect("the node runs");
    cluster.global.pause();
    let mut stream = node.connect().await;
    // Waits on the global aggregator's parts of another datacenter.
    stream
        .write_all(&frame(&[b"GET", b"stalled"]))
        .await
        .unwrap();
    // Just under the frame limit: 1-byte keys, the most arguments per byte.
    let keys = vec![&b"k"[..]; 142_000];
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(keys);
    let mget = frame(&mget);
    assert!(mget.len() < 1 << 20, "{}", mget.len());
    let frames = 48;
    let before = rss(pid);
    let sending = tokio::spawn(async move {
        let mut sent = 0;
        for _ in 0..frames {
            // A write the node does not take within 2 s: it stopped reading.
            let write = tokio::time::timeout(Duration::from_secs(2), stream.write_all(&mget));
            if !matches!(write.await, Ok(Ok(()))) {
                break;
            }
            sent += mget.len();
        }
        (stream, sent)
    });
    let mut peak = before;
    while !sending.is_finished() {
        peak = peak.max(rss(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (stream, sent) = sending.await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    peak = peak.max(rss(pid));
    let total = frames * (1 << 20);
    let grown = peak.saturating_sub(before);
    eprintln!(
        "grew {} MiB; the client wrote {} MiB",
        grown >> 20,
        sent >> 20
    );
    // The node keeps serving other connections.
    ping(&mut node.connect().await).await;
    drop(stream);
    cluster.global.resume();
    assert!(
        grown < 64 << 20,
        "the node grew by {} MiB while one connection sent {} MiB",
        grown >> 20,
        sent >> 20
    );
    assert!(
        sent < total / 2,
        "the client wrote {} MiB of commands behind a stalled one",
        sent >> 20
    );
}

/// Idle connections from one address take at most `max_connections_per_peer` places:
/// the rest are refused in Redis's words, a client from another address is still served, and
/// the idle ones are closed after `idle_timeout_ms` while a busy one stays open.
#[tokio::test]
async fn idle_sockets_of_one_address_leave_room_for_others_and_are_closed() {
    let limits = "[resp]\nmax_connections = 40\nmax_connections_per_peer = 10\n\
                  idle_timeout_ms = 2000\n";
    let (_cluster, node) = one_node(limits, None).await;
    let mut flood = Vec::new();
    for _ in 0..50 {
        flood.push(node.connect_over(Arc::new(OtherHost)).await);
    }
    // A client of another address (127.0.0.1) is served.
    let mut busy = answering(&node).await;
    let opened = Instant::now();
    let mut refused = 0;
    let mut idle = Vec::new();
    // Refusals are written as the connections are accepted.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for socket in &mut flood {
        let mut refusal = [0u8; 36];
        let read = tokio::time::timeout(Duration::from_millis(20), socket.read_exact(&mut refusal));
        match read.await {
            Ok(Ok(_)) => {
                assert_eq!(&refusal, b"-ERR max number of clients reached\r\n");
                refused += 1;
            }
            Ok(Err(error)) => panic!("a refused socket is answered before it closes: {error}"),
            Err(_) => idle.push(socket),
        }
    }
    assert_eq!((refused, idle.len()), (40, 10));
    // The busy connection sends a command every 500 ms: it is never idle that long.
    let busy_until = opened + Duration::from_millis(5_000);
    while Instant::now() < busy_until && !idle.is_empty() {
        ping(&mut busy).await;
        let mut open = Vec::new();
        for socket in idle {
            let mut byte = [0u8; 1];
            match tokio::time::timeout(Duration::from_millis(1), socket.read(&mut byte)).await {
                Err(_) => open.push(socket),
                Ok(Ok(0) | Err(_)) => {}
                Ok(Ok(_)) => panic!("an idle connection was sent {byte:?}"),
            }
        }
        idle = open;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        idle.is_empty(),
        "{} idle connections open {:?} after they were",
        idle.len(),
        opened.elapsed()
    );
    ping(&mut busy).await;
    // Room again for the address once its idle connections are gone.
    ping(&mut node.connect_over(Arc::new(OtherHost)).await).await;
}

/// A `CONFIG GET` pattern past the bound is refused at once, in Redis's words, and the
/// connection keeps serving; patterns of Redis's glob (`*`, `?`, `[...]`, `\`) match as
/// in Redis.
#[tokio::test]
async fn config_get_refuses_a_huge_pattern_and_keeps_redis_globs() {
    let (_cluster, node) = one_node("", None).await;
    let mut stream = node.connect().await;
    let huge = format!("{}*", "a".repeat(100_000));
    let config = vec!["CONFIG".to_owned(), "GET".to_owned(), huge.clone()];
    let answer = pipelined(&mut stream, &[config]).await;
    assert!(
        answer[0].starts_with("ERR pattern too long"),
        "CONFIG GET of a pattern of {} bytes answered {answer:?}",
        huge.len()
    );
    ping(&mut stream).await;
    for (pattern, names) in [
        ("maxclient[rs]", "maxclients"),
        ("max\\clients", "maxclients"),
        ("append*", "appendonly appendfsync"),
        ("[^a-r]ave", "save"),
        ("proto-max-bulk-le?", "proto-max-bulk-len"),
        ("\\*", ""),
    ] {
        let answer = node.cli(&["CONFIG", "GET", pattern]);
        let mut got: Vec<&str> = answer.lines().step_by(2).collect();
        got.sort_unstable();
        let mut want: Vec<&str> = names.split_whitespace().collect();
        want.sort_unstable();
        assert_eq!(got, want, "CONFIG GET {pattern}: {answer}");
    }
}
