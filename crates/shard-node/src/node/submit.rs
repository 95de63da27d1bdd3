//! The one way to the commit loop: a write (HTTP, Redis, or forwarded by another node) and a
//! change of a counter's life are handed over here and answered once durable.

use geocount_model::{CounterDescription, CounterId};

use crate::engine::write::{Command, LifecycleChange, WriteRequest, WriteResults};
use crate::error::ShardError;
use crate::node::NodeState;

impl NodeState {
    /// Hands `command` to the commit loop, waiting while its queue is full.
    pub async fn send(&self, command: Command) -> Result<(), ShardError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| self.stopped())
    }

    /// The refusal of a request the stopping node can no longer take.
    pub fn stopped(&self) -> ShardError {
        ShardError::Unavailable("the node is shutting down".into())
    }

    /// Applies `writes` to this node's slot: answered once they are durable (or refused). A
    /// bounded counter's write its slot lacks the rights for is tried again after asking for
    /// them ([`crate::rights::ask`]).
    pub async fn submit(&self, writes: Vec<WriteRequest>) -> Result<WriteResults, ShardError> {
        let mut results = self.submit_once(writes).await?;
        if results
            .iter()
            .any(|result| matches!(result, Err(ShardError::ShortOfRights(_))))
        {
            crate::rights::ask::retry_short(self, &mut results).await;
        }
        Ok(results)
    }

    /// Hands `writes` to the commit loop once, as they are.
    pub(crate) async fn submit_once(
        &self,
        writes: Vec<WriteRequest>,
    ) -> Result<WriteResults, ShardError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.send(Command::Write { writes, reply }).await?;
        answer.await.map_err(|_| self.stopped())
    }

    /// Resets, deletes or changes the expiry of counter `id`: its new description, once
    /// durable. A reset or expiry of a counter this node has not heard of is made for the
    /// counter the world knows ([`NodeState::lives_unheard`]).
    pub async fn change_life(
        &self,
        id: CounterId,
        change: LifecycleChange,
        key: Option<(Box<str>, (i64, u64))>,
    ) -> Result<CounterDescription, ShardError> {
        let elsewhere = match change {
            LifecycleChange::Reset | LifecycleChange::Expire(_) => self.lives_unheard(&id).await?,
            LifecycleChange::Delete | LifecycleChange::ExpireIfMade { .. } => None,
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let command = Command::Lifecycle {
            id,
            change,
            elsewhere,
            key,
            reply,
        };
        self.send(command).await?;
        answer.await.map_err(|_| self.stopped())?
    }
}
