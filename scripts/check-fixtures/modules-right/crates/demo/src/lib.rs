//! A crate whose modules are in shape: each type's impls in its room, no cycle between
//! siblings, and a file as long as its one concept needs.
pub mod engine;
pub mod peer;
pub mod table;
