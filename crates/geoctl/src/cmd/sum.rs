//! `geoctl sum PREFIX`: asks the global aggregator for the sum over the sum counters whose id
//! starts with PREFIX (`GET /aggregate`), and prints the sum, how many counters it adds,
//! whether it is complete, its staleness, and each datacenter's part. Unique counters are left
//! out of the sum.
//!
//! Any global replica answers a sum whole, so replica 0 is asked first and the next one when a
//! replica does not answer, is stale (503) or is busy with scans (429). A 503 prints the
//! datacenters and fails with [`GeoctlError::Stale`]. With `--json` the aggregator's body is
//! printed as it came.

use std::fmt::Write as _;
use std::io::Write;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;

use super::get::{DatacenterPart, Ordered, describe_staleness};
use crate::cluster::{ClusterClient, parse_body, status_error, write_raw};
use crate::error::GeoctlError;

/// What `geoctl sum` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SumOptions {
    /// Sum the counters whose id starts with this (empty: every counter).
    pub prefix: String,
    /// Sum the hits of this many seconds rather than all-time totals.
    pub window: Option<u32>,
    /// The window's end, unix seconds (`None`: now).
    pub at: Option<u64>,
    /// A datacenter staler than this (milliseconds) is stale for this sum; `None`: the global
    /// aggregator's default.
    pub max_staleness_ms: Option<u64>,
    /// Whether stale datacenters give a partial answer rather than a refusal.
    pub allow_partial: bool,
    /// Print the aggregator's JSON as it came rather than a summary.
    pub json: bool,
}

/// One datacenter's part of a sum.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DatacenterSum {
    /// The sum of its slots (its last known values when stale).
    pub sum: i128,
    /// How many of the counters its slots hold.
    pub counters: u64,
    /// How stale it is; `None`: never complete.
    pub staleness_ms: Option<u64>,
    /// Whether its aggregator ever answered the global one.
    pub heard: bool,
}

/// The window a sum counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct SumWindow {
    /// Its length, seconds.
    pub seconds: u32,
    /// Its end, unix seconds.
    pub at: u64,
}

/// The global aggregator's 200 answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GlobalSum {
    /// The prefix asked for.
    pub prefix: String,
    /// The sum over every datacenter.
    pub sum: i128,
    /// How many sum counters it adds.
    pub counters: u64,
    /// The window counted, if one was asked for.
    pub window: Option<SumWindow>,
    /// Whether no datacenter is stale.
    pub complete: bool,
    /// The largest datacenter staleness; `None` if one was never complete.
    pub staleness_ms: Option<u64>,
    /// Each datacenter's part, in topology order.
    pub datacenters: Ordered<DatacenterSum>,
}

/// The global aggregator's 503 answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StaleSum {
    /// Which datacenters are stale and why.
    pub error: String,
    /// Their names.
    pub stale_datacenters: Vec<String>,
    /// Each datacenter's part, in topology order.
    pub datacenters: Ordered<DatacenterSum>,
}

/// The path of the sum `options` asks for.
pub fn sum_path(options: &SumOptions) -> String {
    let mut path = format!(
        "/aggregate?prefix={}",
        utf8_percent_encode(&options.prefix, NON_ALPHANUMERIC)
    );
    if let Some(seconds) = options.window {
        path.push_str(&format!("&window={seconds}"));
    }
    if let Some(at) = options.at {
        path.push_str(&format!("&at={at}"));
    }
    if let Some(ms) = options.max_staleness_ms {
        path.push_str(&format!("&max_staleness_ms={ms}"));
    }
    if options.allow_partial {
        path.push_str("&allow_partial=true");
    }
    path
}

/// Asks for the sum and prints it to `out`.
pub async fn run(
    cluster: &ClusterClient,
    options: &SumOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let (url, answer) = cluster.get_any_global(&sum_path(options)).await?;
    let raw = |out: &mut dyn Write| write_raw(out, &answer);
    match answer.status.as_u16() {
        200 if options.json => raw(out),
        200 => {
            let sum: GlobalSum = parse_body(&url, &answer)?;
            let max_staleness_ms =
                (options.max_staleness_ms).unwrap_or(cluster.topology().global.max_staleness_ms);
            out.write_all(render_sum(&sum, max_staleness_ms).as_bytes())?;
            Ok(())
        }
        503 => {
            let Ok(refusal) = parse_body::<StaleSum>(&url, &answer) else {
                return Err(status_error(&url, &answer));
            };
            if options.json {
                raw(out)?;
            } else {
                out.write_all(render_refusal(&options.prefix, &refusal).as_bytes())?;
            }
            Err(GeoctlError::Stale {
                message: refusal.error,
                stale_datacenters: refusal.stale_datacenters,
            })
        }
        _ => Err(status_error(&url, &answer)),
    }
}

