//! What a request line carries: the query strings of reads, `/topk`, `/trending` and writes
//! (each tier's own parsers), and path segments (counter ids and slot names routed by every
//! tier's router), then used as the handlers use them.

use std::sync::OnceLock;

use crate::{NOW_SECS, WINDOW_SECONDS, sum_record};
use geocount_aggregator::global::query::{ReadQuery, StalenessKeys};
use geocount_aggregator::ranking::take_part;
use geocount_http::routing;
use geocount_http::{parse_top_query, parse_trending_query};
use geocount_model::top_k::MAX_K;
use geocount_model::{SlotId, SlotRecord, TrendingConfig, WindowQuery};
use shard_node::engine::key_scope::{KeyScope, check_client_key};
use shard_node::http::requests::parse_write_op;

/// Every tier's router, built once (as each process does).
struct Routers {
    shard: matchit::Router<shard_node::http::routes::Route>,
    datacenter: matchit::Router<geocount_aggregator::routes::Route>,
    global: matchit::Router<geocount_aggregator::routes::Route>,
}

fn routers() -> &'static Routers {
    static ROUTERS: OnceLock<Routers> = OnceLock::new();
    ROUTERS.get_or_init(|| Routers {
        shard: shard_node::http::routes::router(),
        datacenter: geocount_aggregator::datacenter::api::router(),
        global: geocount_aggregator::global::api::router(),
    })
}

/// A ranking's query as both tiers parse it: the asker's clock taken out (`RankingRequest`),
/// then `/topk`'s and `/trending`'s keys, the global tier's taking the staleness keys too;
/// whether any parse accepted it. A window asked for is summed over `record`.
fn rankings(query: Option<&str>, record: &SlotRecord) -> bool {
    let Ok((part_of, rest)) = take_part(query) else {
        return false;
    };
    let at_secs = part_of.map_or(NOW_SECS, |ms| ms / 1000);
    let rest = rest.as_deref();
    let mut decoded = false;
    for global in [false, true] {
        let mut staleness = StalenessKeys::default();
        let mut other = |key: &str, value: &str| {
            if global {
                staleness.take(key, value)
            } else {
                Ok(false)
            }
        };
        if let Ok(top) = parse_top_query(rest, at_secs, &mut other) {
            decoded = true;
            assert!((1..=MAX_K).contains(&top.k));
            if let Some(window) = top.window
                && routing::check_window_length(&window, WINDOW_SECONDS).is_ok()
            {
                let _ = record.value_in(Some(&window));
            }
        }
        if let Ok(prefix) = parse_trending_query(rest, &mut other) {
            decoded = true;
            let _ = trending().threshold(&prefix);
        }
        let _ = staleness.freshness(5_000);
    }
    decoded
}

/// The `[trending]` section the aggregators answer `/trending` by.
fn trending() -> TrendingConfig {
    TrendingConfig {
        window_seconds: WINDOW_SECONDS,
        thresholds: [("#".to_owned(), 50)].into(),
    }
}

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let query = Some(text.as_ref());
    let record = sum_record(42, 7);
    let none = |_: &str, _: &str| Ok(false);
    let use_window = |window: Option<WindowQuery>| {
        if let Some(window) = window
            && routing::check_window_length(&window, WINDOW_SECONDS).is_ok()
        {
            let _ = record.value_in(Some(&window));
        }
    };
    let mut decoded = false;
    if let Ok(window) = routing::parse_read_query(query, u64::MAX, none) {
        decoded = true;
        use_window(window);
    }
    decoded |= rankings(query, &record);
    if let Ok(read) = ReadQuery::parse(query, 5_000, NOW_SECS) {
        decoded = true;
        use_window(read.window);
    }
    decoded |= parse_write_op(query).is_ok();
    let _ = check_client_key(&text);
    let _ = KeyScope::Forwarded.key(&text);
    // Path segments, as each tier's router decodes them.
    decoded |= routing::decode_counter_id(&text).is_ok();
    decoded |= text.parse::<SlotId>().is_ok();
    for path in [
        format!("/counter/{text}"),
        format!("/counter/{text}/write"),
        format!("/slots/{text}/copy"),
        text.to_string(),
    ] {
        let routers = routers();
        let _ = routing::route(&routers.shard, &path);
        let _ = routing::route(&routers.datacenter, &path);
        let _ = routing::route(&routers.global, &path);
    }
    decoded
}
