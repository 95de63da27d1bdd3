use std::time::Duration;

use geocount_model::{CounterId, CounterType, HlcTimestamp, SlotState, SystemClock};

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use geocount_model::{Clock, CounterDescription, Hlc, Placement, ShardDefaults, SlotRecord};
use geocount_sync::{DescriptionTable, SlotCopies};
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::idempotency::IdempotencyCache;
use crate::engine::slot_table::SharedSlotTable;
use crate::engine::slot_table::SlotTable;
use crate::engine::store::{STORE_FILE, Store};
use crate::engine::write::{Change, LifecycleChange, WriteRequest};
use crate::error::ShardError;
use crate::health::NodeHealth;
use crate::metrics::ShardMetrics;
use crate::storage::{OsDisk, Storage, Workers};

/// A commit loop on a fresh data directory `dir` (an empty store and log on the OS disk, its
/// checkpointer a task), and the table it installs into.
fn commit_loop(dir: &std::path::Path, retention_ms: u64) -> (CommitLoop, SharedSlotTable) {
    let storage = Storage {
        disk: Arc::new(OsDisk),
        workers: Workers::Tasks,
    };
    let settings = ShardDefaults::default();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = Store::open(&*storage.disk, &dir.join(STORE_FILE)).expect("a fresh store");
    let log = LogState {
        wal: Wal::create(storage.disk.clone(), dir, 1).expect("a fresh log"),
        idempotency: Arc::new(RwLock::new(IdempotencyCache::new(
            settings.idempotency_retention_secs * 1000,
        ))),
        pending: Checkpoint::default(),
        last_version: 0,
    };
    let table: SharedSlotTable = Arc::new(RwLock::new(SlotTable::default()));
    let metrics = Arc::new(ShardMetrics::default());
    let checkpointer = Checkpointer::spawn(
        &storage,
        store,
        table.clone(),
        dir.to_owned(),
        metrics.clone(),
    );
    let context = CommitContext {
        table: table.clone(),
        descriptions: Arc::new(RwLock::new(DescriptionTable::default())),
        peer_copies: Arc::new(RwLock::new(SlotCopies::new(vec![
            "DC_T_VAL_0".into(),
            "DC_T_VAL_1".into(),
        ]))),
        checkpointer,
        settings,
        clock: clock.clone(),
        hlc: Arc::new(Hlc::new("DC_T_VAL_0", clock)),
        placement: Placement::new("T", 1, 16),
        own_slot: 0,
        load: Arc::new(AtomicU64::new(0)),
        metrics,
        health: Arc::new(NodeHealth::default()),
        tombstone_retention_ms: retention_ms,
        rights: crate::engine::commit::RightsPlace {
            index: 0,
            datacenters: 1,
        },
    };
    (CommitLoop::new(log, context), table)
}

/// One group: a delta to a counter no one described, then an item for it. The item is
/// refused as it would be in a later group, and the delta stays in the counter's value.
#[tokio::test]
async fn an_item_after_a_delta_in_the_same_group_is_the_wrong_type() {
    let dir = tempfile::tempdir().unwrap();
    let (commit, table) = commit_loop(dir.path(), WEEK_MS);
    let (commands, receiver) = mpsc::channel(8);
    let now_secs = SystemClock.now_unix_ms() / 1000;
    let write = |change| WriteRequest {
        id: CounterId::new("fresh").unwrap(),
        change,
        idempotency_key: None,
        timestamp_secs: now_secs,
        ttl_secs: None,
    };
    let (delta_reply, delta_answer) = oneshot::channel();
    let (item_reply, item_answer) = oneshot::channel();
    // Both wait in the queue before the loop starts, so its first group takes both.
    for (change, reply) in [
        (Change::Delta(5), delta_reply),
        (Change::item("user-1"), item_reply),
    ] {
        let writes = vec![write(change)];
        commands
            .send(Command::Write { writes, reply })
            .await
            .unwrap();
    }
    drop(commands);
    commit.run(receiver).await;

    let delta = delta_answer.await.unwrap();
    assert_eq!(delta[0].as_ref().unwrap().value, 5);
    let item = item_answer.await.unwrap();
    assert!(matches!(item[0], Err(ShardError::WrongType(_))), "{item:?}");
    let table = table.read().unwrap();
    let record = table.get_record("fresh").unwrap();
    assert_eq!(record.state.value, 5);
    assert!(record.uniques().is_none(), "still a sum");
}

