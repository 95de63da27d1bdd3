//! The simulated cluster: two datacenters of two shard nodes each, two replicas of each
//! datacenter's aggregator and of the global aggregator, in a counter space of two partitions;
//! each process the real tier's `run` on a turmoil host of its own.

use std::collections::BTreeMap;
use std::future::{Future, Pending};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use geocount_aggregator::{DatacenterSettings, GlobalSettings, datacenter, global};
use geocount_model::{Clock, SyncSettings, Topology, partition_of};
use geocount_net::Connector;
use rand::Rng;
use rand::rngs::StdRng;
use shard_node::{NodeConfig, RestoreMode, StorageError};
use turmoil::Sim;

use crate::disk_faults::DiskFaults;
use crate::seams::{DiskLoss, SimClock, SimListener, sim_connector, sim_storage};

/// The port every simulated tier listens on (each host has an address of its own).
pub const PORT: u16 = 7000;

/// The datacenters, by name.
pub const DATACENTERS: [&str; 2] = ["EU_0", "US_0"];

/// Shard nodes per datacenter.
pub const SHARDS_PER_DATACENTER: usize = 2;

/// Replicas of each aggregation tier: of every datacenter's aggregator, and of the global one.
pub const REPLICAS: usize = 2;

/// Partitions of the counter space.
pub const PARTITIONS: u32 = 2;

/// Every partition: what a replica holding the whole counter space lists.
const ALL_PARTITIONS: &[u32] = &[0, 1];

/// The partitions each global replica holds, by replica: one each, so that a restore needs
/// both to cover a slot.
const GLOBAL_PARTITIONS: [&[u32]; REPLICAS] = [&[0], &[1]];

/// Unix milliseconds at which every simulation starts (a fixed instant: runs must repeat).
const EPOCH_MS: u64 = 1_750_000_000_000;

/// Where a shard node keeps its data on its host's disk.
const DATA_DIR: &str = "/data/shard";

/// The partitions each replica of datacenter `dc`'s aggregator holds, by replica: in the first
/// datacenter both hold every partition, in the others one each (every global replica pulls
/// its partition from a replica that holds it whole, as the topology requires).
pub fn aggregator_partitions(dc: &str) -> [&'static [u32]; REPLICAS] {
    if dc == DATACENTERS[0] {
        [ALL_PARTITIONS; REPLICAS]
    } else {
        GLOBAL_PARTITIONS
    }
}

/// The partitions each global replica holds, by replica.
pub fn global_partitions() -> [&'static [u32]; REPLICAS] {
    GLOBAL_PARTITIONS
}

/// Whether a replica holding `partitions` holds counter `id`.
pub fn holds(partitions: &[u32], id: &str) -> bool {
    partitions.contains(&partition_of(id, PARTITIONS))
}

/// The host name of global aggregator replica `replica`.
pub fn global_host(replica: usize) -> String {
    format!("global-{replica}")
}

/// The host name of replica `replica` of datacenter `dc`'s aggregator.
pub fn aggregator_host(dc: &str, replica: usize) -> String {
    format!("agg-{dc}-{replica}")
}

/// The host names of every replica of datacenter `dc`'s aggregator.
pub fn aggregator_hosts(dc: &str) -> Vec<String> {
    (0..REPLICAS).map(|r| aggregator_host(dc, r)).collect()
}

/// The host names of every global aggregator replica.
pub fn global_hosts() -> Vec<String> {
    (0..REPLICAS).map(global_host).collect()
}

/// The host name of shard node `slot` of datacenter `dc`.
pub fn shard_host(dc: &str, slot: usize) -> String {
    format!("shard-{dc}-{slot}")
}

/// The topology of the simulated cluster, with the addresses turmoil gave the hosts.
pub fn topology(sim: &Sim<'_>) -> Topology {
    let addr = |host: &str| format!("\"{}\"", SocketAddr::new(sim.lookup(host), PORT));
    let list = |items: Vec<String>| format!("[{}]", items.join(", "));
    let held = |replicas: [&[u32]; REPLICAS]| {
        list(replicas.iter().map(|held| format!("{held:?}")).collect())
    };
    let mut text = format!(
        r#"
partitions = {PARTITIONS}

[global]
listen = {global}
replicas = {replicas}
partitions = {global_partitions}

[shard]
data_dir = "/data"
# Small segments and frequent checkpoints, so that crashes land between every storage step.
checkpoint_log_bytes = 4096
checkpoint_interval_ms = 500
restore_timeout_ms = 1000
"#,
        global = addr(&global_host(0)),
        replicas = list((1..REPLICAS).map(|r| addr(&global_host(r))).collect()),
        global_partitions = held(global_partitions()),
    );
    for dc in DATACENTERS {
        let shards = (0..SHARDS_PER_DATACENTER).map(|slot| addr(&shard_host(dc, slot)));
        text.push_str(&format!(
            "\n[[datacenters]]\nname = \"{dc}\"\naggregator = {}\naggregator_replicas = {}\n\
             aggregator_partitions = {}\nshards = {}\n",
            addr(&aggregator_host(dc, 0)),
            list(
                (1..REPLICAS)
                    .map(|r| addr(&aggregator_host(dc, r)))
                    .collect()
            ),
            held(aggregator_partitions(dc)),
            list(shards.collect()),
        ));
    }
    Topology::from_toml("simulated", &text).expect("the simulated topology is valid")
}

