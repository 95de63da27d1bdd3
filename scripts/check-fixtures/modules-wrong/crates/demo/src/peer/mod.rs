//! Two modules of one folder whose cycle is below a test-only item.
pub mod key_file;
pub mod keys;
