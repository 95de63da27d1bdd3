//! Slot choice inside a datacenter: which of a counter's slots takes a write, and the way to
//! each slot's node ([`WriteRouter`]).
//!
//! A counter uses `numberOfShards` of the datacenter's slots, chosen by consistent hashing
//! ([`Placement`]). An item for a unique counter always goes to the slot its hash picks among
//! the counter's *base* slots (the count it was created with, which hot-counter growth never
//! changes), so an item written again lands where it did and changes nothing. A write with an
//! `Idempotency-Key` goes to the slot its key hashes to among the counter's first
//! `shard.default_number_of_shards` slots of the ring, whatever its description says: the same
//! on every node of the datacenter however much of the description each has heard, so a retry
//! meets its first attempt wherever it arrives, even if the counter was created elsewhere with
//! another slot count, or grew or shrank, in between. Other writes to a counter with one slot go
//! to it, and writes to a counter spread over several pick one by the configured [`Selection`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use geocount_model::wire::{BatchResponse, POSTCARD_CONTENT_TYPE};
use geocount_model::{Placement, Selection};
use geocount_net::{ClientError, HttpClient};
use geocount_sync::DescriptionTable;
use hyper::Method;

use crate::engine::key_scope::unscoped;
use crate::engine::write::{Change, WriteRequest};
use crate::peer::pulls::PeerSink;

/// Marks a request forwarded by another node: apply it here.
pub const FORWARDED_HEADER: &str = "x-geocount-forwarded";

/// Picks the slot for each write, and knows every slot's node (forwarding sends through its
/// client).
pub struct WriteRouter {
    placement: Placement,
    own_slot: u32,
    addresses: Vec<SocketAddr>,
    slot_names: Vec<String>,
    selection: Selection,
    next_turn: AtomicUsize,
    default_shards: u32,
    own_load: Arc<AtomicU64>,
    peers: Vec<(u32, Arc<PeerSink>)>,
    client: HttpClient,
}

/// What a router needs to know about the datacenter.
pub struct RouterSetup {
    /// The datacenter's ring.
    pub placement: Placement,
    /// This node's slot.
    pub own_slot: u32,
    /// Every slot's node address, by slot index.
    pub addresses: Vec<SocketAddr>,
    /// Every slot's name, by slot index.
    pub slot_names: Vec<String>,
    /// How writes pick among a counter's slots.
    pub selection: Selection,
    /// The slot count of counters without a description.
    pub default_shards: u32,
    /// This node's write rate.
    pub own_load: Arc<AtomicU64>,
    /// The peers' pull sinks (their reported loads), by slot index.
    pub peers: Vec<(u32, Arc<PeerSink>)>,
    /// The client for forwarding.
    pub client: HttpClient,
}

impl WriteRouter {
    /// A router for one node.
    pub fn new(setup: RouterSetup) -> Self {
        Self {
            placement: setup.placement,
            own_slot: setup.own_slot,
            addresses: setup.addresses,
            slot_names: setup.slot_names,
            selection: setup.selection,
            next_turn: AtomicUsize::new(0),
            default_shards: setup.default_shards,
            own_load: setup.own_load,
            peers: setup.peers,
            client: setup.client,
        }
    }

    /// This node's slot.
    pub fn own_slot(&self) -> u32 {
        self.own_slot
    }

    /// The counter's `numberOfShards` as `descriptions` know it.
    pub fn number_of_shards(&self, descriptions: &DescriptionTable, id: &str) -> u32 {
        self.shard_counts(descriptions, id).0
    }

    /// The slots counter `id` uses in this datacenter, by `descriptions`.
    pub fn slots_of(&self, descriptions: &DescriptionTable, id: &str) -> Vec<u32> {
        let shards = self.number_of_shards(descriptions, id);
        self.placement.slots_for(id, shards)
    }

