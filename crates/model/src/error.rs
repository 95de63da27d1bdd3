//! Errors of the model: invalid ids, invalid deltas, overflow, invalid items, sketches and
//! windows; and a topology that cannot be used ([`TopologyError`]), which the topology and its
//! `[tls]` section both report.

use std::path::PathBuf;

/// What the model refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A counter id that is empty, too long or has control characters.
    #[error("invalid counter id: {0}")]
    InvalidCounterId(&'static str),
    /// A slot name that is not `DC_<DATACENTER>_VAL_<n>`.
    #[error("invalid slot name {0:?}: expected DC_<DATACENTER>_VAL_<n>")]
    InvalidSlotName(String),
    /// A delta of zero or below where a positive one is required.
    #[error("delta must be greater than 0, got {0}")]
    NonPositiveDelta(i64),
    /// An item of a unique counter that is empty or too long.
    #[error("an item must be 1 to {max} bytes, got {len}")]
    InvalidItem {
        /// Its length.
        len: usize,
        /// The longest an item may be.
        max: usize,
    },
    /// An encoded unique-count sketch that is malformed.
    #[error("invalid unique-count sketch: {0}")]
    InvalidSketch(String),
    /// A counter description that breaks what every description must satisfy
    /// ([`crate::CounterDescription::check`]).
    #[error("invalid counter description: {0}")]
    InvalidDescription(String),
    /// An encoded rolling window whose buckets are out of order or repeated.
    #[error("invalid rolling window: {0}")]
    InvalidWindow(String),
    /// Applying the delta would take the slot's value past the range of i64.
    #[error("applying delta {delta} to value {value} would overflow a 64-bit signed counter")]
    Overflow {
        /// The slot's current value.
        value: i64,
        /// The refused delta.
        delta: i64,
    },
}

/// A topology that could not be read or is inconsistent. Displays as one line:
/// `<file>: <key>: <what is wrong>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {key}: {message}", file.display())]
pub struct TopologyError {
    /// The topology file.
    pub file: PathBuf,
    /// The offending key, e.g. `datacenters[1].shards[0]`.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

/// `value + delta`, or [`ModelError::Overflow`].
pub fn checked_add(value: i64, delta: i64) -> Result<i64, ModelError> {
    value
        .checked_add(delta)
        .ok_or(ModelError::Overflow { value, delta })
}
