//! The topology file: which datacenters exist, where their aggregators and shard nodes listen,
//! and the settings of each tier.
//!
//! Read with figment from TOML; any key can be overridden from the environment with a
//! `GEOCOUNT_` prefix and `__` between levels (`GEOCOUNT_SHARD__DURABILITY=async`). Every error
//! names the file and the key.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::{Figment, Provider};
use serde::{Deserialize, Serialize};

use crate::access::AuthConfig;
use crate::tls::TlsSettings;
use crate::{Placement, SlotId};

/// The whole topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The global aggregator.
    pub global: GlobalConfig,
    /// Settings shared by every shard node.
    #[serde(default)]
    pub shard: ShardDefaults,
    /// How often each tier pulls from its neighbours.
    #[serde(default)]
    pub sync: SyncSettings,
    /// The datacenters; each runs one aggregator and one shard node per slot.
    pub datacenters: Vec<DatacenterConfig>,
    /// What `GET /trending` lists at both aggregators.
    #[serde(default)]
    pub trending: TrendingConfig,
    /// The WAN `geocount-cluster --wan` emulates between regions; the tiers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wan: Option<WanSettings>,
    /// TLS between every tier (`[tls]`); plain HTTP without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
    /// Limits of every tier's HTTP listener: connections and slow clients.
    #[serde(default)]
    pub http: HttpSettings,
    /// Who may call the client API, and the secret between tiers (README, "Access").
    #[serde(default)]
    pub auth: AuthConfig,
    /// How every tier's process uses memory (`[memory]`).
    #[serde(default)]
    pub memory: MemorySettings,
    /// How much state each aggregator holds (`[aggregator]`).
    #[serde(default)]
    pub aggregator: AggregatorSettings,
}

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
    /// The most rankings that scan every counter (a `/topk` over any window but the live
    /// trending one, or one the kept leaders cannot answer) an aggregator runs at once, each
    /// on a thread of its own; one more is answered 429 with `Retry-After`, so scans cannot
    /// take every core from reads and merges (1 to [`MAX_CONCURRENT_SCANS`]).
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
    /// Where the global aggregator listens.
    pub listen: SocketAddr,
    /// A read whose datacenters are staler than this (milliseconds) is refused with 503 unless
    /// it allows a partial answer; `max_staleness_ms` in the query overrides it.
    #[serde(default = "default_max_staleness_ms")]
    pub max_staleness_ms: u64,
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
        }
    }
}

/// How a shard node picks one of a counter's slots for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// Each of the counter's slots in turn.
    #[default]
    RoundRobin,
    /// A random one of the counter's slots.
    Random,
    /// The slot whose node reported the lowest write rate.
    LeastLoaded,
}

/// One datacenter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatacenterConfig {
    /// Its name, used in slot names `DC_<name>_VAL_<n>`: letters, digits and `_`.
    pub name: String,
    /// Where its datacenter aggregator listens.
    pub aggregator: SocketAddr,
    /// Where its shard nodes listen; the node at index `n` owns slot `DC_<name>_VAL_<n>`.
    pub shards: Vec<SocketAddr>,
    /// Its region, for the emulated WAN (`[wan]`): letters, digits and `_`. Default: its name
    /// up to the last `_` (`USA_0` → `USA`), or the whole name if it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

impl DatacenterConfig {
    /// Its region: `region`, or the default derived from its name.
    pub fn region(&self) -> &str {
        match (&self.region, self.name.rsplit_once('_')) {
            (Some(region), _) => region,
            (None, Some((prefix, _))) if !prefix.is_empty() => prefix,
            (None, _) => &self.name,
        }
    }

    /// Its placement ring: which of its slots each counter's writes go to.
    pub fn placement(&self, virtual_nodes: u32) -> Placement {
        let slots = u32::try_from(self.shards.len()).expect("a datacenter has few shard nodes");
        Placement::new(&self.name, slots, virtual_nodes)
    }
}

/// When a shard node acknowledges a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// After the write is fsynced to the node's log (group commit). Nothing acknowledged is lost.
    #[default]
    Sync,
    /// At once; the log is fsynced every `async_flush_interval_ms`, so a machine crash loses at
    /// most that interval of acknowledged writes.
    Async,
}

