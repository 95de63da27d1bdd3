//! Sums over an id prefix (`GET /aggregate`): the scan through the tier's bounded scans
//! ([`crate::replica::Scans`], 429 past `http.max_concurrent_scans`), and the answer with the
//! parts the tier's other groups of partitions hold added in ([`super::spread`]).

use geocount_http::AggregateQuery;
use geocount_net::Response;

use super::Core;
use crate::aggregate::{SumAnswer, SumPart};
use crate::error::AggregatorError;
use crate::ranking::RankingRequest;
use crate::replica::{ScansBusy, SumScan, Sums};

impl Core {
    /// The sums of the counters `query` asks for as they read at `now_ms`, slot `s` counting
    /// in group `slot_groups[s]` of `groups`: a scan of every counter, refused past
    /// `http.max_concurrent_scans`.
    pub async fn sum(
        &self,
        query: &AggregateQuery,
        now_ms: u64,
        slot_groups: Vec<usize>,
        groups: usize,
    ) -> Result<Sums, ScansBusy> {
        let scan = SumScan::new(&query.prefix, query.window, slot_groups, groups);
        self.scans.run(&self.replica, scan, now_ms).await
    }

    /// `answer`, this replica's sum asked by `request`, as the reply: as it is when another
    /// replica asked for this one's part or the tier has no other partitions, else with every
    /// other group's part added.
    pub async fn reply_sum(
        &self,
        mut answer: SumAnswer,
        request: &RankingRequest,
    ) -> Result<Response, AggregatorError> {
        if request.part_of.is_some() || self.settings.partitions.is_all() {
            return Ok(self.answer(&answer));
        }
        for body in self.parts(request).await? {
            let part: SumPart = serde_json::from_slice(&body).map_err(AggregatorError::BadPart)?;
            answer.merge(&part);
        }
        Ok(self.answer(&answer))
    }
}
