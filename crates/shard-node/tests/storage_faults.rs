//! A shard node (the library's `run`, over real HTTP on loopback) on a disk whose log appends
//! and fsyncs fail on demand: a full disk refuses writes with 507 and recovers by itself (and
//! keeps what it learned from its peers meanwhile); a failed fsync stops the node taking writes
//! (503) until it restarts; nothing refused is ever applied, nothing acknowledged is ever lost.

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use geocount_model::{SystemClock, Topology};
use geocount_net::{HttpClient, tcp_connector};
use hyper::Method;
use serde_json::Value;
use shard_node::{AppendFile, Disk, NodeConfig, OsDisk, RestoreMode, Storage, Workers};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What fails, switched on and off by the test.
#[derive(Debug, Default)]
struct Faults {
    /// Appends write half their bytes, then fail with ENOSPC.
    disk_full: AtomicBool,
    /// fsyncs fail with EIO.
    fsync_fails: AtomicBool,
}

/// The OS disk, with the faults above on its log segments.
#[derive(Debug)]
struct FaultyDisk(Arc<Faults>);

#[derive(Debug)]
struct FaultyFile {
    file: Box<dyn AppendFile>,
    faults: Arc<Faults>,
}

impl Disk for FaultyDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsDisk.create_dir_all(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        OsDisk.exists(path)
    }
    fn file_names(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsDisk.file_names(dir)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        OsDisk.read(path)
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        Ok(Box::new(FaultyFile {
            file: OsDisk.open_append(path)?,
            faults: self.0.clone(),
        }))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        OsDisk.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsDisk.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsDisk.sync_dir(dir)
    }
    fn open_database(&self, path: &Path) -> Result<redb::Database, redb::DatabaseError> {
        OsDisk.open_database(path)
    }
}

impl AppendFile for FaultyFile {
    fn size(&self) -> io::Result<u64> {
        self.file.size()
    }
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.faults.disk_full.load(Ordering::SeqCst) {
            // A record torn by the full disk: half of it reached the file.
            self.file.write_all(&bytes[..bytes.len() / 2])?;
            return Err(io::Error::from(ErrorKind::StorageFull));
        }
        self.file.write_all(bytes)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        if self.faults.fsync_fails.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected EIO on fsync"));
        }
        self.file.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn reserve(&mut self, len: u64) -> io::Result<()> {
        self.file.reserve(len)
    }
}

/// One shard node running in this process on a fixed data directory.
struct Node {
    base: String,
    client: HttpClient,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// A topology of datacenter `USA_0` with a shard node on each of `listeners`; its aggregator's
/// port is never listened on.
fn topology(listeners: &[&tokio::net::TcpListener]) -> String {
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let shards: Vec<String> = listeners
        .iter()
        .map(|l| format!("\"{}\"", l.local_addr().unwrap()))
        .collect();
    format!(
        "[global]\nlisten = \"127.0.0.1:1\"\n[shard]\nrestore_timeout_ms = 100\n\
         [[datacenters]]\nname = \"USA_0\"\naggregator = \"{unused}\"\nshards = [{}]\n",
        shards.join(", ")
    )
}

impl Node {
    /// A node alone in its datacenter.
    async fn start(dir: &Path, faults: &Arc<Faults>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let toml = topology(&[&listener]);
        Self::start_slot(&toml, listener, 0, dir, faults).await
    }

