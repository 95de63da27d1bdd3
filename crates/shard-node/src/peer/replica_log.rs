//! The peer's side of `replicated` durability: the groups each peer slot's owner sends
//! (`POST /slots/{slot}/replicate`) are appended to a log of that slot's own,
//! `<data_dir>/replicas/<slot>/wal-<n>.log`, and fsynced before the owner is answered.
//!
//! The files are write-ahead log segments ([`crate::engine::wal`]): a checksum per record, a
//! torn tail cut off at the next open, corruption refused. Records are slot states, so they
//! fold by version in any order: a group sent twice, or out of order after a failed send,
//! folds the same. When the open segment grows past twice what the last fold took (and past
//! `shard.checkpoint_log_bytes`), the log is folded into one record in a new segment and the
//! older segments are deleted; keys past their retention are left out of the fold.
//!
//! Each log keeps, in `<slot>/since`, the latest version from which its owner said it shows
//! only groups a peer held ([`geocount_model::wire::ReplicateBatch::since_version`]), and in
//! `<slot>/holds-after` the version after which it holds every group it took: 0, unless this
//! node's data directory replaced a lost one (`replicas/holds-since` says when), then the
//! owner's newest version when the log began
//! ([`geocount_model::wire::ReplicateBatch::made_through`]: the lost log held nothing newer).
//! A node restoring its lost slot reads each peer's fold with both (`GET /slots/{slot}/replica`):
//! every group the owner acknowledged, or showed to a copy, is in at least one of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::engine::wal::{self, LogRecord, Wal};
use crate::error::StorageError;
use crate::peer::replica_fold::{Fold, FoldSize};
use crate::storage::{Disk, create_dir_durably, write_durably};

/// The folder under a data directory that holds the peers' replicated logs.
pub const REPLICAS_DIR: &str = "replicas";

/// The file in a slot's log folder holding the owner's latest `since_version`.
const SINCE_FILE: &str = "since";

/// The file in a slot's log folder holding the version after which it holds every group.
const HOLDS_AFTER_FILE: &str = "holds-after";

/// The file in [`REPLICAS_DIR`] saying when (unix ms) this node's data directory replaced a
/// lost one (0: never).
const HOLDS_SINCE_FILE: &str = "holds-since";

/// What a slot's log says of how much it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStarts {
    /// The owner's latest `since_version` (`None`: no log, or an unreadable file).
    pub owner_since: Option<u64>,
    /// The slot version after which the log holds every group it took.
    pub holds_after: u64,
}

/// The replicated logs of this node's peers' slots.
pub struct ReplicaLogs {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    /// The slots whose owners may replicate here: the datacenter's other slots.
    peers: Vec<String>,
    /// Open logs, by slot; each opened at its first use.
    open: Mutex<HashMap<String, ReplicaLog>>,
    /// The open segment is folded once it is past this and twice the last fold.
    fold_bytes: u64,
    key_retention_ms: u64,
    holds_since_ms: u64,
}

/// One peer slot's log.
struct ReplicaLog {
    wal: Wal,
    /// The bytes of the last fold, 0 before any.
    folded_bytes: u64,
    /// How much the last fold held.
    folded: FoldSize,
    starts: LogStarts,
}

impl ReplicaLogs {
    /// The logs under `<data_dir>/replicas` of `peers`' slots; `holds_since_ms` says when this
    /// node's data directory replaced a lost one (0: never; [`holds_since`]).
    pub fn new(
        disk: Arc<dyn Disk>,
        data_dir: &Path,
        peers: Vec<String>,
        (fold_bytes, key_retention_ms): (u64, u64),
        holds_since_ms: u64,
    ) -> Self {
        Self {
            disk,
            dir: data_dir.join(REPLICAS_DIR),
            peers,
            open: Mutex::new(HashMap::new()),
            fold_bytes,
            key_retention_ms,
            holds_since_ms,
        }
    }

    /// Whether `slot` may replicate here.
    pub fn holds(&self, slot: &str) -> bool {
        self.peers.iter().any(|peer| peer == slot)
    }

