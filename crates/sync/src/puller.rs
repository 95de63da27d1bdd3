//! The pull loop: asks a source for what changed since its cursors, hands each page to a sink,
//! and keeps track of how fresh the source's copy is.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use geocount_model::Clock;
use geocount_model::wire::{Cursor, POSTCARD_CONTENT_TYPE, SyncPage, SyncRequest};
use geocount_net::HttpClient;
use hyper::Method;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::error::SyncError;

/// What a puller feeds.
pub trait PullSink: Send + Sync + 'static {
    /// The request to send next (the sink's cursors).
    fn request(&self) -> SyncRequest;
    /// Merges a page pulled with a request sent at `sent_at_ms`.
    fn apply(&self, page: SyncPage, sent_at_ms: u64);
    /// Records a failed pull.
    fn failed(&self, error: String);
}

/// Pulls `{scheme}://{source}/sync` (the client's scheme) into `sink`, starting a pull every
/// `interval` (at once again while the source has more pages), until the returned task is
/// aborted.
///
/// Pulls start at a fixed rate rather than an interval after the last one ended: a change then
/// waits at most `interval` for the next pull to start, however long pulls take under load. A
/// pull that overruns its interval is followed by the next at once, not by a burst of missed
/// ones.
pub fn spawn_puller(
    source: String,
    interval: Duration,
    client: HttpClient,
    clock: Arc<dyn Clock>,
    sink: Arc<dyn PullSink>,
) -> JoinHandle<()> {
    let url = client.url(&source, "/sync");
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut more = false;
        loop {
            if !more {
                ticks.tick().await;
            }
            more = false;
            let sent_at_ms = clock.now_unix_ms();
            match pull(&client, &url, &sink.request()).await {
                Ok(page) => {
                    more = has_more(&page);
                    sink.apply(page, sent_at_ms);
                }
                Err(error) => sink.failed(error.to_string()),
            }
        }
    })
}

/// Whether the source has more pages than `page`: of slots, descriptions or keys.
fn has_more(page: &SyncPage) -> bool {
    page.slots.as_ref().is_some_and(|p| !p.caught_up)
        || page.descriptions.as_ref().is_some_and(|p| !p.caught_up)
        || page.keys.as_ref().is_some_and(|p| !p.caught_up)
}

/// Sends `request` to `url` and decodes the page it answers.
async fn pull(
    client: &HttpClient,
    url: &str,
    request: &SyncRequest,
) -> Result<SyncPage, SyncError> {
    let body = Bytes::from(postcard::to_allocvec(request).map_err(SyncError::Encode)?);
    let headers = [("content-type", POSTCARD_CONTENT_TYPE)];
    let answer = client.send(Method::POST, url, &headers, body).await?;
    if !answer.status.is_success() {
        return Err(SyncError::Refused {
            url: url.to_owned(),
            status: answer.status,
            body: String::from_utf8_lossy(&answer.body).into_owned(),
        });
    }
    postcard::from_bytes::<SyncPage>(&answer.body).map_err(|error| SyncError::Undecodable {
        url: url.to_owned(),
        error,
    })
}

/// The worst of several stalenesses: `None` (never complete) if any is `None`, else the largest
/// (0 for none at all).
pub fn worst_staleness(staleness: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
    staleness
        .into_iter()
        .try_fold(0u64, |worst, s| s.map(|s| worst.max(s)))
}

/// A puller's view of one source: its cursors and how fresh the copy of it is.
#[derive(Debug, Clone, Default)]
pub struct SourceStatus {
    /// The next pull: a cursor per stream pulled (slot states, descriptions, and the
    /// idempotency keys a shard node's peers pull), and the partitions asked for.
    pub next: SyncRequest,
    /// When (this node's clock, unix ms) the copy was last complete: every stream caught up,
    /// and for an aggregator source every one of its slots heard.
    pub complete_as_of_ms: Option<u64>,
    /// When the source last answered.
    pub last_heard_ms: Option<u64>,
    /// The last pull failure, cleared by the next success.
    pub last_error: Option<String>,
    /// The source's reported write rate.
    pub load: u64,
    /// Set once this process refused entries of the source past its byte bound: its copy
    /// lacks them, so it is never complete again (until the process restarts).
    pub refused_past_bound: bool,
    /// Whether the source's last page said it holds some of its slots incompletely (it refused
    /// entries past its own byte bound).
    pub source_incomplete: bool,
    /// Where the slot stream goes back to once this pass reaches the source's newest change:
    /// the cursor of the first page whose entries the clock fence refused in this pass.
    held_slots: Option<Cursor>,
    /// Entries the clock fence refused in this pass.
    refused_this_pass: u64,
    /// Entries the clock fence refused in the last pass that reached the source's newest
    /// change (0: none).
    refused_last_pass: u64,
}

