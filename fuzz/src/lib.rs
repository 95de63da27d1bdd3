//! What geocount's fuzz targets share: fixed settings and clock readings, a replica holding a
//! few counters of every kind, and the semantic use every decoded slot record goes through
//! after decoding (reads, window sums, the owner's next write, re-encoding).
//!
//! Each target feeds its bytes to the same public function the real handler or puller calls,
//! then drives what the process does next with what was decoded, since a structurally valid
//! but hostile message is where panics hide.
//!
//! - [`targets`]: each target's body, run by its wrapper in `fuzz_targets/` and by the seed
//!   replay (`tests/seeds.rs`) on the stable toolchain.
//! - [`seeds`]: valid inputs of each target made from the real types, written to the corpora
//!   by `examples/write_seeds.rs`.

pub mod targets;

use geocount_aggregator::global::Layout;
use geocount_aggregator::replica::{PullSource, Replica, SourceKind};
use geocount_model::unique::hash_item;
use geocount_model::wire::{Cursor, SlotEntry, SlotPage, SyncPage, SyncRequest};
use geocount_model::{
    CounterDescription, CounterId, CounterType, HlcTimestamp, SlotRecord, SlotState,
    VersionedDescription, WindowQuery, next_slot_version,
};
use geocount_ranking::LiveRanking;

/// The node's clock in every target, in unix seconds (deterministic, so crashes reproduce).
pub const NOW_SECS: u64 = 1_800_000_000;
/// The node's clock in every target, in unix milliseconds.
pub const NOW_MS: u64 = NOW_SECS * 1000;
/// The window length of counters without a description (the topology's default).
pub const WINDOW_SECONDS: u32 = 300;

/// The slots the fixtures' replicas hold: two of datacenter `A`, one of `B`.
pub fn slot_names() -> Vec<String> {
    ["DC_A_VAL_0", "DC_A_VAL_1", "DC_B_VAL_0"]
        .map(str::to_owned)
        .to_vec()
}

/// The datacenter of each of [`slot_names`], by index.
pub const SLOT_DATACENTERS: [usize; 3] = [0, 0, 1];

/// The datacenter names of the fixtures.
pub fn datacenter_names() -> Vec<String> {
    vec!["A".to_owned(), "B".to_owned()]
}

/// How many hits in the live window make a `#` counter trend in every target.
pub const TRENDING_THRESHOLD: i64 = 1;

/// The live window both aggregators' top-K indexes rank, holding every counter at or over
/// [`TRENDING_THRESHOLD`] as `[trending]` would.
fn live_ranking() -> LiveRanking {
    LiveRanking {
        hold_from: Some(i128::from(TRENDING_THRESHOLD)),
        ..LiveRanking::new(WINDOW_SECONDS, NOW_SECS)
    }
}

/// A pull source named `name` of `kind`, pulling slot states and descriptions of every
/// counter, delivering the slots `delivers`.
fn pull_source(n: usize, name: &str, kind: SourceKind, delivers: Vec<String>) -> PullSource {
    PullSource {
        name: name.to_owned(),
        answers_as: name.to_owned(),
        kind,
        address: format!("127.0.0.1:{}", 9000 + n),
        interval: std::time::Duration::from_millis(50),
        first: SyncRequest::from_start(true, true),
        delivers,
    }
}

/// The global aggregator's sources: one aggregator per datacenter, delivering its slots.
pub fn global_sources() -> Vec<PullSource> {
    (datacenter_names().iter().enumerate())
        .map(|(dc, name)| {
            let delivers = (slot_names().into_iter().zip(SLOT_DATACENTERS))
                .filter(|(_, of)| *of == dc)
                .map(|(slot, _)| slot)
                .collect();
            pull_source(dc, name, SourceKind::Aggregator, delivers)
        })
        .collect()
}

/// Which datacenter each of the global aggregator's slots and sources ([`global_sources`])
/// belongs to.
pub fn global_layout() -> Layout {
    Layout {
        names: datacenter_names(),
        slot_datacenters: SLOT_DATACENTERS.to_vec(),
        source_datacenters: (0..datacenter_names().len()).collect(),
        source_addresses: global_sources().into_iter().map(|s| s.address).collect(),
    }
}

/// An empty replica of [`slot_names`] as the global aggregator holds it: one source per
/// datacenter, counters ranked per datacenter too.
pub fn empty_replica() -> Replica {
    let mut replica = Replica::new(slot_names(), &global_sources());
    replica.index_top(SLOT_DATACENTERS.to_vec(), live_ranking());
    replica
}