const WEEK_MS: u64 = 604_800_000;

/// A running commit loop, asked one command at a time (each its own group).
pub(super) struct Running {
    pub(super) commands: mpsc::Sender<Command>,
    table: SharedSlotTable,
    descriptions: Arc<RwLock<DescriptionTable>>,
    peer_copies: Arc<RwLock<SlotCopies>>,
    _dir: tempfile::TempDir,
}

impl Running {
    pub(super) fn start() -> Self {
        Self::keeping_tombstones(WEEK_MS)
    }

    fn keeping_tombstones(retention_ms: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (commit, table) = commit_loop(dir.path(), retention_ms);
        let descriptions = commit.shared.descriptions.clone();
        let peer_copies = commit.shared.peer_copies.clone();
        let (commands, receiver) = mpsc::channel(8);
        tokio::spawn(commit.run(receiver));
        Self {
            commands,
            table,
            descriptions,
            peer_copies,
            _dir: dir,
        }
    }

    pub(super) async fn write(&self, id: &str, delta: i64, ttl_secs: Option<u32>) -> SlotState {
        let (reply, answer) = oneshot::channel();
        let writes = vec![WriteRequest {
            id: CounterId::new(id).unwrap(),
            change: Change::Delta(delta),
            idempotency_key: None,
            timestamp_secs: SystemClock.now_unix_ms() / 1000,
            ttl_secs,
        }];
        self.commands
            .send(Command::Write { writes, reply })
            .await
            .unwrap();
        answer.await.unwrap().pop().unwrap().unwrap()
    }

    pub(super) async fn change(
        &self,
        id: &str,
        change: LifecycleChange,
    ) -> Result<CounterDescription, ShardError> {
        self.change_keyed(id, change, None).await
    }

    async fn change_keyed(
        &self,
        id: &str,
        change: LifecycleChange,
        key: Option<(&str, (i64, u64))>,
    ) -> Result<CounterDescription, ShardError> {
        let (reply, answer) = oneshot::channel();
        let id = CounterId::new(id).unwrap();
        let key = key.map(|(key, asked)| (key.into(), asked));
        let command = Command::Lifecycle {
            id,
            change,
            elsewhere: None,
            key,
            reply,
        };
        self.commands.send(command).await.unwrap();
        answer.await.unwrap()
    }

    async fn write_keyed(&self, id: &str, delta: i64, key: &str) -> SlotState {
        let (reply, answer) = oneshot::channel();
        let writes = vec![WriteRequest {
            id: CounterId::new(id).unwrap(),
            change: Change::Delta(delta),
            idempotency_key: Some(key.into()),
            timestamp_secs: SystemClock.now_unix_ms() / 1000,
            ttl_secs: None,
        }];
        self.commands
            .send(Command::Write { writes, reply })
            .await
            .unwrap();
        answer.await.unwrap().pop().unwrap().unwrap()
    }

    async fn learn(&self, description: VersionedDescription) {
        self.commands
            .send(Command::Describe(vec![description]))
            .await
            .unwrap();
        // A write after it is staged in a later group.
        self.write("barrier", 1, None).await;
    }

    pub(super) fn record(&self, id: &str) -> SlotRecord {
        self.table.read().unwrap().get_record(id).cloned().unwrap()
    }

    fn description(&self, id: &str) -> VersionedDescription {
        self.descriptions.read().unwrap().get(id).cloned().unwrap()
    }
}

