//! `--wan`: the emulator's links for a topology's `[wan]` section ([`emulator_config`]), and
//! each process's own copy of the topology ([`view`]), in which every address it dials in
//! another region is the proxy of that link.
//!
//! The links are the only cross-region connections: every global aggregator replica pulls
//! every replica of every datacenter aggregator (`datacenters[i].aggregator`,
//! `aggregator_replicas`), every datacenter aggregator replica pulls descriptions from every
//! global one (`global.listen`, `global.replicas`), and every shard node calls the shard nodes
//! of the datacenters in other regions (`datacenters[i].shards`: rights transfers, bounded
//! counters' descriptions) through one link per (its datacenter, their shard node).
//!
//! Two regions without a `[[wan.links]]` entry of their own (neither the global one) are
//! shaped as the path through the global region: both delays and both jitters added, the
//! smaller bandwidth cap ([`region_link`]). Validation guarantees each has a link with it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use geocount_model::topology::MAX_WAN_DELAY_MS;
use geocount_model::{RegionLink, SlotId, Topology, WanSettings};
use geocount_net::HttpClient;
use geocount_wan::{LinkConfig, WanConfig};
use serde::Deserialize;

use geocount_model::role::replica_name;

use crate::error::ClusterError;
use crate::member::Member;

/// How long the launcher waits for the emulator's `GET /links`.
const LINKS_TIMEOUT: Duration = Duration::from_secs(2);

/// The name of the link the global aggregators reach replica `replica` of datacenter `dc`'s
/// aggregator through.
pub fn global_to(dc: &str, replica: usize) -> String {
    replica_name(&format!("global-to-{dc}"), replica)
}

/// The name of the link datacenter `dc`'s aggregators reach global replica `replica` through.
pub fn to_global(dc: &str, replica: usize) -> String {
    replica_name(&format!("{dc}-to-global"), replica)
}

/// The name of the link the shard nodes of datacenter `from` reach shard node `to` (of a
/// datacenter in another region) through: `ASIA_0-to-DC_USA_0_VAL_1`.
pub fn shard_to(from: &str, to: &SlotId) -> String {
    format!("{from}-to-{to}")
}

/// How the WAN between regions `a` and `b` is shaped: their `[[wan.links]]` entry, or else the
/// path through the global region (delays and jitters added, each capped at the emulator's
/// bound; the smaller bandwidth cap). `None` inside a region and for a pair validation refuses.
pub fn region_link(wan: &WanSettings, a: &str, b: &str) -> Option<RegionLink> {
    if a == b {
        return None;
    }
    if let Some(link) = wan.link(a, b) {
        return Some(link.clone());
    }
    let global = wan.global_region.as_str();
    if a == global || b == global {
        return None;
    }
    let (first, second) = (wan.link(a, global)?, wan.link(global, b)?);
    let bandwidth = match (
        first.bandwidth_bytes_per_sec,
        second.bandwidth_bytes_per_sec,
    ) {
        (0, cap) | (cap, 0) => cap,
        (x, y) => x.min(y),
    };
    Some(RegionLink {
        between: [a.to_owned(), b.to_owned()],
        delay_ms: (first.delay_ms + second.delay_ms).min(MAX_WAN_DELAY_MS),
        jitter_ms: (first.jitter_ms + second.jitter_ms).min(MAX_WAN_DELAY_MS),
        bandwidth_bytes_per_sec: bandwidth,
    })
}

/// A link named `name` to `target`, shaped as `shaping`, its proxy on a free port of the
/// control address's host.
fn link(wan: &WanSettings, shaping: &RegionLink, name: String, target: SocketAddr) -> LinkConfig {
    LinkConfig {
        name,
        listen: SocketAddr::new(wan.control.ip(), 0),
        target,
        delay_ms: shaping.delay_ms,
        jitter_ms: shaping.jitter_ms,
        bandwidth_bytes_per_sec: shaping.bandwidth_bytes_per_sec,
    }
}

/// Whether `region` is not the global aggregator's.
fn is_remote(wan: &WanSettings, region: &str) -> bool {
    region != wan.global_region
}

