//! The lifecycle rule (reset, delete, expiry) every read of either tier goes by
//! (docs/architecture.md, "Reset, delete and expiry"): whether a counter exists at a time, and
//! which of its slots' records count.
//!
//! For counter `c` at `now`, `desc` its description known (if any):
//! - `G` = the larger of `desc.generation_at(now)` and the newest generation of `c`'s records
//!   held. A record counts (total, window, sketch) iff its generation is at least `G`; the
//!   others read as 0 / empty.
//! - `c` exists iff `desc` is live at `now` and its generation is `G`, or (no `desc`, or one of
//!   an older generation than `G`) a record counts. A counter that does not exist reads as 404
//!   and ranks nowhere.
//!
//! Expiry needs no message: an expired description reads as its tombstone by this clock.

use geocount_model::{HlcTimestamp, SlotRecord, VersionedDescription};

/// Whether a counter exists at a time and, if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// It exists.
    Exists,
    /// Neither described nor held.
    Unknown,
    /// Its description is a tombstone.
    Deleted,
    /// Its expiry (unix ms) has passed.
    Expired(u64),
}

/// A counter as reads see it at one time ([`Life::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    /// Whether it exists.
    pub presence: Presence,
    /// The generation its records count from (`G`).
    pub from: HlcTimestamp,
    /// When it expires (unix ms), while its description is live and has an expiry.
    pub expires_at_ms: Option<u64>,
}

impl Life {
    /// Counter with `description` (if known) and `records` at `now_ms`.
    pub fn of(
        description: Option<&VersionedDescription>,
        records: &[(u16, SlotRecord)],
        now_ms: u64,
    ) -> Self {
        let described = description.map(|d| d.generation_at(now_ms));
        let newest = records.iter().map(|(_, r)| r.generation()).max();
        let from = described.max(newest).unwrap_or_default();
        let presence = match description {
            Some(d) if described == Some(from) => {
                if d.is_live(now_ms) {
                    Presence::Exists
                } else if d.description.deleted {
                    Presence::Deleted
                } else {
                    Presence::Expired(d.description.expires_at_ms.unwrap_or_default())
                }
            }
            // A record of a newer generation than the description known: it counts.
            Some(_) => Presence::Exists,
            None if newest.is_some() => Presence::Exists,
            None => Presence::Unknown,
        };
        Self {
            presence,
            from,
            expires_at_ms: description
                .filter(|d| d.is_live(now_ms))
                .and_then(|d| d.description.expires_at_ms),
        }
    }

    /// Whether the counter exists.
    pub fn exists(&self) -> bool {
        self.presence == Presence::Exists
    }

    /// Whether `record` counts: the counter exists and the record is of its generation `G`.
    pub fn counts(&self, record: &SlotRecord) -> bool {
        self.exists() && record.counts_in(self.from)
    }

    /// The generation rankings count its records from; `None` when it does not exist.
    pub fn counts_from(&self) -> Option<HlcTimestamp> {
        self.exists().then_some(self.from)
    }

    /// `(slot, record)` of `records` that count; the others read as 0 / empty.
    pub fn counting<'a>(
        &self,
        records: &'a [(u16, SlotRecord)],
    ) -> impl Iterator<Item = &'a (u16, SlotRecord)> + use<'a> {
        let life = *self;
        records.iter().filter(move |(_, r)| life.counts(r))
    }
}

#[cfg(test)]
mod tests {
    use geocount_model::{CounterDescription, CounterId, CounterType, SlotState};

    use super::*;

    fn at(physical_ms: u64, node: u32) -> HlcTimestamp {
        HlcTimestamp {
            physical_ms,
            logical: 0,
            node,
        }
    }

    fn described(expires_at_ms: Option<u64>) -> VersionedDescription {
        VersionedDescription {
            description: CounterDescription {
                id: CounterId::new("c").unwrap(),
                counter_type: CounterType::Sum,
                number_of_shards: 1,
                base_number_of_shards: 1,
                window_seconds: 300,
                created_at_ms: 1_000,
                generation: HlcTimestamp::default(),
                deleted: false,
                expires_at_ms,
                history: Vec::new(),
                min: None,
                max: None,
            },
            version: at(1_000, 1),
        }
    }

