//! The status page in a real browser: headless Chromium, driven through chromedriver by
//! Selenium (`tests/status_page/page.py`), against a running cluster. The global
//! aggregator's page, without `[auth]` (over TLS with `E2E_TLS=1`), then a datacenter
//! aggregator's with `[auth]` and `[tls]` (the token typed into the page): each loads with no
//! console error, shows every datacenter with its slots, shows a bounded counter's value and
//! rights, and shows a write made after it loaded. A hung shard node shows as unreachable
//! in its datacenter's status, which still answers at once. Needs what `scripts/browser-tools.sh`
//! installs (`scripts/test.sh` runs it); without it the test says why and passes.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use geocount_test_support::access::{ADMIN, READER, SECRET, auth_toml};
use geocount_test_support::{Api, TestCluster, TestTopology, tls};
use serde_json::json;

/// The environment variable naming the python that has Selenium (default `python3`).
const PYTHON_ENV: &str = "E2E_BROWSER_PYTHON";

/// Shard nodes start empty; they need not wait long for peers to hand back their slot.
const FAST_START: &str = "restore_timeout_ms = 200";

/// How long the page may take to show what the test waits for (the script waits 20 s for
/// each step itself).
const STEP: Duration = Duration::from_secs(60);

/// The python with Selenium, or why the browser test cannot run here.
fn browser_python() -> Result<String, String> {
    let install = "scripts/browser-tools.sh installs it";
    for tool in ["chromium", "chromedriver"] {
        let found = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .any(|dir| dir.join(tool).is_file());
        if !found {
            return Err(format!("{tool} is missing ({install})"));
        }
    }
    let python = std::env::var(PYTHON_ENV).unwrap_or_else(|_| "python3".to_owned());
    let check = Command::new(&python)
        .args(["-c", "import selenium.webdriver"])
        .output();
    match check {
        Ok(output) if output.status.success() => Ok(python),
        _ => Err(format!(
            "{python} lacks the Python package selenium ({install})"
        )),
    }
}

