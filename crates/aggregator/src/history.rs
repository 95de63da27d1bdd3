//! `GET /counter/{id}/history?step=S&from=T1&to=T2` at both tiers: one value per step of one of
//! the counter's history levels, summed over every slot (and datacenter) the tier holds, like a
//! window read; the global tier applies its staleness rules exactly as `GET /counter/{id}`
//! does (docs/api.md, "History").
//!
//! - `step` must be one of the counter's levels (its description's; before one has arrived,
//!   those its slots' records keep); 400 otherwise, and for a unique counter.
//! - `from` and `to` are unix seconds, taken to the start of their step; `to` defaults to now,
//!   `from` to as far back as the level keeps (`keepSeconds / stepSeconds` points). At most
//!   [`MAX_POINTS`] points; `from` after `to` is 400.
//! - A point is the sum of the slots' buckets of that step which their owner still keeps.
//! - Copies count by the lifecycle rule ([`crate::lifecycle`]), as in every read: one wiped by
//!   a reset or delete counts zero, and a deleted or expired counter is not found.
//!
//! What both tiers share is here; each tier's answer is its own (`datacenter/history.rs`,
//! `global/history.rs`).

use geocount_http::routing::RequestError;
use geocount_model::{HistoryLevel, SlotRecord};
use serde::Serialize;

use crate::lifecycle::Presence;
use crate::replica::HeldCounter;

/// The most points one history read answers.
pub const MAX_POINTS: u64 = 10_000;

/// What a history read asks for, before it is resolved against the counter's levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryQuery {
    /// The step, in seconds: one of the counter's levels.
    pub step: u32,
    /// The first step's time, unix seconds (default: as far back as the level keeps).
    pub from: Option<u64>,
    /// The last step's time, unix seconds (default: now).
    pub to: Option<u64>,
}

impl HistoryQuery {
    /// Parses `step=S&from=T1&to=T2` (`step` required); every other key goes to `other`,
    /// which returns whether it took it. Unknown keys, repeated keys and bad values are 400.
    pub fn parse(
        query: Option<&str>,
        mut other: impl FnMut(&str, &str) -> Result<bool, RequestError>,
    ) -> Result<Self, RequestError> {
        let bad = |message: String| RequestError::BadRequest(message);
        let (mut step, mut from, mut to) = (None, None, None);
        let mut seen = std::collections::HashSet::new();
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if !seen.insert(key.clone()) {
                return Err(bad(format!("query parameter {key} is given twice")));
            }
            let seconds = |name: &str| {
                value.parse::<u64>().map_err(|_| {
                    bad(format!(
                        "{name} must be a time in whole unix seconds, got {value:?}"
                    ))
                })
            };
            match key.as_ref() {
                "step" => {
                    let s = value.parse::<u32>().ok().filter(|s| *s > 0);
                    step = Some(s.ok_or_else(|| {
                        bad(format!(
                            "step must be a whole number of seconds above 0, got {value:?}"
                        ))
                    })?);
                }
                "from" => from = Some(seconds("from")?),
                "to" => to = Some(seconds("to")?),
                key => {
                    if !other(key, &value)? {
                        return Err(bad(format!("unknown query parameter {key:?}")));
                    }
                }
            }
        }
        let step = step.ok_or_else(|| {
            bad("step is required: one of the counter's history steps, in seconds".into())
        })?;
        Ok(Self { step, from, to })
    }

    /// The steps to answer for a counter keeping `levels`, at `now_secs`.
    pub fn resolve(&self, levels: &[HistoryLevel], now_secs: u64) -> Result<Range, RequestError> {
        let bad = |message: String| RequestError::BadRequest(message);
        let Some(level) = levels.iter().find(|l| l.step_seconds == self.step) else {
            let steps: Vec<String> = levels.iter().map(|l| l.step_seconds.to_string()).collect();
            return Err(bad(if steps.is_empty() {
                "the counter keeps no history (create it with \"history\")".to_owned()
            } else {
                format!(
                    "step={} is not one of the counter's history steps ({})",
                    self.step,
                    steps.join(", ")
                )
            }));
        };
        let step = u64::from(level.step_seconds);
        let to = level.bucket_of(self.to.unwrap_or(now_secs));
        let kept = u64::from(level.keep_seconds).saturating_sub(step);
        let from = level.bucket_of(self.from.unwrap_or(to.saturating_sub(kept)));
        if from > to {
            return Err(bad(format!("from ({from}) is after to ({to})")));
        }
        let points = (to - from) / step + 1;
        if points > MAX_POINTS {
            return Err(bad(format!(
                "{points} points asked: at most {MAX_POINTS} (narrow from and to, or take a longer step)"
            )));
        }
        Ok(Range { step, from, to })
    }
}

/// The steps a history read answers: every `step` from `from` through `to` (step starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The step, in seconds.
    pub step: u64,
    /// The first step's start.
    pub from: u64,
    /// The last step's start.
    pub to: u64,
}

impl Range {
    /// How many points.
    pub(crate) fn len(&self) -> usize {
        ((self.to - self.from) / self.step + 1) as usize
    }

    /// Adds `record`'s kept buckets of this step in the range to `points`.
    pub fn add(&self, record: &SlotRecord, points: &mut [i128]) {
        let Some(rollup) = u32::try_from(self.step).ok().and_then(|s| record.rollup(s)) else {
            return;
        };
        let Some(newest) = rollup.buckets.newest() else {
            return;
        };
        // What its owner keeps: a copy replayed from a log may hold older steps.
        let oldest_kept = newest.saturating_sub(u64::from(rollup.keep)) + 1;
        let lowest = self.from.max(oldest_kept);
        let buckets = rollup.buckets.buckets();
        let start = buckets.partition_point(|(second, _)| *second < lowest);
        for &(second, hits) in buckets[start..].iter().take_while(|(s, _)| *s <= self.to) {
            if (second - self.from).is_multiple_of(self.step) {
                points[((second - self.from) / self.step) as usize] += i128::from(hits);
            }
        }
    }
}