#[tokio::test]
async fn a_reset_wipes_what_the_slot_held_and_later_writes_count_from_zero() {
    let node = Running::start();
    assert_eq!(node.write("c", 5, None).await.value, 5);
    let reset = node.change("c", LifecycleChange::Reset).await.unwrap();
    assert!(reset.generation > Default::default());
    let record = node.record("c");
    assert_eq!(record.state.value, 0);
    assert_eq!(record.generation(), reset.generation);
    assert!(record.window().buckets().is_empty());
    assert_eq!(node.write("c", 3, None).await.value, 3);
    assert_eq!(node.record("c").generation(), reset.generation);
    // Unknown here: nothing to reset.
    let unknown = node.change("never", LifecycleChange::Reset).await;
    assert!(
        matches!(unknown, Err(ShardError::NotFound(_))),
        "{unknown:?}"
    );
}

#[tokio::test]
async fn a_write_after_a_delete_makes_the_counter_again_from_zero() {
    let node = Running::start();
    node.write("c", 5, None).await;
    let deleted = node.change("c", LifecycleChange::Delete).await.unwrap();
    assert!(deleted.deleted);
    assert!(!node.description("c").is_live(u64::MAX));
    let again = node.change("c", LifecycleChange::Reset).await;
    assert!(
        matches!(again, Err(ShardError::NotFound(_))),
        "gone: {again:?}"
    );
    assert_eq!(node.write("c", 2, None).await.value, 2);
    let made = node.description("c");
    assert!(made.is_live(SystemClock.now_unix_ms()));
    assert_eq!(made.description.generation, deleted.generation);
    assert_eq!(node.record("c").generation(), deleted.generation);
}

#[tokio::test]
async fn a_newer_generation_learned_from_another_node_renews_the_slot() {
    let node = Running::start();
    node.write("c", 5, None).await;
    let mut reset = geocount_model::fixtures::described("c", 1, 1, 9);
    reset.description.generation = HlcTimestamp {
        physical_ms: SystemClock.now_unix_ms(),
        logical: 0,
        node: 9,
    };
    node.learn(reset.clone()).await;
    let record = node.record("c");
    assert_eq!(record.state.value, 0);
    assert_eq!(record.generation(), reset.description.generation);
    // The same description again changes nothing.
    let version = record.state.version;
    node.learn(reset).await;
    assert_eq!(node.record("c").state.version, version);
}

#[tokio::test]
async fn a_description_learned_after_its_expiry_is_its_tombstone() {
    let node = Running::start();
    node.write("c", 5, None).await;
    let now = SystemClock.now_unix_ms();
    let at = |ago: u64, logical| HlcTimestamp {
        physical_ms: now - ago,
        logical,
        node: 9,
    };
    let mut expiring = geocount_model::fixtures::described("c", 1, now - 3_000, 9);
    expiring.description.expires_at_ms = Some(now - 1_000);
    // Deleted elsewhere before its expiry passed there, then written again: all learned here
    // in one page, after the expiry passed on this node's clock.
    let deleted = expiring.delete(at(2_000, 0));
    let mut again = deleted.clone();
    again.description.deleted = false;
    again.version = at(2_000, 1);
    let page = vec![expiring.clone(), deleted, again];
    node.commands.send(Command::Describe(page)).await.unwrap();
    node.write("barrier", 1, None).await;
    let tombstone = expiring.expired_at(now).unwrap();
    assert_eq!(node.description("c"), tombstone);
    // The slot counts in the generation its description carries, which travels from here.
    assert_eq!(node.write("c", 2, None).await.value, 2);
    let generation = tombstone.description.generation;
    assert_eq!(node.description("c").description.generation, generation);
    assert_eq!(node.record("c").generation(), generation);
}

