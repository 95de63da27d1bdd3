//! What the datacenter tier holds, and the rules it reads it by.
//!
//! - A slot's staleness is its shard's: how long ago this aggregator last had a complete copy
//!   of that shard ([`geocount_sync::SourceStatus::staleness_ms`]); `None` when the shard was
//!   never heard since this aggregator started. A dead or stopped shard only grows its own.
//! - The datacenter's staleness is the worst of its slots' (`None` if any was never heard).
//! - A counter's value is the sum of its slots' copies; a slot holding no copy counts 0.
//! - A unique counter's value is the estimate of the union of its slots' sketches (each slot's
//!   own value is its sketch's estimate), with the estimate's relative standard error.
//! - Copies count by the lifecycle rule ([`crate::lifecycle`]): one wiped by a reset or delete
//!   reads as 0 / empty, and a counter deleted or expired is not found.

use geocount_http::routing::Named;
use geocount_model::unique::STANDARD_ERROR;
use geocount_model::wire::SlotFreshness;
use geocount_model::{UniqueSketch, WindowQuery};
use geocount_sync::worst_staleness;
use serde::Serialize;

use crate::answers::Total;
use crate::core::Core;
use crate::lifecycle::Presence;
use crate::replica::Replica;

/// What the datacenter tier's HTTP handlers share.
pub struct DatacenterState {
    /// What either tier's handlers share.
    pub core: Core,
    /// The datacenter's name, e.g. `USA_0`.
    pub datacenter: String,
    /// The datacenter's slot names, by index (source `n` is the shard owning slot `n`).
    pub slot_names: Vec<String>,
    /// Where each slot's shard node listens, by slot index.
    pub shards: Vec<std::net::SocketAddr>,
    /// When its shard nodes acknowledge a write.
    pub durability: geocount_model::Durability,
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
/// `window`; for a unique counter the estimate of its slots' union, `window` aside), or why
/// it does not exist then: never heard of, deleted or expired.
pub fn read_counter(
    replica: &Replica,
    datacenter: &str,
    slot_names: &[String],
    id: &str,
    window: Option<&WindowQuery>,
    now_ms: u64,
) -> Result<CounterReading, Presence> {
    let counter = replica.counter(id);
    let life = counter.life(now_ms);
    if !life.exists() {
        return Err(life.presence);
    }
    let copies = counter.copies.unwrap_or_default();
    let unique = counter.is_unique();
    let mut held = vec![(0i128, 0u64); slot_names.len()];
    for (slot, record) in copies {
        if let Some(held) = held.get_mut(usize::from(*slot)) {
            // A copy wiped by a reset reads as 0, at the version held.
            let value = match (record.uniques(), unique) {
                _ if !life.counts(record) => 0,
                (Some(sketch), true) => i128::from(sketch.count()),
                (None, true) => 0,
                (_, false) => record.value_in(window),
            };
            *held = (value, record.state.version);
        }
    }
    let (value, standard_error) = if unique {
        let counting = life.counting(copies);
        let union = UniqueSketch::union_of(counting.filter_map(|(_, r)| r.uniques()));
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
    Ok(CounterReading {
        total: Total {
            id: id.to_owned(),
            value,
            standard_error,
            expires_at_ms: life.expires_at_ms,
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
        assert_eq!(
            read_counter(&replica, "A", &names(), "unknown", None, 1_500).unwrap_err(),
            Presence::Unknown
        );
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

    /// A record of `value` at `version`, of `generation`, with `hits` at second 1_000.
    fn record(
        value: i64,
        version: u64,
        generation: geocount_model::HlcTimestamp,
    ) -> geocount_model::SlotRecord {
        let mut record =
            geocount_model::SlotRecord::from(geocount_model::SlotState { value, version });
        (record.window_mut().unwrap().record(1_000, value, 300)).unwrap();
        record.set_generation(generation);
        record
    }

    #[test]
    fn reads_count_only_records_of_the_counters_generation() {
        use geocount_model::fixtures::described;
        use geocount_model::{CounterId, HlcTimestamp};
        let at = |physical_ms| HlcTimestamp {
            physical_ms,
            logical: 0,
            node: 2,
        };
        let mut replica = replica();
        let c = CounterId::new("c").unwrap();
        let zero = HlcTimestamp::default();
        replica.merge(0, &c, &record(5, 2, zero));
        replica.merge(1, &c, &record(7, 2, zero));
        let window = WindowQuery {
            seconds: 60,
            at: 1_000,
        };
        let read = |replica: &Replica, window: Option<&WindowQuery>, now_ms| {
            read_counter(replica, "A", &names(), "c", window, now_ms)
        };
        assert_eq!(read(&replica, None, 2_000).unwrap().total.value, 12);
        // A reset wipes both; the copies read as 0 at the versions held.
        let created = described("c", 2, 1_000, 1);
        replica.descriptions.merge(created.reset(at(1_500)));
        let reading = read(&replica, None, 2_000).unwrap();
        assert_eq!(reading.total.value, 0);
        assert_eq!(reading.slots.0[1].1.value, 0);
        assert_eq!(reading.slots.0[1].1.version, 2);
        assert_eq!(read(&replica, Some(&window), 2_000).unwrap().total.value, 0);
        // A record of the new generation counts, its window too.
        replica.merge(1, &c, &record(3, 3, at(1_500)));
        assert_eq!(read(&replica, None, 2_000).unwrap().total.value, 3);
        assert_eq!(read(&replica, Some(&window), 2_000).unwrap().total.value, 3);
        // Deleted: not found, saying so.
        replica.descriptions.merge(created.delete(at(1_600)));
        let gone = read(&replica, None, 2_000).unwrap_err();
        assert_eq!(gone, Presence::Deleted);
        let refusal = crate::AggregatorError::not_found("c".into(), gone, "this datacenter");
        assert_eq!(refusal.to_string(), "counter \"c\" is deleted");
        assert_eq!(geocount_net::HttpError::status(&refusal), 404);
    }

    #[test]
    fn a_counter_expires_by_the_clock_and_its_reads_show_when() {
        use geocount_model::fixtures::described;
        use geocount_model::{CounterId, HlcTimestamp};
        let mut replica = replica();
        let mut expiring = described("c", 2, 1_000, 1);
        expiring.description.expires_at_ms = Some(5_000);
        replica.descriptions.merge(expiring);
        // Described, never written: it reads 0.
        let reading = read_counter(&replica, "A", &names(), "c", None, 2_000).unwrap();
        assert_eq!(
            (reading.total.value, reading.total.expires_at_ms),
            (0, Some(5_000))
        );
        let json = serde_json::to_value(&reading).unwrap();
        assert_eq!(json["expiresAtMs"], 5_000);
        let c = CounterId::new("c").unwrap();
        replica.merge(0, &c, &record(4, 2, HlcTimestamp::default()));
        let reading = read_counter(&replica, "A", &names(), "c", None, 4_999).unwrap();
        assert_eq!(reading.total.value, 4);
        let gone = read_counter(&replica, "A", &names(), "c", None, 5_000).unwrap_err();
        assert_eq!(gone, Presence::Expired(5_000));
        let refusal = crate::AggregatorError::not_found("c".into(), gone, "this datacenter");
        assert_eq!(
            refusal.to_string(),
            "counter \"c\" expired at 5000 (unix ms)"
        );
        // No expiry: none shown.
        replica.merge(
            0,
            &CounterId::new("d").unwrap(),
            &record(1, 2, HlcTimestamp::default()),
        );
        let json =
            serde_json::to_value(read_counter(&replica, "A", &names(), "d", None, 5_000).unwrap())
                .unwrap();
        assert!(json.get("expiresAtMs").is_none(), "{json}");
    }

    #[test]
    fn a_record_of_a_newer_generation_than_the_description_wipes_the_older_ones() {
        use geocount_model::fixtures::described;
        use geocount_model::{CounterId, HlcTimestamp};
        let mut replica = replica();
        replica.descriptions.merge(described("c", 2, 1_000, 1));
        let c = CounterId::new("c").unwrap();
        replica.merge(0, &c, &record(5, 2, HlcTimestamp::default()));
        let reset = HlcTimestamp {
            physical_ms: 1_500,
            logical: 0,
            node: 2,
        };
        replica.merge(1, &c, &record(1, 3, reset));
        let reading = read_counter(&replica, "A", &names(), "c", None, 2_000).unwrap();
        assert_eq!(reading.total.value, 1);
        assert_eq!(reading.slots.0[0].1.value, 0);
    }

    #[test]
    fn a_unique_counter_reset_unions_only_its_new_sketches() {
        use geocount_model::fixtures::described;
        use geocount_model::{CounterId, CounterType, HlcTimestamp, SlotRecord, SlotState};
        let mut replica = replica();
        let mut created = described("u", 2, 1_000, 1);
        created.description.counter_type = CounterType::Unique;
        let reset_at = HlcTimestamp {
            physical_ms: 1_500,
            logical: 0,
            node: 2,
        };
        replica.descriptions.merge(created.reset(reset_at));
        let u = CounterId::new("u").unwrap();
        for (slot, items, generation) in
            [(0, 0..1_000, HlcTimestamp::default()), (1, 0..10, reset_at)]
        {
            let mut record = SlotRecord::from(SlotState {
                value: 0,
                version: 1,
            });
            for n in items {
                record.add_item(geocount_model::unique::hash_item(&format!("user-{n}")), 2);
            }
            record.set_generation(generation);
            replica.merge(slot, &u, &record);
        }
        let reading = read_counter(&replica, "A", &names(), "u", None, 2_000).unwrap();
        assert_eq!(reading.slots.0[0].1.value, 0, "wiped by the reset");
        let new = reading.slots.0[1].1.value;
        assert!((9..=11).contains(&new), "{reading:?}");
        assert_eq!(reading.total.value, new);
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
