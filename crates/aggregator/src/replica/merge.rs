//! The one path a pulled page takes into a [`Replica`] ([`merge_pulled`]): its name checked
//! against its source's, its entries fenced to the slots that source may deliver and to
//! versions the clock allows, merged a run at a time (each change marked for the top-K index),
//! its descriptions taken, and its source's cursors and freshness moved on. Entries refused
//! ahead of the clock hold the source's slot cursor and freshness
//! ([`geocount_sync::SourceStatus::refused_ahead_of_clock`]).

use std::sync::RwLock;

use geocount_model::max_slot_version;
use geocount_model::wire::SyncPage;
use geocount_sync::{PageFence, PageMerge, SlotProcess, SyncError};

use super::Replica;
use super::source::SourceKind;

/// How many pulled entries a merge takes per hold of the replica's write lock: reads wait
/// for one run at most (a few hundred microseconds), not for a whole page.
const MERGE_RUN: usize = 256;

/// What merging one pulled page took in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageIntake {
    /// What its slot entries changed, and those refused.
    pub merge: PageMerge,
    /// Descriptions that changed a copy.
    pub descriptions: usize,
    /// Descriptions refused, versioned more than `sync.max_clock_skew_ms` ahead of the clock.
    pub descriptions_refused: usize,
}

/// Merges `page`, pulled from source `source` with a request sent at `sent_at_ms`, into
/// `replica` at `now_ms`, a run of entries per hold of the write lock so reads wait for one run
/// at most. Each slot the page shows complete is noted, and the source's cursors move on.
///
/// A page answered under another name than the source's (a process configured for another
/// slot or datacenter listens at the address pulled) is refused whole
/// ([`SyncError::WrongSource`]), and nothing of it is merged.
pub fn merge_pulled(
    replica: &RwLock<Replica>,
    source: usize,
    page: &SyncPage,
    sent_at_ms: u64,
    now_ms: u64,
) -> Result<PageIntake, SyncError> {
    let fence = (replica.write().expect("replica lock")).open_page(source, page, now_ms)?;
    let mut merge = PageMerge::default();
    if let Some(slots) = &page.slots {
        for run in slots.entries.chunks(MERGE_RUN) {
            let mut replica = replica.write().expect("replica lock");
            merge += replica.merge_entries(&slots.slot_names, run, &fence);
        }
    }
    let mut replica = replica.write().expect("replica lock");
    replica.close_page(source, page, &fence, merge, sent_at_ms);
    // Descriptions are bounded by the same clock skew as the copies' versions.
    let skew_ms = replica.max_clock_skew_ms;
    let intake = (page.descriptions.as_ref())
        .map(|p| replica.descriptions.apply_page(p, now_ms, skew_ms))
        .unwrap_or_default();
    intake.warn_refused(&page.source);
    replica.note_descriptions(&intake.taken, now_ms);
    replica.sources[source].advance(page, sent_at_ms, now_ms);
    Ok(PageIntake {
        merge,
        descriptions: intake.taken.len(),
        descriptions_refused: intake.refused,
    })
}

impl Replica {
    /// The first step of a page's merge: checks the page's name, notes a shard node's
    /// incarnation, and gives the fence its entries merge under.
    fn open_page(
        &mut self,
        source: usize,
        page: &SyncPage,
        now_ms: u64,
    ) -> Result<PageFence, SyncError> {
        let expected = &self.fences[source];
        if page.source != expected.answers_as {
            return Err(SyncError::WrongSource {
                answered: page.source.clone(),
                expected: expected.answers_as.clone(),
            });
        }
        let fence = PageFence {
            slots: expected.slots.clone(),
            max_version: max_slot_version(now_ms, self.max_clock_skew_ms),
        };
        if expected.kind == SourceKind::Shard
            && let Some(index) = self.copies.slot_index(&page.source)
        {
            let process = SlotProcess {
                incarnation: page.incarnation,
                nonce: page.nonce,
            };
            self.incarnations[index as usize].heard(process, now_ms);
        }
        Ok(fence)
    }

    /// The last step of a page's merge, once every entry merged (`merge`): counts what was
    /// refused past the byte bound and notes each slot the page shows complete.
    fn close_page(
        &mut self,
        source: usize,
        page: &SyncPage,
        fence: &PageFence,
        merge: PageMerge,
        sent_at_ms: u64,
    ) {
        let Some(slots) = &page.slots else {
            return;
        };
        if merge.refused_bytes > 0 {
            // The source's cursor moves past them: the copy lacks them for good.
            self.refusals.entries += merge.refused_bytes as u64;
            self.sources[source].refused_past_bound = true;
            for &index in &fence.slots {
                self.slots[usize::from(index)].refused_past_bound = true;
            }
            tracing::warn!(
                source = %page.source,
                refused = merge.refused_bytes,
                bound = self.refusals.key,
                "refused pulled entries past this aggregator's byte bound; its sums are incomplete"
            );
        }
        if merge.refused_slot + merge.refused_version > 0 {
            tracing::warn!(
                source = %page.source,
                refused_slot = merge.refused_slot,
                refused_version = merge.refused_version,
                "refused pulled entries: of a slot this source does not serve, or versioned beyond the clock"
            );
        }
        // Entries ahead of the clock are pulled again until taken; until then the slots of the
        // source are not complete, so they grow stale.
        self.sources[source].refused_ahead_of_clock(merge.refused_version);
        if !slots.caught_up || self.sources[source].holds_refused() {
            return;
        }
        match self.fences[source].kind {
            SourceKind::Shard => {
                // Its own slot, complete as of when the pull was sent.
                if let Some(index) = self.copies.slot_index(&page.source)
                    && fence.slots.contains(&index)
                {
                    self.slots[index as usize].heard(sent_at_ms, page.incarnation);
                }
            }
            SourceKind::Aggregator => {
                // Each slot as complete as the aggregator's copy of it.
                for freshness in &page.freshness {
                    if let Some(index) = self.copies.slot_index(&freshness.slot)
                        && fence.slots.contains(&index)
                    {
                        self.slots[index as usize].source_incomplete = freshness.incomplete;
                    }
                    if let (Some(index), Some(staleness)) = (
                        self.copies.slot_index(&freshness.slot),
                        freshness.staleness_ms,
                    ) && fence.slots.contains(&index)
                    {
                        self.slots[index as usize].heard(
                            sent_at_ms.saturating_sub(staleness),
                            freshness.owner_incarnation,
                        );
                    }
                }
            }
        }
    }
}