    /// The node of slot `slot` of topology `toml`, on `listener`.
    async fn start_slot(
        toml: &str,
        listener: tokio::net::TcpListener,
        slot: u32,
        dir: &Path,
        faults: &Arc<Faults>,
    ) -> Self {
        let addr: SocketAddr = listener.local_addr().unwrap();
        let topology = Topology::from_toml("faults.toml", toml).unwrap();
        let mut config = NodeConfig::from_topology(
            &topology,
            Path::new("faults.toml"),
            "USA_0",
            slot,
            Some(dir.to_owned()),
        )
        .unwrap();
        // A node alone: its slot is new, with no datacenter to restore it from.
        config.restore = RestoreMode::Empty;
        let storage = Storage {
            disk: Arc::new(FaultyDisk(faults.clone())),
            workers: Workers::Threads,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            shard_node::run(
                config,
                listener,
                Arc::new(SystemClock),
                tcp_connector(),
                storage,
                shutdown,
            )
            .await
            .expect("the node runs");
        });
        let node = Self {
            base: format!("http://{addr}"),
            client: HttpClient::new(Duration::from_secs(10)),
            stop: Some(stop),
            task,
        };
        for _ in 0..200 {
            if node.get("/healthz").await.0 == 200 {
                return node;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the node never became healthy");
    }

    async fn send(&self, method: Method, path: &str, body: &str) -> (u16, Value) {
        let answer = self
            .client
            .send(
                method,
                &format!("{}{path}", self.base),
                &[],
                body.to_owned().into(),
            )
            .await
            .unwrap();
        (answer.status.as_u16(), answer.json())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        match self.client.get(&format!("{}{path}", self.base)).await {
            Ok(answer) => (answer.status.as_u16(), answer.json()),
            Err(_) => (0, Value::Null),
        }
    }

    /// The value of the unlabelled metric `name` in `/metrics`.
    async fn metric(&self, name: &str) -> f64 {
        let answer = self.client.get(&format!("{}/metrics", self.base)).await;
        let text = String::from_utf8_lossy(&answer.unwrap().body).into_owned();
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    async fn add(&self, id: &str, delta: i64) -> (u16, Value) {
        let path = format!("/counter/{id}/write?op=INCREMENT");
        self.send(Method::PATCH, &path, &format!(r#"{{"delta": {delta}}}"#))
            .await
    }

    async fn value(&self, id: &str) -> i64 {
        let (status, body) = self.get(&format!("/counter/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body["value"].as_i64().unwrap()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().expect("running").send(());
        self.task.await.unwrap();
    }
}

/// A node on a fresh directory (returned with it and its faults) whose counter `c` holds 5.
async fn node_holding_five() -> (tempfile::TempDir, Arc<Faults>, Node) {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    let node = Node::start(dir.path(), &faults).await;
    assert_eq!(node.add("c", 5).await.0, 200);
    (dir, faults, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_with_507_and_recovers_by_itself() {
    let (dir, faults, node) = node_holding_five().await;

    faults.disk_full.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        let (status, body) = node.add("c", 3).await;
        assert_eq!(status, 507, "{body}");
        assert!(body["error"].as_str().unwrap().contains("full"), "{body}");
    }
    let (status, body) = node
        .send(Method::POST, "/counter", r#"{"id": "new"}"#)
        .await;
    assert_eq!(status, 507, "{body}");
    let (status, body) = node.get("/healthz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(node.metric("geocount_shard_storage_full").await, 1.0);
    assert_eq!(node.metric("geocount_shard_fsync_failed").await, 0.0);
    assert_eq!(node.value("c").await, 5, "nothing refused was applied");

    // Space returns: the next write simply succeeds.
    faults.disk_full.store(false, Ordering::SeqCst);
    assert_eq!(node.add("c", 2).await.0, 200);
    assert_eq!(node.value("c").await, 7);
    assert_eq!(node.get("/healthz").await.0, 200);
    assert_eq!(node.metric("geocount_shard_storage_full").await, 0.0);
    node.stop().await;

    // The torn halves were cut off: the log replays to exactly what was acknowledged.
    let node = Node::start(dir.path(), &faults).await;
    assert_eq!(node.value("c").await, 7);
    assert_eq!(node.get("/counter/new").await.0, 404);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_writes_until_a_restart() {
    let (dir, faults, node) = node_holding_five().await;

    faults.fsync_fails.store(true, Ordering::SeqCst);
    let (status, body) = node.add("c", 3).await;
    assert_eq!(status, 500, "{body}");
    // Even once fsync works again, the node takes no writes: it cannot know what the failed
    // fsync left on disk.
    faults.fsync_fails.store(false, Ordering::SeqCst);
    let (status, body) = node.add("c", 1).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("restarted"),
        "{body}"
    );
    let (status, _) = node
        .send(Method::POST, "/counter", r#"{"id": "new"}"#)
        .await;
    assert_eq!(status, 503);
    let (status, body) = node.get("/healthz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains("fsync"), "{body}");
    assert_eq!(node.metric("geocount_shard_fsync_failed").await, 1.0);
    assert_eq!(node.metric("geocount_shard_storage_full").await, 0.0);
    assert_eq!(node.value("c").await, 5, "reads keep working");
    node.stop().await;

    // A restart replays what the disk holds and takes writes again.
    let node = Node::start(dir.path(), &faults).await;
    assert_eq!(node.value("c").await, 5);
    assert_eq!(node.add("c", 1).await.0, 200);
    assert_eq!(node.value("c").await, 6);
    assert_eq!(node.get("/healthz").await.0, 200);
    assert_eq!(node.metric("geocount_shard_fsync_failed").await, 0.0);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptions_learned_while_the_disk_is_full_are_kept_once_space_returns() {
    let (dirs, faults) = (
        [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()],
        [Arc::new(Faults::default()), Arc::new(Faults::default())],
    );
    let listeners = [
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    ];
    let toml = topology(&[&listeners[0], &listeners[1]]);
    let [first, second] = listeners;
    let full = Node::start_slot(&toml, first, 0, dirs[0].path(), &faults[0]).await;
    let peer = Node::start_slot(&toml, second, 1, dirs[1].path(), &faults[1]).await;

    faults[0].disk_full.store(true, Ordering::SeqCst);
    let (status, body) = peer
        .send(
            Method::POST,
            "/counter",
            r#"{"id": "launch", "windowSeconds": 60}"#,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // The full node pulls the description and cannot log it: its health says so.
    wait_for("the full node to fail logging the description", || async {
        full.get("/healthz").await.0 == 503
    })
    .await;
    assert_eq!(full.get("/counter/launch").await.0, 404);

    // Space returns: the description is logged and known without another pull delivering it.
    faults[0].disk_full.store(false, Ordering::SeqCst);
    wait_for("the full node to know the description", || async {
        full.get("/counter/launch").await.0 == 200
    })
    .await;
    let (_, route) = full.get("/counter/launch/route").await;
    assert_eq!(route["numberOfShards"], 1, "{route}");
    full.stop().await;

    // It is durable there: a restart (before any pull) knows it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let alone = Node::start_slot(
        &topology(&[&listener]),
        listener,
        0,
        dirs[0].path(),
        &faults[0],
    )
    .await;
    let (status, body) = alone.get("/counter/launch").await;
    assert_eq!((status, body["value"].as_i64()), (200, Some(0)), "{body}");
    alone.stop().await;
    peer.stop().await;
}

/// Polls `check` every 20 ms until it holds; panics after 5 s.
async fn wait_for<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..250 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}
