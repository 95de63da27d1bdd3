//! Messages between processes, encoded with postcard.
//!
//! Replication: every tier pulls from the tier below with `POST /sync` (a [`SyncRequest`]
//! answered by a [`SyncPage`]): the slot states and descriptions changed since the puller's
//! [`Cursor`]. Descriptions also flow down the same way. A shard node restoring its slot asks for
//! `GET /slots/{slot}/copy` ([`SlotCopy`]).
//!
//! The batched write path: a client sends a [`BatchRequest`] as the body of `POST /batch` with
//! content type [`POSTCARD_CONTENT_TYPE`], and gets a [`BatchResponse`] with one [`EntryOutcome`]
//! per entry, in order. Entries borrow from the request body, so decoding allocates only the
//! entry list.
//!
//! Unique counters take items rather than deltas: `POST /batch/items` takes an
//! [`ItemBatchRequest`] and answers the same [`BatchResponse`].
//!
//! Every process encodes with [`encode`] or [`encode_into`]: postcard's own `Vec` output copies
//! each varint through a `memcpy` call, which was most of the cost of a batch's answer.

use serde::{Deserialize, Serialize};

use crate::{SlotRecord, VersionedDescription};

/// The content type of postcard bodies.
pub const POSTCARD_CONTENT_TYPE: &str = "application/x-postcard";

/// Many writes in one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRequest<'a> {
    /// The writes, applied in order.
    #[serde(borrow)]
    pub entries: Vec<BatchEntry<'a>>,
}

impl<'a> BatchRequest<'a> {
    /// A batch of +1 to each of `ids`, without idempotency keys or timestamps.
    pub fn increments(ids: &'a [String]) -> Self {
        let entries = ids
            .iter()
            .map(|id| BatchEntry {
                id,
                delta: 1,
                idempotency_key: None,
                timestamp: None,
            })
            .collect();
        Self { entries }
    }
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchEntry<'a> {
    /// The counter's id (validated by the node; an invalid one refuses this entry only).
    pub id: &'a str,
    /// The signed change to apply.
    pub delta: i64,
    /// A retry of an entry with the same key is applied once and answered as the first was.
    pub idempotency_key: Option<&'a str>,
    /// When the hit happened, in unix seconds; the node's clock when absent.
    pub timestamp: Option<u64>,
}

/// Many items for unique counters in one request (`POST /batch/items`), answered by a
/// [`BatchResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemBatchRequest<'a> {
    /// The items, applied in order.
    #[serde(borrow)]
    pub entries: Vec<ItemEntry<'a>>,
}

/// One item of an [`ItemBatchRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemEntry<'a> {
    /// The unique counter's id (validated by the node; an invalid one refuses this entry only).
    /// A counter the node has not heard of is created as a unique counter.
    pub id: &'a str,
    /// The item to count once however often it is written (1 to 1,024 bytes).
    pub item: &'a str,
    /// A retry of an entry with the same key is answered as the first was.
    pub idempotency_key: Option<&'a str>,
    /// When the item was seen, in unix seconds (checked like a delta's, not kept).
    pub timestamp: Option<u64>,
}

/// The answer to a [`BatchRequest`] or an [`ItemBatchRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// The slot this node owns, e.g. `DC_USA_0_VAL_1`.
    pub slot: String,
    /// One outcome per entry, in the request's order.
    pub outcomes: Vec<EntryOutcome>,
}

/// What happened to one entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryOutcome {
    /// Applied (or, for a retried idempotency key, applied earlier): the slot's state after it.
    /// For an item, the slot's estimate and version (unchanged when the item changed nothing).
    Applied {
        /// The slot's value after the write.
        value: i64,
        /// The slot's version after the write.
        version: u64,
    },
    /// Refused; nothing of it was applied.
    Refused {
        /// The HTTP status the same write would get on its own (400, 422, ...).
        status: u16,
        /// What is wrong.
        error: String,
    },
}

/// Where a puller is in a source's change stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Cursor {
    /// Nothing pulled yet: the source sends everything.
    #[default]
    Start,
    /// Part-way through a full copy: resume at entry `next_index`, then continue with the
    /// changes after `resume_seq`.
    Scan {
        /// The source's incarnation: a cursor from an earlier one starts over.
        epoch: u64,
        /// The change sequence number when the full copy began.
        resume_seq: u64,
        /// The next entry of the copy.
        next_index: u64,
    },
    /// Caught up to change `seq` of incarnation `epoch`.
    Seq {
        /// The source's incarnation.
        epoch: u64,
        /// The last change seen.
        seq: u64,
    },
}

