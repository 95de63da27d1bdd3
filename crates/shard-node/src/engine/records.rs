//! The framing every appended file of the node shares (the write-ahead log, a peer's key
//! file): records `[payload length: u32 LE][crc32 of payload: u32 LE][payload: postcard]`,
//! one after another, and the one rule that tells a torn tail from corruption.
//!
//! A crash can leave a torn record at the end of a file appended to: a prefix of one record
//! cut short by the end of the file, or by zeros from a sector boundary on (a disk writes
//! whole sectors). It was never acknowledged, so a reader cuts it off. Any other bad record is
//! corruption, the last one too when all of it is there: records were acknowledged that cannot
//! be read ([`classify_failure`] tells them apart).

use serde::de::DeserializeOwned;

use crate::error::StorageError;

/// A record's header: the payload's length and its crc32.
pub const HEADER_BYTES: usize = 8;

/// The smallest unit a disk writes whole: a torn write loses whole sectors, never a few bytes
/// inside one.
pub const SECTOR_BYTES: usize = 512;

/// How a file's records end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordsEnd {
    /// The last record ends the file.
    Clean,
    /// Only zeros follow the last record: space reserved ahead of records never written.
    Reserved {
        /// Where the zeros start.
        offset: u64,
    },
    /// A last record cut short by the end of the file or by zeros from a sector boundary on: a
    /// crash mid-append, so it was never acknowledged.
    Torn {
        /// Where the torn record starts.
        offset: u64,
        /// Why it does not read.
        reason: String,
    },
    /// A bad record that is no torn tail: records were acknowledged that cannot be read.
    Corrupt {
        /// Where the first bad record starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
}

impl RecordsEnd {
    /// The first bad record of `file`, as the error that stops startup, if it is corruption.
    pub fn corruption(&self, file: &std::path::Path) -> Option<StorageError> {
        match self {
            RecordsEnd::Corrupt { offset, reason } => Some(StorageError::Corrupt {
                file: file.display().to_string(),
                offset: *offset,
                reason: reason.clone(),
            }),
            _ => None,
        }
    }
}

/// The whole records at the start of `bytes`, as a scan reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// Whole records read.
    pub records: usize,
    /// The bytes they take.
    pub record_bytes: usize,
    /// What follows them.
    pub end: RecordsEnd,
}

/// Reads the records of `bytes` in order, handing each to `apply`, and says how they end. Only
/// a file whose tail may tear (`tail_may_tear`: one still appended to when the node stopped)
/// may end in reserved space or a torn record; any bad record of another is corruption.
pub fn scan<T: DeserializeOwned>(
    bytes: &[u8],
    tail_may_tear: bool,
    mut apply: impl FnMut(T),
) -> Scanned {
    let mut records = 0;
    let mut offset = 0usize;
    let end = loop {
        if offset == bytes.len() {
            break RecordsEnd::Clean;
        }
        match decode_at::<T>(bytes, offset) {
            Ok((record, next)) => {
                apply(record);
                records += 1;
                offset = next;
            }
            Err(bad) if tail_may_tear => break classify_failure::<T>(bytes, offset, bad),
            Err(bad) => {
                break RecordsEnd::Corrupt {
                    offset: offset as u64,
                    reason: bad.to_string(),
                };
            }
        }
    };
    Scanned {
        records,
        record_bytes: offset,
        end,
    }
}

/// Tells a torn tail from corruption where the record at `offset` of a file whose tail may
/// tear does not read.
///
/// A torn tail is a prefix of one record followed only by the end of the file, or by zeros
/// (reserved space) from a sector boundary on. So it is corruption when the record's checksum
/// holds but it does not decode; when non-zero bytes run past the end its header claims; when
/// its checksum fails with all of it in the file and no sector boundary among its trailing
/// zeros (a record ends in zeros of its own: an empty list is a zero byte); when it reads whole
/// with a length one bit shorter than its header claims; or when a whole record starts anywhere
/// among the non-zero bytes after it, since records are appended one after another: a later one
/// means this one was written whole, then damaged. That last test also catches a damaged length
/// claiming a record that runs over the records after it, inside the file or past its end.
fn classify_failure<T: DeserializeOwned>(
    bytes: &[u8],
    offset: usize,
    bad: BadRecord,
) -> RecordsEnd {
    let Some(last_nonzero) = bytes[offset..].iter().rposition(|&b| b != 0) else {
        return RecordsEnd::Reserved {
            offset: offset as u64,
        };
    };
    let nonzero_end = offset + last_nonzero + 1;
    let claimed_end = match bytes.get(offset..offset + HEADER_BYTES) {
        Some(header) => offset + HEADER_BYTES + payload_len(header),
        None => bytes.len(),
    };
    let cut_short = match bad {
        BadRecord::IncompleteHeader => true,
        BadRecord::PastTheEnd => !whole_with_a_flipped_length::<T>(bytes, offset),
        BadRecord::Checksum => {
            sector_boundary_within(nonzero_end, claimed_end)
                && !whole_with_a_flipped_length::<T>(bytes, offset)
        }
        BadRecord::Undecodable(_) => false,
    };
    let torn = cut_short
        && nonzero_end <= claimed_end
        && !(offset + 1..nonzero_end).any(|at| whole_record_at::<T>(bytes, at));
    let (offset, reason) = (offset as u64, bad.to_string());
    if torn {
        RecordsEnd::Torn { offset, reason }
    } else {
        RecordsEnd::Corrupt { offset, reason }
    }
}

