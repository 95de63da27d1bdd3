//! TLS end to end: a cluster whose every listener and every call between tiers is
//! TLS carries a write to the global aggregator; a plain-HTTP client and a client trusting
//! another CA get nothing; unusable certificate files are one-line configuration errors; the
//! certificates `scripts/make-certs.sh` makes are accepted; clients holding every connection
//! they may have leave the tiers theirs; a puller sends nothing to another process than the
//! one it means to pull.
//!
//! Every test here turns TLS on for the whole test process ([`tls::force`]), whatever
//! `E2E_TLS` says.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use geocount_net::tls::{TierTls, client_config, tls_connector};
use geocount_net::{Connect, Connecting, connecting, error_response};
use geocount_test_support::flood;
use geocount_test_support::process::{binary, config_error};
use geocount_test_support::tls::{self, TestCa};
use geocount_test_support::{Api, TestTopology, eventually};
use hyper::StatusCode;
use serde_json::json;

/// Shard nodes start empty; they need not wait long for peers to hand back their slot.
const FAST_START: &str = "restore_timeout_ms = 200";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_crosses_every_tier_over_tls_and_strangers_get_nothing() {
    tls::force();
    let topology = TestTopology::new(&[("USA_0", 2)], FAST_START);
    let settings = topology.topology.tls.as_ref().expect("a [tls] section");
    assert!(settings.cert("DC_USA_0_VAL_1").exists());
    let global = topology.start_global_aggregator().await;
    let _aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let shard = topology.start_shard("USA_0", 0).await;
    let _peer = topology.start_shard("USA_0", 1).await;

    // Two slots, round robin: half the writes are forwarded to the peer, over TLS too.
    let api = shard.api();
    api.created(json!({"id": "tls:likes", "numberOfShards": 2}))
        .await;
    for _ in 0..10 {
        let (status, body) = api.add("tls:likes", 3).await.expect("write over TLS");
        assert_eq!(status, 200, "{body}");
    }
    global
        .api()
        .read_until(
            Duration::from_secs(10),
            "/counter/tls:likes",
            |status, body| status == 200 && body["value"] == 30,
        )
        .await;

    // Plain HTTP to a TLS listener: the handshake fails, no answer comes.
    let plain = Api::plain(shard.addr).get("/healthz").await;
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");
    // A client that trusts another CA refuses the node's certificate before sending anything.
    let stranger = Api::with_connector(shard.addr, TestCa::new("another CA").connector());
    let error = stranger.get("/healthz").await.unwrap_err();
    assert!(error.is_connect(), "{error:?}");
    // Neither disturbed the node.
    let health = api.get("/healthz").await.expect("health over TLS");
    assert_eq!(health.status, 200);
    let log = std::fs::read_to_string(&shard.log).unwrap();
    assert!(log.contains("TLS handshake failed"), "{log}");
}

#[tokio::test]
async fn unusable_certificate_files_are_one_line_configuration_errors() {
    tls::force();
    let topology = TestTopology::new(&[("USA_0", 1)], FAST_START);
    let settings = topology.topology.tls.clone().expect("a [tls] section");
    let config = topology.path.to_str().unwrap();
    let binary = binary("shard-node");
    let run = |env: &[(&str, &str)]| {
        config_error(
            Command::new(&binary)
                .args(["--config", config, "--dc", "USA_0", "--slot", "0"])
                .envs(env.iter().copied()),
        )
    };

    let stderr = run(&[("GEOCOUNT_TLS__CA", "/nonexistent/ca.pem")]);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "shard-node: {config}: tls.ca: /nonexistent/ca.pem: cannot read: No such file or \
             directory (os error 2)"
        )
    );

    // Another process's certificate and key: they go together, but name that process.
    let cert = settings.cert("DC_USA_0_VAL_0");
    std::fs::copy(settings.cert("aggregator_USA_0"), &cert).unwrap();
    std::fs::copy(
        settings.key("aggregator_USA_0"),
        settings.key("DC_USA_0_VAL_0"),
    )
    .unwrap();
    let stderr = run(&[]);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "shard-node: {config}: tls.cert_dir: {}: names process \"aggregator_USA_0\", not \
             \"DC_USA_0_VAL_0\": it needs the URI geocount:DC_USA_0_VAL_0 (scripts/make-certs.sh \
             writes it)",
            cert.display()
        )
    );

    let key = settings.key("DC_USA_0_VAL_0");
    std::fs::write(&key, "not a key\n").unwrap();
    let stderr = run(&[]);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "shard-node: {config}: tls.cert_dir: {}: no private key in it",
            key.display()
        )
    );

    std::fs::remove_file(settings.cert("DC_USA_0_VAL_0")).unwrap();
    let stderr = run(&[]);
    assert!(
        stderr.contains("tls.cert_dir") && stderr.contains("DC_USA_0_VAL_0.pem"),
        "{stderr}"
    );
}

