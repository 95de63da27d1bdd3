//! What serde cannot check in a topology: names, sizes, duplicate addresses, bounds and the
//! WAN's regions. Each check names the key at fault, which loading turns into one line naming
//! the file too.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::{
    MAX_CONCURRENT_SCANS, MAX_VIRTUAL_NODES, MAX_WAN_DELAY_MS, MIN_COUNTER_BYTES, Topology,
};

impl Topology {
    /// Every check, in the order their errors are reported: the first failing key is named.
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        self.validate_datacenters()?;
        self.validate_resp()?;
        self.validate_positive()?;
        self.validate_bounds()?;
        self.validate_partitions()?;
        self.validate_durability()?;
        self.auth.validate()?;
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        self.validate_wan()
    }

    /// At least one datacenter, valid and distinct names, at least one shard each, and no
    /// address twice (the WAN emulator's control address included).
    fn validate_datacenters(&self) -> Result<(), (String, String)> {
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
        for (r, replica) in self.global.replicas.iter().enumerate() {
            claim(*replica, format!("global.replicas[{r}]"))?;
        }
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
            for (r, replica) in dc.aggregator_replicas.iter().enumerate() {
                claim(
                    *replica,
                    format!("datacenters[{i}].aggregator_replicas[{r}]"),
                )?;
            }
            if dc.shards.is_empty() {
                return Err((
                    format!("datacenters[{i}].shards"),
                    "at least one shard is needed".into(),
                ));
            }
            for (n, shard) in dc.shards.iter().enumerate() {
                claim(*shard, format!("datacenters[{i}].shards[{n}]"))?;
            }
            for (n, resp) in dc.resp.iter().enumerate() {
                claim(*resp, format!("datacenters[{i}].resp[{n}]"))?;
            }
        }
        Ok(())
    }

    /// The settings that must be greater than 0.
    fn validate_positive(&self) -> Result<(), (String, String)> {
        let shard = &self.shard;
        let positive = [
            (
                "shard.async_flush_interval_ms",
                shard.async_flush_interval_ms,
            ),
            ("shard.replication_timeout_ms", shard.replication_timeout_ms),
            ("shard.world_refresh_ms", shard.world_refresh_ms),
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
                "sync.tombstone_retention_secs",
                self.sync.tombstone_retention_secs,
            ),
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
        Ok(())
    }

    /// Upper bounds (hostile input must not exhaust memory) and settings bounded by others.
    fn validate_bounds(&self) -> Result<(), (String, String)> {
        let shard = &self.shard;
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
        let max_window = (
            "shard.max_window_seconds",
            u64::from(shard.max_window_seconds),
        );
        let max_state = ("shard.max_state_bytes", shard.max_state_bytes);
        let bounded = [
            (
                ("shard.max_counter_bytes", shard.max_counter_bytes),
                max_state,
            ),
            (
                (
                    "shard.default_window_seconds",
                    shard.default_window_seconds.into(),
                ),
                max_window,
            ),
            (
                (
                    "trending.window_seconds",
                    self.trending.window_seconds.into(),
                ),
                max_window,
            ),
        ];
        for ((key, value), (bound_key, bound)) in bounded {
            if value > bound {
                return Err((
                    key.into(),
                    format!("{value} is above {bound_key} ({bound})"),
                ));
            }
        }
        for (prefix, threshold) in &self.trending.thresholds {
            if *threshold < 1 {
                return Err((
                    format!("trending.thresholds.{prefix:?}"),
                    format!("must be at least 1, got {threshold}"),
                ));
            }
        }
        if shard.max_history_levels > crate::history::MAX_HISTORY_LEVELS {
            return Err((
                "shard.max_history_levels".into(),
                format!(
                    "{} is more than {}",
                    shard.max_history_levels,
                    crate::history::MAX_HISTORY_LEVELS
                ),
            ));
        }
        if shard.max_history_buckets > crate::history::MAX_HISTORY_BUCKETS {
            return Err((
                "shard.max_history_buckets".into(),
                format!(
                    "{} is more than {}",
                    shard.max_history_buckets,
                    crate::history::MAX_HISTORY_BUCKETS
                ),
            ));
        }
        let levels = shard.default_history_levels();
        crate::history::check_levels_within(
            &levels,
            shard.max_history_levels,
            shard.max_history_buckets,
        )
        .map_err(|message| {
            // The levels' own names are the TOML keys here.
            let message = message
                .replace("stepSeconds", "step_seconds")
                .replace("keepSeconds", "keep_seconds");
            ("shard.default_history".to_owned(), message)
        })?;
        if shard.max_body_bytes < 1024 {
            return Err((
                "shard.max_body_bytes".into(),
                "must be at least 1024".into(),
            ));
        }
        Ok(())
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
}
