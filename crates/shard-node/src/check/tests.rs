use std::fs;
use std::sync::Arc;

use geocount_model::CounterId;

use super::*;
use crate::engine::slot_table::SharedSlotTable;
use crate::engine::store::Checkpoint;
use crate::engine::wal::{LogRecord, Wal};

fn record(id: &str, value: i64, version: u64) -> LogRecord {
    LogRecord {
        slots: vec![(
            CounterId::new(id).unwrap(),
            SlotState { value, version }.into(),
        )],
        ..LogRecord::default()
    }
}

/// Every file of `dir` with its bytes.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

/// A store holding counter `a` (closed cleanly), then a log segment holding `b` and `c`
/// with its reserved space (a crash).
fn data_dir(dir: &Path) {
    let store = Store::open(&OsDisk, &dir.join(STORE_FILE)).unwrap();
    let table = SharedSlotTable::default();
    let id = CounterId::new("a").unwrap();
    let row = table
        .write()
        .unwrap()
        .merge(
            &id,
            &SlotState {
                value: 7,
                version: 1,
            }
            .into(),
        )
        .unwrap();
    let mut checkpoint = Checkpoint::default();
    checkpoint.rows.mark(row);
    store.write(&checkpoint, &*table).unwrap();
    store.close().unwrap();
    let mut wal = Wal::create(Arc::new(OsDisk), dir, 1).unwrap();
    wal.append(&record("b", 2, 2)).unwrap();
    wal.append(&record("c", 3, 3)).unwrap();
    wal.sync().unwrap();
}

#[test]
fn a_whole_directory_is_reported_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    data_dir(dir.path());
    let before = contents(dir.path());
    let report = check(dir.path()).unwrap();
    assert_eq!(contents(dir.path()), before);
    assert_eq!(report.verdict, Verdict::Whole);
    assert!(matches!(
        report.store,
        StoreReport::Read {
            counters: 1,
            closed_cleanly: true,
            ..
        }
    ));
    let values: Vec<_> = report
        .counters
        .iter()
        .map(|(id, state)| (id.as_str(), state.value))
        .collect();
    assert_eq!(values, [("a", 7), ("b", 2), ("c", 3)]);
    assert_eq!(report.segments[0].records, 2);
    assert!(!report.restore_pending);
    let text = report.to_string();
    assert!(text.contains("  b: value 2, version 2\n"), "{text}");
    assert!(text.ends_with("verdict: whole\n"), "{text}");
}

#[test]
fn corruption_is_named_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    data_dir(dir.path());
    let segment = wal::segment_path(dir.path(), 1);
    let mut bytes = fs::read(&segment).unwrap();
    // The first record's payload: the second follows it.
    bytes[10] ^= 0xff;
    fs::write(&segment, &bytes).unwrap();
    fs::write(dir.path().join(RESTORE_MARKER), "").unwrap();
    let before = contents(dir.path());
    let report = check(dir.path()).unwrap();
    assert_eq!(contents(dir.path()), before);
    assert_eq!(
        report.verdict,
        Verdict::Corrupt {
            file: segment.display().to_string(),
            offset: Some(0),
            reason: "checksum mismatch".into()
        }
    );
    assert!(report.restore_pending);
    assert_eq!(report.counters.len(), 1, "only the store's counter");
    let text = report.to_string();
    assert!(
        text.ends_with(&format!(
            "verdict: corrupt: {} at byte 0: checksum mismatch\n",
            segment.display()
        )),
        "{text}"
    );
}

