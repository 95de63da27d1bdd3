//! Slot names: `DC_<DATACENTER>_VAL_<n>`, one per shard node of every counter.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ModelError;

/// The name of one slot: datacenter `datacenter`, shard `index`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SlotId {
    /// The datacenter's name, e.g. `USA_0`.
    pub datacenter: String,
    /// The shard's index in the datacenter's `shards` list.
    pub index: u32,
}

impl SlotId {
    /// The slot `DC_<datacenter>_VAL_<index>`.
    pub fn new(datacenter: impl Into<String>, index: u32) -> Self {
        Self {
            datacenter: datacenter.into(),
            index,
        }
    }
}

impl fmt::Display for SlotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DC_{}_VAL_{}", self.datacenter, self.index)
    }
}

impl FromStr for SlotId {
    type Err = ModelError;

    fn from_str(name: &str) -> Result<Self, ModelError> {
        let invalid = || ModelError::InvalidSlotName(name.to_owned());
        let rest = name.strip_prefix("DC_").ok_or_else(invalid)?;
        let (datacenter, index) = rest.rsplit_once("_VAL_").ok_or_else(invalid)?;
        if datacenter.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let index = index.parse().map_err(|_| invalid())?;
        Ok(Self::new(datacenter, index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_round_trip() {
        let slot = SlotId::new("USA_0", 2);
        assert_eq!(slot.to_string(), "DC_USA_0_VAL_2");
        assert_eq!("DC_USA_0_VAL_2".parse::<SlotId>().unwrap(), slot);
        assert_eq!(
            "DC_A_VAL_B_VAL_3".parse::<SlotId>().unwrap(),
            SlotId::new("A_VAL_B", 3)
        );
        for bad in [
            "USA_0_VAL_2",
            "DC__VAL_1",
            "DC_USA_VAL_",
            "DC_USA_VAL_x",
            "DC_USA_0",
        ] {
            assert!(bad.parse::<SlotId>().is_err(), "{bad}");
        }
    }
}
