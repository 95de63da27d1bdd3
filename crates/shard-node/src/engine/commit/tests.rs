use geocount_model::{CounterId, SystemClock};

use super::*;
use crate::engine::idempotency::IdempotencyCache;
use crate::engine::slot_table::SlotTable;
use crate::engine::store::{STORE_FILE, Store};
use crate::engine::write::{Change, WriteRequest};
use crate::storage::{OsDisk, Storage, Workers};

/// A commit loop on a fresh data directory `dir` (an empty store and log on the OS disk, its
/// checkpointer a task), and the table it installs into.
fn commit_loop(dir: &std::path::Path) -> (CommitLoop, SharedSlotTable) {
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
        checkpointer,
        settings,
        clock: clock.clone(),
        hlc: Arc::new(Hlc::new("DC_T_VAL_0", clock)),
        placement: Placement::new("T", 1, 16),
        own_slot: 0,
        load: Arc::new(AtomicU64::new(0)),
        metrics,
        health: Arc::new(NodeHealth::default()),
    };
    (CommitLoop::new(log, context), table)
}

/// One group: a delta to a counter no one described, then an item for it. The item is
/// refused as it would be in a later group, and the delta stays in the counter's value.
#[tokio::test]
async fn an_item_after_a_delta_in_the_same_group_is_the_wrong_type() {
    let dir = tempfile::tempdir().unwrap();
    let (commit, table) = commit_loop(dir.path());
    let (commands, receiver) = mpsc::channel(8);
    let now_secs = SystemClock.now_unix_ms() / 1000;
    let write = |change| WriteRequest {
        id: CounterId::new("fresh").unwrap(),
        change,
        idempotency_key: None,
        timestamp_secs: now_secs,
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
