//! Pulled `SyncPage`s (postcard), decoded as the puller does, then handed to each source's
//! puller of both aggregators' replicas and merged as their sinks do (`merge_pulled`: the name
//! checked against the source's, slot copies with the top-K index, descriptions, the source's
//! cursors and freshness), the descriptions observed by a node's clock, and every read and
//! ranking both aggregators answer from what was merged, through their handlers' functions.

use std::sync::Arc;

use crate::{
    NOW_MS, TRENDING_THRESHOLD, WINDOW_SECONDS, drive_record, empty_datacenter_replica,
    empty_replica, global_layout, round_trip, slot_names, windows,
};
use geocount_aggregator::datacenter;
use geocount_aggregator::global::query::ReadQuery;
use geocount_aggregator::global::read::{self, GlobalRead};
use geocount_aggregator::global::staleness::Freshness;
use geocount_aggregator::global::trends;
use geocount_aggregator::ranking::Asked;
use geocount_aggregator::replica::scans::scan_in_runs;
use geocount_aggregator::replica::{
    HeldCounter, Replica, SharedReplica, merge_pulled, with_ranked,
};
use geocount_http::TopQuery;
use geocount_http::routing;
use geocount_model::wire::{SlotFreshness, SyncPage, SyncRequest};
use geocount_model::{Clock, Hlc, WindowQuery};
use geocount_net::json_response;
use geocount_ranking::{Answer, Ranked};
use hyper::StatusCode;

struct FixedClock;

impl Clock for FixedClock {
    fn now_unix_ms(&self) -> u64 {
        NOW_MS
    }
}

/// `replica` after `merge_pulled` of `page` from each of its sources (what each source's
/// `ReplicaSink::apply` runs), twice each (a repeated page changes nothing): only the source
/// the page's name answers as takes it.
fn merge(replica: Replica, page: &SyncPage) -> SharedReplica {
    let sources = replica.sources.len();
    let shared = replica.shared();
    for source in 0..sources {
        for _ in 0..2 {
            let _ = merge_pulled(&shared, source, page, NOW_MS - 20, NOW_MS);
        }
        let _ = (shared.read().expect("replica lock")).source_health(source, NOW_MS);
    }
    shared
}

/// What was merged is served on to the next tier (under the name `name`, with what
/// `freshness` reports) and to a shard node restoring its slot, and time passes over the live
/// window.
fn serve_and_advance(
    shared: &SharedReplica,
    name: &str,
    freshness: impl Fn(&Replica) -> Vec<SlotFreshness>,
) {
    let replica = shared.read().expect("replica lock");
    let all = SyncRequest::from_start(true, true);
    round_trip(&replica.sync_page(&all, name, 50_000, freshness(&replica)));
    for slot in &slot_names() {
        let mut from = 0;
        for _ in 0..4 {
            let Some(copy) = replica.slot_copy(slot, from, 2) else {
                break;
            };
            round_trip(&copy);
            match copy.next {
                Some(next) => from = next,
                None => break,
            }
        }
    }
    for later in [
        NOW_MS + 1_000,
        NOW_MS + 299_000,
        NOW_MS + 10_000_000,
        u64::MAX,
    ] {
        replica.rank_all(later);
    }
}

/// Whether a read of `counter` may ask for `window`, as `Core::check_window` decides: none of
/// a unique counter, none longer than the counter's window.
fn window_allowed(counter: &HeldCounter<'_>, window: Option<&WindowQuery>) -> bool {
    window.is_none_or(|w| {
        !counter.is_unique()
            && routing::check_window_length(w, counter.window_seconds(WINDOW_SECONDS)).is_ok()
    })
}

/// The rankings asked of both tiers: the top 3 with `prefix`, all-time and in each window, and
/// the trending `#` counters.
fn asked(prefix: &str) -> Vec<Asked> {
    let trending = Asked::Trending("#".to_owned(), TRENDING_THRESHOLD, windows()[0]);
    (windows().into_iter().map(Some).chain([None]))
        .map(|window| {
            Asked::Top(TopQuery {
                k: 3,
                prefix: prefix.to_owned(),
                window,
            })
        })
        .chain([trending])
        .collect()
}

