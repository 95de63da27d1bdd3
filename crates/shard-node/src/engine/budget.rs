//! The bytes of state a node holds, and the two bounds on them: one counter's state
//! (`shard.max_counter_bytes`) and the node's whole (`shard.max_state_bytes`).
//!
//! The total is derived from the state at startup (one pass over what recovery loaded, so a
//! crash can never leave it out of step with the state) and then kept by the commit loop as
//! each durable group changes rows and descriptions: the write path never scans. Sizes are the
//! estimates of [`geocount_model::held_bytes`].

use geocount_model::held_bytes::{
    description_bytes, history_bytes, id_bytes, record_bytes, record_bytes_of, sketch_bytes_after,
};
use geocount_model::{RollupChange, ShardDefaults, SlotRecord, UniqueSketch, Window, WindowChange};
use geocount_sync::DescriptionTable;

use crate::engine::slot_table::SlotTable;
use crate::error::ShardError;

/// What the node holds against its byte bounds.
#[derive(Debug, Clone)]
pub struct ByteBudget {
    held: u64,
    max_counter: u64,
    max_state: u64,
}

/// The bytes counter `id`'s row holds in the slot table: its id and its record.
pub fn row_bytes(id: &str, record: &SlotRecord) -> u64 {
    (id_bytes(id) + record_bytes(record)) as u64
}

/// A hit about to be staged for a sum counter: the group's changes to its window so far, the
/// hit's second and the window's length.
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    change: &'a WindowChange,
    second: u64,
    length: u32,
}

impl<'a> Hit<'a> {
    /// A hit at `second` for a window of `length` seconds changed so far by `change`.
    pub fn new(change: &'a WindowChange, second: u64, length: u32) -> Self {
        Self {
            change,
            second,
            length,
        }
    }
}

/// What sum counter `id` holds once `hit` is staged against its committed window `base`
/// (buckets about to expire still counted): its row, and its description if `described`.
pub fn sum_bytes_after(id: &str, base: &Window, hit: Hit<'_>, described: bool) -> u64 {
    let new = hit.change.would_add(base, hit.second, hit.length);
    let buckets = base.buckets().len() + hit.change.added() + usize::from(new);
    counter_bytes(id, record_bytes_of(buckets, 0), described)
}

/// What a sum counter's history holds once a hit at `second` is staged in every level of
/// `changes` against the committed record `committed` (buckets about to expire still counted).
pub fn history_bytes_after(
    changes: &[RollupChange],
    committed: Option<&SlotRecord>,
    second: u64,
) -> u64 {
    let buckets = (changes.iter())
        .map(|change| {
            let step = change.level.step_seconds;
            let base = committed.and_then(|record| record.rollup(step));
            let base = base.map_or(&Window::EMPTY, |rollup| &rollup.buckets);
            let new = change.would_add(base, second);
            base.buckets().len() + change.buckets.added() + usize::from(new)
        })
        .sum();
    history_bytes(changes.len(), buckets) as u64
}

/// What unique counter `id` holds once the item with hash `hash` is added to its sketch
/// `current` (none yet: an empty one): its row, and its description if `described`.
pub fn unique_bytes_after(
    id: &str,
    current: Option<&UniqueSketch>,
    hash: u64,
    described: bool,
) -> u64 {
    let sketch = match current {
        Some(sketch) => sketch_bytes_after(sketch, hash),
        None => sketch_bytes_after(&UniqueSketch::new(), hash),
    };
    counter_bytes(id, record_bytes_of(0, sketch), described)
}

/// Counter `id` with a record of `record` bytes, and its description if `described`.
fn counter_bytes(id: &str, record: usize, described: bool) -> u64 {
    let description = if described { description_bytes(id) } else { 0 };
    (id_bytes(id) + record + description) as u64
}

impl ByteBudget {
    /// The budget of a node holding `table` and `descriptions` (as recovered).
    pub fn recovered(
        table: &SlotTable,
        descriptions: &DescriptionTable,
        settings: &ShardDefaults,
    ) -> Self {
        let rows: u64 = table.iter().map(|(id, record)| row_bytes(id, record)).sum();
        let described: u64 = descriptions
            .iter()
            .map(|(id, _)| description_bytes(id) as u64)
            .sum();
        Self {
            held: rows + described,
            max_counter: settings.max_counter_bytes,
            max_state: settings.max_state_bytes,
        }
    }

