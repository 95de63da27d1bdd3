//! The node.
pub mod route;
pub mod startup;
pub mod storage;
