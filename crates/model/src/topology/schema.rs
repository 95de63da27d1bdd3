//! The topology file's schema: its sections and keys as serde reads them, their defaults and
//! bounds, and what the binaries ask of a loaded topology (a datacenter, a slot's address).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Durability, ShardDefaults, Topology, TopologyError};
use crate::{Partitions, Placement, SlotId};

/// How much state each aggregator holds (`[aggregator]`), in bytes as
/// [`crate::held_bytes`] estimates them: the copies it pulls from the tier below. A pulled
/// entry that would take it past its bound is refused and counted, and the aggregator reports
/// the slots it refused as incomplete, so reads never pass a partial sum off as whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AggregatorSettings {
    /// The most state bytes a datacenter aggregator holds of its shards' slots. At least the
    /// sum of its shards' `shard.max_state_bytes` never refuses an entry.
    pub datacenter_max_state_bytes: u64,
    /// The most state bytes the global aggregator holds of every datacenter's slots.
    pub global_max_state_bytes: u64,
}

impl Default for AggregatorSettings {
    /// Sized so that each tier's one process fits this 24 GiB machine with room for the
    /// allocator and the tables' own overhead: two shard nodes' worth for a datacenter
    /// aggregator, four for the global aggregator.
    fn default() -> Self {
        Self {
            datacenter_max_state_bytes: 8 << 30,
            global_max_state_bytes: 16 << 30,
        }
    }
}

/// How every tier's process uses memory (`[memory]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySettings {
    /// Let the heap use transparent huge pages. Off (the default), the process asks the
    /// kernel for none, as Redis does: resident memory stays close to what the tables hold
    /// (about 25 MB less at 1,000,000 counters on a shard node). On, lookups in tables of many
    /// millions of counters miss the TLB less (batches uniform over 10,000,000 counters about
    /// 40 % faster here), for memory the kernel fills out to whole 2 MiB pages
    /// (docs/configuration.md, "[memory]").
    pub huge_pages: bool,
}

/// Limits of every tier's HTTP listener (`[http]`), against too many or too slow clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// The most client connections a listener keeps open at once; one more is accepted and
    /// closed at once. With `[tls]`, connections whose client certificate names a tier process
    /// have a budget of their own as large, so clients cannot starve the tiers' pulls.
    pub max_connections: usize,
    /// The most connections a listener keeps open at once from one IP address, so one host
    /// (a client pooling too many connections, or opening idle sockets) cannot take every
    /// connection from the others and the tiers' pulls; one more from it is closed at once.
    pub max_connections_per_peer: usize,
    /// A client must send a request's whole header within this many milliseconds of the
    /// connection being ready for it (opened, or the previous answer sent): it also closes
    /// idle keep-alive connections.
    pub header_read_timeout_ms: u64,
    /// A request's whole body must arrive within this many milliseconds of the handler starting
    /// to read it; a slower one is answered 408 and nothing of it is applied.
    pub body_read_timeout_ms: u64,
    /// The most rankings and sums that scan every counter (a `/topk` over any window but the
    /// live trending one, or one the kept leaders cannot answer; every `/aggregate`) an
    /// aggregator runs at once, each on a thread of its own; one more is answered 429 with
    /// `Retry-After`, so scans cannot take every core from reads and merges (1 to
    /// [`MAX_CONCURRENT_SCANS`]).
    pub max_concurrent_scans: usize,
}

/// The most scans `http.max_concurrent_scans` may allow: each holds a blocking thread.
pub const MAX_CONCURRENT_SCANS: usize = 256;

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_connections_per_peer: 1_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            max_concurrent_scans: 2,
        }
    }
}

/// The least `shard.max_counter_bytes`: a counter with the longest id (256 bytes), its
/// description and a few window buckets.
pub const MIN_COUNTER_BYTES: u64 = 1_024;

/// The most points each slot may own on the placement ring (`shard.virtual_nodes`): the ring
/// of a datacenter is built in memory at start-up, so its size must stay bounded.
pub const MAX_VIRTUAL_NODES: u32 = 4_096;

/// The most delay or jitter a WAN link takes, in milliseconds: the emulator's own limit.
pub const MAX_WAN_DELAY_MS: u64 = 60_000;

