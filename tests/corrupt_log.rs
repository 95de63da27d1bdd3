//! End-to-end tests of a damaged log: the real `shard-node` refuses to start on a corrupt
//! segment and leaves it as it was, and `shard-node check` names the damage without changing
//! anything.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use geocount_test_support::process::{self, binary};
use geocount_test_support::{NodeProcess, TestTopology};
use serde_json::json;

/// A node alone (no restore source to wait for), whose log no checkpoint folds away while the
/// test runs.
const ALONE: &str = "restore_timeout_ms = 100\ncheckpoint_interval_ms = 600000";

/// Runs `shard-node check` on data directory `dir`, which must exit with `code`: its stdout.
fn check(dir: &Path, code: i32) -> String {
    let dir = dir.display().to_string();
    let output = run_to_exit(&["check", "--data-dir", &dir], Duration::from_secs(10));
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(code),
        "{stdout}{}",
        text(&output.stderr)
    );
    stdout
}

/// A node alone that took `times` keyed writes of 1 to counter `x`, one after another: one log
/// record each.
async fn node_with_ones(times: usize) -> (TestTopology, NodeProcess) {
    let topology = TestTopology::single(ALONE);
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    for n in 0..times {
        let (status, body) = api
            .write_keyed("x", json!({"delta": 1}), &format!("x-{n}"))
            .await;
        assert_eq!(status, 200, "write {n}: {body}");
    }
    (topology, node)
}

/// The newest log segment in `dir`.
fn newest_segment(dir: &Path) -> PathBuf {
    let mut segments: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read the data directory")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("wal-") && name.ends_with(".log"))
        })
        .collect();
    segments.sort();
    segments.pop().expect("a log segment")
}

/// Where the record holding byte `at` of a segment starts. A record is
/// `[payload length: u32 LE][crc32: u32 LE][payload]`.
fn record_start(bytes: &[u8], at: usize) -> usize {
    let mut start = 0;
    loop {
        let len = u32::from_le_bytes(bytes[start..start + 4].try_into().unwrap()) as usize;
        assert!(len > 0, "byte {at} lies past the records");
        let next = start + 8 + len;
        if at < next {
            return start;
        }
        start = next;
    }
}

/// Where each record of a segment starts, up to the first zero length (reserved space) or the
/// end of the file.
fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut start = 0;
    while let Some(header) = bytes.get(start..start + 8) {
        let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        starts.push(start);
        start += 8 + len;
    }
    starts
}

/// Runs `shard-node args` (logging at info) until it exits, at most `within` (then kills it
/// and fails).
fn run_to_exit(args: &[&str], within: Duration) -> Output {
    let mut command = Command::new(binary("shard-node"));
    process::run_to_exit(command.args(args).env("RUST_LOG", "info"), within)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn a_corrupt_log_is_refused_and_left_as_it_is() {
    let (topology, mut node) = node_with_ones(1_000).await;
    assert_eq!(node.api().value("x").await, 1_000);
    node.kill9();

    // One byte flipped about 100 bytes in, with hundreds of acknowledged records after it.
    let data_dir = topology.shard_data_dir("USA_0", 0);
    let segment = newest_segment(&data_dir);
    let file = fs::OpenOptions::new().write(true).open(&segment).unwrap();
    let mut bytes = fs::read(&segment).unwrap();
    let bad = record_start(&bytes, 100);
    assert!(
        record_start(&bytes, 20_000) > 100,
        "records follow the damage"
    );
    bytes[100] ^= 0xff;
    file.write_all_at(&bytes[100..101], 100).unwrap();
    drop(file);
    let before = fs::read(&segment).unwrap();
    assert!(before == bytes);

    let config = topology.path.display().to_string();
    let start = ["--config", &config, "--dc", "USA_0", "--slot", "0"];
    let output = run_to_exit(&start, Duration::from_secs(10));
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let named: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains(&*segment.to_string_lossy()))
        .collect();
    assert_eq!(named.len(), 1, "one line names the segment:\n{stderr}");
    let expected = format!(
        "shard-node: log segment {} is corrupt at byte {bad}: ",
        segment.display()
    );
    assert!(named[0].starts_with(&expected), "{stderr}");
    assert!(
        fs::read(&segment).unwrap() == before,
        "the segment is left byte for byte as it was"
    );

    let stdout = check(&data_dir, 1);
    let verdict = format!("verdict: corrupt: {} at byte {bad}: ", segment.display());
    assert!(stdout.contains(&verdict), "{stdout}");
    assert!(
        fs::read(&segment).unwrap() == before,
        "the check changes nothing"
    );
}

/// The last record was written whole, fsynced and acknowledged: one bit flipped in it is
/// corruption, refused like one in the middle of the log, not a torn tail cut off.
#[tokio::test]
async fn a_flipped_bit_in_the_last_record_is_refused() {
    let topology = TestTopology::single(ALONE);
    let mut node = topology.start_shard("USA_0", 0).await;
    for delta in [1, 10, 100] {
        let (status, body) = node.api().add("x", delta).await.unwrap();
        assert_eq!(status, 200, "+{delta}: {body}");
    }
    assert_eq!(node.api().value("x").await, 111);
    node.kill9();

    let data_dir = topology.shard_data_dir("USA_0", 0);
    let segment = newest_segment(&data_dir);
    let mut bytes = fs::read(&segment).unwrap();
    let starts = record_starts(&bytes);
    assert_eq!(starts.len(), 3, "one record per write");
    let last = starts[2];
    let len = u32::from_le_bytes(bytes[last..last + 4].try_into().unwrap()) as usize;
    let at = last + 8 + len / 2;
    bytes[at] ^= 0x04;
    let file = fs::OpenOptions::new().write(true).open(&segment).unwrap();
    file.write_all_at(&bytes[at..at + 1], at as u64).unwrap();
    drop(file);
    let before = fs::read(&segment).unwrap();

    let stdout = check(&data_dir, 1);
    let verdict = format!("verdict: corrupt: {} at byte {last}: ", segment.display());
    assert!(stdout.contains(&verdict), "{stdout}");

    let config = topology.path.display().to_string();
    let start = ["--config", &config, "--dc", "USA_0", "--slot", "0"];
    let output = run_to_exit(&start, Duration::from_secs(10));
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let expected = format!(
        "shard-node: log segment {} is corrupt at byte {last}: checksum mismatch;",
        segment.display()
    );
    assert!(
        stderr.lines().any(|line| line.starts_with(&expected)),
        "{stderr}"
    );
    assert!(
        fs::read(&segment).unwrap() == before,
        "the segment is left byte for byte as it was"
    );
}

#[tokio::test]
async fn check_reports_a_whole_data_directory() {
    let (topology, mut node) = node_with_ones(10).await;
    assert!(node.terminate().success(), "{}", node.log_tail());

    let stdout = check(&topology.shard_data_dir("USA_0", 0), 0);
    assert!(stdout.contains("\n  x: value 10, version "), "{stdout}");
    assert!(stdout.ends_with("verdict: whole\n"), "{stdout}");
}
