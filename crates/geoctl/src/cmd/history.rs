//! `geoctl history ID --step S [--from T1 --to T2]`: reads a counter's history from the global
//! aggregator and prints one line per step, then the total and each datacenter's part.
//!
//! Refusals are `geoctl get`'s: a 503 (stale datacenters, no partial answer allowed) prints
//! the datacenters and fails with [`GeoctlError::Stale`], a 404 fails with
//! [`GeoctlError::NotFound`], a 400 (a step the counter keeps no level of) with its message.

use std::fmt::Write as _;
use std::io::Write;

use serde::Deserialize;

use super::get::{
    DatacenterPart, GlobalReading, Ordered, StaleRefusal, read_query, render_reading,
    render_refusal,
};
use crate::cluster::{ClusterClient, counter_path, parse_body, status_error, write_raw};
use crate::error::GeoctlError;

/// What `geoctl history` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryOptions {
    /// The counter's id.
    pub id: String,
    /// The step, in seconds: one of the counter's history levels.
    pub step: u32,
    /// The first step, unix seconds (`None`: as far back as the level keeps).
    pub from: Option<u64>,
    /// The last step, unix seconds (`None`: now).
    pub to: Option<u64>,
    /// A datacenter staler than this (milliseconds) is stale; `None`: the aggregator's default.
    pub max_staleness_ms: Option<u64>,
    /// Whether stale datacenters give a partial answer rather than a refusal.
    pub allow_partial: bool,
    /// Print the aggregator's JSON as it came.
    pub json: bool,
}

/// One step of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Point {
    /// The step's start, unix seconds.
    pub at: u64,
    /// Its hits.
    pub value: i128,
}

/// The global aggregator's 200 answer (not a flattened [`GlobalReading`]: serde buffers a
/// flattened struct's fields, and its buffer takes no 128-bit value).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GlobalHistory {
    /// The counter's id.
    pub id: String,
    /// The step, in seconds.
    pub step: u64,
    /// One point per step, oldest first.
    pub points: Vec<Point>,
    /// The sum of the points.
    pub value: i128,
    /// Whether no datacenter is stale.
    pub complete: bool,
    /// The largest datacenter staleness; `None` if one was never complete.
    pub staleness_ms: Option<u64>,
    /// Each datacenter's sum of the points, in topology order.
    pub datacenters: Ordered<DatacenterPart>,
}

/// The path and query of the read `options` asks for.
pub fn history_path(options: &HistoryOptions) -> String {
    let mut query = format!("step={}", options.step);
    if let Some(from) = options.from {
        let _ = write!(query, "&from={from}");
    }
    if let Some(to) = options.to {
        let _ = write!(query, "&to={to}");
    }
    let staleness = read_query(options.max_staleness_ms, options.allow_partial);
    if let Some(more) = staleness.strip_prefix('?') {
        let _ = write!(query, "&{more}");
    }
    format!("{}/history?{query}", counter_path(&options.id))
}

/// Reads the counter's history and prints it to `out`.
pub async fn run(
    cluster: &ClusterClient,
    options: &HistoryOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let (url, answer) = cluster
        .get_global(&options.id, &history_path(options))
        .await?;
    let raw = |out: &mut dyn Write| write_raw(out, &answer);
    match answer.status.as_u16() {
        200 if options.json => raw(out),
        200 => {
            let history: GlobalHistory = parse_body(&url, &answer)?;
            let max_staleness_ms =
                (options.max_staleness_ms).unwrap_or(cluster.topology().global.max_staleness_ms);
            out.write_all(render_history(&history, max_staleness_ms).as_bytes())?;
            Ok(())
        }
        404 => Err(GeoctlError::NotFound {
            id: options.id.clone(),
        }),
        503 => {
            let Ok(refusal) = parse_body::<StaleRefusal>(&url, &answer) else {
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

/// One line per step (its start in unix seconds and its value), then the reading's summary
/// with `value` the sum of the steps.
pub fn render_history(history: &GlobalHistory, max_staleness_ms: u64) -> String {
    let width = (history.points.iter())
        .map(|p| p.value.to_string().len())
        .max()
        .unwrap_or(1);
    let mut text = format!("step       {} s\n", history.step);
    for point in &history.points {
        let _ = writeln!(text, "  {}  {:>width$}", point.at, point.value);
    }
    let reading = GlobalReading {
        id: history.id.clone(),
        value: history.value,
        complete: history.complete,
        staleness_ms: history.staleness_ms,
        datacenters: history.datacenters.clone(),
    };
    text + &render_reading(&reading, max_staleness_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_carries_only_what_was_asked() {
        let mut options = HistoryOptions {
            id: "a b".into(),
            step: 60,
            from: None,
            to: None,
            max_staleness_ms: None,
            allow_partial: false,
            json: false,
        };
        assert_eq!(history_path(&options), "/counter/a%20b/history?step=60");
        options.from = Some(120);
        options.to = Some(240);
        options.allow_partial = true;
        assert_eq!(
            history_path(&options),
            "/counter/a%20b/history?step=60&from=120&to=240&allow_partial=true"
        );
    }

    #[test]
    fn each_step_has_a_line_before_the_summary() {
        let text = r#"{"id":"c","step":60,"from":120,"to":180,
            "points":[{"at":120,"value":3},{"at":180,"value":12}],
            "value":15,"complete":true,"staleness_ms":40,
            "datacenters":{"USA_0":{"value":15,"staleness_ms":40,"heard":true}}}"#;
        let history: GlobalHistory = serde_json::from_str(text).unwrap();
        let rendered = render_history(&history, 1_000);
        assert!(
            rendered.starts_with(
                "step       60 s\n  120   3\n  180  12\ncounter    c\nvalue      15\n"
            ),
            "{rendered}"
        );
    }
}
