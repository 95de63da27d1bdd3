//! Messages between processes, encoded with postcard.
//!
//! The batched write path: a client sends a [`BatchRequest`] as the body of `POST /batch` with
//! content type [`POSTCARD_CONTENT_TYPE`], and gets a [`BatchResponse`] with one [`EntryOutcome`]
//! per entry, in order. Entries borrow from the request body, so decoding allocates only the
//! entry list.

use serde::{Deserialize, Serialize};

/// The content type of postcard bodies.
pub const POSTCARD_CONTENT_TYPE: &str = "application/x-postcard";

/// Many writes in one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRequest<'a> {
    /// The writes, applied in order.
    #[serde(borrow)]
    pub entries: Vec<BatchEntry<'a>>,
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchEntry<'a> {
    /// The counter's id (validated by the node; an invalid one refuses this entry only).
    pub id: &'a str,
    /// The signed change to apply.
    pub delta: i64,
    /// A retry of an entry with the same key is applied once and answered as the first was.
    pub idempotency_key: Option<&'a str>,
    /// When the hit happened, in unix seconds; the node's clock when absent.
    pub timestamp: Option<u64>,
}

/// The answer to a [`BatchRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// The slot this node owns, e.g. `DC_USA_0_VAL_1`.
    pub slot: String,
    /// One outcome per entry, in the request's order.
    pub outcomes: Vec<EntryOutcome>,
}

/// What happened to one entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryOutcome {
    /// Applied (or, for a retried idempotency key, applied earlier): the slot's state after it.
    Applied {
        /// The slot's value after the write.
        value: i64,
        /// The slot's version after the write.
        version: u64,
    },
    /// Refused; nothing of it was applied.
    Refused {
        /// The HTTP status the same write would get on its own (400, 422, ...).
        status: u16,
        /// What is wrong.
        error: String,
    },
}
