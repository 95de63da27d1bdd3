//! How many counters a ranking may list: the bound a `/topk` query's `k` is checked against,
//! and the one the top-K index sizes the leaders it keeps by, so the two cannot disagree.

/// The largest `k` a `/topk` may ask for.
pub const MAX_K: usize = 1_000;
