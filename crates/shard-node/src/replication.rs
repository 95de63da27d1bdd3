//! This node's side of replication: it pulls each peer's slot (its replicas, so a peer that
//! loses its disk can restore from them) and new descriptions from its peers and its datacenter
//! aggregator. Learned descriptions go through the commit loop, so they are durable here too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use geocount_model::Clock;
use geocount_model::wire::{SyncPage, SyncRequest};
use geocount_sync::{DescriptionTable, PullSink, SlotCopies, SourceStatus};
use tokio::sync::mpsc;

use crate::commit::Command;
use crate::metrics::{ShardMetrics, SourceLabel};

/// Pulls one source (a peer shard node, or the datacenter aggregator for descriptions only).
pub struct PeerSink {
    label: SourceLabel,
    status: Mutex<SourceStatus>,
    replicas: Option<Arc<RwLock<SlotCopies>>>,
    descriptions: Arc<RwLock<DescriptionTable>>,
    commands: mpsc::Sender<Command>,
    metrics: Arc<ShardMetrics>,
    clock: Arc<dyn Clock>,
    load: AtomicU64,
}

impl PeerSink {
    /// A sink for source `name`; slot states go into `replicas` when given.
    pub fn new(
        name: &str,
        replicas: Option<Arc<RwLock<SlotCopies>>>,
        descriptions: Arc<RwLock<DescriptionTable>>,
        commands: mpsc::Sender<Command>,
        metrics: Arc<ShardMetrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            label: SourceLabel {
                source: name.to_owned(),
            },
            status: Mutex::new(SourceStatus::new(replicas.is_some(), true)),
            replicas,
            descriptions,
            commands,
            metrics,
            clock,
            load: AtomicU64::new(u64::MAX),
        }
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        &self.label.source
    }

    /// The write rate the source last reported (`u64::MAX` until it answers).
    pub fn load(&self) -> u64 {
        self.load.load(Ordering::Relaxed)
    }

    /// How long ago this node last had the source's complete state.
    pub fn staleness_ms(&self) -> Option<u64> {
        let now = self.clock.now_unix_ms();
        self.status.lock().expect("status lock").staleness_ms(now)
    }

    /// The last pull error, if the last pull failed.
    pub fn last_error(&self) -> Option<String> {
        self.status.lock().expect("status lock").last_error.clone()
    }
}

impl PullSink for PeerSink {
    fn request(&self) -> SyncRequest {
        self.status.lock().expect("status lock").request()
    }

    fn apply(&self, page: SyncPage, sent_at_ms: u64) {
        if let (Some(replicas), Some(slots)) = (&self.replicas, &page.slots) {
            let merged = replicas.write().expect("replicas lock").apply_page(slots);
            self.metrics.replica_merges.inc_by(merged as u64);
        }
        let mut delivered = true;
        if let Some(descriptions) = &page.descriptions {
            let newer = self
                .descriptions
                .read()
                .expect("descriptions lock")
                .newer_in_page(descriptions);
            if !newer.is_empty() {
                delivered = self.commands.try_send(Command::Describe(newer)).is_ok();
            }
        }
        let mut status = self.status.lock().expect("status lock");
        let description_cursor = status.descriptions;
        status.advance(&page, sent_at_ms, self.clock.now_unix_ms());
        if !delivered {
            // The commit loop was full: ask for these descriptions again next time.
            status.descriptions = description_cursor;
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