/// The browser script, running: its stdout lines as they come.
struct Page {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Page {
    /// Opens `url` in the browser (with `token` typed in, if given), expecting every one of
    /// `datacenters`, and looks up `counter`.
    fn open(
        python: &str,
        url: &str,
        datacenters: &[&str],
        counter: &str,
        token: Option<&str>,
    ) -> Self {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("status_page/page.py");
        let mut command = Command::new(python);
        command
            .arg(script)
            .args(["--url", url, "--counter", counter])
            .args(["--datacenters", &datacenters.join(",")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        if url.starts_with("https:") {
            command.arg("--insecure-tls");
        }
        let mut child = command.spawn().expect("run the browser script");
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The rest of the line that starts with `word `, waiting for it; fails with everything
    /// the script said when another line or none comes.
    fn expect(&mut self, word: &str) -> String {
        loop {
            let line = self.lines.recv_timeout(STEP).unwrap_or_else(|_| {
                panic!(
                    "no {word} from the browser script:\n{}",
                    self.seen.join("\n")
                )
            });
            self.seen.push(line.clone());
            if let Some(rest) = line.strip_prefix(word) {
                return rest.trim().to_owned();
            }
            assert!(
                !line.starts_with("FAIL"),
                "the browser script failed:\n{}",
                self.drain()
            );
        }
    }

    fn drain(&mut self) -> String {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }

    /// Tells the script the page should come to show `value`.
    fn tell(&mut self, value: i64) {
        let stdin = self.stdin.as_mut().expect("open");
        writeln!(stdin, "EXPECT {value}").expect("write to the browser script");
        stdin.flush().expect("flush");
    }

    /// Ends the script's input and checks it ends well.
    fn finish(mut self) {
        drop(self.stdin.take());
        self.expect("OK");
        let status = self.child.wait().expect("wait for the browser script");
        assert!(status.success(), "{status}:\n{}", self.seen.join("\n"));
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // On a failed assertion: no browser outlives the test.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes bounded counter `id` (0..=1000) through `admin` and adds `delta` to it.
async fn bounded_counter(admin: &Api, id: &str, delta: i64) {
    let (status, body) = admin.create(json!({"id": id, "min": 0, "max": 1000})).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = admin.add(id, delta).await.expect("write");
    assert_eq!(status, 200, "{body}");
}

/// `http` or `https`, as the test process's clients speak.
fn scheme() -> &'static str {
    if tls::enabled() { "https" } else { "http" }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_pages_show_every_datacenter_and_follow_writes() {
    let python = match browser_python() {
        Ok(python) => python,
        Err(why) => {
            println!("skipped: the status page's browser test cannot run here: {why}");
            return;
        }
    };

    // The global aggregator's page: open, every datacenter.
    {
        let topology = TestTopology::new(&[("USA_0", 2), ("ASIA_0", 1)], FAST_START);
        let cluster = TestCluster::start(topology).await;
        let usa = cluster.shards[0][0].api();
        bounded_counter(&usa, "page:seats", 5).await;
        let global = cluster.global.api();
        let read = "/counter/page:seats?allow_partial=true";
        (global.read_until(STEP, read, |s, body| s == 200 && body["value"] == 5)).await;
        let url = format!("{}://{}/", scheme(), cluster.global.addr);
        let mut page = Page::open(&python, &url, &["USA_0", "ASIA_0"], "page:seats", None);
        assert_eq!(page.expect("VALUE"), "5");
        // A write in the other datacenter, made while the page is open: it shows it.
        let asia = cluster.shards[1][0].api();
        asia.add("page:seats", 7).await.expect("write");
        page.tell(12);
        assert_eq!(page.expect("SEEN"), "12");
        page.finish();

        // A hung shard node: the status still answers at once, with that node unreachable
        // in its datacenter's view rather than the datacenter missing.
        let hung = &cluster.shards[0][1];
        hung.pause();
        // Every answer is quick; one asked while a reply of the node was already on its way,
        // or within the second an earlier gathering of the tier below is shared
        // (`fanout::SHARED_FOR`), may still show it, so it is asked for a few seconds.
        let mut body = serde_json::Value::Null;
        let deadline = std::time::Instant::now() + Duration::from_secs(8);
        while std::time::Instant::now() < deadline {
            let asked = std::time::Instant::now();
            let (status, answer) = global.get_json("/status").await;
            let took = asked.elapsed();
            assert_eq!(status, 200, "{answer}");
            assert!(took < Duration::from_secs(3), "took {took:?}");
            body = answer;
            if body["datacenters"][0]["view"]["slots"][1]["error"].is_string() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        hung.resume();
        let slots = &body["datacenters"][0]["view"]["slots"];
        assert!(slots[1]["error"].is_string(), "{body}");
        assert_eq!(slots[0]["health"]["status"], "ok", "{body}");
        assert_eq!(body["datacenters"][1]["name"], "ASIA_0", "{body}");
    }

    // A datacenter aggregator's page with [auth] and [tls]: the token typed into the page.
    tls::force();
    {
        let topology = TestTopology::with_extra(&[("USA_0", 2)], FAST_START, &auth_toml(SECRET));
        assert!(topology.topology.tls.is_some(), "a [tls] section");
        let cluster = TestCluster::start(topology).await;
        let admin = cluster.shards[0][1].api().with_token(ADMIN);
        bounded_counter(&admin, "page:tickets", 3).await;
        let aggregator = cluster.aggregator(0);
        let reader = aggregator.api().with_token(READER);
        let read = "/counter/page:tickets";
        (reader.read_until(STEP, read, |s, body| s == 200 && body["value"] == 3)).await;
        // The page itself is open; what it reads is not.
        let (status, _) = aggregator.api().get_json("/status").await;
        assert_eq!(status, 401);
        // The global tier passes the token on to the datacenter aggregator's /status.
        let global = cluster.global.api().with_token(READER);
        let (status, body) = global.get_json("/status").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["datacenters"][0]["view"]["datacenter"], "USA_0",
            "{body}"
        );
        let url = format!("https://{}/", aggregator.addr);
        let mut page = Page::open(&python, &url, &["USA_0"], "page:tickets", Some(READER));
        assert_eq!(page.expect("VALUE"), "3");
        admin.add("page:tickets", 4).await.expect("write");
        page.tell(7);
        assert_eq!(page.expect("SEEN"), "7");
        page.finish();
    }
}
