//! The global tier's read of a counter (`GET /counter/{id}`): the sum over datacenters, under
//! the staleness rules ([`super::staleness`]).
//!
//! - A counter's value is the sum over every datacenter of the sum of its slots' copies; a
//!   stale datacenter counts with its last known values.
//! - A unique counter's value is the estimate of the union of every slot's sketch (a
//!   datacenter's part: of its slots' union), under the same staleness rules.
//! - Copies count by the lifecycle rule ([`crate::lifecycle`]): one wiped by a reset or delete
//!   reads as 0 / empty, and a counter deleted or expired is held by no slot.
//! - A counter no slot holds is not found only when no datacenter is stale: a stale one may
//!   hold it.
//!
//! What is held is gathered under the replica's read lock ([`gather`]); the rules are applied
//! once it is released ([`Gathered::answer`]).

use geocount_http::routing::Named;
use geocount_model::unique::STANDARD_ERROR;
use geocount_model::{Bounds, SlotRecord, UniqueSketch, WindowQuery};
use geocount_sync::worst_staleness;
use serde::Serialize;

use super::layout::Layout;
use super::query::ReadQuery;
use super::staleness::{empty_readings, named, stale_datacenters, stale_reasons};
use crate::answers::Total;
use crate::lifecycle::{Life, Presence};
use crate::parts::{DatacenterReading, StaleRead};
use crate::replica::{HeldCounter, Replica};

/// A counter's parts, gathered from the replica for a read: whether it exists and when it
/// expires, each datacenter's reading, and for a unique counter the union of every slot's
/// sketch.
#[derive(Debug, Clone)]
pub struct Gathered {
    life: Life,
    readings: Vec<DatacenterReading>,
    union: Option<UniqueSketch>,
    /// A bounded counter's bounds, which its running total is clamped to.
    bounds: Option<Bounds>,
}

/// `counter`'s parts as `replica` holds them at `now_ms`: running totals or hits in `window`
/// per datacenter; for a unique counter, the estimates of its sketches' unions.
pub fn gather(
    replica: &Replica,
    layout: &Layout,
    counter: &HeldCounter<'_>,
    window: Option<&WindowQuery>,
    now_ms: u64,
) -> Gathered {
    let life = counter.life(now_ms);
    let copies = counter.copies.unwrap_or_default();
    let bounds = (counter.description).and_then(|d| d.description.bounds());
    if counter.is_unique() {
        let (readings, union) = read_unique_datacenters(replica, layout, copies, &life, now_ms);
        Gathered {
            life,
            readings,
            union: Some(union),
            bounds: None,
        }
    } else {
        let readings = read_datacenters(replica, layout, copies, &life, window, now_ms);
        Gathered {
            life,
            readings,
            union: None,
            bounds,
        }
    }
}

impl Gathered {
    /// The answer to a read of counter `id` asking `query`, datacenters named `names`.
    pub fn answer(self, id: &str, names: &[String], query: &ReadQuery) -> GlobalRead {
        let mut answer = answer_read(
            id,
            names,
            self.life.exists(),
            self.readings,
            self.union.as_ref(),
            query.max_staleness_ms,
            query.allow_partial,
        );
        match &mut answer {
            GlobalRead::Counter(reading) => {
                // Datacenters' parts of different ages can add up past a bound the true total
                // never passes (docs/architecture.md, "Bounded counters").
                if let (Some(bounds), None) = (self.bounds, &query.window) {
                    reading.total.value = bounds.clamp_wide(reading.total.value);
                }
                reading.window = query.window;
                reading.total.expires_at_ms = self.life.expires_at_ms;
            }
            GlobalRead::NotFound(presence) => *presence = self.life.presence,
            GlobalRead::Stale(_) => {}
        }
        answer
    }
}

