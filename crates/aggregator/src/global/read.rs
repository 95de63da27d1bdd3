//! What the global tier holds, and the rules it answers reads by.
//!
//! - A datacenter's staleness is how long ago this aggregator last had that datacenter's
//!   complete state ([`geocount_sync::SourceStatus::staleness_ms`]): a datacenter whose own
//!   aggregator has a slot never heard stays incomplete. `None`: never.
//! - A datacenter is stale for a read when its staleness is `None` or above the read's
//!   `max_staleness_ms`.
//! - A counter's value is the sum over every datacenter of the sum of its slots' copies; a
//!   stale datacenter counts with its last known values.
//! - A unique counter's value is the estimate of the union of every slot's sketch (a
//!   datacenter's part: of its slots' union), under the same staleness rules.

use geocount_http::routing::{Named, WindowQuery};
use geocount_model::unique::STANDARD_ERROR;
use geocount_model::{SlotRecord, UniqueSketch};
use geocount_sync::{Replica, SourceHealth, worst_staleness};
use serde::Serialize;

use super::GlobalConfig;
use crate::answers::Total;
use crate::parts::{DatacenterReading, StaleRead};
use crate::tier::Core;

/// What the global tier's HTTP handlers share.
pub struct GlobalState {
    /// What either tier's handlers share.
    pub core: Core,
    /// The configuration it runs with.
    pub config: GlobalConfig,
    /// Which datacenter each slot and each source belongs to.
    pub layout: Layout,
}

/// Which datacenter each slot and each source (a replica of a datacenter's aggregator) of the
/// global tier belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The datacenters' names, by index.
    pub names: Vec<String>,
    /// The index of the datacenter of each slot, by slot index.
    pub slot_datacenters: Vec<usize>,
    /// The index of the datacenter of each source, by source index.
    pub source_datacenters: Vec<usize>,
    /// Where each source listens, by source index.
    pub source_addresses: Vec<String>,
}

impl Layout {
    /// The sources of datacenter `datacenter`, by source index.
    pub fn sources_of(&self, datacenter: usize) -> impl Iterator<Item = usize> + '_ {
        (self.source_datacenters.iter().enumerate())
            .filter(move |(_, dc)| **dc == datacenter)
            .map(|(source, _)| source)
    }

    /// The source a datacenter's part comes from at `now_ms`: the freshest replica of its
    /// aggregator, else its first.
    pub fn freshest_source(&self, replica: &Replica, datacenter: usize, now_ms: u64) -> usize {
        let staleness = |source: usize| replica.sources[source].staleness_ms(now_ms);
        (self.sources_of(datacenter))
            .filter(|&s| staleness(s).is_some())
            .min_by_key(|&s| staleness(s))
            .or_else(|| self.sources_of(datacenter).next())
            .expect("every datacenter has an aggregator")
    }
}

/// Every datacenter's staleness at `now_ms`, with no value yet. Copies merge by version, so
/// a datacenter is as fresh as the freshest replica of its aggregator; but entries refused
/// past this aggregator's byte bound are lacking whichever replica sent them.
pub fn empty_readings(replica: &Replica, layout: &Layout, now_ms: u64) -> Vec<DatacenterReading> {
    let mut readings = vec![
        DatacenterReading {
            value: 0,
            staleness_ms: None,
            heard: false,
        };
        layout.names.len()
    ];
    let mut refused = vec![false; layout.names.len()];
    for (source, &dc) in replica.sources.iter().zip(&layout.source_datacenters) {
        let reading = &mut readings[dc];
        reading.heard |= source.last_heard_ms.is_some();
        reading.staleness_ms = freshest(reading.staleness_ms, source.staleness_ms(now_ms));
        refused[dc] |= source.refused_past_bound;
    }
    for (reading, refused) in readings.iter_mut().zip(refused) {
        if refused {
            reading.staleness_ms = None;
        }
    }
    readings
}

/// The fresher of two stalenesses (`None`: never complete).
fn freshest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A counter whose slots' `copies` the replica holds, per datacenter at `now_ms` (datacenters
/// in order): running totals, or hits in `window`; and whether any slot holds it.
pub fn read_datacenters(
    replica: &Replica,
    layout: &Layout,
    copies: Option<&[(u16, SlotRecord)]>,
    window: Option<&WindowQuery>,
    now_ms: u64,
) -> (bool, Vec<DatacenterReading>) {
    let mut readings = empty_readings(replica, layout, now_ms);
    for (slot, record) in copies.unwrap_or_default() {
        let dc = layout.slot_datacenters[usize::from(*slot)];
        readings[dc].value += WindowQuery::value_of(window, record);
    }
    (copies.is_some(), readings)
}

