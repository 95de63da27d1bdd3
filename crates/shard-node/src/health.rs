//! The node's health as `GET /healthz` reports it: the latest storage failure (set by the
//! commit loop) and a slot served twice (set by the puller of its datacenter aggregator).

use std::sync::Mutex;

/// The node's health as the commit loop and its datacenter aggregator see it, for
/// `GET /healthz`.
#[derive(Debug, Default)]
pub struct NodeHealth {
    storage_error: Mutex<Option<String>>,
    conflict: Mutex<Option<String>>,
}

impl NodeHealth {
    /// Why this node takes no writes: its aggregator saw another process serve its slot at
    /// the same time, at the slot's address while this one is not.
    pub fn conflict(&self) -> Option<String> {
        self.conflict.lock().expect("health lock").clone()
    }

    /// Sets or clears the conflict its aggregator reports; says whether that changed it.
    pub fn set_conflict(&self, conflict: Option<String>) -> bool {
        let mut held = self.conflict.lock().expect("health lock");
        let changed = *held != conflict;
        *held = conflict;
        changed
    }

    /// The last storage failure, if the latest commit failed.
    pub fn storage_error(&self) -> Option<String> {
        self.storage_error.lock().expect("health lock").clone()
    }

    /// Records the latest storage failure, or clears it once a commit succeeds.
    pub(crate) fn set(&self, error: Option<String>) {
        *self.storage_error.lock().expect("health lock") = error;
    }
}
