//! The engine: a type of this file may have its impls anywhere in the folder.
pub mod commit;
pub mod log;

pub struct Engine;
