//! The queries of `GET /topk`, `GET /trending` and `GET /aggregate`, shared by both
//! aggregators. Like every read's query, unknown keys, repeated keys and bad values are refused
//! with 400.

use geocount_model::WindowQuery;
use geocount_model::top_k::MAX_K;
use serde::Serialize;

use crate::routing::{RequestError, parse_read_query};

/// The `k` of a `/topk` without one.
pub const DEFAULT_K: usize = 10;

/// A `/topk` query: `k=K&prefix=P[&window=S[&at=T]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopQuery {
    /// How many counters at most (1..=[`MAX_K`], default [`DEFAULT_K`]).
    pub k: usize,
    /// Only ids starting with this (default: every id).
    pub prefix: String,
    /// Rank by hits in this window rather than by all-time totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowQuery>,
}

/// Parses a `/topk` query: `k`, `prefix`, `window` and `at` (default `now_secs`) here; any
/// other key goes to `other`, which returns whether it took it.
pub fn parse_top_query(
    query: Option<&str>,
    now_secs: u64,
    mut other: impl FnMut(&str, &str) -> Result<bool, RequestError>,
) -> Result<TopQuery, RequestError> {
    let (mut k, mut prefix) = (None, None);
    let window = parse_read_query(query, now_secs, |key, value| match key {
        "k" => {
            let parsed = value.parse::<usize>().ok();
            k = Some(parsed.filter(|k| (1..=MAX_K).contains(k)).ok_or_else(|| {
                RequestError::BadRequest(format!(
                    "k must be a whole number from 1 to {MAX_K}, got {value:?}"
                ))
            })?);
            Ok(true)
        }
        "prefix" => {
            prefix = Some(value.to_owned());
            Ok(true)
        }
        _ => other(key, value),
    })?;
    Ok(TopQuery {
        k: k.unwrap_or(DEFAULT_K),
        prefix: prefix.unwrap_or_default(),
        window,
    })
}

/// Parses a `/trending` query: `prefix` (required) here, any other key to `other`. The window
/// is the topology's (`[trending] window_seconds`, ending now), so `window` and `at` are
/// refused.
pub fn parse_trending_query(
    query: Option<&str>,
    mut other: impl FnMut(&str, &str) -> Result<bool, RequestError>,
) -> Result<String, RequestError> {
    let mut prefix = None;
    let window = parse_read_query(query, 0, |key, value| match key {
        "prefix" => {
            prefix = Some(value.to_owned());
            Ok(true)
        }
        _ => other(key, value),
    })?;
    if window.is_some() {
        return Err(RequestError::BadRequest(
            "trending counts over the [trending] window_seconds ending now: window= is not taken"
                .into(),
        ));
    }
    prefix.ok_or_else(|| RequestError::BadRequest("prefix is required".into()))
}

/// A `/aggregate` query: `prefix=P[&window=S[&at=T]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AggregateQuery {
    /// Sum the counters whose id starts with this (empty: every counter).
    pub prefix: String,
    /// Sum the hits in this window rather than all-time totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowQuery>,
}

/// Parses a `/aggregate` query: `prefix` (required; no id starts with a prefix longer than an
/// id or holding a control character, so such a prefix is refused), `window` and `at` (default
/// `now_secs`) here; any other key goes to `other`, which returns whether it took it.
pub fn parse_aggregate_query(
    query: Option<&str>,
    now_secs: u64,
    mut other: impl FnMut(&str, &str) -> Result<bool, RequestError>,
) -> Result<AggregateQuery, RequestError> {
    let mut prefix = None;
    let window = parse_read_query(query, now_secs, |key, value| match key {
        "prefix" => {
            if !value.is_empty() {
                geocount_model::counter_id::validate(value).map_err(|error| {
                    RequestError::BadRequest(format!("prefix {value:?} begins no id: {error}"))
                })?;
            }
            prefix = Some(value.to_owned());
            Ok(true)
        }
        _ => other(key, value),
    })?;
    let prefix = prefix.ok_or_else(|| {
        RequestError::BadRequest("prefix is required (prefix= sums every counter)".into())
    })?;
    Ok(AggregateQuery { prefix, window })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_queries_default_and_refuse_bad_values() {
        let none = |_: &str, _: &str| Ok(false);
        assert_eq!(
            parse_top_query(None, 77, none).unwrap(),
            TopQuery {
                k: 10,
                prefix: String::new(),
                window: None
            }
        );
        let query = parse_top_query(Some("k=3&prefix=%23r&window=60"), 77, none).unwrap();
        assert_eq!((query.k, query.prefix.as_str()), (3, "#r"));
        assert_eq!(
            query.window,
            Some(WindowQuery {
                seconds: 60,
                at: 77
            })
        );
        for bad in [
            "k=0",
            "k=1001",
            "k=x",
            "k=1&k=2",
            "colour=red",
            "at=5",
            "window=0",
        ] {
            assert!(parse_top_query(Some(bad), 77, none).is_err(), "{bad}");
        }
        let mut seen = false;
        parse_top_query(Some("allow_partial=true"), 77, |key, _| {
            seen = key == "allow_partial";
            Ok(seen)
        })
        .unwrap();
        assert!(seen);
    }

    #[test]
    fn trending_queries_need_a_prefix_and_take_no_window() {
        let none = |_: &str, _: &str| Ok(false);
        assert_eq!(parse_trending_query(Some("prefix=%23"), none).unwrap(), "#");
        for bad in [
            "",
            "window=60&prefix=%23",
            "prefix=a&prefix=b",
            "k=3&prefix=%23",
        ] {
            assert!(parse_trending_query(Some(bad), none).is_err(), "{bad}");
        }
    }

    #[test]
    fn aggregate_queries_need_a_prefix_an_id_could_start_with() {
        let none = |_: &str, _: &str| Ok(false);
        assert_eq!(
            parse_aggregate_query(Some("prefix=item%3A"), 77, none).unwrap(),
            AggregateQuery {
                prefix: "item:".into(),
                window: None
            }
        );
        let every = parse_aggregate_query(Some("prefix=&window=60&at=50"), 77, none).unwrap();
        assert_eq!(every.prefix, "");
        assert_eq!(
            every.window,
            Some(WindowQuery {
                seconds: 60,
                at: 50
            })
        );
        let long = format!("prefix={}", "a".repeat(257));
        for bad in [
            "",
            "window=60",
            "prefix=a&prefix=b",
            "prefix=a%0Ab",
            long.as_str(),
            "prefix=a&k=3",
            "prefix=a&window=0",
            "prefix=a&at=5",
        ] {
            assert!(parse_aggregate_query(Some(bad), 77, none).is_err(), "{bad}");
        }
        let mut seen = false;
        parse_aggregate_query(Some("prefix=a&max_staleness_ms=5"), 77, |key, _| {
            seen = key == "max_staleness_ms";
            Ok(seen)
        })
        .unwrap();
        assert!(seen);
    }
}
