//! `geoctl get ID`: reads a counter from the global aggregator and prints its value, whether it
//! is complete, its staleness, and each datacenter's part.
//!
//! A 503 (stale datacenters, no partial answer allowed) prints the datacenters and fails with
//! [`GeoctlError::Stale`]; a 404 fails with [`GeoctlError::NotFound`]. With `--json` the
//! aggregator's body is printed as it came.

use std::fmt;
use std::fmt::Write as _;
use std::io::Write;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::cluster::{ClusterClient, counter_path, parse_body, status_error, write_raw};
use crate::error::GeoctlError;

/// What `geoctl get` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetOptions {
    /// The counter's id.
    pub id: String,
    /// A datacenter staler than this (milliseconds) is stale for this read; `None`: the global
    /// aggregator's default.
    pub max_staleness_ms: Option<u64>,
    /// Whether stale datacenters give a partial answer rather than a refusal.
    pub allow_partial: bool,
    /// Print the aggregator's JSON as it came rather than a summary.
    pub json: bool,
}

/// Named values from a JSON object, in the order the object lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ordered<T>(pub Vec<(String, T)>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Ordered<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for OrderedVisitor<T> {
            type Value = Ordered<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Ordered(entries))
            }
        }
        deserializer.deserialize_map(OrderedVisitor(std::marker::PhantomData))
    }
}

/// One datacenter's part of a global read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DatacenterPart {
    /// The sum of its slots (its last known values when stale).
    pub value: i128,
    /// How stale it is; `None`: never complete.
    pub staleness_ms: Option<u64>,
    /// Whether its aggregator ever answered the global one.
    pub heard: bool,
}

/// The global aggregator's 200 answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GlobalReading {
    /// The counter's id.
    pub id: String,
    /// The sum over every datacenter.
    pub value: i128,
    /// Whether no datacenter is stale.
    pub complete: bool,
    /// The largest datacenter staleness; `None` if one was never complete.
    pub staleness_ms: Option<u64>,
    /// Each datacenter's part, in topology order.
    pub datacenters: Ordered<DatacenterPart>,
}

/// The global aggregator's 503 answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StaleRefusal {
    /// Which datacenters are stale and why.
    pub error: String,
    /// Their names.
    pub stale_datacenters: Vec<String>,
    /// Each datacenter's part, in topology order.
    pub datacenters: Ordered<DatacenterPart>,
}

/// The query string of a global read (`""` when every parameter takes the server's default).
pub fn read_query(max_staleness_ms: Option<u64>, allow_partial: bool) -> String {
    let mut parameters = Vec::new();
    if let Some(ms) = max_staleness_ms {
        parameters.push(format!("max_staleness_ms={ms}"));
    }
    if allow_partial {
        parameters.push("allow_partial=true".to_owned());
    }
    if parameters.is_empty() {
        String::new()
    } else {
        format!("?{}", parameters.join("&"))
    }
}

/// Reads the counter and prints it to `out`.
pub async fn run(
    cluster: &ClusterClient,
    options: &GetOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let path = format!(
        "{}{}",
        counter_path(&options.id),
        read_query(options.max_staleness_ms, options.allow_partial)
    );
    let (url, answer) = cluster.get_global(&options.id, &path).await?;
    let raw = |out: &mut dyn Write| write_raw(out, &answer);
    match answer.status.as_u16() {
        200 if options.json => raw(out),
        200 => {
            let reading: GlobalReading = parse_body(&url, &answer)?;
            let max_staleness_ms =
                (options.max_staleness_ms).unwrap_or(cluster.topology().global.max_staleness_ms);
            out.write_all(render_reading(&reading, max_staleness_ms).as_bytes())?;
            Ok(())
        }
        404 => {
            if options.json {
                raw(out)?;
            }
            Err(GeoctlError::NotFound {
                id: options.id.clone(),
            })
        }
        503 => {
            let Ok(refusal) = parse_body::<StaleRefusal>(&url, &answer) else {
                // A 503 without the stale-read shape (e.g. the aggregator shutting down).
                return Err(status_error(&url, &answer));
            };
            if options.json {
                raw(out)?;
            } else {
                out.write_all(render_refusal(&options.id, &refusal).as_bytes())?;
            }
            Err(GeoctlError::Stale {
                message: refusal.error,
                stale_datacenters: refusal.stale_datacenters,
            })
        }
        _ => Err(status_error(&url, &answer)),
    }
}

/// A datacenter's staleness for people: `staleness 120 ms`, `never heard`, or `never complete`.
pub fn describe_staleness(part: &DatacenterPart) -> String {
    match (part.staleness_ms, part.heard) {
        (Some(ms), _) => format!("staleness {ms} ms"),
        (None, false) => "never heard".to_owned(),
        (None, true) => "never complete (one of its slots was never heard)".to_owned(),
    }
}

/// One line per datacenter, names and values aligned; those in `stale` are marked.
fn render_datacenters(parts: &Ordered<DatacenterPart>, stale: &[String]) -> String {
    let name_width = parts.0.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let values: Vec<String> = parts.0.iter().map(|(_, p)| p.value.to_string()).collect();
    let value_width = values.iter().map(String::len).max().unwrap_or(0);
    let mut text = String::new();
    for ((name, part), value) in parts.0.iter().zip(&values) {
        let mark = if stale.contains(name) { "  STALE" } else { "" };
        let _ = writeln!(
            text,
            "  {name:<name_width$}  {value:>value_width$}  {}{mark}",
            describe_staleness(part)
        );
    }
    text
}

