use std::sync::atomic::AtomicUsize;
use std::sync::{Condvar, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::storage::{AppendFile, OsDisk};
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

fn new_logs(dir: &Path, fold_bytes: u64) -> HeldLogs {
    let peers = vec!["DC_A_VAL_1".to_owned()];
    HeldLogs::new(Arc::new(OsDisk), dir, peers, (fold_bytes, 10_000), 0)
}

/// Appends, and runs at once the fold it makes due.
fn append(logs: &HeldLogs, slot: &str, groups: &[LogRecord], starts: (u64, u64), now: u64) {
    if let Some(due) = logs.append(slot, groups, starts, now).unwrap() {
        logs.fold_closed(due).unwrap();
    }
}

/// The `n`th of a run of keyed groups over five counters.
fn nth(n: u64) -> [LogRecord; 1] {
    let key = format!("k{n}");
    [group(&format!("c{}", n % 5), n as i64, n, Some((&key, n)))]
}

/// Whether `fold` holds every group `nth` made up to `n`.
fn holds_through(fold: &LogRecord, n: u64) -> bool {
    let last = |c: u64| (1..=n).rev().find(|i| i % 5 == c);
    fold.idempotency.len() as u64 == n
        && (0..5).all(|c| {
            let id = CounterId::new(format!("c{c}")).unwrap();
            let value = (fold.slots.iter())
                .find(|(i, _)| *i == id)
                .map(|(_, r)| r.state.value);
            value == last(c).map(|i| i as i64)
        })
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
        let logs = new_logs(dir.path(), 1 << 20);
        assert!(logs.holds(slot) && !logs.holds("DC_A_VAL_0"));
        let first = [group("a", 1, 10, Some(("k1", 1_000)))];
        append(&logs, slot, &first, (500, 10), 1_000);
        // The later group, then the earlier one again (a send repeated after a failure).
        let later = [
            group("a", 2, 20, Some(("k2", 2_000))),
            group("b", 5, 21, None),
        ];
        append(&logs, slot, &later, (500, 21), 2_000);
        append(&logs, slot, &first, (500, 21), 2_000);
    }
    let logs = new_logs(dir.path(), 1 << 20);
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
        let logs = new_logs(dir.path(), 1 << 20);
        assert_eq!(logs.starts(slot), never);
        append(&logs, slot, &[group("a", 1, 10, None)], (0, 10), 1_000);
        append(&logs, slot, &[group("a", 2, 20, None)], (15, 20), 2_000);
        append(&logs, slot, &[group("a", 3, 30, None)], (12, 30), 2_500);
        let starts = logs.starts(slot);
        assert_eq!(starts.owner_since, Some(15), "the latest owner process");
        assert_eq!(starts.holds_after, 0, "a node that lost nothing");
    }
    assert_eq!(
        new_logs(dir.path(), 1 << 20).starts(slot).owner_since,
        Some(15)
    );

    let replaced = tempfile::tempdir().unwrap();
    let since = holds_since(&OsDisk, replaced.path(), true, 5_000).unwrap();
    assert_eq!(since, 5_000);
    let peers = vec![slot.to_owned(), "DC_A_VAL_2".to_owned()];
    let logs = HeldLogs::new(
        Arc::new(OsDisk),
        replaced.path(),
        peers,
        (1 << 20, 10_000),
        since,
    );
    let unknown = logs.starts("DC_A_VAL_2");
    assert_eq!(unknown.holds_after, u64::MAX, "a log lost with the disk");
    append(&logs, slot, &[group("a", 4, 40, None)], (15, 44), 6_000);
    append(&logs, slot, &[group("a", 5, 50, None)], (15, 50), 6_500);
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
    std::fs::create_dir(older.path().join(HELD_DIR)).unwrap();
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
    let logs = new_logs(dir.path(), 256);
    for n in 1..=50u64 {
        let key = format!("k{n}");
        let groups = [group(&format!("c{}", n % 5), n as i64, n, Some((&key, n)))];
        append(&logs, slot, &groups, (50, n), 100);
    }
    let slot_dir = dir.path().join(HELD_DIR).join(slot);
    let segments = wal::segments(&OsDisk, &slot_dir).unwrap();
    assert!(segments.len() <= 2, "{segments:?}");
    let fold = logs.fold(slot, 100).unwrap();
    assert_eq!(fold.slots.len(), 5);
    assert_eq!(value_of(&fold, "c0"), 50);
    assert_eq!(value_of(&fold, "c4"), 49);
    assert_eq!(fold.idempotency.len(), 50);
}

