//! The processes a topology needs ([`members`]) and how to start each one ([`Member::launch`]).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;

use geocount_model::role::{GLOBAL_PROCESS, aggregator_process, replica_name};
use geocount_model::{SlotId, Topology};

use crate::error::ClusterError;

/// A member of the cluster: one process the launcher starts for its topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    /// The shard node owning slot `DC_<datacenter>_VAL_<slot>`.
    Shard {
        /// The datacenter's name.
        datacenter: String,
        /// The slot: the node's index in the datacenter's `shards`.
        slot: u32,
    },
    /// A replica of the aggregator of one datacenter.
    DatacenterAggregator {
        /// The datacenter's name.
        datacenter: String,
        /// Which replica: 0 listens on `aggregator`, n on `aggregator_replicas[n - 1]`.
        replica: usize,
    },
    /// A replica of the global aggregator: 0 listens on `global.listen`, n on
    /// `global.replicas[n - 1]`.
    GlobalAggregator {
        /// Which replica.
        replica: usize,
    },
    /// The WAN emulator of `--wan`, carrying every cross-region connection.
    WanEmulator,
}

/// How to start a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The binary's file name, looked for in the bin directory.
    pub binary: &'static str,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Where it listens; it is healthy once `GET http://<address>/healthz` answers 200.
    pub address: SocketAddr,
}

/// Every process `topology` needs, in start order: the aggregators first, so that a shard node
/// starting on an empty data directory finds its datacenter's copies at once.
pub fn members(topology: &Topology) -> Vec<Member> {
    let globals = topology.global.addresses().len();
    let mut members: Vec<Member> = (0..globals)
        .map(|replica| Member::GlobalAggregator { replica })
        .collect();
    for dc in &topology.datacenters {
        members.extend(
            (0..dc.aggregators().len()).map(|replica| Member::DatacenterAggregator {
                datacenter: dc.name.clone(),
                replica,
            }),
        );
    }
    for dc in &topology.datacenters {
        members.extend((0..dc.shards.len()).map(|slot| Member::Shard {
            datacenter: dc.name.clone(),
            slot: u32::try_from(slot).expect("a datacenter has fewer than 2^32 shards"),
        }));
    }
    members
}

