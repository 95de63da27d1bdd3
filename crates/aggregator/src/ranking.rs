//! What a ranking (`GET /topk`, `GET /trending`) asks of a replica, and how the tier's other
//! replicas are asked for their parts of it ([`crate::core::spread`]).

use geocount_http::TopQuery;
use geocount_http::routing::RequestError;
use geocount_model::WindowQuery;
use geocount_ranking::{Answer, Ranked, Scope};

use crate::answers::{Listed, Ranking, TopAnswer, TrendingAnswer};
use crate::replica::Replica;

/// What a ranking route asks, parsed: a top K (`GET /topk`) or the trending counters of a
/// configured prefix (`GET /trending`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// `GET /topk`.
    Top(TopQuery),
    /// `GET /trending`: the prefix, its threshold and the window counted.
    Trending(String, i64, WindowQuery),
}

impl Asked {
    /// What to rank: the id prefix, how many at most, the least value and the window.
    pub fn ranking(&self) -> (&str, usize, Option<i128>, Option<WindowQuery>) {
        match self {
            Asked::Top(query) => (&query.prefix, query.k, None, query.window),
            Asked::Trending(prefix, threshold, window) => (
                prefix,
                usize::MAX,
                Some(i128::from(*threshold)),
                Some(*window),
            ),
        }
    }

    /// The rankings of what it asks at `now_ms`, one per scope of `scopes`, from `replica`'s
    /// index; or the scan that finds them.
    pub fn rank(&self, replica: &Replica, scopes: &[Scope], now_ms: u64) -> Answer {
        let mut index = replica.top_index().expect("indexed at start");
        let (prefix, k, min_value, window) = self.ranking();
        let counters = replica.ranked_at(now_ms);
        index.rank(scopes, prefix, k, min_value, window, &counters)
    }

    /// The name of its list in answers: `top` or `trending`.
    pub fn list(&self) -> &'static str {
        match self {
            Asked::Top(_) => "top",
            Asked::Trending(..) => "trending",
        }
    }

    /// `list` under the name this route gives it.
    pub fn listed(&self, list: Vec<Ranked>) -> Listed {
        match self {
            Asked::Top(_) => Listed::Top { top: list },
            Asked::Trending(..) => Listed::Trending { trending: list },
        }
    }

    /// The answer of the ranked `list`, with its staleness and whether it is complete.
    pub fn answer(self, list: Vec<Ranked>, staleness_ms: Option<u64>, complete: bool) -> Ranking {
        match self {
            Asked::Top(query) => Ranking::Top(TopAnswer {
                top: list,
                query,
                staleness_ms,
                complete,
            }),
            Asked::Trending(prefix, threshold, window) => Ranking::Trending(TrendingAnswer {
                prefix,
                threshold,
                window,
                trending: list,
                staleness_ms,
                complete,
            }),
        }
    }
}

/// The query key by which a replica asks another for its own part of a ranking or a sum. Its
/// value is the asker's clock (unix ms), so that every part counts the same window.
pub const PART_KEY: &str = "part_of_ms";

/// A ranking (or a sum, `GET /aggregate`) asked of this replica, as the tier's other replicas
/// are asked for their parts.
#[derive(Debug, Clone)]
pub struct RankingRequest {
    /// `/topk`, `/trending` or `/aggregate`.
    pub path: String,
    /// The query, less [`PART_KEY`].
    pub query: Option<String>,
    /// The asker's clock when another replica asks for this one's part.
    pub part_of: Option<u64>,
    /// When it ranks (unix ms): the asker's clock, or this replica's.
    pub at_ms: u64,
    /// The caller's credentials, passed on to the replicas asked.
    pub authorization: Option<String>,
}

impl RankingRequest {
    /// The ranking `request` asks for at `path`, at `now_ms` unless another replica asks.
    pub fn new<B>(
        path: &str,
        request: &hyper::Request<B>,
        now_ms: u64,
    ) -> Result<Self, RequestError> {
        let (part_of, query) = take_part(request.uri().query())?;
        let authorization = (request.headers().get(hyper::header::AUTHORIZATION))
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        Ok(Self {
            path: path.to_owned(),
            query,
            part_of,
            at_ms: part_of.unwrap_or(now_ms),
            authorization,
        })
    }

    /// The query, less [`PART_KEY`].
    pub fn query(&self) -> Option<&str> {
        self.query.as_deref()
    }
}

/// `query` without [`PART_KEY`], and the asker's clock when it had one.
pub fn take_part(query: Option<&str>) -> Result<(Option<u64>, Option<String>), RequestError> {
    let Some(query) = query else {
        return Ok((None, None));
    };
    let mut part = None;
    let mut rest = form_urlencoded::Serializer::new(String::new());
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if key == PART_KEY {
            let ms = value.parse::<u64>().map_err(|_| {
                RequestError::BadRequest(format!("{PART_KEY} must be unix milliseconds"))
            })?;
            part = Some(ms);
        } else {
            rest.append_pair(&key, &value);
        }
    }
    Ok((part, Some(rest.finish()).filter(|q| !q.is_empty())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_part_key_is_taken_out_of_the_query() {
        let (part, rest) = take_part(Some("k=3&part_of_ms=1700000000123&prefix=a")).unwrap();
        assert_eq!(part, Some(1_700_000_000_123));
        assert_eq!(rest.as_deref(), Some("k=3&prefix=a"));
        assert_eq!(take_part(None).unwrap(), (None, None));
        assert!(take_part(Some("part_of_ms=soon")).is_err());
    }
}