/// One line per datacenter, names, sums and counts aligned; those in `stale` are marked.
fn render_datacenters(parts: &Ordered<DatacenterSum>, stale: &[String]) -> String {
    let name_width = parts.0.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let sums: Vec<String> = parts.0.iter().map(|(_, p)| p.sum.to_string()).collect();
    let sum_width = sums.iter().map(String::len).max().unwrap_or(0);
    let counts: Vec<String> = parts
        .0
        .iter()
        .map(|(_, p)| p.counters.to_string())
        .collect();
    let count_width = counts.iter().map(String::len).max().unwrap_or(0);
    let mut text = String::new();
    for (((name, part), sum), count) in parts.0.iter().zip(&sums).zip(&counts) {
        let mark = if stale.contains(name) { "  STALE" } else { "" };
        let staleness = describe_staleness(&DatacenterPart {
            value: part.sum,
            staleness_ms: part.staleness_ms,
            heard: part.heard,
        });
        let _ = writeln!(
            text,
            "  {name:<name_width$}  {sum:>sum_width$}  {count:>count_width$} counters  {staleness}{mark}"
        );
    }
    text
}

/// The summary of a 200 answer; in a partial one, datacenters staler than `max_staleness_ms`
/// (the sum's limit) are marked.
pub fn render_sum(sum: &GlobalSum, max_staleness_ms: u64) -> String {
    let complete = if sum.complete {
        "yes".to_owned()
    } else {
        "no: a partial answer; stale datacenters count with their last known values".to_owned()
    };
    let staleness = match sum.staleness_ms {
        Some(ms) => format!("{ms} ms"),
        None => "unknown: a datacenter was never complete".to_owned(),
    };
    let window = match sum.window {
        Some(w) => format!(
            "window     the {} s up to unix second {}\n",
            w.seconds, w.at
        ),
        None => String::new(),
    };
    let stale: Vec<String> = if sum.complete {
        Vec::new()
    } else {
        (sum.datacenters.0.iter())
            .filter(|(_, part)| part.staleness_ms.is_none_or(|ms| ms > max_staleness_ms))
            .map(|(name, _)| name.clone())
            .collect()
    };
    format!(
        "prefix     {:?}\n{window}sum        {}\ncounters   {}\ncomplete   {complete}\nstaleness  {staleness}\ndatacenters:\n{}",
        sum.prefix,
        sum.sum,
        sum.counters,
        render_datacenters(&sum.datacenters, &stale)
    )
}

/// The explanation of a 503 answer: the error, the stale datacenters, every datacenter's part.
pub fn render_refusal(prefix: &str, refusal: &StaleSum) -> String {
    format!(
        "prefix     {prefix:?}\nrefused    {}\nstale      {}\ndatacenters:\n{}",
        refusal.error,
        refusal.stale_datacenters.join(", "),
        render_datacenters(&refusal.datacenters, &refusal.stale_datacenters)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = r#"{"replica":0,"prefix":"tweet:","sum":18446744073709551616,"counters":7,
        "window":{"seconds":60,"at":1700000000},"complete":false,"staleness_ms":null,
        "datacenters":{"USA_0":{"sum":18446744073709551617,"counters":5,"staleness_ms":120,"heard":true},
                       "ASIA_0":{"sum":-1,"counters":2,"staleness_ms":null,"heard":false}}}"#;

    fn options() -> SumOptions {
        SumOptions {
            prefix: "tweet:".into(),
            window: None,
            at: None,
            max_staleness_ms: None,
            allow_partial: false,
            json: false,
        }
    }

    #[test]
    fn the_path_encodes_the_prefix_and_has_only_the_given_keys() {
        assert_eq!(sum_path(&options()), "/aggregate?prefix=tweet%3A");
        let every = SumOptions {
            prefix: "a+b &#".into(),
            window: Some(60),
            at: Some(1_700_000_000),
            max_staleness_ms: Some(0),
            allow_partial: true,
            ..options()
        };
        assert_eq!(
            sum_path(&every),
            "/aggregate?prefix=a%2Bb%20%26%23&window=60&at=1700000000&max_staleness_ms=0&allow_partial=true"
        );
        let empty = SumOptions {
            prefix: String::new(),
            ..options()
        };
        assert_eq!(sum_path(&empty), "/aggregate?prefix=");
    }

    #[test]
    fn summary_has_the_sum_and_one_line_per_datacenter() {
        let sum: GlobalSum = serde_json::from_str(SUM).unwrap();
        assert_eq!(sum.sum, 1 << 64, "sums beyond 64 bits are read");
        let expected = "\
prefix     \"tweet:\"
window     the 60 s up to unix second 1700000000
sum        18446744073709551616
counters   7
complete   no: a partial answer; stale datacenters count with their last known values
staleness  unknown: a datacenter was never complete
datacenters:
  USA_0   18446744073709551617  5 counters  staleness 120 ms
  ASIA_0                    -1  2 counters  never heard  STALE
";
        assert_eq!(render_sum(&sum, 200), expected);
    }

    #[test]
    fn refusal_names_the_stale_datacenters() {
        let text = r#"{"error":"stale datacenters: ASIA_0 (never heard)",
            "stale_datacenters":["ASIA_0"],
            "datacenters":{"USA_0":{"sum":3,"counters":1,"staleness_ms":20,"heard":true},
                           "ASIA_0":{"sum":0,"counters":0,"staleness_ms":null,"heard":false}}}"#;
        let refusal: StaleSum = serde_json::from_str(text).unwrap();
        let expected = "\
prefix     \"x\"
refused    stale datacenters: ASIA_0 (never heard)
stale      ASIA_0
datacenters:
  USA_0   3  1 counters  staleness 20 ms
  ASIA_0  0  0 counters  never heard  STALE
";
        assert_eq!(render_refusal("x", &refusal), expected);
    }
}