#[tokio::test]
async fn a_write_with_a_time_to_live_sets_the_expiry_only_of_a_counter_it_makes() {
    let node = Running::start();
    let before = SystemClock.now_unix_ms();
    node.write("c", 1, Some(60)).await;
    let made = node.description("c");
    let expires = made.description.expires_at_ms.unwrap();
    assert!((before + 60_000..=SystemClock.now_unix_ms() + 60_000).contains(&expires));
    node.write("c", 1, Some(5)).await;
    assert_eq!(
        node.description("c").description.expires_at_ms,
        Some(expires)
    );
    // Made by a write: any description made on purpose wins over it, and gives it no expiry.
    let created = geocount_model::fixtures::described("c", 1, 1, 9);
    assert!(made.is_older_than(&created), "{made:?}");
    node.learn(created.clone()).await;
    assert_eq!(node.description("c"), created);
    // A live counter, described or written alone, takes no expiry from a write.
    node.write("c", 1, Some(5)).await;
    node.write("w", 1, None).await;
    node.write("w", 1, Some(5)).await;
    assert_eq!(node.description("c").description.expires_at_ms, None);
    assert!(node.descriptions.read().unwrap().get("w").is_none());
    // Set on purpose, cleared on purpose: a write does not set it again.
    node.change("c", LifecycleChange::Expire(Some(expires)))
        .await
        .unwrap();
    let cleared = node
        .change("c", LifecycleChange::Expire(None))
        .await
        .unwrap();
    assert_eq!(cleared.expires_at_ms, None);
    node.write("c", 1, Some(5)).await;
    assert_eq!(node.description("c").description.expires_at_ms, None);
    // An expiry in the past: gone, and the next write makes it again, with its expiry, from
    // zero.
    let now = SystemClock.now_unix_ms();
    node.change("c", LifecycleChange::Expire(Some(now - 1)))
        .await
        .unwrap();
    assert_eq!(node.write("c", 4, Some(5)).await.value, 4);
    let made = node.description("c");
    assert!(made.is_live(SystemClock.now_unix_ms()));
    assert_eq!(made.description.generation.physical_ms, now - 1);
    assert!(made.description.expires_at_ms > Some(now));
}

#[tokio::test]
async fn a_bounded_counter_made_again_from_its_tombstone_keeps_its_bounds_either_way() {
    let now = SystemClock.now_unix_ms();
    let mut quota = geocount_model::fixtures::described("q", 1, now - 5_000, 9);
    quota.description.max = Some(3);
    quota.description.expires_at_ms = Some(now - 1_000);
    // The node that forwards a write with an expiry, and the node of the slot it goes to.
    let (forwarding, slot) = (Running::start(), Running::start());
    for node in [&forwarding, &slot] {
        node.learn(quota.clone()).await;
    }
    let expires_at_ms = now + 30_000;
    let change = LifecycleChange::ExpireIfMade {
        expires_at_ms,
        counter_type: CounterType::Sum,
    };
    let with_expiry = forwarding.change("q", change).await.unwrap();
    assert_eq!(
        (with_expiry.max, with_expiry.expires_at_ms),
        (Some(3), Some(expires_at_ms))
    );
    // The forwarded write carries no expiry: the slot makes the counter again from what it
    // knows, with the same bounds, and the two meet in either order.
    slot.write("q", 1, None).await;
    let plain = slot.description("q");
    assert_eq!(plain.description.max, Some(3));
    let with_expiry = forwarding.description("q");
    assert!(plain.is_older_than(&with_expiry));
    slot.learn(with_expiry.clone()).await;
    forwarding.learn(plain).await;
    for node in [&forwarding, &slot] {
        assert_eq!(node.description("q"), with_expiry);
    }
    // A live counter is left as it is.
    let again = forwarding.change("q", change).await.unwrap();
    assert_eq!(again, with_expiry.description);
}

