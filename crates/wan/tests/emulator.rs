//! The emulator end to end: the real proxies and control API (`geocount_wan::run`) in-process
//! on loopback, every address a free port, in front of small echo and sink servers; and the
//! real binary for its configuration errors and its graceful stop.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use geocount_net::{Answer, HttpClient};
use geocount_wan::WanConfig;
use hyper::Method;
use hyper::body::Bytes;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server on a free port that echoes every byte back; counts the connections it accepted.
async fn echo_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, accepted)
}

/// A server on a free port that reads each connection to its end, then answers with the number
/// of bytes it read (8 bytes, big-endian).
async fn sink_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut total = 0u64;
                let mut buffer = vec![0; 64 * 1024];
                while let Ok(n) = stream.read(&mut buffer).await {
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                }
                let _ = stream.write_all(&total.to_be_bytes()).await;
            });
        }
    });
    addr
}

/// One link to start: name, target, delay, jitter, bandwidth.
struct LinkSpec {
    name: &'static str,
    target: SocketAddr,
    delay_ms: u64,
    jitter_ms: u64,
    bandwidth: u64,
}

impl LinkSpec {
    fn new(name: &'static str, target: SocketAddr, delay_ms: u64) -> Self {
        Self {
            name,
            target,
            delay_ms,
            jitter_ms: 0,
            bandwidth: 0,
        }
    }
}

/// The emulator running in this process, stopped when dropped.
struct Running {
    control: SocketAddr,
    client: HttpClient,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), geocount_wan::WanError>>>,
}