/// The OS disk, whose reads wait while the gate is closed.
#[derive(Debug, Default)]
struct Gate {
    closed: Mutex<bool>,
    opened: Condvar,
    waiting: AtomicUsize,
}

impl Gate {
    fn set(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }
}

#[derive(Debug)]
struct GatedDisk(Arc<Gate>);

impl Disk for GatedDisk {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        OsDisk.create_dir_all(dir)
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        OsDisk.exists(path)
    }
    fn file_names(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        OsDisk.file_names(dir)
    }
    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        let mut closed = self.0.closed.lock().unwrap();
        if *closed {
            self.0.waiting.fetch_add(1, Ordering::SeqCst);
        }
        while *closed {
            closed = self.0.opened.wait(closed).unwrap();
        }
        OsDisk.read(path)
    }
    fn open_append(&self, path: &Path) -> std::io::Result<Box<dyn AppendFile>> {
        OsDisk.open_append(path)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        OsDisk.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        OsDisk.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        OsDisk.sync_dir(dir)
    }
    fn open_database(&self, path: &Path) -> Result<redb::Database, redb::DatabaseError> {
        OsDisk.open_database(path)
    }
}

/// Appends go on, in the slot being folded and in the others, while a fold waits on the disk:
/// the owner waiting for them must not wait for a fold. One fold per slot runs at a time.
#[test]
fn appends_go_on_while_a_fold_waits_on_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let slots = ["DC_A_VAL_1", "DC_A_VAL_2"];
    let peers = slots.map(str::to_owned).to_vec();
    let disk = Arc::new(GatedDisk(gate.clone()));
    let logs = Arc::new(HeldLogs::new(disk, dir.path(), peers, (256, 10_000), 0));
    for slot in slots {
        append(&logs, slot, &[], (1, 0), 100);
    }
    gate.set(true);
    let (done, appended) = mpsc::channel();
    let appender = {
        let logs = logs.clone();
        thread::spawn(move || {
            let mut folds = Vec::new();
            for n in 1..=100 {
                for slot in slots {
                    if let Some(due) = logs.append(slot, &nth(n), (1, n), 100).unwrap() {
                        let logs = logs.clone();
                        folds.push(thread::spawn(move || logs.fold_closed(due).unwrap()));
                    }
                }
            }
            done.send(()).unwrap();
            folds
        })
    };
    let waited = appended.recv_timeout(Duration::from_secs(10));
    assert!(waited.is_ok(), "the appends waited for a fold");
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.waiting.load(Ordering::SeqCst) < slots.len() {
        assert!(Instant::now() < deadline, "no fold reached the disk");
        thread::sleep(Duration::from_millis(5));
    }
    gate.set(false);
    let folds = appender.join().unwrap();
    assert_eq!(folds.len(), slots.len(), "one fold per slot at a time");
    for fold in folds {
        fold.join().unwrap();
    }
    for slot in slots {
        assert!(holds_through(&logs.fold(slot, 100).unwrap(), 100));
    }
}