/// Whether a multiple of [`SECTOR_BYTES`] lies in `from..to`: where a torn write's lost sectors
/// could start.
fn sector_boundary_within(from: usize, to: usize) -> bool {
    from < to && from.div_ceil(SECTOR_BYTES) * SECTOR_BYTES < to
}

/// Whether the record at `offset` reads whole with its length one bit away from the one its
/// header claims, shorter: it was written whole, then its length damaged.
fn whole_with_a_flipped_length<T: DeserializeOwned>(bytes: &[u8], offset: usize) -> bool {
    let Some(header) = bytes.get(offset..offset + HEADER_BYTES) else {
        return false;
    };
    let claimed = payload_len(header);
    let crc = payload_crc(header);
    let start = offset + HEADER_BYTES;
    (0..32).map(|bit| claimed ^ (1 << bit)).any(|len| {
        len != 0
            && len < claimed
            && bytes.get(start..start + len).is_some_and(|payload| {
                crc32fast::hash(payload) == crc && decodes_exactly::<T>(payload)
            })
    })
}

/// Whether a whole record starts at `at`: a payload of one or more bytes inside the file that
/// decodes to exactly one record, with its checksum. Decoded before the checksum is computed:
/// at most offsets it fails within a few bytes, where the checksum would read the whole
/// claimed length (megabytes, inside a large torn record).
fn whole_record_at<T: DeserializeOwned>(bytes: &[u8], at: usize) -> bool {
    let Some(header) = bytes.get(at..at + HEADER_BYTES) else {
        return false;
    };
    let start = at + HEADER_BYTES;
    let Some(payload) = bytes.get(start..start + payload_len(header)) else {
        return false;
    };
    !payload.is_empty()
        && decodes_exactly::<T>(payload)
        && crc32fast::hash(payload) == payload_crc(header)
}

/// Whether `payload` is one record and nothing more.
fn decodes_exactly<T: DeserializeOwned>(payload: &[u8]) -> bool {
    postcard::take_from_bytes::<T>(payload).is_ok_and(|(_, rest)| rest.is_empty())
}

/// Why the bytes at an offset are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRecord {
    /// Fewer than [`HEADER_BYTES`] bytes are left.
    #[error("incomplete record header")]
    IncompleteHeader,
    /// The payload its header claims runs past the end of the file.
    #[error("record runs past the end of the segment")]
    PastTheEnd,
    /// The payload's crc32 is not its header's.
    #[error("checksum mismatch")]
    Checksum,
    /// The payload's checksum holds but it is no record.
    #[error("undecodable record: {0}")]
    Undecodable(String),
}

fn payload_len(header: &[u8]) -> usize {
    u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize
}

fn payload_crc(header: &[u8]) -> u32 {
    u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"))
}

/// The record at `offset` and where the next one starts.
pub fn decode_at<T: DeserializeOwned>(
    bytes: &[u8],
    offset: usize,
) -> Result<(T, usize), BadRecord> {
    let header = bytes
        .get(offset..offset + HEADER_BYTES)
        .ok_or(BadRecord::IncompleteHeader)?;
    let len = payload_len(header);
    let start = offset + HEADER_BYTES;
    let payload = bytes.get(start..start + len).ok_or(BadRecord::PastTheEnd)?;
    if crc32fast::hash(payload) != payload_crc(header) {
        return Err(BadRecord::Checksum);
    }
    let record =
        postcard::from_bytes(payload).map_err(|e| BadRecord::Undecodable(e.to_string()))?;
    Ok((record, start + len))
}

/// Fills in the header of `record`: a payload after [`HEADER_BYTES`] of room.
pub fn seal(record: &mut [u8]) -> Result<(), std::io::Error> {
    let payload = &record[HEADER_BYTES..];
    let len = u32::try_from(payload.len())
        .map_err(|_| std::io::Error::other("record larger than 4 GiB"))?;
    let crc = crc32fast::hash(payload);
    record[0..4].copy_from_slice(&len.to_le_bytes());
    record[4..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}
