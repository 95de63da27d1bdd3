//! `POST /parts`: the other datacenters' parts of many counters, for a shard node answering
//! world reads (its own datacenter's part it computes itself).
//!
//! - The asker's datacenter is left out of each part, and its staleness refuses nothing; any
//!   other datacenter staler than the bound (the request's, else `global.max_staleness_ms`)
//!   makes every counter's answer [`CounterParts::Stale`], never a stale number.
//! - Records count by the lifecycle rule ([`crate::lifecycle`]) from the newer of this
//!   replica's generation of the counter and the asker's: a reset the asker applied and this
//!   replica has not heard of yet wipes the records of before it here too.
//! - A counter whose partition this replica does not hold is [`CounterParts::NotHeld`].

use geocount_http::routing::RequestError;
use geocount_model::wire::{
    CounterParts, HeldParts, POSTCARD_CONTENT_TYPE, PartsAnswer, PartsPresence, PartsRequest,
};
use geocount_model::{HlcTimestamp, UniqueSketch};
use geocount_net::{Response, bytes_response, error_response, read_body};
use geocount_sync::worst_staleness;
use hyper::StatusCode;
use hyper::body::Incoming;

use super::GlobalState;
use super::layout::Layout;
use super::staleness::{empty_readings, stale_datacenters, stale_reasons};
use crate::error::AggregatorError;
use crate::lifecycle::Presence;
use crate::replica::HeldCounter;

/// The most counters one request asks for.
pub const MAX_PARTS_COUNTERS: usize = 16_384;

/// The largest request body taken: that many counters of the longest ids.
const MAX_PARTS_REQUEST_BYTES: usize = MAX_PARTS_COUNTERS * 300 + 1_024;

/// Answers `POST /parts` at `now_ms`.
pub async fn answer(
    state: &GlobalState,
    request: hyper::Request<Incoming>,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let body = read_body(request, MAX_PARTS_REQUEST_BYTES)
        .await
        .map_err(RequestError::from)?;
    let bad = |why: String| AggregatorError::from(RequestError::BadRequest(why));
    let asked: PartsRequest =
        postcard::from_bytes(&body).map_err(|e| bad(format!("not a PartsRequest: {e}")))?;
    if asked.counters.len() > MAX_PARTS_COUNTERS {
        return Err(bad(format!(
            "{} counters asked, at most {MAX_PARTS_COUNTERS}",
            asked.counters.len()
        )));
    }
    let layout = &state.layout;
    let Some(asker) = layout.names.iter().position(|n| *n == asked.datacenter) else {
        return Err(bad(format!("no datacenter {:?}", asked.datacenter)));
    };
    let max_staleness_ms = (asked.max_staleness_ms).unwrap_or(state.settings.max_staleness_ms);
    let partitions = &state.core.settings.partitions;
    let answer = {
        let replica = state.core.replica.read().expect("replica lock");
        let readings = empty_readings(&replica, layout, now_ms);
        let mut stale = stale_datacenters(&readings, max_staleness_ms);
        stale.retain(|&dc| dc != asker);
        let refusal = (!stale.is_empty())
            .then(|| stale_reasons(&layout.names, &readings, &stale, max_staleness_ms));
        let others = readings.iter().enumerate().filter(|(dc, _)| *dc != asker);
        let staleness_ms = worst_staleness(others.map(|(_, r)| r.staleness_ms));
        let counters = (asked.counters.iter())
            .map(|(id, from)| {
                if !partitions.holds(id.as_str()) {
                    return CounterParts::NotHeld;
                }
                if let Some(why) = &refusal {
                    return CounterParts::Stale(why.clone());
                }
                let counter = replica.counter(id.as_str());
                let mut parts = parts_of(&counter, layout, asker, *from, now_ms);
                parts.staleness_ms = staleness_ms;
                CounterParts::Held(parts)
            })
            .collect();
        PartsAnswer { counters }
    };
    Ok(match postcard::to_allocvec(&answer) {
        Ok(bytes) => bytes_response(StatusCode::OK, POSTCARD_CONTENT_TYPE, bytes.into()),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot encode the parts: {e}"),
        ),
    })
}

