//! The world's and each datacenter's sum over an id prefix (`GET /aggregate`), under the
//! staleness rules of every read ([`super::staleness`]): stale datacenters refuse the answer
//! (503 naming them) unless `allow_partial=true`, which answers with `complete: false` and
//! sums their last known values.

use geocount_http::AggregateQuery;
use geocount_sync::worst_staleness;

use super::staleness::{Freshness, named, stale_datacenters, stale_reasons};
use crate::aggregate::SumAnswer;
use crate::parts::{DatacenterReading, DatacenterSum, StaleRead};
use crate::replica::Sums;

/// The answer to `query` from `sums` (a group per datacenter, named `names`), each
/// datacenter's staleness in `readings`; or the refusal naming the stale datacenters.
pub fn answer(
    names: &[String],
    readings: &[DatacenterReading],
    (query, sums): (AggregateQuery, Sums),
    freshness: Freshness,
) -> Result<SumAnswer, StaleRead<DatacenterSum>> {
    let parts: Vec<DatacenterSum> = (sums.groups.iter().zip(readings))
        .map(|(sum, reading)| DatacenterSum {
            sum: sum.sum,
            counters: sum.counters,
            staleness_ms: reading.staleness_ms,
            heard: reading.heard,
        })
        .collect();
    let datacenters = named(names, parts);
    let stale = stale_datacenters(readings, freshness.max_staleness_ms);
    if !stale.is_empty() && !freshness.allow_partial {
        return Err(StaleRead {
            error: stale_reasons(names, readings, &stale, freshness.max_staleness_ms),
            stale_datacenters: stale.into_iter().map(|dc| names[dc].clone()).collect(),
            datacenters,
        });
    }
    let staleness_ms = worst_staleness(readings.iter().map(|r| r.staleness_ms));
    let mut answer = SumAnswer::new(query, sums.all, staleness_ms, stale.is_empty());
    answer.datacenters = Some(datacenters);
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::global::staleness::tests::reading;
    use crate::replica::Sum;

    fn sums() -> Sums {
        let sum = |sum, counters| Sum { sum, counters };
        Sums {
            all: sum(12, 3),
            groups: vec![sum(10, 2), sum(2, 2)],
        }
    }

    fn query() -> AggregateQuery {
        AggregateQuery {
            prefix: "a".into(),
            window: None,
        }
    }

    #[test]
    fn fresh_datacenters_answer_the_world_and_each_datacenter() {
        let names = ["USA_0".to_owned(), "ASIA_0".to_owned()];
        let readings = [reading(0, Some(20), true), reading(0, Some(300), true)];
        let freshness = Freshness {
            max_staleness_ms: 1_000,
            allow_partial: false,
        };
        let answer = answer(&names, &readings, (query(), sums()), freshness).unwrap();
        assert_eq!((answer.sum, answer.counters), (12, 3));
        assert_eq!((answer.staleness_ms, answer.complete), (Some(300), true));
        let datacenters = answer.datacenters.unwrap();
        assert_eq!(datacenters.0[1].0, "ASIA_0");
        assert_eq!(
            datacenters.0[1].1,
            DatacenterSum {
                sum: 2,
                counters: 2,
                staleness_ms: Some(300),
                heard: true
            }
        );
    }

    #[test]
    fn stale_datacenters_refuse_unless_partial_is_allowed() {
        let names = ["USA_0".to_owned(), "ASIA_0".to_owned()];
        let readings = [reading(0, Some(20), true), reading(0, None, false)];
        let mut freshness = Freshness {
            max_staleness_ms: 1_000,
            allow_partial: false,
        };
        let refusal = answer(&names, &readings, (query(), sums()), freshness).unwrap_err();
        assert_eq!(refusal.stale_datacenters, ["ASIA_0"]);
        assert_eq!(refusal.error, "stale datacenters: ASIA_0 (never heard)");
        assert_eq!(refusal.datacenters.0[0].1.sum, 10);
        freshness.allow_partial = true;
        let partial = answer(&names, &readings, (query(), sums()), freshness).unwrap();
        assert_eq!((partial.sum, partial.complete), (12, false));
        assert_eq!(partial.staleness_ms, None);
    }
}
