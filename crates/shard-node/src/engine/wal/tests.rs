use std::fs;

use super::*;
use crate::engine::records::{SECTOR_BYTES, decode_at};
use crate::storage::OsDisk;

fn create(dir: &Path, segment: u64) -> Wal {
    Wal::create(Arc::new(OsDisk), dir, segment).unwrap()
}

fn record(id: &str, value: i64, version: u64) -> LogRecord {
    LogRecord {
        slots: vec![(
            CounterId::new(id).unwrap(),
            geocount_model::SlotState { value, version }.into(),
        )],
        ..LogRecord::default()
    }
}

/// Records of `counters` counters each: one spans several sectors.
fn wide_record(counters: i64, version: u64) -> LogRecord {
    LogRecord {
        slots: (0..counters)
            .map(|n| {
                let id = CounterId::new(format!("wide-{n}")).unwrap();
                (id, geocount_model::SlotState { value: n, version }.into())
            })
            .collect(),
        ..LogRecord::default()
    }
}

/// One record of 200,000 counters: a few megabytes.
fn big_record() -> LogRecord {
    wide_record(200_000, 1)
}

/// Segment 1 holding records `a` then `b`, synced.
fn a_then_b(dir: &Path) -> Wal {
    let mut wal = create(dir, 1);
    wal.append(&record("a", 1, 1)).unwrap();
    wal.append(&record("b", 2, 2)).unwrap();
    wal.sync().unwrap();
    wal
}

/// Record `a` in segment 1, closed, then `b` in segment 2, synced; the log closed.
fn a_then_b_across_segments(dir: &Path) {
    let mut wal = create(dir, 1);
    wal.append(&record("a", 1, 1)).unwrap();
    wal.sync().unwrap();
    assert_eq!(wal.rotate().unwrap(), 1, "segment 1 closed");
    wal.append(&record("b", 2, 2)).unwrap();
    wal.sync().unwrap();
}

/// Rewrites segment 1 in `dir` as `change` leaves its bytes; those bytes.
fn change_segment_1(dir: &Path, change: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let path = segment_path(dir, 1);
    let mut bytes = fs::read(&path).unwrap();
    change(&mut bytes);
    fs::write(&path, &bytes).unwrap();
    bytes
}

fn file_len(dir: &Path, segment: u64) -> u64 {
    fs::metadata(segment_path(dir, segment)).unwrap().len()
}

fn replay_all(dir: &Path) -> Result<Vec<LogRecord>, StorageError> {
    let mut records = Vec::new();
    replay(&OsDisk, dir, |r| records.push(r))?;
    Ok(records)
}

#[test]
fn records_round_trip_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    a_then_b_across_segments(dir.path());
    assert_eq!(
        replay_all(dir.path()).unwrap(),
        vec![record("a", 1, 1), record("b", 2, 2)]
    );
    delete_through(&OsDisk, dir.path(), 1).unwrap();
    assert_eq!(segments(&OsDisk, dir.path()).unwrap(), vec![2]);
}

#[test]
fn torn_tail_is_cut_off_and_the_log_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let wal = a_then_b(dir.path());
    let full = wal.len();
    drop(wal);
    let path = segment_path(dir.path(), 1);
    // Every possible tear inside the second record leaves exactly the first.
    let first_len = {
        let bytes = fs::read(&path).unwrap();
        decode_at::<LogRecord>(&bytes, 0).unwrap().1 as u64
    };
    for cut in first_len + 1..full {
        let bytes = fs::read(&path).unwrap();
        let torn = dir.path().join("torn");
        fs::create_dir_all(&torn).unwrap();
        fs::write(segment_path(&torn, 7), &bytes[..cut as usize]).unwrap();
        assert_eq!(
            replay_all(&torn).unwrap(),
            vec![record("a", 1, 1)],
            "cut at {cut}"
        );
        assert_eq!(file_len(&torn, 7), first_len);
        fs::remove_dir_all(&torn).unwrap();
    }
}

