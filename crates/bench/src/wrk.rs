//! The HTTP load tool: wrk (Debian package), two threads and 64 connections on the same two
//! cores as the server, each request built by a small Lua script that picks a random counter.
//! The hyper ceiling and the geocount tiers are driven by the very same scripts and settings.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::procs::output;

/// wrk threads.
pub const THREADS: u32 = 2;
/// wrk connections.
pub const CONNECTIONS: u32 = 64;

/// What a wrk request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// `PATCH /counter/<prefix>-<random n>/write?op=INCREMENT`, no body (a delta of 1).
    Write,
    /// `GET /counter/<prefix>-<random n>`.
    Read,
}

/// Writes the Lua script for `script` over counters `<prefix>-0..counters` into `dir`.
pub fn write_script(
    dir: &Path,
    script: Script,
    prefix: &str,
    counters: usize,
) -> anyhow::Result<PathBuf> {
    let (name, method, suffix) = match script {
        Script::Write => ("write", "PATCH", "/write?op=INCREMENT"),
        Script::Read => ("read", "GET", ""),
    };
    let path = dir.join(format!("{name}-{prefix}.lua"));
    let text = format!(
        "-- geocount-bench: {method} a random counter of {prefix}-0..{last}\n\
         wrk.method = \"{method}\"\n\
         math.randomseed(os.time())\n\
         request = function()\n\
         \x20 return wrk.format(nil, \"/counter/{prefix}-\" .. math.random(0, {last}) .. \"{suffix}\")\n\
         end\n",
        last = counters - 1,
    );
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Writes a Lua script that sends `PATCH /counter/<id>/write?op=INCREMENT` to a random one of
/// `ids` into `dir`, the ids in a file beside it (read once per wrk thread): for a set of ids
/// no prefix and range names, such as the counters one slot owns.
pub fn write_script_over(dir: &Path, name: &str, ids: &[String]) -> anyhow::Result<PathBuf> {
    let list = dir.join(format!("{name}.ids"));
    std::fs::write(&list, ids.join("\n") + "\n")
        .with_context(|| format!("cannot write {}", list.display()))?;
    let path = dir.join(format!("write-{name}.lua"));
    let text = format!(
        "-- geocount-bench: PATCH a random counter of the {count} in {list}\n\
         wrk.method = \"PATCH\"\n\
         math.randomseed(os.time())\n\
         local ids = {{}}\n\
         for id in io.lines(\"{list}\") do ids[#ids + 1] = id end\n\
         request = function()\n\
         \x20 return wrk.format(nil, \"/counter/\" .. ids[math.random(1, #ids)] .. \"/write?op=INCREMENT\")\n\
         end\n",
        count = ids.len(),
        list = list.display(),
    );
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// What one wrk run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WrkRun {
    /// Answers per second (any status).
    pub requests_per_sec: f64,
    /// Latency percentiles, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Answers that were not 2xx or 3xx.
    pub non_2xx: u64,
    /// Connect, read, write errors and timeouts.
    pub socket_errors: u64,
}

/// Runs wrk with `script` against `address` for `duration`.
pub async fn run(address: SocketAddr, script: &Path, duration: Duration) -> anyhow::Result<WrkRun> {
    let args = vec![
        format!("-t{THREADS}"),
        format!("-c{CONNECTIONS}"),
        format!("-d{}s", duration.as_secs().max(1)),
        "--latency".to_owned(),
        "-s".to_owned(),
        script.display().to_string(),
        format!("http://{address}"),
    ];
    let text = output("wrk", &args, duration + Duration::from_secs(30)).await?;
    let run = parse(&text).with_context(|| format!("cannot read wrk's output:\n{text}"))?;
    if run.requests_per_sec <= 0.0 {
        bail!("wrk got no answer:\n{text}");
    }
    Ok(run)
}

/// A wrk latency (`498.00us`, `2.03ms`, `1.10s`) in milliseconds.
fn parse_latency(text: &str) -> Option<f64> {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e3)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * scale)
}

/// Reads wrk's `--latency` report.
fn parse(text: &str) -> Option<WrkRun> {
    let mut run = WrkRun {
        requests_per_sec: 0.0,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        non_2xx: 0,
        socket_errors: 0,
    };
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", rate] => run.requests_per_sec = rate.parse().ok()?,
            ["50%", latency] => run.p50_ms = parse_latency(latency)?,
            ["99%", latency] => run.p99_ms = parse_latency(latency)?,
            ["Non-2xx", "or", "3xx", "responses:", n] => run.non_2xx = n.parse().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                // connect 0, read 0, write 0, timeout 0
                run.socket_errors = rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum();
            }
            _ => {}
        }
    }
    (!run.p50_ms.is_nan() && !run.p99_ms.is_nan()).then_some(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "Running 10s test @ http://127.0.0.1:8080
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   610.83us    1.02ms  30.11ms   94.12%
    Req/Sec    54.52k     3.10k   60.01k    71.00%
  Latency Distribution
     50%  498.00us
     75%  612.00us
     90%  800.00us
     99%    2.03ms
  1084620 requests in 10.00s, 107.58MB read
  Non-2xx or 3xx responses: 12
  Socket errors: connect 0, read 3, write 0, timeout 1
Requests/sec: 108433.55
Transfer/sec:     10.76MB
";

    #[test]
    fn reads_the_report() {
        let run = parse(OUTPUT).expect("parses");
        assert_eq!(run.requests_per_sec, 108_433.55);
        assert!((run.p50_ms - 0.498).abs() < 1e-9);
        assert!((run.p99_ms - 2.03).abs() < 1e-9);
        assert_eq!((run.non_2xx, run.socket_errors), (12, 4));
        assert_eq!(parse_latency("1.10s"), Some(1100.0));
        assert_eq!(parse("nothing"), None);
    }

    #[test]
    fn scripts_pick_random_counters() {
        let dir = std::env::temp_dir();
        let path = write_script(&dir, Script::Write, "t", 100).expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains("wrk.method = \"PATCH\""), "{text}");
        assert!(
            text.contains("\"/counter/t-\" .. math.random(0, 99) .. \"/write?op=INCREMENT\""),
            "{text}"
        );
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn id_scripts_read_their_ids() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let ids = ["a-1".to_owned(), "a-7".to_owned()];
        let path = write_script_over(dir.path(), "owned", &ids).expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        let list = dir.path().join("owned.ids");
        assert!(
            text.contains(&format!("io.lines(\"{}\")", list.display())),
            "{text}"
        );
        assert_eq!(
            std::fs::read_to_string(list).expect("the ids"),
            "a-1\na-7\n"
        );
    }
}
