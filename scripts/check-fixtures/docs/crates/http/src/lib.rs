//! HTTP path routing.
pub mod routing;
