//! What the datacenter tier holds, and the rules it reads it by.
//!
//! - A slot's staleness is its shard's: how long ago this aggregator last had a complete copy
//!   of that shard ([`geocount_sync::SourceStatus::staleness_ms`]); `None` when the shard was
//!   never heard since this aggregator started. A dead or stopped shard only grows its own.
//! - The datacenter's staleness is the worst of its slots' (`None` if any was never heard).
//! - A counter's value is the sum of its slots' copies; a slot holding no copy counts 0.
//! - A unique counter's value is the estimate of the union of its slots' sketches (each slot's
//!   own value is its sketch's estimate), with the estimate's relative standard error.

use geocount_http::routing::{Named, WindowQuery};
use geocount_model::UniqueSketch;
use geocount_model::unique::STANDARD_ERROR;
use geocount_model::wire::SlotFreshness;
use geocount_sync::worst_staleness;
use serde::Serialize;

use crate::answers::Total;
use crate::replica::Replica;
use crate::tier::Core;

/// What the datacenter tier's HTTP handlers share.
pub struct DatacenterState {
    /// What either tier's handlers share.
    pub core: Core,
    /// The datacenter's name, e.g. `USA_0`.
    pub datacenter: String,
    /// The datacenter's slot names, by index (source `n` is the shard owning slot `n`).
    pub slot_names: Vec<String>,
}

/// Each slot's staleness at `now_ms`, by slot index (the first `slots` sources are the shards).
pub fn slot_staleness(replica: &Replica, slots: usize, now_ms: u64) -> Vec<Option<u64>> {
    replica.sources[..slots]
        .iter()
        .map(|source| source.staleness_ms(now_ms))
        .collect()
}

/// Each slot's freshness, as `POST /sync` reports it to the global aggregator.
pub fn freshness(replica: &Replica, slot_names: &[String], now_ms: u64) -> Vec<SlotFreshness> {
    slot_names
        .iter()
        .zip(slot_staleness(replica, slot_names.len(), now_ms))
        .zip(&replica.slots)
        .map(|((slot, staleness_ms), heard)| SlotFreshness {
            slot: slot.clone(),
            staleness_ms,
            owner_incarnation: heard.owner_incarnation,
            incomplete: heard.is_incomplete(),
        })
        .collect()
}

/// One slot of a counter, as a read reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotReading {
    /// The slot's share of the counter, or of its window (0 where the slot holds no copy).
    pub value: i128,
    /// The version of that share (0 where the slot holds no copy).
    pub version: u64,
    /// The slot's staleness (`None`: never heard).
    pub staleness_ms: Option<u64>,
}

/// The answer to `GET /counter/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterReading {
    /// The sum of its slots.
    #[serde(flatten)]
    pub total: Total,
    /// This datacenter.
    pub datacenter: String,
    /// The datacenter's staleness (`None` if any slot was never heard).
    pub staleness_ms: Option<u64>,
    /// Whether every slot was heard.
    pub complete: bool,
    /// Every slot of the datacenter, in index order.
    pub slots: Named<SlotReading>,
    /// The rolling window the values count, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowQuery>,
}