/// Settings of every shard node, with defaults for a production deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShardDefaults {
    /// Where shard nodes keep their data; each node uses `<data_dir>/DC_<dc>_VAL_<n>` unless
    /// `--data-dir` says otherwise.
    pub data_dir: PathBuf,
    /// When writes are acknowledged.
    pub durability: Durability,
    /// In `async` durability, the longest time between two fsyncs of the log, in milliseconds.
    pub async_flush_interval_ms: u64,
    /// The `numberOfShards` of a counter created by a write rather than by `POST /counter`, and
    /// how many of every counter's slots its keyed writes spread over (whatever its
    /// `numberOfShards`), so that a retry meets its first attempt.
    pub default_number_of_shards: u32,
    /// The rolling window of a counter created without `windowSeconds`, in seconds.
    pub default_window_seconds: u32,
    /// The longest `windowSeconds` a counter may be created with.
    pub max_window_seconds: u32,
    /// A write timestamped more than this many seconds ahead of the node's clock is refused
    /// (422), so one client with a bad clock cannot push every window into the future.
    pub max_future_skew_secs: u64,
    /// The largest request body accepted, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// The most entries in one batched write; more get 413.
    pub max_batch_entries: usize,
    /// How long an `Idempotency-Key` is remembered, in seconds.
    pub idempotency_retention_secs: u64,
    /// The log is checkpointed into the store once it grows past this many bytes.
    pub checkpoint_log_bytes: u64,
    /// The log is checkpointed at least this often while writes arrive, in milliseconds.
    pub checkpoint_interval_ms: u64,
    /// How a write picks one of its counter's slots.
    pub selection: Selection,
    /// Points each slot owns on the placement ring (1 to [`MAX_VIRTUAL_NODES`]).
    pub virtual_nodes: u32,
    /// A counter writing more than this per second per slot grows its `numberOfShards`; one
    /// under a quarter of it shrinks back (never below its created count).
    pub hot_writes_per_slot: u64,
    /// A node restoring its lost slot, once one source (a peer, its datacenter aggregator or
    /// the global aggregator) has handed over a complete copy, keeps waiting for the other
    /// sources while they hand over a page at least this often (milliseconds), then keeps the
    /// highest version of every counter. It never starts empty on its own, however long no
    /// source is complete.
    pub restore_timeout_ms: u64,
    /// The most counters a node keeps in its own slot, and the most descriptions it creates
    /// itself: a write or create that would go past it is refused (507). Copies and
    /// descriptions learned from other nodes are never refused (they count towards it).
    pub max_counters: usize,
    /// The most `Idempotency-Key`s a node holds at once (each for `idempotency_retention_secs`,
    /// about 180 bytes of memory): a write with a new key beyond it is refused (507) until
    /// older keys expire; retries of held keys and writes without a key are never refused.
    pub max_idempotency_keys: usize,
    /// The most bytes one counter's state may hold on a node (its record with its window
    /// buckets or sketch, its id and its description, as [`crate::held_bytes`] estimates
    /// them): a write that would grow a counter past it is refused (507). The default holds
    /// the longest window (3,600 buckets, about 57 KiB) and a dense sketch (about 16 KiB).
    pub max_counter_bytes: u64,
    /// The most bytes of state a node holds: its own slot's records and ids, and every
    /// description it knows. A write or create that would grow it past it is refused (507);
    /// descriptions learned from other nodes are never refused (they count towards it).
    pub max_state_bytes: u64,
}

impl Default for ShardDefaults {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("data"),
            durability: Durability::Sync,
            async_flush_interval_ms: 100,
            default_number_of_shards: 1,
            default_window_seconds: 300,
            max_window_seconds: 3_600,
            max_future_skew_secs: 60,
            max_body_bytes: 8 * 1024 * 1024,
            max_batch_entries: 100_000,
            idempotency_retention_secs: 600,
            checkpoint_log_bytes: 64 * 1024 * 1024,
            checkpoint_interval_ms: 30_000,
            selection: Selection::RoundRobin,
            virtual_nodes: 64,
            hot_writes_per_slot: 2_000,
            restore_timeout_ms: 3_000,
            max_counters: 10_000_000,
            max_idempotency_keys: 10_000_000,
            max_counter_bytes: 64 * 1024,
            max_state_bytes: 4 << 30,
        }
    }
}

