//! What a run recorded: every write the clients made and how it ended, and what the tiers
//! may show for it ([`Ledger::allowed`]): the acknowledged sums, give or take the writes whose
//! outcome is unknown and the writes a lost disk may lose by design.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use geocount_model::HlcTimestamp;

use crate::cluster::DATACENTERS;

/// The counters every client writes (each has one slot per datacenter, wherever placement puts
/// it, so most writes are forwarded between shard nodes; they fall in both partitions, so
/// every aggregator replica holds some).
pub const COUNTERS: [&str; 3] = ["likes:a", "likes:c", "views:c"];

/// A bounded counter of a `Scenario::Bounded` run: its world total stays within `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounded {
    /// Its id.
    pub id: &'static str,
    /// The floor, if any.
    pub min: Option<i64>,
    /// The ceiling, if any.
    pub max: Option<i64>,
}

/// The bounded counters of a `Scenario::Bounded` run, beside [`COUNTERS`]: one bounded both
/// ways whose deltas go either way as often (it meets both bounds), one with only a ceiling
/// written mostly upwards (it stays at it). Tight rooms, so that slots run short of rights and
/// ask other datacenters for them; they fall in both partitions and their home slots differ.
pub const BOUNDED: [Bounded; 2] = [
    Bounded {
        id: "quota:a",
        min: Some(0),
        max: Some(20),
    },
    Bounded {
        id: "cap:c",
        min: None,
        max: Some(25),
    },
];

/// The bounded counter `id`, if it is one.
pub fn bounded(id: &str) -> Option<&'static Bounded> {
    BOUNDED.iter().find(|b| b.id == id)
}

/// What every tier reads of counter `id` whose true total is `total`: clamped to its bounds.
pub fn clamped(id: &str, total: i64) -> i64 {
    bounded(id).map_or(total, |b| b.clamp(total))
}

impl Bounded {
    /// Whether `total` is within the bounds.
    pub fn contains(&self, total: i64) -> bool {
        self.min.is_none_or(|min| total >= min) && self.max.is_none_or(|max| total <= max)
    }

    /// `total` brought within the bounds.
    pub fn clamp(&self, total: i64) -> i64 {
        let total = self.min.map_or(total, |min| total.max(min));
        self.max.map_or(total, |max| total.min(max))
    }

    /// The bounds as `[min, max]` (an absent one as `-inf` or `inf`).
    pub fn range(&self) -> String {
        let show = |b: Option<i64>, none: &str| b.map_or(none.to_owned(), |b| b.to_string());
        format!("[{}, {}]", show(self.min, "-inf"), show(self.max, "inf"))
    }

    /// The `POST /counter` body that creates it.
    pub fn creation(&self) -> String {
        let json = |b: Option<i64>| b.map_or("null".to_owned(), |b| b.to_string());
        format!(
            "{{\"id\": \"{}\", \"min\": {}, \"max\": {}}}",
            self.id,
            json(self.min),
            json(self.max)
        )
    }

    /// Why a 409 refusing a write of `delta` with `body` breaks the contract: it must name the
    /// bound the write would pass (`max` for an increment, `min` for a decrement) and its limit.
    pub fn bad_refusal(&self, delta: i64, body: &serde_json::Value) -> Option<String> {
        let (name, limit) = match delta > 0 {
            true => ("max", self.max),
            false => ("min", self.min),
        };
        let named = body["bound"].as_str() == Some(name) && body["error"].is_string();
        match (named, limit) {
            (true, Some(limit)) if body["limit"].as_i64() == Some(limit) => None,
            _ => Some(format!(
                "a 409 for {:+} to {} bounded {}: {body}",
                delta,
                self.id,
                self.range()
            )),
        }
    }
}

/// One write a client made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The datacenter it was written in (an index into [`DATACENTERS`]).
    pub datacenter: usize,
    /// The counter.
    pub counter: &'static str,
    /// The signed delta.
    pub delta: i64,
    /// How many requests it took.
    pub attempts: u32,
    /// When its last request was sent (simulated time since the start).
    pub sent: Duration,
    /// When it was acknowledged, or given up.
    pub at: Duration,
}

