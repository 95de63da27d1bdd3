//! What `GET /metrics` needs beside the registry: the Prometheus text format 0.0.4 for a
//! scraper that asks for it and not for OpenMetrics (`promtool check metrics`, older agents),
//! and the process's resident memory.

use std::collections::HashSet;

use hyper::HeaderMap;
use hyper::header::ACCEPT;

/// The media type of `GET /metrics` in the Prometheus text format 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request with `headers` asks for the text format 0.0.4: its `Accept` names
/// `text/plain` and not OpenMetrics. Everything else (no `Accept`, `*/*`, Prometheus's own
/// list, which names OpenMetrics first) gets OpenMetrics.
pub fn wants_text(headers: &HeaderMap) -> bool {
    let accept: Vec<&str> = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect();
    let names = |media: &str| accept.iter().any(|a| a.contains(media));
    names("text/plain") && !names("application/openmetrics-text")
}

/// `openmetrics` (as `prometheus_client` encodes it) in the text format 0.0.4: a counter's
/// family is named with its `_total` suffix there, and there is no `# EOF` or `# UNIT`.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let comment = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|kind| Some((kind, line.strip_prefix(kind)?)));
        match comment.and_then(|(kind, rest)| Some((kind, rest.split_once(' ')?))) {
            Some((kind, (name, tail))) if counters.contains(name) => {
                text.push_str(&format!("{kind}{name}_total {tail}"));
            }
            _ => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

/// This process's resident memory in bytes (`VmRSS` of `/proc/self/status`); `None` where
/// there is no such file.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn counters_take_their_suffix_and_the_end_marker_goes() {
        let openmetrics = "# HELP a_writes Writes.\n# TYPE a_writes counter\na_writes_total 3\n\
                           # HELP a_held Held.\n# TYPE a_held gauge\na_held 2\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(openmetrics),
            "# HELP a_writes_total Writes.\n# TYPE a_writes_total counter\na_writes_total 3\n\
             # HELP a_held Held.\n# TYPE a_held gauge\na_held 2\n"
        );
    }

    #[test]
    fn only_a_scraper_asking_for_plain_text_gets_it() {
        let with = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(ACCEPT, HeaderValue::from_str(accept).unwrap());
            wants_text(&headers)
        };
        assert!(with("text/plain; version=0.0.4"));
        assert!(!with("*/*"));
        assert!(!with(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(!wants_text(&HeaderMap::new()));
    }

    #[test]
    fn resident_memory_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
        }
    }
}