/// A topology that could not be read or is inconsistent. Displays as one line:
/// `<file>: <key>: <what is wrong>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {key}: {message}", file.display())]
pub struct TopologyError {
    /// The topology file.
    pub file: PathBuf,
    /// The offending key, e.g. `datacenters[1].shards[0]`.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

impl Topology {
    /// Reads `file`, applies `GEOCOUNT_*` environment overrides, and validates the result.
    pub fn load(file: &Path) -> Result<Self, TopologyError> {
        Self::load_with_env(file, Env::prefixed("GEOCOUNT_").split("__"))
    }

    fn load_with_env(file: &Path, env: impl Provider) -> Result<Self, TopologyError> {
        let error = |key: &str, message: String| TopologyError {
            file: file.to_owned(),
            key: key.to_owned(),
            message,
        };
        // figment treats a missing file as empty; a missing topology must be an error.
        std::fs::metadata(file).map_err(|e| error("(file)", format!("cannot read: {e}")))?;
        let topology: Topology = Figment::from(Toml::file_exact(file))
            .merge(env)
            .extract()
            .map_err(|e| {
                let (key, message) = describe_figment_error(&e);
                error(&key, message)
            })?;
        topology
            .validate()
            .map_err(|(key, message)| error(&key, message))?;
        Ok(topology)
    }

    /// Parses a topology from TOML text (no environment overrides), for tools and tests.
    pub fn from_toml(name: &str, text: &str) -> Result<Self, TopologyError> {
        let error = |key: String, message: String| TopologyError {
            file: PathBuf::from(name),
            key,
            message,
        };
        let topology: Topology = Figment::from(Toml::string(text)).extract().map_err(|e| {
            let (key, message) = describe_figment_error(&e);
            error(key, message)
        })?;
        topology
            .validate()
            .map_err(|(key, message)| error(key, message))?;
        Ok(topology)
    }