/// Acknowledged writes a lost disk may have lost by design (`sync` durability): those of
/// `counters` (the ones its slot holds) in `datacenter`, whose acknowledged request was sent
/// before `at` and acknowledged at most `window` before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MayLose {
    /// The datacenter of the lost slot.
    pub datacenter: usize,
    /// The counters whose keyed writes the lost slot holds.
    pub counters: Vec<&'static str>,
    /// When the disk was lost.
    pub at: Duration,
    /// How long before the loss a lost write may have been acknowledged.
    pub window: Duration,
}

/// A change of a counter's life (`Scenario::Lifecycle`), as the admin client makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `POST /counter/{id}/reset`.
    Reset,
    /// `DELETE /counter/{id}`.
    Delete,
    /// `PATCH /counter/{id}` with a short `ttlSeconds`.
    Expire,
    /// `PATCH /counter/{id}` with `{"ttlSeconds": null}`.
    KeepForever,
    /// A write carrying a short `ttlSeconds` (the expiry is set only on a counter it makes).
    WriteWithTtl,
}

/// One change the admin client sent, and how it was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// When it was sent (simulated time since the start).
    pub at: Duration,
    /// The datacenter of the shard node it was sent to (an index into [`DATACENTERS`]).
    pub datacenter: usize,
    /// The counter.
    pub counter: &'static str,
    /// What.
    pub change: Change,
    /// The answer's status; `None` for no answer.
    pub status: Option<u16>,
}

/// What the last change of a counter's life left of it, as its answer said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// Reset: it exists, counting from this generation.
    Live(HlcTimestamp),
    /// Deleted, or already gone (deleted or expired) when the change came.
    Gone,
    /// Given an expiry at these unix milliseconds: gone once every clock has passed it.
    Expiring(u64),
}

/// The writes after the last changes of the counters' lives: every slot had learned of them
/// before the first was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quiet {
    /// When every slot had learned of them.
    pub since: Duration,
    /// The counters written again.
    pub counters: Vec<&'static str>,
}

/// What one run's clients and driver recorded.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Every acknowledged write, in order.
    pub acks: Vec<Write>,
    /// Writes retried until their key's retention was nearly over, never acknowledged: each
    /// may have applied once, or not at all.
    pub unknown: Vec<Write>,
    /// Acknowledged writes sent again with their key, each answered 200.
    pub retried: usize,
    /// Writers that have every write acknowledged or given up.
    pub writers_done: usize,
    /// When the last fault healed (set by the driver).
    pub healed_at: Option<Duration>,
    /// When the last fault before the counters' last lifecycle changes healed (set by the
    /// driver; `healed_at` when the run has no faults after them).
    pub first_healed_at: Option<Duration>,
    /// What a lost disk may have lost (set by the driver), if anything.
    pub may_lose: Option<MayLose>,
    /// When the observer started watching: the later of the heal and the last acknowledgement.
    pub settled_at: Option<Duration>,
    /// When every tier first showed allowed totals that agree.
    pub converged_at: Option<Duration>,
    /// What the tiers showed then.
    pub shown: Shown,
    /// What the tiers showed at the observer's last reading, where it differed from what the
    /// run allows.
    pub last_mismatch: Option<String>,
    /// Answers that break the protocol (a 4xx to a valid write, a reused key refused).
    pub protocol_errors: Vec<String>,
    /// Requests refused because their slot's node was restoring the slot (503, or 504 through
    /// the node that forwarded them), then retried.
    pub restoring_refusals: u64,
    /// Requests refused because their slot was restored without a whole copy of its keys
    /// (503 until the retention has passed since the restore), then retried.
    pub keys_unknown_refusals: u64,
    /// Requests refused by a node fenced after a failed fsync (503 until it restarts), then
    /// retried.
    pub fenced_refusals: u64,
    /// Whether the admin client has created every counter (writers of a lifecycle run wait
    /// for it, so that each counter has a description everywhere).
    pub counters_created: bool,
    /// Writers done with their first batch of writes (before the last lifecycle changes).
    pub first_batches_done: usize,
    /// The lifecycle changes the admin client made, in order.
    pub changes: Vec<Changed>,
    /// What the last change of each counter's life left of it.
    pub left: BTreeMap<&'static str, Left>,
    /// The writes after the last lifecycle changes, once every slot has learned of them: only
    /// those count in the totals.
    pub quiet: Option<Quiet>,
    /// Why the admin client could not finish, if it could not.
    pub lifecycle_error: Option<String>,
    /// Whether the run writes [`BOUNDED`] counters too (`Scenario::Bounded`).
    pub bounded: bool,
    /// Writes to a bounded counter refused with 409 (past a bound): they changed nothing.
    pub refused: Vec<Write>,
    /// Bounds seen broken while the run went on ([`crate::bounded`]), each with when.
    pub bound_violations: Vec<String>,
    /// Consistent readings of every slot of a bounded counter (values and rights) checked.
    pub snapshots: u64,
    /// Readings of every slot torn by a write between their two passes (not checked).
    pub torn_snapshots: u64,
    /// Reads of a bounded counter's total at some tier checked against its bounds.
    pub bounded_reads: u64,
    /// The rights every slot of each bounded counter had received in all, at the last
    /// consistent reading.
    pub rights_received: BTreeMap<&'static str, u64>,
    /// Whether the observer is done (the watchers of bounds stop then).
    pub observed: bool,
}