/// One step of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Point {
    /// The step's start, unix seconds.
    pub at: u64,
    /// The hits in it.
    pub value: i128,
}

/// The steps and their points, as both tiers answer them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Points {
    /// The step, in seconds.
    pub step: u64,
    /// The first step's start.
    pub from: u64,
    /// The last step's start.
    pub to: u64,
    /// One point per step, oldest first.
    pub points: Vec<Point>,
}

impl Points {
    pub(crate) fn of(range: Range, values: Vec<i128>) -> Self {
        let points = (values.into_iter().enumerate())
            .map(|(n, value)| Point {
                at: range.from + n as u64 * range.step,
                value,
            })
            .collect();
        Self {
            step: range.step,
            from: range.from,
            to: range.to,
            points,
        }
    }
}

/// Why a history read has no answer (besides a stale global read).
#[derive(Debug)]
pub enum Unanswered {
    /// No slot holds it, or it is deleted or expired (as said).
    NotFound(Presence),
    /// A bad query for this counter.
    Bad(RequestError),
}

/// The counter's levels: its description's, else those its copies keep (by rising step).
pub(crate) fn levels_of(counter: &HeldCounter<'_>) -> Vec<HistoryLevel> {
    if let Some(described) = counter.description {
        return described.description.history.clone();
    }
    let mut levels: Vec<HistoryLevel> = (counter.copies.unwrap_or_default().iter())
        .flat_map(|(_, record)| record.history().iter().map(|rollup| rollup.level()))
        .collect();
    levels.sort_by_key(|level| level.step_seconds);
    levels.dedup_by_key(|level| level.step_seconds);
    levels
}

/// The copies of a counter's slots that count in a read, with their slot index.
pub type Counting<'a> = Vec<&'a (u16, SlotRecord)>;

/// The counter's range asked by `query` and the copies that count by the lifecycle rule, or
/// why there is none.
pub(crate) fn resolve<'a>(
    counter: &HeldCounter<'a>,
    query: &HistoryQuery,
    now_ms: u64,
) -> Result<(Range, Counting<'a>), Unanswered> {
    let life = counter.life(now_ms);
    if !life.exists() {
        return Err(Unanswered::NotFound(life.presence));
    }
    let copies = life.counting(counter.copies.unwrap_or_default()).collect();
    if counter.is_unique() {
        return Err(Unanswered::Bad(RequestError::BadRequest(
            "a unique counter keeps no history".into(),
        )));
    }
    let range = (query.resolve(&levels_of(counter), now_ms / 1000)).map_err(Unanswered::Bad)?;
    Ok((range, copies))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels() -> Vec<HistoryLevel> {
        vec![
            HistoryLevel {
                step_seconds: 60,
                keep_seconds: 600,
            },
            HistoryLevel {
                step_seconds: 3_600,
                keep_seconds: 86_400,
            },
        ]
    }

    #[test]
    fn the_query_needs_a_known_step_and_bounded_points() {
        let parse = |q: &str| HistoryQuery::parse(Some(q), |_, _| Ok(false));
        let asked = parse("step=60").unwrap();
        assert_eq!(
            asked.resolve(&levels(), 1_000_030).unwrap(),
            Range {
                step: 60,
                from: 1_000_020 - 540,
                to: 1_000_020
            },
            "ten points back from now's minute"
        );
        let asked = parse("step=3600&from=7300&to=14400").unwrap();
        let range = asked.resolve(&levels(), 99_999).unwrap();
        assert_eq!((range.from, range.to, range.len()), (7_200, 14_400, 3));
        for bad in [
            "",
            "step=0",
            "step=x",
            "step=60&step=60",
            "step=60&from=-1",
            "colour=1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        for (q, says) in [
            (
                "step=120",
                "not one of the counter's history steps (60, 3600)",
            ),
            ("step=60&from=200&to=100", "after"),
            ("step=60&from=0&to=6000000", "at most 10000"),
        ] {
            let refused = parse(q).unwrap().resolve(&levels(), 1_000).unwrap_err();
            assert!(refused.to_string().contains(says), "{q}: {refused}");
        }
        let none = parse("step=60").unwrap().resolve(&[], 1_000).unwrap_err();
        assert!(none.to_string().contains("keeps no history"), "{none}");
    }

    #[test]
    fn a_point_sums_the_kept_buckets_of_its_step() {
        let level = levels()[0];
        let t = 1_800_000_000;
        let mut record = SlotRecord::default();
        let mut change = geocount_model::RollupChange::new(level, &Default::default());
        for (second, hits) in [(t + 1, 1), (t + 59, 2), (t + 120, 4), (t + 700, 8)] {
            change.record(&Default::default(), second, hits).unwrap();
        }
        record.apply_history(&[change]);
        let range = Range {
            step: 60,
            from: t,
            to: t + 720,
        };
        let mut points = vec![0; range.len()];
        range.add(&record, &mut points);
        // t and t + 60 fell out of the 600 s kept back from t + 660.
        assert_eq!(points[0], 0);
        assert_eq!(points[2], 4);
        assert_eq!(points[11], 8);
        assert_eq!(points.iter().sum::<i128>(), 12);
    }
}
