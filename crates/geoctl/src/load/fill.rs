//! Filling each shard node's batches up to the batch size before they are sent.
//!
//! A generated batch split by owner ([`crate::load::route`]) gives each node only a share of
//! its writes, and a shard node spends more per write on small batches. So the writes routed
//! to a node wait in that node's buffer until it holds a full batch, which the worker that
//! filled it sends. A buffer whose oldest write has waited [`FILL_BOUND`] is sent as it is
//! (so a low `--rate` does not hold writes back), and every buffer is sent at the end of the
//! run. Each write is taken out of a buffer exactly once, by the one worker that then sends it
//! and counts its outcome.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::load::send::PlannedWrite;

/// How long a write may wait in a node's buffer for the batch to fill.
pub const FILL_BOUND: Duration = Duration::from_millis(100);

/// One node's writes waiting to be sent.
#[derive(Debug, Default)]
struct Buffer {
    writes: Vec<PlannedWrite>,
    /// When the oldest write of `writes` arrived; `None` when empty.
    since: Option<Instant>,
}

/// The buffers of every shard node, by the node's index in [`crate::load::route::LoadRouter`].
#[derive(Debug)]
pub struct BatchFill {
    batch_size: usize,
    bound: Duration,
    buffers: Vec<Mutex<Buffer>>,
}

impl BatchFill {
    /// Buffers for `nodes` nodes, sent at `batch_size` writes (at least 1) or after `bound`.
    pub fn new(nodes: usize, batch_size: usize, bound: Duration) -> Self {
        assert!(batch_size > 0, "a batch holds at least one write");
        Self {
            batch_size,
            bound,
            buffers: (0..nodes).map(|_| Mutex::default()).collect(),
        }
    }

    fn buffer(&self, node: usize) -> std::sync::MutexGuard<'_, Buffer> {
        // A worker that panicked holding the lock left the buffer whole: nothing in it awaits.
        self.buffers[node]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds `writes` to `node`'s buffer at `now`; returns the full batches to send, oldest
    /// writes first.
    pub fn add(
        &self,
        node: usize,
        writes: Vec<PlannedWrite>,
        now: Instant,
    ) -> Vec<Vec<PlannedWrite>> {
        let mut buffer = self.buffer(node);
        if buffer.writes.is_empty() {
            buffer.since = Some(now);
        }
        buffer.writes.extend(writes);
        let mut full = Vec::new();
        while buffer.writes.len() >= self.batch_size {
            let rest = buffer.writes.split_off(self.batch_size);
            full.push(std::mem::replace(&mut buffer.writes, rest));
            // A buffer holds fewer than a batch before an add, so what is left came with it.
            buffer.since = Some(now);
        }
        if buffer.writes.is_empty() {
            buffer.since = None;
        }
        full
    }