/// How long after every fault has healed, and every write was acknowledged, each tier must show
/// the exact totals: a pull cut off by the fault may hang until its timeout, then each tier
/// pulls within its interval (shard → datacenter, then datacenter → global), each pull taking a
/// round trip at the highest latency a link had (`max_latency` one way).
pub fn staleness_bound(sync: &SyncSettings, max_latency: Duration) -> Duration {
    Duration::from_millis(
        sync.timeout_ms + sync.shard_to_datacenter_ms + sync.datacenter_to_global_ms,
    ) + max_latency * 4
}

/// What the driver holds of a shard host's disk.
#[derive(Debug, Clone, Default)]
pub struct ShardDisk {
    /// Its loss: gone at the host's next start.
    pub loss: DiskLoss,
    /// Its faults.
    pub faults: DiskFaults,
}

/// Registers every tier of `topology` as a host of `sim`. Each host's clock is off by up to
/// `max_skew_ms` (drawn from `rng`). Returns each shard host's disk, by host name.
pub fn register_hosts(
    sim: &mut Sim<'_>,
    topology: &Topology,
    rng: &mut StdRng,
    max_skew_ms: u64,
) -> BTreeMap<String, ShardDisk> {
    let file = Path::new("simulated.toml");
    let mut clock = || -> Arc<dyn Clock> {
        Arc::new(SimClock {
            epoch_ms: EPOCH_MS + rng.random_range(0..=max_skew_ms),
        })
    };
    let never = std::future::pending::<()>;
    let mut disks = BTreeMap::new();

    for replica in 0..REPLICAS {
        let config =
            GlobalSettings::from_topology(topology, file, replica).expect("a global replica");
        aggregator(sim, global_host(replica), config, clock(), global::run);
    }
    for dc in DATACENTERS {
        for replica in 0..REPLICAS {
            let config = DatacenterSettings::from_topology(topology, file, dc, replica)
                .expect("a datacenter aggregator replica");
            let host = aggregator_host(dc, replica);
            aggregator(sim, host, config, clock(), datacenter::run);
        }
        for slot in 0..SHARDS_PER_DATACENTER {
            let data_dir = Some(PathBuf::from(DATA_DIR));
            let config = NodeConfig::from_topology(topology, file, dc, slot as u32, data_dir)
                .expect("a shard slot");
            let clock_of = clock();
            // The first start begins a new slot; every later one (after a crash, or on an
            // emptied disk) must find its slot on disk or restore it.
            let started = Arc::new(AtomicBool::new(false));
            let disk = ShardDisk::default();
            disks.insert(shard_host(dc, slot), disk.clone());
            tier(sim, shard_host(dc, slot), move |listener| {
                disk.loss
                    .wipe_if_lost(Path::new(DATA_DIR))
                    .expect("the simulated disk can be wiped");
                disk.faults.started();
                let faults = disk.faults.clone();
                let (clock, connector, storage) = (
                    clock_of.clone(),
                    sim_connector(),
                    sim_storage(faults.clone()),
                );
                let mut config = config.clone();
                if !started.swap(true, Ordering::Relaxed) {
                    config.restore = RestoreMode::Empty;
                }
                async move {
                    let ended =
                        shard_node::run(config, listener, clock, connector, storage, never());
                    ended.await.or_else(|error| faults.ended(error))
                }
            });
        }
    }
    disks
}

/// Registers host `name`, an aggregator tier: `run` (global or datacenter) with `config`, the
/// host's `clock` and the simulated network, serving until the host stops.
fn aggregator<C, Fut>(
    sim: &mut Sim<'_>,
    name: String,
    config: C,
    clock: Arc<dyn Clock>,
    run: impl Fn(C, SimListener, Arc<dyn Clock>, Connector, Pending<()>) -> Fut + Clone + 'static,
) where
    C: Clone + 'static,
    Fut: Future<Output = ()> + 'static,
{
    tier(sim, name, move |listener| {
        let (config, clock) = (config.clone(), clock.clone());
        run(
            config,
            listener,
            clock,
            sim_connector(),
            std::future::pending(),
        )
    });
}

/// How a tier's `run` ended, as turmoil takes a host's end.
trait Ended {
    fn ended(self) -> turmoil::Result;
}

impl Ended for () {
    fn ended(self) -> turmoil::Result {
        Ok(())
    }
}

impl Ended for Result<(), StorageError> {
    fn ended(self) -> turmoil::Result {
        Ok(self?)
    }
}

/// Registers host `name`, whose software (started again at every bounce) listens on [`PORT`]
/// and hands the listener to `serve`.
fn tier<F, Fut>(sim: &mut Sim<'_>, name: String, serve: F)
where
    F: Fn(SimListener) -> Fut + Clone + 'static,
    Fut: Future<Output: Ended> + 'static,
{
    sim.host(name, move || {
        let serve = serve.clone();
        async move { serve(SimListener::bind(PORT).await?).await.ended() }
    });
}

/// The address of `host`'s tier, as a URL prefix (`http://ip:port`).
pub fn base_url(ip: IpAddr) -> String {
    format!("http://{}", SocketAddr::new(ip, PORT))
}