impl Running {
    async fn write_at(&self, id: &str, delta: i64, timestamp_secs: u64) -> SlotState {
        let (reply, answer) = oneshot::channel();
        let writes = vec![WriteRequest {
            id: CounterId::new(id).unwrap(),
            change: Change::Delta(delta),
            idempotency_key: None,
            timestamp_secs,
            ttl_secs: None,
        }];
        let command = Command::Write { writes, reply };
        self.commands.send(command).await.unwrap();
        answer.await.unwrap().pop().unwrap().unwrap()
    }

    async fn create(&self, description: CounterDescription) {
        let (reply, answer) = oneshot::channel();
        let command = Command::Create { description, reply };
        self.commands.send(command).await.unwrap();
        answer.await.unwrap().unwrap();
    }

    /// The table a restart would rebuild from the log alone (a copy of it, replayed).
    fn replayed(&self) -> SlotTable {
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(self._dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "log") {
                std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
            }
        }
        let mut table = SlotTable::default();
        crate::engine::wal::replay(&OsDisk, copy.path(), |record| {
            for (id, slot) in record.slots {
                table.apply_logged(id, slot);
            }
        })
        .unwrap();
        table
    }
}

/// Hits spread over hours land in their minute's and hour's buckets (the window keeps none
/// of the old ones), old steps expire, the log replays to the same rollups, and a reset
/// wipes them.
#[tokio::test]
async fn deltas_land_in_every_history_level_and_replay_from_the_log() {
    let node = Running::start();
    let mut description = geocount_model::fixtures::described("h", 1, 1, 1).description;
    description.history = vec![
        geocount_model::HistoryLevel {
            step_seconds: 60,
            keep_seconds: 3_600,
        },
        geocount_model::HistoryLevel {
            step_seconds: 3_600,
            keep_seconds: 6 * 3_600,
        },
    ];
    node.create(description).await;
    let now = SystemClock.now_unix_ms() / 1000;
    let hour = now - now % 3_600;
    // Three hours back, then two, then this hour; then one too old for the hours kept.
    for (at, delta) in [
        (hour - 3 * 3_600 + 5, 2),
        (hour - 2 * 3_600 + 70, 3),
        (hour - 2 * 3_600 + 75, 4),
        (hour, 1),
        (hour - 7 * 3_600, 100),
    ] {
        node.write_at("h", delta, at).await;
    }
    let record = node.record("h");
    assert_eq!(record.state.value, 110, "the total counts every hit");
    let hours = record.rollup(3_600).unwrap();
    assert_eq!(
        *hours.buckets.buckets(),
        [(hour - 3 * 3_600, 2), (hour - 2 * 3_600, 7), (hour, 1)]
    );
    let minutes = record.rollup(60).unwrap();
    assert_eq!(
        *minutes.buckets.buckets(),
        [(hour, 1)],
        "minutes older than an hour before the newest expired"
    );
    assert!(record.window().buckets().len() <= 1);
    // A replayed window keeps expired buckets until its next hit (reads skip them); the
    // rollups know their keep and expire on replay.
    let replayed = node.replayed();
    let replayed = replayed.get_record("h").unwrap();
    assert_eq!(
        (replayed.state, replayed.history()),
        (record.state, record.history())
    );

    node.change("h", LifecycleChange::Reset).await.unwrap();
    let record = node.record("h");
    assert!(
        record
            .history()
            .iter()
            .all(|r| r.buckets.buckets().is_empty())
    );
    node.write_at("h", 5, hour + 1).await;
    let record = node.record("h");
    assert_eq!(record.rollup(3_600).unwrap().at(hour), 5);
    let replayed = node.replayed();
    let replayed = replayed.get_record("h").unwrap();
    assert_eq!(
        (replayed.state, replayed.history()),
        (record.state, record.history())
    );
}

