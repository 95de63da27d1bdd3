//! A shard node (the library's `run_with_resp`, on loopback) answering the Redis protocol byte
//! for byte: a pipeline runs in order with its increments batched, errors are Redis's words, a
//! malformed frame closes only its connection, `[auth]` tokens grant what they grant over HTTP,
//! and the limits of `[resp]` hold. The real clients (redis-cli, redis-py, redis-benchmark)
//! and the differential test against Redis are the end-to-end tests' (tests/resp.rs).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use geocount_model::{SystemClock, Topology};
use geocount_net::tcp_connector;
use shard_node::{NodeConfig, RestoreMode, Storage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const READER: &str = "reader-0123456789abcdef0123456789abcdef";
const ADMIN: &str = "admin-0123456789abcdef0123456789abcdef";

/// One node serving HTTP and RESP on fresh loopback ports, stopped on drop of `stop`.
struct Node {
    resp: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Node {
    /// A node alone in its datacenter, with `extra` appended to its topology.
    async fn start(extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let resp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (http_addr, resp_addr) = (http.local_addr().unwrap(), resp.local_addr().unwrap());
        let toml = format!(
            "[global]\nlisten = \"127.0.0.1:1\"\n[shard]\ndurability = \"sync\"\n\
             [[datacenters]]\nname = \"USA_0\"\naggregator = \"127.0.0.1:2\"\n\
             shards = [\"{http_addr}\"]\nresp = [\"{resp_addr}\"]\n{extra}"
        );
        let topology = Topology::from_toml("resp.toml", &toml).unwrap();
        let file = Path::new("resp.toml");
        let data = Some(dir.path().to_owned());
        let mut config = NodeConfig::from_topology(&topology, file, "USA_0", 0, data).unwrap();
        config.restore = RestoreMode::Empty;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            let listeners = (http, Some(resp));
            let clock = Arc::new(SystemClock);
            shard_node::run_with_resp(
                config,
                listeners,
                clock,
                tcp_connector(),
                Storage::os(),
                shutdown,
            )
            .await
            .expect("the node runs");
        });
        let node = Self {
            resp: resp_addr,
            stop: Some(stop),
            task,
            _dir: dir,
        };
        let mut probe = node.connect().await;
        for _ in 0..200 {
            let answer = exchange(&mut probe, &[&["PING"]]).await;
            // Before AUTH, with tokens, the answer is NOAUTH: the node is up all the same.
            if answer.starts_with("+PONG") || answer.starts_with("-NOAUTH") {
                return node;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the node never answered PING");
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.resp).await.unwrap()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.task).await.unwrap();
    }
}

/// `commands` as RESP arrays of bulk strings.
fn frames(commands: &[&[&str]]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for words in commands {
        bytes.extend(format!("*{}\r\n", words.len()).into_bytes());
        for word in *words {
            bytes.extend(format!("${}\r\n{word}\r\n", word.len()).into_bytes());
        }
    }
    bytes
}

/// Sends `bytes` at once and reads what comes back until the connection is quiet for 300 ms
/// (or closed).
async fn send_raw(stream: &mut TcpStream, bytes: &[u8]) -> String {
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_millis(300), stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&chunk[..n]),
            Ok(Err(error)) => panic!("{error}"),
        }
    }
    String::from_utf8(answer).unwrap()
}