    /// The counter's `(numberOfShards, baseNumberOfShards)` as `descriptions` know them.
    fn shard_counts(&self, descriptions: &DescriptionTable, id: &str) -> (u32, u32) {
        descriptions
            .get(id)
            .map_or((self.default_shards, self.default_shards), |d| {
                (
                    d.description.number_of_shards,
                    d.description.base_number_of_shards,
                )
            })
    }

    /// The slot a write making `change` to counter `id` (with idempotency key `key`) goes to,
    /// by the counter's slot counts in `descriptions`. The caller holds the table (its lock is
    /// never taken here, so a caller holding it cannot wait on itself behind a writer).
    pub fn target(
        &self,
        descriptions: &DescriptionTable,
        id: &str,
        change: &Change,
        key: Option<&str>,
    ) -> u32 {
        if self.addresses.len() == 1 {
            // A datacenter of one slot: every write is this node's.
            return self.own_slot;
        }
        let (shards, base) = self.shard_counts(descriptions, id);
        if let Change::Item { hash, .. } = change {
            // The low bits of the hash: the register an item raises is picked by its top bits.
            let base_slots = self.placement.slots_for(id, base);
            return base_slots[(hash % base_slots.len() as u64) as usize];
        }
        if let Some(key) = key {
            return self.key_target(id, key);
        }
        let slots = self.placement.slots_for(id, shards);
        if slots.len() == 1 {
            return slots[0];
        }
        match self.selection {
            Selection::RoundRobin => {
                slots[self.next_turn.fetch_add(1, Ordering::Relaxed) % slots.len()]
            }
            Selection::Random => slots[rand::random_range(0..slots.len())],
            Selection::LeastLoaded => *slots
                .iter()
                .min_by_key(|slot| (self.load_of(**slot), **slot != self.own_slot))
                .expect("a counter has at least one slot"),
        }
    }

    /// The slot a change of counter `id` with the client's idempotency key `key` is made at:
    /// a keyed write's (not an item's, which its hash pins) or a keyed change of its life.
    /// Not by the description's slot counts: a node that has not heard the description yet
    /// (or has heard an older one) would send a retry elsewhere, and it would count twice.
    pub fn key_target(&self, id: &str, key: &str) -> u32 {
        if self.addresses.len() == 1 {
            return self.own_slot;
        }
        let key_slots = self.placement.slots_for(id, self.default_shards);
        Placement::slot_for_key(&key_slots, key)
    }

    /// [`target`](Self::target) of `write`: a keyed write by its client's key alone, whoever
    /// sent it, so clients that route themselves find the same slot.
    pub fn target_of(&self, descriptions: &DescriptionTable, write: &WriteRequest) -> u32 {
        self.target(
            descriptions,
            write.id.as_str(),
            &write.change,
            write.idempotency_key.as_deref().map(unscoped),
        )
    }

    fn load_of(&self, slot: u32) -> u64 {
        if slot == self.own_slot {
            return self.own_load.load(Ordering::Relaxed);
        }
        self.peers
            .iter()
            .find(|(s, _)| *s == slot)
            .map_or(u64::MAX, |(_, peer)| peer.load())
    }

    /// The name of slot `slot`.
    pub fn slot_name(&self, slot: u32) -> &str {
        &self.slot_names[slot as usize]
    }

    /// The address of slot `slot`'s node.
    pub fn address(&self, slot: u32) -> SocketAddr {
        self.addresses[slot as usize]
    }
}

