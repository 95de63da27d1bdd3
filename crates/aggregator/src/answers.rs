//! The parts of an answer both tiers give alike: a counter's total, a ranking with what it was
//! asked, and what the aggregator holds (`/healthz`). The global tier adds each datacenter's
//! part beside them.

use geocount_http::TopQuery;
use geocount_model::WindowQuery;
use geocount_ranking::Ranked;
use serde::Serialize;

use crate::replica::Replica;

/// A counter's total, as every read reports it first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Total {
    /// The counter's id.
    pub id: String,
    /// The sum of its slots (wide enough that no sum of 64-bit slots overflows); for a unique
    /// counter, the estimated number of distinct items in the union of its slots.
    pub value: i128,
    /// For a unique counter: the relative standard error of `value`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standard_error: Option<f64>,
    /// When the counter expires (unix ms), if its description says.
    #[serde(rename = "expiresAtMs", skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

/// The answer to `GET /topk`: the counters ranked, with what was asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopAnswer {
    /// The counters, highest first (ties by id ascending).
    pub top: Vec<Ranked>,
    /// How many at most, the id prefix and the window asked for.
    #[serde(flatten)]
    pub query: TopQuery,
    /// The staleness of what was ranked: the worst of its parts (`None` if any was never
    /// complete).
    pub staleness_ms: Option<u64>,
    /// Whether every part was fresh enough.
    pub complete: bool,
}

/// The answer to `GET /trending`: every counter with the prefix at or over its threshold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrendingAnswer {
    /// The configured prefix asked for.
    pub prefix: String,
    /// Its threshold: the least count in the window that trends.
    pub threshold: i64,
    /// The window counted: `[trending] window_seconds` ending now.
    pub window: WindowQuery,
    /// The counters, highest first.
    pub trending: Vec<Ranked>,
    /// The staleness of what was ranked: the worst of its parts (`None` if any was never
    /// complete).
    pub staleness_ms: Option<u64>,
    /// Whether every part was fresh enough.
    pub complete: bool,
}

/// A ranking's answer: a top K or the trending counters, with what was asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Ranking {
    /// The answer to `GET /topk`.
    Top(TopAnswer),
    /// The answer to `GET /trending`.
    Trending(TrendingAnswer),
}

/// A ranked list under the name its route gives it: `top` or `trending`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Listed {
    /// `GET /topk`'s list.
    Top {
        /// The counters, highest first.
        top: Vec<Ranked>,
    },
    /// `GET /trending`'s list.
    Trending {
        /// The counters, highest first.
        trending: Vec<Ranked>,
    },
}

/// What an aggregator holds, as its `/healthz` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Held {
    /// Counters with any copy.
    pub counters: usize,
    /// The bytes of its copies, as its byte bound counts them.
    pub state_bytes: u64,
    /// Its byte bound.
    pub max_state_bytes: u64,
    /// Once entries were refused past the bound: what to report, naming the setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_bound: Option<String>,
}

impl Held {
    /// What `replica` holds.
    pub fn of(replica: &Replica) -> Self {
        Self {
            counters: replica.copies().len(),
            state_bytes: replica.copies().bytes().held(),
            max_state_bytes: replica.copies().bytes().max(),
            over_bound: replica.over_bound(),
        }
    }
}
