//! History beyond the window: rollups of a sum counter's hits at coarser steps, kept for longer
//! than its rolling window (docs/architecture.md, "History beyond the window").
//!
//! A description asks for levels ([`HistoryLevel`]: a step and how long to keep it); each slot
//! keeps one [`Rollup`] per level in its record: sparse buckets keyed by the unix second each
//! step starts at (a multiple of the step), holding the hits of that step. A rollup is a
//! [`Window`] over bucket starts: `keep` seconds back from its newest bucket, so it holds at most
//! `keep / step` buckets, only those that saw hits.

use serde::{Deserialize, Serialize};

use crate::{ModelError, Window, WindowChange};

/// The most levels a description may ask for, whatever the topology allows.
pub const MAX_HISTORY_LEVELS: usize = 8;

/// The most buckets (`keepSeconds / stepSeconds`) one level may keep, whatever the topology
/// allows.
pub const MAX_HISTORY_BUCKETS: u32 = 100_000;

/// One level of a counter's history: a bucket every `stepSeconds`, kept `keepSeconds` back from
/// the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistoryLevel {
    /// The length of one bucket, in seconds; buckets start at multiples of it.
    pub step_seconds: u32,
    /// How far back from the newest bucket buckets are kept, in seconds (a multiple of the
    /// step).
    pub keep_seconds: u32,
}

impl HistoryLevel {
    /// The most buckets the level keeps.
    pub fn buckets(&self) -> u32 {
        self.keep_seconds / self.step_seconds.max(1)
    }

    /// The start of the bucket holding unix second `second`.
    pub fn bucket_of(&self, second: u64) -> u64 {
        let step = u64::from(self.step_seconds.max(1));
        second - second % step
    }
}

/// Checks `levels` as every description must have them: at most [`MAX_HISTORY_LEVELS`], steps
/// of at least a second strictly rising, each keep a multiple of its step of at most
/// [`MAX_HISTORY_BUCKETS`] buckets. The error says what is wrong, for a 400 or a log line.
pub fn check_levels(levels: &[HistoryLevel]) -> Result<(), String> {
    check_levels_within(levels, MAX_HISTORY_LEVELS, MAX_HISTORY_BUCKETS)
}

/// [`check_levels`] with the bounds `max_levels` and `max_buckets` (a topology's, at most the
/// hard ones).
pub fn check_levels_within(
    levels: &[HistoryLevel],
    max_levels: usize,
    max_buckets: u32,
) -> Result<(), String> {
    let max_levels = max_levels.min(MAX_HISTORY_LEVELS);
    let max_buckets = max_buckets.min(MAX_HISTORY_BUCKETS);
    if levels.len() > max_levels {
        return Err(format!(
            "history has {} levels, at most {max_levels} are allowed",
            levels.len()
        ));
    }
    for (n, level) in levels.iter().enumerate() {
        let (step, keep) = (level.step_seconds, level.keep_seconds);
        if step == 0 {
            return Err(format!("history[{n}].stepSeconds must be at least 1"));
        }
        if keep < step || !keep.is_multiple_of(step) {
            return Err(format!(
                "history[{n}].keepSeconds ({keep}) must be a multiple of stepSeconds ({step}) of at least one step"
            ));
        }
        if level.buckets() > max_buckets {
            return Err(format!(
                "history[{n}] keeps {} buckets (keepSeconds / stepSeconds), at most {max_buckets} are allowed",
                level.buckets()
            ));
        }
        if let Some(before) = n.checked_sub(1).map(|b| levels[b])
            && before.step_seconds >= step
        {
            return Err(format!(
                "history[{n}].stepSeconds ({step}) must be above history[{}].stepSeconds ({}): levels are listed by rising step, one per step",
                n - 1,
                before.step_seconds
            ));
        }
    }
    Ok(())
}

/// One slot's buckets of one level, as its record holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollup {
    /// The level's step, in seconds.
    pub step: u32,
    /// How far back from the newest bucket it keeps, in seconds.
    pub keep: u32,
    /// The hits of each step that saw any, keyed by the step's start, oldest first.
    pub buckets: Window,
}

