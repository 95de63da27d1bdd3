//! The node.
pub mod http;
pub mod route;
pub mod startup;
pub mod storage;
