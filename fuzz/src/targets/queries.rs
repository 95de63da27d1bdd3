//! What a request line carries: the query strings of reads, `/topk`, `/trending` and writes
//! (each tier's own parsers), and path segments (counter ids and slot names routed by every
//! tier's router), then used as the handlers use them.

use std::sync::OnceLock;

use geocount_aggregator::global::query::ReadQuery;
use crate::{WINDOW_SECONDS, sum_record};
use geocount_model::SlotId;
use geocount_http::routing::{self, WindowQuery};
use geocount_http::{parse_top_query, parse_trending_query};
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

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let query = Some(text.as_ref());
    let record = sum_record(42, 7);
    let none = |_: &str, _: &str| Ok(false);
    let use_window = |window: Option<WindowQuery>| {
        if let Some(window) = window
            && window.check(WINDOW_SECONDS).is_ok()
        {
            let _ = WindowQuery::value_of(Some(&window), &record);
        }
    };
    let mut decoded = false;
    if let Ok(window) = routing::parse_read_query(query, u64::MAX, none) {
        decoded = true;
        use_window(window);
    }
    if let Ok(top) = parse_top_query(query, 0, none) {
        decoded = true;
        assert!((1..=geocount_http::top_query::MAX_K).contains(&top.k));
        use_window(top.window);
    }
    decoded |= parse_trending_query(query, none).is_ok();
    if let Ok(read) = ReadQuery::parse(query, 5_000, 1_800_000_000) {
        decoded = true;
        use_window(read.window);
    }
    decoded |= parse_write_op(query).is_ok();
    let _ = check_client_key(&text);
    let _ = KeyScope::Forwarded.key(&text);
    // Path segments, as each tier's router decodes them.
    let _ = routing::decode_counter_id(&text);
    let _ = text.parse::<SlotId>();
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
