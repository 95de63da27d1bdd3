//! The parts of `geoctl load` ([`crate::cmd::load`]), one concept per module:
//!
//! - [`workload`]: which counter each write goes to (uniform or Zipf) and the deltas;
//! - [`pacing`]: the shared schedule of a run at a target rate;
//! - [`route`]: which shard node each write is sent to;
//! - [`fill`]: filling each node's batches up to the batch size before they are sent;
//! - [`send`]: sending single writes and batches with idempotency keys and one retry, and
//!   folding attempts into outcomes;
//! - [`tally`]: what each worker counts (latency histogram, outcomes, per-counter sums);
//! - [`probe`]: visibility-lag probes beside the load;
//! - [`exactness`]: comparing global totals with the acknowledged deltas;
//! - [`report`]: the figures as JSON and as text;
//! - [`plot`]: the SVG picture;
//! - [`progress`]: the live progress bar.

pub mod exactness;
pub mod fill;
pub mod pacing;
pub mod plot;
pub mod probe;
pub mod progress;
pub mod report;
pub mod route;
pub mod send;
pub mod tally;
pub mod workload;
