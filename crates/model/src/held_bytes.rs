//! Estimates of the memory a counter's state holds, in bytes: what the byte limits count
//! (`shard.max_counter_bytes`, `shard.max_state_bytes`, `aggregator.*_max_state_bytes`).
//!
//! They count what grows with use (window buckets, sketch registers, ids) plus a fixed cost per
//! record and per description for its table entry. They follow lengths, not allocator
//! capacities, so the same state always estimates the same, after a restart too, and each is
//! O(1): the write path keeps its totals incrementally rather than by a scan.

use crate::unique::{REGISTERS, SPARSE_MAX};
use crate::{SlotRecord, UniqueSketch};

/// One slot record and its place in a table (its index entry, change sequence and slot tag).
pub const RECORD_BYTES: usize = 64;

/// One bucket of a rolling window: its second and its hits.
pub const BUCKET_BYTES: usize = 16;

/// One level of a slot's history beside its buckets (its step, keep and bucket list), and the
/// box its record's history and generation share.
pub const ROLLUP_BYTES: usize = 32;

/// One register set in a sparse sketch: `(register, rank)`, padded.
pub const SPARSE_REGISTER_BYTES: usize = 4;

/// A sketch's own block (its registers aside).
pub const SKETCH_BYTES: usize = std::mem::size_of::<UniqueSketch>();

/// A counter id's table key, besides its characters.
pub const ID_BYTES: usize = 32;

/// A counter's description and its table entry, besides its id's characters.
pub const DESCRIPTION_BYTES: usize = 96;

/// A window of `buckets` buckets, beyond its record.
pub fn window_bytes(buckets: usize) -> usize {
    buckets.saturating_mul(BUCKET_BYTES)
}

/// A sketch with `registers_set` registers above 0, stored dense or sparse.
pub fn sketch_bytes(registers_set: usize, dense: bool) -> usize {
    SKETCH_BYTES
        + if dense {
            REGISTERS
        } else {
            registers_set * SPARSE_REGISTER_BYTES
        }
}

/// `sketch`, as held.
pub fn held_sketch_bytes(sketch: &UniqueSketch) -> usize {
    sketch_bytes(sketch.registers_set(), sketch.is_dense())
}

/// `sketch` once the item with hash `hash` is added: one more register set, and dense once
/// the sparse pairs would pass [`SPARSE_MAX`].
pub fn sketch_bytes_after(sketch: &UniqueSketch, hash: u64) -> usize {
    if !sketch.sets_register(hash) {
        return held_sketch_bytes(sketch);
    }
    let set = sketch.registers_set() + 1;
    sketch_bytes(set, sketch.is_dense() || set > SPARSE_MAX)
}

/// A record holding `window_buckets` buckets or a sketch of `sketch` bytes.
pub fn record_bytes_of(window_buckets: usize, sketch: usize) -> usize {
    RECORD_BYTES + window_bytes(window_buckets) + sketch
}

/// A history of `levels` levels holding `buckets` buckets in all, beyond its record.
pub fn history_bytes(levels: usize, buckets: usize) -> usize {
    levels
        .saturating_mul(ROLLUP_BYTES)
        .saturating_add(buckets.saturating_mul(BUCKET_BYTES))
}

/// The most a slot's history of `levels` holds, every bucket of every level filled.
pub fn full_history_bytes(levels: &[crate::HistoryLevel]) -> usize {
    let buckets = levels.iter().map(|level| level.buckets() as usize).sum();
    history_bytes(levels.len(), buckets)
}

/// `record`, as held: its window's buckets or its sketch, and its history.
pub fn record_bytes(record: &SlotRecord) -> usize {
    let sketch = record.uniques().map_or(0, held_sketch_bytes);
    let history = record.history();
    let buckets = history.iter().map(|r| r.buckets.buckets().len()).sum();
    record_bytes_of(record.window().buckets().len(), sketch)
        + history_bytes(history.len(), buckets)
        + record.rights().held_bytes()
}

/// Counter id `id` as a table key.
pub fn id_bytes(id: &str) -> usize {
    ID_BYTES + id.len()
}

/// The description of counter `id`.
pub fn description_bytes(id: &str) -> usize {
    DESCRIPTION_BYTES + id.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SlotState, Window};

    fn state() -> SlotState {
        SlotState {
            value: 1,
            version: 1,
        }
    }

    #[test]
    fn a_sum_counts_its_record_and_each_window_bucket() {
        let empty = SlotRecord::from(state());
        assert_eq!(record_bytes(&empty), RECORD_BYTES);
        let mut window = Window::default();
        for second in 1_000..1_000 + 3_600 {
            window.record(second, 1, 3_600).unwrap();
        }
        let full = SlotRecord::sum(state(), window);
        assert_eq!(record_bytes(&full), RECORD_BYTES + 3_600 * BUCKET_BYTES);
        assert_eq!(record_bytes(&full), 57_664, "the longest window, 3,600 s");
    }

    #[test]
    fn a_unique_counter_counts_its_sketch_sparse_then_dense() {
        let mut sketch = UniqueSketch::new();
        assert_eq!(held_sketch_bytes(&sketch), SKETCH_BYTES);
        let mut item = 0u64;
        while sketch.registers_set() < 10 {
            let hash = crate::unique::hash_item(&item.to_string());
            let predicted = sketch_bytes_after(&sketch, hash);
            sketch.add_hash(hash);
            assert_eq!(held_sketch_bytes(&sketch), predicted, "item {item}");
            item += 1;
        }
        assert_eq!(
            held_sketch_bytes(&sketch),
            SKETCH_BYTES + 10 * SPARSE_REGISTER_BYTES
        );
        // Each prediction holds across the switch to dense registers too.
        while !sketch.is_dense() {
            let hash = crate::unique::hash_item(&item.to_string());
            let predicted = sketch_bytes_after(&sketch, hash);
            sketch.add_hash(hash);
            assert_eq!(held_sketch_bytes(&sketch), predicted, "item {item}");
            item += 1;
        }
        assert_eq!(held_sketch_bytes(&sketch), SKETCH_BYTES + REGISTERS);
        let record = SlotRecord::unique(state(), Box::new(sketch));
        assert_eq!(
            record_bytes(&record),
            RECORD_BYTES + SKETCH_BYTES + REGISTERS
        );
    }

    #[test]
    fn a_window_change_says_which_hits_add_a_bucket() {
        let mut base = Window::default();
        base.record(100, 1, 60).unwrap();
        let mut change = crate::WindowChange::new(&base);
        assert!(!change.would_add(&base, 100, 60), "held");
        assert!(!change.would_add(&base, 40, 60), "too old for the window");
        assert!(change.would_add(&base, 101, 60));
        change.record(&base, 101, 1, 60).unwrap();
        change.record(&base, 100, 1, 60).unwrap();
        assert!(!change.would_add(&base, 101, 60), "changed already");
        assert_eq!(change.added(), 1);
    }

    #[test]
    fn ids_and_descriptions_count_their_characters() {
        assert_eq!(id_bytes("abc"), ID_BYTES + 3);
        assert_eq!(description_bytes(&"x".repeat(256)), DESCRIPTION_BYTES + 256);
    }
}
