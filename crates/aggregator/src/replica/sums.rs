//! Sums over the counters whose id starts with a prefix (`GET /aggregate`): a scan of every
//! counter ([`SumScan`]), run a run at a time like a ranking's scan ([`super::Scans::run`]).
//!
//! - A counter's value is what a read of it sums: each slot's copy as
//!   [`SlotRecord::value_in`](geocount_model::SlotRecord::value_in) counts it (its running
//!   total, or its hits in the window), added.
//! - Unique counters are left out: their values are estimates of distinct items, which do not
//!   add up across counters.
//! - Each slot counts in its group's sum too (a datacenter, at the global tier); a counter
//!   counts in a group when one of the group's slots holds a copy of it.

use geocount_model::WindowQuery;
use geocount_ranking::RankedCounters;
use serde::{Deserialize, Serialize};

use super::scans::InRuns;
use super::{HeldCounter, RankedAt, Replica};

/// Counters added up: the sum of their values and how many they are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sum {
    /// The sum of their values, or of their hits in a window (wide enough that no sum of 64-bit
    /// values overflows).
    pub sum: i128,
    /// How many sum counters are added.
    pub counters: u64,
}

impl Sum {
    /// Adds `other`'s counters to these.
    pub fn add(&mut self, other: Sum) {
        self.sum += other.sum;
        self.counters += other.counters;
    }
}

/// What a [`SumScan`] found: the sum over every slot, and each group's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sums {
    /// Over every slot.
    pub all: Sum,
    /// Over each group's slots, by group index.
    pub groups: Vec<Sum>,
}

/// A sum over every counter whose id starts with a prefix, under way.
#[derive(Debug)]
pub struct SumScan {
    prefix: String,
    window: Option<WindowQuery>,
    /// The group of each slot, by slot index.
    slot_groups: Vec<usize>,
    sums: Sums,
    /// One counter's value in each group (`None`: no copy there), reused.
    parts: Vec<Option<i128>>,
    /// The next counter index to visit.
    next: usize,
}

impl SumScan {
    /// A sum of the counters with ids starting with `prefix`: running totals, or hits in
    /// `window`; slot `s` counts in group `slot_groups[s]` of `groups`.
    pub fn new(
        prefix: &str,
        window: Option<WindowQuery>,
        slot_groups: Vec<usize>,
        groups: usize,
    ) -> Self {
        Self {
            prefix: prefix.to_owned(),
            window,
            slot_groups,
            sums: Sums {
                all: Sum::default(),
                groups: vec![Sum::default(); groups],
            },
            parts: vec![None; groups],
            next: 0,
        }
    }

    fn visit_one(&mut self, counters: &RankedAt<'_>, replica: &Replica, index: usize) {
        let id = counters.id(index);
        if !id.starts_with(self.prefix.as_str()) {
            return;
        }
        let records = counters.records(index);
        let counter = HeldCounter {
            copies: Some(records),
            description: replica.descriptions.get(id),
        };
        if counter.is_unique() {
            return;
        }
        // A deleted or expired counter is left out; a reset one counts its new records.
        let Some(from) = counters.counts_from(index) else {
            return;
        };
        self.parts.iter_mut().for_each(|part| *part = None);
        let mut value = 0;
        for (slot, record) in records.iter().filter(|(_, r)| r.counts_in(from)) {
            let slot_value = record.value_in(self.window.as_ref());
            value += slot_value;
            let group = self.slot_groups.get(usize::from(*slot));
            if let Some(part) = group.and_then(|&g| self.parts.get_mut(g)) {
                *part = Some(part.unwrap_or(0) + slot_value);
            }
        }
        let counted = |sum: i128| Sum { sum, counters: 1 };
        self.sums.all.add(counted(value));
        for (group, part) in self.sums.groups.iter_mut().zip(&self.parts) {
            if let Some(part) = part {
                group.add(counted(*part));
            }
        }
    }
}

impl InRuns for SumScan {
    type Found = Sums;

    /// Counters added after the scan passed their index are not visited.
    fn visit(&mut self, replica: &Replica, now_ms: u64, max: usize) -> bool {
        let counters = replica.ranked_at(now_ms);
        let end = self.next.saturating_add(max).min(counters.len());
        for index in self.next..end {
            self.visit_one(&counters, replica, index);
        }
        self.next = end;
        end >= counters.len()
    }

    fn finish(self) -> Sums {
        self.sums
    }
}

#[cfg(test)]
mod tests {
    use geocount_model::{CounterId, SlotRecord, SlotState, Window};

    use super::super::Scans;
    use super::super::scans::{SCAN_RUN, scan_in_runs};
    use super::*;