    /// Appends `groups` of `slot`, sent with the owner's `since_version` and `made_through`,
    /// in order and fsyncs them: once it returns, they survive this node's crash. Blocks on
    /// the disk.
    pub fn append(
        &self,
        slot: &str,
        groups: &[LogRecord],
        (since_version, made_through): (u64, u64),
        now_ms: u64,
    ) -> Result<(), StorageError> {
        let mut open = self.open.lock().expect("replica logs lock");
        if !open.contains_key(slot) {
            let log = self.open_log(slot, made_through)?;
            open.insert(slot.to_owned(), log);
        }
        let log = open.get_mut(slot).expect("opened above");
        if (log.starts.owner_since).is_none_or(|held| held < since_version) {
            write_number(&*self.disk, &self.slot_dir(slot), SINCE_FILE, since_version)?;
            log.starts.owner_since = Some(since_version);
        }
        for group in groups {
            log.wal.append(group)?;
        }
        log.wal.sync()?;
        if log.wal.len() > self.fold_bytes.max(2 * log.folded_bytes) {
            self.fold_log(slot, log, now_ms)?;
        }
        Ok(())
    }

    /// Everything the log of `slot` holds, folded: each counter's latest record, the latest
    /// description of each counter created, and the keys within retention at `now_ms`.
    /// Blocks on the disk.
    pub fn fold(&self, slot: &str, now_ms: u64) -> Result<LogRecord, StorageError> {
        // Appends wait: a fold must not read a segment the append is cutting back.
        let _open = self.open.lock().expect("replica logs lock");
        let fold = self.read_fold(&self.slot_dir(slot), FoldSize::default())?;
        Ok(fold.into_record(self.keys_from_ms(now_ms)))
    }

    /// What the log of `slot` says of how much it holds. Blocks on the disk.
    pub fn starts(&self, slot: &str) -> LogStarts {
        let open = self.open.lock().expect("replica logs lock");
        match open.get(slot) {
            Some(log) => log.starts,
            None => self.read_starts(&self.slot_dir(slot)),
        }
    }

    /// The starts the files in `dir` hold; a log unknown here, or of unknown start, holds
    /// nothing for sure once this node lost its data.
    fn read_starts(&self, dir: &Path) -> LogStarts {
        let replaced = self.holds_since_ms != 0;
        let holds_after = read_number(&*self.disk, &dir.join(HOLDS_AFTER_FILE));
        LogStarts {
            owner_since: read_number(&*self.disk, &dir.join(SINCE_FILE)),
            holds_after: holds_after.unwrap_or(if replaced { u64::MAX } else { 0 }),
        }
    }

    fn slot_dir(&self, slot: &str) -> PathBuf {
        self.dir.join(slot)
    }

    /// Opens the log of `slot`: its torn tail cut off, a fresh segment after the others. A new
    /// log, begun by a batch sent with `made_through`, says after which version it holds
    /// every group.
    fn open_log(&self, slot: &str, made_through: u64) -> Result<ReplicaLog, StorageError> {
        let dir = self.slot_dir(slot);
        if !exists(&*self.disk, &dir)? {
            create_dir_durably(&*self.disk, &dir)
                .map_err(|e| StorageError::io(format!("creating {}", dir.display()), e))?;
            let holds_after = if self.holds_since_ms == 0 {
                0
            } else {
                made_through
            };
            write_number(&*self.disk, &dir, HOLDS_AFTER_FILE, holds_after)?;
        }
        let newest = wal::replay(&*self.disk, &dir, |_| {})?;
        Ok(ReplicaLog {
            wal: Wal::create(self.disk.clone(), &dir, newest + 1)?,
            folded_bytes: 0,
            folded: FoldSize::default(),
            starts: self.read_starts(&dir),
        })
    }

    /// Folds every segment of `slot`'s log into one record, the first of a new segment, and
    /// deletes the older ones.
    fn fold_log(&self, slot: &str, log: &mut ReplicaLog, now_ms: u64) -> Result<(), StorageError> {
        let dir = self.slot_dir(slot);
        let closed = log.wal.rotate()?;
        let fold = self.read_fold(&dir, log.folded)?;
        log.folded = fold.size();
        log.wal
            .append(&fold.into_record(self.keys_from_ms(now_ms)))?;
        log.wal.sync()?;
        log.folded_bytes = log.wal.len();
        wal::delete_through(&*self.disk, &dir, closed)
    }

    /// Every record of the log in `dir` folded, in a fold with room for `size`.
    fn read_fold(&self, dir: &Path, size: FoldSize) -> Result<Fold, StorageError> {
        let mut fold = Fold::with_room(size);
        if exists(&*self.disk, dir)? {
            let all = wal::segments(&*self.disk, dir)?;
            for (i, &segment) in all.iter().enumerate() {
                let scan =
                    wal::scan_segment(&*self.disk, dir, segment, i + 1 == all.len(), |record| {
                        fold.add(record)
                    })?;
                if let Some(corrupt) = scan.corruption() {
                    return Err(corrupt);
                }
            }
        }
        Ok(fold)
    }

