//! The HTTP side of a write.

pub mod api;
pub mod copies;
pub mod openapi;
pub mod requests;
pub mod routes;
pub mod state;