/// The last record, all of it there, was written whole and maybe acknowledged: a bit flipped
/// anywhere in it (its length, its checksum, its payload) is corruption, not a torn tail.
#[test]
fn a_flipped_bit_in_the_last_record_is_corruption() {
    for reserved in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let starts = five_records(dir.path(), reserved);
        let last = starts[4];
        let end = record_end(dir.path(), last);
        for (at, bit) in [
            (last, 0),
            (last + 5, 3),
            (last + HEADER_BYTES, 0),
            (last + HEADER_BYTES + 4, 6),
            (end - 1, 1),
            (end, 6),
        ] {
            let dir = tempfile::tempdir().unwrap();
            five_records(dir.path(), reserved);
            if !reserved && at as u64 >= file_len(dir.path(), 1) {
                continue;
            }
            assert_refused(dir.path(), last, |bytes| bytes[at] ^= 1 << bit);
        }
    }
}

/// A length damaged longer reads as a record running on into the reserved space, or past the
/// end of the file: it still reads whole with the length it had.
#[test]
fn a_flipped_bit_lengthening_the_last_record_is_corruption() {
    for (reserved, bit) in [(true, 9), (true, 20), (false, 9), (false, 20)] {
        let dir = tempfile::tempdir().unwrap();
        let starts = five_records(dir.path(), reserved);
        assert_refused(dir.path(), starts[4], |bytes| {
            bytes[starts[4] + bit / 8] ^= 1 << (bit % 8);
        });
    }
}

#[test]
fn corruption_in_an_older_segment_stops_replay() {
    let dir = tempfile::tempdir().unwrap();
    a_then_b_across_segments(dir.path());
    change_segment_1(dir.path(), |bytes| bytes[HEADER_BYTES] ^= 0xff);
    let err = replay_all(dir.path()).unwrap_err();
    assert!(
        matches!(err, StorageError::Corrupt { offset: 0, .. }),
        "{err}"
    );
}

/// A crash leaves the open segment with its reserved space: replay reads every record,
/// then cuts the zeros off, and the next segment starts clean.
#[test]
fn reserved_space_is_cut_off_at_replay() {
    let dir = tempfile::tempdir().unwrap();
    let wal = a_then_b(dir.path());
    let written = wal.len();
    assert!(
        file_len(dir.path(), 1) >= RESERVE_BYTES,
        "space reserved ahead"
    );
    drop(wal);
    assert_eq!(
        replay_all(dir.path()).unwrap(),
        vec![record("a", 1, 1), record("b", 2, 2)]
    );
    assert_eq!(file_len(dir.path(), 1), written);
}

/// Records past the first reservation get more reserved space, and a closed segment is
/// cut to its records, so zeros in it would read as corruption.
#[test]
fn segments_reserve_as_they_grow_and_close_at_their_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = create(dir.path(), 1);
    let big = big_record();
    let mut appended = 0;
    while wal.len() <= RESERVE_BYTES {
        wal.append(&big).unwrap();
        appended += 1;
    }
    wal.sync().unwrap();
    assert!(file_len(dir.path(), 1) > wal.len());
    let written = wal.len();
    assert_eq!(wal.rotate().unwrap(), 1);
    assert_eq!(file_len(dir.path(), 1), written);
    wal.append(&record("c", 3, 3)).unwrap();
    wal.sync().unwrap();
    drop(wal);
    let records = replay_all(dir.path()).unwrap();
    assert_eq!(records.last(), Some(&record("c", 3, 3)));
    assert_eq!(records.len(), appended + 1);
}

/// A record torn inside the reserved space (its first sectors written, the rest still zeros)
/// is cut off with the space after it, wherever the sectors it lost start.
#[test]
fn a_record_torn_inside_the_reserved_space_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = create(dir.path(), 1);
    wal.append(&record("a", 1, 1)).unwrap();
    wal.sync().unwrap();
    let first = wal.len() as usize;
    wal.append(&wide_record(100, 2)).unwrap();
    wal.sync().unwrap();
    let end = wal.len() as usize;
    drop(wal);
    let path = segment_path(dir.path(), 1);
    let whole = fs::read(&path).unwrap();
    let lost_from = (first + HEADER_BYTES).div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
    assert!(lost_from + SECTOR_BYTES < end, "the record spans sectors");
    for lost_from in (lost_from..end).step_by(SECTOR_BYTES) {
        fs::write(&path, &whole).unwrap();
        change_segment_1(dir.path(), |bytes| bytes[lost_from..].fill(0));
        assert_eq!(
            replay_all(dir.path()).unwrap(),
            vec![record("a", 1, 1)],
            "sectors lost from byte {lost_from}"
        );
        assert_eq!(file_len(dir.path(), 1), first as u64);
    }
}

