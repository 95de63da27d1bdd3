//! One module per subcommand. Each has its options struct and an async `run(cluster, options,
//! out)` that prints to `out`, plus the pure functions that format what it prints.

pub mod create;
pub mod get;
pub mod history;
pub mod incr;
pub mod lag;
pub mod lifecycle;
pub mod load;
pub mod status;
pub mod storm;
pub mod sum;
pub mod top;
