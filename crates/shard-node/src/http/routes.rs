//! The shard node's endpoints: every path it answers, and what each needs of a caller.

use geocount_http::routing::{self as http, Endpoint, GET, PATCH, POST};
use geocount_http::{Allow, Need};
use geocount_model::Right;
use hyper::Method;

/// The endpoints, as matched by the router.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    /// `/counter`
    Create,
    /// `/counter/{id}`
    Counter,
    /// `/counter/{id}/reset`
    Reset,
    /// `/counter/{id}/write`
    Write,
    /// `/counters/{id}/increment`
    Increment,
    /// `/batch`
    Batch,
    /// `/batch/items`
    BatchItems,
    /// `/counter/{id}/route`
    Route,
    /// `/counter/{id}/world`
    World,
    /// `/counter/{id}/rights`
    CounterRights,
    /// `/rights`
    Rights,
    /// `/sync`
    Sync,
    /// `/slots/{slot}/copy`
    SlotCopy,
    /// `/slots/{slot}/keys`
    KeyCopy,
    /// `/slots/{slot}/replicate`
    Replicate,
    /// `/slots/{slot}/replica`
    Replica,
    /// `/healthz`
    Health,
    /// `/metrics`
    Metrics,
    /// `/openapi.json`
    OpenApi,
}

/// Every path this tier answers, with its route (its OpenAPI document lists the same).
pub(crate) const ROUTES: &[(&str, Route)] = &[
    ("/counter", Route::Create),
    ("/counter/{id}", Route::Counter),
    ("/counter/{id}/reset", Route::Reset),
    ("/counter/{id}/write", Route::Write),
    ("/counters/{id}/increment", Route::Increment),
    ("/batch", Route::Batch),
    ("/batch/items", Route::BatchItems),
    ("/counter/{id}/route", Route::Route),
    ("/counter/{id}/world", Route::World),
    ("/counter/{id}/rights", Route::CounterRights),
    ("/rights", Route::Rights),
    ("/sync", Route::Sync),
    ("/slots/{slot}/copy", Route::SlotCopy),
    ("/slots/{slot}/keys", Route::KeyCopy),
    ("/slots/{slot}/replicate", Route::Replicate),
    ("/slots/{slot}/replica", Route::Replica),
    ("/healthz", Route::Health),
    ("/metrics", Route::Metrics),
    ("/openapi.json", Route::OpenApi),
];

/// `/counter/{id}`: read, change the expiry, delete.
const COUNTER: &[Method] = &[Method::DELETE, Method::GET, Method::PATCH];

impl Endpoint for Route {
    fn methods(self) -> &'static [Method] {
        match self {
            Route::Counter => COUNTER,
            Route::Write => PATCH,
            Route::Reset
            | Route::Create
            | Route::Increment
            | Route::Batch
            | Route::BatchItems
            | Route::Sync
            | Route::Rights
            | Route::Replicate => POST,
            Route::Route
            | Route::World
            | Route::CounterRights
            | Route::SlotCopy
            | Route::KeyCopy
            | Route::Replica
            | Route::Health
            | Route::Metrics
            | Route::OpenApi => GET,
        }
    }
}

/// What each route needs of a request (docs/operations.md, "Access"): a client token with a right, a
/// tier process of the roles that call it, or nothing. `datacenter` is this node's, `slot` the
/// route's `{slot}`. A write another node forwarded (marked with [`FORWARDED_HEADER`](crate::route::slots::FORWARDED_HEADER)) needs a
/// shard node of this datacenter instead of a token: the first node checked the client's, and
/// the mark alone must not let a client skip it. `/sync` is pulled by this datacenter's
/// aggregator and its shard nodes (peers), a slot's copy only by the node of that slot, which
/// restores it; only the node of a slot sends its groups to be replicated, and reads them back.
/// A counter is read with the read right, and deleted, reset or given an expiry with admin.
pub(crate) fn need(
    route: Route,
    method: &Method,
    slot: Option<&str>,
    forwarded: bool,
    datacenter: &str,
) -> Need {
    let shards = || Allow::ShardsOf(datacenter.to_owned());
    let changes_life =
        matches!(route, Route::Reset) || (matches!(route, Route::Counter) && method != Method::GET);
    match route {
        // A keyed change of a counter's life goes to the node its key picks, as a keyed write.
        _ if changes_life && forwarded => Need::Tier(vec![shards()]),
        _ if changes_life => Need::Right(Right::Admin),
        Route::Write | Route::Increment | Route::Batch | Route::BatchItems if forwarded => {
            Need::Tier(vec![shards()])
        }
        Route::Write | Route::Increment | Route::Batch | Route::BatchItems => {
            Need::Right(Right::Write)
        }
        Route::Create | Route::Reset => Need::Right(Right::Admin),
        Route::Counter | Route::Route | Route::World | Route::CounterRights => {
            Need::Right(Right::Read)
        }
        // A bounded counter's slots ask each other for rights, across datacenters.
        Route::Rights => Need::Tier(vec![Allow::Shards]),
        Route::Sync => Need::Tier(vec![Allow::AggregatorOf(datacenter.to_owned()), shards()]),
        // Only the slot's own node asks for its copies: to restore them.
        Route::SlotCopy | Route::KeyCopy | Route::Replicate | Route::Replica => {
            Need::Tier(Allow::slot_owner(slot, Some(datacenter)))
        }
        Route::Health | Route::Metrics | Route::OpenApi => Need::Open,
    }
}

/// Builds the router once per node.
pub fn router() -> matchit::Router<Route> {
    http::router(ROUTES.iter().copied())
}
