//! A whole test cluster on one [`TestTopology`]: every shard node, the datacenter aggregators
//! asked for and the global aggregator, started tier by tier in that order (each tier finds the
//! one below up), all stopped when it is dropped.

use futures_util::future::join_all;

use crate::{NodeProcess, TestTopology};

/// The running processes of a [`TestTopology`], indexed as its `datacenters` list is.
#[derive(Debug)]
pub struct TestCluster {
    /// Shard `n` of datacenter `d` at `shards[d][n]`.
    pub shards: Vec<Vec<NodeProcess>>,
    /// The aggregator of datacenter `d` at `aggregators[d]`, when started.
    pub aggregators: Vec<Option<NodeProcess>>,
    /// The global aggregator.
    pub global: NodeProcess,
    /// The topology they run; dropped last, since it holds their data and logs.
    pub topology: TestTopology,
}

impl TestCluster {
    /// Every process of `topology`.
    pub async fn start(topology: TestTopology) -> Self {
        Self::start_with(topology, |_| true).await
    }

    /// Every shard node, the aggregators of the datacenters (by index) `with_aggregator`
    /// accepts, and the global aggregator.
    pub async fn start_with(
        topology: TestTopology,
        with_aggregator: impl Fn(usize) -> bool,
    ) -> Self {
        let names: Vec<String> = topology
            .topology
            .datacenters
            .iter()
            .map(|dc| dc.name.clone())
            .collect();
        // The processes of one tier do not wait for each other: each tier starts at once.
        let (tiers, with_aggregator) = (&topology, &with_aggregator);
        let shards = join_all(names.iter().enumerate().map(|(d, dc)| {
            let slots = 0..tiers.topology.datacenters[d].shards.len();
            join_all(slots.map(|slot| tiers.start_shard(dc, slot)))
        }))
        .await;
        let aggregators = join_all(names.iter().enumerate().map(|(d, dc)| async move {
            match with_aggregator(d) {
                true => Some(tiers.start_datacenter_aggregator(dc).await),
                false => None,
            }
        }))
        .await;
        let global = topology.start_global_aggregator().await;
        Self {
            shards,
            aggregators,
            global,
            topology,
        }
    }

    /// The aggregator of datacenter `dc`, which must have been started.
    pub fn aggregator(&self, dc: usize) -> &NodeProcess {
        self.aggregators[dc].as_ref().expect("aggregator started")
    }

    /// Like [`TestCluster::aggregator`], to kill or restart it.
    pub fn aggregator_mut(&mut self, dc: usize) -> &mut NodeProcess {
        self.aggregators[dc].as_mut().expect("aggregator started")
    }

    /// How many shard nodes run, in every datacenter together.
    pub fn shard_count(&self) -> usize {
        self.shards.iter().map(Vec::len).sum()
    }

    /// Shard node `n` counting datacenter after datacenter (with 2 shards each, `2` is the
    /// first of the second datacenter).
    pub fn nth_shard(&self, n: usize) -> &NodeProcess {
        self.shards
            .iter()
            .flatten()
            .nth(n)
            .expect("shard node exists")
    }
}
