//! A group in `replicated` durability: made durable in the own log, handed to the
//! held log's sender, and installed (shown to reads, to pullers and to the next group's staging) and
//! answered only once a peer holds it. So no copy of the slot shows a version no peer's log
//! holds, with its keys: a restore after a lost disk finds the key of every write it restores
//! (startup/take_over.rs).
//!
//! While a group waits, the commands after it wait in the queue. A group no peer held in time
//! is refused (its writes 503, outcome unknown) and waits on; meanwhile every write is
//! refused, and descriptions learned are kept for the next group.

use tokio::sync::mpsc;

use super::CommitLoop;
use super::group::GroupChanges;
use super::replies::{Reply, answer, refuse_client_command, refuse_unreplicated};
use crate::engine::held::Replicated;
use crate::engine::wal::LogRecord;
use crate::engine::write::Command;
use crate::error::{ShardError, StorageError};

/// A durable group waiting for a peer to hold it.
pub(super) struct AwaitingPeers {
    told: mpsc::UnboundedReceiver<Replicated>,
    changes: GroupChanges,
    record: LogRecord,
    replies: Vec<Reply>,
    now_ms: u64,
}

/// What became of a group that waited for a peer.
pub(super) enum Waited {
    /// Held by a peer, installed and answered.
    Installed,
    /// The node stops while no peer holds the group: it stays in the log, not installed.
    Unheld,
}

impl CommitLoop {
    /// Hands the group just made durable to the held log's sender, as the log holds it.
    pub(super) fn replicate(
        &self,
        changes: GroupChanges,
        record: LogRecord,
        replies: Vec<Reply>,
        now_ms: u64,
    ) -> AwaitingPeers {
        let payload = (!record.is_empty()).then(|| self.wal.last_payload().to_vec());
        let (tell, told) = mpsc::unbounded_channel();
        let held_sender = self.held_sender.as_ref().expect("replicated durability");
        held_sender.submit(
            self.group_version,
            payload,
            Box::new(move |event| {
                let _ = tell.send(event);
            }),
        );
        AwaitingPeers {
            told,
            changes,
            record,
            replies,
            now_ms,
        }
    }

    /// Waits until a peer holds `awaiting`'s group, then installs it and answers its writes.
    /// Once the group is refused, `commands` are taken and refused meanwhile; a shutdown then
    /// (or `stopping` already) stops the wait.
    pub(super) async fn install_when_held(
        &mut self,
        awaiting: AwaitingPeers,
        commands: &mut mpsc::Receiver<Command>,
        stopping: bool,
    ) -> Waited {
        let AwaitingPeers {
            mut told,
            changes,
            record,
            replies,
            now_ms,
        } = awaiting;
        let mut replies = Some(replies);
        let mut refusal: Option<String> = None;
        loop {
            // In order, the held log's word first: the same run every time under simulation.
            tokio::select! {
                biased;
                event = told.recv() => match event {
                    Some(Replicated::Held) => {
                        self.install(changes, record, now_ms);
                        if let Some(replies) = replies.take() {
                            answer(replies, &self.shared.metrics);
                        }
                        return Waited::Installed;
                    }
                    Some(Replicated::Refused(reason)) => {
                        if let Some(replies) = replies.take() {
                            refuse_unreplicated(replies, &reason, &self.shared.metrics);
                        }
                        if stopping {
                            return Waited::Unheld;
                        }
                        refusal = Some(reason);
                    }
                    None => {
                        let reason = "the node is stopping";
                        if let Some(replies) = replies.take() {
                            refuse_unreplicated(replies, reason, &self.shared.metrics);
                        }
                        return Waited::Unheld;
                    }
                },
                command = commands.recv(), if refusal.is_some() => {
                    let reason = refusal.as_deref().unwrap_or_default();
                    if !self.refuse_while_unheld(command, reason) {
                        return Waited::Unheld;
                    }
                }
            }
        }
    }

    /// Refuses `command` while a refused group waits for a peer; `false` when it asks the
    /// node to stop (or every sender is gone).
    fn refuse_while_unheld(&mut self, command: Option<Command>, reason: &str) -> bool {
        let Some(command) = command else {
            return false;
        };
        let refusal = || ShardError::WaitingForPeers(reason.to_owned());
        match refuse_client_command(command, refusal, &self.shared.metrics) {
            None => true,
            Some(Command::Shutdown) => false,
            Some(Command::Describe(learned)) => {
                self.learned_unlogged.extend(learned);
                true
            }
            Some(Command::Restore { reply, .. } | Command::RestoreKeys { reply, .. }) => {
                let waiting = std::io::Error::other(format!("waiting for a peer: {reason}"));
                let _ = reply.send(Err(StorageError::io("restoring the slot", waiting)));
                true
            }
            Some(
                Command::Tick
                | Command::Write { .. }
                | Command::Create { .. }
                | Command::Lifecycle { .. }
                | Command::Rights { .. },
            ) => true,
        }
    }
}
