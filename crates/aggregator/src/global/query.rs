//! The query keys of the global tier's reads: `max_staleness_ms=N&allow_partial=true|false`
//! on every read, with `window=S&at=T` on a counter's.

use geocount_http::routing::{self, RequestError};
use geocount_model::WindowQuery;

use super::staleness::Freshness;

/// The query of a global read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadQuery {
    /// A datacenter staler than this (milliseconds) is stale for this read.
    pub max_staleness_ms: u64,
    /// Whether stale datacenters give a partial answer (200, `complete: false`) rather than 503.
    pub allow_partial: bool,
    /// The rolling window asked for, if any (`window=S&at=T`).
    pub window: Option<WindowQuery>,
}

impl ReadQuery {
    /// Parses `max_staleness_ms=N&allow_partial=true|false&window=S&at=T`, all optional (`N`
    /// defaults to `default_max_staleness_ms`, partial answers to not allowed, `T` to
    /// `now_secs`). Any other key, a key given twice or a bad value is refused.
    pub fn parse(
        query: Option<&str>,
        default_max_staleness_ms: u64,
        now_secs: u64,
    ) -> Result<Self, RequestError> {
        let mut staleness = StalenessKeys::default();
        let window =
            routing::parse_read_query(query, now_secs, |key, value| staleness.take(key, value))?;
        let freshness = staleness.freshness(default_max_staleness_ms);
        Ok(Self {
            max_staleness_ms: freshness.max_staleness_ms,
            allow_partial: freshness.allow_partial,
            window,
        })
    }
}

/// The staleness keys any global read takes: `max_staleness_ms=N&allow_partial=true|false`.
#[derive(Debug, Default)]
pub struct StalenessKeys {
    max_staleness_ms: Option<u64>,
    allow_partial: Option<bool>,
}

impl StalenessKeys {
    /// Takes `key` if it is a staleness key (refusing a bad value); returns whether it did.
    pub fn take(&mut self, key: &str, value: &str) -> Result<bool, RequestError> {
        let bad = |message: String| RequestError::BadRequest(message);
        match key {
            "max_staleness_ms" => {
                self.max_staleness_ms = Some(value.parse::<u64>().map_err(|_| {
                    bad(format!(
                        "max_staleness_ms must be a whole number of milliseconds, got {value:?}"
                    ))
                })?);
                Ok(true)
            }
            "allow_partial" => {
                self.allow_partial = Some(match value {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(bad(format!(
                            "allow_partial must be true or false, got {value:?}"
                        )));
                    }
                });
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The freshness asked for: `max_staleness_ms` defaults to `default_max_staleness_ms`,
    /// partial answers to not allowed.
    pub fn freshness(&self, default_max_staleness_ms: u64) -> Freshness {
        Freshness {
            max_staleness_ms: self.max_staleness_ms.unwrap_or(default_max_staleness_ms),
            allow_partial: self.allow_partial.unwrap_or(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_net::HttpError;
    use hyper::StatusCode;

    #[test]
    fn the_query_takes_optional_staleness_partial_and_window_keys() {
        assert_eq!(
            ReadQuery::parse(None, 5000, 77).unwrap(),
            ReadQuery {
                max_staleness_ms: 5000,
                allow_partial: false,
                window: None,
            }
        );
        assert_eq!(
            ReadQuery::parse(
                Some("allow_partial=true&max_staleness_ms=300&window=60"),
                5000,
                77
            )
            .unwrap(),
            ReadQuery {
                max_staleness_ms: 300,
                allow_partial: true,
                window: Some(WindowQuery {
                    seconds: 60,
                    at: 77
                }),
            }
        );
        let query = ReadQuery::parse(Some("window=300&at=4"), 5000, 77).unwrap();
        assert_eq!(
            query.window,
            Some(WindowQuery {
                seconds: 300,
                at: 4
            })
        );
        for bad in [
            "max_staleness_ms=soon",
            "max_staleness_ms=-1",
            "allow_partial=yes",
            "colour=blue",
            "max_staleness_ms=1&max_staleness_ms=2",
            "window=0",
            "window=x",
            "at=5",
            "window=5&at=-1",
            "window=5&window=6",
        ] {
            let error = ReadQuery::parse(Some(bad), 5000, 77).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
