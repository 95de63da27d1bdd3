//! Which shard node each of the load's requests goes to.
//!
//! Requests take turns over every shard node of every datacenter, so each datacenter gets a
//! share of the writes in proportion to its node count. With [`WriteRoute::Owner`] (the
//! default) a request to a datacenter is split by the node that owns each write's slot there,
//! the way a client that knows the topology sends, so no write is forwarded between shard
//! nodes. With [`WriteRoute::Any`] the whole request goes to the node whose turn it is, the way
//! a client behind a plain load balancer sends, and that node forwards what it does not own.
//!
//! The owner is computed from the same placement ring and the same rule as the shard nodes'
//! ([`geocount_model::Placement`]): a keyed write goes to the slot its key picks among the
//! counter's first `shard.default_number_of_shards` slots, whatever the counter's own slot
//! count. A node that disagrees (one started from another topology file) still forwards, so
//! routing is only ever a shortcut, never a correctness matter.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use geocount_model::Placement;

use crate::cluster::{ClusterClient, ShardNode};
use crate::load::send::PlannedWrite;

/// How the load picks the node for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRoute {
    /// To the node owning the write's slot in the datacenter whose turn it is.
    Owner,
    /// To whichever node's turn it is; that node forwards writes it does not own.
    Any,
}

impl fmt::Display for WriteRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WriteRoute::Owner => "owner",
            WriteRoute::Any => "any",
        })
    }
}

/// The slots of every counter of the load in one datacenter.
#[derive(Debug)]
struct DatacenterSlots {
    /// The index in [`LoadRouter::shards`] of the datacenter's node of slot 0.
    first_node: usize,
    /// How many slots each counter's keyed writes spread over here.
    per_counter: usize,
    /// Counter `i`'s slots for keyed writes: `slots[i * per_counter..(i + 1) * per_counter]`.
    slots: Vec<u32>,
}

/// Sends each request of the load to its node(s).
#[derive(Debug)]
pub struct LoadRouter {
    route: WriteRoute,
    shards: Vec<ShardNode>,
    /// The index in `datacenters` of each node's datacenter.
    datacenter_of: Vec<usize>,
    datacenters: Vec<DatacenterSlots>,
    next_turn: AtomicUsize,
}

impl LoadRouter {
    /// A router over every shard node of `cluster` for the counters `ids`.
    pub fn new(cluster: &ClusterClient, ids: &[String], route: WriteRoute) -> Self {
        let topology = cluster.topology();
        // In topology order, as `datacenter_of` counts them.
        let shards = cluster.shards();
        let mut datacenter_of = Vec::with_capacity(shards.len());
        let mut datacenters = Vec::new();
        for (index, dc) in topology.datacenters.iter().enumerate() {
            let first_node = datacenter_of.len();
            datacenter_of.extend(std::iter::repeat_n(index, dc.shards.len()));
            if route == WriteRoute::Any {
                continue;
            }
            let placement = dc.placement(topology.shard.virtual_nodes);
            let key_slots = topology.shard.default_number_of_shards;
            let per_counter = key_slots.clamp(1, placement.slot_count()) as usize;
            let mut slots = Vec::with_capacity(ids.len() * per_counter);
            for id in ids {
                slots.extend(placement.slots_for(id, key_slots));
            }
            datacenters.push(DatacenterSlots {
                first_node,
                per_counter,
                slots,
            });
        }
        Self {
            route,
            shards,
            datacenter_of,
            datacenters,
            next_turn: AtomicUsize::new(0),
        }
    }

    /// Every shard node, in topology order.
    pub fn shards(&self) -> &[ShardNode] {
        &self.shards
    }

    /// How writes pick their node.
    pub fn route(&self) -> WriteRoute {
        self.route
    }

    /// The requests that carry `writes` (at least one): each node (its index in
    /// [`Self::shards`]) with the writes it gets, in node order.
    pub fn split(&self, writes: Vec<PlannedWrite>) -> Vec<(usize, Vec<PlannedWrite>)> {
        let turn = self.next_turn.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        if self.route == WriteRoute::Any {
            return vec![(turn, writes)];
        }
        let dc = &self.datacenters[self.datacenter_of[turn]];
        let mut by_node: Vec<(usize, Vec<PlannedWrite>)> = Vec::new();
        for write in writes {
            let start = write.counter * dc.per_counter;
            let slots = &dc.slots[start..start + dc.per_counter];
            let node = dc.first_node
                + Placement::slot_for_key(slots, write.key.as_deref().unwrap_or_default()) as usize;
            match by_node.iter_mut().find(|(n, _)| *n == node) {
                Some((_, group)) => group.push(write),
                None => by_node.push((node, vec![write])),
            }
        }
        by_node.sort_unstable_by_key(|(node, _)| *node);
        by_node
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::cluster;

    fn writes(ids: &[String]) -> Vec<PlannedWrite> {
        (0..ids.len())
            .map(|counter| PlannedWrite {
                counter,
                delta: 1,
                key: Some(format!("k-{counter}")),
            })
            .collect()
    }

    /// A router over USA_0 (two nodes) and ASIA_0 (one).
    fn router(route: WriteRoute, ids: &[String]) -> LoadRouter {
        LoadRouter::new(&cluster(), ids, route)
    }

    #[test]
    fn owner_sends_each_write_to_the_node_owning_its_slot() {
        let ids: Vec<String> = (0..300).map(|i| format!("c-{i}")).collect();
        let router = router(WriteRoute::Owner, &ids);
        let usa = cluster().topology().datacenters[0].placement(64);
        // Turns 0 and 1 are USA's nodes: each request splits over both by owner.
        for _ in 0..2 {
            let requests = router.split(writes(&ids));
            assert_eq!(requests.len(), 2, "300 counters cover both USA nodes");
            let mut carried = 0;
            for (node, group) in &requests {
                let node = &router.shards()[*node];
                assert_eq!(node.datacenter, "USA_0");
                for write in group {
                    let owner = usa.slots_for(&ids[write.counter], 1)[0] as usize;
                    assert_eq!(node.index, owner, "{}", ids[write.counter]);
                }
                carried += group.len();
            }
            assert_eq!(carried, ids.len(), "no write lost or repeated");
        }
        // Turn 2 is ASIA's one node: one request with everything.
        let requests = router.split(writes(&ids));
        assert_eq!(requests.len(), 1);
        assert_eq!(router.shards()[requests[0].0].datacenter, "ASIA_0");
        assert_eq!(requests[0].1.len(), ids.len());
    }

    #[test]
    fn any_sends_each_request_whole_to_the_next_node() {
        let ids: Vec<String> = (0..50).map(|i| format!("c-{i}")).collect();
        let router = router(WriteRoute::Any, &ids);
        let visited: Vec<(String, usize)> = (0..4)
            .map(|_| {
                let requests = router.split(writes(&ids));
                assert_eq!(requests.len(), 1);
                assert_eq!(requests[0].1.len(), ids.len());
                let node = &router.shards()[requests[0].0];
                (node.datacenter.clone(), node.index)
            })
            .collect();
        let expected: Vec<(String, usize)> =
            [("USA_0", 0), ("USA_0", 1), ("ASIA_0", 0), ("USA_0", 0)]
                .map(|(dc, i)| (dc.to_owned(), i))
                .to_vec();
        assert_eq!(visited, expected);
    }
}
