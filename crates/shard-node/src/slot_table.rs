//! The node's committed state in memory: its slot of every counter it holds, and the
//! descriptions of the counters created here. Only durable changes are installed, so every read
//! answers with acknowledged state.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use geocount_model::{CounterDescription, SlotState};

/// The table, shared by the HTTP handlers (readers) and the commit thread (the only writer).
pub type SharedSlotTable = Arc<RwLock<SlotTable>>;

/// Committed slot states and counter descriptions.
#[derive(Debug, Default)]
pub struct SlotTable {
    slots: HashMap<Box<str>, SlotState>,
    descriptions: HashMap<Box<str>, CounterDescription>,
}

impl SlotTable {
    /// This slot's state of counter `id`, if the node has seen it.
    pub fn get(&self, id: &str) -> Option<SlotState> {
        self.slots.get(id).copied()
    }

    /// The description of counter `id`, if it was created with `POST /counter`.
    pub fn description(&self, id: &str) -> Option<&CounterDescription> {
        self.descriptions.get(id)
    }

    /// Whether the node has seen counter `id` at all.
    pub fn contains(&self, id: &str) -> bool {
        self.slots.contains_key(id)
    }

    /// How many counters the node holds.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the node holds no counter.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Merges a copy of counter `id`'s slot by version (last writer wins).
    pub fn merge(&mut self, id: &str, state: SlotState) {
        match self.slots.get_mut(id) {
            Some(current) => {
                current.merge(state);
            }
            None => {
                self.slots.insert(id.into(), state);
            }
        }
    }

    /// Records a counter's description; the counter exists from now on.
    pub fn describe(&mut self, description: CounterDescription) {
        let id = description.id.as_str();
        if !self.slots.contains_key(id) {
            self.slots.insert(id.into(), SlotState::default());
        }
        self.descriptions.insert(id.into(), description);
    }

    /// The highest version of any counter: the next change must be numbered above it.
    pub fn max_version(&self) -> u64 {
        self.slots.values().map(|s| s.version).max().unwrap_or(0)
    }
}
