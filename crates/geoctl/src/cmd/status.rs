//! `geoctl status`: the cluster's health, one line each for every datacenter (as the global
//! aggregator's `GET /datacenters` sees it), every global aggregator replica, every datacenter
//! aggregator replica and every shard node of the topology (each one's `GET /healthz`, asked
//! all at once).
//!
//! A line is `ok`, `WARN` (it serves, but a source it pulls fails or is stale) or `DOWN` (no
//! answer, a status other than `ok`, a datacenter never heard or staler than
//! `global.max_staleness_ms`). Any `DOWN` line fails the command with
//! [`GeoctlError::Unhealthy`] (exit 1), after the table. `--json` prints the same lines with
//! the answer each was read from.

use std::io::Write;

use geocount_model::role::replica_name;
use serde::Serialize;
use serde_json::Value;

use crate::cluster::{ClusterClient, error_message};
use crate::error::GeoctlError;

/// What `geoctl status` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusOptions {
    /// Print JSON for scripts rather than a table.
    pub json: bool,
}

/// How one line fares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Serving, and everything it pulls is fresh.
    Ok,
    /// Serving, but a source fails or is stale.
    Warn,
    /// Not answering, not `ok`, or (a datacenter) stale or never heard.
    Down,
}

impl Health {
    fn word(self) -> &'static str {
        match self {
            Health::Ok => "ok",
            Health::Warn => "WARN",
            Health::Down => "DOWN",
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Line {
    /// `datacenter`, `global`, `aggregator` or `shard`.
    pub tier: &'static str,
    /// The datacenter's or the process's name (`aggregator_USA_0@1`, `DC_USA_0_VAL_2`).
    pub name: String,
    /// Where the process listens (none for a datacenter).
    pub address: Option<String>,
    /// How it fares.
    pub health: Health,
    /// Its own word (`ok`, `restoring`, `storage failing`, `no answer`, `stale`, ...).
    pub status: String,
    /// What else matters: durability, counters, restore progress, failing or stale sources.
    pub detail: String,
    /// The answer the line was read from (`/healthz`, or the datacenter's entry of
    /// `/datacenters`); null when there was none.
    pub answer: Value,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// No line is `DOWN`.
    pub healthy: bool,
    /// The `DOWN` lines, as `<tier> <name>`.
    pub unhealthy: Vec<String>,
    /// Every line: datacenters, global replicas, then each datacenter's aggregator replicas
    /// and shard nodes.
    pub lines: Vec<Line>,
}

/// What one request gave: the status and JSON body, or why there was no answer.
pub type Probe = Result<(u16, Value), String>;

/// One process to ask for `/healthz`.
#[derive(Debug, Clone)]
struct Process {
    tier: &'static str,
    name: String,
    address: std::net::SocketAddr,
    /// Its datacenter's durability (shard nodes).
    durability: Option<String>,
}

/// Every process of the topology, in the report's order.
fn processes(cluster: &ClusterClient) -> Vec<Process> {
    let topology = cluster.topology();
    let mut all: Vec<Process> = (topology.global.addresses().into_iter().enumerate())
        .map(|(replica, address)| Process {
            tier: "global",
            name: replica_name("global", replica),
            address,
            durability: None,
        })
        .collect();
    for dc in &topology.datacenters {
        let aggregator = format!("aggregator_{}", dc.name);
        all.extend(
            (dc.aggregators().into_iter().enumerate()).map(|(replica, address)| Process {
                tier: "aggregator",
                name: replica_name(&aggregator, replica),
                address,
                durability: None,
            }),
        );
        let durability = dc.durability(&topology.shard).to_string();
        all.extend(
            (dc.shards.iter().enumerate()).map(|(slot, &address)| Process {
                tier: "shard",
                name: format!("DC_{}_VAL_{slot}", dc.name),
                address,
                durability: Some(durability.clone()),
            }),
        );
    }
    all
}

/// `GET <url>` as a [`Probe`].
async fn probe(client: &geocount_net::HttpClient, url: &str) -> Probe {
    match client.get(url).await {
        Ok(answer) => {
            let body = match answer.json() {
                Value::Null => Value::String(error_message(&answer)),
                json => json,
            };
            Ok((answer.status.as_u16(), body))
        }
        Err(error) => Err(error.to_string()),
    }
}

/// Asks every process and the global aggregator, all at once, and assesses the answers.
pub async fn report(cluster: &ClusterClient) -> Report {
    let processes = processes(cluster);
    let mut asked = tokio::task::JoinSet::new();
    for (index, process) in processes.iter().enumerate() {
        let client = cluster.client().clone();
        let url = client.url(process.address, "/healthz");
        asked.spawn(async move { (index, probe(&client, &url).await) });
    }
    let datacenters: Probe = match cluster.get_any_global("/datacenters").await {
        Ok((_, answer)) => Ok((answer.status.as_u16(), answer.json())),
        Err(error) => Err(error.to_string()),
    };
    let mut probes: Vec<Probe> = vec![Err("its probe failed".to_owned()); processes.len()];
    while let Some(done) = asked.join_next().await {
        if let Ok((index, probe)) = done {
            probes[index] = probe;
        }
    }
    let topology = cluster.topology();
    let max_staleness_ms = topology.global.max_staleness_ms;
    let names: Vec<&str> = topology
        .datacenters
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    let mut lines = datacenter_lines(&names, &datacenters, max_staleness_ms);
    lines.extend(processes.iter().zip(probes).map(|(process, probe)| {
        process_line(
            process.tier,
            &process.name,
            process.address,
            process.durability.as_deref(),
            probe,
            max_staleness_ms,
        )
    }));
    Report::of(lines)
}

impl Report {
    /// The report of `lines`.
    pub fn of(lines: Vec<Line>) -> Self {
        let unhealthy: Vec<String> = (lines.iter())
            .filter(|l| l.health == Health::Down)
            .map(|l| format!("{} {}", l.tier, l.name))
            .collect();
        Self {
            healthy: unhealthy.is_empty(),
            unhealthy,
            lines,
        }
    }
}

/// Prints the report; fails when a line is `DOWN`.
pub async fn run(
    cluster: &ClusterClient,
    options: &StatusOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let report = report(cluster).await;
    if options.json {
        serde_json::to_writer_pretty(&mut *out, &report).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        out.write_all(render_status(&report).as_bytes())?;
    }
    if report.healthy {
        Ok(())
    } else {
        Err(GeoctlError::Unhealthy {
            count: report.unhealthy.len(),
            lines: report.lines.len(),
            names: report.unhealthy,
        })
    }
}

/// `ms` for people: `42 ms`, `never`.
fn ms(staleness: Option<u64>) -> String {
    staleness.map_or("never".to_owned(), |ms| format!("{ms} ms"))
}

/// One line per datacenter of `names` from the global aggregator's `/datacenters` answer.
pub fn datacenter_lines(names: &[&str], answer: &Probe, max_staleness_ms: u64) -> Vec<Line> {
    let unknown = |why: String| -> Vec<Line> {
        (names.iter())
            .map(|name| Line {
                tier: "datacenter",
                name: (*name).to_owned(),
                address: None,
                health: Health::Down,
                status: "unknown".to_owned(),
                detail: format!("the global aggregator's /datacenters: {why}"),
                answer: Value::Null,
            })
            .collect()
    };
    let body = match answer {
        Err(why) => return unknown(format!("no answer: {why}")),
        Ok((200, body)) => body,
        Ok((status, body)) => return unknown(format!("{status}: {}", brief(body))),
    };
    (names.iter())
        .map(|name| {
            let entry = &body["datacenters"][*name];
            let heard = entry["heard"].as_bool().unwrap_or(false);
            let staleness = entry["staleness_ms"].as_u64();
            let (health, status) = match (heard, staleness) {
                _ if entry.is_null() => (Health::Down, "unknown"),
                (false, _) => (Health::Down, "never heard"),
                (true, None) => (Health::Down, "never complete"),
                (true, Some(ms)) if ms > max_staleness_ms => (Health::Down, "stale"),
                _ if entry["last_error"].is_string() => (Health::Warn, "fresh"),
                _ => (Health::Ok, "fresh"),
            };
            let mut detail = vec![format!(
                "staleness {} (limit {max_staleness_ms} ms)",
                ms(staleness)
            )];
            if let Some(ago) = entry["last_heard_ms_ago"].as_u64() {
                detail.push(format!("heard {ago} ms ago"));
            }
            if let Some(counters) = entry["counters"].as_u64() {
                detail.push(format!("{counters} counters"));
            }
            if let Some(error) = entry["last_error"].as_str() {
                detail.push(format!("last error: {error}"));
            }
            Line {
                tier: "datacenter",
                name: (*name).to_owned(),
                address: None,
                health,
                status: status.to_owned(),
                detail: detail.join(", "),
                answer: entry.clone(),
            }
        })
        .collect()
}

/// A short form of an answer body for a detail.
fn brief(body: &Value) -> String {
    match body {
        Value::String(text) => text.clone(),
        other => other["error"]
            .as_str()
            .map_or_else(|| other.to_string(), str::to_owned),
    }
}

/// The sources a `/healthz` answer lists, whatever its tier: a shard node's `sources` (a
/// list of `{"source", ...}`), an aggregator's `slots`, a global one's `replicas` (maps by
/// name).
fn sources(body: &Value) -> Vec<(String, &Value)> {
    if let Some(list) = body["sources"].as_array() {
        return (list.iter())
            .map(|s| (s["source"].as_str().unwrap_or("?").to_owned(), s))
            .collect();
    }
    let map = body["slots"]
        .as_object()
        .or_else(|| body["replicas"].as_object());
    map.map(|m| m.iter().map(|(name, s)| (name.clone(), s)).collect())
        .unwrap_or_default()
}

/// What a process's sources say: the worst staleness, and each one failing or staler than
/// `max_staleness_ms`; whether any is.
fn assess_sources(body: &Value, max_staleness_ms: u64) -> (Vec<String>, bool) {
    let sources = sources(body);
    if sources.is_empty() {
        return (Vec::new(), false);
    }
    let mut detail = Vec::new();
    let worst = (sources.iter())
        .map(|(_, s)| s["staleness_ms"].as_u64())
        .max_by_key(|s| s.map_or(u64::MAX, |ms| ms));
    let plural = if sources.len() == 1 { "" } else { "s" };
    detail.push(format!(
        "{} source{plural}, worst staleness {}",
        sources.len(),
        ms(worst.flatten())
    ));
    let mut troubled = false;
    for (name, source) in &sources {
        if let Some(error) = source["last_error"].as_str() {
            detail.push(format!("{name} failing: {error}"));
            troubled = true;
        } else if source["staleness_ms"]
            .as_u64()
            .is_none_or(|ms| ms > max_staleness_ms)
        {
            detail.push(format!(
                "{name} stale: {}",
                ms(source["staleness_ms"].as_u64())
            ));
            troubled = true;
        }
    }
    (detail, troubled)
}

/// One process's line from its `/healthz` probe.
pub fn process_line(
    tier: &'static str,
    name: &str,
    address: std::net::SocketAddr,
    durability: Option<&str>,
    probe: Probe,
    max_staleness_ms: u64,
) -> Line {
    let mut detail: Vec<String> = durability
        .map(|d| format!("durability {d}"))
        .into_iter()
        .collect();
    let (health, status, answer) = match probe {
        Err(why) => {
            detail.push(why);
            (Health::Down, "no answer".to_owned(), Value::Null)
        }
        Ok((code, body)) => {
            let word = body["status"]
                .as_str()
                .map_or_else(|| format!("HTTP {code}"), str::to_owned);
            if let Some(counters) = body["counters"].as_u64() {
                detail.push(format!("{counters} counters"));
            }
            if let Some(restore) = body.get("restore").filter(|r| !r.is_null()) {
                detail.push(format!(
                    "restore {}: {} counters received, {} written",
                    restore["phase"].as_str().unwrap_or("?"),
                    restore["counters_received"],
                    restore["counters_written"]
                ));
            }
            for key in ["error", "conflict", "over_bound"] {
                if let Some(text) = body[key].as_str() {
                    detail.push(text.to_owned());
                }
            }
            if let Some(conflicts) = body["conflicts"].as_array() {
                detail.extend(
                    conflicts
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned),
                );
            }
            let (about_sources, troubled) = assess_sources(&body, max_staleness_ms);
            detail.extend(about_sources);
            let health = match (code == 200 && word == "ok", troubled) {
                (false, _) => Health::Down,
                (true, true) => Health::Warn,
                (true, false) => Health::Ok,
            };
            if code != 200 && !body.is_object() {
                detail.push(brief(&body));
            }
            (health, word, body)
        }
    };
    Line {
        tier,
        name: name.to_owned(),
        address: Some(address.to_string()),
        health,
        status,
        detail: detail.join("; "),
        answer,
    }
}

/// The table: one aligned line each, then a summary.
pub fn render_status(report: &Report) -> String {
    let mut rows =
        vec![["TIER", "NAME", "ADDRESS", "HEALTH", "STATUS", "DETAIL"].map(str::to_owned)];
    rows.extend(report.lines.iter().map(|l| {
        [
            l.tier.to_owned(),
            l.name.clone(),
            l.address.clone().unwrap_or_else(|| "-".to_owned()),
            l.health.word().to_owned(),
            l.status.clone(),
            l.detail.clone(),
        ]
    }));
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in &rows {
        let cells: Vec<String> = (row.iter().zip(&widths))
            .map(|(cell, &width)| format!("{cell:<width$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    let warned = (report.lines.iter())
        .filter(|l| l.health == Health::Warn)
        .count();
    text.push('\n');
    if report.healthy {
        text.push_str(&format!(
            "healthy: {} lines, {warned} with warnings\n",
            report.lines.len()
        ));
    } else {
        text.push_str(&format!(
            "UNHEALTHY: {} of {} lines: {}\n",
            report.unhealthy.len(),
            report.lines.len(),
            report.unhealthy.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn addr(port: u16) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn every_process_of_the_topology_is_asked_in_order() {
        let cluster = crate::cluster::tests::cluster();
        let names: Vec<(&str, String, u16)> = (processes(&cluster).into_iter())
            .map(|p| (p.tier, p.name, p.address.port()))
            .collect();
        assert_eq!(
            names,
            [
                ("global", "global".to_owned(), 7000),
                ("aggregator", "aggregator_USA_0".to_owned(), 7100),
                ("shard", "DC_USA_0_VAL_0".to_owned(), 7101),
                ("shard", "DC_USA_0_VAL_1".to_owned(), 7102),
                ("aggregator", "aggregator_ASIA_0".to_owned(), 7200),
                ("shard", "DC_ASIA_0_VAL_0".to_owned(), 7201),
            ]
        );
    }

    #[test]
    fn datacenters_are_down_when_stale_or_never_heard() {
        let answer = json!({"replica": 0, "datacenters": {
            "USA_0": {"heard": true, "last_heard_ms_ago": 12, "staleness_ms": 40, "counters": 3,
                      "last_error": null},
            "ASIA_0": {"heard": true, "last_heard_ms_ago": 9000, "staleness_ms": 9000,
                       "counters": 1, "last_error": "connection refused"},
            "EUROPE_0": {"heard": false, "last_heard_ms_ago": null, "staleness_ms": null,
                         "counters": 0, "last_error": null}}});
        let lines = datacenter_lines(&["USA_0", "ASIA_0", "EUROPE_0"], &Ok((200, answer)), 5000);
        let seen: Vec<(Health, &str, &str)> = (lines.iter())
            .map(|l| (l.health, l.status.as_str(), l.detail.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    Health::Ok,
                    "fresh",
                    "staleness 40 ms (limit 5000 ms), heard 12 ms ago, 3 counters"
                ),
                (
                    Health::Down,
                    "stale",
                    "staleness 9000 ms (limit 5000 ms), heard 9000 ms ago, 1 counters, last error: connection refused"
                ),
                (
                    Health::Down,
                    "never heard",
                    "staleness never (limit 5000 ms), 0 counters"
                ),
            ]
        );
        let refused = datacenter_lines(&["USA_0"], &Err("connection refused".into()), 5000);
        assert_eq!(refused[0].health, Health::Down);
        assert_eq!(
            refused[0].detail,
            "the global aggregator's /datacenters: no answer: connection refused"
        );
    }

    #[test]
    fn a_shard_node_line_says_durability_restore_and_troubled_sources() {
        let restoring = json!({"status": "restoring", "slot": "DC_USA_0_VAL_1", "counters": 0,
            "restore": {"phase": "gathering copies", "counters_received": 10, "counters_written": 4,
                        "sources": []},
            "sources": [{"source": "DC_USA_0_VAL_0", "staleness_ms": 20, "last_error": null}]});
        let line = process_line(
            "shard",
            "DC_USA_0_VAL_1",
            addr(7102),
            Some("replicated"),
            Ok((503, restoring)),
            5000,
        );
        assert_eq!(
            (line.health, line.status.as_str()),
            (Health::Down, "restoring")
        );
        assert_eq!(
            line.detail,
            "durability replicated; 0 counters; restore gathering copies: 10 counters received, \
             4 written; 1 source, worst staleness 20 ms"
        );
        let pulling = json!({"status": "ok", "counters": 7, "sources": [
            {"source": "DC_USA_0_VAL_0", "staleness_ms": 30, "last_error": null},
            {"source": "aggregator_USA_0", "staleness_ms": null, "last_error": "refused"}]});
        let line = process_line(
            "shard",
            "DC_USA_0_VAL_1",
            addr(7102),
            Some("sync"),
            Ok((200, pulling)),
            5000,
        );
        assert_eq!((line.health, line.status.as_str()), (Health::Warn, "ok"));
        assert_eq!(
            line.detail,
            "durability sync; 7 counters; 2 sources, worst staleness never; aggregator_USA_0 failing: refused"
        );
        let gone = process_line(
            "shard",
            "DC_USA_0_VAL_2",
            addr(7103),
            Some("sync"),
            Err("connection refused".into()),
            5000,
        );
        assert_eq!(
            (gone.health, gone.status.as_str()),
            (Health::Down, "no answer")
        );
    }

    #[test]
    fn aggregators_list_their_slots_and_replicas_as_sources() {
        let datacenter = json!({"replica": 0, "status": "ok", "datacenter": "USA_0", "counters": 2,
            "state_bytes": 100, "max_state_bytes": 1000,
            "slots": {"DC_USA_0_VAL_0": {"staleness_ms": 10, "last_error": null},
                      "DC_USA_0_VAL_1": {"staleness_ms": 6000, "last_error": null}}});
        let line = process_line(
            "aggregator",
            "aggregator_USA_0",
            addr(7100),
            None,
            Ok((200, datacenter)),
            5000,
        );
        assert_eq!(line.health, Health::Warn);
        assert_eq!(
            line.detail,
            "2 counters; 2 sources, worst staleness 6000 ms; DC_USA_0_VAL_1 stale: 6000 ms"
        );
        let global = json!({"replica": 0, "status": "degraded", "counters": 2,
            "datacenters": {"USA_0": {"staleness_ms": 10, "last_error": null}},
            "replicas": {"USA_0": {"staleness_ms": 10, "last_error": null, "refused_ahead": 3}}});
        let line = process_line(
            "global",
            "global",
            addr(7000),
            None,
            Ok((200, global)),
            5000,
        );
        assert_eq!(
            (line.health, line.status.as_str()),
            (Health::Down, "degraded")
        );
    }

    #[test]
    fn the_table_aligns_lines_and_names_the_unhealthy() {
        let line = |tier, name: &str, health, status: &str| Line {
            tier,
            name: name.to_owned(),
            address: (tier != "datacenter").then(|| "127.0.0.1:7101".to_owned()),
            health,
            status: status.to_owned(),
            detail: "d".to_owned(),
            answer: Value::Null,
        };
        let report = Report::of(vec![
            line("datacenter", "USA_0", Health::Ok, "fresh"),
            line("shard", "DC_USA_0_VAL_0", Health::Down, "no answer"),
            line("shard", "DC_USA_0_VAL_1", Health::Warn, "ok"),
        ]);
        assert!(!report.healthy);
        assert_eq!(report.unhealthy, ["shard DC_USA_0_VAL_0"]);
        let expected = "\
TIER        NAME            ADDRESS         HEALTH  STATUS     DETAIL
datacenter  USA_0           -               ok      fresh      d
shard       DC_USA_0_VAL_0  127.0.0.1:7101  DOWN    no answer  d
shard       DC_USA_0_VAL_1  127.0.0.1:7101  WARN    ok         d

UNHEALTHY: 1 of 3 lines: shard DC_USA_0_VAL_0
";
        assert_eq!(render_status(&report), expected);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["lines"][1]["health"], "down");
        assert_eq!(json["healthy"], false);
    }
}