impl WriteRouter {
    /// Sends a request to slot `slot`'s node as it is: a change of a counter's life that the
    /// node of its `Idempotency-Key` makes.
    pub async fn send(
        &self,
        slot: u32,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<geocount_net::Answer, ClientError> {
        let url = self.client.url(self.address(slot), path);
        self.client.send(method, &url, headers, body).await
    }

    /// Sends an encoded batch to `path` (`/batch` or `/batch/items`) of slot `slot`'s node,
    /// marked as forwarded.
    pub async fn forward(
        &self,
        slot: u32,
        path: &str,
        batch: Bytes,
    ) -> Result<BatchResponse, ForwardError> {
        let url = self.client.url(self.address(slot), path);
        let headers = [
            ("content-type", POSTCARD_CONTENT_TYPE),
            (FORWARDED_HEADER, "1"),
        ];
        let answer = self
            .client
            .send(Method::POST, &url, &headers, batch)
            .await?;
        if refused_whole(answer.status) {
            return Err(ForwardError::Refused {
                status: answer.status.as_u16(),
                error: String::from_utf8_lossy(&answer.body).into_owned(),
            });
        }
        if !answer.status.is_success() {
            return Err(ClientError::Transport {
                url,
                message: format!(
                    "answered {}: {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                ),
            }
            .into());
        }
        postcard::from_bytes(&answer.body).map_err(|e| {
            ClientError::Transport {
                url,
                message: format!("undecodable batch answer: {e}"),
            }
            .into()
        })
    }
}

/// Whether a shard node's answer of `status` to a forwarded batch refused it whole, applying
/// nothing: every 4xx, and 503 (restoring, stopping, or fenced after a storage failure), are
/// answered before any write is staged. Other failures may come after a write was applied.
fn refused_whole(status: hyper::StatusCode) -> bool {
    status.is_client_error() || status == hyper::StatusCode::SERVICE_UNAVAILABLE
}

/// Why a forwarded batch has no outcomes.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The target refused the whole batch and applied none of it.
    #[error("refused with {status}: {error}")]
    Refused {
        /// The target's HTTP status.
        status: u16,
        /// Its answer's body.
        error: String,
    },
    /// The request failed: not sent at all ([`ClientError::is_connect`]), or of unknown outcome.
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl ForwardError {
    /// Whether the batch certainly never reached the target.
    pub fn is_connect(&self) -> bool {
        matches!(self, ForwardError::Client(error) if error.is_connect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::SlotId;
    use std::collections::HashSet;
    use std::time::Duration;

    const DELTA: Change = Change::Delta(1);

    /// A node that has heard no description.
    static NONE: std::sync::LazyLock<DescriptionTable> =
        std::sync::LazyLock::new(DescriptionTable::default);

    fn router(selection: Selection, own_load: u64) -> WriteRouter {
        WriteRouter::new(RouterSetup {
            placement: Placement::new("USA_0", 3, 16),
            own_slot: 1,
            addresses: (0..3)
                .map(|n| SocketAddr::from(([127, 0, 0, 1], 9000 + n)))
                .collect(),
            slot_names: (0..3)
                .map(|n| SlotId::new("USA_0", n).to_string())
                .collect(),
            selection,
            // Every counter spread over all three slots.
            default_shards: 3,
            own_load: Arc::new(AtomicU64::new(own_load)),
            peers: Vec::new(),
            client: HttpClient::new(Duration::from_secs(1)),
        })
    }

    /// The slots `times` unkeyed deltas to counter `id` go to.
    fn unkeyed_targets<C: FromIterator<u32>>(
        router: &WriteRouter,
        heard: &DescriptionTable,
        id: &str,
        times: usize,
    ) -> C {
        (0..times)
            .map(|_| router.target(heard, id, &DELTA, None))
            .collect()
    }

    /// The slot each of `items` of counter `u` goes to, with idempotency key `key`.
    fn item_targets(router: &WriteRouter, items: &[Change], key: Option<&str>) -> Vec<u32> {
        items
            .iter()
            .map(|i| router.target(&NONE, "u", i, key))
            .collect()
    }

    #[test]
    fn round_robin_takes_each_slot_in_turn() {
        let router = router(Selection::RoundRobin, 0);
        let picks: Vec<u32> = unkeyed_targets(&router, &NONE, "c", 6);
        assert_eq!(
            picks[..3].iter().collect::<HashSet<_>>().len(),
            3,
            "{picks:?}"
        );
        assert_eq!(picks[..3], picks[3..]);
    }

    #[test]
    fn random_reaches_every_slot() {
        let router = router(Selection::Random, 0);
        let picks: HashSet<u32> = unkeyed_targets(&router, &NONE, "c", 200);
        assert_eq!(picks.len(), 3);
    }

    #[test]
    fn least_loaded_prefers_a_node_that_reported_less() {
        // Peers that never reported count as fully loaded: the own slot wins.
        let router = router(Selection::LeastLoaded, 1_000_000);
        assert!((0..10).all(|_| router.target(&NONE, "c", &DELTA, None) == 1));
    }

    #[test]
    fn a_keys_slot_depends_on_neither_the_description_heard_nor_growth() {
        use geocount_model::{CounterDescription, CounterId, HlcTimestamp, VersionedDescription};
        let mut router = router(Selection::RoundRobin, 0);
        // Counters take two of the three slots by default.
        router.default_shards = 2;
        let describe = |base: u32, shards: u32, at: u64| VersionedDescription {
            description: CounterDescription {
                id: CounterId::new("hot").unwrap(),
                counter_type: Default::default(),
                number_of_shards: shards,
                base_number_of_shards: base,
                window_seconds: 300,
                created_at_ms: 0,
                generation: Default::default(),
                deleted: false,
                expires_at_ms: None,
                history: Vec::new(),
                min: None,
                max: None,
            },
            version: HlcTimestamp {
                physical_ms: at,
                logical: 0,
                node: 0,
            },
        };
        let keys: Vec<String> = (0..50).map(|n| format!("key-{n}")).collect();
        let targets = |descriptions: &DescriptionTable| -> Vec<u32> {
            keys.iter()
                .map(|k| router.target(descriptions, "hot", &DELTA, Some(k)))
                .collect()
        };
        // A node that has not heard of the counter yet.
        let unheard = targets(&NONE);
        assert_eq!(unheard.iter().collect::<HashSet<_>>().len(), 2);
        // Created elsewhere with one slot, then with three (a later description wins), then
        // grown from one to three: a retry must meet its first attempt all along.
        let mut heard = DescriptionTable::default();
        for (base, shards, at) in [(1, 1, 1), (3, 3, 2), (1, 3, 3)] {
            heard.merge(describe(base, shards, at));
            assert_eq!(targets(&heard), unheard, "base {base}, {shards} slots");
        }
        // Unkeyed writes do use the description's slots.
        let unkeyed: HashSet<u32> = unkeyed_targets(&router, &heard, "hot", 6);
        assert_eq!(unkeyed.len(), 3);
    }

    #[test]
    fn an_item_always_goes_to_the_same_base_slot_and_items_spread_over_them() {
        let router = router(Selection::RoundRobin, 0);
        let items: Vec<Change> = (0..60)
            .map(|n| Change::item(&format!("user-{n}")))
            .collect();
        let first = item_targets(&router, &items, None);
        for _ in 0..3 {
            let again = item_targets(&router, &items, None);
            assert_eq!(again, first, "round robin does not move items");
        }
        assert_eq!(first.iter().collect::<HashSet<_>>().len(), 3, "{first:?}");
        let keyed = item_targets(&router, &items, Some("k"));
        assert_eq!(keyed, first, "a key does not move an item");
    }

    #[test]
    fn a_keyed_change_of_life_goes_where_a_keyed_write_does() {
        let router = router(Selection::RoundRobin, 0);
        for n in 0..30 {
            let key = format!("key-{n}");
            let write = router.target(&NONE, "c", &DELTA, Some(&key));
            assert_eq!(router.key_target("c", &key), write, "{key}");
        }
    }

    #[test]
    fn a_key_always_picks_the_same_slot_whatever_the_selection() {
        for selection in [
            Selection::RoundRobin,
            Selection::Random,
            Selection::LeastLoaded,
        ] {
            let router = router(selection, 0);
            let first = router.target(&NONE, "c", &DELTA, Some("retry-1"));
            assert!((0..20).all(|_| router.target(&NONE, "c", &DELTA, Some("retry-1")) == first));
        }
    }
}