impl SourceStatus {
    /// A status pulling slot states and/or descriptions from the start.
    pub fn new(slots: bool, descriptions: bool) -> Self {
        Self::asking(SyncRequest::from_start(slots, descriptions))
    }

    /// A status whose first pull is `first`.
    pub fn asking(first: SyncRequest) -> Self {
        Self {
            next: first,
            ..Self::default()
        }
    }

    /// The next request.
    pub fn request(&self) -> SyncRequest {
        self.next.clone()
    }

    /// Notes that the clock fence refused `entries` of the page about to pass
    /// ([`advance`](Self::advance)): versioned further ahead of this process's clock than
    /// `sync.max_clock_skew_ms`. The pass goes on to the source's newest change, then the
    /// slot stream goes back to this page, so the refused entries are pulled again until the
    /// clock allows them; meanwhile the copy is not complete, so it grows stale.
    pub fn refused_ahead_of_clock(&mut self, entries: usize) {
        if entries == 0 {
            return;
        }
        if self.held_slots.is_none() {
            self.held_slots = self.next.slots;
        }
        self.refused_this_pass += entries as u64;
    }

    /// Entries the clock fence refused in this pass, or else in the last one that reached
    /// the source's newest change: they are pulled again until taken (0: none).
    pub fn refused_ahead(&self) -> u64 {
        self.refused_this_pass.max(self.refused_last_pass)
    }

    /// Whether this pass refused entries ahead of the clock: it will not make the copy
    /// complete.
    pub fn holds_refused(&self) -> bool {
        self.held_slots.is_some()
    }

    /// Moves the cursors past `page` (already merged) and updates freshness. The copy is as
    /// fresh as the moment the request was sent, less the source's own staleness.
    pub fn advance(&mut self, page: &SyncPage, sent_at_ms: u64, now_ms: u64) {
        let mut caught_up = true;
        if let (Some(cursor), Some(p)) = (&mut self.next.slots, &page.slots) {
            *cursor = p.next;
            caught_up &= p.caught_up;
            if p.caught_up {
                // The pass is over: it starts again where entries were refused, if any were.
                self.refused_last_pass = std::mem::take(&mut self.refused_this_pass);
                if let Some(held) = self.held_slots.take() {
                    *cursor = held;
                    caught_up = false;
                }
            }
        }
        if let (Some(cursor), Some(p)) = (&mut self.next.descriptions, &page.descriptions) {
            *cursor = p.next;
            caught_up &= p.caught_up;
        }
        match (&mut self.next.keys, &page.keys) {
            (Some(cursor), Some(p)) => {
                *cursor = p.next;
                caught_up &= p.caught_up;
            }
            // Keys asked of a source that does not keep them: the copy is not whole.
            (Some(_), None) => caught_up = false,
            _ => {}
        }
        self.last_heard_ms = Some(now_ms);
        self.last_error = None;
        self.load = page.load;
        self.source_incomplete = page.freshness.iter().any(|f| f.incomplete);
        let source_staleness = worst_staleness(page.freshness.iter().map(|f| f.staleness_ms));
        if let (true, Some(behind)) = (caught_up, source_staleness) {
            let as_of = sent_at_ms.saturating_sub(behind);
            self.complete_as_of_ms = Some(self.complete_as_of_ms.map_or(as_of, |t| t.max(as_of)));
        }
    }

    /// How long ago the copy was complete (`None`: never, or it is incomplete now).
    pub fn staleness_ms(&self, now_ms: u64) -> Option<u64> {
        if self.is_incomplete() {
            return None;
        }
        self.complete_as_of_ms.map(|t| now_ms.saturating_sub(t))
    }

