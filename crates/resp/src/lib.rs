//! The Redis protocol's wire, as geocount's shard nodes speak it: one layer that knows bytes,
//! commands and replies, and nothing of shards or counters.
//!
//! - [`frame`]: takes one whole client command off the bytes read so far (RESP2 arrays of bulk
//!   strings, decoded by the `redis-protocol` crate), refusing frames over a size limit and
//!   anything that is not a flat array of bulk strings before the decoder sees it.
//! - [`args`]: a command's arguments as [`frame`] gives them ([`Args`]): the frame's bytes and
//!   each argument's range in them.
//! - [`command`]: the command vocabulary ([`RespCommand`]) parsed from a frame's arguments,
//!   with Redis's own arity and integer rules; [`command::COMMANDS`] is the table `COMMAND`
//!   answers from.
//! - [`glob`]: Redis's glob patterns (`CONFIG GET`), compiled once and matched in time bounded
//!   by the name ([`Glob`]).
//! - [`reply`]: what a command answers ([`Reply`]), encoded in RESP2 or RESP3 ([`Protocol`]).
//! - [`error`]: refusals in Redis's words ([`CommandError`], [`FrameError`], [`words`]).

pub mod args;
pub mod command;
pub mod error;
pub mod frame;
pub mod glob;
pub mod reply;
mod table;

pub use args::Args;
pub use command::{ClientCommand, CommandQuery, Hello, RespCommand, parse};
pub use error::{CommandError, FrameError, words};
pub use frame::take_command;
pub use glob::Glob;
pub use reply::{Protocol, Reply};
