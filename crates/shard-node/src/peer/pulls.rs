//! This node's side of the pulls: it pulls each peer's slot (its peer copies, so a peer that
//! loses its disk can restore from them) and new descriptions from its peers and its datacenter
//! aggregator. Learned descriptions go through the commit loop, so they are durable here too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use geocount_model::wire::{Cursor, KeyCopy, KeyPage, Puller, SyncPage, SyncRequest};
use geocount_model::{Clock, SyncSettings, max_slot_version};
use geocount_sync::{DescriptionTable, PageFence, PullSink, SlotCopies, SourceStatus};
use tokio::sync::{Notify, mpsc};

use crate::engine::write::Command;
use crate::health::NodeHealth;
use crate::metrics::{ShardMetrics, SourceLabel};
use crate::peer::key_file::KeyFile;
use crate::peer::keys::PeerKeys;
use crate::storage::Storage;

/// Pulls one source (a peer shard node, or the datacenter aggregator for descriptions only).
pub struct PeerSink {
    label: SourceLabel,
    status: Mutex<SourceStatus>,
    /// The peer copies, and the index of the one slot this source may deliver.
    peer_copies: Option<(Arc<RwLock<SlotCopies>>, u16)>,
    /// The incarnation of the peer last heard (0: none yet).
    incarnation: AtomicU64,
    descriptions: Arc<RwLock<DescriptionTable>>,
    commands: mpsc::Sender<Command>,
    metrics: Arc<ShardMetrics>,
    clock: Arc<dyn Clock>,
    max_clock_skew_ms: u64,
    load: AtomicU64,
    /// For the datacenter aggregator: who this node is in its pulls, and where the conflict it
    /// reports goes.
    announce: Option<(Puller, Arc<NodeHealth>)>,
    /// For a peer: its slot's idempotency keys, handed back to it should it lose its disk.
    keys: Option<Mutex<PeerKeys>>,
    /// Told when `keys` changed, for their key file.
    keys_changed: Notify,
}

impl PeerSink {
    /// A sink for source `name`; the states of its slot (by index in the peer copies) go into
    /// `peer_copies` when given.
    pub fn new(
        name: &str,
        peer_copies: Option<(Arc<RwLock<SlotCopies>>, u16)>,
        descriptions: Arc<RwLock<DescriptionTable>>,
        commands: mpsc::Sender<Command>,
        metrics: Arc<ShardMetrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let label = SourceLabel {
            source: name.to_owned(),
        };
        // Both series exist from the start at 0, so a rate of failures is 0 and not absent.
        drop(metrics.pulls_ok.get_or_create(&label));
        drop(metrics.pulls_failed.get_or_create(&label));
        Self {
            label,
            status: Mutex::new(SourceStatus::new(peer_copies.is_some(), true)),
            peer_copies,
            incarnation: AtomicU64::new(0),
            descriptions,
            commands,
            metrics,
            clock,
            max_clock_skew_ms: SyncSettings::default().max_clock_skew_ms,
            load: AtomicU64::new(u64::MAX),
            announce: None,
            keys: None,
            keys_changed: Notify::new(),
        }
    }

    /// Announces this node as `puller` in every pull, and keeps the conflict the source
    /// reports in `health` (for the datacenter aggregator, which compares incarnations).
    pub fn announcing(mut self, puller: Puller, health: Arc<NodeHealth>) -> Self {
        self.announce = Some((puller, health));
        self
    }

    /// Pulls the peer's idempotency keys into `keys` (empty, or read back from its key file)
    /// and holds them.
    pub fn holding_keys(mut self, keys: PeerKeys) -> Self {
        self.keys = Some(Mutex::new(keys));
        self.status.get_mut().expect("status lock").next.keys = Some(Cursor::Start);
        self
    }

    /// A page of the peer's keys held here: up to `limit` from number `from` on, saying how
    /// far the copy reaches (`None`: this source holds no keys).
    pub fn key_copy(&self, from: u64, limit: usize, source_epoch: u64) -> Option<KeyCopy> {
        let keys = self.keys.as_ref()?.lock().expect("keys lock");
        let (page, next) = keys.copy_page(from, limit);
        Some(KeyCopy {
            slot: self.label.source.clone(),
            keys: page,
            reach: keys.reach(),
            source_epoch,
            next,
        })
    }