impl Rollup {
    /// The hits of the step starting at `start` (0 for one not held, or no longer kept).
    pub fn at(&self, start: u64) -> i128 {
        let Some(newest) = self.buckets.newest() else {
            return 0;
        };
        // What the owner keeps (`Window::apply`): a replayed copy may still hold older steps.
        if start < newest.saturating_sub(u64::from(self.keep)) + 1 {
            return 0;
        }
        self.buckets.sum(1, start)
    }

    /// The level this rollup keeps.
    pub fn level(&self) -> HistoryLevel {
        HistoryLevel {
            step_seconds: self.step,
            keep_seconds: self.keep,
        }
    }
}

/// A group's hits to one level of a slot's history, staged against its committed rollup
/// without changing it (as [`WindowChange`] stages a window's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupChange {
    /// The level.
    pub level: HistoryLevel,
    /// The changed buckets, by step start.
    pub buckets: WindowChange,
}

impl RollupChange {
    /// No hits yet to `level`, against the committed buckets `base`.
    pub fn new(level: HistoryLevel, base: &Window) -> Self {
        Self {
            level,
            buckets: WindowChange::new(base),
        }
    }

    /// The total the step holding `second` would reach with `delta` more hits, against `base`:
    /// an overflow is refused before any level changes.
    pub fn check(&self, base: &Window, second: u64, delta: i64) -> Result<(), ModelError> {
        let start = self.level.bucket_of(second);
        crate::error::checked_add(self.buckets.hits_at(base, start), delta).map(|_| ())
    }

    /// Records `delta` hits at unix second `second` against `base`. A step older than the
    /// level keeps is left out (the running total still counts it).
    pub fn record(&mut self, base: &Window, second: u64, delta: i64) -> Result<(), ModelError> {
        let start = self.level.bucket_of(second);
        (self.buckets)
            .record(base, start, delta, self.level.keep_seconds)
            .map(|_| ())
    }

    /// Whether recording a hit at `second` would add a bucket to `base`.
    pub fn would_add(&self, base: &Window, second: u64) -> bool {
        let start = self.level.bucket_of(second);
        self.buckets.would_add(base, start, self.level.keep_seconds)
    }

    /// What the log keeps of it: the level with the changed buckets, each with its new total.
    pub fn logged(&self) -> Rollup {
        Rollup {
            step: self.level.step_seconds,
            keep: self.level.keep_seconds,
            buckets: self.buckets.changed(),
        }
    }
}

/// Applies a group's `changes` to `history` (the owner installing them): the levels become
/// those of `changes`, in their order, each with its changed buckets set and those past its
/// keep dropped. A level no longer asked for goes.
pub fn apply_changes(history: &mut Vec<Rollup>, changes: &[RollupChange]) {
    set_levels(history, changes.iter().map(|change| change.level));
    for (rollup, change) in history.iter_mut().zip(changes) {
        rollup.buckets.apply(&change.buckets, rollup.keep);
    }
}

/// Replays logged rollups over `history`: the levels become `logged`'s, each with the buckets
/// it carries set, then those past its keep dropped (so a replayed rollup holds what the owner
/// held).
pub fn apply_logged(history: &mut Vec<Rollup>, logged: &[Rollup]) {
    set_levels(history, logged.iter().map(Rollup::level));
    for (rollup, changed) in history.iter_mut().zip(logged) {
        rollup.buckets.set_buckets(&changed.buckets);
        rollup.buckets.expire(rollup.keep);
    }
}

