//! Restoring this node's own slot after its disk was lost: before it takes writes, a node
//! starting on an empty data directory asks its datacenter aggregator and its peers for their
//! copies of its slot and keeps the highest version of every counter.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use geocount_model::wire::SlotCopy;
use geocount_model::{CounterId, SlotRecord};
use geocount_net::HttpClient;
use tokio::task::JoinSet;

/// What the sources handed back.
#[derive(Debug, Default)]
pub struct Restored {
    /// The highest version any source had of each counter.
    pub entries: HashMap<CounterId, SlotRecord>,
    /// How many sources answered.
    pub answered: usize,
}

/// Asks every source for its copy of slot `slot`, retrying each until it answers or `timeout`
/// passes, and merges the answers.
pub async fn restore_slot(
    slot: &str,
    sources: &[SocketAddr],
    client: &HttpClient,
    timeout: Duration,
) -> Restored {
    let mut asks = JoinSet::new();
    for source in sources {
        let url = client.url(source, &format!("/slots/{slot}/copy"));
        let client = client.clone();
        asks.spawn(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                if let Ok(answer) = client.get(&url).await
                    && answer.status.is_success()
                {
                    return postcard::from_bytes::<SlotCopy>(&answer.body).ok();
                }
                if tokio::time::Instant::now() >= deadline {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let mut restored = Restored::default();
    while let Some(copy) = asks.join_next().await {
        let Ok(Some(copy)) = copy else { continue };
        restored.answered += 1;
        // An id no client could have written comes only from a faulty or hostile peer.
        for (id, record) in copy.entries {
            if let Ok(id) = CounterId::new(id) {
                restored.entries.entry(id).or_default().merge(&record);
            }
        }
    }
    restored
}