    /// Whether the copy lacks entries refused past a byte bound, here or at the source.
    pub fn is_incomplete(&self) -> bool {
        self.refused_past_bound || self.source_incomplete
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::wire::Cursor;
    use geocount_model::wire::{SlotFreshness, SlotPage};

    /// A page of keys behind the owner's newest is followed at once by the next, as pages of
    /// slots and descriptions are: otherwise a peer's copy of keys written faster than a page
    /// per pull interval falls further behind at every pull.
    #[test]
    fn keys_behind_are_pulled_again_at_once() {
        use geocount_model::wire::KeyPage;
        let keys = |caught_up| KeyPage {
            keys: Vec::new(),
            next: Cursor::Start,
            caught_up,
            whole: true,
            reach: 0,
        };
        let page = |caught_up| SyncPage {
            keys: Some(keys(caught_up)),
            ..SyncPage::default()
        };
        assert!(has_more(&page(false)));
        assert!(!has_more(&page(true)));
        assert!(!has_more(&SyncPage::default()));
    }

    #[test]
    fn the_worst_staleness_is_never_when_any_is_never() {
        assert_eq!(worst_staleness([Some(5), Some(80), Some(3)]), Some(80));
        assert_eq!(worst_staleness([Some(5), None]), None);
        assert_eq!(worst_staleness([]), Some(0));
    }

    #[test]
    fn freshness_counts_the_source_staleness_and_never_goes_back() {
        let mut status = SourceStatus::new(true, false);
        let page = |caught_up, staleness: Vec<Option<u64>>| SyncPage {
            slots: Some(SlotPage {
                caught_up,
                next: Cursor::Seq { epoch: 1, seq: 5 },
                ..SlotPage::default()
            }),
            freshness: staleness
                .into_iter()
                .map(|s| SlotFreshness {
                    slot: "s".into(),
                    staleness_ms: s,
                    owner_incarnation: 0,
                    incomplete: false,
                })
                .collect(),
            ..SyncPage::default()
        };
        status.advance(&page(false, vec![]), 1000, 1001);
        assert_eq!(
            status.staleness_ms(2000),
            None,
            "not complete until caught up"
        );
        assert_eq!(status.next.slots, Some(Cursor::Seq { epoch: 1, seq: 5 }));
        status.advance(&page(true, vec![Some(30), Some(70)]), 1000, 1001);
        assert_eq!(status.staleness_ms(2000), Some(1070));
        status.advance(&page(true, vec![Some(10), None]), 1500, 1501);
        assert_eq!(
            status.staleness_ms(2000),
            Some(1070),
            "a slot never heard keeps it incomplete"
        );
        status.advance(&page(true, vec![Some(900)]), 1500, 1501);
        assert_eq!(
            status.staleness_ms(2000),
            Some(1070),
            "never older than before"
        );
        let mut over = page(true, vec![Some(10)]);
        over.freshness[0].incomplete = true;
        status.advance(&over, 1900, 1901);
        assert_eq!(status.staleness_ms(2000), None, "a source over its bound");
        status.advance(&page(true, vec![Some(10)]), 1900, 1901);
        assert_eq!(status.staleness_ms(2000), Some(110), "complete again");
        status.refused_past_bound = true;
        assert_eq!(status.staleness_ms(2000), None, "refused here");
    }

    #[test]
    fn entries_refused_ahead_of_the_clock_hold_the_cursor_and_freshness() {
        let mut status = SourceStatus::new(true, false);
        let page = |seq, caught_up| SyncPage {
            slots: Some(SlotPage {
                caught_up,
                next: Cursor::Seq { epoch: 1, seq },
                ..SlotPage::default()
            }),
            ..SyncPage::default()
        };
        status.advance(&page(5, true), 1000, 1001);
        assert_eq!(status.staleness_ms(1100), Some(100));
        // A pass of two pages, the first with entries refused: it goes on to the newest
        // change, then back to the first page's cursor, and the copy is not complete.
        status.refused_ahead_of_clock(2);
        assert!(status.holds_refused());
        status.advance(&page(7, false), 1200, 1201);
        status.advance(&page(9, true), 1200, 1202);
        assert_eq!(status.next.slots, Some(Cursor::Seq { epoch: 1, seq: 5 }));
        assert!(!status.holds_refused());
        assert_eq!(status.refused_ahead(), 2);
        assert_eq!(
            status.staleness_ms(1300),
            Some(300),
            "as of the last whole pass"
        );
        // Pulled again and still refused, then taken.
        status.refused_ahead_of_clock(2);
        status.advance(&page(9, true), 1400, 1401);
        assert_eq!(status.next.slots, Some(Cursor::Seq { epoch: 1, seq: 5 }));
        assert_eq!(status.staleness_ms(1500), Some(500));
        status.advance(&page(9, true), 1600, 1601);
        assert_eq!(status.next.slots, Some(Cursor::Seq { epoch: 1, seq: 9 }));
        assert_eq!(status.refused_ahead(), 0);
        assert_eq!(status.staleness_ms(1700), Some(100));
    }
}