/// Sends `commands` as one pipeline and reads the replies.
async fn exchange(stream: &mut TcpStream, commands: &[&[&str]]) -> String {
    send_raw(stream, &frames(commands)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_runs_in_order_with_its_increments_batched() {
    let node = Node::start("").await;
    let mut client = node.connect().await;
    let replies = exchange(
        &mut client,
        &[
            &["INCR", "a"],
            &["INCR", "a"],
            &["INCRBY", "a", "5"],
            &["INCRBY", "b", "2"],
            &["DECR", "a"],
            &["GET", "a"],
            &["GET", "b"],
            &["GET", "nope"],
            &["INCRBY", "a", "9223372036854775807"],
            &["INCR", "a"],
            &["INCRBY", "a", "0"],
            &["MGET", "a", "nope", ""],
            &["INCR", ""],
        ],
    )
    .await;
    assert_eq!(
        replies,
        ":1\r\n:2\r\n:7\r\n:2\r\n:6\r\n$1\r\n6\r\n$1\r\n2\r\n$-1\r\n\
         -ERR increment or decrement would overflow\r\n:7\r\n:7\r\n*3\r\n$1\r\n7\r\n$-1\r\n$-1\r\n\
         -ERR invalid counter id: it is empty\r\n"
    );
    // Unique counters, and each type's commands refused on the other.
    let replies = exchange(
        &mut client,
        &[
            &["PFADD", "v", "x", "y", "z"],
            &["PFADD", "v", "x"],
            &["PFCOUNT", "v"],
            &["PFCOUNT", "nope"],
            &["INCR", "v"],
            &["PFADD", "a", "x"],
            &["PFCOUNT", "a"],
            &["GET", "v"],
        ],
    )
    .await;
    assert_eq!(
        replies,
        ":1\r\n:0\r\n:3\r\n:0\r\n\
         -WRONGTYPE Operation against a key holding the wrong kind of value\r\n\
         -WRONGTYPE Key is not a valid HyperLogLog string value.\r\n\
         -WRONGTYPE Key is not a valid HyperLogLog string value.\r\n$1\r\n3\r\n"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_commands_errors_and_hello_3_answer_as_redis() {
    let node = Node::start("").await;
    let mut client = node.connect().await;
    let replies = exchange(
        &mut client,
        &[
            &["PING"],
            &["ECHO", "hi"],
            &["SELECT", "0"],
            &["SELECT", "1"],
            &["INCR"],
            &["SET", "k", "v"],
            &["INCRBY", "k", "1.5"],
            &["DECRBY", "k", "-9223372036854775808"],
            &["CONFIG", "GET", "save"],
            &["CLIENT", "SETNAME", "me"],
            &["CLIENT", "GETNAME"],
            &["HELLO", "3"],
            &["GET", "nope"],
            &["CONFIG", "GET", "appendonly"],
        ],
    )
    .await;
    let hello = "%7\r\n$6\r\nserver\r\n$8\r\ngeocount\r\n$7\r\nversion\r\n$5\r\n7.2.0\r\n\
                 $5\r\nproto\r\n:3\r\n$2\r\nid\r\n:2\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
                 $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
    assert_eq!(
        replies,
        format!(
            "+PONG\r\n$2\r\nhi\r\n+OK\r\n-ERR DB index is out of range\r\n\
             -ERR wrong number of arguments for 'incr' command\r\n\
             -ERR unknown command 'SET', with args beginning with: 'k' 'v' \r\n\
             -ERR value is not an integer or out of range\r\n-ERR decrement would overflow\r\n\
             *2\r\n$4\r\nsave\r\n$0\r\n\r\n+OK\r\n$2\r\nme\r\n{hello}_\r\n\
             %1\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n"
        )
    );
    // A malformed frame is answered and closes its connection, and only it.
    let mut other = node.connect().await;
    let refused = send_raw(
        &mut other,
        b"*1\r\n$4\r\nPING\r\n*1\r\n*1\r\n$4\r\nPING\r\n",
    )
    .await;
    assert_eq!(
        refused,
        "+PONG\r\n-ERR Protocol error: expected '$', got '*'\r\n"
    );
    assert_eq!(exchange(&mut client, &[&["PING"]]).await, "+PONG\r\n");
    // QUIT answers, then closes.
    assert_eq!(
        exchange(&mut client, &[&["QUIT"], &["PING"]]).await,
        "+OK\r\n"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiries_and_deletes_are_the_lifecycle_changes() {
    let node = Node::start("").await;
    let mut client = node.connect().await;
    let replies = exchange(
        &mut client,
        &[
            &["INCRBY", "c", "3"],
            &["TTL", "c"],
            &["TTL", "nope"],
            &["EXPIRE", "nope", "10"],
            &["EXPIRE", "c", "100"],
            &["TTL", "c"],
            &["PERSIST", "c"],
            &["PERSIST", "c"],
            &["TTL", "c"],
            &["DEL", "c", "nope"],
            &["GET", "c"],
            &["INCR", "c"],
            &["PEXPIRE", "c", "0"],
            &["GET", "c"],
        ],
    )
    .await;
    assert_eq!(
        replies,
        ":3\r\n:-1\r\n:-2\r\n:0\r\n:1\r\n:100\r\n:1\r\n:0\r\n:-1\r\n:1\r\n$-1\r\n:1\r\n:1\r\n$-1\r\n"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grant_over_resp_what_they_grant_over_http() {
    let auth = format!(
        "[auth]\ncluster_secret = \"secret-0123456789abcdef0123456789abcdef\"\n\
         [[auth.tokens]]\nname = \"dashboard\"\ntoken = \"{READER}\"\nrights = [\"read\"]\n\
         [[auth.tokens]]\nname = \"ops\"\ntoken = \"{ADMIN}\"\nrights = [\"admin\"]\n"
    );
    let node = Node::start(&auth).await;
    let mut client = node.connect().await;
    let replies = exchange(
        &mut client,
        &[
            &["INCR", "a"],
            &["NOSUCH"],
            &["AUTH", "wrong"],
            &["AUTH", READER],
            &["INCR", "a"],
            &["GET", "a"],
            &["AUTH", "ops", ADMIN],
            &["INCR", "a"],
            &["DEL", "a"],
        ],
    )
    .await;
    assert_eq!(
        replies,
        "-NOAUTH Authentication required.\r\n-NOAUTH Authentication required.\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n\
         -NOPERM User dashboard has no permissions to run the 'incr' command\r\n$-1\r\n+OK\r\n\
         :1\r\n:1\r\n"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_of_resp_hold() {
    let node = Node::start("[resp]\nmax_connections = 2\nmax_frame_bytes = 1024\n").await;
    let mut first = node.connect().await;
    assert_eq!(exchange(&mut first, &[&["PING"]]).await, "+PONG\r\n");
    // Refused as soon as the announced length passes the limit, and closed.
    let mut second = node.connect().await;
    let oversized = frames(&[&["GET", &"k".repeat(2_000)]]);
    assert_eq!(
        send_raw(&mut second, &oversized[..30]).await,
        "-ERR Protocol error: a command of more than 1024 bytes (resp.max_frame_bytes)\r\n"
    );
    let mut third = node.connect().await;
    assert_eq!(exchange(&mut third, &[&["PING"]]).await, "+PONG\r\n");
    let mut fourth = node.connect().await;
    assert_eq!(
        exchange(&mut fourth, &[&["PING"]]).await,
        "-ERR max number of clients reached\r\n"
    );
    node.stop().await;
}

/// With room for one command's bytes at a time, a long pipeline of increments, reads and
/// replies ready at once (`ECHO`) is still read as it drains and answered whole, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_past_its_bytes_is_read_as_it_drains() {
    let node = Node::start("[resp]\nmax_pipeline_bytes = 16\n").await;
    let mut client = node.connect().await;
    let mut commands: Vec<&[&str]> = Vec::new();
    for _ in 0..100 {
        commands.extend([
            &["INCR", "drained"][..],
            &["ECHO", "e"],
            &["GET", "drained"],
        ]);
    }
    let replies = exchange(&mut client, &commands).await;
    let expected: String = (1..=100)
        .map(|n| format!(":{n}\r\n$1\r\ne\r\n${}\r\n{n}\r\n", n.to_string().len()))
        .collect();
    assert_eq!(replies, expected);
    node.stop().await;
}
