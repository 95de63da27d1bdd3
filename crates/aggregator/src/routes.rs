//! The endpoints of both tiers, as the router matches them. The global tier answers one path
//! more ([`GLOBAL_ONLY`]).

use geocount_http::routing::{Endpoint, GET, POST};
use hyper::Method;

/// The endpoints, as matched by the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/counter/{id}`
    Counter,
    /// `/counter/{id}/history`
    History,
    /// `/counter/{id}/rights`: a bounded counter's rights, gathered from the tier below
    Rights,
    /// `/`: the status page
    Page,
    /// `/status`: what the status page shows, gathered from this tier and the one below
    Status,
    /// `/topk`
    TopK,
    /// `/trending`
    Trending,
    /// `/aggregate`
    Aggregate,
    /// `/datacenters` (the global tier only)
    Datacenters,
    /// `/parts` (the global tier only)
    Parts,
    /// `/sync`
    Sync,
    /// `/slots/{slot}/copy`
    SlotCopy,
    /// `/healthz`
    Health,
    /// `/metrics`
    Metrics,
    /// `/openapi.json`
    OpenApi,
}

/// Every path both tiers answer, with its route (their OpenAPI documents list the same).
pub const ROUTES: &[(&str, Route)] = &[
    ("/counter/{id}", Route::Counter),
    ("/counter/{id}/history", Route::History),
    ("/counter/{id}/rights", Route::Rights),
    ("/", Route::Page),
    ("/status", Route::Status),
    ("/topk", Route::TopK),
    ("/trending", Route::Trending),
    ("/aggregate", Route::Aggregate),
    ("/sync", Route::Sync),
    ("/slots/{slot}/copy", Route::SlotCopy),
    ("/healthz", Route::Health),
    ("/metrics", Route::Metrics),
    ("/openapi.json", Route::OpenApi),
];

/// The paths only the global tier answers.
pub const GLOBAL_ONLY: &[(&str, Route)] = &[
    ("/datacenters", Route::Datacenters),
    ("/parts", Route::Parts),
];

impl Endpoint for Route {
    fn methods(self) -> &'static [Method] {
        match self {
            Route::Sync | Route::Parts => POST,
            Route::Counter
            | Route::History
            | Route::Rights
            | Route::Page
            | Route::Status
            | Route::TopK
            | Route::Trending
            | Route::Aggregate
            | Route::Datacenters
            | Route::SlotCopy
            | Route::Health
            | Route::Metrics
            | Route::OpenApi => GET,
        }
    }
}
