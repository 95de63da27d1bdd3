//! The targets' bodies, one module each, so that the fuzzer (`fuzz_targets/`) and the seed
//! replay test (`tests/seeds.rs`) run the same code. Each `run` returns whether the input
//! decoded, so a seed that a changed wire no longer reads fails the replay.

pub mod json_bodies;
pub mod queries;
pub mod resp_commands;
pub mod topology;
pub mod wire_batch;
pub mod wire_rights;
pub mod wire_slot_copy;
pub mod wire_sync_page;
pub mod wire_sync_request;