    fn record(value: i64, generation: HlcTimestamp) -> SlotRecord {
        let mut record = SlotRecord::from(SlotState { value, version: 1 });
        record.set_generation(generation);
        record
    }

    fn counted(life: &Life, records: &[(u16, SlotRecord)]) -> Vec<i64> {
        (life.counting(records))
            .map(|(_, r)| r.state.value)
            .collect()
    }

    #[test]
    fn a_counter_neither_described_nor_held_is_unknown_and_one_held_exists() {
        assert_eq!(Life::of(None, &[], 5).presence, Presence::Unknown);
        let records = [(0, record(3, HlcTimestamp::default()))];
        let life = Life::of(None, &records, 5);
        assert!(life.exists());
        assert_eq!(counted(&life, &records), [3]);
        // Described, never written: it exists, and reads 0.
        let life = Life::of(Some(&described(None)), &[], 5);
        assert!(life.exists());
        assert_eq!(life.expires_at_ms, None);
    }

    #[test]
    fn a_reset_counts_only_records_of_its_generation() {
        let reset = described(Some(9_000)).reset(at(2_000, 2));
        let records = [
            (0, record(5, HlcTimestamp::default())),
            (1, record(7, HlcTimestamp::default())),
        ];
        let life = Life::of(Some(&reset), &records, 3_000);
        assert!(life.exists());
        assert!(counted(&life, &records).is_empty(), "wiped by the reset");
        assert_eq!(
            life.expires_at_ms,
            Some(9_000),
            "an expiry still to come is kept"
        );
        let records = [records[0].clone(), (1, record(2, at(2_000, 2)))];
        let life = Life::of(Some(&reset), &records, 3_000);
        assert_eq!(counted(&life, &records), [2], "written after the reset");
        assert_eq!(life.counts_from(), Some(at(2_000, 2)));
    }

    #[test]
    fn a_record_of_a_newer_generation_than_the_description_wipes_older_ones() {
        let records = [
            (0, record(5, HlcTimestamp::default())),
            (1, record(1, at(4_000, 3))),
        ];
        for description in [described(None), described(None).delete(at(2_000, 2))] {
            let life = Life::of(Some(&description), &records, 5_000);
            assert!(life.exists(), "{description:?}");
            assert_eq!(counted(&life, &records), [1]);
            assert_eq!(life.from, at(4_000, 3));
        }
    }

    #[test]
    fn a_deleted_counter_does_not_exist_and_counts_nothing() {
        let deleted = described(None).delete(at(2_000, 2));
        // The owner's zero record of the delete's generation.
        let records = [
            (0, record(5, HlcTimestamp::default())),
            (1, record(0, at(2_000, 2))),
        ];
        let life = Life::of(Some(&deleted), &records, 3_000);
        assert_eq!(life.presence, Presence::Deleted);
        assert!(counted(&life, &records).is_empty());
        assert_eq!(life.counts_from(), None);
        assert_eq!(life.expires_at_ms, None);
    }

    #[test]
    fn an_expiry_passing_by_the_clock_deletes_the_counter() {
        let expiring = described(Some(5_000));
        let records = [(0, record(5, HlcTimestamp::default()))];
        let life = Life::of(Some(&expiring), &records, 4_999);
        assert!(life.exists());
        assert_eq!(life.expires_at_ms, Some(5_000));
        assert_eq!(counted(&life, &records), [5]);
        let life = Life::of(Some(&expiring), &records, 5_000);
        assert_eq!(life.presence, Presence::Expired(5_000));
        assert!(counted(&life, &records).is_empty());
        assert_eq!(life.expires_at_ms, None);
        // Written again after its expiry, in a newer generation: it exists again.
        let records = [records[0].clone(), (1, record(1, at(6_000, 1)))];
        let life = Life::of(Some(&expiring), &records, 7_000);
        assert!(life.exists());
        assert_eq!(counted(&life, &records), [1]);
        assert_eq!(life.expires_at_ms, None, "the expiry passed");
    }
}