/// An empty replica of [`slot_names`] as a datacenter aggregator holds its slots: one shard
/// node per slot, counters ranked over all of them.
pub fn empty_datacenter_replica() -> Replica {
    let sources: Vec<PullSource> = (slot_names().iter().enumerate())
        .map(|(n, slot)| pull_source(n, slot, SourceKind::Shard, vec![slot.clone()]))
        .collect();
    let mut replica = Replica::new(slot_names(), &sources);
    replica.index_top(vec![0; SLOT_DATACENTERS.len()], live_ranking());
    replica
}

/// A sum counter's record: `value` with hits in the seconds just before [`NOW_SECS`].
pub fn sum_record(value: i64, version: u64) -> SlotRecord {
    let mut record = SlotRecord::from(SlotState { value, version });
    for (ago, hits) in [(200, 2), (10, value), (1, -1)] {
        record
            .window_mut()
            .expect("a sum's record has a window")
            .record(NOW_SECS - ago, hits, WINDOW_SECONDS)
            .expect("fixture hits fit");
    }
    record
}

/// A unique counter's record with `items` distinct items.
pub fn unique_record(items: u64, version: u64) -> SlotRecord {
    let mut record = SlotRecord::default();
    for n in 0..items {
        record.add_item(hash_item(&format!("user-{n}")), version);
    }
    record
}

/// A description of counter `id`.
pub fn description(id: &str, counter_type: CounterType, shards: u32) -> VersionedDescription {
    VersionedDescription {
        description: CounterDescription {
            id: CounterId::new(id).expect("fixture id"),
            counter_type,
            number_of_shards: shards,
            base_number_of_shards: 1,
            window_seconds: WINDOW_SECONDS,
            created_at_ms: NOW_MS - 60_000,
            generation: Default::default(),
            deleted: false,
            expires_at_ms: None,
            history: Vec::new(),
            min: None,
            max: None,
        },
        version: HlcTimestamp {
            physical_ms: NOW_MS - 60_000,
            logical: 3,
            node: 7,
        },
    }
}

/// Counter id `text` (valid).
fn id(text: &str) -> CounterId {
    CounterId::new(text).expect("a valid id")
}

/// A replica holding sum counters `#a`, `#b`, `tweet:1:likes` and unique counter `visitors`
/// in several slots, with descriptions of two of them.
pub fn populated_replica() -> Replica {
    let mut replica = empty_replica();
    replica.merge(0, &id("#a"), &sum_record(10, 5));
    replica.merge(1, &id("#a"), &sum_record(-4, 2));
    replica.merge(2, &id("#b"), &sum_record(7, 9));
    replica.merge(0, &id("tweet:1:likes"), &sum_record(i64::MAX, 1));
    replica.merge(2, &id("tweet:1:likes"), &sum_record(i64::MAX, 1));
    replica.merge(1, &id("visitors"), &unique_record(40, 3));
    replica.merge(2, &id("visitors"), &unique_record(3_000, 4));
    replica
        .descriptions
        .merge(description("#a", CounterType::Sum, 2));
    replica
        .descriptions
        .merge(description("visitors", CounterType::Unique, 1));
    replica
}

/// The windows a read may ask for around [`NOW_SECS`]: the live window, a shorter one, one
/// ending in the past and one in the future, and the extremes.
pub fn windows() -> [WindowQuery; 6] {
    [
        WindowQuery {
            seconds: WINDOW_SECONDS,
            at: NOW_SECS,
        },
        WindowQuery {
            seconds: 5,
            at: NOW_SECS,
        },
        WindowQuery {
            seconds: 60,
            at: NOW_SECS - 250,
        },
        WindowQuery {
            seconds: WINDOW_SECONDS,
            at: NOW_SECS + 100,
        },
        WindowQuery {
            seconds: u32::MAX,
            at: u64::MAX,
        },
        WindowQuery { seconds: 1, at: 0 },
    ]
}

/// What the processes do with a slot record they decoded: read its value all-time and in
/// windows, estimate its sketch, and, as the owner restoring it would, apply its next delta,
/// hit and item to a copy. Nothing may panic, whatever the record holds.
pub fn drive_record(record: &SlotRecord) {
    for window in windows() {
        let _ = record.value_in(Some(&window));
        let _ = record.window().sum(window.seconds, window.at);
    }
    let _ = record.value_in(None);
    if let Some(sketch) = record.uniques() {
        let _ = sketch.count();
        let _ = sketch.registers_set();
        let _ = sketch.encoded_bytes();
        let mut union = sketch.clone();
        union.union_with(sketch);
        assert_eq!(&union, sketch, "a sketch's union with itself is itself");
    }
    let mut owner = record.clone();
    let version = next_slot_version(owner.state.version, NOW_MS);
    if let Ok(state) = owner.state.apply(1, version) {
        owner.state = state;
    }
    if let Some(window) = owner.window_mut() {
        for (second, delta) in [(NOW_SECS, 1), (NOW_SECS - 299, -3), (u64::MAX, i64::MAX)] {
            let _ = window.record(second, delta, WINDOW_SECONDS);
            let _ = window.sum(WINDOW_SECONDS, NOW_SECS);
        }
    }
    owner.add_item(hash_item("fuzz"), version.saturating_add(1));
    let mut merged = record.clone();
    merged.merge(&owner);
    round_trip(record);
}

