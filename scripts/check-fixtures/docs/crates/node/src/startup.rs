//! Starting a node.
pub mod recovery;