    /// Keys created before this are past the retention at `now_ms`.
    fn keys_from_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.key_retention_ms)
    }
}

fn exists(disk: &dyn Disk, path: &Path) -> Result<bool, StorageError> {
    (disk.exists(path)).map_err(|e| StorageError::io(format!("reading {}", path.display()), e))
}

/// From when (unix ms) the node of `data_dir` holds every group it takes: read back, or, the
/// first time, 0 for a new data directory and `now_ms` for one that `replaced_lost` data.
/// Blocks on the disk.
pub fn holds_since(
    disk: &dyn Disk,
    data_dir: &Path,
    replaced_lost: bool,
    now_ms: u64,
) -> Result<u64, StorageError> {
    let dir = data_dir.join(REPLICAS_DIR);
    if let Some(since) = read_number(disk, &dir.join(HOLDS_SINCE_FILE)) {
        return Ok(since);
    }
    // Unknown otherwise (a torn file): from now on, as after a loss.
    let first = !replaced_lost && !exists(disk, &dir)?;
    let since = if first { 0 } else { now_ms };
    create_dir_durably(disk, &dir)
        .map_err(|e| StorageError::io(format!("creating {}", dir.display()), e))?;
    write_number(disk, &dir, HOLDS_SINCE_FILE, since)?;
    Ok(since)
}

/// The number the file at `path` holds; `None` when it is missing or unreadable.
fn read_number(disk: &dyn Disk, path: &Path) -> Option<u64> {
    let text = disk.read(path).ok()?;
    String::from_utf8(text).ok()?.trim().parse().ok()
}