impl Member {
    /// What kind of process this is, for the ROLE column.
    pub fn kind(&self) -> &'static str {
        match self {
            Member::Shard { .. } => "shard",
            Member::DatacenterAggregator { .. } => "datacenter-aggregator",
            Member::GlobalAggregator { .. } => "global-aggregator",
            Member::WanEmulator => "wan-emulator",
        }
    }

    /// Where it serves the Redis protocol: a shard node whose datacenter lists `resp`.
    pub fn resp_address(&self, topology: &Topology) -> Option<SocketAddr> {
        match self {
            Member::Shard { datacenter, slot } => {
                topology.datacenter(datacenter).ok()?.resp_address(*slot)
            }
            _ => None,
        }
    }

    /// The file name of its binary, looked for in the bin directory.
    pub fn binary(&self) -> &'static str {
        match self {
            Member::Shard { .. } => "shard-node",
            // Every other binary is named as its kind.
            other => other.kind(),
        }
    }

    /// Its name, unique in the cluster and used for its log file: `DC_USA_0_VAL_1`,
    /// `aggregator_USA_0`, `global`, `global@1` (replica 1), `wan-emulator`.
    pub fn name(&self) -> String {
        match self {
            Member::Shard { datacenter, slot } => {
                SlotId::new(datacenter.as_str(), *slot).to_string()
            }
            Member::DatacenterAggregator {
                datacenter,
                replica,
            } => replica_name(&aggregator_process(datacenter), *replica),
            Member::GlobalAggregator { replica } => replica_name(GLOBAL_PROCESS, *replica),
            Member::WanEmulator => "wan-emulator".to_owned(),
        }
    }

    /// How to start replica `replica` of an aggregator tier listening at `addresses` (replica 0
    /// first, started without `--replica`), with `flags` after `--config`.
    fn replica_launch<const N: usize>(
        &self,
        addresses: &[SocketAddr],
        replica: usize,
        config: &Path,
        flags: [OsString; N],
    ) -> Result<Launch, ClusterError> {
        let address = *addresses.get(replica).ok_or_else(|| ClusterError::Member {
            name: self.name(),
            message: format!("the topology lists no replica {replica} of it"),
        })?;
        let mut args: Vec<OsString> = vec!["--config".into(), config.into()];
        args.extend(flags);
        if replica > 0 {
            args.extend(["--replica".into(), replica.to_string().into()]);
        }
        Ok(Launch {
            binary: self.binary(),
            args,
            address,
        })
    }

    /// Its binary, arguments and address, for the topology read from `config` with data kept
    /// under `data_dir`. The emulator's `config` is its own file (`wan.toml`), and its address
    /// the topology's `wan.control`.
    pub fn launch(
        &self,
        topology: &Topology,
        config: &Path,
        data_dir: &Path,
    ) -> Result<Launch, ClusterError> {
        match self {
            Member::Shard { datacenter, slot } => {
                let name = self.name();
                let address = topology
                    .shard_address(&SlotId::new(datacenter.as_str(), *slot))
                    .map_err(|(key, message)| ClusterError::Member {
                        name: name.clone(),
                        message: format!("{key}: {message}"),
                    })?;
                let node_dir = data_dir.join(&name);
                let mut args: Vec<OsString> = vec![
                    "--config".into(),
                    config.into(),
                    "--dc".into(),
                    datacenter.into(),
                    "--slot".into(),
                    slot.to_string().into(),
                    "--data-dir".into(),
                    node_dir.clone().into(),
                ];
                // A data directory that does not exist yet is a new slot of a new cluster; one
                // that exists empty is a lost disk, and the node restores it.
                if !node_dir.exists() {
                    args.extend(["--restore".into(), "empty".into()]);
                }
                Ok(Launch {
                    binary: self.binary(),
                    args,
                    address,
                })
            }
            Member::DatacenterAggregator {
                datacenter,
                replica,
            } => {
                let unknown = |message| ClusterError::Member {
                    name: self.name(),
                    message,
                };
                let dc = topology.datacenter(datacenter).map_err(unknown)?;
                let dc_flag = ["--dc".into(), datacenter.into()];
                self.replica_launch(&dc.aggregators(), *replica, config, dc_flag)
            }
            Member::GlobalAggregator { replica } => {
                self.replica_launch(&topology.global.addresses(), *replica, config, [])
            }
            Member::WanEmulator => {
                let wan = topology.wan.as_ref().ok_or_else(|| ClusterError::Member {
                    name: self.name(),
                    message: "the topology has no [wan] section".to_owned(),
                })?;
                Ok(Launch {
                    binary: self.binary(),
                    args: vec!["--config".into(), config.into()],
                    address: wan.control,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The topology the launcher runs by default.
    const LOCAL: &str = include_str!("../../../config/local.toml");

    #[test]
    fn local_topology_starts_the_aggregators_first() {
        let topology = Topology::from_toml("local.toml", LOCAL).unwrap();
        let members = members(&topology);
        let config = Path::new("config/local.toml");
        let data_dir = Path::new("data/local");
        let global = members[0].launch(&topology, config, data_dir).unwrap();
        assert_eq!(
            (members[0].kind(), members[0].name()),
            ("global-aggregator", "global".to_owned())
        );
        assert_eq!(global.address.to_string(), "127.0.0.1:7000");
        assert_eq!(
            global.args,
            vec![
                OsString::from("--config"),
                OsString::from("config/local.toml")
            ]
        );
        for (member, (dc, address)) in members[1..4].iter().zip([
            ("USA_0", "127.0.0.1:7100"),
            ("ASIA_0", "127.0.0.1:7200"),
            ("EUROPE_0", "127.0.0.1:7300"),
        ]) {
            assert_eq!(
                member,
                &Member::DatacenterAggregator {
                    datacenter: dc.to_owned(),
                    replica: 0,
                }
            );
            let launch = member.launch(&topology, config, data_dir).unwrap();
            assert_eq!(
                (launch.binary, launch.address.to_string()),
                ("datacenter-aggregator", address.to_owned())
            );
            assert_eq!(
                launch.args[2..],
                [OsString::from("--dc"), OsString::from(dc)]
            );
        }
    }

    #[test]
    fn local_topology_has_six_shards() {
        let topology = Topology::from_toml("local.toml", LOCAL).unwrap();
        let members: Vec<Member> = members(&topology)
            .into_iter()
            .filter(|r| matches!(r, Member::Shard { .. }))
            .collect();
        let expected = [
            ("USA_0", 0, "127.0.0.1:7101"),
            ("USA_0", 1, "127.0.0.1:7102"),
            ("USA_0", 2, "127.0.0.1:7103"),
            ("ASIA_0", 0, "127.0.0.1:7201"),
            ("ASIA_0", 1, "127.0.0.1:7202"),
            ("EUROPE_0", 0, "127.0.0.1:7301"),
        ];
        assert_eq!(members.len(), expected.len());
        let config = Path::new("config/local.toml");
        let data_dir = Path::new("data/local");
        for (member, (dc, slot, address)) in members.iter().zip(expected) {
            let name = SlotId::new(dc, slot).to_string();
            assert_eq!(
                member,
                &Member::Shard {
                    datacenter: dc.to_owned(),
                    slot,
                }
            );
            assert_eq!(member.kind(), "shard");
            assert_eq!(member.name(), name);
            let launch = member.launch(&topology, config, data_dir).unwrap();
            let args: Vec<OsString> = [
                "--config",
                "config/local.toml",
                "--dc",
                dc,
                "--slot",
                &slot.to_string(),
                "--data-dir",
                &format!("data/local/{name}"),
                // No such directory yet: a new slot.
                "--restore",
                "empty",
            ]
            .into_iter()
            .map(OsString::from)
            .collect();
            assert_eq!(
                launch,
                Launch {
                    binary: "shard-node",
                    args,
                    address: address.parse().unwrap(),
                }
            );
        }
    }

    #[test]
    fn unknown_slot_is_an_error_naming_the_member() {
        let topology = Topology::from_toml("local.toml", LOCAL).unwrap();
        let member = Member::Shard {
            datacenter: "EUROPE_0".into(),
            slot: 1,
        };
        let error = member
            .launch(&topology, Path::new("c.toml"), Path::new("d"))
            .unwrap_err();
        assert!(
            error.to_string().starts_with("DC_EUROPE_0_VAL_1: "),
            "{error}"
        );
    }
}