/// The datacenters of a partial reading that are stale under `max_staleness_ms` (none when the
/// reading is complete).
pub fn stale_in(reading: &GlobalReading, max_staleness_ms: u64) -> Vec<String> {
    if reading.complete {
        return Vec::new();
    }
    (reading.datacenters.0.iter())
        .filter(|(_, part)| part.staleness_ms.is_none_or(|ms| ms > max_staleness_ms))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The summary of a 200 answer; in a partial one, datacenters staler than `max_staleness_ms`
/// (the read's limit) are marked.
pub fn render_reading(reading: &GlobalReading, max_staleness_ms: u64) -> String {
    let complete = if reading.complete {
        "yes".to_owned()
    } else {
        "no: a partial answer; stale datacenters count with their last known values".to_owned()
    };
    let staleness = match reading.staleness_ms {
        Some(ms) => format!("{ms} ms"),
        None => "unknown: a datacenter was never complete".to_owned(),
    };
    format!(
        "counter    {}\nvalue      {}\ncomplete   {complete}\nstaleness  {staleness}\ndatacenters:\n{}",
        reading.id,
        reading.value,
        render_datacenters(&reading.datacenters, &stale_in(reading, max_staleness_ms))
    )
}

/// The explanation of a 503 answer: the error, the stale datacenters, every datacenter's part.
pub fn render_refusal(id: &str, refusal: &StaleRefusal) -> String {
    format!(
        "counter    {id}\nrefused    {}\nstale      {}\ndatacenters:\n{}",
        refusal.error,
        refusal.stale_datacenters.join(", "),
        render_datacenters(&refusal.datacenters, &refusal.stale_datacenters)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const READING: &str = r#"{"id":"page-views","value":42,"complete":false,"staleness_ms":null,
        "datacenters":{"USA_0":{"value":40,"staleness_ms":120,"heard":true},
                       "ASIA_0":{"value":2,"staleness_ms":null,"heard":true},
                       "EUROPE_0":{"value":0,"staleness_ms":null,"heard":false}}}"#;

    #[test]
    fn query_has_only_the_given_parameters() {
        assert_eq!(read_query(None, false), "");
        assert_eq!(read_query(Some(300), false), "?max_staleness_ms=300");
        assert_eq!(read_query(None, true), "?allow_partial=true");
        assert_eq!(
            read_query(Some(0), true),
            "?max_staleness_ms=0&allow_partial=true"
        );
    }

    #[test]
    fn datacenters_keep_the_answers_order() {
        let reading: GlobalReading = serde_json::from_str(READING).unwrap();
        let names: Vec<&str> = reading
            .datacenters
            .0
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(names, ["USA_0", "ASIA_0", "EUROPE_0"]);
        assert!(serde_json::from_str::<Ordered<u8>>("[1]").is_err());
    }

    #[test]
    fn values_beyond_i64_are_read() {
        let text = r#"{"value":18446744073709551616,"staleness_ms":1,"heard":true}"#;
        let part: DatacenterPart = serde_json::from_str(text).unwrap();
        assert_eq!(part.value, 1 << 64);
    }

    #[test]
    fn summary_has_one_line_per_datacenter() {
        let reading: GlobalReading = serde_json::from_str(READING).unwrap();
        let text = render_reading(&reading, 200);
        let expected = "\
counter    page-views
value      42
complete   no: a partial answer; stale datacenters count with their last known values
staleness  unknown: a datacenter was never complete
datacenters:
  USA_0     40  staleness 120 ms
  ASIA_0     2  never complete (one of its slots was never heard)  STALE
  EUROPE_0   0  never heard  STALE
";
        assert_eq!(text, expected);
    }

    #[test]
    fn only_partial_readings_mark_stale_datacenters() {
        let mut reading: GlobalReading = serde_json::from_str(READING).unwrap();
        assert_eq!(stale_in(&reading, 120), ["ASIA_0", "EUROPE_0"]);
        assert_eq!(stale_in(&reading, 119), ["USA_0", "ASIA_0", "EUROPE_0"]);
        reading.complete = true;
        assert!(stale_in(&reading, 1).is_empty());
        assert!(!render_reading(&reading, 1).contains("STALE"));
    }

    #[test]
    fn refusal_names_the_stale_datacenters() {
        let text = r#"{"error":"stale datacenters: EUROPE_0 (never heard)",
            "stale_datacenters":["EUROPE_0"],
            "datacenters":{"USA_0":{"value":-3,"staleness_ms":20,"heard":true},
                           "EUROPE_0":{"value":0,"staleness_ms":null,"heard":false}}}"#;
        let refusal: StaleRefusal = serde_json::from_str(text).unwrap();
        let expected = "\
counter    x
refused    stale datacenters: EUROPE_0 (never heard)
stale      EUROPE_0
datacenters:
  USA_0     -3  staleness 20 ms
  EUROPE_0   0  never heard  STALE
";
        assert_eq!(render_refusal("x", &refusal), expected);
    }
}
