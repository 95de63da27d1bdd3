//! Errors of the model: invalid ids, invalid deltas, overflow.

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
    /// Applying the delta would take the slot's value past the range of i64.
    #[error("applying delta {delta} to value {value} would overflow a 64-bit signed counter")]
    Overflow {
        /// The slot's current value.
        value: i64,
        /// The refused delta.
        delta: i64,
    },
}
