//! The node's HTTP handlers.
pub fn handle() -> u16 {
    200
}