/// The emulated WAN (`[wan]`), read only by `geocount-cluster --wan`: where the global
/// aggregator runs, and the delay between regions. Traffic inside a region stays direct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WanSettings {
    /// The region the global aggregator runs in: one of the datacenters' regions.
    pub global_region: String,
    /// Where the emulator's control API listens.
    pub control: SocketAddr,
    /// The links between regions. Every region with a datacenter, other than
    /// `global_region`, needs one with `global_region`: its aggregator talks to the global one.
    #[serde(default)]
    pub links: Vec<RegionLink>,
}

/// The WAN between two regions (`[[wan.links]]`), the same in both directions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionLink {
    /// The two regions, in either order (`["USA", "ASIA"]`).
    pub between: [String; 2],
    /// One-way delay in milliseconds (a round trip gains twice this); at most 60,000.
    pub delay_ms: u64,
    /// Each chunk's delay varies uniformly within ± this many milliseconds (default 0); at most
    /// 60,000.
    #[serde(default)]
    pub jitter_ms: u64,
    /// The most bytes per second each direction of each link carries; 0 (the default) is none.
    #[serde(default)]
    pub bandwidth_bytes_per_sec: u64,
}

impl WanSettings {
    /// The link between regions `a` and `b`, in either order.
    pub fn link(&self, a: &str, b: &str) -> Option<&RegionLink> {
        self.links.iter().find(|link| link.joins(a, b))
    }
}

impl RegionLink {
    /// Whether it is the link between regions `a` and `b`, in either order.
    pub fn joins(&self, a: &str, b: &str) -> bool {
        self.between == [a, b] || self.between == [b, a]
    }
}

/// Trending thresholds (`[trending]`): a counter whose id starts with a configured prefix is
/// trending while its count in the last `window_seconds` is at or over that prefix's threshold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrendingConfig {
    /// The window trending counts are taken over, ending now, in seconds (default 300; at most
    /// `shard.max_window_seconds`).
    pub window_seconds: u32,
    /// The minimum count in the window, per id prefix (e.g. `"#" = 10000`); at least 1 each.
    /// Only these prefixes can be asked for. Default: none.
    pub thresholds: BTreeMap<String, i64>,
}

impl TrendingConfig {
    /// The threshold of prefix `prefix`, or a message naming the configured prefixes.
    pub fn threshold(&self, prefix: &str) -> Result<i64, String> {
        self.thresholds.get(prefix).copied().ok_or_else(|| {
            let known: Vec<String> = self.thresholds.keys().map(|p| format!("{p:?}")).collect();
            format!(
                "no trending threshold for prefix {prefix:?} (configured: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )
        })
    }

    /// The smallest threshold configured, if any: the aggregators keep every counter at or
    /// over it among the leaders of the trending window.
    pub fn smallest_threshold(&self) -> Option<i64> {
        self.thresholds.values().min().copied()
    }
}

impl Default for TrendingConfig {
    fn default() -> Self {
        Self {
            window_seconds: 300,
            thresholds: BTreeMap::new(),
        }
    }
}

/// The global aggregator's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalConfig {
    /// Where the global aggregator listens: replica 0.
    pub listen: SocketAddr,
    /// Where more global aggregators listen, replicas 1, 2, ... in order: each pulls every
    /// datacenter on its own and answers complete without the others. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<SocketAddr>,
    /// The partitions each replica holds, by replica (`[[0], [0], [1], [1]]`: two partitions,
    /// two replicas each). Default: every replica holds every partition. Replicas hold the
    /// same partitions or none in common, and every partition is held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Vec<u32>>,
    /// A read whose datacenters are staler than this (milliseconds) is refused with 503 unless
    /// it allows a partial answer; `max_staleness_ms` in the query overrides it.
    #[serde(default = "default_max_staleness_ms")]
    pub max_staleness_ms: u64,
}

/// Replica 0's address `first`, then the other replicas'.
fn replica_addresses(first: SocketAddr, others: &[SocketAddr]) -> Vec<SocketAddr> {
    std::iter::once(first)
        .chain(others.iter().copied())
        .collect()
}

/// `addresses` (replica 0 first) with the partitions each holds: `held[r]`, or all of `count`
/// when `held` is empty.
fn replicas_with(
    addresses: Vec<SocketAddr>,
    held: &[Vec<u32>],
    count: u32,
) -> Vec<(SocketAddr, Partitions)> {
    (addresses.into_iter().enumerate())
        .map(|(r, address)| {
            let partitions = match held.get(r) {
                Some(held) => {
                    let mut held = held.clone();
                    held.sort_unstable();
                    Partitions { count, held }
                }
                None => Partitions::all(count),
            };
            (address, partitions)
        })
        .collect()
}

