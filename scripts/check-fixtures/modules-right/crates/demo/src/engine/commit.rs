//! The commit loop, whose stages are the files of engine/commit/.
pub mod stage;

use super::log::append;

pub struct CommitLoop;

impl CommitLoop {
    pub fn run(&self) -> usize {
        append().count() + self.stage()
    }
}
