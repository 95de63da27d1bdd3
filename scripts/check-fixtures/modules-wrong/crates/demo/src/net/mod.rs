//! Two modules of one folder that import each other through nested paths.
pub mod api;
pub mod lifecycle;