    /// Checks what serde cannot: names, sizes, duplicate addresses.
    fn validate(&self) -> Result<(), (String, String)> {
        if self.datacenters.is_empty() {
            return Err((
                "datacenters".into(),
                "at least one datacenter is needed".into(),
            ));
        }
        let mut addresses: HashMap<SocketAddr, String> = HashMap::new();
        let mut claim = |addr: SocketAddr, key: String| match addresses.get(&addr) {
            Some(first) => Err((key, format!("duplicate address {addr} (also at {first})"))),
            None => {
                addresses.insert(addr, key);
                Ok(())
            }
        };
        claim(self.global.listen, "global.listen".into())?;
        if let Some(wan) = &self.wan {
            claim(wan.control, "wan.control".into())?;
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        if self
            .datacenters
            .iter()
            .map(|dc| dc.shards.len())
            .sum::<usize>()
            > usize::from(u16::MAX)
        {
            return Err(("datacenters".into(), "more than 65535 slots in all".into()));
        }
        for (i, dc) in self.datacenters.iter().enumerate() {
            let key = format!("datacenters[{i}].name");
            if dc.name.is_empty()
                || !dc
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err((
                    key,
                    format!("{:?} must be letters, digits and _ only", dc.name),
                ));
            }
            if let Some(first) = names.insert(&dc.name, i) {
                return Err((
                    key,
                    format!(
                        "duplicate datacenter {:?} (also datacenters[{first}])",
                        dc.name
                    ),
                ));
            }
            claim(dc.aggregator, format!("datacenters[{i}].aggregator"))?;
            if dc.shards.is_empty() {
                return Err((
                    format!("datacenters[{i}].shards"),
                    "at least one shard is needed".into(),
                ));
            }
            for (n, shard) in dc.shards.iter().enumerate() {
                claim(*shard, format!("datacenters[{i}].shards[{n}]"))?;
            }
        }
        let shard = &self.shard;
        let positive = [
            (
                "shard.async_flush_interval_ms",
                shard.async_flush_interval_ms,
            ),
            (
                "shard.default_number_of_shards",
                shard.default_number_of_shards.into(),
            ),
            (
                "shard.default_window_seconds",
                shard.default_window_seconds.into(),
            ),
            ("shard.max_window_seconds", shard.max_window_seconds.into()),
            ("shard.max_batch_entries", shard.max_batch_entries as u64),
            (
                "shard.idempotency_retention_secs",
                shard.idempotency_retention_secs,
            ),
            ("shard.checkpoint_log_bytes", shard.checkpoint_log_bytes),
            ("shard.checkpoint_interval_ms", shard.checkpoint_interval_ms),
            ("shard.virtual_nodes", shard.virtual_nodes.into()),
            ("shard.hot_writes_per_slot", shard.hot_writes_per_slot),
            ("shard.max_counters", shard.max_counters as u64),
            (
                "shard.max_idempotency_keys",
                shard.max_idempotency_keys as u64,
            ),
            ("shard.max_state_bytes", shard.max_state_bytes),
            (
                "aggregator.datacenter_max_state_bytes",
                self.aggregator.datacenter_max_state_bytes,
            ),
            (
                "aggregator.global_max_state_bytes",
                self.aggregator.global_max_state_bytes,
            ),
            ("http.max_connections", self.http.max_connections as u64),
            (
                "http.max_connections_per_peer",
                self.http.max_connections_per_peer as u64,
            ),
            (
                "http.header_read_timeout_ms",
                self.http.header_read_timeout_ms,
            ),
            ("http.body_read_timeout_ms", self.http.body_read_timeout_ms),
            (
                "http.max_concurrent_scans",
                self.http.max_concurrent_scans as u64,
            ),
            ("global.max_staleness_ms", self.global.max_staleness_ms),
            (
                "sync.shard_to_datacenter_ms",
                self.sync.shard_to_datacenter_ms,
            ),
            (
                "sync.datacenter_to_global_ms",
                self.sync.datacenter_to_global_ms,
            ),
            ("sync.peer_ms", self.sync.peer_ms),
            ("sync.downward_ms", self.sync.downward_ms),
            ("sync.timeout_ms", self.sync.timeout_ms),
            ("sync.page_entries", self.sync.page_entries as u64),
            ("sync.max_clock_skew_ms", self.sync.max_clock_skew_ms),
            (
                "trending.window_seconds",
                self.trending.window_seconds.into(),
            ),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err((key.into(), "must be greater than 0".into()));
            }
        }
        if self.http.max_concurrent_scans > MAX_CONCURRENT_SCANS {
            return Err((
                "http.max_concurrent_scans".into(),
                format!(
                    "{} is more than {MAX_CONCURRENT_SCANS}",
                    self.http.max_concurrent_scans
                ),
            ));
        }
        if shard.virtual_nodes > MAX_VIRTUAL_NODES {
            return Err((
                "shard.virtual_nodes".into(),
                format!("{} is more than {MAX_VIRTUAL_NODES}", shard.virtual_nodes),
            ));
        }
        if shard.max_counter_bytes < MIN_COUNTER_BYTES {
            return Err((
                "shard.max_counter_bytes".into(),
                format!(
                    "{} is less than {MIN_COUNTER_BYTES} (a counter with the longest id and a few buckets)",
                    shard.max_counter_bytes
                ),
            ));
        }
        if shard.max_counter_bytes > shard.max_state_bytes {
            return Err((
                "shard.max_counter_bytes".into(),
                format!(
                    "{} is above shard.max_state_bytes ({})",
                    shard.max_counter_bytes, shard.max_state_bytes
                ),
            ));
        }
        if shard.default_window_seconds > shard.max_window_seconds {
            return Err((
                "shard.default_window_seconds".into(),
                format!(
                    "{} is above shard.max_window_seconds ({})",
                    shard.default_window_seconds, shard.max_window_seconds
                ),
            ));
        }
        if self.trending.window_seconds > shard.max_window_seconds {
            return Err((
                "trending.window_seconds".into(),
                format!(
                    "{} is above shard.max_window_seconds ({})",
                    self.trending.window_seconds, shard.max_window_seconds
                ),
            ));
        }
        for (prefix, threshold) in &self.trending.thresholds {
            if *threshold < 1 {
                return Err((
                    format!("trending.thresholds.{prefix:?}"),
                    format!("must be at least 1, got {threshold}"),
                ));
            }
        }
        if shard.max_body_bytes < 1024 {
            return Err((
                "shard.max_body_bytes".into(),
                "must be at least 1024".into(),
            ));
        }
        self.auth.validate()?;
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        self.validate_wan()
    }

