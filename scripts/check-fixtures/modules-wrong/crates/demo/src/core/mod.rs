//! The tier's core, whose methods are spread over sibling files.
pub mod aggregate;
pub mod tier;