impl Running {
    /// Writes the links as a TOML configuration (every proxy on port 0), and runs it.
    async fn start(links: &[LinkSpec]) -> Self {
        let control_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let control = control_listener.local_addr().unwrap();
        let mut text = format!("control = \"{control}\"\n");
        for link in links {
            text.push_str(&format!(
                "\n[[links]]\nname = \"{}\"\nlisten = \"127.0.0.1:0\"\ntarget = \"{}\"\n\
                 delay_ms = {}\njitter_ms = {}\nbandwidth_bytes_per_sec = {}\n",
                link.name, link.target, link.delay_ms, link.jitter_ms, link.bandwidth
            ));
        }
        let config = WanConfig::from_toml("test.toml", &text).expect("valid configuration");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(geocount_wan::run(config, control_listener, async {
            let _ = stopped.await;
        }));
        Self {
            control,
            client: HttpClient::new(Duration::from_secs(5)),
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn request(&self, method: Method, path: &str, body: &str) -> Answer {
        self.client
            .send(
                method,
                &format!("http://{}{path}", self.control),
                &[],
                Bytes::from(body.to_owned()),
            )
            .await
            .expect("the control API answers")
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let answer = self.request(Method::GET, path, "").await;
        (answer.status.as_u16(), answer.json())
    }

    /// The address the proxy of link `name` listens on.
    async fn listen(&self, name: &str) -> SocketAddr {
        let (status, link) = self.get(&format!("/links/{name}")).await;
        assert_eq!(status, 200, "{link}");
        link["listen"].as_str().unwrap().parse().unwrap()
    }

    /// Stops the emulator and checks that `run` returned cleanly.
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        let result = tokio::time::timeout(Duration::from_secs(5), task).await;
        result.expect("run stops").unwrap().unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// One round trip of `message` through an echo server on an established connection.
async fn round_trip(stream: &mut TcpStream, message: &[u8]) -> Duration {
    let start = Instant::now();
    stream.write_all(message).await.unwrap();
    let mut echoed = vec![0; message.len()];
    stream.read_exact(&mut echoed).await.unwrap();
    assert_eq!(echoed, message);
    start.elapsed()
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Whether `stream` is closed: a read gives its end or an error (a reset) within 2 s, and no
/// data.
async fn is_closed(stream: &mut TcpStream) -> bool {
    let mut buffer = [0; 64];
    match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) | Err(_) => false,
    }
}

#[tokio::test]
async fn a_round_trip_takes_twice_the_one_way_delay() {
    let (echo, _) = echo_server().await;
    let wan = Running::start(&[
        LinkSpec::new("direct", echo, 0),
        LinkSpec::new("wan40", echo, 40),
    ])
    .await;
    let mut direct = connect(wan.listen("direct").await).await;
    let mut delayed = connect(wan.listen("wan40").await).await;
    let mut direct_rtts = Vec::new();
    let mut delayed_rtts = Vec::new();
    for i in 0..5u8 {
        direct_rtts.push(round_trip(&mut direct, &[i; 32]).await);
        delayed_rtts.push(round_trip(&mut delayed, &[i; 32]).await);
    }
    let shown = |rtts: &[Duration]| {
        rtts.iter()
            .map(|d| format!("{:.1}", ms(*d)))
            .collect::<Vec<_>>()
    };
    eprintln!("round trips, 0 ms link (ms): {:?}", shown(&direct_rtts));
    eprintln!("round trips, 40 ms link (ms): {:?}", shown(&delayed_rtts));
    for rtt in &delayed_rtts {
        assert!(
            *rtt >= Duration::from_millis(80),
            "{rtt:?} is under 2 × 40 ms"
        );
        assert!(
            *rtt < Duration::from_millis(200),
            "{rtt:?} is far over 2 × 40 ms"
        );
    }
    for rtt in &direct_rtts {
        assert!(
            *rtt < Duration::from_millis(40),
            "{rtt:?} through a link without delay"
        );
    }
    wan.stop().await;
}

#[tokio::test]
async fn jitter_varies_the_delay_without_reordering() {
    let (echo, _) = echo_server().await;
    let wan = Running::start(&[LinkSpec {
        jitter_ms: 20,
        ..LinkSpec::new("jittery", echo, 40)
    }])
    .await;
    let mut stream = connect(wan.listen("jittery").await).await;
    let mut rtts = Vec::new();
    for i in 0..10u8 {
        // Ten numbered bursts in a row: they must come back in order.
        let message: Vec<u8> = (0..200)
            .map(|j| i.wrapping_mul(31).wrapping_add(j))
            .collect();
        rtts.push(round_trip(&mut stream, &message).await);
    }
    eprintln!(
        "round trips, 40 ± 20 ms link (ms): {:?}",
        rtts.iter()
            .map(|d| format!("{:.1}", ms(*d)))
            .collect::<Vec<_>>()
    );
    for rtt in &rtts {
        // Each way is 20 to 60 ms.
        assert!(*rtt >= Duration::from_millis(40), "{rtt:?}");
        assert!(*rtt < Duration::from_millis(200), "{rtt:?}");
    }
    let (min, max) = (rtts.iter().min().unwrap(), rtts.iter().max().unwrap());
    assert!(
        *max - *min > Duration::from_millis(2),
        "no jitter: {rtts:?}"
    );
    wan.stop().await;
}

#[tokio::test]
async fn a_bandwidth_cap_paces_the_transfer() {
    let sink = sink_server().await;
    let wan = Running::start(&[LinkSpec {
        bandwidth: 100_000,
        ..LinkSpec::new("narrow", sink, 0)
    }])
    .await;
    let mut stream = connect(wan.listen("narrow").await).await;
    let start = Instant::now();
    stream.write_all(&vec![7; 100_000]).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = [0; 8];
    stream.read_exact(&mut answer).await.unwrap();
    let elapsed = start.elapsed();
    eprintln!("100 KB through a 100 KB/s link: {:.0} ms", ms(elapsed));
    assert_eq!(u64::from_be_bytes(answer), 100_000);
    assert!(
        elapsed >= Duration::from_millis(900),
        "{elapsed:?} is too fast"
    );
    assert!(
        elapsed < Duration::from_millis(2_000),
        "{elapsed:?} is too slow"
    );

    let (_, link) = wan.get("/links/narrow").await;
    assert_eq!(link["bytes_to_target"], 100_000);
    assert_eq!(link["bytes_to_client"], 8);
    wan.stop().await;
}

#[tokio::test]
async fn a_cut_link_carries_nothing_until_healed() {
    let (echo, accepted) = echo_server().await;
    let wan = Running::start(&[LinkSpec::new("fragile", echo, 5)]).await;
    let listen = wan.listen("fragile").await;
    let mut established = connect(listen).await;
    round_trip(&mut established, b"before").await;

    let answer = wan.request(Method::POST, "/links/fragile/cut", "").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["cut"], true);
    let started = Instant::now();
    assert!(
        is_closed(&mut established).await,
        "an established connection stays open"
    );
    eprintln!(
        "established connection closed {:.1} ms after the cut",
        ms(started.elapsed())
    );
    let carried_before = accepted.load(Ordering::SeqCst);

    // A new connection is accepted and closed at once: nothing reaches the target.
    for _ in 0..3 {
        // A refused connect would also carry nothing.
        if let Ok(mut stream) = TcpStream::connect(listen).await {
            let _ = stream.write_all(b"during").await;
            assert!(is_closed(&mut stream).await, "a cut link carried data");
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), carried_before);
    let (_, link) = wan.get("/links/fragile").await;
    assert_eq!(link["cut"], true);
    assert_eq!(link["connections_open"], 0);
    assert!(link["connections_refused"].as_u64().unwrap() >= 1, "{link}");

    let answer = wan.request(Method::POST, "/links/fragile/heal", "").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["cut"], false);
    let mut healed = connect(listen).await;
    let rtt = round_trip(&mut healed, b"after").await;
    assert!(rtt >= Duration::from_millis(10), "{rtt:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), carried_before + 1);
    wan.stop().await;
}

#[tokio::test]
async fn the_control_api_lists_links_and_changes_delay_at_run_time() {
    let (echo, _) = echo_server().await;
    let wan = Running::start(&[
        LinkSpec::new("global-to-asia", echo, 10),
        LinkSpec {
            jitter_ms: 3,
            bandwidth: 1_000_000,
            ..LinkSpec::new("asia-to-global", echo, 20)
        },
    ])
    .await;
    let (status, health) = wan.get("/healthz").await;
    assert_eq!((status, health), (200, json!({"status": "ok", "links": 2})));

    let (status, links) = wan.get("/links").await;
    assert_eq!(status, 200);
    let links = links["links"].as_array().unwrap().clone();
    assert_eq!(links.len(), 2);
    let second = &links[1];
    assert_eq!(second["name"], "asia-to-global");
    assert_eq!(second["target"], echo.to_string());
    assert_eq!(second["delay_ms"], 20);
    assert_eq!(second["jitter_ms"], 3);
    assert_eq!(second["bandwidth_bytes_per_sec"], 1_000_000);
    assert_eq!(second["cut"], false);
    for key in [
        "listen",
        "bytes_to_target",
        "bytes_to_client",
        "connections_open",
        "connections_total",
        "connections_refused",
    ] {
        assert!(!second[key].is_null(), "{key} is missing from {second}");
    }

    // The same established connection: 2 × 10 ms, then 2 × 60 ms once changed.
    let mut stream = connect(wan.listen("global-to-asia").await).await;
    let before = round_trip(&mut stream, b"ping").await;
    assert!(
        (Duration::from_millis(20)..Duration::from_millis(100)).contains(&before),
        "{before:?}"
    );
    let answer = wan
        .request(Method::PUT, "/links/global-to-asia", r#"{"delay_ms": 60}"#)
        .await;
    assert_eq!(answer.status, 200, "{}", answer.json());
    let link = answer.json();
    assert_eq!(
        (link["delay_ms"].clone(), link["jitter_ms"].clone()),
        (json!(60), json!(0))
    );
    let after = round_trip(&mut stream, b"ping").await;
    eprintln!(
        "round trip before the change (10 ms): {:.1} ms, after (60 ms): {:.1} ms",
        ms(before),
        ms(after)
    );
    assert!(
        (Duration::from_millis(120)..Duration::from_millis(250)).contains(&after),
        "{after:?}"
    );
    let (_, link) = wan.get("/links/global-to-asia").await;
    assert_eq!(link["bytes_to_target"], 8);
    assert_eq!(link["bytes_to_client"], 8);
    assert_eq!(link["connections_open"], 1);
    assert_eq!(link["connections_total"], 1);

    // Refusals: each a status and {"error"}.
    let refusals = [
        (
            Method::GET,
            "/links/nowhere",
            "",
            404,
            "no link named \"nowhere\"",
        ),
        (
            Method::POST,
            "/links/nowhere/cut",
            "",
            404,
            "known: global-to-asia, asia-to-global",
        ),
        (Method::GET, "/nothing", "", 404, "no such endpoint"),
        (
            Method::DELETE,
            "/links/global-to-asia",
            "",
            405,
            "method DELETE",
        ),
        (
            Method::GET,
            "/links/global-to-asia/cut",
            "",
            405,
            "not allowed",
        ),
        (
            Method::PUT,
            "/links/global-to-asia",
            r#"{"delay": 5}"#,
            400,
            "unknown field",
        ),
        (
            Method::PUT,
            "/links/global-to-asia",
            r#"{"delay_ms": 99999}"#,
            400,
            "delay_ms",
        ),
        (Method::PUT, "/links/global-to-asia", "", 400, "JSON object"),
    ];
    for (method, path, body, status, message) in refusals {
        let answer = wan.request(method.clone(), path, body).await;
        let error = answer.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(answer.status.as_u16(), status, "{method} {path}: {error}");
        assert!(error.contains(message), "{method} {path}: {error}");
    }
    let (_, link) = wan.get("/links/global-to-asia").await;
    assert_eq!(link["delay_ms"], 60, "a refused change changed the link");
    wan.stop().await;
}

#[tokio::test]
async fn a_link_that_cannot_listen_stops_the_emulator() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let text = format!(
        "control = \"127.0.0.1:1\"\n[[links]]\nname = \"busy\"\nlisten = \"{addr}\"\ntarget = \"127.0.0.1:2\"\n"
    );
    let config = WanConfig::from_toml("busy.toml", &text).unwrap();
    let control = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let error = geocount_wan::run(config, control, std::future::pending())
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with(&format!("link busy: cannot listen on {addr}: ")),
        "{error}"
    );
}

