//! Pulled `SyncPage`s (postcard), decoded as the puller does, then merged into both
//! aggregators' replicas as their sinks do (slot copies with the top-K index, descriptions, the
//! source's cursors and freshness), the descriptions observed by a node's clock, and every read
//! both aggregators answer from what was merged.

use std::sync::Arc;

use geocount_aggregator::global::staleness::Freshness;
use crate::{
    NOW_MS, NOW_SECS, SLOT_DATACENTERS, WINDOW_SECONDS, datacenter_names, drive_record,
    empty_datacenter_replica, empty_replica, round_trip, slot_names, windows,
};
use geocount_model::wire::{Cursor, SyncPage, SyncRequest};
use geocount_model::{Clock, Hlc};
use geocount_http::TopQuery;
use geocount_aggregator::replica::{Replica, merge_pulled};

struct FixedClock;

impl Clock for FixedClock {
    fn now_unix_ms(&self) -> u64 {
        NOW_MS
    }
}

/// `merge_pulled` of `page` from source 0 (what `ReplicaSink::apply` runs), twice (a repeated
/// page changes nothing).
fn merge(replica: &mut Replica, page: &SyncPage) {
    let shared = std::sync::RwLock::new(std::mem::replace(replica, Replica::new(Vec::new(), &[])));
    for _ in 0..2 {
        let _ = merge_pulled(&shared, 0, page, NOW_MS - 20, NOW_MS);
    }
    *replica = shared.into_inner().expect("replica lock");
    let _ = replica.source_health(0, NOW_MS);
}

/// What was merged is served on to the next tier, and time passes over the live window.
fn serve_and_advance(replica: &mut Replica) {
    let all = SyncRequest {
        slots: Some(Cursor::Start),
        descriptions: Some(Cursor::Start),
        puller: None,
    };
    round_trip(&replica.sync_page(&all, "A", 50_000, Vec::new()));
    for name in &slot_names() {
        if let Some(copy) = replica.slot_copy(name) {
            round_trip(&copy);
        }
    }
    for later in [NOW_SECS + 1, NOW_SECS + 299, NOW_SECS + 10_000, u64::MAX] {
        replica.rank_all(later);
    }
}

/// Every read of a datacenter aggregator.
fn datacenter_reads(replica: &Replica) {
    let names = slot_names();
    for (id, records) in replica.copies().iter() {
        for (_, record) in records {
            drive_record(record);
        }
        let window_seconds = replica.counter(id).window_seconds(WINDOW_SECONDS);
        for window in windows().iter().map(Some).chain([None]) {
            if window.is_none_or(|w| w.check(window_seconds).is_ok()) {
                let _ = geocount_aggregator::datacenter::state::read_counter(
                    replica, "A", &names, id, window, NOW_MS,
                );
            }
        }
    }
    for window in windows().into_iter().map(Some).chain([None]) {
        let query = TopQuery {
            k: 3,
            prefix: String::new(),
            window,
        };
        let _ = geocount_aggregator::datacenter::trends::top_k(replica, names.len(), query, NOW_MS);
    }
    let _ = geocount_aggregator::datacenter::trends::trending(
        replica,
        names.len(),
        "#".to_owned(),
        1,
        windows()[0],
        NOW_MS,
    );
}

/// Every read of the global aggregator.
fn global_reads(replica: &Replica) {
    for (id, _) in replica.copies().iter() {
        for window in windows().iter().map(Some).chain([None]) {
            let _ = geocount_aggregator::global::read::read_datacenters(
                replica,
                &SLOT_DATACENTERS,
                replica.copies().get(id),
                window,
                NOW_MS,
            );
        }
        let _ = geocount_aggregator::global::read::read_unique_datacenters(
            replica,
            &SLOT_DATACENTERS,
            replica.copies().get(id),
            NOW_MS,
        );
    }
    let freshness = Freshness {
        max_staleness_ms: 5_000,
        allow_partial: true,
    };
    let names = datacenter_names();
    for window in windows().into_iter().map(Some).chain([None]) {
        let query = TopQuery {
            k: 3,
            prefix: "#".to_owned(),
            window,
        };
        let _ =
            geocount_aggregator::global::trends::top_k(replica, &names, query, freshness, NOW_MS);
    }
    let trending = ("#".to_owned(), 1);
    let _ = geocount_aggregator::global::trends::trending(
        replica,
        &names,
        trending,
        windows()[0],
        freshness,
        NOW_MS,
    );
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
    let mut datacenter = empty_datacenter_replica();
    merge(&mut datacenter, &page);
    datacenter_reads(&datacenter);
    serve_and_advance(&mut datacenter);
    datacenter_reads(&datacenter);
    let mut global = empty_replica();
    merge(&mut global, &page);
    global_reads(&global);
    serve_and_advance(&mut global);
    global_reads(&global);
    true
}
