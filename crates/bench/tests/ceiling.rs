//! `bench-ceiling --durable`: the durable ceiling answers a request only once the request is in
//! its log on disk.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use geocount_net::HttpClient;
use hyper::Method;
use hyper::body::Bytes;

/// The server, killed when the test ends, passing or not.
struct Ceiling(Child);

impl Drop for Ceiling {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_durable_answer_comes_after_the_request_is_in_the_log() {
    let address: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _ceiling = Ceiling(
        Command::new(env!("CARGO_BIN_EXE_bench-ceiling"))
            .arg(address.to_string())
            .arg("--durable")
            .arg(dir.path())
            .arg("--lanes")
            .arg("2")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let client = HttpClient::new(Duration::from_secs(5));
    let base = format!("http://{address}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut answers = Vec::new();
    for n in 0..4 {
        let target = format!("/counter/ceiling-{n}/write?op=INCREMENT");
        let answer = loop {
            match client
                .send(
                    Method::PATCH,
                    &format!("{base}{target}"),
                    &[],
                    Bytes::from_static(b"body"),
                )
                .await
            {
                Ok(answer) => break answer,
                Err(error) => {
                    assert!(Instant::now() < deadline, "never answered: {error}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        answers.push(answer.status);
        // Answered, so already written: each lane's log holds its requests with their bodies.
        let logs: Vec<u8> = (0..2)
            .flat_map(|lane| std::fs::read(dir.path().join(format!("ceiling-{lane}.log"))).unwrap())
            .collect();
        let logged = format!("{target}\u{4}\0\0\0body");
        assert!(
            logs.windows(logged.len()).any(|w| w == logged.as_bytes()),
            "{target} is not in the logs after its answer"
        );
    }
    assert_eq!(answers, [200; 4]);
    for lane in 0..2 {
        let log = std::fs::read(dir.path().join(format!("ceiling-{lane}.log"))).unwrap();
        assert!(
            log.windows(9).any(|w| w == b"/counter/"),
            "lane {lane} took no request"
        );
    }
}