/// Counter `id` as this datacenter holds it at `now_ms` (running totals, or the hits in
/// `window`; for a unique counter the estimate of its slots' union, `window` aside), or `None`
/// when no slot holds it.
pub fn read_counter(
    replica: &Replica,
    datacenter: &str,
    slot_names: &[String],
    id: &str,
    window: Option<&WindowQuery>,
    now_ms: u64,
) -> Option<CounterReading> {
    let counter = replica.counter(id);
    let copies = counter.copies?;
    let unique = counter.is_unique();
    let mut held = vec![(0i128, 0u64); slot_names.len()];
    for (slot, record) in copies {
        if let Some(held) = held.get_mut(usize::from(*slot)) {
            let value = match (record.uniques(), unique) {
                (Some(sketch), true) => i128::from(sketch.count()),
                (None, true) => 0,
                (_, false) => WindowQuery::value_of(window, record),
            };
            *held = (value, record.state.version);
        }
    }
    let (value, standard_error) = if unique {
        let union = UniqueSketch::union_of(copies.iter().filter_map(|(_, r)| r.uniques()));
        (i128::from(union.count()), Some(STANDARD_ERROR))
    } else {
        (held.iter().map(|(value, _)| value).sum(), None)
    };
    let staleness = slot_staleness(replica, slot_names.len(), now_ms);
    let slots: Named<SlotReading> = slot_names
        .iter()
        .zip(&held)
        .zip(&staleness)
        .map(|((name, (value, version)), staleness_ms)| {
            let reading = SlotReading {
                value: *value,
                version: *version,
                staleness_ms: *staleness_ms,
            };
            (name.clone(), reading)
        })
        .collect();
    let datacenter_staleness = worst_staleness(staleness.iter().copied());
    Some(CounterReading {
        total: Total {
            id: id.to_owned(),
            value,
            standard_error,
        },
        datacenter: datacenter.to_owned(),
        staleness_ms: datacenter_staleness,
        complete: datacenter_staleness.is_some(),
        slots,
        window: window.copied(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::{PullSource, SourceKind};
    use geocount_model::wire::{Cursor, SlotEntry, SlotPage, SyncPage};
    use std::time::Duration;

    fn names() -> Vec<String> {
        vec!["DC_A_VAL_0".into(), "DC_A_VAL_1".into()]
    }

    fn replica() -> Replica {
        let sources: Vec<PullSource> = names()
            .into_iter()
            .chain(["global".to_owned()])
            .map(|name| PullSource {
                answers_as: name.clone(),
                kind: match name.as_str() {
                    "global" => SourceKind::Aggregator,
                    _ => SourceKind::Shard,
                },
                name,
                address: "127.0.0.1:1".into(),
                interval: Duration::from_millis(50),
                first: geocount_model::wire::SyncRequest::from_start(true, true),
                delivers: names(),
            })
            .collect();
        Replica::new(names(), &sources)
    }

    /// Slot 0's shard answered at `sent_at_ms` with `value` for counter `c`.
    fn heard(replica: &mut Replica, slot: u16, value: i64, sent_at_ms: u64) {
        let page = SyncPage {
            slots: Some(SlotPage {
                slot_names: names(),
                entries: vec![SlotEntry {
                    slot,
                    id: "c".into(),
                    record: geocount_model::SlotState {
                        value,
                        version: sent_at_ms,
                    }
                    .into(),
                }],
                next: Cursor::Seq { epoch: 1, seq: 1 },
                caught_up: true,
            }),
            ..SyncPage::default()
        };
        let slots = page.slots.as_ref().unwrap();
        let all = geocount_sync::PageFence::open(2);
        replica.merge_entries(&slots.slot_names, &slots.entries, &all);
        replica.sources[usize::from(slot)].advance(&page, sent_at_ms, sent_at_ms + 1);
    }

    #[test]
    fn a_counter_sums_its_slots_and_lists_every_slot() {
        let mut replica = replica();
        heard(&mut replica, 0, i64::MAX, 1_000);
        let reading = read_counter(&replica, "A", &names(), "c", None, 1_500).unwrap();
        assert_eq!(reading.total.value, i128::from(i64::MAX));
        assert_eq!(reading.slots.0.len(), 2, "every slot, held or not");
        assert_eq!(
            reading.slots.0[1].1,
            SlotReading {
                value: 0,
                version: 0,
                staleness_ms: None
            }
        );
        assert_eq!(reading.slots.0[0].1.staleness_ms, Some(500));
        assert!(!reading.complete, "slot 1 never heard");
        assert_eq!(reading.staleness_ms, None);

        heard(&mut replica, 1, i64::MAX, 1_200);
        let reading = read_counter(&replica, "A", &names(), "c", None, 1_500).unwrap();
        assert_eq!(reading.total.value, 2 * i128::from(i64::MAX), "no overflow");
        assert!(reading.complete);
        assert_eq!(reading.staleness_ms, Some(500), "the worst slot");
        assert!(read_counter(&replica, "A", &names(), "unknown", None, 1_500).is_none());
    }

    #[test]
    fn a_unique_counter_reads_as_the_union_of_its_slots() {
        let mut replica = replica();
        heard(&mut replica, 0, 0, 1_000);
        heard(&mut replica, 1, 0, 1_000);
        let sketch = |from: u64, to: u64| {
            let mut sketch = UniqueSketch::new();
            for n in from..to {
                sketch.add(&format!("user-{n}"));
            }
            sketch
        };
        // Slot 0 saw users 0..3000, slot 1 users 2000..5000: 5000 distinct in all.
        for (slot, sketch) in [(0, sketch(0, 3_000)), (1, sketch(2_000, 5_000))] {
            let mut record: geocount_model::SlotRecord = geocount_model::SlotState {
                value: sketch.count(),
                version: 2_000,
            }
            .into();
            record.set_uniques(Box::new(sketch));
            replica.merge(slot, &geocount_model::CounterId::new("u").unwrap(), &record);
        }
        assert!(
            replica.counter("u").is_unique(),
            "no description yet: the sketches tell"
        );
        assert!(!replica.counter("c").is_unique());
        let reading = read_counter(&replica, "A", &names(), "u", None, 1_500).unwrap();
        let off = |value: i128, truth: f64| (value as f64 - truth).abs() / truth;
        assert!(off(reading.total.value, 5_000.0) < 0.03, "{reading:?}");
        assert!(
            off(reading.slots.0[0].1.value, 3_000.0) < 0.03,
            "{reading:?}"
        );
        assert!(
            off(reading.slots.0[1].1.value, 3_000.0) < 0.03,
            "{reading:?}"
        );
        assert_eq!(reading.total.standard_error, Some(STANDARD_ERROR));
        let sum = read_counter(&replica, "A", &names(), "c", None, 1_500).unwrap();
        assert_eq!(sum.total.standard_error, None);
    }

    #[test]
    fn freshness_reports_each_slot() {
        let mut replica = replica();
        heard(&mut replica, 1, 3, 1_000);
        let freshness = freshness(&replica, &names(), 1_250);
        assert_eq!(freshness[0].staleness_ms, None);
        assert_eq!(freshness[1].slot, "DC_A_VAL_1");
        assert_eq!(freshness[1].staleness_ms, Some(250));
    }
}
