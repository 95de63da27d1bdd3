//! End-to-end tests of the Redis protocol (docs/api.md, "Redis protocol at a shard node")
//! with real clients: `redis-cli`, `redis-benchmark` and the Python client `redis` against a
//! shard node's RESP listener, and a differential test of random command sequences against a
//! real Redis (`tests/resp/differential.py`). One datacenter of one shard node, on loopback
//! (two datacenters, one of two nodes, for writes forwarded to a peer); over TLS with
//! `E2E_TLS=1`. Needs what `scripts/resp-clients.sh` installs (docs/testing.md,
//! "Redis protocol").

#[path = "resp/limits.rs"]
mod limits;
#[path = "resp/tools.rs"]
mod tools;

use std::process::Command;
use std::time::Duration;

use geocount_net::Stream;
use geocount_test_support::access::{ADMIN, READER, SECRET, WRITER, auth_toml};
use geocount_test_support::api::{encode_id, entry};
use geocount_test_support::{Api, Method, TestCluster, TestTopology, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tools::{RedisServer, RespNode, ping, python, read_to_close, require, scripts, succeed};

/// One datacenter `USA_0` of one shard node serving RESP, with `extra_toml`, started with
/// its aggregator and the global aggregator; its RESP listener (answering PING, with `token`
/// when `[auth]` asks for one).
async fn one_node(extra_toml: &str, token: Option<&str>) -> (TestCluster, RespNode) {
    let topology = TestTopology::with_resp(&[("USA_0", 1)], "", extra_toml);
    let cluster = TestCluster::start(topology).await;
    let node = RespNode::of(&cluster.topology, "USA_0", 0, token);
    (cluster, node)
}

#[tokio::test]
async fn redis_cli_writes_and_reads_the_counters_of_the_http_api() {
    let (cluster, node) = one_node("", None).await;
    assert_eq!(node.cli(&["PING"]), "PONG");
    assert_eq!(node.cli(&["ECHO", "hello"]), "hello");
    assert_eq!(node.cli(&["INCR", "cli:likes"]), "1");
    assert_eq!(node.cli(&["INCRBY", "cli:likes", "41"]), "42");
    assert_eq!(node.cli(&["DECR", "cli:likes"]), "41");
    assert_eq!(node.cli(&["GET", "cli:likes"]), "41");
    assert_eq!(node.cli(&["GET", "cli:none"]), "");
    // redis-cli prints nil as an empty line.
    assert_eq!(node.cli(&["MGET", "cli:none", "cli:likes"]), "41");
    assert_eq!(
        node.cli(&["INCRBY", "cli:likes", "ten"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        node.cli(&["INCR"]),
        "ERR wrong number of arguments for 'incr' command"
    );
    assert!(
        node.cli(&["NOSUCHCOMMAND", "x"])
            .starts_with("ERR unknown command 'NOSUCHCOMMAND', with args beginning with: 'x'"),
    );
    assert_eq!(node.cli(&["PFADD", "cli:visitors", "a", "b", "a"]), "1");
    assert_eq!(node.cli(&["PFCOUNT", "cli:visitors"]), "2");
    // The same counters as over HTTP: the node's own slot holds what INCR wrote.
    let api = cluster.shards[0][0].api();
    assert_eq!(api.value("cli:likes").await, 41);
    let (status, body) = api.read("cli:visitors").await;
    assert_eq!((status, body["value"].as_i64()), (200, Some(2)), "{body}");
    // And what HTTP writes, GET reads.
    api.add("cli:likes", 9).await.unwrap();
    assert_eq!(node.cli(&["GET", "cli:likes"]), "50");
}

#[tokio::test]
async fn redis_benchmark_incr_and_get_at_pipelines_of_1_16_and_128() {
    let (_cluster, node) = one_node("", None).await;
    // A multiple of every pipeline depth: redis-benchmark sends whole pipelines, so it sends
    // exactly this many only then.
    let requests = 3072;
    let keys = 100;
    let mut sent = 0;
    for pipeline in [1, 16, 128] {
        let mut command = Command::new(require("redis-benchmark"));
        command.args(node.tool_args()).args([
            "-t",
            "incr,get",
            "-P",
            &pipeline.to_string(),
            "-n",
            &requests.to_string(),
            "-r",
            &keys.to_string(),
            "-c",
            "20",
            "-q",
        ]);
        let out = succeed(&mut command, Duration::from_secs(60));
        for test in ["GET", "INCR"] {
            assert!(
                out.contains(&format!("{test}: ")) && out.contains("requests per second"),
                "-P {pipeline}: no {test} result in {out}"
            );
        }
        sent += requests;
        // Every INCR counted: redis-benchmark's keys are counter:000000000000 to
        // counter:000000000099.
        let names: Vec<String> = (0..keys).map(|k| format!("counter:{k:012}")).collect();
        let mut args = vec!["MGET"];
        args.extend(names.iter().map(String::as_str));
        let total: i64 = node
            .cli(&args)
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| line.parse::<i64>().expect("a counter's value"))
            .sum();
        assert_eq!(total, sent, "after -P {pipeline}: {out}");
    }
}

#[tokio::test]
async fn the_python_client_redis_drives_a_shard_node() {
    let (_cluster, node) = one_node("", None).await;
    let mut command = Command::new(python());
    command
        .arg(scripts().join("clients.py"))
        .arg(node.addr.to_string())
        .args(node.script_args("--tls-ca"));
    let out = succeed(&mut command, Duration::from_secs(60));
    assert!(
        out.contains("over RESP2") && out.contains("over RESP3"),
        "{out}"
    );
}

/// Runs the differential test against `redis` and `node` over RESP `protocol`, `sequences`
/// per seed of `seeds`; its summary.
fn differential(
    redis: &RedisServer,
    node: &RespNode,
    protocol: u8,
    seeds: &str,
    sequences: u32,
) -> String {
    let mut command = Command::new(python());
    command
        .arg(scripts().join("differential.py"))
        .args(["--redis", &redis.addr.to_string()])
        .args(["--geocount", &node.addr.to_string()])
        .args(["--protocol", &protocol.to_string()])
        .args(["--seeds", seeds, "--sequences", &sequences.to_string()])
        .args(["--workers", "8"])
        .args(node.script_args("--geocount-tls-ca"));
    let out = succeed(&mut command, Duration::from_secs(120));
    let seeds = seeds.split(',').count() as u32;
    assert!(
        out.contains(&format!("{} sequences", seeds * sequences)),
        "{out}"
    );
    assert!(out.contains(": 0 mismatching sequences"), "{out}");
    out
}

#[tokio::test]
async fn random_command_sequences_answer_as_redis_does() {
    let redis = RedisServer::start();
    let (_cluster, node) = one_node("", None).await;
    // Thousands of sequences of single commands and pipelines, in both protocol versions.
    differential(&redis, &node, 2, "1,2,3", 1000);
    differential(&redis, &node, 3, "4", 1000);
}

#[tokio::test]
async fn auth_is_needed_first_and_rights_apply_as_over_http() {
    let (cluster, node) = one_node(&auth_toml(SECRET), Some(ADMIN)).await;
    let as_token = |token: &str, args: &[&str]| {
        let mut all = vec!["--no-auth-warning", "-a", token];
        all.extend(args);
        node.cli(&all)
    };
    // Before AUTH: every command NOAUTH, nothing applied.
    let noauth = "NOAUTH Authentication required.";
    assert_eq!(node.cli(&["INCR", "auth:likes"]), noauth);
    assert_eq!(node.cli(&["GET", "auth:likes"]), noauth);
    assert_eq!(node.cli(&["PING"]), noauth);
    // An unknown token is refused, and opens nothing.
    let stranger = READER.replace('r', "R");
    assert!(as_token(&stranger, &["INCR", "auth:likes"]).contains("NOAUTH"));
    // write writes, read reads: each only what its right allows, as over HTTP.
    assert_eq!(as_token(WRITER, &["INCRBY", "auth:likes", "5"]), "5");
    assert_eq!(as_token(READER, &["GET", "auth:likes"]), "5");
    let refused = as_token(READER, &["INCR", "auth:likes"]);
    assert!(
        refused.starts_with("NOPERM") || refused.starts_with("ERR"),
        "{refused}"
    );
    assert!(refused.contains("dashboard"), "names the token: {refused}");
    // DEL and EXPIRE are the admin's, as DELETE and PATCH /counter are over HTTP.
    assert!(as_token(WRITER, &["DEL", "auth:likes"]).starts_with("NO"));
    assert!(as_token(WRITER, &["EXPIRE", "auth:likes", "100"]).starts_with("NO"));
    assert_eq!(as_token(ADMIN, &["GET", "auth:likes"]), "5");
    assert_eq!(as_token(ADMIN, &["TTL", "auth:likes"]), "-1");
    // None of the refusals changed the counter.
    let admin = cluster.shards[0][0].api().with_token(ADMIN);
    assert_eq!(admin.value("auth:likes").await, 5);
    assert_eq!(as_token(ADMIN, &["DEL", "auth:likes"]), "1");
    assert_eq!(admin.read("auth:likes").await.0, 404);
    // The Python client: AUTH, HELLO 3 AUTH, NOAUTH, a wrong token, a read-only token.
    let mut command = Command::new(python());
    command
        .arg(scripts().join("clients.py"))
        .arg(node.addr.to_string())
        .args(["--token", ADMIN, "--reader-token", READER])
        .args(node.script_args("--tls-ca"));
    succeed(&mut command, Duration::from_secs(60));
}

#[tokio::test]
async fn a_malformed_frame_closes_only_its_own_connection() {
    let (_cluster, node) = one_node("", None).await;
    let mut steady = node.connect().await;
    ping(&mut steady).await;
    let malformed: [&[u8]; 4] = [
        b"*1\r\n$abc\r\n",
        b"*2\r\n$4\r\nECHO\r\n@junk\r\n",
        b"*x\r\n",
        // A bulk string longer than any frame may be.
        b"*2\r\n$4\r\nECHO\r\n$99999999999\r\n",
    ];
    for frame in malformed {
        let mut bad = node.connect().await;
        ping(&mut bad).await;
        bad.write_all(frame).await.unwrap();
        let received = read_to_close(&mut bad).await;
        // At most an error reply before the close.
        assert!(
            received.is_empty() || received.starts_with(b"-"),
            "{:?} answered {:?}",
            String::from_utf8_lossy(frame),
            String::from_utf8_lossy(&received)
        );
        // The connection opened before it, and a new one, still work.
        ping(&mut steady).await;
        ping(&mut node.connect().await).await;
    }
    assert_eq!(node.cli(&["INCR", "after:malformed"]), "1");
}

/// A new connection to `node` that answers PING, waiting (up to 5 s) for the node to have
/// room for it.
async fn answering(node: &RespNode) -> Box<dyn Stream> {
    eventually(
        Duration::from_secs(5),
        "a connection answering PING",
        || async {
            let mut stream = node.connect().await;
            stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.ok()?;
            let mut reply = [0u8; 7];
            tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut reply))
                .await
                .ok()?
                .ok()?;
            (&reply == b"+PONG\r\n").then_some(stream)
        },
    )
    .await
}