    /// Checks the datacenters' regions and `[wan]`: known regions, two different regions per
    /// link, no pair twice, delays in bounds, and a link for every pair that carries traffic.
    fn validate_wan(&self) -> Result<(), (String, String)> {
        for (i, dc) in self.datacenters.iter().enumerate() {
            if let Some(region) = &dc.region
                && (region.is_empty()
                    || !region
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            {
                return Err((
                    format!("datacenters[{i}].region"),
                    format!("{region:?} must be letters, digits and _ only"),
                ));
            }
        }
        let Some(wan) = &self.wan else {
            return Ok(());
        };
        let mut regions: Vec<&str> = Vec::new();
        for dc in &self.datacenters {
            if !regions.contains(&dc.region()) {
                regions.push(dc.region());
            }
        }
        let known = |region: &str, key: &str| {
            if regions.contains(&region) {
                Ok(())
            } else {
                Err((
                    key.to_owned(),
                    format!(
                        "unknown region {region:?} (the datacenters' regions: {})",
                        regions.join(", ")
                    ),
                ))
            }
        };
        known(&wan.global_region, "wan.global_region")?;
        for (i, link) in wan.links.iter().enumerate() {
            let key = format!("wan.links[{i}].between");
            let [a, b] = &link.between;
            known(a, &key)?;
            known(b, &key)?;
            if a == b {
                return Err((
                    key,
                    format!("{a:?} twice: traffic inside a region is not emulated"),
                ));
            }
            if let Some(first) = wan.links[..i].iter().position(|l| l.joins(a, b)) {
                return Err((
                    key,
                    format!("duplicate pair {a}-{b} (also wan.links[{first}])"),
                ));
            }
            for (field, value) in [("delay_ms", link.delay_ms), ("jitter_ms", link.jitter_ms)] {
                if value > MAX_WAN_DELAY_MS {
                    return Err((
                        format!("wan.links[{i}].{field}"),
                        format!("{value} is more than {MAX_WAN_DELAY_MS} ms"),
                    ));
                }
            }
        }
        let global = wan.global_region.as_str();
        for dc in &self.datacenters {
            let region = dc.region();
            if region != global && wan.link(global, region).is_none() {
                return Err((
                    "wan.links".into(),
                    format!(
                        "no delay between {region} (datacenter {}) and {global} (the global \
                         aggregator): add [[wan.links]] between = [\"{global}\", \"{region}\"]",
                        dc.name
                    ),
                ));
            }
        }
        Ok(())
    }

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

    /// The key `addr` is configured at: `global.listen`, `datacenters[i].aggregator` or
    /// `datacenters[i].shards[n]` (`global.listen` if none: addresses are unique).
    fn key_of_address(&self, addr: SocketAddr) -> String {
        for (i, dc) in self.datacenters.iter().enumerate() {
            if dc.aggregator == addr {
                return format!("datacenters[{i}].aggregator");
            }
            if let Some(n) = dc.shards.iter().position(|shard| *shard == addr) {
                return format!("datacenters[{i}].shards[{n}]");
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

/// The key and a one-line message for a figment error, naming the environment variable when the
/// bad value came from one.
fn describe_figment_error(e: &figment::Error) -> (String, String) {
    let key = if e.path.is_empty() {
        "(file)".to_owned()
    } else {
        e.path.join(".")
    };
    let mut message = one_line(&e.kind.to_string());
    let from_environment = e
        .metadata
        .as_ref()
        .is_some_and(|m| m.name.contains("environment"));
    if from_environment && !e.path.is_empty() {
        let variable = format!("GEOCOUNT_{}", e.path.join("__").to_uppercase());
        message.push_str(&format!(" (from environment variable {variable})"));
    }
    (key, message)
}

/// Folds a multi-line message (TOML syntax errors carry a source excerpt) into one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[global]
listen = "127.0.0.1:7000"

[[datacenters]]
name = "USA_0"
aggregator = "127.0.0.1:7100"
shards = ["127.0.0.1:7101", "127.0.0.1:7102"]

[[datacenters]]
name = "ASIA_0"
aggregator = "127.0.0.1:7200"
shards = ["127.0.0.1:7201"]
"#;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("topology.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn load(text: &str) -> Result<Topology, TopologyError> {
        let (_dir, path) = write(text);
        Topology::load_with_env(&path, Env::prefixed("GEOCOUNT_TEST_NEVER_SET_"))
    }

    /// Hostile input (issue #7, seen while writing the `topology` fuzz target): the placement ring is built in memory from
    /// `shard.virtual_nodes` points per slot, so an unbounded count could exhaust memory (and
    /// overflowed `slots * virtual_nodes` in `Placement::new`).
    #[test]
    fn virtual_nodes_are_bounded() {
        let with = |n: u64| format!("{GOOD}\n[shard]\nvirtual_nodes = {n}\n");
        assert!(Topology::from_toml("t.toml", &with(u64::from(MAX_VIRTUAL_NODES))).is_ok());
        let error = Topology::from_toml("t.toml", &with(4_294_967_295)).unwrap_err();
        assert_eq!(error.key, "shard.virtual_nodes");
        assert!(error.message.contains("more than 4096"), "{error}");
    }

    /// Each scan holds a thread of its own, so their number is bounded, and at least one runs.
    #[test]
    fn concurrent_scans_are_bounded() {
        let with = |n: usize| format!("{GOOD}\n[http]\nmax_concurrent_scans = {n}\n");
        let t = Topology::from_toml("t.toml", &with(MAX_CONCURRENT_SCANS)).unwrap();
        assert_eq!(t.http.max_concurrent_scans, MAX_CONCURRENT_SCANS);
        for bad in [0, MAX_CONCURRENT_SCANS + 1] {
            let error = Topology::from_toml("t.toml", &with(bad)).unwrap_err();
            assert_eq!(error.key, "http.max_concurrent_scans", "{bad}");
        }
    }

    #[test]
    fn good_topology_loads_with_defaults() {
        let t = load(GOOD).unwrap();
        assert_eq!(t.datacenters.len(), 2);
        assert_eq!(t.shard, ShardDefaults::default());
        assert_eq!(
            t.shard_address(&SlotId::new("USA_0", 1)).unwrap(),
            "127.0.0.1:7102".parse().unwrap()
        );
    }

    #[test]
    fn duplicate_address_names_the_key() {
        let text = GOOD.replace("127.0.0.1:7201", "127.0.0.1:7101");
        let err = load(&text).unwrap_err();
        assert_eq!(err.key, "datacenters[1].shards[0]");
        assert!(err.message.contains("datacenters[0].shards[0]"), "{err}");
        assert!(
            err.to_string()
                .contains("topology.toml: datacenters[1].shards[0]: duplicate")
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = load(&GOOD.replace("127.0.0.1:7000", "nowhere")).unwrap_err();
        assert_eq!(err.key, "global.listen");
        let err = load(&format!("{GOOD}\n[shard]\ndurability = \"maybe\"\n")).unwrap_err();
        assert_eq!(err.key, "shard.durability");
        let err = load(&format!("{GOOD}\n[shard]\nmax_batch_entries = 0\n")).unwrap_err();
        assert_eq!(err.key, "shard.max_batch_entries");
        let err = load(&GOOD.replace("ASIA_0", "ASIA-0")).unwrap_err();
        assert_eq!(err.key, "datacenters[1].name");
        let err = load(&GOOD.replace("listen", "lisen")).unwrap_err();
        assert!(err.to_string().contains("lisen"), "{err}");
    }

    #[test]
    fn huge_pages_are_off_unless_memory_says_so() {
        assert!(!load(GOOD).unwrap().memory.huge_pages);
        let on = load(&format!("{GOOD}\n[memory]\nhuge_pages = true\n")).unwrap();
        assert!(on.memory.huge_pages);
        let err = load(&format!("{GOOD}\n[memory]\nhuge_pages = \"yes\"\n")).unwrap_err();
        assert_eq!(err.key, "memory.huge_pages");
        let err = load(&format!("{GOOD}\n[memory]\nhuge_page = true\n")).unwrap_err();
        assert!(err.to_string().contains("huge_page"), "{err}");
    }

    #[test]
    fn trending_thresholds_default_to_none_and_are_validated() {
        let t = load(GOOD).unwrap();
        assert_eq!(t.trending, TrendingConfig::default());
        assert_eq!(t.trending.window_seconds, 300);
        let text =
            format!("{GOOD}\n[trending]\nwindow_seconds = 60\nthresholds = {{\"#\" = 10000}}\n");
        let t = load(&text).unwrap();
        assert_eq!(t.trending.window_seconds, 60);
        assert_eq!(t.trending.threshold("#"), Ok(10_000));
        assert_eq!(
            t.trending.threshold("@"),
            Err("no trending threshold for prefix \"@\" (configured: \"#\")".to_owned())
        );
        let err = load(&format!("{GOOD}\n[trending]\nwindow_seconds = 0\n")).unwrap_err();
        assert_eq!(err.key, "trending.window_seconds");
        let err = load(&format!("{GOOD}\n[trending]\nwindow_seconds = 7200\n")).unwrap_err();
        assert_eq!(err.key, "trending.window_seconds");
        let err = load(&format!("{GOOD}\n[trending]\nthresholds = {{\"#\" = 0}}\n")).unwrap_err();
        assert_eq!(err.key, "trending.thresholds.\"#\"");
        let err = load(&format!("{GOOD}\n[trending]\nwindow = 5\n")).unwrap_err();
        assert!(err.to_string().contains("window"), "{err}");
    }

    #[test]
    fn the_clock_skew_bound_defaults_to_a_minute_and_must_be_positive() {
        assert_eq!(load(GOOD).unwrap().sync.max_clock_skew_ms, 60_000);
        let set = load(&format!("{GOOD}\n[sync]\nmax_clock_skew_ms = 5000\n")).unwrap();
        assert_eq!(set.sync.max_clock_skew_ms, 5_000);
        let err = load(&format!("{GOOD}\n[sync]\nmax_clock_skew_ms = 0\n")).unwrap_err();
        assert_eq!(err.key, "sync.max_clock_skew_ms");
    }

    #[test]
    fn byte_limits_have_defaults_and_are_validated() {
        let t = load(GOOD).unwrap();
        assert_eq!(
            (t.shard.max_counter_bytes, t.shard.max_state_bytes),
            (65_536, 4 << 30)
        );
        assert_eq!(t.aggregator.global_max_state_bytes, 16 << 30);
        for (section, setting, key) in [
            (
                "shard",
                "max_counter_bytes = 1000",
                "shard.max_counter_bytes",
            ),
            ("shard", "max_state_bytes = 5000", "shard.max_counter_bytes"),
            ("shard", "max_state_bytes = 0", "shard.max_state_bytes"),
            (
                "aggregator",
                "datacenter_max_state_bytes = 0",
                "aggregator.datacenter_max_state_bytes",
            ),
            ("aggregator", "global_max_state_byte = 1", "aggregator"),
        ] {
            let err = load(&format!("{GOOD}\n[{section}]\n{setting}\n")).unwrap_err();
            assert!(err.key.starts_with(key), "{setting}: {err}");
            assert!(err.to_string().contains("topology.toml"), "{err}");
        }
    }

    #[test]
    fn syntax_errors_are_one_line() {
        let err = load("[global\nlisten = 1").unwrap_err();
        assert!(!err.to_string().contains('\n'), "{err}");
        assert!(err.to_string().contains("topology.toml"));
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = Topology::load(Path::new("/nonexistent/geo.toml")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/nonexistent/geo.toml: (file): cannot read")
        );
    }

    #[test]
    fn overrides_replace_keys_and_are_validated() {
        use figment::providers::Serialized;
        let (_dir, path) = write(GOOD);
        let overrides = Serialized::default("shard.durability", "async").key("shard.durability");
        let t = Topology::load_with_env(&path, overrides).unwrap();
        assert_eq!(t.shard.durability, Durability::Async);
        let overrides = Serialized::default("global.listen", "127.0.0.1:7101");
        let err = Topology::load_with_env(&path, overrides).unwrap_err();
        assert_eq!(err.key, "datacenters[0].shards[0]", "{err}");
    }

    /// `GOOD` with a `[wan]` section: the global aggregator in USA, ASIA 75 ms away.
    fn with_wan(links: &str) -> String {
        format!("{GOOD}\n[wan]\nglobal_region = \"USA\"\ncontrol = \"127.0.0.1:7900\"\n{links}")
    }

    const USA_ASIA: &str = "[[wan.links]]\nbetween = [\"USA\", \"ASIA\"]\ndelay_ms = 75\n";

    #[test]
    fn regions_default_to_the_name_up_to_the_last_underscore() {
        let t = load(GOOD).unwrap();
        assert_eq!(t.wan, None);
        let regions: Vec<&str> = t.datacenters.iter().map(|dc| dc.region()).collect();
        assert_eq!(regions, ["USA", "ASIA"]);
        let text = GOOD
            .replace("\"USA_0\"", "\"US_EAST_1\"")
            .replace("\"ASIA_0\"", "\"tokyo\"\nregion = \"ASIA\"");
        let t = load(&text).unwrap();
        let regions: Vec<&str> = t.datacenters.iter().map(|dc| dc.region()).collect();
        assert_eq!(regions, ["US_EAST", "ASIA"]);
        let err = load(&GOOD.replace("\"ASIA_0\"", "\"ASIA_0\"\nregion = \"AS IA\"")).unwrap_err();
        assert_eq!(err.key, "datacenters[1].region", "{err}");
    }

    #[test]
    fn wan_links_are_found_in_either_order() {
        let text = with_wan(&format!("{USA_ASIA}jitter_ms = 5\n"));
        let wan = load(&text).unwrap().wan.unwrap();
        assert_eq!(wan.global_region, "USA");
        assert_eq!(wan.control, "127.0.0.1:7900".parse().unwrap());
        let link = wan.link("ASIA", "USA").unwrap();
        assert_eq!((link.delay_ms, link.jitter_ms), (75, 5));
        assert_eq!(link.bandwidth_bytes_per_sec, 0);
        assert_eq!(wan.link("USA", "ASIA"), Some(link));
        assert_eq!(wan.link("USA", "USA"), None);
    }

    #[test]
    fn bad_wan_sections_are_one_line_errors_naming_the_key() {
        let cases = [
            (
                with_wan(""),
                "wan.links: no delay between ASIA (datacenter ASIA_0) and USA (the global \
                 aggregator): add [[wan.links]] between = [\"USA\", \"ASIA\"]",
            ),
            (
                with_wan(USA_ASIA).replace("\"USA\"\ncontrol", "\"MARS\"\ncontrol"),
                "wan.global_region: unknown region \"MARS\" (the datacenters' regions: USA, ASIA)",
            ),
            (
                with_wan(&USA_ASIA.replace("\"ASIA\"]", "\"EUROPE\"]")),
                "wan.links[0].between: unknown region \"EUROPE\" (the datacenters' regions: USA, \
                 ASIA)",
            ),
            (
                with_wan(&USA_ASIA.replace("\"ASIA\"]", "\"USA\"]")),
                "wan.links[0].between: \"USA\" twice: traffic inside a region is not emulated",
            ),
            (
                with_wan(&format!(
                    "{USA_ASIA}{}",
                    USA_ASIA.replace("[\"USA\", \"ASIA\"]", "[\"ASIA\", \"USA\"]")
                )),
                "wan.links[1].between: duplicate pair ASIA-USA (also wan.links[0])",
            ),
            (
                with_wan(&format!("{USA_ASIA}jitter_ms = 60001\n")),
                "wan.links[0].jitter_ms: 60001 is more than 60000 ms",
            ),
            (
                with_wan(USA_ASIA).replace("127.0.0.1:7900", "127.0.0.1:7100"),
                "datacenters[0].aggregator: duplicate address 127.0.0.1:7100 (also at wan.control)",
            ),
        ];
        for (text, expected) in cases {
            let err = load(&text).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("{}: {expected}", err.file.display())
            );
        }
        let err = load(&with_wan(&USA_ASIA.replace("delay_ms = 75\n", ""))).unwrap_err();
        assert!(err.to_string().contains("delay_ms"), "{err}");
        assert!(!err.to_string().contains('\n'), "{err}");
    }

    #[test]
    fn slot_out_of_range_and_unknown_dc() {
        let t = load(GOOD).unwrap();
        let (key, msg) = t.shard_address(&SlotId::new("ASIA_0", 1)).unwrap_err();
        assert_eq!(key, "datacenters[1].shards");
        assert!(msg.contains("out of range"));
        let (key, msg) = t.shard_address(&SlotId::new("MARS_0", 0)).unwrap_err();
        assert_eq!(key, "datacenters");
        assert!(msg.contains("USA_0, ASIA_0"));
    }
}