    /// Writes the peer's keys held here to `file` as they change, fsynced, until aborted, so
    /// that the copy outlives this node's restart. A write that fails is tried again a second
    /// later.
    pub async fn persist_keys(self: Arc<Self>, mut file: KeyFile, storage: Storage) {
        let Some(keys) = &self.keys else {
            return;
        };
        loop {
            let batch = {
                let keys = keys.lock().expect("keys lock");
                let whole = file.wants_rewrite(keys.len());
                keys.unpersisted(whole).map(|batch| (batch, whole))
            };
            let Some((batch, whole)) = batch else {
                self.keys_changed.notified().await;
                continue;
            };
            let (returned, written) = storage
                .blocking(move || {
                    let written = if whole {
                        file.rewrite(&batch)
                    } else {
                        file.append(&batch)
                    };
                    (file, written.map(|()| batch))
                })
                .await;
            file = returned;
            match written {
                Ok(batch) => keys.lock().expect("keys lock").persisted(&batch),
                Err(error) => {
                    tracing::warn!(source = %self.label.source, %error, "cannot write the peer's idempotency keys to disk; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Refuses descriptions versioned more than `max_clock_skew_ms` ahead of this node's clock
    /// (`sync.max_clock_skew_ms`; its default until set).
    pub fn with_max_clock_skew_ms(mut self, max_clock_skew_ms: u64) -> Self {
        self.max_clock_skew_ms = max_clock_skew_ms;
        self
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        &self.label.source
    }

    /// The write rate the source last reported (`u64::MAX` until it answers).
    pub fn load(&self) -> u64 {
        self.load.load(Ordering::Relaxed)
    }

    /// When (this node's clock) it last had the source's complete state (`None`: never since
    /// it started).
    pub fn complete_as_of_ms(&self) -> Option<u64> {
        self.status.lock().expect("status lock").complete_as_of_ms
    }

    /// How long ago this node last had the source's complete state.
    pub fn staleness_ms(&self) -> Option<u64> {
        let now = self.clock.now_unix_ms();
        self.status.lock().expect("status lock").staleness_ms(now)
    }

    /// The incarnation of the peer last heard (0: none yet).
    pub fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::Relaxed)
    }

    /// The last pull error, if the last pull failed.
    pub fn last_error(&self) -> Option<String> {
        self.status.lock().expect("status lock").last_error.clone()
    }
}

impl PullSink for PeerSink {
    fn request(&self) -> SyncRequest {
        let mut request = self.status.lock().expect("status lock").request();
        request.puller = self.announce.as_ref().map(|(puller, _)| puller.clone());
        request
    }

    fn apply(&self, mut page: SyncPage, sent_at_ms: u64) {
        if self.peer_copies.is_some() && page.source != self.label.source {
            // A node configured for another slot listens at this peer's address.
            let entries = page.slots.as_ref().map_or(0, |p| p.entries.len());
            self.metrics.entries_refused.inc_by(entries as u64);
            let error = format!(
                "answered as {:?}, not {:?}: a node configured for another slot listens there; its pages are refused",
                page.source, self.label.source
            );
            tracing::warn!(source = %self.label.source, %error, "refused a pulled page");
            self.failed(error);
            return;
        }
        if let (Some((peer_copies, slot)), Some(slots)) = (&self.peer_copies, &page.slots) {
            // A peer delivers its own slot only, at versions a clock could have made.
            let fence = PageFence {
                slots: vec![*slot],
                max_version: max_slot_version(self.clock.now_unix_ms(), self.max_clock_skew_ms),
            };
            let merge = peer_copies
                .write()
                .expect("peer copies lock")
                .apply_page(slots, &fence);
            self.metrics.replica_merges.inc_by(merge.changed as u64);
            let refused = merge.refused_slot + merge.refused_version;
            if refused > 0 {
                tracing::warn!(source = %self.label.source, refused_slot = merge.refused_slot, refused_version = merge.refused_version, "refused pulled entries: of a slot this peer does not own, or versioned beyond the clock");
                self.metrics.entries_refused.inc_by(refused as u64);
            }
            // Pulled again until the clock allows them; the copy is not complete meanwhile.
            (self.status.lock().expect("status lock"))
                .refused_ahead_of_clock(merge.refused_version);
            if page.incarnation != 0 {
                self.incarnation.store(page.incarnation, Ordering::Relaxed);
            }
        }
        if let (Some(held), Some(keys)) = (&self.keys, &mut page.keys) {
            // The copy keeps the page's keys as decoded; the rest of the page stays for the
            // cursor.
            let keys = KeyPage {
                keys: std::mem::take(&mut keys.keys),
                ..*keys
            };
            let now_ms = self.clock.now_unix_ms();
            if held.lock().expect("keys lock").take(keys, now_ms) {
                self.keys_changed.notify_one();
            }
        }
        if let Some((puller, health)) = &self.announce {
            self.metrics
                .slot_conflict
                .set(i64::from(page.conflict.is_some()));
            let conflict = page.conflict.clone();
            if health.set_conflict(conflict.clone()) {
                match conflict {
                    Some(conflict) => {
                        tracing::error!(slot = %puller.slot, %conflict, "taking no writes")
                    }
                    None => {
                        tracing::warn!(slot = %puller.slot, "no other process serves the slot any more; taking writes")
                    }
                }
            }
        }
        let mut delivered = true;
        if let Some(descriptions) = &page.descriptions {
            // Refused here, before the commit loop's clock observes them.
            let now_ms = self.clock.now_unix_ms();
            let intake = self
                .descriptions
                .read()
                .expect("descriptions lock")
                .newer_in_page(descriptions, now_ms, self.max_clock_skew_ms);
            intake.warn_refused(&self.label.source);
            self.metrics
                .descriptions_refused
                .inc_by(intake.refused as u64);
            if !intake.taken.is_empty() {
                delivered = self
                    .commands
                    .try_send(Command::Describe(intake.taken))
                    .is_ok();
            }
        }
        let mut status = self.status.lock().expect("status lock");
        let description_cursor = status.next.descriptions;
        status.advance(&page, sent_at_ms, self.clock.now_unix_ms());
        if !delivered {
            // The commit loop was full: ask for these descriptions again next time.
            status.next.descriptions = description_cursor;
        }
        self.load.store(page.load, Ordering::Relaxed);
        self.metrics.pulls_ok.get_or_create(&self.label).inc();
    }

    fn failed(&self, error: String) {
        tracing::debug!(source = %self.label.source, %error, "sync pull failed");
        self.metrics.pulls_failed.get_or_create(&self.label).inc();
        self.status.lock().expect("status lock").last_error = Some(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::VersionedDescription;
    use geocount_model::fixtures::FixedClock;
    use geocount_model::wire::{Cursor, DescriptionPage};

    fn described(id: &str, physical_ms: u64) -> VersionedDescription {
        geocount_model::fixtures::described(id, 2, physical_ms, 1)
    }

    /// Only descriptions within the bound reach the commit loop, whose clock observes them.
    #[test]
    fn descriptions_from_far_ahead_of_the_clock_never_reach_the_commit_loop() {
        let now = 1_800_000_000_000;
        let (commands, mut receiver) = mpsc::channel(4);
        let metrics = Arc::new(ShardMetrics::default());
        let sink = PeerSink::new(
            "DC_A_VAL_1",
            None,
            Arc::default(),
            commands,
            metrics.clone(),
            Arc::new(FixedClock(now)),
        )
        .with_max_clock_skew_ms(1_000);
        let near = described("near", now + 1_000);
        let page = SyncPage {
            source: "DC_A_VAL_1".into(),
            descriptions: Some(DescriptionPage {
                items: vec![described("ahead", now + 1_001), near.clone()],
                next: Cursor::Start,
                caught_up: true,
            }),
            ..SyncPage::default()
        };
        sink.apply(page, now);
        match receiver.try_recv() {
            Ok(Command::Describe(learned)) => assert_eq!(learned, vec![near]),
            other => panic!("expected the near description, got {other:?}"),
        }
        assert_eq!(metrics.descriptions_refused.get(), 1);
    }
}
