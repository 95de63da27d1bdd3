//! Handing back a deleted counter's memory: once nothing of a counter counts (its tombstone, or
//! an expiry that passed, is newer than every record held), its copies go; once its tombstone
//! is older than `sync.tombstone_retention_secs` and no copy is held, the tombstone goes too.
//! Nothing tells an aggregator to drop a counter: the descriptions it holds say so by its own
//! clock, as they do for every read (`crate::lifecycle`).

use geocount_model::CounterId;

use super::{Replica, SharedReplica};
use crate::lifecycle::Life;

/// What one pass handed back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reclaimed {
    /// Counters whose copies went.
    pub counters: usize,
    /// Tombstones that went.
    pub tombstones: usize,
}

impl Replica {
    /// The counters held of which nothing counts at `now_ms`: deleted or expired, and every
    /// copy one the delete wiped ([`geocount_model::SlotRecord::wiped_by`]; a copy of a write
    /// made after its slot learned of the delete stays, since the counter's description saying
    /// it was made again may not have arrived).
    pub fn gone_counters(&self, now_ms: u64) -> Vec<CounterId> {
        (self.copies.iter())
            .filter(|(id, copies)| self.is_gone(id, copies, now_ms))
            .filter_map(|(id, _)| CounterId::new(id).ok())
            .collect()
    }

    fn is_gone(&self, id: &str, copies: &[(u16, geocount_model::SlotRecord)], now_ms: u64) -> bool {
        let Some(description) = self.descriptions.get(id) else {
            return false;
        };
        let life = Life::of(Some(description), copies, now_ms);
        !life.exists() && copies.iter().all(|(_, r)| r.wiped_by(life.from))
    }

    /// Drops the copies of `gone` counters that still count for nothing at `now_ms`, and the
    /// tombstones past retention of counters no copy holds. The top-K index is made again over
    /// the renumbered table when a counter went (a removal moves another into its index).
    pub fn reclaim(&mut self, gone: &[CounterId], now_ms: u64) -> Reclaimed {
        let mut reclaimed = Reclaimed::default();
        for id in gone {
            let still_gone = (self.copies.get(id.as_str()))
                .is_some_and(|copies| self.is_gone(id.as_str(), copies, now_ms));
            if still_gone && self.copies.remove(id.as_str()).is_some() {
                reclaimed.counters += 1;
            }
        }
        if reclaimed.counters > 0
            && let Some(top) = &mut self.top
        {
            let top = top.get_mut().expect("top-K lock");
            *top = top.renumbered(self.copies.len());
        }
        let copies = &self.copies;
        let retention_ms = self.tombstone_retention_ms;
        reclaimed.tombstones = self
            .descriptions
            .purge_tombstones_where(now_ms, retention_ms, |id| copies.index_of(id).is_none())
            .len();
        reclaimed
    }
}

/// One pass over `replica` at `now_ms`: finds the counters gone under the read lock, then drops
/// them under the write lock (a merge waits for that part only).
pub fn reclaim(replica: &SharedReplica, now_ms: u64) -> Reclaimed {
    let (gone, tombstones_due) = {
        let held = replica.read().expect("replica lock");
        let retention_ms = held.tombstone_retention_ms;
        let due = (held.descriptions.iter()).any(|(_, d)| {
            d.description.deleted
                && d.description
                    .generation
                    .physical_ms
                    .saturating_add(retention_ms)
                    <= now_ms
        });
        (held.gone_counters(now_ms), due)
    };
    if gone.is_empty() && !tombstones_due {
        return Reclaimed::default();
    }
    replica
        .write()
        .expect("replica lock")
        .reclaim(&gone, now_ms)
}

#[cfg(test)]
mod tests {
    use geocount_model::fixtures::described;
    use geocount_model::{HlcTimestamp, SlotState};
    use geocount_ranking::{LiveRanking, Scope};

    use super::*;

    fn id(text: &str) -> CounterId {
        CounterId::new(text).unwrap()
    }

    #[test]
    fn a_deleted_counter_leaves_the_copies_then_its_tombstone_goes() {
        let names = vec!["DC_A_VAL_0".to_owned(), "DC_A_VAL_1".to_owned()];
        let mut replica = Replica::new(names, &[]);
        replica.tombstone_retention_ms = 10_000;
        replica.index_top(vec![0, 0], LiveRanking::new(300, 1_000));
        for (n, name) in ["a", "b", "c"].iter().enumerate() {
            let record = SlotState {
                value: 10 + n as i64,
                version: 1,
            };
            replica.merge(0, &id(name), &record.into());
            replica.merge(1, &id(name), &record.into());
            replica.descriptions.merge(described(name, 1, 1, 1));
        }
        let at = HlcTimestamp {
            physical_ms: 2_000,
            logical: 0,
            node: 1,
        };
        let tombstone = replica.descriptions.get("a").unwrap().delete(at);
        replica.descriptions.merge(tombstone);
        assert_eq!(replica.gone_counters(3_000), vec![id("a")]);
        let reclaimed = replica.reclaim(&[id("a")], 3_000);
        assert_eq!((reclaimed.counters, reclaimed.tombstones), (1, 0));
        assert!(replica.copies.get("a").is_none());
        assert!(
            replica.descriptions.get("a").is_some(),
            "kept for the retention"
        );
        // The renumbered index ranks the rest as before.
        assert!(replica.rank_pending(usize::MAX, 3_000));
        let mut top = replica.top_index().unwrap();
        let ranked: Vec<_> = (top.all_time(Scope::All, "", 10, &replica.ranked_at(3_000)))
            .into_iter()
            .map(|r| (r.id, r.value))
            .collect();
        assert_eq!(ranked, [("c".to_owned(), 24), ("b".to_owned(), 22)]);
        drop(top);
        // Past the retention, with no copy held, the tombstone goes.
        let reclaimed = replica.reclaim(&[], 12_000);
        assert_eq!((reclaimed.counters, reclaimed.tombstones), (0, 1));
        assert!(replica.descriptions.get("a").is_none());
    }
}
