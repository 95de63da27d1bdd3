//! What the commit loop asks of the replication of its groups in `replicated` durability
//! (the peers' side of it is [`crate::peer::replicator`]): each group it made durable in its
//! own log is handed over with the way to answer its writes, answered once a peer holds it.

/// Answers a group's writes: `Ok` once a peer holds it (and every earlier group), or why none
/// does.
pub(crate) type Release = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Where the commit loop hands its durable groups in `replicated` durability.
pub(crate) trait GroupReplication: Send + Sync {
    /// Why writes are refused before they are staged, while a refused group waits for a peer.
    fn refusal(&self) -> Option<String>;

    /// Hands over a group made durable in the own log: `payload` its record as the log holds
    /// it (`None` when it logged nothing), `release` what answers its writes.
    fn submit(&self, payload: Option<Vec<u8>>, release: Release);
}
