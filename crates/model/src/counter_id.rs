//! Counter ids: UTF-8 strings of 1..=256 bytes without control characters.

use std::fmt;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::ModelError;

/// The longest counter id, in bytes.
pub const MAX_COUNTER_ID_BYTES: usize = 256;

/// A validated counter id, and the key of every table of counters. An id of up to 24 bytes is
/// held inline (24 bytes, no heap block), so a table lookup compares it without following a
/// pointer and decoding it allocates nothing; a longer one is on the heap.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct CounterId(CompactString);

impl CounterId {
    /// Validates `id` and wraps it.
    pub fn new(id: impl Into<CompactString>) -> Result<Self, ModelError> {
        let id = id.into();
        validate(&id)?;
        Ok(Self(id))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks the rules for a counter id without allocating.
pub fn validate(id: &str) -> Result<(), ModelError> {
    if id.is_empty() {
        return Err(ModelError::InvalidCounterId("it is empty"));
    }
    if id.len() > MAX_COUNTER_ID_BYTES {
        return Err(ModelError::InvalidCounterId("it is longer than 256 bytes"));
    }
    if has_control_character(id) {
        return Err(ModelError::InvalidCounterId(
            "it contains a control character",
        ));
    }
    Ok(())
}

/// Whether `id` holds a control character (`char::is_control`). Every id of every batch
/// entry passes here, and nearly every id is ASCII without one: one pass over its bytes
/// settles that, and only an id with a byte outside printable ASCII is decoded.
fn has_control_character(id: &str) -> bool {
    id.bytes().any(|byte| !(0x20..0x7f).contains(&byte)) && id.chars().any(char::is_control)
}

impl fmt::Display for CounterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for CounterId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for CounterId {
    type Error = ModelError;
    fn try_from(id: &str) -> Result<Self, ModelError> {
        Self::new(id)
    }
}

impl<'de> Deserialize<'de> for CounterId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let id = CompactString::deserialize(deserializer)?;
        Self::new(id).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The one-pass check finds a control character exactly when `char::is_control`
        /// does, in ASCII and in any other text.
        #[test]
        fn control_characters_are_found_as_char_is_control_finds_them(
            ascii in "[\\x00-\\x7f]{0,40}",
            any in "\\PC*\\p{Cc}?\\PC*",
        ) {
            for id in [&ascii, &any] {
                prop_assert_eq!(has_control_character(id), id.chars().any(char::is_control));
            }
        }
    }

    #[test]
    fn accepts_ordinary_and_unicode_ids() {
        assert!(CounterId::new("tweet:1:likes").is_ok());
        assert!(CounterId::new("#日本").is_ok());
        assert!(CounterId::new("a".repeat(256)).is_ok());
        // 128 two-byte characters are exactly 256 bytes.
        assert!(CounterId::new("é".repeat(128)).is_ok());
    }

    #[test]
    fn refuses_empty_long_and_control_ids() {
        assert_eq!(
            CounterId::new(""),
            Err(ModelError::InvalidCounterId("it is empty"))
        );
        assert!(CounterId::new("a".repeat(257)).is_err());
        assert!(CounterId::new("é".repeat(129)).is_err());
        assert!(CounterId::new("a\nb").is_err());
        assert!(CounterId::new("a\u{0}").is_err());
        assert!(CounterId::new("\u{7f}").is_err());
    }

    #[test]
    fn deserializing_validates() {
        let ok: Result<CounterId, _> = serde_json::from_str("\"x\"");
        assert!(ok.is_ok());
        let bad: Result<CounterId, _> = serde_json::from_str("\"\"");
        assert!(bad.is_err());
    }
}