/// A unique counter whose slots' `copies` the replica holds, per datacenter at `now_ms`
/// (datacenters in order): each datacenter's value is the estimate of the union of its slots'
/// sketches. Also whether any slot holds it, and the union of every slot's sketch: the world's
/// distinct items.
pub fn read_unique_datacenters(
    replica: &Replica,
    layout: &Layout,
    copies: Option<&[(u16, SlotRecord)]>,
    now_ms: u64,
) -> (bool, Vec<DatacenterReading>, UniqueSketch) {
    let mut readings = empty_readings(replica, layout, now_ms);
    let mut unions = vec![UniqueSketch::new(); readings.len()];
    for (slot, record) in copies.unwrap_or_default() {
        if let Some(sketch) = record.uniques() {
            unions[layout.slot_datacenters[usize::from(*slot)]].union_with(sketch);
        }
    }
    for (reading, union) in readings.iter_mut().zip(&unions) {
        reading.value = i128::from(union.count());
    }
    (copies.is_some(), readings, UniqueSketch::union_of(&unions))
}

/// The datacenters stale for a read allowing `max_staleness_ms`: never complete, or staler.
pub fn stale_datacenters(readings: &[DatacenterReading], max_staleness_ms: u64) -> Vec<usize> {
    readings
        .iter()
        .enumerate()
        .filter(|(_, r)| r.staleness_ms.is_none_or(|ms| ms > max_staleness_ms))
        .map(|(index, _)| index)
        .collect()
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

/// Why the datacenters `stale` (indices into `readings`, named by `names`) are stale for a read
/// allowing `max_staleness_ms`: `stale datacenters: ASIA_0 (staleness 5123 ms > 1000 ms), ...`.
pub fn stale_reasons(
    names: &[String],
    readings: &[DatacenterReading],
    stale: &[usize],
    max_staleness_ms: u64,
) -> String {
    let reasons: Vec<String> = stale
        .iter()
        .map(|&dc| {
            let reading = &readings[dc];
            let why = match (reading.staleness_ms, reading.heard) {
                (Some(ms), _) => format!("staleness {ms} ms > {max_staleness_ms} ms"),
                (None, false) => "never heard".to_owned(),
                (None, true) => "never complete: some of its slots never heard, or held incompletely past a byte bound (see /healthz)".to_owned(),
            };
            format!("{} ({why})", names[dc])
        })
        .collect();
    format!("stale datacenters: {}", reasons.join(", "))
}

/// What a global read answers.
#[derive(Debug, Clone, PartialEq)]
pub enum GlobalRead {
    /// 200: the sum (complete or, when allowed, partial).
    Counter(CounterReading),
    /// 503: stale datacenters and no partial answer allowed.
    Stale(StaleRead),
    /// 404: no slot holds the counter and no datacenter is stale.
    NotFound,
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
        return GlobalRead::NotFound;
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
        },
        complete: stale.is_empty(),
        staleness_ms: worst_staleness(readings.iter().map(|r| r.staleness_ms)),
        datacenters: named(names, readings),
        window: None,
    })
}

/// `values` under the datacenters' `names`, in order.
pub fn named<T>(names: &[String], values: Vec<T>) -> Named<T> {
    names.iter().cloned().zip(values).collect()
}

/// One datacenter as `GET /datacenters` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatacenterStatus {
    /// Where the freshest replica of its aggregator listens: the one its part comes from.
    pub aggregator: String,
    /// Whether any replica of its aggregator ever answered.
    pub heard: bool,
    /// How long ago a replica last answered.
    pub last_heard_ms_ago: Option<u64>,
    /// How long ago this aggregator last had its complete state (`None`: never).
    pub staleness_ms: Option<u64>,
    /// Counters with any copy from it.
    pub counters: usize,
    /// The freshest replica's last pull failure, cleared by its next success.
    pub last_error: Option<String>,
    /// Each replica of its aggregator, by address: its own staleness and last failure.
    pub replicas: Named<SourceHealth>,
}

