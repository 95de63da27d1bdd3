//! Slot pages assembled from entries encoded once: a row changed once is pulled by the
//! aggregator and by every peer, and each pull would otherwise clone and encode it again.
//!
//! postcard puts nothing between a struct's fields, and a `Vec<T>` is its length (a varint)
//! followed by each `T`'s encoding, so a page's bytes are its other fields' encoding with the
//! encoded entries spliced in where the (empty) entry list was.

use std::sync::{Mutex, PoisonError};

use geocount_model::wire::{Cursor, SlotPage, SyncPage};
use geocount_model::{Partitions, SlotRecord};
use serde::Serialize;

use crate::journal::{ChangeJournal, Journaled, walk};

/// A table whose entries' items are [`SlotEntry`](geocount_model::wire::SlotEntry)s and can
/// be encoded without cloning them.
pub trait EncodeItems: Journaled {
    /// The counter of entry `index`.
    fn id(&self, index: usize) -> &str;

    /// Appends the postcard encoding of each of entry `index`'s items; returns how many.
    fn encode_items(&self, index: usize, out: &mut Vec<u8>) -> usize;
}

/// A [`SlotEntry`](geocount_model::wire::SlotEntry) by reference: it encodes the same.
#[derive(Serialize)]
pub struct SlotEntryRef<'a> {
    /// Index into [`SlotPage::slot_names`].
    pub slot: u16,
    /// The counter.
    pub id: &'a str,
    /// Its record in that slot.
    pub record: &'a SlotRecord,
}

impl SlotEntryRef<'_> {
    /// Appends this entry's postcard encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let bytes = std::mem::take(out);
        *out = postcard::to_extend(self, bytes).expect("a slot entry encodes into a Vec");
    }
}

/// A page's slot entries, encoded one after another.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EncodedEntries {
    /// How many entries.
    pub count: usize,
    /// Their postcard encodings.
    pub bytes: Vec<u8>,
}

/// How many changes back the cache holds encodings for (pullers pull every 50 to 100 ms, so
/// the pullers of one change come within this many changes of each other at most write rates).
const CACHED_CHANGES: usize = 1 << 16;

/// The most bytes of encodings the cache holds.
const CACHED_BYTES: usize = 16 << 20;

/// The encodings of recently changed entries, by the sequence number of their latest change.
/// Filled by the pulls (under the table's read lock, hence the mutex); a slot of a change too
/// old to be in the window is replaced by the first newer change mapped to it.
#[derive(Default)]
pub struct EncodedRows {
    inner: Mutex<Slots>,
}

impl std::fmt::Debug for EncodedRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `try_lock`: a page being built holds the lock, and printing must not wait for it.
        let held = self.inner.try_lock().ok().map(|slots| slots.held);
        f.debug_struct("EncodedRows")
            .field("held_bytes", &held)
            .finish()
    }
}

#[derive(Default)]
struct Slots {
    /// Slot `seq % CACHED_CHANGES`: (the change, its items, their encoding); seq 0: empty.
    /// Allocated at the first pull.
    slots: Vec<(u64, usize, Box<[u8]>)>,
    held: usize,
}

impl EncodedRows {
    /// Drops the encoding of change `seq` if the cache holds it: its row was removed or changed
    /// again, and no pull will ask for it (kept, it would hold memory until a later change
    /// takes its slot, which an idle table never makes).
    pub fn forget(&mut self, seq: u64) {
        self.inner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .forget(seq);
    }

    /// Bytes of encodings held.
    pub fn held_bytes(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .held
    }
}

impl Slots {
    fn forget(&mut self, seq: u64) {
        if self.slots.is_empty() || seq == 0 {
            return;
        }
        let slot = &mut self.slots[(seq % CACHED_CHANGES as u64) as usize];
        if slot.0 == seq {
            self.held -= slot.2.len();
            *slot = Default::default();
        }
    }

    /// Appends the encoding of the entry whose latest change is `seq`, from the cache or from
    /// `encode` (cached if `seq` is among the last changes before `newest`); returns how many
    /// items it holds.
    fn append(
        &mut self,
        seq: u64,
        newest: u64,
        out: &mut Vec<u8>,
        encode: impl FnOnce(&mut Vec<u8>) -> usize,
    ) -> usize {
        if self.slots.is_empty() {
            self.slots.resize_with(CACHED_CHANGES, Default::default);
        }
        let slot = &mut self.slots[(seq % CACHED_CHANGES as u64) as usize];
        if slot.0 == seq {
            out.extend_from_slice(&slot.2);
            return slot.1;
        }
        let start = out.len();
        let count = encode(out);
        if seq + CACHED_CHANGES as u64 > newest {
            // Two changes in the window never share a slot: what it holds is older.
            self.held -= slot.2.len();
            *slot = Default::default();
            let bytes = &out[start..];
            if self.held + bytes.len() <= CACHED_BYTES {
                self.held += bytes.len();
                *slot = (seq, count, bytes.into());
            }
        }
        count
    }
}

/// The slot page of `table` changed since `cursor` (like [`crate::slot_page`], whose entries
/// it encodes and whose bounds it keeps), its entries taken from `cache` or encoded into it;
/// the page names `slot_names` and its entry list is empty.
pub fn encoded_slot_page<T: EncodeItems>(
    table: &T,
    journal: &ChangeJournal,
    cache: &EncodedRows,
    slot_names: Vec<String>,
    cursor: Cursor,
    limit: usize,
    partitions: Option<&Partitions>,
) -> (SlotPage, EncodedEntries) {
    let mut slots = cache.inner.lock().unwrap_or_else(PoisonError::into_inner);
    let mut entries = EncodedEntries::default();
    let newest = journal.seq();
    let (next, caught_up) = walk(table, journal, cursor, limit, |index| {
        if partitions.is_some_and(|p| !p.holds(table.id(index))) {
            return 1;
        }
        let seq = table.latest_seq(index).expect("a walked entry");
        entries.count += slots.append(seq, newest, &mut entries.bytes, |out| {
            table.encode_items(index, out)
        });
        table.weight(index)
    });
    let page = SlotPage {
        slot_names,
        entries: Vec::new(),
        next,
        caught_up,
    };
    (page, entries)
}

/// The postcard encoding of `page` with `entries` as its slot entries (its own entry list is
/// empty); the same bytes as `page` holding those entries would encode to.
pub fn encode_sync_page(
    page: &SyncPage,
    entries: Option<&EncodedEntries>,
) -> postcard::Result<Vec<u8>> {
    let (Some(slots), Some(entries)) = (&page.slots, entries) else {
        return postcard::to_allocvec(page);
    };
    if !slots.entries.is_empty() {
        return Err(postcard::Error::SerdeSerCustom);
    }
    // `source`, then `slots`: `Some` and the slot names, then the entry count.
    let head = postcard::to_allocvec(&(&page.source, Some(&slots.slot_names)))?.len();
    let without = postcard::to_allocvec(page)?;
    debug_assert_eq!(without[head], 0, "an empty entry list");
    let mut out = Vec::with_capacity(without.len() + 10 + entries.bytes.len());
    out.extend_from_slice(&without[..head]);
    push_varint(&mut out, entries.count as u64);
    out.extend_from_slice(&entries.bytes);
    out.extend_from_slice(&without[head + 1..]);
    Ok(out)
}

/// postcard's varint: seven bits a byte, low first, the high bit set on all but the last.
fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests;