/// Folds running beside appends and reads lose nothing: every read holds every group
/// appended before it began, and so does the log read back after a restart.
#[test]
fn folds_racing_appends_and_reads_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let slot = "DC_A_VAL_1";
    let logs = Arc::new(new_logs(dir.path(), 512));
    let appended = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (logs, appended, stop) = (logs.clone(), appended.clone(), stop.clone());
        thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) {
                let before = appended.load(Ordering::SeqCst);
                let fold = logs.fold(slot, 100).unwrap();
                let n = fold.idempotency.len() as u64;
                assert!(n >= before, "a read lost groups: {n} of {before}");
                reads += 1;
                // A lock is not fair: a reader taking it back at once would starve the appends.
                thread::sleep(std::time::Duration::from_millis(1));
            }
            reads
        })
    };
    let mut folds = Vec::new();
    for n in 1..=400 {
        if let Some(due) = logs.append(slot, &nth(n), (1, n), 100).unwrap() {
            let logs = logs.clone();
            folds.push(thread::spawn(move || logs.fold_closed(due).unwrap()));
        }
        appended.store(n, Ordering::SeqCst);
    }
    let folded = folds.len();
    for fold in folds {
        fold.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    assert!(reader.join().unwrap() > 0);
    assert!(folded > 1, "{folded} folds");
    assert!(holds_through(&logs.fold(slot, 100).unwrap(), 400));
    drop(logs);
    let logs = new_logs(dir.path(), 512);
    assert!(holds_through(&logs.fold(slot, 100).unwrap(), 400));
    let segments = wal::segments(&OsDisk, &dir.path().join(HELD_DIR).join(slot)).unwrap();
    assert!(segments.len() <= 3, "{segments:?}");
}

/// A crash at any step of a fold leaves a log that reads back whole: before the rename, a
/// temporary file beside the segments (removed when the log opens); after it, the older
/// segments beside the fold.
#[test]
fn a_fold_cut_short_by_a_crash_reads_back_whole() {
    let slot = "DC_A_VAL_1";
    // Before the rename.
    let dir = tempfile::tempdir().unwrap();
    let slot_dir = dir.path().join(HELD_DIR).join(slot);
    {
        let logs = new_logs(dir.path(), 256);
        for n in 1..=20 {
            let due = logs.append(slot, &nth(n), (1, n), 100).unwrap();
            drop(due); // never ran: the crash
        }
    }
    let temp = slot_dir.join(FOLD_TEMP_FILE);
    std::fs::write(&temp, b"\x10\0\0\0half a fold").unwrap();
    let logs = new_logs(dir.path(), 256);
    assert!(holds_through(&logs.fold(slot, 100).unwrap(), 20));
    append(&logs, slot, &nth(21), (1, 21), 100);
    assert!(
        !temp.exists(),
        "the temporary file of a fold cut short is removed"
    );
    assert!(holds_through(&logs.fold(slot, 100).unwrap(), 21));

    // After the rename, before the older segments are deleted.
    let dir = tempfile::tempdir().unwrap();
    let slot_dir = dir.path().join(HELD_DIR).join(slot);
    let aside = tempfile::tempdir().unwrap();
    {
        let logs = new_logs(dir.path(), 256);
        let (mut folded, mut due) = (false, None);
        for n in 1..=30 {
            match logs.append(slot, &nth(n), (1, n), 100).unwrap() {
                // The first fold runs: the second has a fold older than its segments to delete.
                Some(made) if !folded => {
                    logs.fold_closed(made).unwrap();
                    folded = true;
                }
                Some(made) => due = Some(made),
                None => {}
            }
        }
        let due = due.expect("a fold due");
        let older: Vec<u64> = (wal::segments(&OsDisk, &slot_dir).unwrap().into_iter())
            .filter(|&segment| segment < due.through)
            .collect();
        assert!(!older.is_empty());
        for &segment in &older {
            let path = wal::segment_path(&slot_dir, segment);
            std::fs::copy(&path, aside.path().join(segment.to_string())).unwrap();
        }
        logs.fold_closed(due).unwrap();
        for segment in older {
            let path = wal::segment_path(&slot_dir, segment);
            assert!(!path.exists());
            std::fs::copy(aside.path().join(segment.to_string()), path).unwrap();
        }
    }
    let logs = new_logs(dir.path(), 256);
    assert!(holds_through(&logs.fold(slot, 100).unwrap(), 30));
    for n in 31..=60 {
        append(&logs, slot, &nth(n), (1, n), 100);
    }
    assert!(holds_through(&logs.fold(slot, 100).unwrap(), 60));
    assert!(wal::segments(&OsDisk, &slot_dir).unwrap().len() <= 2);
}
