//! End-to-end tests of the limits: request bodies, counter ids and batch sizes at their
//! boundaries, the number of counters a shard node holds, connections, slow clients, and a disk
//! that fills up. Each starts the real `shard-node` binary on loopback.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use geocount_model::wire::{BatchEntry, EntryOutcome};
use geocount_test_support::api::entry;
use geocount_test_support::flood;
use geocount_test_support::{Api, TestTopology, eventually};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A node running without its datacenter aggregator need not wait long for a restore source.
const ALONE: &str = "restore_timeout_ms = 100";

/// A topology of one shard node, alone, with these `[shard]` settings.
fn alone(settings: &str) -> TestTopology {
    TestTopology::single(&format!("{settings}\n{ALONE}"))
}

/// A topology of one shard node, alone, with these `[http]` settings.
fn alone_http(settings: &str) -> TestTopology {
    TestTopology::single_with(ALONE, &format!("[http]\n{settings}"))
}

/// Reads from `stream` until the server closes it (or `within` passes): what it answered.
async fn read_to_close(stream: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&answer).into(), true),
            Ok(Ok(n)) => answer.extend_from_slice(&buffer[..n]),
            Err(_) => return (String::from_utf8_lossy(&answer).into(), false),
        }
    }
}

#[tokio::test]
async fn bodies_ids_and_batches_are_limited_at_their_boundaries() {
    let topology = alone("max_body_bytes = 2048\nmax_batch_entries = 10");
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();

    // Ids: 256 bytes is the longest accepted, in a path, a create and a batch entry.
    let longest = "i".repeat(256);
    let too_long = "i".repeat(257);
    assert_eq!(api.add(&longest, 1).await.unwrap().0, 200);
    api.created(json!({ "id": format!("c{}", &longest[1..]) }))
        .await;
    let (status, body) = api.create(json!({ "id": too_long })).await;
    assert_eq!(status, 400, "{body}");
    let answer = api
        .batch(&[entry(&longest, 2), entry(&too_long, 2)])
        .await
        .unwrap();
    assert!(matches!(
        answer.outcomes[..],
        [
            EntryOutcome::Applied { value: 3, .. },
            EntryOutcome::Refused { status: 400, .. }
        ]
    ));

    // Batches: exactly the limit is taken whole; one more is refused whole.
    let entries: Vec<BatchEntry> = (0..10).map(|_| entry("b", 1)).collect();
    assert_eq!(api.batch(&entries).await.unwrap().outcomes.len(), 10);
    let mut over = entries.clone();
    over.push(entry("b", 1));
    assert_eq!(api.batch(&over).await.unwrap_err().0, 413);
    assert_eq!(api.value("b").await, 10);

    // A body without a declared length is refused as soon as it passes the limit.
    let mut stream = TcpStream::connect(node.addr).await.unwrap();
    let chunk = format!(r#"{{"delta": 1, "pad": "{}"}}"#, "p".repeat(3000));
    let request = format!(
        "PATCH /counter/b/write?op=INCREMENT HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let (answer, _) = read_to_close(&mut stream, Duration::from_secs(2)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(api.value("b").await, 10, "nothing of it was applied");
}

#[tokio::test]
async fn a_node_at_its_idempotency_key_limit_refuses_new_keys_until_old_ones_expire() {
    let topology = alone("max_idempotency_keys = 2\nidempotency_retention_secs = 1");
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    for key in ["k1", "k2"] {
        let (status, body) = api.write("c", "INCREMENT", None, Some(key)).await.unwrap();
        assert_eq!(status, 200, "{key}: {body}");
    }
    let (status, body) = api.write("c", "INCREMENT", None, Some("k3")).await.unwrap();
    assert_eq!(status, 507, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("shard.max_idempotency_keys") && error.contains('2'),
        "{error}"
    );
    // A retry of a held key is answered as the first was; writes without a key are applied.
    let (status, retry) = api.write("c", "INCREMENT", None, Some("k1")).await.unwrap();
    assert_eq!((status, retry["value"].as_i64()), (200, Some(1)), "{retry}");
    assert_eq!(api.add("c", 5).await.unwrap().0, 200);
    // In a batch, only the entry with a new key is refused.
    let keyed = BatchEntry {
        idempotency_key: Some("k4"),
        ..entry("c", 100)
    };
    let answer = api.batch(&[entry("c", 1), keyed]).await.unwrap();
    assert!(
        matches!(
            answer.outcomes[..],
            [
                EntryOutcome::Applied { value: 8, .. },
                EntryOutcome::Refused { status: 507, .. }
            ]
        ),
        "{:?}",
        answer.outcomes
    );
    assert_eq!(
        api.value("c").await,
        8,
        "nothing of the refused writes applied"
    );
    // Once the held keys expire, new keys are taken again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (status, body) = api.write("c", "INCREMENT", None, Some("k3")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(api.value("c").await, 9);
    assert_eq!(api.get("/healthz").await.unwrap().status, 200);
}

#[tokio::test]
async fn a_node_at_its_counter_limit_refuses_new_counters_and_keeps_serving_old_ones() {
    let topology = alone("max_counters = 3");
    let mut node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    for id in ["a", "b", "c"] {
        assert_eq!(api.add(id, 1).await.unwrap().0, 200, "{id}");
    }
    let (status, body) = api
        .write("d", "INCREMENT", None, Some("key-d"))
        .await
        .unwrap();
    assert_eq!(status, 507, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("shard.max_counters") && error.contains('3'),
        "{error}"
    );
    // Existing counters keep working; a batch is answered per entry.
    assert_eq!(api.add("a", 4).await.unwrap().0, 200);
    let answer = api.batch(&[entry("b", 2), entry("e", 2)]).await.unwrap();
    assert!(matches!(
        answer.outcomes[..],
        [
            EntryOutcome::Applied { value: 3, .. },
            EntryOutcome::Refused { status: 507, .. }
        ]
    ));
    // An item would create a unique counter: refused too.
    let (status, body) = api
        .write("u", "INCREMENT", Some(json!({"item": "x"})), None)
        .await
        .unwrap();
    assert_eq!(status, 507, "{body}");
    assert_eq!(api.value("a").await, 5);
    for id in ["d", "e", "u"] {
        assert_eq!(api.read(id).await.0, 404, "{id}");
    }

    // The count survives a restart: it is what the node holds.
    node.kill9();
    node.restart().await;
    assert_eq!(api.add("d", 1).await.unwrap().0, 507);
    assert_eq!(api.add("c", 1).await.unwrap().0, 200);
    assert_eq!(api.get("/healthz").await.unwrap().status, 200);
}

#[tokio::test]
async fn descriptions_from_peers_are_never_refused_and_count_towards_the_limit() {
    let topology = TestTopology::new(&[("USA_0", 2)], &format!("max_counters = 3\n{ALONE}"));
    let node = topology.start_shard("USA_0", 0).await;
    let peer = topology.start_shard("USA_0", 1).await;
    let api = node.api();
    // Three created through the peer reach this node, then this node creates no fourth.
    let peer_api = peer.api();
    for id in ["x", "y", "z"] {
        peer_api
            .created(json!({"id": id, "numberOfShards": 2}))
            .await;
    }
    eventually(
        Duration::from_secs(5),
        "the peer's descriptions",
        || async {
            (api.get_json("/counter/z/route").await.1["numberOfShards"] == 2).then_some(())
        },
    )
    .await;
    let (status, body) = api.create(json!({"id": "w"})).await;
    assert_eq!(status, 507, "{body}");
}

#[tokio::test]
async fn slow_clients_are_cut_off_and_others_keep_being_served() {
    let topology = alone_http("header_read_timeout_ms = 500\nbody_read_timeout_ms = 500");
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();

    // Half a header, then nothing: the connection is closed after the header timeout.
    let started = Instant::now();
    let mut stalled = TcpStream::connect(node.addr).await.unwrap();
    stalled
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    assert_eq!(api.get("/healthz").await.unwrap().status, 200);
    let (_, closed) = read_to_close(&mut stalled, Duration::from_secs(5)).await;
    let waited = started.elapsed();
    assert!(closed, "a stalled header was never cut off");
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(3),
        "cut off after {waited:?}"
    );

    // An idle keep-alive connection goes the same way.
    let mut idle = TcpStream::connect(node.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, closed) = read_to_close(&mut idle, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200") && closed, "{answer}");

    // A body trickled slower than allowed: 408, and nothing of it is applied.
    let mut trickle = TcpStream::connect(node.addr).await.unwrap();
    let body = br#"{"delta": 5}"#;
    trickle
        .write_all(
            format!(
                "PATCH /counter/slow/write?op=INCREMENT HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let sender = async {
        for byte in &body[..body.len() - 1] {
            if trickle.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    };
    sender.await;
    let (answer, _) = read_to_close(&mut trickle, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within 500 ms"), "{answer}");
    assert_eq!(api.read("slow").await.0, 404);
    assert_eq!(api.add("fast", 1).await.unwrap().0, 200);
}

#[tokio::test]
async fn connections_past_the_limit_are_closed_while_open_ones_work() {
    let topology = alone_http("max_connections = 4");
    let node = topology.start_shard("USA_0", 0).await;
    // Let the start-up health checks' connection close.
    tokio::time::sleep(Duration::from_millis(300)).await;
    const REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

    async fn answered(stream: &mut TcpStream) -> bool {
        if stream.write_all(REQUEST).await.is_err() {
            return false;
        }
        let mut buffer = [0u8; 4096];
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await {
            Ok(Ok(n)) if n > 0 => buffer[..n].starts_with(b"HTTP/1.1 200"),
            _ => false,
        }
    }

    let mut open = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(node.addr).await.unwrap();
        assert!(answered(&mut stream).await);
        open.push(stream);
    }
    let mut extra = TcpStream::connect(node.addr).await.unwrap();
    let (answer, closed) = read_to_close(&mut extra, Duration::from_secs(2)).await;
    assert!(closed && answer.is_empty(), "{answer:?}");
    for stream in &mut open {
        assert!(answered(stream).await, "an open connection stopped working");
    }
    // Once one closes, a new one is taken.
    drop(open.pop());
    eventually(
        Duration::from_secs(5),
        "a connection after one closed",
        || async {
            let mut stream = TcpStream::connect(node.addr).await.unwrap();
            answered(&mut stream).await.then_some(())
        },
    )
    .await;
}

/// A small tmpfs mounted for one test, unmounted when dropped (even when the test fails).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `4m`) on `dir`, or says why it cannot.
    fn mount(dir: &Path, size: &str) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_owned());
        }
        Ok(Self(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The bytes free on the filesystem of `dir` (`df`).
fn available_bytes(dir: &Path) -> u64 {
    let output = Command::new("df")
        .args(["--block-size=1", "--output=avail"])
        .arg(dir)
        .output()
        .expect("df runs");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .nth(1)
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected df output: {text}"))
}

/// Reads every counter back: its acknowledged sum, or 404 when no write of it was acknowledged.
async fn check_acknowledged(api: &Api, ids: &[String], acknowledged: &[i64], when: &str) {
    for (id, sum) in ids.iter().zip(acknowledged) {
        let (status, body) = api.read(id).await;
        match sum {
            0 => assert_eq!(status, 404, "{id} {when}: {body}"),
            sum => assert_eq!(body["value"].as_i64(), Some(*sum), "{id} {when}: {body}"),
        }
    }
}

/// The node's `geocount_shard_checkpoints_total`.
async fn checkpoints(api: &Api) -> u64 {
    let text = api.get("/metrics").await.unwrap().body;
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|line| line.strip_prefix("geocount_shard_checkpoints_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_full_disk_refuses_writes_with_507_loses_nothing_and_recovers_by_itself() {
    let topology = alone("checkpoint_interval_ms = 200\ncheckpoint_log_bytes = 65536");
    let data_dir = topology.shard_data_dir("USA_0", 0);
    let disk = match Tmpfs::mount(&data_dir, "4m") {
        Ok(disk) => disk,
        Err(reason) => {
            println!(
                "skipped: cannot mount a tmpfs on {}: {reason}",
                data_dir.display()
            );
            return;
        }
    };
    let mut node = topology.start_shard("USA_0", 0).await;
    let api = node.api();

    // Leave the node about 256 KiB, then write until it refuses.
    let filler = data_dir.join("filler");
    let free_bytes = available_bytes(&disk.0);
    std::fs::write(&filler, vec![7u8; (free_bytes - 256 * 1024) as usize]).unwrap();
    // Each round writes the same 50 counters and 100 new ones (so the store keeps growing).
    const FIXED: usize = 50;
    let mut ids: Vec<String> = (0..FIXED).map(|n| format!("fill-{n}")).collect();
    let mut acknowledged = vec![0i64; ids.len()];
    let mut refused = 0;
    let mut round = 0i64;
    while refused < 20 {
        round += 1;
        assert!(round < 2_000, "the disk never filled up");
        ids.extend((0..100).map(|n| format!("fresh-{round}-{n}")));
        acknowledged.resize(ids.len(), 0);
        let written: Vec<usize> = (0..FIXED).chain(ids.len() - 100..ids.len()).collect();
        let entries: Vec<BatchEntry> = written
            .iter()
            .map(|&n| entry(&ids[n], if n < FIXED { round } else { 1 }))
            .collect();
        match api.batch(&entries).await {
            Ok(answer) => {
                for (&n, outcome) in written.iter().zip(&answer.outcomes) {
                    match outcome {
                        EntryOutcome::Applied { .. } => {
                            acknowledged[n] += if n < FIXED { round } else { 1 }
                        }
                        EntryOutcome::Refused { status, error } => {
                            assert_eq!(*status, 507, "{error}");
                            refused += 1;
                        }
                    }
                }
            }
            Err((status, error)) => panic!("batch refused whole: {status} {error}"),
        }
    }
    // The last commit failed: the node says so until a write succeeds again.
    let (status, body) = api.get_json("/healthz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains("No space left"), "{body}");
    // The whole group was refused: a refused batch applies none of its entries.
    let (status, body) = api.create(json!({"id": "while-full"})).await;
    assert!(status == 507 || status == 201, "{status} {body}");
    check_acknowledged(&api, &ids, &acknowledged, "while full").await;

    // Space returns: writes succeed again without a restart, and checkpoints resume.
    std::fs::remove_file(&filler).unwrap();
    eventually(
        Duration::from_secs(5),
        "a write after space returned",
        || async {
            api.add("fill-0", 1)
                .await
                .is_ok_and(|(status, _)| status == 200)
                .then_some(())
        },
    )
    .await;
    acknowledged[0] += 1;
    assert_eq!(api.get("/healthz").await.unwrap().status, 200);
    let before = checkpoints(&api).await;
    api.add("fill-1", 1).await.unwrap();
    acknowledged[1] += 1;
    eventually(Duration::from_secs(5), "a checkpoint", || async {
        (checkpoints(&api).await > before).then_some(())
    })
    .await;

    // Nothing acknowledged was lost, nothing refused was applied: across a crash too.
    let created = api.read("while-full").await.0 == 200;
    node.kill9();
    node.restart().await;
    check_acknowledged(&api, &ids, &acknowledged, "after kill -9").await;
    assert_eq!(api.read("while-full").await.0 == 200, created);
    drop(node);
    drop(disk);
}

/// `THP_enabled` of process `pid`: whether the kernel may back its memory with huge pages.
fn huge_pages_enabled(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .expect("the kernel reports THP_enabled");
    line.trim() == "1"
}

#[tokio::test]
async fn every_tier_refuses_huge_pages_unless_the_topology_allows_them() {
    for (extra, allowed) in [("", false), ("[memory]\nhuge_pages = true", true)] {
        let topology = TestTopology::with_extra(&[("USA_0", 1)], ALONE, extra);
        let shard = topology.start_shard("USA_0", 0).await;
        let aggregator = topology.start_datacenter_aggregator("USA_0").await;
        let global = topology.start_global_aggregator().await;
        for process in [&shard, &aggregator, &global] {
            assert_eq!(
                huge_pages_enabled(process.pid().unwrap()),
                allowed,
                "{} with {extra:?}",
                process.name
            );
        }
    }
}

/// One host opening idle sockets cannot take the connections the tiers pull with: it gets
/// `max_connections_per_peer` of them, and the datacenter aggregator started after the flood
/// still pulls the node (its connections come from another address).
#[tokio::test]
async fn one_host_flooding_a_node_with_idle_sockets_leaves_room_for_the_tiers() {
    let topology = alone_http("max_connections = 300\nmax_connections_per_peer = 100");
    let node = topology.start_shard("USA_0", 0).await;
    assert_eq!(node.api().add("flooded", 5).await.unwrap().0, 200);
    // 400 idle sockets from 127.0.0.2: more than the whole listener takes.
    // Given 10 s each: none is given up early, each counts against the host's share.
    let flood = flood::from_one_host(node.addr, 400, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _aggregator = flood::still_pulled(&topology, "flooded", Duration::from_secs(5)).await;
    // The node still answers its clients (from 127.0.0.1).
    assert_eq!(node.api().value("flooded").await, 5);
    drop(flood);
}