/// Checks that `value` re-encodes and decodes to itself: what a process accepted it can send
/// on (a page served to the next tier, a record written to the log).
pub fn round_trip<T>(value: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let bytes = postcard::to_allocvec(value).expect("an accepted value encodes");
    let back: T = postcard::from_bytes(&bytes).expect("an encoded value decodes");
    assert_eq!(&back, value, "a value survives re-encoding");
}

/// Valid inputs of each target, made from the real types, for `examples/write_seeds.rs`.
pub mod seeds {
    use super::*;
    use geocount_model::wire::{
        BatchEntry, BatchRequest, BatchResponse, DescriptionPage, EntryOutcome, ItemBatchRequest,
        ItemEntry, KeyPage, Puller, SlotCopy, SlotFreshness,
    };
    use geocount_model::{IdempotencyRecord, Partitions, RightsMessage, Room, SlotId};

    fn encode(value: &impl serde::Serialize) -> Vec<u8> {
        postcard::to_allocvec(value).expect("seeds encode")
    }

    /// `wire_batch`: a delta batch, an item batch and a batch answer.
    pub fn wire_batch() -> Vec<Vec<u8>> {
        let deltas = BatchRequest {
            entries: vec![
                BatchEntry {
                    id: "tweet:1:likes",
                    delta: 5,
                    idempotency_key: None,
                    timestamp: None,
                },
                BatchEntry {
                    id: "#rust",
                    delta: -2,
                    idempotency_key: Some("req-81"),
                    timestamp: Some(NOW_SECS - 10),
                },
            ],
        };
        let items = ItemBatchRequest {
            entries: vec![ItemEntry {
                id: "page:home:visitors",
                item: "user-42",
                idempotency_key: Some("k"),
                timestamp: Some(NOW_SECS),
            }],
        };
        let answer = BatchResponse {
            slot: "DC_A_VAL_0".into(),
            outcomes: vec![
                EntryOutcome::Applied {
                    value: 7,
                    version: 99,
                },
                EntryOutcome::Refused {
                    status: 422,
                    error: "overflow".into(),
                },
            ],
        };
        vec![encode(&deltas), encode(&items), encode(&answer)]
    }

    /// `wire_rights`: asks for rights (for what a write lacks, for nothing, for all there is)
    /// and a bounded counter's description pushed to every shard node.
    pub fn wire_rights() -> Vec<Vec<u8>> {
        let ask = |need: Room, want: Room| RightsMessage::Ask {
            counter: id("stock:42"),
            generation: HlcTimestamp {
                physical_ms: NOW_MS - 60_000,
                logical: 0,
                node: 2,
            },
            to: SlotId::new("B", 1),
            need,
            want,
        };
        let mut bounded = description("stock:42", CounterType::Sum, 2);
        bounded.description.min = Some(-10);
        bounded.description.max = Some(1_000);
        [
            ask(Room { up: 3, down: 0 }, Room { up: 100, down: 0 }),
            ask(Room::default(), Room::default()),
            ask(
                Room { up: 0, down: 1 },
                Room {
                    up: u64::MAX,
                    down: u64::MAX,
                },
            ),
            RightsMessage::Describe(bounded),
        ]
        .iter()
        .map(encode)
        .collect()
    }

    /// `wire_sync_request`: pulls from the start, of one stream, and from cursors.
    pub fn wire_sync_request() -> Vec<Vec<u8>> {
        [
            SyncRequest::from_start(true, true),
            SyncRequest {
                slots: Some(Cursor::Seq { epoch: 1, seq: 3 }),
                puller: Some(Puller {
                    slot: "DC_A_VAL_0".into(),
                    incarnation: 7,
                    nonce: 3,
                }),
                keys: Some(Cursor::Seq { epoch: 2, seq: 1 }),
                ..SyncRequest::default()
            },
            SyncRequest {
                slots: Some(Cursor::Scan {
                    epoch: 1,
                    resume_seq: 5,
                    next_index: 2,
                }),
                descriptions: Some(Cursor::Seq { epoch: 1, seq: 1 }),
                partitions: Some(Partitions {
                    count: 4,
                    held: vec![0, 2],
                }),
                ..SyncRequest::default()
            },
        ]
        .iter()
        .map(encode)
        .collect()
    }