fn write_number(disk: &dyn Disk, dir: &Path, name: &str, number: u64) -> Result<(), StorageError> {
    write_durably(disk, dir, &dir.join(name), format!("{number}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::OsDisk;
    use geocount_model::{CounterId, IdempotencyRecord, SlotState};

    fn group(id: &str, value: i64, version: u64, key: Option<(&str, u64)>) -> LogRecord {
        let id = CounterId::new(id).unwrap();
        let outcome = SlotState { value, version };
        LogRecord {
            slots: vec![(id.clone(), outcome.into())],
            descriptions: Vec::new(),
            idempotency: key
                .map(|(key, at)| {
                    let entry = IdempotencyRecord {
                        counter: id,
                        delta: 1,
                        item: None,
                        outcome,
                        created_at_ms: at,
                    };
                    (key.into(), entry)
                })
                .into_iter()
                .collect(),
        }
    }

    fn logs(dir: &Path, fold_bytes: u64) -> ReplicaLogs {
        let peers = vec!["DC_A_VAL_1".to_owned()];
        ReplicaLogs::new(Arc::new(OsDisk), dir, peers, (fold_bytes, 10_000), 0)
    }

    fn value_of(fold: &LogRecord, id: &str) -> i64 {
        let id = CounterId::new(id).unwrap();
        let (_, record) = fold.slots.iter().find(|(i, _)| *i == id).unwrap();
        record.state.value
    }

    /// What was appended survives a restart, folds by version whatever the order it came in,
    /// and keeps each key.
    #[test]
    fn appended_groups_survive_a_restart_and_fold_by_version() {
        let dir = tempfile::tempdir().unwrap();
        let slot = "DC_A_VAL_1";
        {
            let logs = logs(dir.path(), 1 << 20);
            assert!(logs.holds(slot) && !logs.holds("DC_A_VAL_0"));
            let first = [group("a", 1, 10, Some(("k1", 1_000)))];
            logs.append(slot, &first, (500, 10), 1_000).unwrap();
            // The later group, then the earlier one again (a send repeated after a failure).
            let later = [
                group("a", 2, 20, Some(("k2", 2_000))),
                group("b", 5, 21, None),
            ];
            logs.append(slot, &later, (500, 21), 2_000).unwrap();
            logs.append(slot, &first, (500, 21), 2_000).unwrap();
        }
        let logs = logs(dir.path(), 1 << 20);
        let fold = logs.fold(slot, 3_000).unwrap();
        assert_eq!(value_of(&fold, "a"), 2);
        assert_eq!(value_of(&fold, "b"), 5);
        let mut keys: Vec<&str> = fold.idempotency.iter().map(|(k, _)| &**k).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["k1", "k2"]);
        // Past retention, a key is left out.
        let fold = logs.fold(slot, 11_500).unwrap();
        let keys: Vec<&str> = fold.idempotency.iter().map(|(k, _)| &**k).collect();
        assert_eq!(keys, ["k2"]);
        // A slot never replicated here folds to nothing.
        assert!(logs.fold("DC_A_VAL_2", 3_000).unwrap().is_empty());
        assert_eq!(logs.starts("DC_A_VAL_2").owner_since, None);
    }

    /// A log keeps the latest `since_version` its owner sent, across restarts, and holds
    /// every group it took unless the node's data directory replaced a lost one: then only
    /// those after the owner's newest version when the log began.
    #[test]
    fn a_log_keeps_its_owners_latest_since_and_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let slot = "DC_A_VAL_1";
        let never = LogStarts {
            owner_since: None,
            holds_after: 0,
        };
        {
            let logs = logs(dir.path(), 1 << 20);
            assert_eq!(logs.starts(slot), never);
            logs.append(slot, &[group("a", 1, 10, None)], (0, 10), 1_000)
                .unwrap();
            logs.append(slot, &[group("a", 2, 20, None)], (15, 20), 2_000)
                .unwrap();
            logs.append(slot, &[group("a", 3, 30, None)], (12, 30), 2_500)
                .unwrap();
            let starts = logs.starts(slot);
            assert_eq!(starts.owner_since, Some(15), "the latest owner process");
            assert_eq!(starts.holds_after, 0, "a node that lost nothing");
        }
        assert_eq!(logs(dir.path(), 1 << 20).starts(slot).owner_since, Some(15));

        let replaced = tempfile::tempdir().unwrap();
        let since = holds_since(&OsDisk, replaced.path(), true, 5_000).unwrap();
        assert_eq!(since, 5_000);
        let peers = vec![slot.to_owned(), "DC_A_VAL_2".to_owned()];
        let logs = ReplicaLogs::new(
            Arc::new(OsDisk),
            replaced.path(),
            peers,
            (1 << 20, 10_000),
            since,
        );
        let unknown = logs.starts("DC_A_VAL_2");
        assert_eq!(unknown.holds_after, u64::MAX, "a log lost with the disk");
        logs.append(slot, &[group("a", 4, 40, None)], (15, 44), 6_000)
            .unwrap();
        logs.append(slot, &[group("a", 5, 50, None)], (15, 50), 6_500)
            .unwrap();
        assert_eq!(
            logs.starts(slot).holds_after,
            44,
            "after its first batch's newest"
        );
    }

    /// A node says it holds everything since its data directory began, unless that replaced
    /// a lost one; it reads back what it said.
    #[test]
    fn a_node_says_when_its_data_directory_replaced_a_lost_one() {
        let disk = OsDisk;
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(holds_since(&disk, fresh.path(), false, 5_000).unwrap(), 0);
        assert_eq!(
            holds_since(&disk, fresh.path(), true, 9_000).unwrap(),
            0,
            "kept"
        );
        let replaced = tempfile::tempdir().unwrap();
        assert_eq!(
            holds_since(&disk, replaced.path(), true, 5_000).unwrap(),
            5_000
        );
        let older = tempfile::tempdir().unwrap();
        std::fs::create_dir(older.path().join(REPLICAS_DIR)).unwrap();
        assert_eq!(
            holds_since(&disk, older.path(), false, 7_000).unwrap(),
            7_000,
            "replicas held before the file was"
        );
    }

    /// A log past its fold threshold is folded into one segment that reads the same.
    #[test]
    fn a_long_log_is_folded_into_one_segment() {
        let dir = tempfile::tempdir().unwrap();
        let slot = "DC_A_VAL_1";
        let logs = logs(dir.path(), 256);
        for n in 1..=50u64 {
            let key = format!("k{n}");
            let groups = [group(&format!("c{}", n % 5), n as i64, n, Some((&key, n)))];
            logs.append(slot, &groups, (50, n), 100).unwrap();
        }
        let slot_dir = dir.path().join(REPLICAS_DIR).join(slot);
        let segments = wal::segments(&OsDisk, &slot_dir).unwrap();
        assert!(segments.len() <= 2, "{segments:?}");
        let fold = logs.fold(slot, 100).unwrap();
        assert_eq!(fold.slots.len(), 5);
        assert_eq!(value_of(&fold, "c0"), 50);
        assert_eq!(value_of(&fold, "c4"), 49);
        assert_eq!(fold.idempotency.len(), 50);
    }
}
