//! What the commit loop asks of the held log of its groups in `replicated` durability
//! (the peers' side of it is [`crate::peer::held_sender`]): each group it made durable in its
//! own log is handed over with the way to tell it when a peer holds it. The loop installs the
//! group (makes it visible to reads and pullers) and answers its writes only then, so every
//! version a copy of the slot shows is in some peer's log of it.

/// What the held log tells the commit loop of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replicated {
    /// A peer holds the group, and each earlier group is held by some peer.
    Held,
    /// No peer held it in time, or every peer failed (why): its writes are refused; it is
    /// still sent until a peer holds it, and [`Replicated::Held`] follows then.
    Refused(String),
}

/// Told what becomes of one group, in the groups' order: [`Replicated::Held`] once, perhaps
/// after a [`Replicated::Refused`].
pub(crate) type Release = Box<dyn FnMut(Replicated) + Send>;

/// Where the commit loop hands its durable groups in `replicated` durability.
pub(crate) trait HeldGroups: Send + Sync {
    /// Why writes are refused before they are staged, while a refused group waits for a peer.
    fn refusal(&self) -> Option<String>;

    /// Hands over a group of slot version `version` made durable in the own log: `payload` its
    /// record as the log holds it (`None` when it logged nothing), `release` what is told when
    /// a peer holds it.
    fn submit(&self, version: u64, payload: Option<Vec<u8>>, release: Release);
}
