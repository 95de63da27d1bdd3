//! Restoring this node's own slot after its disk was lost.
//!
//! A node whose data directory is marked for a restore ([`super::recovery`]) asks every process
//! that holds a copy of its slot (its datacenter aggregator, the global aggregator and its
//! peers) for that copy, page by page (`GET /slots/{slot}/copy?from=N`), each page bounded by
//! the client's timeout. Only a source that held the slot whole since it started counts: an
//! aggregator that restarted and has not heard the slot since holds only part of it. The
//! restore waits, retrying, until at least one source has handed over a complete copy from a
//! single process (or, from aggregators holding only some partitions, complete copies that
//! together cover every partition: [`super::coverage`]), then keeps waiting for the others as
//! long as they hand over a page at least every `restore_timeout_ms` ([`super::settle`]), and
//! keeps the highest version of every counter over everything it received.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use geocount_model::role::{GLOBAL_PROCESS, replica_name};
use geocount_model::wire::SlotCopy;
use geocount_model::{Clock, CounterId, Partitions, SlotRecord, max_slot_version};
use geocount_net::HttpClient;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::config::NodeConfig;
use crate::startup::coverage::Coverage;
use crate::startup::settle::LastPage;

/// How long to wait before asking again for a page that failed.
const PAGE_RETRY: Duration = Duration::from_millis(200);

/// How often the log says which sources the restore still waits for.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// One process holding a copy of the slot.
#[derive(Debug, Clone)]
pub struct CopySource {
    /// Its name, for `/healthz` and the log.
    pub name: String,
    /// Where it listens.
    pub address: SocketAddr,
}

/// How far a restore has come, for `/healthz`, the log and the refusals meanwhile.
#[derive(Debug, Default)]
pub struct RestoreProgress {
    restoring: AtomicBool,
    report: Mutex<RestoreReport>,
    last_page: LastPage,
}

/// What `/healthz` shows of a restore.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    /// `waiting for a complete copy`, `gathering copies`, `reading the peers' replicated
    /// logs`, `writing` or `done`.
    pub phase: &'static str,
    /// Counters received so far, over every source.
    pub counters_received: u64,
    /// Distinct counters written to the log so far.
    pub counters_written: u64,
    /// Each source's state.
    pub sources: Vec<SourceProgress>,
}

/// One source's part in a restore.
#[derive(Debug, Clone, Serialize)]
pub struct SourceProgress {
    /// The source's name.
    pub source: String,
    /// `asking`, `complete`, or why its copy does not count yet.
    pub state: String,
    /// Pages received from it.
    pub pages: u64,
    /// Counters received from it.
    pub counters: u64,
}

impl RestoreProgress {
    /// Progress of a restore that is under way (`pending`) or of none.
    pub fn new(pending: bool, sources: &[CopySource]) -> Self {
        let report = RestoreReport {
            phase: if pending {
                "waiting for a complete copy"
            } else {
                "done"
            },
            sources: sources
                .iter()
                .map(|s| SourceProgress {
                    source: s.name.clone(),
                    state: "asking".to_owned(),
                    pages: 0,
                    counters: 0,
                })
                .collect(),
            ..RestoreReport::default()
        };
        Self {
            restoring: AtomicBool::new(pending),
            report: Mutex::new(report),
            last_page: LastPage::default(),
        }
    }

    /// Whether the slot is still being restored (no writes, no reads of it).
    pub fn is_restoring(&self) -> bool {
        self.restoring.load(Ordering::Acquire)
    }

    /// A copy of the report.
    pub fn report(&self) -> RestoreReport {
        self.report.lock().expect("restore report lock").clone()
    }

    /// One line on where the restore stands.
    pub fn summary(&self) -> String {
        let report = self.report();
        let sources: Vec<String> = report
            .sources
            .iter()
            .map(|s| format!("{}: {}", s.source, s.state))
            .collect();
        format!(
            "{}; {} counters received, {} written; sources: {}",
            report.phase,
            report.counters_received,
            report.counters_written,
            sources.join("; ")
        )
    }

    /// Sets the phase.
    pub fn phase(&self, phase: &'static str) {
        self.update(|report| report.phase = phase);
    }

    /// Adds `counters` written.
    pub fn written(&self, counters: u64) {
        self.update(|report| report.counters_written += counters);
    }

    /// The restore is durable: writes and reads are taken from now on.
    pub fn finish(&self) {
        self.phase("done");
        self.restoring.store(false, Ordering::Release);
    }

    fn source_state(&self, index: usize, state: String) {
        self.update(|report| report.sources[index].state = state);
    }

    fn page(&self, index: usize, counters: u64) {
        self.last_page.received();
        self.update(|report| {
            report.counters_received += counters;
            let source = &mut report.sources[index];
            source.pages += 1;
            source.counters += counters;
        });
    }

    fn update(&self, change: impl FnOnce(&mut RestoreReport)) {
        change(&mut self.report.lock().expect("restore report lock"));
    }
}