#[tokio::test]
async fn connections_past_the_limit_are_refused_while_the_open_ones_work() {
    let (_cluster, node) = one_node("[resp]\nmax_connections = 2\n", None).await;
    // (redis-cli's PING of `one_node` may hold a place a moment longer.)
    let mut first = answering(&node).await;
    let second = answering(&node).await;
    let mut third = node.connect().await;
    let refused = read_to_close(&mut third).await;
    assert_eq!(
        String::from_utf8_lossy(&refused),
        "-ERR max number of clients reached\r\n"
    );
    ping(&mut first).await;
    // Once one closes, a new connection is taken.
    drop(second);
    ping(&mut answering(&node).await).await;
}

/// Sends `commands` (each its arguments) on `stream` in one write, pipelined; their replies,
/// each an integer or an error line without its type byte and line end.
async fn pipelined(stream: &mut Box<dyn Stream>, commands: &[Vec<String>]) -> Vec<String> {
    let mut frames = Vec::new();
    for args in commands {
        frames.extend(format!("*{}\r\n", args.len()).into_bytes());
        for arg in args {
            frames.extend(format!("${}\r\n{arg}\r\n", arg.len()).into_bytes());
        }
    }
    stream.write_all(&frames).await.unwrap();
    let mut replies = Vec::new();
    let mut line = Vec::new();
    while replies.len() < commands.len() {
        let mut byte = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut byte))
            .await
            .expect("a reply within 10 s")
            .expect("a reply");
        line.push(byte[0]);
        if line.ends_with(b"\r\n") {
            let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
            replies.push(text);
            line.clear();
        }
    }
    replies
}

