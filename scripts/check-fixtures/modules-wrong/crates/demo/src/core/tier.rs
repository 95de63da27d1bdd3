//! The core of a tier.
pub struct Core;

impl Core {
    pub fn new() -> Core {
        Core
    }
}