#[test]
fn the_binary_refuses_a_bad_config_in_one_line_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wan.toml");
    std::fs::write(
        &path,
        "control = \"127.0.0.1:9000\"\n[[links]]\nname = \"a\"\nlisten = \"127.0.0.1:9001\"\n\
         target = \"127.0.0.1:9002\"\ndelay_ms = \"slow\"\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_wan-emulator"))
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "wan-emulator: {}: links[0].delay_ms: invalid type",
            path.display()
        )),
        "{stderr}"
    );
}

#[test]
fn the_binary_serves_until_sigterm() {
    // Free ports: bind, note, release.
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (control, listen) = (free(), free());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wan.toml");
    std::fs::write(
        &path,
        format!(
            "control = \"{control}\"\n[[links]]\nname = \"a\"\nlisten = \"{listen}\"\n\
             target = \"127.0.0.1:9\"\ndelay_ms = 50\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wan-emulator"))
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let healthy = runtime.block_on(async {
        let client = HttpClient::new(Duration::from_secs(1));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(answer) = client.get(&format!("http://{control}/links")).await {
                return Some(answer.json());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    });
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    let links = healthy.expect("the binary never answered");
    assert_eq!(links["links"][0]["listen"], listen.to_string());
    assert_eq!(links["links"][0]["delay_ms"], 50);
    assert!(status.success(), "{status}");
}
