//! When a shard node acknowledges a write (`shard.durability`, `datacenters[i].durability`),
//! and the rule a datacenter's shard count sets on it.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Topology;

/// When a shard node acknowledges a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// After the write is fsynced to the node's log (group commit). A crash loses nothing
    /// acknowledged; a lost disk loses what its peers and aggregators had not pulled yet.
    #[default]
    Sync,
    /// At once; the log is fsynced every `async_flush_interval_ms`, so a machine crash loses at
    /// most that interval of acknowledged writes.
    Async,
    /// After the write is fsynced to the node's log and to the log of at least one peer shard
    /// node of its datacenter, with its idempotency key: a lost disk loses nothing
    /// acknowledged. Needs a datacenter of two shard nodes or more.
    Replicated,
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
            Durability::Replicated => "replicated",
        })
    }
}

impl Topology {
    /// A datacenter of one shard node has no peer to replicate to: `replicated` there is an
    /// error at the key that asks for it, unless the datacenter overrides it.
    pub(super) fn validate_durability(&self) -> Result<(), (String, String)> {
        for (i, dc) in self.datacenters.iter().enumerate() {
            if dc.durability(&self.shard) != Durability::Replicated || dc.shards.len() > 1 {
                continue;
            }
            let key = match dc.durability {
                Some(_) => format!("datacenters[{i}].durability"),
                None => "shard.durability".to_owned(),
            };
            return Err((
                key,
                format!(
                    "\"replicated\" needs two shard nodes or more in a datacenter, and datacenter \
                     {} has one: give it more shards, or set datacenters[{i}].durability = \
                     \"sync\" to run it without a peer",
                    dc.name
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// USA_0 has two shard nodes, ASIA_0 one.
    const GOOD: &str = crate::fixtures::TWO_DATACENTERS;

    fn with_shard(setting: &str) -> String {
        format!("{GOOD}\n[shard]\n{setting}\n")
    }

    #[test]
    fn replicated_in_a_datacenter_of_one_shard_names_the_key() {
        let error =
            Topology::from_toml("t.toml", &with_shard("durability = \"replicated\"")).unwrap_err();
        assert_eq!(error.key, "shard.durability");
        assert!(error.message.contains("ASIA_0"), "{error}");
        assert!(
            error.message.contains("datacenters[1].durability"),
            "{error}"
        );
        assert_eq!(error.to_string().lines().count(), 1, "{error}");
        assert!(error.to_string().starts_with("t.toml: shard.durability: "));

        let asked_there = GOOD.replace(
            "shards = [\"127.0.0.1:7201\"]",
            "shards = [\"127.0.0.1:7201\"]\ndurability = \"replicated\"",
        );
        let error = Topology::from_toml("t.toml", &asked_there).unwrap_err();
        assert_eq!(error.key, "datacenters[1].durability");
    }

    #[test]
    fn a_datacenter_of_one_shard_runs_beside_replicated_ones_when_it_says_so() {
        let text = with_shard("durability = \"replicated\"").replace(
            "shards = [\"127.0.0.1:7201\"]",
            "shards = [\"127.0.0.1:7201\"]\ndurability = \"sync\"",
        );
        let topology = Topology::from_toml("t.toml", &text).unwrap();
        let [usa, asia] = [&topology.datacenters[0], &topology.datacenters[1]];
        assert_eq!(usa.durability(&topology.shard), Durability::Replicated);
        assert_eq!(asia.durability(&topology.shard), Durability::Sync);
        assert_eq!(Durability::Replicated.to_string(), "replicated");
    }

    /// The shipped topologies replicate every datacenter of two shard nodes or more, and run
    /// the others in sync.
    #[test]
    fn the_shipped_topologies_replicate_where_a_peer_exists() {
        let shipped = [
            ("local.toml", include_str!("../../../../config/local.toml")),
            (
                "partitioned.toml",
                include_str!("../../../../config/partitioned.toml"),
            ),
            (
                "geo-10dc.toml",
                include_str!("../../../../config/geo-10dc.toml"),
            ),
        ];
        for (name, text) in shipped {
            let topology = Topology::from_toml(name, text).unwrap();
            for dc in &topology.datacenters {
                let expected = match dc.shards.len() {
                    1 => Durability::Sync,
                    _ => Durability::Replicated,
                };
                assert_eq!(
                    dc.durability(&topology.shard),
                    expected,
                    "{name}: {}",
                    dc.name
                );
            }
        }
    }

    #[test]
    fn sync_is_the_default_everywhere() {
        let topology = Topology::from_toml("t.toml", GOOD).unwrap();
        for dc in &topology.datacenters {
            assert_eq!(dc.durability(&topology.shard), Durability::Sync);
        }
        assert_eq!(topology.shard.replication_timeout_ms, 1_000);
    }
}
