//! The first stage of the loop: an impl of the loop in its room.
use crate::engine::commit::CommitLoop;

impl CommitLoop {
    pub fn stage(&self) -> usize {
        0
    }
}

impl std::fmt::Display for crate::engine::Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("engine")
    }
}