impl GlobalConfig {
    /// Each global aggregator replica: where it listens and the partitions it holds, replica 0
    /// first, in a counter space of `partitions`.
    pub fn replicas_of(&self, partitions: u32) -> Vec<(SocketAddr, Partitions)> {
        replicas_with(self.addresses(), &self.partitions, partitions)
    }

    /// Where each global aggregator replica listens, replica 0 first.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        replica_addresses(self.listen, &self.replicas)
    }
}

fn default_max_staleness_ms() -> u64 {
    5_000
}

/// How often each tier pulls from its neighbours, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncSettings {
    /// A datacenter aggregator pulls each of its shard nodes this often.
    pub shard_to_datacenter_ms: u64,
    /// The global aggregator pulls each datacenter aggregator this often.
    pub datacenter_to_global_ms: u64,
    /// A shard node pulls each peer of its datacenter (its replicas) this often.
    pub peer_ms: u64,
    /// Descriptions flow down (global → datacenter aggregators → shard nodes) this often.
    pub downward_ms: u64,
    /// A pull that has not answered after this long fails (the source's staleness grows).
    pub timeout_ms: u64,
    /// The most counters in one sync page; a counter with a big sketch or a long window counts
    /// for more than one (`geocount_sync::record_weight`).
    pub page_entries: usize,
    /// A copy's version or a description's timestamp more than this ahead of this process's
    /// clock is refused (milliseconds): taken in, it would win over every later change.
    pub max_clock_skew_ms: u64,
    /// How long every tier keeps a deleted counter's tombstone, in seconds from the delete
    /// (or the expiry). While it is kept, no copy of the counter's older writes can bring it
    /// back; a region cut off from the global tier for longer than this may, when it heals
    /// (docs/operations.md, "Deleted counters").
    pub tombstone_retention_secs: u64,
}

impl Default for SyncSettings {
    fn default() -> Self {
        Self {
            shard_to_datacenter_ms: 50,
            datacenter_to_global_ms: 100,
            peer_ms: 100,
            downward_ms: 250,
            timeout_ms: 1_000,
            page_entries: 50_000,
            max_clock_skew_ms: 60_000,
            tombstone_retention_secs: 7 * 24 * 3_600,
        }
    }
}

/// One datacenter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatacenterConfig {
    /// Its name, used in slot names `DC_<name>_VAL_<n>`: letters, digits and `_`.
    pub name: String,
    /// Where its datacenter aggregator listens: replica 0.
    pub aggregator: SocketAddr,
    /// Where more aggregators of this datacenter listen, replicas 1, 2, ... in order: each
    /// pulls every shard node of the datacenter on its own. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregator_replicas: Vec<SocketAddr>,
    /// The partitions each of its aggregator replicas holds, by replica, under the same rules
    /// as `global.partitions`. Default: every replica holds every partition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregator_partitions: Vec<Vec<u32>>,
    /// Where its shard nodes listen; the node at index `n` owns slot `DC_<name>_VAL_<n>`.
    pub shards: Vec<SocketAddr>,
    /// Where its shard nodes also serve the Redis protocol (RESP2, RESP3 after `HELLO 3`):
    /// one address per shard node, in the order of `shards`. Default: none, no node serves it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resp: Vec<SocketAddr>,
    /// Its region, for the emulated WAN (`[wan]`): letters, digits and `_`. Default: its name
    /// up to the last `_` (`USA_0` → `USA`), or the whole name if it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// When its shard nodes acknowledge a write, over `shard.durability` (a datacenter of one
    /// shard node must say `"sync"` or `"async"` here to run beside `"replicated"` ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
}

impl DatacenterConfig {
    /// When its shard nodes acknowledge a write: its own `durability`, or `shard.durability`.
    pub fn durability(&self, shard: &ShardDefaults) -> Durability {
        self.durability.unwrap_or(shard.durability)
    }

    /// Its region: `region`, or the default derived from its name.
    pub fn region(&self) -> &str {
        match (&self.region, self.name.rsplit_once('_')) {
            (Some(region), _) => region,
            (None, Some((prefix, _))) if !prefix.is_empty() => prefix,
            (None, _) => &self.name,
        }
    }