/// A counter whose slots' `copies` the replica holds, per datacenter at `now_ms` (datacenters
/// in order): running totals, or hits in `window`, of the copies that count by `life`.
pub fn read_datacenters(
    replica: &Replica,
    layout: &Layout,
    copies: &[(u16, SlotRecord)],
    life: &Life,
    window: Option<&WindowQuery>,
    now_ms: u64,
) -> Vec<DatacenterReading> {
    let mut readings = empty_readings(replica, layout, now_ms);
    for (slot, record) in life.counting(copies) {
        let dc = layout.slot_datacenters[usize::from(*slot)];
        readings[dc].value += record.value_in(window);
    }
    readings
}

/// A unique counter whose slots' `copies` the replica holds, per datacenter at `now_ms`
/// (datacenters in order): each datacenter's value is the estimate of the union of its slots'
/// sketches that count by `life`. Also the union of every such sketch: the world's distinct
/// items.
pub fn read_unique_datacenters(
    replica: &Replica,
    layout: &Layout,
    copies: &[(u16, SlotRecord)],
    life: &Life,
    now_ms: u64,
) -> (Vec<DatacenterReading>, UniqueSketch) {
    let mut readings = empty_readings(replica, layout, now_ms);
    let mut unions = vec![UniqueSketch::new(); readings.len()];
    for (slot, record) in life.counting(copies) {
        if let Some(sketch) = record.uniques() {
            unions[layout.slot_datacenters[usize::from(*slot)]].union_with(sketch);
        }
    }
    for (reading, union) in readings.iter_mut().zip(&unions) {
        reading.value = i128::from(union.count());
    }
    (readings, UniqueSketch::union_of(&unions))
}

/// The answer to a global read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterReading {
    /// The sum over every datacenter (stale ones with their last known values); for a unique
    /// counter, the estimate of the union of every slot.
    #[serde(flatten)]
    pub total: Total,
    /// Whether no datacenter is stale.
    pub complete: bool,
    /// The largest datacenter staleness (`None` if any was never complete).
    pub staleness_ms: Option<u64>,
    /// Each datacenter's part, in topology order.
    pub datacenters: Named<DatacenterReading>,
    /// The rolling window the values count, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowQuery>,
}

/// What a global read answers.
#[derive(Debug, Clone, PartialEq)]
pub enum GlobalRead {
    /// 200: the sum (complete or, when allowed, partial).
    Counter(CounterReading),
    /// 503: stale datacenters and no partial answer allowed.
    Stale(StaleRead),
    /// 404: no slot holds the counter (or it is deleted or expired, as said) and no
    /// datacenter is stale.
    NotFound(Presence),
}