#[tokio::test]
async fn certificates_from_the_script_are_accepted() {
    tls::force();
    let topology = TestTopology::new(&[("USA_0", 1)], FAST_START);
    // Replace the test CA's certificates with the script's, for every process of the topology.
    let certs = topology.dir().join("script-certs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/make-certs.sh");
    let output = Command::new(&script)
        .arg(&certs)
        .arg(&topology.path)
        .output()
        .expect("run scripts/make-certs.sh (it needs openssl)");
    assert!(
        output.status.success(),
        "make-certs.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for name in ["global", "aggregator_USA_0", "DC_USA_0_VAL_0"] {
        assert!(certs.join(format!("{name}.pem")).exists(), "{name}");
        assert!(certs.join(format!("{name}-key.pem")).exists(), "{name}");
        // Each certificate names its own process.
        let sans = Command::new("openssl")
            .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
            .arg(certs.join(format!("{name}.pem")))
            .output()
            .unwrap();
        let sans = String::from_utf8_lossy(&sans.stdout);
        assert!(
            sans.contains(&format!("URI:geocount:{name}")),
            "{name}: {sans}"
        );
    }
    // The CA's key stays out of the directory every process reads.
    assert!(
        !certs.join("ca-key.pem").exists(),
        "the CA key is in the certificate directory"
    );
    assert!(topology.dir().join("script-certs-ca/ca-key.pem").exists());
    let text = std::fs::read_to_string(&topology.path).unwrap();
    let settings = topology.topology.tls.as_ref().unwrap();
    let text = text
        .replace(
            &settings.ca.display().to_string(),
            &certs.join("ca.pem").display().to_string(),
        )
        .replace(
            &format!("cert_dir = \"{}\"", settings.cert_dir.display()),
            &format!("cert_dir = \"{}\"", certs.display()),
        );
    std::fs::write(&topology.path, text).unwrap();

    // The node serves with the script's certificate: a client trusting the script's CA gets
    // answers, one trusting the test CA does not.
    let addr = topology.shard_addr("USA_0", 0);
    let _node = KillOnDrop(
        Command::new(binary("shard-node"))
            .args(["--config", topology.path.to_str().unwrap()])
            .args(["--dc", "USA_0", "--slot", "0", "--restore", "empty"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let connector = tls_connector(
        geocount_net::tcp_connector(),
        client_config(&certs.join("ca.pem")).unwrap(),
    );
    let api = Api::with_connector(addr, connector);
    eventually(Duration::from_secs(10), "health over TLS", || async {
        let answer = api.get("/healthz").await.ok()?;
        (answer.status == 200).then_some(())
    })
    .await;
    let test_ca = Api::new(addr).get("/healthz").await;
    assert!(
        test_ca.is_err_and(|e| e.is_connect()),
        "a client of another CA was answered"
    );
}

/// A child process killed when dropped, so that a failing test leaves none behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One host opening sockets and never starting their TLS handshakes cannot stop a node from
/// accepting: past its share of handshakes under way, its new connections are closed, and the
/// datacenter aggregator started after the flood (from another address) still pulls the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_handshakes_from_one_host_do_not_stop_a_node_accepting() {
    tls::force();
    let topology = TestTopology::new(&[("USA_0", 1)], FAST_START);
    let node = topology.start_shard("USA_0", 0).await;
    let (status, _) = node.api().add("tls:flooded", 5).await.unwrap();
    assert_eq!(status, 200);
    // More silent sockets from 127.0.0.2 than a listener runs handshakes at once.
    // (A connect the listen backlog holds is given up after 100 ms: the flood need not wait.)
    let flood = flood::from_one_host(node.addr, 1_200, Duration::from_millis(100)).await;
    // Well inside the 10 s a silent handshake may take.
    let _aggregator = flood::still_pulled(&topology, "tls:flooded", Duration::from_secs(3)).await;
    drop(flood);
}

/// Connections from 127.0.0.2: another host, as far as the limits per address go.
struct FromSecondHost;

impl Connect for FromSecondHost {
    fn connect(&self, host: &str, port: u16) -> Connecting {
        let addr = format!("{host}:{port}").parse::<SocketAddr>();
        connecting(async move {
            let addr = addr.map_err(std::io::Error::other)?;
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind("127.0.0.2:0".parse().unwrap())?;
            socket.connect(addr).await
        })
    }
}

/// Clients holding every connection a datacenter aggregator gives its clients (TLS done, then
/// idle) do not starve the tiers: the global aggregator, started after them, still pulls it
/// over a connection of the tiers' own budget, and its reads stay fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_holding_every_connection_leave_the_tiers_theirs() {
    tls::force();
    let topology = TestTopology::single_with(
        FAST_START,
        "[http]\nmax_connections = 40\nmax_connections_per_peer = 40\n\
         header_read_timeout_ms = 60000",
    );
    let settings = topology.topology.tls.clone().expect("a [tls] section");
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let shard = topology.start_shard("USA_0", 0).await;
    assert_eq!(shard.api().add("tls:starved", 5).await.unwrap().0, 200);
    aggregator
        .api()
        .read_until(Duration::from_secs(10), "/counter/tls:starved", |s, b| {
            s == 200 && b["value"] == 5
        })
        .await;

    // 40 clients from 127.0.0.2 complete their handshake and send nothing.
    let flooder = tls_connector(
        Arc::new(FromSecondHost),
        client_config(&settings.ca).unwrap(),
    );
    let port = aggregator.addr.port();
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(
            flooder
                .connect("127.0.0.1", port)
                .await
                .expect("a TLS connection"),
        );
    }
    // The clients' budget is spent: one more client, from anywhere, is turned away.
    let refused = eventually(
        Duration::from_secs(5),
        "the client budget spent",
        || async { aggregator.api().get("/healthz").await.err() },
    )
    .await;
    assert!(!refused.to_string().is_empty());

    let global = topology.start_global_aggregator().await;
    let body = global
        .api()
        .read_until(Duration::from_secs(10), "/counter/tls:starved", |s, b| {
            s == 200 && b["value"] == 5
        })
        .await;
    assert_eq!(body["datacenters"]["USA_0"]["value"], 5, "{body}");
    // Still fresh a while later: the pulls keep going.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, body) = global.api().global_read("tls:starved", "").await;
    assert_eq!(status, 200, "{body}");
    drop(flood);
}

/// Another process of the cluster serving at the global aggregator's address (its certificate
/// signed by the cluster CA and valid for 127.0.0.1) is never pulled: the datacenter aggregator
/// expects the global aggregator's certificate there, and sends nothing to any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_puller_sends_nothing_to_another_process_at_its_sources_address() {
    tls::force();
    let topology = TestTopology::new(&[("USA_0", 1)], FAST_START);
    let settings = topology.topology.tls.clone().expect("a [tls] section");
    let node = "DC_USA_0_VAL_0";
    let impostor = TierTls::load(&settings.ca, &settings.cert(node), &settings.key(node)).unwrap();
    let listener = tokio::net::TcpListener::bind(topology.topology.global.listen)
        .await
        .unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let handler = move |_request| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { error_response(StatusCode::NOT_FOUND, "an impostor") }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(geocount_net::serve(
        impostor.listener(listener),
        handler,
        async {
            let _ = stopped.await;
        },
    ));
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    // It pulls the global aggregator every 250 ms for descriptions.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "requests reached the impostor"
    );
    assert!(aggregator.api().get("/healthz").await.is_ok());
    let _ = stop.send(());
    server.await.unwrap();
}