    /// Takes every non-empty buffer whose oldest write arrived `bound` or longer before `now`
    /// (every non-empty buffer with `now` = `None`), as `(node, writes)`.
    fn take(&self, now: Option<Instant>) -> Vec<(usize, Vec<PlannedWrite>)> {
        let mut taken = Vec::new();
        for node in 0..self.buffers.len() {
            let mut buffer = self.buffer(node);
            let due = match (buffer.since, now) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(since), Some(now)) => now.saturating_duration_since(since) >= self.bound,
            };
            if due {
                buffer.since = None;
                taken.push((node, std::mem::take(&mut buffer.writes)));
            }
        }
        taken
    }

    /// The buffers whose oldest write has waited the bound at `now`, as `(node, writes)`.
    pub fn take_stale(&self, now: Instant) -> Vec<(usize, Vec<PlannedWrite>)> {
        self.take(Some(now))
    }

    /// Every buffer with writes in it, as `(node, writes)`: the run's last batches.
    pub fn take_all(&self) -> Vec<(usize, Vec<PlannedWrite>)> {
        self.take(None)
    }

    /// When the next buffer becomes stale, if any holds writes.
    pub fn next_stale(&self) -> Option<Instant> {
        (0..self.buffers.len())
            .filter_map(|node| self.buffer(node).since)
            .min()
            .map(|since| since + self.bound)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::cluster::tests::cluster;
    use crate::load::route::{LoadRouter, WriteRoute};

    /// `count` writes to counters spread over `counters`, keys `k-<first>..`.
    fn writes(first: usize, count: usize, counters: usize) -> Vec<PlannedWrite> {
        (first..first + count)
            .map(|n| PlannedWrite {
                counter: n * 7 % counters,
                delta: 1,
                key: Some(format!("k-{n}")),
            })
            .collect()
    }

    #[test]
    fn owners_get_full_batches_but_the_last() {
        let ids: Vec<String> = (0..300).map(|i| format!("c-{i}")).collect();
        let router = LoadRouter::new(&cluster(), &ids, WriteRoute::Owner);
        let fill = BatchFill::new(router.shards().len(), 1000, Duration::from_secs(3600));
        let now = Instant::now();
        let mut sent: Vec<(usize, Vec<PlannedWrite>)> = Vec::new();
        for claim in 0..20 {
            for (node, group) in router.split(writes(claim * 1000, 1000, ids.len())) {
                sent.extend(fill.add(node, group, now).into_iter().map(|b| (node, b)));
            }
        }
        assert_eq!(fill.take_stale(now), Vec::new(), "nothing waited the bound");
        assert!(sent.iter().all(|(_, batch)| batch.len() == 1000));
        let last = fill.take_all();
        assert!(
            last.iter()
                .all(|(_, batch)| (1..1000).contains(&batch.len()))
        );
        let mut per_node = BTreeSet::new();
        assert!(
            last.iter().all(|(node, _)| per_node.insert(*node)),
            "one last batch per node"
        );
        assert!(fill.take_all().is_empty());
        assert_eq!(fill.next_stale(), None);
        // Every write sent once, to its owner, with its key.
        sent.extend(last);
        let keys: BTreeSet<&str> = sent
            .iter()
            .flat_map(|(_, batch)| batch.iter().filter_map(|w| w.key.as_deref()))
            .collect();
        assert_eq!(keys.len(), 20_000);
        assert_eq!(sent.iter().map(|(_, b)| b.len()).sum::<usize>(), 20_000);
        let usa = cluster().topology().datacenters[0].placement(64);
        for (node, batch) in &sent {
            let shard = &router.shards()[*node];
            if shard.datacenter == "USA_0" {
                for write in batch {
                    let owner = usa.slots_for(&ids[write.counter], 1)[0] as usize;
                    assert_eq!(shard.index, owner);
                }
            }
        }
    }

    #[test]
    fn a_buffer_is_sent_once_its_oldest_write_waited_the_bound() {
        let fill = BatchFill::new(2, 10, Duration::from_millis(100));
        let start = Instant::now();
        assert!(fill.add(0, writes(0, 4, 1), start).is_empty());
        assert!(
            fill.add(0, writes(4, 3, 1), start + Duration::from_millis(60))
                .is_empty()
        );
        assert!(
            fill.add(1, writes(7, 2, 1), start + Duration::from_millis(80))
                .is_empty()
        );
        assert_eq!(fill.next_stale(), Some(start + Duration::from_millis(100)));
        assert!(
            fill.take_stale(start + Duration::from_millis(99))
                .is_empty()
        );
        let stale = fill.take_stale(start + Duration::from_millis(100));
        assert_eq!(stale, vec![(0, writes(0, 7, 1))]);
        assert_eq!(fill.next_stale(), Some(start + Duration::from_millis(180)));
        // A full batch goes at once; what is left waits from its own arrival.
        let at = start + Duration::from_millis(150);
        assert_eq!(fill.add(1, writes(9, 16, 1), at), vec![writes(7, 10, 1)]);
        assert_eq!(fill.next_stale(), Some(at + Duration::from_millis(100)));
        assert_eq!(fill.take_all(), vec![(1, writes(17, 8, 1))]);
    }
}