/// Applies the staleness rules to counter `id`'s per-datacenter readings (`held`: whether any
/// slot holds it), datacenters named `names`. The value is the sum of the datacenters' or, for
/// a unique counter, the estimate of `unique`: the union of every slot's sketch.
pub fn answer_read(
    id: &str,
    names: &[String],
    held: bool,
    readings: Vec<DatacenterReading>,
    unique: Option<&UniqueSketch>,
    max_staleness_ms: u64,
    allow_partial: bool,
) -> GlobalRead {
    let stale = stale_datacenters(&readings, max_staleness_ms);
    if stale.is_empty() && !held {
        return GlobalRead::NotFound(Presence::Unknown);
    }
    if !stale.is_empty() && !allow_partial {
        return GlobalRead::Stale(StaleRead {
            error: stale_reasons(names, &readings, &stale, max_staleness_ms),
            stale_datacenters: stale.iter().map(|&dc| names[dc].clone()).collect(),
            datacenters: named(names, readings),
        });
    }
    let (value, standard_error) = match unique {
        Some(union) => (i128::from(union.count()), Some(STANDARD_ERROR)),
        None => (readings.iter().map(|r| r.value).sum(), None),
    };
    GlobalRead::Counter(CounterReading {
        total: Total {
            id: id.to_owned(),
            value,
            standard_error,
            expires_at_ms: None,
        },
        complete: stale.is_empty(),
        staleness_ms: worst_staleness(readings.iter().map(|r| r.staleness_ms)),
        datacenters: named(names, readings),
        window: None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::global::datacenters::datacenter_statuses;
    use crate::global::staleness::tests::reading;
    use crate::global::{Datacenter, GlobalSettings};
    use crate::replica::{PullSource, SourceKind};
    use geocount_model::CounterId;
    use geocount_model::wire::{SlotPage, SyncPage};

    /// A replica of USA_0 (slots 0 and 1) and ASIA_0 (slot 2), neither heard yet.
    pub(crate) fn two_datacenter_replica() -> Replica {
        let sources: Vec<PullSource> = ["USA_0", "ASIA_0"]
            .into_iter()
            .map(|name| PullSource {
                name: name.into(),
                answers_as: name.into(),
                kind: SourceKind::Aggregator,
                address: "127.0.0.1:1".into(),
                interval: std::time::Duration::from_millis(250),
                first: geocount_model::wire::SyncRequest::from_start(true, true),
                delivers: Vec::new(),
            })
            .collect();
        let slots = ["DC_USA_0_VAL_0", "DC_USA_0_VAL_1", "DC_ASIA_0_VAL_0"].map(String::from);
        Replica::new(slots.to_vec(), &sources)
    }

    /// USA_0 (slots 0 and 1) and ASIA_0 (slot 2), one aggregator each.
    fn layout() -> Layout {
        Layout {
            names: names()[..2].to_vec(),
            slot_datacenters: vec![0, 0, 1],
            source_datacenters: vec![0, 1],
            source_addresses: vec!["127.0.0.1:2".into(), "127.0.0.1:3".into()],
        }
    }

    fn names() -> Vec<String> {
        vec!["USA_0".into(), "ASIA_0".into(), "EUROPE_0".into()]
    }

    #[test]
    fn datacenters_sum_their_own_slots() {
        use geocount_model::SlotState;
        use geocount_model::wire::Cursor;
        let mut replica = two_datacenter_replica();
        for (slot, value) in [(0, 7), (1, -2), (2, 100)] {
            let state = SlotState { value, version: 1 };
            replica.merge(slot, &CounterId::new("c").unwrap(), &state.into());
        }
        replica.merge(
            0,
            &CounterId::new("d").unwrap(),
            &SlotState {
                value: 1,
                version: 1,
            }
            .into(),
        );
        let caught_up = SyncPage {
            slots: Some(SlotPage {
                next: Cursor::Seq { epoch: 1, seq: 1 },
                caught_up: true,
                ..Default::default()
            }),
            ..SyncPage::default()
        };
        replica.sources[0].advance(&caught_up, 1_000, 1_000);
        let c = replica.counter("c");
        let readings = read_datacenters(
            &replica,
            &layout(),
            c.copies.unwrap(),
            &c.life(1_400),
            None,
            1_400,
        );
        assert!(c.life(1_400).exists());
        assert_eq!(readings[0], reading(5, Some(400), true));
        assert_eq!(readings[1], reading(100, None, false));
        assert!(!replica.counter("e").life(1_400).exists());

        let t = geocount_test_support::TestTopology::new(&[("USA_0", 1), ("ASIA_0", 1)], "");
        let settings = GlobalSettings {
            max_staleness_ms: 1_000,
            datacenters: ["USA_0", "ASIA_0"]
                .map(|name| Datacenter {
                    name: name.into(),
                    aggregators: vec![(
                        "127.0.0.1:2".parse().unwrap(),
                        geocount_model::Partitions::all(1),
                    )],
                    slots: 1,
                })
                .to_vec(),
            settings: crate::settings::Settings::from_topology(
                &t.topology,
                "127.0.0.1:1".parse().unwrap(),
                u64::MAX,
            ),
        };
        let statuses = datacenter_statuses(&replica, &settings, &layout(), 1_400);
        let (usa, asia) = (&statuses.0[0].1, &statuses.0[1].1);
        assert_eq!(
            (usa.counters, usa.heard, usa.last_heard_ms_ago),
            (2, true, Some(400))
        );
        assert_eq!(
            (asia.counters, asia.heard, asia.staleness_ms),
            (1, false, None)
        );
    }

    #[test]
    fn a_unique_counter_is_the_union_of_every_slot_under_the_same_staleness_rules() {
        use geocount_model::{SlotRecord, SlotState};
        let mut replica = two_datacenter_replica();
        // USA's slots saw users 0..20,000 and 10,000..30,000; ASIA's 25,000..40,000.
        for (slot, from, to) in [(0, 0, 20_000), (1, 10_000, 30_000), (2, 25_000, 40_000)] {
            let mut record = SlotRecord::from(SlotState {
                value: 0,
                version: 1,
            });
            for n in from..to {
                record.add_item(geocount_model::unique::hash_item(&format!("user-{n}")), 2);
            }
            replica.merge(slot, &CounterId::new("u").unwrap(), &record);
        }
        let u = replica.counter("u");
        let (readings, union) = read_unique_datacenters(
            &replica,
            &layout(),
            u.copies.unwrap(),
            &u.life(1_400),
            1_400,
        );
        let held = u.life(1_400).exists();
        assert!(held);
        let off = |value: i128, truth: f64| (value as f64 - truth).abs() / truth;
        assert!(off(readings[0].value, 30_000.0) < 0.03, "{readings:?}");
        assert!(off(readings[1].value, 15_000.0) < 0.03, "{readings:?}");
        assert!(off(i128::from(union.count()), 40_000.0) < 0.03);
        let GlobalRead::Counter(answer) =
            answer_read("u", &names()[..2], held, readings, Some(&union), 1000, true)
        else {
            panic!("partial answers allowed");
        };
        assert_eq!(
            answer.total.value,
            i128::from(union.count()),
            "not the sum of the parts"
        );
        assert_eq!(answer.total.standard_error, Some(STANDARD_ERROR));
        assert!(!answer.complete, "neither datacenter was ever complete");
        let (readings, _) = read_unique_datacenters(
            &replica,
            &layout(),
            u.copies.unwrap(),
            &u.life(1_400),
            1_400,
        );
        let refused = answer_read(
            "u",
            &names()[..2],
            true,
            readings,
            Some(&union),
            1000,
            false,
        );
        assert!(matches!(refused, GlobalRead::Stale(_)));
    }

    /// Both datacenters complete as of 1_000.
    fn fresh(replica: &mut Replica) {
        use geocount_model::wire::Cursor;
        let caught_up = SyncPage {
            slots: Some(SlotPage {
                next: Cursor::Seq { epoch: 1, seq: 1 },
                caught_up: true,
                ..Default::default()
            }),
            ..SyncPage::default()
        };
        for source in 0..2 {
            replica.sources[source].advance(&caught_up, 1_000, 1_000);
        }
    }

    #[test]
    fn the_world_counts_only_records_of_the_counters_generation() {
        use geocount_model::fixtures::described;
        use geocount_model::{HlcTimestamp, SlotRecord, SlotState};
        let mut replica = two_datacenter_replica();
        fresh(&mut replica);
        let c = CounterId::new("c").unwrap();
        let record = |value, version, generation| {
            let mut record = SlotRecord::from(SlotState { value, version });
            record.set_generation(generation);
            record
        };
        for slot in [0, 2] {
            replica.merge(slot, &c, &record(5, 1, HlcTimestamp::default()));
        }
        let query = ReadQuery {
            max_staleness_ms: 10_000,
            allow_partial: false,
            window: None,
        };
        let read = |replica: &Replica, now_ms| {
            let counter = replica.counter("c");
            gather(replica, &layout(), &counter, None, now_ms).answer("c", &names()[..2], &query)
        };
        let GlobalRead::Counter(reading) = read(&replica, 1_500) else {
            panic!("fresh and held");
        };
        assert_eq!(reading.total.value, 10);
        let reset_at = HlcTimestamp {
            physical_ms: 1_200,
            logical: 0,
            node: 2,
        };
        let mut created = described("c", 1, 1_000, 1);
        created.description.expires_at_ms = Some(9_000);
        replica.descriptions.merge(created.reset(reset_at));
        replica.merge(2, &c, &record(4, 2, reset_at));
        let GlobalRead::Counter(reading) = read(&replica, 1_500) else {
            panic!("reset, not deleted");
        };
        assert_eq!(reading.total.value, 4);
        assert_eq!(reading.datacenters.0[0].1.value, 0, "USA's record is wiped");
        assert_eq!(reading.total.expires_at_ms, Some(9_000));
        assert_eq!(
            read(&replica, 9_000),
            GlobalRead::NotFound(Presence::Expired(9_000))
        );
        replica.descriptions.merge(created.delete(HlcTimestamp {
            physical_ms: 1_300,
            ..reset_at
        }));
        assert_eq!(
            read(&replica, 1_500),
            GlobalRead::NotFound(Presence::Deleted)
        );
        // A stale datacenter may hold a newer generation: the staleness rules still apply.
        let GlobalRead::Stale(_) = read(&replica, 20_000) else {
            panic!("stale datacenters refuse");
        };
    }

    #[test]
    fn fresh_datacenters_sum_to_a_complete_answer() {
        let readings = vec![
            reading(10, Some(20), true),
            reading(-3, Some(300), true),
            reading(i128::from(i64::MAX), Some(5), true),
        ];
        let GlobalRead::Counter(answer) =
            answer_read("c", &names(), true, readings, None, 1000, false)
        else {
            panic!("complete");
        };
        assert_eq!(answer.total.value, 7 + i128::from(i64::MAX));
        assert!(answer.complete);
        assert_eq!(answer.staleness_ms, Some(300));
        assert_eq!(answer.datacenters.0[1].0, "ASIA_0");
    }

    #[test]
    fn stale_datacenters_refuse_unless_partial_is_allowed() {
        let readings = vec![
            reading(10, Some(20), true),
            reading(5, Some(5123), true),
            reading(0, None, false),
        ];
        let GlobalRead::Stale(refusal) =
            answer_read("c", &names(), true, readings.clone(), None, 1000, false)
        else {
            panic!("refused");
        };
        assert_eq!(
            refusal.error,
            "stale datacenters: ASIA_0 (staleness 5123 ms > 1000 ms), EUROPE_0 (never heard)"
        );
        assert_eq!(refusal.stale_datacenters, ["ASIA_0", "EUROPE_0"]);
        let GlobalRead::Counter(partial) =
            answer_read("c", &names(), true, readings, None, 1000, true)
        else {
            panic!("partial");
        };
        assert_eq!(
            partial.total.value, 15,
            "stale ones count with their last values"
        );
        assert!(!partial.complete);
        assert_eq!(partial.staleness_ms, None, "one never heard");
        assert!(!partial.datacenters.0[2].1.heard);
    }

    #[test]
    fn an_unknown_counter_is_not_found_only_when_nothing_is_stale() {
        let fresh = vec![reading(0, Some(1), true); 3];
        assert_eq!(
            answer_read("c", &names(), false, fresh, None, 1000, false),
            GlobalRead::NotFound(Presence::Unknown)
        );
        let one_stale = vec![
            reading(0, Some(1), true),
            reading(0, None, true),
            reading(0, Some(1), true),
        ];
        let GlobalRead::Stale(refusal) =
            answer_read("c", &names(), false, one_stale.clone(), None, 1000, false)
        else {
            panic!("refused");
        };
        assert!(
            refusal.error.contains("ASIA_0 (never complete"),
            "{}",
            refusal.error
        );
        let GlobalRead::Counter(partial) =
            answer_read("c", &names(), false, one_stale, None, 1000, true)
        else {
            panic!("partial");
        };
        assert_eq!((partial.total.value, partial.complete), (0, false));
    }
}