    /// Each of its aggregator replicas: where it listens and the partitions it holds, replica 0
    /// first, in a counter space of `partitions`.
    pub fn aggregator_replicas_of(&self, partitions: u32) -> Vec<(SocketAddr, Partitions)> {
        replicas_with(self.aggregators(), &self.aggregator_partitions, partitions)
    }

    /// Where each of its aggregator replicas listens, replica 0 first.
    pub fn aggregators(&self) -> Vec<SocketAddr> {
        replica_addresses(self.aggregator, &self.aggregator_replicas)
    }

    /// Where shard node `slot` serves the Redis protocol, if its datacenter lists `resp`.
    pub fn resp_address(&self, slot: u32) -> Option<SocketAddr> {
        self.resp.get(slot as usize).copied()
    }

    /// Its placement ring: which of its slots each counter's writes go to.
    pub fn placement(&self, virtual_nodes: u32) -> Placement {
        let slots = u32::try_from(self.shards.len()).expect("a datacenter has few shard nodes");
        Placement::new(&self.name, slots, virtual_nodes)
    }
}

impl Topology {
    /// The datacenter named `name`, or an error naming the known ones.
    pub fn datacenter(&self, name: &str) -> Result<&DatacenterConfig, String> {
        self.datacenters
            .iter()
            .find(|dc| dc.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self.datacenters.iter().map(|dc| dc.name.as_str()).collect();
                format!("no datacenter named {name:?} (known: {})", known.join(", "))
            })
    }

    /// Refuses to serve the client API without tokens on `listen` when it is not a loopback
    /// address (unless `auth.insecure_public`); the error names `file` and the key `listen`
    /// is configured at. Every tier's binary calls it before it listens.
    pub fn check_listen(&self, file: &Path, listen: SocketAddr) -> Result<(), TopologyError> {
        self.auth
            .check_listen(listen, self.tls.is_some())
            .map_err(|message| TopologyError {
                file: file.to_owned(),
                key: self.key_of_address(listen),
                message,
            })
    }

    /// The key `addr` is configured at: `global.listen`, `global.replicas[r]`,
    /// `datacenters[i].aggregator`, `datacenters[i].aggregator_replicas[r]` or
    /// `datacenters[i].shards[n]` or `datacenters[i].resp[n]` (`global.listen` if none:
    /// addresses are unique).
    fn key_of_address(&self, addr: SocketAddr) -> String {
        if let Some(r) = self.global.replicas.iter().position(|a| *a == addr) {
            return format!("global.replicas[{r}]");
        }
        for (i, dc) in self.datacenters.iter().enumerate() {
            if dc.aggregator == addr {
                return format!("datacenters[{i}].aggregator");
            }
            if let Some(r) = dc.aggregator_replicas.iter().position(|a| *a == addr) {
                return format!("datacenters[{i}].aggregator_replicas[{r}]");
            }
            if let Some(n) = dc.shards.iter().position(|shard| *shard == addr) {
                return format!("datacenters[{i}].shards[{n}]");
            }
            if let Some(n) = dc.resp.iter().position(|resp| *resp == addr) {
                return format!("datacenters[{i}].resp[{n}]");
            }
        }
        "global.listen".to_owned()
    }

    /// The index of datacenter `name` in `datacenters`.
    pub fn datacenter_index(&self, name: &str) -> Option<usize> {
        self.datacenters.iter().position(|dc| dc.name == name)
    }

    /// Where the shard node owning `slot` listens, or an error naming the key at fault.
    pub fn shard_address(&self, slot: &SlotId) -> Result<SocketAddr, (String, String)> {
        let dc = self
            .datacenter(&slot.datacenter)
            .map_err(|m| ("datacenters".to_owned(), m))?;
        let i = self
            .datacenters
            .iter()
            .position(|d| d.name == dc.name)
            .unwrap_or(0);
        dc.shards.get(slot.index as usize).copied().ok_or_else(|| {
            (
                format!("datacenters[{i}].shards"),
                format!(
                    "slot {} is out of range: datacenter {} has {} shard(s), VAL_0..VAL_{}",
                    slot.index,
                    dc.name,
                    dc.shards.len(),
                    dc.shards.len() - 1
                ),
            )
        })
    }
}
