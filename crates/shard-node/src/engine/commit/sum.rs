//! A sum counter's delta in a group: its value, its window's bucket of the second and each
//! level of its history, within the byte budget, all refused before any change if one would
//! overflow.

use geocount_model::{CounterType, Recorded, SlotRecord, Window};

use super::CommitLoop;
use super::group::StagedSlot;
use crate::engine::budget;
use crate::engine::write::WriteRequest;
use crate::error::ShardError;

impl CommitLoop {
    /// Stages `write`'s delta `delta` in `slot` (`committed`: its base record, if any);
    /// `described`: whether the counter will have a description, `grown`: what the group
    /// added to the node before it.
    pub(super) fn stage_delta(
        &mut self,
        slot: &mut StagedSlot,
        committed: Option<&SlotRecord>,
        (write, delta): (&WriteRequest, i64),
        described: bool,
        grown: u64,
    ) -> Result<(), ShardError> {
        let id = write.id.as_str();
        let next = slot.state.apply(delta, self.group_version)?;

        // The hit lands in its own second's bucket of the counter's window.
        let empty = Window::default();
        let base = committed.map_or(&empty, |record| record.window());
        let (second, length) = (write.timestamp_secs, slot.window_seconds);
        let hit = budget::Hit::new(&slot.window, second, length);
        let after = budget::sum_bytes_after(id, base, hit, described)
            + budget::history_bytes_after(&slot.history, committed, second);
        self.budget.check(id, slot.bytes, after, grown)?;
        // Every level's step takes the hit too: refused before any changes if one would
        // overflow.
        slot.check_history(committed, second, delta)?;
        let recorded = slot.window.record(base, second, delta, length)?;
        if recorded == Recorded::TooOld {
            self.shared.metrics.window_too_old.inc();
        }
        slot.record_history(committed, second, delta)?;
        slot.state = next;
        slot.bytes = slot.bytes.max(after);
        // A delta makes a counter no one described a sum, as its record does in later
        // groups: an item for it later in this group is refused like one then, rather than
        // turn it unique and leave this acknowledged delta out of its value.
        slot.known.get_or_insert(CounterType::Sum);
        Ok(())
    }
}