/// A total per counter.
pub type Totals = BTreeMap<&'static str, i64>;

/// What the tiers showed of each counter's part in each datacenter.
pub type Shown = BTreeMap<(usize, &'static str), i64>;

/// The values a tier may show for each counter's part in each datacenter.
pub type Allowed = BTreeMap<(usize, &'static str), BTreeSet<i64>>;

impl Ledger {
    /// The sum of the acknowledged deltas per counter: in datacenter `dc`, or everywhere.
    pub fn expected(&self, dc: Option<usize>) -> Totals {
        let mut totals: Totals = self.counters().into_iter().map(|c| (c, 0)).collect();
        for ack in (self.acks.iter())
            .filter(|a| dc.is_none_or(|dc| a.datacenter == dc))
            .filter(|a| a.sent >= self.counted_from())
        {
            *totals.entry(ack.counter).or_default() += ack.delta;
        }
        totals
    }

    /// What each counter's part in each datacenter may be: its acknowledged sum, plus the
    /// deltas of any of its outcome-unknown writes, less the deltas of any of the acknowledged
    /// writes [`Ledger::may_lose`] allows to be lost. Any of them, not only the last: a
    /// restore keeps each counter's latest state some copy held, but a keyed retry of a lost
    /// write whose key was lost too applies it again.
    pub fn allowed(&self) -> Allowed {
        let mut allowed = Allowed::new();
        for dc in 0..DATACENTERS.len() {
            let expected = self.expected(Some(dc));
            for counter in self.counters() {
                let gained = subset_sums(self.unknown_of(dc, counter).map(|w| w.delta));
                let lost = subset_sums(self.losable(dc, counter).iter().map(|w| w.delta));
                let acknowledged = expected[counter];
                let values = (lost.iter())
                    .flat_map(|l| gained.iter().map(move |g| acknowledged - l + g))
                    .collect();
                allowed.insert((dc, counter), values);
            }
        }
        allowed
    }

    /// The counters the run writes: [`COUNTERS`], and [`BOUNDED`] ones if it has them.
    pub fn counters(&self) -> Vec<&'static str> {
        let bounded = BOUNDED.iter().filter(|_| self.bounded).map(|b| b.id);
        COUNTERS.into_iter().chain(bounded).collect()
    }

    /// The outcome-unknown writes of `counter` in datacenter `dc`.
    fn unknown_of(&self, dc: usize, counter: &str) -> impl Iterator<Item = &Write> {
        (self.unknown.iter())
            .filter(move |w| w.datacenter == dc && w.counter == counter)
            .filter(|w| w.sent >= self.counted_from())
    }

    /// Writes sent before this count nothing: the counters' last lifecycle changes wiped them
    /// (zero when nothing changed a counter's life).
    fn counted_from(&self) -> Duration {
        self.quiet
            .as_ref()
            .map_or(Duration::ZERO, |quiet| quiet.since)
    }

    /// Whether each counter must exist at every tier, by what the last change of its life left
    /// and whether it was written again after it; empty when no counter's life changed (then
    /// a tier that has not heard of a counter shows 0).
    pub fn existence(&self) -> BTreeMap<&'static str, bool> {
        let again = |counter| (self.quiet.iter()).any(|q| q.counters.contains(&counter));
        (self.left.iter())
            .map(|(&counter, left)| (counter, again(counter) || matches!(left, Left::Live(_))))
            .collect()
    }

    /// The acknowledged writes of `counter` in datacenter `dc` that [`Ledger::may_lose`]
    /// allows to be lost.
    fn losable(&self, dc: usize, counter: &str) -> Vec<&Write> {
        let Some(may) = &self.may_lose else {
            return Vec::new();
        };
        if may.datacenter != dc || !may.counters.contains(&counter) {
            return Vec::new();
        }
        (self.acks.iter())
            .filter(|a| a.datacenter == dc && a.counter == counter && a.sent < may.at)
            .filter(|a| may.at.saturating_sub(a.at) <= may.window)
            .collect()
    }

    /// What the totals the tiers showed lack: per counter, the fewest acknowledged writes
    /// (of those, the latest) whose loss (with some outcome-unknown writes applied) gives what
    /// they showed.
    pub fn lost(&self) -> Lost {
        let mut lost = Lost::default();
        let lost_at = self.may_lose.as_ref().map(|may| may.at).unwrap_or_default();
        for ((dc, counter), shown) in &self.shown {
            let missing = self.expected(Some(*dc))[counter] - shown;
            let gained = subset_sums(self.unknown_of(*dc, counter).map(|w| w.delta));
            let losable = self.losable(*dc, counter);
            assert!(losable.len() < 20, "few writes can be lost at once");
            let fewest = (0u32..1 << losable.len())
                .map(|mask| (losable.iter().enumerate()).filter(move |(i, _)| mask & 1 << i != 0))
                .map(|writes| writes.map(|(_, w)| *w).collect::<Vec<_>>())
                .filter(|writes| {
                    let sum: i64 = writes.iter().map(|w| w.delta).sum();
                    gained.contains(&(sum - missing))
                })
                .min_by_key(|writes| {
                    let oldest = writes.iter().map(|w| lost_at.saturating_sub(w.at)).max();
                    (writes.len(), oldest)
                });
            for write in fewest.unwrap_or_default() {
                lost.writes += 1;
                lost.oldest = lost.oldest.max(lost_at.saturating_sub(write.at));
            }
        }
        lost
    }
}