/// Makes `history` hold exactly `levels`, in their order: a level already held keeps its
/// buckets (and takes the level's keep), a new one starts empty.
fn set_levels(history: &mut Vec<Rollup>, levels: impl ExactSizeIterator<Item = HistoryLevel>) {
    let levels: smallvec::SmallVec<[HistoryLevel; 4]> = levels.collect();
    let same_steps = history.len() == levels.len()
        && (history.iter().zip(&levels)).all(|(rollup, level)| rollup.step == level.step_seconds);
    if !same_steps {
        let mut held = std::mem::take(history);
        for level in &levels {
            let rollup = match held.iter().position(|r| r.step == level.step_seconds) {
                Some(at) => held.swap_remove(at),
                None => Rollup::default(),
            };
            history.push(rollup);
        }
    }
    for (rollup, level) in history.iter_mut().zip(&levels) {
        rollup.step = level.step_seconds;
        rollup.keep = level.keep_seconds;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(step: u32, keep: u32) -> HistoryLevel {
        HistoryLevel {
            step_seconds: step,
            keep_seconds: keep,
        }
    }

    #[test]
    fn levels_rise_by_step_and_keep_whole_steps() {
        assert!(check_levels(&[]).is_ok());
        assert!(check_levels(&[level(60, 172_800), level(3_600, 7_776_000)]).is_ok());
        for (bad, says) in [
            (vec![level(0, 60)], "stepSeconds must be at least 1"),
            (vec![level(60, 90)], "multiple"),
            (vec![level(60, 0)], "multiple"),
            (vec![level(1, 200_000)], "at most 100000"),
            (vec![level(60, 600), level(60, 1200)], "rising step"),
            (vec![level(3600, 7200), level(60, 600)], "rising step"),
            ((1..=9).map(|n| level(n, n)).collect(), "at most 8"),
        ] {
            let refused = check_levels(&bad).unwrap_err();
            assert!(refused.contains(says), "{bad:?}: {refused}");
        }
        let refused = check_levels_within(&[level(60, 6000)], 4, 50).unwrap_err();
        assert!(refused.contains("100 buckets"), "{refused}");
    }

    #[test]
    fn the_json_shape_is_camel_case() {
        let json = r#"{"stepSeconds":60,"keepSeconds":172800}"#;
        let parsed: HistoryLevel = serde_json::from_str(json).unwrap();
        assert_eq!(parsed, level(60, 172_800));
        assert_eq!(serde_json::to_string(&parsed).unwrap(), json);
        assert!(serde_json::from_str::<HistoryLevel>(r#"{"stepSeconds":60}"#).is_err());
    }

    #[test]
    fn hits_land_in_their_step_and_old_steps_expire() {
        let hour = level(3_600, 3 * 3_600);
        // An hour's start.
        let t = 1_800_000_000;
        let mut history = Vec::new();
        let mut change = RollupChange::new(hour, &Window::EMPTY);
        for (second, delta) in [(t + 3_600, 1), (t + 7_199, 2), (t + 7_200, 4), (t + 100, 8)] {
            change.record(&Window::EMPTY, second, delta).unwrap();
        }
        apply_changes(&mut history, std::slice::from_ref(&change));
        let rollup = &history[0];
        assert_eq!(
            *rollup.buckets.buckets(),
            [(t, 8), (t + 3_600, 3), (t + 7_200, 4)]
        );
        let at = |start| rollup.at(start);
        assert_eq!((at(t + 3_600), at(t + 7_200), at(t + 7_000)), (3, 4, 0));
        // Three steps on, the first two are past the keep.
        let base = rollup.buckets.clone();
        let mut later = RollupChange::new(hour, &base);
        later.record(&base, t + 4 * 3_600 + 5, 1).unwrap();
        assert!(!later.would_add(&base, t + 10), "too old: never added");
        later.record(&base, t + 10, 1).unwrap();
        apply_changes(&mut history, &[later.clone()]);
        assert_eq!(
            *history[0].buckets.buckets(),
            [(t + 7_200, 4), (t + 14_400, 1)],
            "kept: (newest - 10800, newest]"
        );
        // The logged part replays onto the older copy to the same buckets.
        let mut replayed = vec![Rollup {
            step: 3_600,
            keep: 3 * 3_600,
            buckets: base,
        }];
        apply_logged(&mut replayed, &[later.logged()]);
        assert_eq!(replayed, history);
        apply_logged(&mut replayed, &[later.logged()]);
        assert_eq!(replayed, history, "replaying twice changes nothing more");
    }

    #[test]
    fn levels_follow_the_changes_and_overflow_is_refused_first() {
        let mut history = vec![Rollup {
            step: 60,
            keep: 600,
            buckets: Window::default(),
        }];
        let change = RollupChange::new(level(3_600, 7_200), &Window::EMPTY);
        apply_changes(&mut history, &[change]);
        assert_eq!(history.len(), 1);
        assert_eq!(
            history[0].level(),
            level(3_600, 7_200),
            "the old level went"
        );
        let mut full = RollupChange::new(level(60, 600), &Window::EMPTY);
        let base = Window::EMPTY;
        full.record(&base, 60, i64::MAX).unwrap();
        assert!(full.check(&base, 61, 1).is_err());
        assert!(full.check(&base, 120, 1).is_ok());
    }

    fn record_level(step: u32, keep: u32) -> HistoryLevel {
        HistoryLevel {
            step_seconds: step,
            keep_seconds: keep,
        }
    }

    /// A record keeping history: `value` hits at `second` in its window and each level.
    fn with_history(
        second: u64,
        value: i64,
        version: u64,
    ) -> (crate::SlotRecord, Vec<RollupChange>) {
        let levels = [record_level(60, 600), record_level(3_600, 7_200)];
        let mut record = crate::SlotRecord::default();
        let changes: Vec<RollupChange> = levels
            .iter()
            .map(|level| {
                let base = record.rollup(level.step_seconds).map(|r| r.buckets.clone());
                let base = base.unwrap_or_default();
                let mut change = RollupChange::new(*level, &base);
                change.record(&base, second, value).unwrap();
                change
            })
            .collect();
        record.apply_history(&changes);
        record.state = crate::SlotState { value, version };
        (record, changes)
    }

    #[test]
    fn history_rides_in_the_record_which_stays_thirty_two_bytes() {
        let t = 1_800_000_000;
        let (record, changes) = with_history(t + 61, 5, 10);
        assert_eq!(std::mem::size_of::<crate::SlotRecord>(), 32);
        assert_eq!(record.history().len(), 2);
        assert_eq!(record.rollup(60).unwrap().at(t + 60), 5);
        assert_eq!(record.rollup(3_600).unwrap().at(t), 5);
        assert!(record.rollup(1).is_none());
        // It travels and is stored whole.
        let bytes = postcard::to_allocvec(&record).unwrap();
        assert_eq!(
            postcard::from_bytes::<crate::SlotRecord>(&bytes).unwrap(),
            record
        );
        let json = serde_json::to_string(&record).unwrap();
        assert!(
            json.contains(r#""history":[{"step":60,"keep":600"#),
            "{json}"
        );
        // It merges by version with the rest of the record.
        let mut older = crate::SlotRecord::from(crate::SlotState {
            value: 1,
            version: 9,
        });
        assert!(older.merge(&record));
        assert_eq!(older, record);
        assert!(!older.merge(&crate::SlotRecord::default()));
        // A logged change carries the changed buckets and replays to the same record.
        let logged_history: Vec<Rollup> = changes.iter().map(RollupChange::logged).collect();
        let mut logged = crate::SlotRecord::from(record.state);
        logged.set_history(logged_history);
        let mut replayed = crate::SlotRecord::default();
        assert!(replayed.apply_logged(logged.clone()));
        assert_eq!(replayed, record);
        assert!(!replayed.apply_logged(logged), "not newer");
        // A reset wipes it, and a record without history or generation is unboxed again.
        let generation = crate::HlcTimestamp {
            physical_ms: 7,
            logical: 0,
            node: 1,
        };
        let renewed = record.renewed(generation, 11);
        assert!(renewed.history().is_empty());
        let mut replayed_reset = record.clone();
        assert!(replayed_reset.apply_logged(renewed.clone()));
        assert_eq!(replayed_reset, renewed);
        let mut dropped = record.clone();
        dropped.apply_history(&[]);
        assert!(dropped.history().is_empty());
    }

    #[test]
    fn old_steps_expire_in_the_owners_record_and_in_a_replayed_one() {
        let t = 1_800_000_000;
        let (mut owner, _) = with_history(t, 1, 1);
        let mut replayed = owner.clone();
        // Twenty minutes on: the minute level (600 s) drops the first minute.
        let base = owner.rollup(60).unwrap().buckets.clone();
        let mut change = RollupChange::new(record_level(60, 600), &base);
        change.record(&base, t + 1_200, 2).unwrap();
        owner.apply_history(std::slice::from_ref(&change));
        owner.state = crate::SlotState {
            value: 3,
            version: 2,
        };
        assert_eq!(
            *owner.rollup(60).unwrap().buckets.buckets(),
            [(t + 1_200, 2)]
        );
        assert_eq!(owner.history().len(), 1, "the change names one level");
        let mut logged = crate::SlotRecord::from(owner.state);
        logged.set_history(vec![change.logged()]);
        assert!(replayed.apply_logged(logged));
        assert_eq!(replayed, owner);
    }
}