/// Segment 1 holding five records, synced, and where each starts. With `reserved`, it
/// keeps the space reserved ahead of its records (a crash); without, it ends at its last
/// record (a disk that cannot reserve).
fn five_records(dir: &Path, reserved: bool) -> Vec<usize> {
    let mut wal = create(dir, 1);
    let mut starts = Vec::new();
    for n in 0..5 {
        starts.push(wal.len() as usize);
        wal.append(&record(&format!("c{n}"), n, n as u64 + 1))
            .unwrap();
    }
    wal.sync().unwrap();
    if !reserved {
        fs::OpenOptions::new()
            .write(true)
            .open(segment_path(dir, 1))
            .unwrap()
            .set_len(wal.len())
            .unwrap();
    }
    starts
}

/// Where the last record of segment 1, starting at `start`, ends: after its last byte that is
/// not zero (the space reserved after it is zeros).
fn record_end(dir: &Path, start: usize) -> usize {
    let bytes = fs::read(segment_path(dir, 1)).unwrap();
    start + bytes[start..].iter().rposition(|&b| b != 0).unwrap() + 1
}

/// Changes segment 1 with `damage`, then checks that replay refuses it as corrupt at
/// `offset` and leaves the file as it was.
fn assert_refused(dir: &Path, offset: usize, damage: impl FnOnce(&mut Vec<u8>)) {
    let bytes = change_segment_1(dir, damage);
    let err = replay_all(dir).unwrap_err();
    assert!(
        matches!(&err, StorageError::Corrupt { offset: at, .. } if *at == offset as u64),
        "{err}"
    );
    assert!(
        fs::read(segment_path(dir, 1)).unwrap() == bytes,
        "the file is left as it was"
    );
}

#[test]
fn a_flipped_byte_in_a_middle_record_is_corruption() {
    for reserved in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let starts = five_records(dir.path(), reserved);
        assert_refused(dir.path(), starts[2], |bytes| {
            bytes[starts[2] + HEADER_BYTES + 3] ^= 0x01;
        });
    }
}

/// A damaged length claims a record running over the records after it: inside the file
/// (its reserved space), or past its end.
#[test]
fn a_flipped_bit_in_a_middle_length_is_corruption() {
    for (reserved, bit) in [(true, 8), (false, 8), (true, 31), (false, 31)] {
        let dir = tempfile::tempdir().unwrap();
        let starts = five_records(dir.path(), reserved);
        let len = file_len(dir.path(), 1);
        assert_refused(dir.path(), starts[1], |bytes| {
            let field = starts[1]..starts[1] + 4;
            let claimed = u32::from_le_bytes(bytes[field.clone()].try_into().unwrap()) ^ (1 << bit);
            let claimed_end = (starts[1] + HEADER_BYTES) as u64 + u64::from(claimed);
            assert_eq!(
                claimed_end <= len,
                reserved && bit == 8,
                "inside the file only within the reserved space"
            );
            assert!(claimed_end > starts[4] as u64, "over the records after it");
            bytes[field].copy_from_slice(&claimed.to_le_bytes());
        });
    }
}

/// A length damaged shorter leaves the rest of its record, then the records after it.
#[test]
fn a_shortened_middle_length_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let starts = five_records(dir.path(), true);
    assert_refused(dir.path(), starts[3], |bytes| bytes[starts[3]] -= 1);
}

/// The last record written whole then damaged cannot be told from one torn, but a damaged
/// record with a valid checksum was written whole.
#[test]
fn an_undecodable_last_record_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let starts = five_records(dir.path(), true);
    let end = record_end(dir.path(), starts[4]);
    assert_refused(dir.path(), starts[4], |bytes| {
        // A payload of one byte that is no record, with its checksum.
        bytes[starts[4] + HEADER_BYTES..end].fill(0);
        bytes[starts[4] + HEADER_BYTES] = 0xff;
        bytes[starts[4]..starts[4] + 4].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32fast::hash(&[0xff]);
        bytes[starts[4] + 4..starts[4] + 8].copy_from_slice(&crc.to_le_bytes());
    });
}

