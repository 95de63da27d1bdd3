//! The answer to a sum over an id prefix (`GET /aggregate`) at both tiers, and how the parts
//! the tier's other groups of partitions hold add into it; the tier computes it in
//! [`crate::core::sum`].
//!
//! - Parts add exactly: partitions are disjoint, so no counter is in two parts. Sums and counts
//!   add; the staleness is the worst part's (`None` if any is `None`); the answer is complete
//!   only if every part is; a datacenter was heard only if every part heard it.
//! - Only sum counters are summed ([`crate::replica::sums`]); `counters` counts them.

use geocount_http::AggregateQuery;
use geocount_http::routing::Named;
use geocount_model::WindowQuery;
use geocount_sync::worst_staleness;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use crate::parts::DatacenterSum;
use crate::replica::Sum;

/// The answer to `GET /aggregate`: the sum over the counters with the prefix, with what was
/// asked and how fresh it is; at the global tier each datacenter's sum too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SumAnswer {
    /// The id prefix asked for.
    pub prefix: String,
    /// The sum of the sum counters with the prefix: all-time totals, or hits in the window.
    pub sum: i128,
    /// How many sum counters it adds.
    pub counters: u64,
    /// The window asked for, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowQuery>,
    /// The staleness of what was summed: the worst of its parts (`None` if any was never
    /// complete).
    pub staleness_ms: Option<u64>,
    /// Whether every part was fresh enough.
    pub complete: bool,
    /// At the global tier, each datacenter's own sum, in topology order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datacenters: Option<Named<DatacenterSum>>,
}

/// What a sum's merge reads of another replica's part.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SumPart {
    /// Its sum.
    pub sum: i128,
    /// Its counters.
    pub counters: u64,
    /// Its staleness.
    pub staleness_ms: Option<u64>,
    /// Whether it is complete.
    pub complete: bool,
    /// Each datacenter's part of it (the global tier).
    #[serde(default)]
    pub datacenters: HashMap<String, DatacenterSum>,
}

impl SumAnswer {
    /// The answer to `query` from `all`, the sum over every slot, `staleness_ms` being the
    /// staleness of what was summed; `complete` when no part is stale.
    pub fn new(query: AggregateQuery, all: Sum, staleness_ms: Option<u64>, complete: bool) -> Self {
        Self {
            prefix: query.prefix,
            sum: all.sum,
            counters: all.counters,
            window: query.window,
            staleness_ms,
            complete,
            datacenters: None,
        }
    }

    /// Adds `part`, another group of partitions' answer to the same sum.
    pub fn merge(&mut self, part: &SumPart) {
        self.sum += part.sum;
        self.counters += part.counters;
        self.staleness_ms = worst_staleness([self.staleness_ms, part.staleness_ms]);
        self.complete &= part.complete;
        for (name, datacenter) in self.datacenters.iter_mut().flat_map(|d| &mut d.0) {
            match part.datacenters.get(name) {
                Some(theirs) => {
                    datacenter.sum += theirs.sum;
                    datacenter.counters += theirs.counters;
                    datacenter.staleness_ms =
                        worst_staleness([datacenter.staleness_ms, theirs.staleness_ms]);
                    datacenter.heard &= theirs.heard;
                }
                None => {
                    datacenter.staleness_ms = None;
                    datacenter.heard = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datacenter(sum: i128, counters: u64, staleness_ms: Option<u64>) -> DatacenterSum {
        DatacenterSum {
            sum,
            counters,
            staleness_ms,
            heard: staleness_ms.is_some(),
        }
    }

    fn local() -> SumAnswer {
        let all = Sum {
            sum: i128::from(i64::MAX),
            counters: 3,
        };
        let query = AggregateQuery {
            prefix: "a:".into(),
            window: None,
        };
        let mut answer = SumAnswer::new(query, all, Some(40), true);
        answer.datacenters = Some(Named(vec![
            (
                "USA_0".into(),
                datacenter(i128::from(i64::MAX) - 1, 2, Some(40)),
            ),
            ("ASIA_0".into(), datacenter(1, 1, Some(10))),
        ]));
        answer
    }

    #[test]
    fn parts_add_their_sums_and_keep_the_worst_staleness() {
        let part = r#"{"replica": 1, "prefix": "a:", "sum": 9223372036854775807, "counters": 2,
            "staleness_ms": 70, "complete": true, "datacenters": {
            "USA_0": {"sum": 5, "counters": 1, "staleness_ms": 70, "heard": true},
            "ASIA_0": {"sum": 9223372036854775802, "counters": 1, "staleness_ms": null,
                       "heard": true}}}"#;
        let mut answer = local();
        answer.merge(&serde_json::from_str(part).unwrap());
        assert_eq!(answer.sum, 2 * i128::from(i64::MAX), "no overflow");
        assert_eq!((answer.counters, answer.staleness_ms), (5, Some(70)));
        assert!(answer.complete);
        let datacenters = &answer.datacenters.as_ref().unwrap().0;
        assert_eq!(
            datacenters[0].1,
            datacenter(i128::from(i64::MAX) + 4, 3, Some(70))
        );
        assert_eq!(
            (datacenters[1].1.sum, datacenters[1].1.staleness_ms),
            (i128::from(i64::MAX) - 4, None)
        );
        let encoded = serde_json::to_value(&answer).unwrap();
        assert_eq!(encoded["sum"].to_string(), "18446744073709551614");

        let sums_beyond_u64 = r#"{"sum": 36893488147419103232, "counters": 1,
            "staleness_ms": 1, "complete": false}"#;
        answer.merge(&serde_json::from_str(sums_beyond_u64).unwrap());
        assert_eq!(answer.sum, 2 * i128::from(i64::MAX) + (1 << 65));
        assert!(!answer.complete, "complete only if every part is");
        let datacenters = &answer.datacenters.as_ref().unwrap().0;
        assert!(
            !datacenters[0].1.heard,
            "a part without the datacenter never heard it"
        );
    }

    #[test]
    fn a_datacenter_answer_has_no_datacenters() {
        let encoded = serde_json::to_value(SumAnswer {
            datacenters: None,
            window: Some(WindowQuery { seconds: 60, at: 7 }),
            ..local()
        })
        .unwrap();
        assert_eq!(
            encoded,
            serde_json::json!({"prefix": "a:", "sum": i64::MAX, "counters": 3,
                "window": {"seconds": 60, "at": 7}, "staleness_ms": 40, "complete": true})
        );
    }
}
