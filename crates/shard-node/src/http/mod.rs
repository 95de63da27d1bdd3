//! The HTTP side of a write.

pub(crate) mod api;
pub(crate) mod copies;
pub(crate) mod openapi;
pub mod requests;
pub mod routes;
pub(crate) mod state;
