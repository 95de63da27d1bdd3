//! `GET /slots/{slot}/copy` answers (postcard `SlotCopy`), decoded as a shard node restoring
//! its slot does, fenced and merged by version as `restore::restore_slot` does, installed in a
//! slot table and taken on by the owner: its next writes, reads, and the pages it serves (of
//! every counter, and of the partitions the copy names).

use std::collections::HashMap;

use crate::{NOW_MS, drive_record, round_trip};
use geocount_aggregator::replica::DEFAULT_MAX_CLOCK_SKEW_MS;
use geocount_model::wire::{Cursor, SlotCopy};
use geocount_model::{CounterId, SlotRecord, max_slot_version};
use shard_node::engine::slot_table::SlotTable;

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let Ok(copy) = postcard::from_bytes::<SlotCopy>(data) else {
        return false;
    };
    round_trip(&copy);
    let mut restored: HashMap<String, SlotRecord> = HashMap::new();
    for (id, record) in copy.entries.iter().chain(&copy.entries) {
        restored.entry(id.clone()).or_default().merge(record);
    }
    let max_version = max_slot_version(NOW_MS, DEFAULT_MAX_CLOCK_SKEW_MS);
    let mut table = SlotTable::default();
    for (id, record) in &restored {
        drive_record(record);
        // An id no client could have written, or a version no clock made, is refused before
        // any table sees it.
        let Ok(id) = CounterId::new(id.as_str()) else {
            continue;
        };
        if record.state.version <= max_version {
            table.merge(&id, record);
        }
    }
    let _ = table.max_version();
    for partitions in [None, copy.partitions.as_ref()] {
        let mut cursor = Cursor::Start;
        for _ in 0..4 {
            let page = table.page(&copy.slot, cursor, 2, partitions);
            round_trip(&page);
            cursor = page.next;
            if page.caught_up {
                break;
            }
        }
    }
    true
}