/// The last record with all its bytes there but one bit flipped was written whole: corrupt,
/// where the same record cut short by the end of the file is a torn tail a start cuts off.
#[test]
fn a_damaged_last_record_is_corruption_and_a_cut_one_is_torn() {
    let dir = tempfile::tempdir().unwrap();
    data_dir(dir.path());
    let segment = wal::segment_path(dir.path(), 1);
    let bytes = fs::read(&segment).unwrap();
    let last = 8 + u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    let last_end =
        last + 8 + u32::from_le_bytes(bytes[last..last + 4].try_into().unwrap()) as usize;

    let mut flipped = bytes.clone();
    flipped[last + 9] ^= 0x10;
    fs::write(&segment, &flipped).unwrap();
    let report = check(dir.path()).unwrap();
    assert_eq!(
        report.verdict,
        Verdict::Corrupt {
            file: segment.display().to_string(),
            offset: Some(last as u64),
            reason: "checksum mismatch".into()
        }
    );

    fs::write(&segment, &bytes[..last_end - 1]).unwrap();
    let report = check(dir.path()).unwrap();
    assert!(report.verdict.is_whole(), "{report}");
    assert!(
        matches!(report.segments[0].end, RecordsEnd::Torn { offset, .. } if offset == last as u64),
        "{report}"
    );
}

/// A store a crash left needs a repair to open: the check repairs it in memory only.
#[test]
fn a_store_not_closed_cleanly_is_read_without_repairing_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    data_dir(dir.path());
    let store = Store::open(&OsDisk, &dir.path().join(STORE_FILE)).unwrap();
    // The file as a kill -9 would leave it: opened for writing, never closed.
    fs::copy(dir.path().join(STORE_FILE), crashed.path().join(STORE_FILE)).unwrap();
    store.close().unwrap();
    assert!(matches!(
        redb::Builder::new().open_read_only(crashed.path().join(STORE_FILE)),
        Err(redb::DatabaseError::RepairAborted)
    ));
    let before = contents(crashed.path());
    let report = check(crashed.path()).unwrap();
    assert_eq!(contents(crashed.path()), before);
    assert!(
        matches!(
            report.store,
            StoreReport::Read {
                counters: 1,
                closed_cleanly: false,
                ..
            }
        ),
        "{report}"
    );
    assert_eq!(report.counters[0].1.value, 7);
    assert!(report.verdict.is_whole());
}

#[test]
fn a_store_held_by_a_node_is_not_checked() {
    let dir = tempfile::tempdir().unwrap();
    data_dir(dir.path());
    let store = Store::open(&OsDisk, &dir.path().join(STORE_FILE)).unwrap();
    assert!(matches!(check(dir.path()), Err(CheckError::InUse(_))));
    store.close().unwrap();
    assert!(matches!(
        check(&dir.path().join("missing")),
        Err(CheckError::NotADirectory(_))
    ));
}

#[test]
fn the_overlay_reads_its_writes_and_zeros_what_was_cut() {
    use redb::StorageBackend;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file");
    let original: Vec<u8> = (0..3 * PAGE).map(|n| (n % 251) as u8 + 1).collect();
    fs::write(&path, &original).unwrap();
    let overlay = MemoryOverlay::open(&path).unwrap();
    overlay.write(PAGE - 2, &[0; 4]).unwrap();
    let mut out = vec![0; 8];
    overlay.read(PAGE - 4, &mut out).unwrap();
    assert_eq!(out[..2], original[PAGE as usize - 4..PAGE as usize - 2]);
    assert_eq!(out[2..6], [0; 4]);
    assert_eq!(out[6..], original[PAGE as usize + 2..PAGE as usize + 4]);
    overlay.set_len(PAGE + 10).unwrap();
    overlay.set_len(4 * PAGE).unwrap();
    let mut out = vec![1; 3 * PAGE as usize];
    overlay.read(PAGE, &mut out).unwrap();
    assert_eq!(out[2..10], original[PAGE as usize + 2..PAGE as usize + 10]);
    assert!(
        out[10..].iter().all(|&b| b == 0),
        "the cut part reads as zeros"
    );
    assert!(overlay.read(4 * PAGE - 1, &mut [0; 2]).is_err());
    assert_eq!(
        fs::read(&path).unwrap(),
        original,
        "the file is left as it was"
    );
}
