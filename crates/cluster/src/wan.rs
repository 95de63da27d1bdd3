//! `--wan`: the emulator's links for a topology's `[wan]` section ([`emulator_config`]), and
//! each process's own copy of the topology ([`view`]), in which every address it dials in
//! another region is the proxy of that link.
//!
//! The links are the tiers' only cross-region connections: every global aggregator replica
//! pulls every replica of every datacenter aggregator (`datacenters[i].aggregator`,
//! `aggregator_replicas`), and every datacenter aggregator replica pulls descriptions from
//! every global one (`global.listen`, `global.replicas`). Shard nodes dial their own
//! datacenter, so their copy is the topology as it is.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use geocount_model::{Topology, WanSettings};
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

/// Whether `region` is not the global aggregator's.
fn is_remote(wan: &WanSettings, region: &str) -> bool {
    region != wan.global_region
}

/// The emulator's configuration: for every datacenter outside the global aggregator's region,
/// a link each way between its aggregator and the global one, shaped as `[wan]` says for the
/// pair of regions. Every proxy listens on a free port of the control address's host: the
/// launcher asks the running emulator which ([`proxy_addresses`]).
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
        let link = |name: String, target: SocketAddr| LinkConfig {
            name,
            listen: SocketAddr::new(wan.control.ip(), 0),
            target,
            delay_ms: shaping.delay_ms,
            jitter_ms: shaping.jitter_ms,
            bandwidth_bytes_per_sec: shaping.bandwidth_bytes_per_sec,
        };
        for (replica, aggregator) in dc.aggregators().into_iter().enumerate() {
            links.push(link(global_to(&dc.name, replica), aggregator));
        }
        for (replica, global) in topology.global.addresses().into_iter().enumerate() {
            links.push(link(to_global(&dc.name, replica), global));
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
        Member::Shard { .. } | Member::WanEmulator => {}
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
mod tests {
    use super::*;

    /// The first global aggregator.
    const GLOBAL: Member = Member::GlobalAggregator { replica: 0 };

    /// Three datacenters in two regions, the global aggregator with USA_0 and USA_1.
    const TOPOLOGY: &str = r#"
datacenters = [
    { name = "USA_0", aggregator = "127.0.0.1:7100", shards = ["127.0.0.1:7101"] },
    { name = "USA_1", aggregator = "127.0.0.1:7200", shards = ["127.0.0.1:7201"] },
    { name = "tokyo", region = "ASIA", aggregator = "127.0.0.1:7300", shards = ["127.0.0.1:7301"] },
]
global = { listen = "127.0.0.1:7000" }

[wan]
global_region = "USA"
control = "127.0.0.1:7900"
links = [{ between = ["ASIA", "USA"], delay_ms = 75, jitter_ms = 5 }]
"#;

    fn topology() -> (Topology, WanSettings) {
        let topology = Topology::from_toml("wan.toml", TOPOLOGY).unwrap();
        let wan = topology.wan.clone().unwrap();
        (topology, wan)
    }

    fn proxies() -> HashMap<String, SocketAddr> {
        HashMap::from([
            (global_to("tokyo", 0), "127.0.0.1:41000".parse().unwrap()),
            (to_global("tokyo", 0), "127.0.0.1:41001".parse().unwrap()),
        ])
    }

    #[test]
    fn only_cross_region_connections_get_links() {
        let (topology, wan) = topology();
        let config = emulator_config(&topology, &wan);
        assert_eq!(config.control, wan.control);
        let links: Vec<(&str, String, String, u64, u64)> = config
            .links
            .iter()
            .map(|l| {
                let (listen, target) = (l.listen.to_string(), l.target.to_string());
                (l.name.as_str(), listen, target, l.delay_ms, l.jitter_ms)
            })
            .collect();
        let listen = "127.0.0.1:0".to_owned();
        assert_eq!(
            links,
            [
                (
                    "global-to-tokyo",
                    listen.clone(),
                    "127.0.0.1:7300".into(),
                    75,
                    5
                ),
                ("tokyo-to-global", listen, "127.0.0.1:7000".into(), 75, 5),
            ]
        );
        // The emulator accepts what is written.
        let text = toml::to_string(&config).unwrap();
        assert_eq!(WanConfig::from_toml("wan.toml", &text).unwrap(), config);
    }

    #[test]
    fn the_emulator_accepts_the_links_of_replicas() {
        let replicated = TOPOLOGY
            .replace(
                r#"shards = ["127.0.0.1:7301"] }"#,
                r#"shards = ["127.0.0.1:7301"], aggregator_replicas = ["127.0.0.1:7310"] }"#,
            )
            .replace(
                r#"global = { listen = "127.0.0.1:7000" }"#,
                r#"global = { listen = "127.0.0.1:7000", replicas = ["127.0.0.1:7010"] }"#,
            );
        let topology = Topology::from_toml("wan.toml", &replicated).unwrap();
        let config = emulator_config(&topology, topology.wan.as_ref().unwrap());
        let names: Vec<&str> = config.links.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "global-to-tokyo",
                "global-to-tokyo@1",
                "tokyo-to-global",
                "tokyo-to-global@1"
            ]
        );
        let text = toml::to_string(&config).unwrap();
        assert_eq!(WanConfig::from_toml("wan.toml", &text).unwrap(), config);
    }

    #[test]
    fn each_process_dials_the_other_region_through_its_proxy() {
        let (topology, wan) = topology();
        let global = view(&topology, &wan, &GLOBAL, &proxies()).unwrap();
        let aggregators: Vec<String> = global
            .datacenters
            .iter()
            .map(|dc| dc.aggregator.to_string())
            .collect();
        assert_eq!(
            aggregators,
            ["127.0.0.1:7100", "127.0.0.1:7200", "127.0.0.1:41000"]
        );
        assert_eq!(global.global, topology.global);
        assert_eq!(global.wan, None);

        let remote = Member::DatacenterAggregator {
            datacenter: "tokyo".into(),
            replica: 0,
        };
        let remote = view(&topology, &wan, &remote, &proxies()).unwrap();
        assert_eq!(remote.global.listen.to_string(), "127.0.0.1:41001");
        assert_eq!(remote.datacenters, topology.datacenters);

        let local = Member::DatacenterAggregator {
            datacenter: "USA_1".into(),
            replica: 0,
        };
        let local = view(&topology, &wan, &local, &proxies()).unwrap();
        let shard = Member::Shard {
            datacenter: "tokyo".into(),
            slot: 1,
        };
        let shard = view(&topology, &wan, &shard, &proxies()).unwrap();
        let plain = Topology {
            wan: None,
            ..topology.clone()
        };
        assert_eq!((local, shard), (plain.clone(), plain));
    }

    #[test]
    fn views_survive_the_round_trip_through_toml() {
        let (topology, wan) = topology();
        let view = view(&topology, &wan, &GLOBAL, &proxies()).unwrap();
        let text = toml::to_string(&view).unwrap();
        assert_eq!(Topology::from_toml("global.toml", &text).unwrap(), view);
    }

    #[test]
    fn a_missing_proxy_names_the_link() {
        let (topology, wan) = topology();
        let error = view(&topology, &wan, &GLOBAL, &HashMap::new()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "WAN mode: the emulator has no link named global-to-tokyo"
        );
    }
}
