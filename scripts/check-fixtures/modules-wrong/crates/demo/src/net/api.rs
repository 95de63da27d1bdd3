//! Routes, which forward lifecycle changes.
pub struct Route;

pub fn forward() -> u8 {
    crate::net::lifecycle::change()
}