#[test]
fn a_scan_reads_without_cutting() {
    let dir = tempfile::tempdir().unwrap();
    let starts = five_records(dir.path(), false);
    let bytes = change_segment_1(dir.path(), |bytes| bytes.truncate(bytes.len() - 2));
    let mut records = 0;
    let scan = scan_segment(&OsDisk, dir.path(), 1, true, |_| records += 1).unwrap();
    assert_eq!(
        (scan.records, scan.record_bytes, scan.file_bytes),
        (4, starts[4] as u64, bytes.len() as u64)
    );
    assert!(
        matches!(scan.end, RecordsEnd::Torn { offset, .. } if offset == starts[4] as u64),
        "{scan:?}"
    );
    assert_eq!(records, 4);
    assert!(scan.corruption().is_none());
    assert!(fs::read(segment_path(dir.path(), 1)).unwrap() == bytes);
    // The same bytes in an older segment are corruption.
    let older = scan_segment(&OsDisk, dir.path(), 1, false, |_| {}).unwrap();
    assert!(older.corruption().is_some(), "{older:?}");
}

/// Telling a torn record from corruption looks for a whole record at every offset of the
/// torn one: a few megabytes must take a moment, not minutes.
#[test]
fn a_large_torn_record_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = create(dir.path(), 1);
    let big = big_record();
    wal.append(&record("a", 1, 1)).unwrap();
    let first = wal.len();
    wal.append(&big).unwrap();
    wal.sync().unwrap();
    let torn_at = first + (wal.len() - first) / 2;
    drop(wal);
    change_segment_1(dir.path(), |bytes| bytes[torn_at as usize..].fill(0));
    let started = std::time::Instant::now();
    assert_eq!(replay_all(dir.path()).unwrap(), vec![record("a", 1, 1)]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(file_len(dir.path(), 1), first);
}

#[test]
fn empty_directory_replays_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        replay(&OsDisk, dir.path(), |_| panic!("no records")).unwrap(),
        0
    );
}

/// A record is written as postcard encodes it whole; its keys' bytes are known apart, and
/// counted until the segment closes.
#[test]
fn the_keys_of_a_record_are_counted_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = create(dir.path(), 1);
    let mut keyed = record("a", 1, 1);
    keyed.idempotency = (0..3)
        .map(|n| {
            let entry = geocount_model::IdempotencyRecord {
                counter: CounterId::new("a").unwrap(),
                delta: 1,
                item: None,
                outcome: geocount_model::SlotState {
                    value: n,
                    version: 1,
                },
                created_at_ms: 5,
            };
            (format!("key-{n}").into_boxed_str(), entry)
        })
        .collect();
    wal.append(&record("b", 2, 2)).unwrap();
    assert_eq!(wal.key_bytes(), 1, "an empty key list is one byte");
    wal.append(&keyed).unwrap();
    assert_eq!(wal.last_payload(), postcard::to_allocvec(&keyed).unwrap());
    assert_eq!(
        wal.last_keys(),
        postcard::to_allocvec(&keyed.idempotency).unwrap()
    );
    assert_eq!(wal.key_bytes(), 1 + wal.last_keys().len() as u64);
    wal.sync().unwrap();
    assert_eq!(
        replay_all(dir.path()).unwrap(),
        vec![record("b", 2, 2), keyed]
    );
    wal.rotate().unwrap();
    assert_eq!(wal.key_bytes(), 0);
}

/// A burst's large record does not keep its buffer: the next small record hands it back, and
/// the log still reads both.
#[test]
fn a_large_record_hands_its_buffer_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = create(dir.path(), 1);
    wal.append(&big_record()).unwrap();
    assert!(wal.buffer.capacity() > BUFFER_KEPT_BYTES);
    wal.append(&record("a", 1, 2)).unwrap();
    assert!(wal.buffer.capacity() <= BUFFER_KEPT_BYTES);
    assert_eq!(
        wal.last_payload(),
        &encode(&record("a", 1, 2)).unwrap()[HEADER_BYTES..]
    );
    wal.sync().unwrap();
    drop(wal);
    assert_eq!(replay_all(dir.path()).unwrap().len(), 2);
}
