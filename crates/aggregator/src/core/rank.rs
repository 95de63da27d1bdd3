//! What a ranking route (`GET /topk`, `GET /trending`) asks of the tier, and its rankings
//! from the index or a bounded scan run off the runtime.

use geocount_http::routing::RequestError;
use geocount_http::{parse_top_query, parse_trending_query};
use geocount_model::WindowQuery;
use geocount_ranking::{Answer, Ranked};

use super::Core;
use crate::error::AggregatorError;
use crate::ranking::{Asked, RankingRequest};
use crate::replica::{Replica, ScansBusy};
use crate::routes::Route;

impl Core {
    /// The rankings `ask` gives at `now_ms`, or the scan it asks for, run off the runtime.
    pub async fn rank(
        &self,
        now_ms: u64,
        ask: impl FnOnce(&Replica) -> Answer,
    ) -> Result<Vec<Vec<Ranked>>, ScansBusy> {
        self.scans.rank(&self.replica, now_ms, ask).await
    }

    /// What the ranking `ranking` asks at route `route` (`/topk` or `/trending`); query keys
    /// of its own go to `other`, which returns whether it took them.
    pub fn asked(
        &self,
        route: Route,
        ranking: &RankingRequest,
        other: impl FnMut(&str, &str) -> Result<bool, RequestError>,
    ) -> Result<Asked, AggregatorError> {
        let at_secs = ranking.at_ms / 1000;
        if route == Route::TopK {
            return Ok(Asked::Top(parse_top_query(
                ranking.query(),
                at_secs,
                other,
            )?));
        }
        let prefix = parse_trending_query(ranking.query(), other)?;
        let trending = &self.settings.trending;
        let threshold = trending
            .threshold(&prefix)
            .map_err(AggregatorError::NoTrendingPrefix)?;
        let window = WindowQuery {
            seconds: trending.window_seconds,
            at: at_secs,
        };
        Ok(Asked::Trending(prefix, threshold, window))
    }
}