/// The lists `ask` ranks at [`NOW_MS`], as `Scans::rank` finds them: from the top-K index
/// brought up to date, or by a scan of every counter a run at a time.
fn rank(shared: &SharedReplica, ask: impl FnOnce(&Replica) -> Answer) -> Vec<Vec<Ranked>> {
    match with_ranked(shared, NOW_MS, ask) {
        Answer::Ready(lists) => lists,
        Answer::Scan(scan) => scan_in_runs(shared, scan, NOW_MS),
    }
}

/// Every read and ranking of a datacenter aggregator.
fn datacenter_reads(shared: &SharedReplica) {
    let names = slot_names();
    {
        let replica = shared.read().expect("replica lock");
        for (id, records) in replica.copies().iter() {
            for (_, record) in records {
                drive_record(record);
            }
            let counter = replica.counter(id);
            for window in windows().iter().map(Some).chain([None]) {
                if window_allowed(&counter, window) {
                    let reading =
                        datacenter::state::read_counter(&replica, "A", &names, id, window, NOW_MS);
                    if let Ok(reading) = reading {
                        let _ = json_response(StatusCode::OK, &reading);
                    }
                }
            }
        }
    }
    for asked in asked("") {
        let lists = rank(shared, |replica| {
            datacenter::trends::ranking(replica, &asked, NOW_MS)
        });
        let replica = shared.read().expect("replica lock");
        let answer = datacenter::trends::answer(&replica, names.len(), (asked, lists), NOW_MS);
        let _ = json_response(StatusCode::OK, &answer);
    }
}

/// Every read and ranking of the global aggregator, partial answers allowed or not.
fn global_reads(shared: &SharedReplica) {
    let layout = global_layout();
    let freshnesses = [true, false].map(|allow_partial| Freshness {
        max_staleness_ms: 5_000,
        allow_partial,
    });
    {
        let replica = shared.read().expect("replica lock");
        for (id, _) in replica.copies().iter() {
            let counter = replica.counter(id);
            for window in windows().iter().map(Some).chain([None]) {
                if !window_allowed(&counter, window) {
                    continue;
                }
                let gathered = read::gather(&replica, &layout, &counter, window, NOW_MS);
                for freshness in freshnesses {
                    let query = ReadQuery {
                        max_staleness_ms: freshness.max_staleness_ms,
                        allow_partial: freshness.allow_partial,
                        window: window.copied(),
                    };
                    match gathered.clone().answer(id, &layout.names, &query) {
                        GlobalRead::Counter(reading) => {
                            let _ = json_response(StatusCode::OK, &reading);
                        }
                        GlobalRead::Stale(refusal) => {
                            let _ = json_response(StatusCode::SERVICE_UNAVAILABLE, &refusal);
                        }
                        GlobalRead::NotFound(_) => {}
                    }
                }
            }
        }
    }
    let datacenters = layout.names.len();
    for asked in asked("#") {
        let lists = rank(shared, |replica| {
            trends::rankings(replica, datacenters, &asked, NOW_MS)
        });
        let replica = shared.read().expect("replica lock");
        for freshness in freshnesses {
            let lists = (asked.clone(), lists.clone());
            match trends::answer(&replica, &layout, lists, freshness, NOW_MS) {
                Ok(answer) => {
                    let _ = json_response(StatusCode::OK, &answer);
                }
                Err(refusal) => {
                    let _ = json_response(StatusCode::SERVICE_UNAVAILABLE, &refusal);
                }
            }
        }
    }
}

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let Ok(page) = postcard::from_bytes::<SyncPage>(data) else {
        return false;
    };
    round_trip(&page);
    // A shard node's `PeerSink` moves its clock past every description version it learns.
    let hlc = Hlc::new("DC_A_VAL_0", Arc::new(FixedClock));
    for description in page.descriptions.iter().flat_map(|p| &p.items) {
        let seen = description.version;
        hlc.observe(seen);
        let now = hlc.now();
        assert!(
            now > seen || (now.physical_ms, now.logical) == (u64::MAX, u32::MAX),
            "the clock passes what it saw (but at the end of time)"
        );
    }
    let datacenter = merge(empty_datacenter_replica(), &page);
    let names = slot_names();
    let freshness = |replica: &Replica| datacenter::state::freshness(replica, &names, NOW_MS);
    datacenter_reads(&datacenter);
    serve_and_advance(&datacenter, "A", freshness);
    datacenter_reads(&datacenter);
    let global = merge(empty_replica(), &page);
    global_reads(&global);
    serve_and_advance(&global, "global", |_| Vec::new());
    global_reads(&global);
    true
}