/// What one restore asks of its sources.
pub struct RestoreRequest {
    /// The slot, e.g. `DC_USA_0_VAL_1`.
    pub slot: String,
    /// Every process holding a copy of it.
    pub sources: Vec<CopySource>,
    /// The peers, which also hold copies of its idempotency keys.
    pub key_sources: Vec<CopySource>,
    /// Its client (each page bounded by the client's timeout).
    pub client: HttpClient,
    /// Once one source handed over a complete copy, how long the others may go without
    /// handing over a page before the restore stops waiting for them
    /// ([`crate::startup::settle`]).
    pub settle: Duration,
    /// How far ahead of this node's clock a restored version may be.
    pub max_clock_skew_ms: u64,
    /// The time seam.
    pub clock: Arc<dyn Clock>,
}

type Merged = Arc<Mutex<HashMap<CounterId, SlotRecord>>>;

/// Gathers the slot from `request.sources` until at least one complete copy arrived, and
/// returns the highest version of every counter received.
pub async fn restore_slot(
    request: Arc<RestoreRequest>,
    progress: Arc<RestoreProgress>,
) -> HashMap<CounterId, SlotRecord> {
    let merged: Merged = Arc::default();
    let mut asks = JoinSet::new();
    for index in 0..request.sources.len() {
        asks.spawn(copy_from(
            request.clone(),
            index,
            progress.clone(),
            merged.clone(),
        ));
    }
    // However long it takes: a node never starts its slot empty on its own.
    let mut report = tokio::time::interval(REPORT_EVERY);
    report.tick().await;
    // The partitions of which complete copies arrived from sources holding only some.
    let mut coverage = Coverage::default();
    loop {
        tokio::select! {
            done = asks.join_next() => match done {
                Some(Ok(None)) => break,
                Some(Ok(Some(partitions))) => {
                    if coverage.add(&partitions) {
                        break;
                    }
                }
                Some(Err(error)) => tracing::error!(%error, "a restore source's task failed"),
                None => {
                    tracing::error!(slot = %request.slot, "no source left to restore from");
                    std::future::pending::<()>().await;
                }
            },
            _ = report.tick() => {
                tracing::warn!(slot = %request.slot, progress = %progress.summary(), "restoring: no source has handed over a complete copy of the slot yet");
            }
        }
    }
    // The others may hold later writes: wait for every source still handing over pages.
    progress.phase("gathering copies");
    let settled = progress.last_page.settled(request.settle);
    tokio::pin!(settled);
    while !asks.is_empty() {
        tokio::select! {
            _ = asks.join_next() => {}
            () = &mut settled => break,
            _ = report.tick() => {
                tracing::info!(slot = %request.slot, progress = %progress.summary(), "restoring: gathering the other sources' copies");
            }
        }
    }
    asks.abort_all();
    std::mem::take(&mut *merged.lock().expect("restore merge lock"))
}

/// Why one attempt at a source's whole copy did not count.
enum Attempt {
    /// The source answered but has not held the slot whole since it started.
    Incomplete,
    /// It did not answer usefully.
    Failed(String),
}