    /// The bytes held now (durable state only).
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Refuses (507) a change growing counter `id` from `before` to `after` bytes while the
    /// group staged so far grows the node by `staged`: past `shard.max_counter_bytes` for the
    /// counter, or past `shard.max_state_bytes` for the node. A change that grows nothing is
    /// never refused, so counters at their bound keep taking writes that fit in what they hold.
    pub fn check(&self, id: &str, before: u64, after: u64, staged: u64) -> Result<(), ShardError> {
        if after <= before {
            return Ok(());
        }
        if after > self.max_counter {
            return Err(ShardError::CounterBytes {
                id: id.to_owned(),
                bytes: after,
                limit: self.max_counter,
            });
        }
        self.check_growth(after - before, staged)
    }

    /// Refuses (507) growing the node by `bytes` more while the group staged so far grows it
    /// by `staged`, past `shard.max_state_bytes`.
    pub fn check_growth(&self, bytes: u64, staged: u64) -> Result<(), ShardError> {
        let held = self.held.saturating_add(staged);
        if held.saturating_add(bytes) > self.max_state {
            return Err(ShardError::StateBytes {
                held,
                limit: self.max_state,
            });
        }
        Ok(())
    }

    /// Notes a durable change of one row from `before` to `after` bytes.
    pub fn changed(&mut self, before: u64, after: u64) {
        self.held = self.held.saturating_sub(before).saturating_add(after);
    }

    /// Notes `bytes` more held durably (a new description).
    pub fn add(&mut self, bytes: u64) {
        self.held = self.held.saturating_add(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::SlotState;

    fn budget(max_counter: u64, max_state: u64) -> ByteBudget {
        ByteBudget {
            held: 0,
            max_counter,
            max_state,
        }
    }

    #[test]
    fn growth_past_either_bound_is_refused_and_shrinking_never_is() {
        let mut b = budget(1_000, 5_000);
        assert!(b.check("c", 0, 1_000, 0).is_ok());
        let refused = b.check("c", 900, 1_001, 0).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("shard.max_counter_bytes (1000)")
        );
        // A counter already past a bound lowered since keeps what fits in what it holds.
        assert!(b.check("c", 2_000, 2_000, 0).is_ok());
        b.changed(0, 4_500);
        assert!(b.check("d", 0, 400, 100).is_ok());
        let refused = b.check("d", 0, 401, 100).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("shard.max_state_bytes (5000) reached: this node holds 4600 bytes"),
            "{refused}"
        );
        assert!(b.check_growth(501, 0).is_err());
        b.changed(4_500, 100);
        assert_eq!(b.held(), 100);
    }

    #[test]
    fn a_hit_in_a_new_second_grows_a_sum_by_one_bucket() {
        let mut base = Window::default();
        base.record(1_000, 1, 60).unwrap();
        let change = WindowChange::new(&base);
        let held = sum_bytes_after("c", &base, Hit::new(&change, 1_000, 60), false);
        let grown = sum_bytes_after("c", &base, Hit::new(&change, 1_001, 60), true);
        assert_eq!(held, (id_bytes("c") + record_bytes_of(1, 0)) as u64);
        assert_eq!(
            grown,
            held + (geocount_model::held_bytes::BUCKET_BYTES + description_bytes("c")) as u64
        );
    }

    #[test]
    fn an_item_grows_a_unique_counter_by_its_register() {
        let hash = geocount_model::unique::hash_item("x");
        let first = unique_bytes_after("u", None, hash, true);
        let mut sketch = UniqueSketch::new();
        sketch.add_hash(hash);
        let record = SlotRecord::unique(SlotState::default(), Box::new(sketch.clone()));
        assert_eq!(
            first,
            row_bytes("u", &record) + description_bytes("u") as u64
        );
        assert_eq!(
            unique_bytes_after("u", Some(&sketch), hash, true),
            first,
            "the same item again"
        );
    }

    #[test]
    fn a_row_counts_its_id_and_record() {
        let record = SlotRecord::from(SlotState {
            value: 1,
            version: 1,
        });
        assert_eq!(
            row_bytes("abc", &record),
            (id_bytes("abc") + record_bytes(&record)) as u64
        );
    }
}