    /// `wire_sync_page`: the pages the populated replica serves, and a small hand-made one.
    pub fn wire_sync_page() -> Vec<Vec<u8>> {
        let replica = populated_replica();
        let served = replica.sync_page(
            &SyncRequest::from_start(true, true),
            "A",
            2,
            vec![SlotFreshness {
                slot: "DC_A_VAL_0".into(),
                staleness_ms: Some(40),
                owner_incarnation: 7,
                incomplete: false,
            }],
        );
        let small = SyncPage {
            source: "DC_A_VAL_1".into(),
            slots: Some(SlotPage {
                slot_names: vec!["DC_A_VAL_1".into()],
                entries: vec![SlotEntry {
                    slot: 0,
                    id: "#a".into(),
                    record: sum_record(3, 11),
                }],
                next: Cursor::Seq { epoch: 9, seq: 1 },
                caught_up: true,
            }),
            descriptions: Some(DescriptionPage {
                items: vec![description("#a", CounterType::Sum, 3)],
                next: Cursor::Seq { epoch: 9, seq: 1 },
                caught_up: true,
            }),
            freshness: Vec::new(),
            load: 12,
            incarnation: 5,
            nonce: 6,
            conflict: None,
            keys: Some(KeyPage {
                keys: vec![(
                    "req-81".into(),
                    IdempotencyRecord {
                        counter: id("#a"),
                        delta: 3,
                        item: None,
                        outcome: SlotState {
                            value: 3,
                            version: 11,
                        },
                        created_at_ms: NOW_MS - 1_000,
                    },
                )],
                next: Cursor::Seq { epoch: 2, seq: 1 },
                caught_up: true,
                whole: true,
                reach: 11,
            }),
        };
        vec![encode(&served), encode(&small)]
    }

    /// `wire_slot_copy`: the populated replica's copy of each slot.
    pub fn wire_slot_copy() -> Vec<Vec<u8>> {
        let replica = populated_replica();
        slot_names()
            .iter()
            .filter_map(|name| replica.slot_copy(name, 0, 1_000))
            .chain([SlotCopy {
                slot: "DC_A_VAL_0".into(),
                entries: vec![("c".into(), unique_record(2, 1))],
                complete: true,
                complete_as_of_ms: Some(1),
                source_epoch: 3,
                next: None,
                owner_incarnation: 7,
                partitions: Some(Partitions {
                    count: 2,
                    held: vec![1],
                }),
            }])
            .map(|copy| encode(&copy))
            .collect()
    }

    /// `json_bodies`: create and write bodies as the README shows them.
    pub fn json_bodies() -> Vec<Vec<u8>> {
        [
            r#"{"id": "tweet:1:likes", "numberOfShards": 2}"#,
            r#"{"id": "page:home:visitors", "type": "unique", "windowSeconds": 60}"#,
            r#"{"delta": 5, "timestamp": 1800000000}"#,
            r#"{"item": "user-42"}"#,
            r#"{"delay_ms": 60, "jitter_ms": 5}"#,
            "",
        ]
        .map(|text| text.as_bytes().to_vec())
        .to_vec()
    }

    /// `resp_commands`: what `redis-cli`, `redis-benchmark` and redis-py send: a pipeline of
    /// increments and reads, connection commands, and a frame past the target's limit.
    pub fn resp_commands() -> Vec<Vec<u8>> {
        let command = |words: &[&str]| {
            let mut bytes = format!("*{}\r\n", words.len()).into_bytes();
            for word in words {
                bytes.extend(format!("${}\r\n{word}\r\n", word.len()).into_bytes());
            }
            bytes
        };
        let pipeline = [
            command(&["INCR", "key:000000012345"]),
            command(&["INCRBY", "tweet:1:likes", "-5"]),
            command(&["GET", "tweet:1:likes"]),
            command(&["MGET", "a", "b"]),
        ]
        .concat();
        let connection = [
            command(&["HELLO", "3", "AUTH", "default", "token", "SETNAME", "me"]),
            command(&["CONFIG", "GET", "save"]),
            command(&["CLIENT", "SETINFO", "lib-name", "redis-py"]),
            command(&["PFADD", "page:home:visitors", "user-42", "user-7"]),
            command(&["EXPIRE", "k", "10"]),
            command(&["SET", "k", "v"]),
        ]
        .concat();
        let oversized = command(&["GET", &"x".repeat(5_000)]);
        // A ping, then a frame announcing more than the limit: the connection answers and closes.
        let refused = [command(&["PING"]), oversized[..40].to_vec()].concat();
        vec![pipeline, connection, refused]
    }

    /// `queries`: read, top-K, trending and write queries, and a path segment.
    pub fn queries() -> Vec<Vec<u8>> {
        [
            "window=60&at=1800000000",
            "k=3&prefix=%23r&window=60",
            "prefix=%23&max_staleness_ms=500&allow_partial=true",
            "op=INCREMENT",
            "tweet%3A1%3Alikes",
        ]
        .map(|text| text.as_bytes().to_vec())
        .to_vec()
    }
}