/// `GET /counter/{id}/world` at `api`: its value (panics unless it answers 200).
async fn world_value(api: &Api, id: &str) -> i64 {
    let (status, body) = api.get_json(&format!("/counter/{id}/world")).await;
    assert_eq!(status, 200, "world read of {id}: {body}");
    body["value"].as_i64().expect("a value")
}

/// An INCRBY through a node of a counter whose slot is its peer's is forwarded there, and its
/// reply is still the world total with this write counted (docs/api.md, "World reads at a
/// shard node": read-your-writes for forwarded writes), one by one and pipelined; so is a world
/// read over HTTP after a forwarded `POST /batch` or `POST /counters/{id}/increment`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn increments_forwarded_to_a_peer_reply_the_total_with_them() {
    let topology = TestTopology::with_resp(&[("USA_0", 2), ("ASIA_0", 1)], "", "");
    let cluster = TestCluster::start(topology).await;
    let usa = cluster.shards[0][0].api();
    let asia = cluster.shards[1][0].api();
    let id = usa
        .ids_routed_to("forwarded", "DC_USA_0_VAL_1", 1)
        .await
        .remove(0);
    // Another datacenter's part, once USA_0's first node reads it.
    let (status, body) = asia.add(&id, 5).await.expect("write at ASIA_0");
    assert_eq!(status, 200, "{body}");
    eventually(
        Duration::from_secs(15),
        "ASIA_0's part in USA_0's world read",
        || async {
            let (status, body) = usa.get_json(&format!("/counter/{id}/world")).await;
            (status == 200 && body["value"].as_i64() == Some(5)).then_some(())
        },
    )
    .await;
    let node = RespNode::of(&cluster.topology, "USA_0", 0, None);
    let mut total = 5;
    // One by one, each its own connection.
    for delta in [1, 1, 3, -2, 1] {
        total += delta;
        let reply = node.cli(&["INCRBY", &id, &delta.to_string()]);
        assert_eq!(reply, total.to_string(), "INCRBY {id} {delta}");
    }
    // Pipelined on one connection: each reply the total up to its own delta.
    let mut stream = node.connect().await;
    for round in 0..4 {
        let deltas = [1, 2, 3, -1, round + 1];
        let commands: Vec<Vec<String>> = (deltas.iter())
            .map(|d| vec!["INCRBY".to_owned(), id.clone(), d.to_string()])
            .collect();
        let replies = pipelined(&mut stream, &commands).await;
        let expected: Vec<String> = (deltas.iter())
            .map(|d| {
                total += d;
                total.to_string()
            })
            .collect();
        assert_eq!(
            replies, expected,
            "pipeline {round} of INCRBY {id} {deltas:?}"
        );
        // And singly on the same connection.
        total += 1;
        let single = vec!["INCR".to_owned(), id.clone()];
        let reply = pipelined(&mut stream, &[single]).await;
        assert_eq!(
            reply,
            [total.to_string()],
            "INCR {id} after pipeline {round}"
        );
    }
    assert_eq!(node.cli(&["GET", &id]), total.to_string());
    // Over HTTP: a forwarded batch, then a forwarded increment, each in the next world read.
    for round in 0..3 {
        usa.batch(&[entry(&id, 2)]).await.expect("batch");
        total += 2;
        assert_eq!(world_value(&usa, &id).await, total, "after batch {round}");
        let path = format!("/counters/{}/increment", encode_id(&id));
        let answer = usa
            .send(Method::POST, &path, &[], r#"{"delta": 3}"#)
            .await
            .expect("increment");
        assert_eq!(answer.status.as_u16(), 200, "{}", answer.json());
        total += 3;
        assert_eq!(
            world_value(&usa, &id).await,
            total,
            "after increment {round}"
        );
    }
}
