//! The rankings geocount's aggregators answer (`GET /topk`, `GET /trending`): the leading
//! counters of a tier, all-time and in the live (trending) window, over every slot and per
//! group of slots (a datacenter, at the global tier).
//!
//! - [`ranked`]: what every ranking shares: [`Ranked`], [`Scope`], and the counters it ranks
//!   ([`RankedCounters`]).
//! - [`index`]: the top-K index ([`TopIndex`]), kept up to date as copies merge, with
//!   [`index::leaders`] (one ranking's leaders and the walk of them) and [`index::live`] (the
//!   live window, [`LiveRanking`]).
//! - [`scan`]: a ranking by a scan of every counter, a run at a time ([`Scan`]).
//!
//! The counters ranked are read through [`RankedCounters`], so this crate knows nothing of
//! how they are held or replicated.

pub mod index;
pub mod ranked;
pub mod scan;

pub use index::{Answer, LEADERS, LiveRanking, RANK_INTERVAL, TopIndex};
pub use ranked::{Counted, Ranked, RankedCounters, Scope};
pub use scan::Scan;