/// Acknowledged writes missing from the totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lost {
    /// How many.
    pub writes: usize,
    /// How long before the disk loss the earliest of them was acknowledged (zero: none lost).
    pub oldest: Duration,
}

/// Every sum of a subset of `deltas` (the empty one too).
fn subset_sums(deltas: impl Iterator<Item = i64>) -> BTreeSet<i64> {
    let mut sums = BTreeSet::from([0]);
    for delta in deltas {
        let more: Vec<i64> = sums.iter().map(|s| s + delta).collect();
        sums.extend(more);
    }
    sums
}

/// The run's ledger, shared by the simulated clients and the driver (all on one thread).
pub type SharedLedger = Rc<RefCell<Ledger>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{PARTITIONS, aggregator_partitions, global_partitions, holds};

    #[test]
    fn every_aggregator_replica_holds_some_counter() {
        let tiers = DATACENTERS.iter().map(|dc| aggregator_partitions(dc));
        for held in tiers.chain([global_partitions()]).flatten() {
            assert!(
                COUNTERS.iter().any(|c| holds(held, c)),
                "no counter falls in partitions {held:?} of {PARTITIONS}"
            );
        }
    }

    #[test]
    fn a_lost_write_is_any_of_the_window_and_an_unknown_one_may_count() {
        let write = |delta, at_ms| Write {
            datacenter: 0,
            counter: "likes:a",
            delta,
            attempts: 1,
            sent: Duration::from_millis(at_ms - 5),
            at: Duration::from_millis(at_ms),
        };
        let mut ledger = Ledger {
            acks: vec![write(4, 100), write(9, 350), write(-2, 390)],
            unknown: vec![write(5, 420)],
            ..Ledger::default()
        };
        ledger.may_lose = Some(MayLose {
            datacenter: 0,
            counters: vec!["likes:a"],
            at: Duration::from_millis(400),
            window: Duration::from_millis(200),
        });
        // 11 acknowledged; the +4 is older than the window; the +5 may have applied.
        let allowed = &ledger.allowed()[&(0, "likes:a")];
        let want = BTreeSet::from([2, 4, 7, 9, 11, 13, 16, 18]);
        assert_eq!(*allowed, want);
        ledger.shown.insert((0, "likes:a"), 13);
        let lost = ledger.lost();
        assert_eq!(lost.writes, 1, "the -2 alone explains 13");
        assert_eq!(lost.oldest, Duration::from_millis(10));
    }
}
