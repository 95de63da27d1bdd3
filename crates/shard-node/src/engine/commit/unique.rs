//! A unique counter's item in a group: added to the counter's sketch, copied at the group's
//! first item that changes it, within the byte budget.

use geocount_model::{SlotRecord, SlotState};

use super::CommitLoop;
use super::group::StagedSlot;
use crate::engine::budget;
use crate::error::ShardError;

impl CommitLoop {
    /// Stages the item hashed `hash` in counter `id`'s `slot` (`committed`: its base record,
    /// if any); `described`: whether the counter will have a description, `grown`: what the
    /// group added to the node before it. `false` when the sketch already holds the item.
    pub(super) fn stage_item(
        &mut self,
        (id, hash): (&str, u64),
        slot: &mut StagedSlot,
        committed: Option<&SlotRecord>,
        described: bool,
        grown: u64,
    ) -> Result<bool, ShardError> {
        let current = slot
            .sketch
            .as_deref()
            .or_else(|| committed.and_then(|record| record.uniques()));
        if current.is_some_and(|sketch| !sketch.would_change(hash)) {
            return Ok(false);
        }
        let after = budget::unique_bytes_after(id, current, hash, described);
        self.budget.check(id, slot.bytes, after, grown)?;
        slot.bytes = slot.bytes.max(after);
        let sketch = slot.sketch.get_or_insert_with(|| {
            committed
                .and_then(|record| record.uniques().cloned().map(Box::new))
                .unwrap_or_default()
        });
        sketch.add_hash(hash);
        slot.state = SlotState {
            value: sketch.count(),
            version: self.group_version,
        };
        Ok(true)
    }
}