/// A pull: which streams the puller wants, from which cursors.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SyncRequest {
    /// Slot states changed since this cursor; `None` to skip them.
    pub slots: Option<Cursor>,
    /// Descriptions changed since this cursor; `None` to skip them.
    pub descriptions: Option<Cursor>,
}

/// One slot state of one counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotEntry {
    /// Index into [`SlotPage::slot_names`].
    pub slot: u16,
    /// The counter.
    pub id: String,
    /// Its total, version and window in that slot.
    pub record: SlotRecord,
}

/// Slot states changed since the puller's cursor.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SlotPage {
    /// The slot names the entries refer to by index.
    pub slot_names: Vec<String>,
    /// The changed states.
    pub entries: Vec<SlotEntry>,
    /// The cursor to ask from next time.
    pub next: Cursor,
    /// Whether the page reaches the source's newest change (else pull again at once).
    pub caught_up: bool,
}

/// Descriptions changed since the puller's cursor.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DescriptionPage {
    /// The changed descriptions.
    pub items: Vec<VersionedDescription>,
    /// The cursor to ask from next time.
    pub next: Cursor,
    /// Whether the page reaches the source's newest change.
    pub caught_up: bool,
}

/// How fresh a source's copy of one slot is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotFreshness {
    /// The slot's name.
    pub slot: String,
    /// How long ago the source last had the slot's complete state; `None`: never.
    pub staleness_ms: Option<u64>,
}

/// The answer to a [`SyncRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SyncPage {
    /// Who answers (a slot or datacenter name).
    pub source: String,
    /// The slot states asked for.
    pub slots: Option<SlotPage>,
    /// The descriptions asked for.
    pub descriptions: Option<DescriptionPage>,
    /// An aggregator's view of each of its slots' freshness (empty from a shard node, whose own
    /// slot is fresh by definition).
    pub freshness: Vec<SlotFreshness>,
    /// Writes per second the source applied lately (for least-loaded routing).
    pub load: u64,
}

/// A copy of every counter's state in one slot, for a node restoring its own slot.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SlotCopy {
    /// The slot.
    pub slot: String,
    /// Every counter's record in it.
    pub entries: Vec<(String, SlotRecord)>,
}

/// Encodes `value` with postcard into a new buffer (see [`encode_into`]).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    let mut bytes = Vec::new();
    encode_into(value, &mut bytes)?;
    Ok(bytes)
}

/// Appends `value`, encoded with postcard, to `bytes`: the same bytes as `postcard::to_extend`,
/// with short pieces (varints, small ids) pushed byte by byte rather than copied by a
/// `memcpy` call each, about twice as fast for a batch's answer (`cargo bench -p
/// geocount-model --bench hot_paths -- encode`).
pub fn encode_into<T: Serialize + ?Sized>(
    value: &T,
    bytes: &mut Vec<u8>,
) -> Result<(), postcard::Error> {
    postcard::serialize_with_flavor(value, AppendTo(bytes))
}

/// A postcard output that appends to a borrowed `Vec`.
struct AppendTo<'a>(&'a mut Vec<u8>);

/// Pieces up to this long are pushed byte by byte: a varint is at most 10 bytes.
const SHORT_PIECE: usize = 16;

impl postcard::ser_flavors::Flavor for AppendTo<'_> {
    type Output = ();

    #[inline]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if data.len() <= SHORT_PIECE {
            // A loop the compiler unrolls, with one capacity check.
            self.0.extend(data.iter().copied());
        } else {
            self.0.extend_from_slice(data);
        }
        Ok(())
    }

    #[inline]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SlotState;

    #[test]
    fn encodes_the_bytes_postcard_does() {
        let response = BatchResponse {
            slot: "DC_USA_0_VAL_0".into(),
            outcomes: (0..300)
                .map(|n| match n % 3 {
                    0 => EntryOutcome::Applied {
                        value: -(n * 1_000_003),
                        version: 1_795_000_000_000 << 12 | n as u64,
                    },
                    1 => EntryOutcome::Applied {
                        value: i64::MAX - n,
                        version: u64::MAX - n as u64,
                    },
                    _ => EntryOutcome::Refused {
                        status: 422,
                        error: "x".repeat(n as usize),
                    },
                })
                .collect(),
        };
        assert_eq!(
            encode(&response).unwrap(),
            postcard::to_allocvec(&response).unwrap()
        );
        let mut appended = b"head".to_vec();
        encode_into(
            &SlotState {
                value: 5,
                version: 7,
            },
            &mut appended,
        )
        .unwrap();
        assert_eq!(&appended[..4], b"head");
        assert_eq!(
            postcard::from_bytes::<SlotState>(&appended[4..]).unwrap(),
            SlotState {
                value: 5,
                version: 7
            }
        );
    }
}
