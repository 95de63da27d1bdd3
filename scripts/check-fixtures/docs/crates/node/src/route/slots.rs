//! Slot choice.
pub struct WriteRouter {
    pub slots: u32,
}

impl WriteRouter {
    pub fn slot_for(&self, hash: u64) -> u32 {
        (hash % u64::from(self.slots)) as u32
    }
}