/// Every datacenter's status at `now_ms`. Counts counters by walking every copy: meant for an
/// operator's occasional look, not for a hot path.
pub fn datacenter_statuses(
    replica: &Replica,
    config: &GlobalConfig,
    layout: &Layout,
    now_ms: u64,
) -> Named<DatacenterStatus> {
    let mut counters = vec![0usize; config.datacenters.len()];
    // The last counter counted for each datacenter, so a counter counts once per datacenter.
    let mut counted = vec![usize::MAX; config.datacenters.len()];
    for (n, (_, copies)) in replica.copies.iter().enumerate() {
        for (slot, _) in copies {
            let dc = layout.slot_datacenters[usize::from(*slot)];
            if counted[dc] != n {
                counted[dc] = n;
                counters[dc] += 1;
            }
        }
    }
    let readings = empty_readings(replica, layout, now_ms);
    (config.datacenters.iter().enumerate())
        .zip(counters)
        .map(|((index, dc), counters)| {
            let sources: Vec<usize> = layout.sources_of(index).collect();
            let freshest = layout.freshest_source(replica, index, now_ms);
            let status = DatacenterStatus {
                aggregator: layout.source_addresses[freshest].clone(),
                heard: readings[index].heard,
                last_heard_ms_ago: (sources.iter())
                    .filter_map(|&s| replica.sources[s].last_heard_ms)
                    .max()
                    .map(|t| now_ms.saturating_sub(t)),
                staleness_ms: readings[index].staleness_ms,
                counters,
                last_error: replica.sources[freshest].last_error.clone(),
                replicas: (sources.iter())
                    .map(|&s| {
                        let address = layout.source_addresses[s].clone();
                        (address, replica.source_health(s, now_ms))
                    })
                    .collect(),
            };
            (dc.name.clone(), status)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::global::Datacenter;
    use geocount_model::CounterId;

    fn reading(value: i128, staleness_ms: Option<u64>, heard: bool) -> DatacenterReading {
        DatacenterReading {
            value,
            staleness_ms,
            heard,
        }
    }

    /// A replica of USA_0 (slots 0 and 1) and ASIA_0 (slot 2), neither heard yet.
    fn two_datacenter_replica() -> Replica {
        let sources: Vec<geocount_sync::PullSource> = ["USA_0", "ASIA_0"]
            .into_iter()
            .map(|name| geocount_sync::PullSource {
                name: name.into(),
                answers_as: name.into(),
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
        use geocount_model::wire::{Cursor, SyncPage};
        let mut replica = two_datacenter_replica();
        for (slot, value) in [(0, 7), (1, -2), (2, 100)] {
            let state = SlotState { value, version: 1 };
            replica
                .copies
                .merge(slot, &CounterId::new("c").unwrap(), &state.into());
        }
        replica.copies.merge(
            0,
            &CounterId::new("d").unwrap(),
            &SlotState {
                value: 1,
                version: 1,
            }
            .into(),
        );
        let caught_up = SyncPage {
            slots: Some(geocount_model::wire::SlotPage {
                next: Cursor::Seq { epoch: 1, seq: 1 },
                caught_up: true,
                ..Default::default()
            }),
            ..SyncPage::default()
        };
        replica.sources[0].advance(&caught_up, 1_000, 1_000);
        let (held, readings) =
            read_datacenters(&replica, &layout(), replica.copies.get("c"), None, 1_400);
        assert!(held);
        assert_eq!(readings[0], reading(5, Some(400), true));
        assert_eq!(readings[1], reading(100, None, false));
        assert!(!read_datacenters(&replica, &layout(), replica.copies.get("e"), None, 1_400).0);

        let t = geocount_test_support::TestTopology::new(&[("USA_0", 1), ("ASIA_0", 1)], "");
        let config = GlobalConfig {
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
        let statuses = datacenter_statuses(&replica, &config, &layout(), 1_400);
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
            replica
                .copies
                .merge(slot, &CounterId::new("u").unwrap(), &record);
        }
        let (held, readings, union) =
            read_unique_datacenters(&replica, &layout(), replica.copies.get("u"), 1_400);
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
        let (_, readings, _) =
            read_unique_datacenters(&replica, &layout(), replica.copies.get("u"), 1_400);
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

    #[test]
    fn stale_means_never_complete_or_staler_than_allowed() {
        let readings = [
            reading(1, Some(1000), true),
            reading(2, Some(1001), true),
            reading(3, None, false),
        ];
        assert_eq!(stale_datacenters(&readings, 1000), [1, 2]);
        assert_eq!(stale_datacenters(&readings, 5000), [2]);
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
            GlobalRead::NotFound
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
