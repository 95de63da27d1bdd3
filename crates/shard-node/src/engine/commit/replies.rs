//! Answering a group's commands: each write, create and transfer of rights with its outcome
//! once the group is durable, or with the refusal that kept the group from being so.

use std::sync::Arc;

use geocount_model::{CounterDescription, RightsAnswer};
use tokio::sync::oneshot;

use crate::engine::write::{Command, WriteResults};
use crate::error::{ShardError, StorageError};
use crate::metrics::ShardMetrics;

/// A command's outcome, staged with the group, and where it goes.
pub(super) enum Reply {
    Write(oneshot::Sender<WriteResults>, WriteResults),
    Create(
        oneshot::Sender<Result<CounterDescription, ShardError>>,
        Result<CounterDescription, ShardError>,
    ),
    Rights(
        oneshot::Sender<Result<RightsAnswer, ShardError>>,
        Result<RightsAnswer, ShardError>,
    ),
}

/// Answer: sends each reply of a durable (and, in `replicated` durability, held) group.
pub(super) fn answer(replies: Vec<Reply>, metrics: &ShardMetrics) {
    for reply in replies {
        match reply {
            Reply::Write(sender, results) => {
                let applied = results.iter().filter(|r| r.is_ok()).count() as u64;
                metrics.writes_applied.inc_by(applied);
                metrics
                    .writes_refused
                    .inc_by(results.len() as u64 - applied);
                // A handler that gave up waiting is not an error here.
                let _ = sender.send(results);
            }
            Reply::Create(sender, result) => {
                let _ = sender.send(result);
            }
            Reply::Rights(sender, result) => {
                let _ = sender.send(result);
            }
        }
    }
}

/// Refuses `command` with `refusal` if it is a write or a create (counting the writes), or
/// hands it back.
pub(super) fn refuse_client_command(
    command: Command,
    refusal: impl Fn() -> ShardError,
    metrics: &ShardMetrics,
) -> Option<Command> {
    match command {
        Command::Write { writes, reply } => {
            metrics.writes_refused.inc_by(writes.len() as u64);
            let _ = reply.send(writes.iter().map(|_| Err(refusal())).collect());
            None
        }
        Command::Create { reply, .. } | Command::Lifecycle { reply, .. } => {
            let _ = reply.send(Err(refusal()));
            None
        }
        Command::Rights { reply, .. } => {
            let _ = reply.send(Err(refusal()));
            None
        }
        other => Some(other),
    }
}

/// Refuses every command of a group that arrives after the node was fenced (503); learned
/// descriptions are dropped (peers hand them again after the restart).
pub(super) fn refuse_fenced(group: Vec<Command>, reason: &str, metrics: &ShardMetrics) {
    let refusal = || ShardError::Unavailable(reason.to_owned());
    for command in group {
        if let Some(Command::Restore { reply, .. } | Command::RestoreKeys { reply, .. }) =
            refuse_client_command(command, refusal, metrics)
        {
            let _ = reply.send(Err(StorageError::io(
                "restoring the slot",
                std::io::Error::other(reason.to_owned()),
            )));
        }
    }
}

/// Refuses the writes and creates of a group while a refused group waits for a peer, before
/// they are staged (nothing of them applies); returns the rest of the group.
pub(super) fn refuse_waiting_for_peers(
    group: Vec<Command>,
    reason: &str,
    metrics: &ShardMetrics,
) -> Vec<Command> {
    let refusal = || ShardError::WaitingForPeers(reason.to_owned());
    group
        .into_iter()
        .filter_map(|command| refuse_client_command(command, refusal, metrics))
        .collect()
}

/// Refuses the applied writes of a logged group no peer held in time (their outcome is
/// unknown); writes the group refused itself keep their refusal.
pub(super) fn refuse_unreplicated(replies: Vec<Reply>, reason: &str, metrics: &ShardMetrics) {
    for reply in replies {
        match reply {
            Reply::Write(sender, results) => {
                metrics.writes_refused.inc_by(results.len() as u64);
                let refused = (results.into_iter())
                    .map(|result| {
                        result.and_then(|_| Err(ShardError::NotReplicated(reason.to_owned())))
                    })
                    .collect();
                let _ = sender.send(refused);
            }
            Reply::Create(sender, result) => {
                let _ = sender
                    .send(result.and_then(|_| Err(ShardError::NotReplicated(reason.to_owned()))));
            }
            Reply::Rights(sender, result) => {
                let _ = sender
                    .send(result.and_then(|_| Err(ShardError::NotReplicated(reason.to_owned()))));
            }
        }
    }
}

/// Refuses every write of a group whose record could not be made durable: each refusal
/// carries the storage failure as its source.
pub(super) fn refuse_all(replies: Vec<Reply>, error: &Arc<StorageError>, metrics: &ShardMetrics) {
    for reply in replies {
        match reply {
            Reply::Write(sender, results) => {
                metrics.writes_refused.inc_by(results.len() as u64);
                let refused = results
                    .iter()
                    .map(|_| Err(ShardError::from_storage(error.clone())))
                    .collect();
                let _ = sender.send(refused);
            }
            Reply::Create(sender, _) => {
                let _ = sender.send(Err(ShardError::from_storage(error.clone())));
            }
            Reply::Rights(sender, _) => {
                let _ = sender.send(Err(ShardError::from_storage(error.clone())));
            }
        }
    }
}