/// The emulator's configuration: for every datacenter outside the global aggregator's region,
/// a link each way between its aggregator and the global one; then for every datacenter, a link
/// to each shard node of every datacenter in another region. Each is shaped as `[wan]` says for
/// its pair of regions ([`region_link`]). Every proxy listens on a free port of the control
/// address's host: the launcher asks the running emulator which ([`proxy_addresses`]).
pub fn emulator_config(topology: &Topology, wan: &WanSettings) -> WanConfig {
    let mut links = Vec::new();
    for dc in &topology.datacenters {
        if !is_remote(wan, dc.region()) {
            continue;
        }
        // Validation guarantees the link of every remote region.
        let Some(shaping) = wan.link(&wan.global_region, dc.region()) else {
            continue;
        };
        for (replica, aggregator) in dc.aggregators().into_iter().enumerate() {
            links.push(link(wan, shaping, global_to(&dc.name, replica), aggregator));
        }
        for (replica, global) in topology.global.addresses().into_iter().enumerate() {
            links.push(link(wan, shaping, to_global(&dc.name, replica), global));
        }
    }
    for from in &topology.datacenters {
        for to in &topology.datacenters {
            if from.region() == to.region() {
                continue;
            }
            let Some(shaping) = region_link(wan, from.region(), to.region()) else {
                continue;
            };
            for (slot, &shard) in (0u32..).zip(&to.shards) {
                let name = shard_to(&from.name, &SlotId::new(&to.name, slot));
                links.push(link(wan, &shaping, name, shard));
            }
        }
    }
    WanConfig {
        control: wan.control,
        links,
    }
}

/// `topology` as `member` must see it: every address it dials across regions replaced by the
/// proxy of its link (`proxies`: link name → listen address), and no `[wan]` section (the copy
/// is already wired). A missing proxy is an error naming the link.
pub fn view(
    topology: &Topology,
    wan: &WanSettings,
    member: &Member,
    proxies: &HashMap<String, SocketAddr>,
) -> Result<Topology, ClusterError> {
    let proxy = |link: String| {
        proxies
            .get(&link)
            .copied()
            .ok_or_else(|| ClusterError::Wan {
                message: format!("the emulator has no link named {link}"),
            })
    };
    let mut view = topology.clone();
    view.wan = None;
    match member {
        Member::GlobalAggregator { .. } => {
            for dc in &mut view.datacenters {
                if is_remote(wan, dc.region()) {
                    dc.aggregator = proxy(global_to(&dc.name, 0))?;
                    for (n, replica) in dc.aggregator_replicas.iter_mut().enumerate() {
                        *replica = proxy(global_to(&dc.name, n + 1))?;
                    }
                }
            }
        }
        Member::DatacenterAggregator { datacenter, .. } => {
            // An unknown datacenter was refused when the launch was planned.
            let remote = topology
                .datacenters
                .iter()
                .any(|dc| dc.name == *datacenter && is_remote(wan, dc.region()));
            if remote {
                view.global.listen = proxy(to_global(datacenter, 0))?;
                for (n, replica) in view.global.replicas.iter_mut().enumerate() {
                    *replica = proxy(to_global(datacenter, n + 1))?;
                }
            }
        }
        Member::Shard { datacenter, .. } => {
            // An unknown datacenter was refused when the launch was planned.
            let Some(own) = topology
                .datacenters
                .iter()
                .find(|dc| dc.name == *datacenter)
            else {
                return Ok(view);
            };
            for dc in &mut view.datacenters {
                if dc.region() == own.region() {
                    continue;
                }
                for (slot, shard) in (0u32..).zip(dc.shards.iter_mut()) {
                    *shard = proxy(shard_to(datacenter, &SlotId::new(&dc.name, slot)))?;
                }
            }
        }
        Member::WanEmulator => {}
    }
    Ok(view)
}

/// Writes `value` as TOML to `path`.
pub fn write_toml(path: &Path, value: &impl serde::Serialize) -> Result<(), ClusterError> {
    let text = toml::to_string(value).map_err(|e| ClusterError::Wan {
        message: format!("cannot write {} as TOML: {e}", path.display()),
    })?;
    std::fs::write(path, text).map_err(|source| ClusterError::Io {
        action: "write",
        path: path.to_owned(),
        source,
    })
}

/// Where each link's proxy listens, from the running emulator's `GET /links` at `control`.
pub async fn proxy_addresses(
    control: SocketAddr,
) -> Result<HashMap<String, SocketAddr>, ClusterError> {
    /// The part of `GET /links` the launcher needs.
    #[derive(Deserialize)]
    struct Links {
        links: Vec<Listening>,
    }
    #[derive(Deserialize)]
    struct Listening {
        name: String,
        listen: SocketAddr,
    }
    let url = format!("http://{control}/links");
    let failed = |message: String| ClusterError::Wan {
        message: format!("cannot read the emulator's links from {url}: {message}"),
    };
    let answer = HttpClient::new(LINKS_TIMEOUT)
        .get(&url)
        .await
        .map_err(|e| failed(e.to_string()))?;
    if answer.status != 200 {
        return Err(failed(format!("answered {}", answer.status)));
    }
    let links: Links = serde_json::from_slice(&answer.body).map_err(|e| failed(e.to_string()))?;
    Ok(links
        .links
        .into_iter()
        .map(|link| (link.name, link.listen))
        .collect())
}

#[cfg(test)]
mod tests;