/// `counter`'s parts of every datacenter but `asker` at `now_ms`, its records counting from
/// `asked_from` at least.
fn parts_of(
    counter: &HeldCounter<'_>,
    layout: &Layout,
    asker: usize,
    asked_from: HlcTimestamp,
    now_ms: u64,
) -> HeldParts {
    let life = counter.life(now_ms);
    let from = life.from.max(asked_from);
    let copies = counter.copies.unwrap_or_default();
    let others = copies
        .iter()
        .filter(|(slot, _)| layout.slot_datacenters[usize::from(*slot)] != asker);
    let gone = matches!(life.presence, Presence::Deleted | Presence::Expired(_));
    // A generation the asker knows and this replica does not: it cannot say the counter is gone.
    let behind = asked_from > life.from;
    let counting: Vec<_> = others
        .filter(|(_, record)| (behind || !gone) && record.counts_in(from))
        .map(|(_, record)| record)
        .collect();
    let presence = match life.presence {
        _ if behind && counting.is_empty() => PartsPresence::Unknown,
        _ if behind => PartsPresence::Exists,
        Presence::Exists => PartsPresence::Exists,
        Presence::Unknown => PartsPresence::Unknown,
        Presence::Deleted | Presence::Expired(_) => PartsPresence::Gone,
    };
    let sketch = counter.is_unique().then(|| {
        let mut union = UniqueSketch::new();
        for sketch in counting.iter().filter_map(|record| record.uniques()) {
            union.union_with(sketch);
        }
        union
    });
    let value = match sketch {
        Some(_) => 0,
        None => counting.iter().map(|r| i128::from(r.state.value)).sum(),
    };
    HeldParts {
        from,
        presence,
        value,
        sketch,
        staleness_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::Replica;
    use geocount_model::fixtures::described;
    use geocount_model::{CounterId, SlotRecord, SlotState};

    /// USA_0 (slots 0 and 1) and ASIA_0 (slot 2).
    fn layout() -> Layout {
        Layout {
            names: vec!["USA_0".into(), "ASIA_0".into()],
            slot_datacenters: vec![0, 0, 1],
            source_datacenters: vec![0, 1],
            source_addresses: vec!["127.0.0.1:2".into(), "127.0.0.1:3".into()],
        }
    }

    fn replica() -> Replica {
        crate::global::read::tests::two_datacenter_replica()
    }

    fn at(physical_ms: u64) -> HlcTimestamp {
        HlcTimestamp {
            physical_ms,
            logical: 0,
            node: 2,
        }
    }

    fn record(value: i64, version: u64, generation: HlcTimestamp) -> SlotRecord {
        let mut record = SlotRecord::from(SlotState { value, version });
        record.set_generation(generation);
        record
    }

    #[test]
    fn the_parts_leave_the_asker_out_and_count_from_the_newer_generation() {
        let mut replica = replica();
        let c = CounterId::new("c").unwrap();
        for (slot, value) in [(0, 5), (1, 7), (2, 100)] {
            replica.merge(slot, &c, &record(value, 1, HlcTimestamp::default()));
        }
        let parts = |replica: &Replica, asker, from| {
            parts_of(&replica.counter("c"), &layout(), asker, from, 2_000)
        };
        let asia = parts(&replica, 1, HlcTimestamp::default());
        assert_eq!((asia.value, asia.presence), (12, PartsPresence::Exists));
        assert_eq!(asia.sketch, None);
        let usa = parts(&replica, 0, HlcTimestamp::default());
        assert_eq!(usa.value, 100);
        // A reset the asker knows and this replica does not: older records count as nothing.
        let reset = parts(&replica, 1, at(1_500));
        assert_eq!(
            (reset.value, reset.from, reset.presence),
            (0, at(1_500), PartsPresence::Unknown)
        );
        replica.merge(0, &c, &record(3, 2, at(1_500)));
        assert_eq!(parts(&replica, 1, at(1_500)).value, 3);
        // Deleted here: gone, whatever the records.
        let created = described("c", 1, 1_000, 1);
        replica.descriptions.merge(created.delete(at(1_800)));
        let gone = parts(&replica, 1, at(1_500));
        assert_eq!((gone.value, gone.presence), (0, PartsPresence::Gone));
        assert_eq!(
            parts(&replica, 1, at(1_900)).presence,
            PartsPresence::Unknown
        );
    }
}