/// Asks source `index` for a whole, complete copy until it hands one over; the partitions it
/// covers when the source holds only some.
async fn copy_from(
    request: Arc<RestoreRequest>,
    index: usize,
    progress: Arc<RestoreProgress>,
    merged: Merged,
) -> Option<Partitions> {
    let source = &request.sources[index];
    loop {
        match whole_copy(&request, index, &progress, &merged).await {
            Ok((counters, partitions)) => {
                let of = partitions.as_ref().map(ToString::to_string);
                tracing::info!(slot = %request.slot, source = %source.name, counters, partitions = ?of, "received a complete copy of the slot");
                progress.source_state(index, "complete".to_owned());
                return partitions;
            }
            Err(Attempt::Incomplete) => {
                progress.source_state(
                    index,
                    "incomplete: it has not held the slot whole since it started".to_owned(),
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(Attempt::Failed(error)) => {
                progress.source_state(index, format!("failing: {error}"));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// One attempt at source `index`'s whole copy, page by page; every page is merged as it comes
/// (a copy's records are real versions of the slot, whatever the attempt's outcome). The
/// counters received, and the partitions the copy holds when not all.
async fn whole_copy(
    request: &RestoreRequest,
    index: usize,
    progress: &RestoreProgress,
    merged: &Merged,
) -> Result<(u64, Option<Partitions>), Attempt> {
    let source = &request.sources[index];
    let mut from = 0u64;
    let mut epoch = None;
    let mut counters = 0u64;
    loop {
        let page = page(request, index, progress, from).await?;
        if page.slot != request.slot {
            return Err(Attempt::Failed(format!("answered slot {:?}", page.slot)));
        }
        if !page.complete {
            return Err(Attempt::Incomplete);
        }
        if *epoch.get_or_insert(page.source_epoch) != page.source_epoch {
            return Err(Attempt::Failed("restarted while its copy was paged".into()));
        }
        let received = page.entries.len() as u64;
        let partitions = page.partitions;
        let refused = merge_page(request, page.entries, merged);
        if refused > 0 {
            tracing::warn!(source = %source.name, refused, "refused restored records: invalid ids or versions beyond the clock");
        }
        counters += received;
        progress.page(index, received);
        match page.next {
            Some(next) if next > from => from = next,
            Some(_) => return Err(Attempt::Failed("its copy's pages do not advance".into())),
            None => return Ok((counters, partitions)),
        }
    }
}

/// One page, asked again until the source answers it: a page that timed out costs that page
/// again, not the whole copy. A source that answers with an error, or with something that is
/// not a copy, ends the attempt.
async fn page(
    request: &RestoreRequest,
    index: usize,
    progress: &RestoreProgress,
    from: u64,
) -> Result<SlotCopy, Attempt> {
    let source = &request.sources[index];
    let url = request.client.url(
        source.address,
        &format!("/slots/{}/copy?from={from}", request.slot),
    );
    loop {
        match request.client.get(&url).await {
            Ok(answer) if answer.status.is_success() => {
                return postcard::from_bytes::<SlotCopy>(&answer.body)
                    .map_err(|e| Attempt::Failed(format!("undecodable copy: {e}")));
            }
            Ok(answer) => {
                return Err(Attempt::Failed(format!(
                    "answered {}: {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                )));
            }
            Err(error) => {
                progress.source_state(index, format!("retrying the page from {from}: {error}"));
                tokio::time::sleep(PAGE_RETRY).await;
            }
        }
    }
}

/// Merges a page's records by version; returns how many were refused.
fn merge_page(
    request: &RestoreRequest,
    entries: Vec<(String, SlotRecord)>,
    merged: &Merged,
) -> usize {
    let max_version = max_slot_version(request.clock.now_unix_ms(), request.max_clock_skew_ms);
    let mut refused = 0;
    let mut merged = merged.lock().expect("restore merge lock");
    for (id, record) in entries {
        // An id no client could have written, or a version no clock made, comes only from a
        // faulty or hostile copy.
        match CounterId::new(id) {
            Ok(id) if record.state.version <= max_version => {
                merged.entry(id).or_default().merge(&record);
            }
            _ => refused += 1,
        }
    }
    refused
}

/// Every process that holds a copy of the node's slot: each replica of its datacenter
/// aggregator and of the global aggregator, and its peers.
pub(crate) fn copy_sources(config: &NodeConfig) -> Vec<CopySource> {
    let aggregators = config.datacenter.aggregators().into_iter().enumerate();
    let mut sources: Vec<CopySource> = aggregators
        .map(|(n, address)| CopySource {
            name: crate::config::aggregator_source(&config.datacenter.name, n),
            address,
        })
        .collect();
    sources.extend(
        config
            .global
            .iter()
            .enumerate()
            .map(|(n, address)| CopySource {
                name: replica_name(GLOBAL_PROCESS, n),
                address: *address,
            }),
    );
    let names = config.slot_names();
    sources.extend(
        config
            .datacenter
            .shards
            .iter()
            .zip(names)
            .enumerate()
            .filter(|(n, _)| *n as u32 != config.slot.index)
            .map(|(_, (address, name))| CopySource {
                name,
                address: *address,
            }),
    );
    sources
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::SlotState;
    use geocount_model::fixtures::FixedClock;

    fn record(value: i64, version: u64) -> SlotRecord {
        SlotState { value, version }.into()
    }

    /// A restored copy can neither pin the slot with a version no clock made nor bring an id
    /// no client could have written; of the rest, the highest version wins.
    #[test]
    fn restored_records_are_fenced_and_merged_by_version() {
        let now = 1_800_000_000_000;
        let request = RestoreRequest {
            slot: "DC_A_VAL_0".into(),
            sources: Vec::new(),
            key_sources: Vec::new(),
            client: HttpClient::new(Duration::from_secs(1)),
            settle: Duration::from_secs(1),
            max_clock_skew_ms: 60_000,
            clock: Arc::new(FixedClock(now)),
        };
        let merged: Merged = Arc::default();
        let newest_allowed = max_slot_version(now, 60_000);
        let refused = merge_page(
            &request,
            vec![
                ("a".into(), record(5, 10)),
                ("pinned".into(), record(1, u64::MAX)),
                ("ahead".into(), record(1, newest_allowed + 1)),
                ("".into(), record(1, 1)),
                ("edge".into(), record(2, newest_allowed)),
            ],
            &merged,
        );
        assert_eq!(refused, 3);
        let refused = merge_page(&request, vec![("a".into(), record(3, 9))], &merged);
        assert_eq!(refused, 0);
        let merged = merged.lock().unwrap();
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[&CounterId::new("a").unwrap()], record(5, 10));
        assert_eq!(
            merged[&CounterId::new("edge").unwrap()],
            record(2, newest_allowed)
        );
    }
}