    /// A record of `value` in all, with `recent` of it at second 1_000 and the rest at 10.
    fn record(value: i64, recent: i64) -> SlotRecord {
        let mut window = Window::default();
        for (second, hits) in [(10, value - recent), (1_000, recent)] {
            if hits != 0 {
                window.record(second, hits, 3_600).unwrap();
            }
        }
        SlotRecord::sum(SlotState { value, version: 1 }, window)
    }

    /// Slots 0 and 1 (group 0) and slot 2 (group 1), holding `a:*` and `b:*` counters and a
    /// unique `a:u`.
    fn replica() -> Replica {
        let slots = ["DC_A_VAL_0", "DC_A_VAL_1", "DC_B_VAL_0"].map(String::from);
        let mut replica = Replica::new(slots.to_vec(), &[]);
        let id = |id: &str| CounterId::new(id).unwrap();
        replica.merge(0, &id("a:1"), &record(5, 2));
        replica.merge(2, &id("a:1"), &record(7, 0));
        replica.merge(1, &id("a:2"), &record(i64::MAX, 1));
        replica.merge(2, &id("a:2"), &record(i64::MAX, 0));
        replica.merge(0, &id("b:1"), &record(100, 100));
        let mut unique: SlotRecord = SlotState {
            value: 1,
            version: 1,
        }
        .into();
        unique.add_item(geocount_model::unique::hash_item("user-1"), 2);
        replica.merge(2, &id("a:u"), &unique);
        replica
    }

    fn sum(sum: i128, counters: u64) -> Sum {
        Sum { sum, counters }
    }

    #[test]
    fn sums_add_the_sum_counters_with_the_prefix_per_group_and_in_all() {
        let found = SumScan::new("a:", None, vec![0, 0, 1], 2).run_whole(&replica());
        let max = i128::from(i64::MAX);
        assert_eq!(found.all, sum(12 + 2 * max, 2), "a:u is a unique counter");
        assert_eq!(found.groups, [sum(5 + max, 2), sum(7 + max, 2)]);
        let every = SumScan::new("", None, vec![0, 0, 1], 2).run_whole(&replica());
        assert_eq!(every.all, sum(112 + 2 * max, 3));
        let none = SumScan::new("c", None, vec![0, 0, 1], 2).run_whole(&replica());
        assert_eq!(none.all, Sum::default());
    }

    #[test]
    fn a_window_sums_each_counters_hits_in_it() {
        let window = Some(WindowQuery {
            seconds: 60,
            at: 1_000,
        });
        let found = SumScan::new("a:", window, vec![0, 0, 1], 2).run_whole(&replica());
        assert_eq!(found.all, sum(3, 2), "counters without hits still count");
        assert_eq!(found.groups, [sum(3, 2), sum(0, 2)]);
        let before = Some(WindowQuery {
            seconds: 600,
            at: 500,
        });
        let found = SumScan::new("", before, vec![0, 0, 1], 2).run_whole(&replica());
        let max = i128::from(i64::MAX);
        assert_eq!(found.all, sum(3 + 7 + (max - 1) + max, 3));
    }

    #[test]
    fn a_sum_in_runs_finds_what_one_pass_does() {
        let mut replica = replica();
        for n in 0..3 * SCAN_RUN {
            let id = CounterId::new(format!("a:{n:05}")).unwrap();
            replica.merge((n % 3) as u16, &id, &record(n as i64, 1));
        }
        let whole = SumScan::new("a:", None, vec![0, 0, 1], 2).run_whole(&replica);
        let shared = replica.shared();
        let runs = scan_in_runs(&shared, SumScan::new("a:", None, vec![0, 0, 1], 2), 0);
        assert_eq!(runs, whole);
        assert_eq!(whole.all.counters, 2 + 3 * SCAN_RUN as u64);
    }

    /// A sum is a scan: refused past `http.max_concurrent_scans`, like a ranking's.
    #[tokio::test]
    async fn sums_past_the_bound_of_scans_are_refused() {
        let replica = replica().shared();
        let scans = Scans::new(1);
        let scan = || SumScan::new("a:", None, vec![0, 0, 1], 2);
        let hold = scans.run(&replica, SlowScan, 0);
        let (held, refused) = tokio::join!(hold, async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            scans.run(&replica, scan(), 0).await
        });
        assert!(held.is_ok());
        assert_eq!(refused, Err(super::super::ScansBusy(1)));
        assert!(scans.run(&replica, scan(), 0).await.is_ok(), "free again");
    }

    /// A scan that takes a while, to hold a permit.
    struct SlowScan;

    impl InRuns for SlowScan {
        type Found = ();
        fn visit(&mut self, _: &Replica, _: u64, _: usize) -> bool {
            std::thread::sleep(std::time::Duration::from_millis(300));
            true
        }
        fn finish(self) {}
    }

    impl SumScan {
        /// Every counter of `replica` visited at once.
        fn run_whole(mut self, replica: &Replica) -> Sums {
            self.visit(replica, 0, usize::MAX);
            self.finish()
        }
    }
}