#[tokio::test]
async fn a_deleted_or_expired_counter_leaves_the_slot_table() {
    let node = Running::start();
    for id in ["a", "b", "c"] {
        node.write(id, 5, None).await;
    }
    node.change("a", LifecycleChange::Delete).await.unwrap();
    // The next group drops the row (no checkpoint runs in between here).
    node.write("barrier", 1, None).await;
    let table = || {
        node.table
            .read()
            .unwrap()
            .iter()
            .map(|(id, r)| (id.to_owned(), r.state.value))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    assert!(!table().contains_key("a"), "{:?}", table());
    assert_eq!(table().get("c"), Some(&5), "the moved row kept its record");
    // Written again: a new row from zero.
    assert_eq!(node.write("a", 2, None).await.value, 2);
    assert_eq!(table().get("a"), Some(&2));

    let soon = SystemClock.now_unix_ms() + 100;
    node.change("b", LifecycleChange::Expire(Some(soon)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    node.write("barrier", 1, None).await;
    node.write("barrier", 1, None).await;
    assert!(!table().contains_key("b"), "{:?}", table());
    let tombstone = node.description("b");
    assert!(
        tombstone.description.deleted,
        "the expiry became a tombstone"
    );
    assert_eq!(tombstone.description.generation.physical_ms, soon);
}

#[tokio::test]
async fn a_tombstone_goes_after_its_retention_once_its_row_is_gone() {
    let node = Running::keeping_tombstones(0);
    node.write("c", 5, None).await;
    node.change("c", LifecycleChange::Delete).await.unwrap();
    node.write("barrier", 1, None).await;
    assert!(node.descriptions.read().unwrap().get("c").is_none());
    assert_eq!(
        node.write("c", 1, None).await.value,
        1,
        "made again from zero"
    );
}

#[tokio::test]
async fn a_keyed_reset_retried_is_answered_without_wiping_again() {
    let node = Running::start();
    node.write("c", 5, None).await;
    let reset = Some(("\u{1f}r-1", (1, 0)));
    let first = node
        .change_keyed("c", LifecycleChange::Reset, reset)
        .await
        .unwrap();
    node.write("c", 3, None).await;
    let again = node
        .change_keyed("c", LifecycleChange::Reset, reset)
        .await
        .unwrap();
    assert_eq!(again.generation, first.generation, "applied once");
    assert_eq!(node.record("c").state.value, 3, "the write after it stays");
    // The same key for another change is refused, and changes nothing.
    let delete = Some(("\u{1f}r-1", (2, 0)));
    let refused = node
        .change_keyed("c", LifecycleChange::Delete, delete)
        .await;
    assert!(
        matches!(refused, Err(ShardError::IdempotencyKeyReused { .. })),
        "{refused:?}"
    );
    assert!(node.description("c").is_live(SystemClock.now_unix_ms()));
}

/// A keyed write retried after its counter was deleted is answered as the first was; it does
/// not make the counter again, as a write applied would.
#[tokio::test]
async fn a_keyed_retry_does_not_make_a_deleted_counter_again() {
    let node = Running::start();
    assert_eq!(node.write_keyed("c", 5, "\u{1f}w-1").await.value, 5);
    node.change("c", LifecycleChange::Delete).await.unwrap();
    assert_eq!(
        node.write_keyed("c", 5, "\u{1f}w-1").await.value,
        5,
        "the first answer"
    );
    let held = node.description("c");
    assert!(held.description.deleted, "still deleted: {held:?}");
}

#[tokio::test]
async fn a_tombstone_stays_while_a_copy_of_a_peers_slot_holds_the_counter() {
    let node = Running::keeping_tombstones(0);
    let id = CounterId::new("p").unwrap();
    let record: SlotRecord = SlotState {
        value: 3,
        version: 1,
    }
    .into();
    node.peer_copies.write().unwrap().merge(1, &id, &record);
    node.write("p", 5, None).await;
    node.change("p", LifecycleChange::Delete).await.unwrap();
    node.write("barrier", 1, None).await;
    assert!(
        node.description("p").description.deleted,
        "kept while the peer's copy is held"
    );
    node.peer_copies.write().unwrap().remove("p");
    node.write("barrier", 1, None).await;
    assert!(node.descriptions.read().unwrap().get("p").is_none());
}
