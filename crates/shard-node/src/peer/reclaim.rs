//! Handing back the memory of deleted counters in this node's copies of its peers' slots: a
//! counter whose description here is a tombstone (or an expiry that passed) newer than every
//! copy held counts for nothing, and its copies go, as they do at the aggregators. Its own slot's
//! rows go through the commit loop (`engine/commit/install.rs`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use geocount_model::{Clock, CounterId, SlotRecord};
use geocount_sync::{DescriptionTable, SlotCopies};

/// How often the copies are looked over (a pass over every counter under the read lock), at
/// most: as often as the tombstone retention when that is shorter.
const RECLAIM_INTERVAL: Duration = Duration::from_secs(60);

/// Whether counter `id`, with `copies`, is deleted or expired at `now_ms` by `descriptions`
/// and every copy is one the delete wiped ([`SlotRecord::wiped_by`]).
fn gone(
    descriptions: &DescriptionTable,
    id: &str,
    copies: &[(u16, SlotRecord)],
    now_ms: u64,
) -> bool {
    descriptions.get(id).is_some_and(|described| {
        let generation = described.generation_at(now_ms);
        !described.is_live(now_ms) && copies.iter().all(|(_, r)| r.wiped_by(generation))
    })
}

/// Drops the copies of the counters gone at `now_ms`; returns how many went.
pub(crate) fn reclaim(
    peer_copies: &RwLock<SlotCopies>,
    descriptions: &RwLock<DescriptionTable>,
    now_ms: u64,
) -> usize {
    let found: Vec<CounterId> = {
        let held = peer_copies.read().expect("peer copies lock");
        let descriptions = descriptions.read().expect("descriptions lock");
        (held.iter())
            .filter(|(id, copies)| gone(&descriptions, id, copies, now_ms))
            .filter_map(|(id, _)| CounterId::new(id).ok())
            .collect()
    };
    if found.is_empty() {
        return 0;
    }
    let mut held = peer_copies.write().expect("peer copies lock");
    let descriptions = descriptions.read().expect("descriptions lock");
    let mut removed = 0;
    for id in found {
        let still =
            (held.get(id.as_str())).is_some_and(|c| gone(&descriptions, id.as_str(), c, now_ms));
        if still && held.remove(id.as_str()).is_some() {
            removed += 1;
        }
    }
    removed
}

/// Runs [`reclaim`] every [`RECLAIM_INTERVAL`] (or `retention`, if shorter) until aborted.
pub(crate) async fn keep_reclaiming(
    peer_copies: Arc<RwLock<SlotCopies>>,
    descriptions: Arc<RwLock<DescriptionTable>>,
    clock: Arc<dyn Clock>,
    retention: Duration,
) {
    let mut ticks = tokio::time::interval(
        RECLAIM_INTERVAL
            .min(retention)
            .max(Duration::from_millis(100)),
    );
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let removed = reclaim(&peer_copies, &descriptions, clock.now_unix_ms());
        if removed > 0 {
            tracing::info!(
                removed,
                "dropped deleted counters' copies of the peers' slots"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use geocount_model::fixtures::described;
    use geocount_model::{HlcTimestamp, SlotState};

    use super::*;

    #[test]
    fn copies_of_a_deleted_counter_go_unless_one_is_newer() {
        let mut copies = SlotCopies::new(vec!["DC_A_VAL_1".into(), "DC_A_VAL_2".into()]);
        let mut table = DescriptionTable::default();
        for name in ["gone", "kept", "again"] {
            let id = CounterId::new(name).unwrap();
            copies.merge(
                0,
                &id,
                &SlotState {
                    value: 5,
                    version: 1,
                }
                .into(),
            );
            table.merge(described(name, 1, 1, 1));
        }
        let at = HlcTimestamp {
            physical_ms: 2_000,
            logical: 0,
            node: 1,
        };
        for name in ["gone", "again"] {
            let tombstone = table.get(name).unwrap().delete(at);
            table.merge(tombstone);
        }
        // "again" was written after its slot learned of the delete.
        let mut newer: SlotRecord = SlotState {
            value: 1,
            version: 2,
        }
        .into();
        newer.set_generation(at);
        copies.merge(1, &CounterId::new("again").unwrap(), &newer);
        let (copies, table) = (RwLock::new(copies), RwLock::new(table));
        assert_eq!(reclaim(&copies, &table, 3_000), 1);
        let held = copies.read().unwrap();
        assert!(held.get("gone").is_none());
        assert!(held.get("kept").is_some() && held.get("again").is_some());
    }
}
