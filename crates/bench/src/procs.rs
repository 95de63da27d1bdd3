//! Processes the benchmark starts and talks to: free ports, servers that must be up before the
//! load, tools whose output is parsed, resident memory and CPU time.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// A loopback address nothing listens on right now.
pub fn free_address() -> anyhow::Result<SocketAddr> {
    geocount_net::free_loopback_address().context("cannot find a free port")
}

/// Waits until `address` accepts TCP connections, for at most `timeout`.
pub async fn wait_listening(address: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if tokio::net::TcpStream::connect(address).await.is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("nothing listens on {address} after {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A server process the benchmark started; killed when dropped.
#[derive(Debug)]
pub struct Server {
    child: Child,
    /// Where it listens.
    pub address: SocketAddr,
}

impl Server {
    /// Starts `program` with `args`, output to `log`, and waits until `address` accepts
    /// connections.
    pub async fn start(
        program: &Path,
        args: &[String],
        address: SocketAddr,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let out = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let server = Self { child, address };
        wait_listening(address, Duration::from_secs(20))
            .await
            .with_context(|| {
                format!(
                    "{} did not start (log: {})",
                    program.display(),
                    log.display()
                )
            })?;
        Ok(server)
    }

    /// Kills it and waits for it to exit.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Runs `program` with `args` to completion (at most `timeout`) and returns its standard
/// output; fails on a non-zero exit, with its standard error.
pub async fn output(program: &str, args: &[String], timeout: Duration) -> anyhow::Result<String> {
    let run = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let done = tokio::time::timeout(timeout, run)
        .await
        .with_context(|| format!("{program} took longer than {} s", timeout.as_secs()))?
        .with_context(|| format!("cannot run {program}"))?;
    let stdout = String::from_utf8_lossy(&done.stdout).into_owned();
    if !done.status.success() {
        bail!(
            "{program} {} failed ({}): {}{}",
            args.join(" "),
            done.status,
            String::from_utf8_lossy(&done.stderr),
            stdout
        );
    }
    Ok(stdout)
}

/// The resident memory of process `pid`, in bytes (Linux `VmRSS`).
pub fn resident_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read the status of process {pid}"))?;
    parse_vm_rss(&status).with_context(|| format!("no VmRSS for process {pid}"))
}

/// Process `pid`'s resident bytes of anonymous memory (its heap and stacks: `RssAnon`) and of
/// mapped files (its binary's and libraries' pages read so far: `RssFile`).
pub fn resident_parts(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read the status of process {pid}"))?;
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    let anon = field("RssAnon:").with_context(|| format!("no RssAnon for process {pid}"))?;
    let file = field("RssFile:").with_context(|| format!("no RssFile for process {pid}"))?;
    Ok((anon, file))
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The CPU time process `pid` has used so far (user and system), in seconds.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read the stat of process {pid}"))?;
    parse_cpu_ticks(&stat)
        // Linux reports these in USER_HZ, 100 on the architectures it runs here.
        .map(|ticks| ticks as f64 / 100.0)
        .with_context(|| format!("no utime and stime for process {pid}"))
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The name (field 2) may hold spaces: count from its closing parenthesis. utime and stime
    // are fields 14 and 15, so the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tx\nVmPeak:\t 10 kB\nVmRSS:\t    2048 kB\nThreads: 3\n";
        assert_eq!(parse_vm_rss(status), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }

    #[test]
    fn cpu_ticks_are_utime_and_stime() {
        let stat = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 8 0 1 2 3";
        assert_eq!(parse_cpu_ticks(stat), Some(281));
        assert_eq!(parse_cpu_ticks("42 (x) S 1"), None);
    }
}
