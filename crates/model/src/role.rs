//! The processes of a cluster by name, and the role each name stands for: `global`,
//! `aggregator_<DC>` or `DC_<DC>_VAL_<n>`. A process proves its name to the others (its
//! certificate's `geocount:<name>` URI, or its process key; docs/operations.md, "Access"), and each route
//! between tiers accepts only the roles that need it.

use std::fmt;

use crate::SlotId;

/// The global aggregator's process name (and its certificate's in `[tls] cert_dir`).
pub const GLOBAL_PROCESS: &str = "global";

/// The prefix of a datacenter aggregator's process name.
const AGGREGATOR_PREFIX: &str = "aggregator_";

/// Datacenter `dc`'s aggregator's process name: `aggregator_<DC>`. A shard node's is its slot's
/// ([`SlotId`]'s `Display`).
pub fn aggregator_process(dc: &str) -> String {
    format!("{AGGREGATOR_PREFIX}{dc}")
}

/// How replica `replica` of process or source `name` is named in logs, metrics, health and the
/// launcher: `name` itself for replica 0, `name@<replica>` for the others. Replicas of a tier
/// prove the same process name to the others: they do the same work.
pub fn replica_name(name: &str, replica: usize) -> String {
    match replica {
        0 => name.to_owned(),
        n => format!("{name}@{n}"),
    }
}

/// The scheme of the URI subject alternative name that names a process in its certificate:
/// `geocount:<name>`.
pub const PROCESS_URI_SCHEME: &str = "geocount:";

/// What a process of the cluster is, as its name says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    /// The global aggregator (`global`).
    Global,
    /// The aggregator of a datacenter (`aggregator_<DC>`).
    Aggregator {
        /// Its datacenter.
        datacenter: String,
    },
    /// The shard node of a slot (`DC_<DC>_VAL_<n>`).
    Shard {
        /// Its slot.
        slot: SlotId,
    },
}

impl Role {
    /// The role process `name` has, or `None` when it names no process.
    pub fn of(name: &str) -> Option<Role> {
        if name == GLOBAL_PROCESS {
            return Some(Role::Global);
        }
        if let Some(datacenter) = name.strip_prefix(AGGREGATOR_PREFIX) {
            let valid = !datacenter.is_empty()
                && datacenter
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_');
            return valid.then(|| Role::Aggregator {
                datacenter: datacenter.to_owned(),
            });
        }
        name.parse().ok().map(|slot| Role::Shard { slot })
    }

    /// The datacenter it belongs to (none for the global aggregator).
    pub fn datacenter(&self) -> Option<&str> {
        match self {
            Role::Global => None,
            Role::Aggregator { datacenter } => Some(datacenter),
            Role::Shard { slot } => Some(&slot.datacenter),
        }
    }
}

/// The process name of `role`.
impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Global => f.write_str(GLOBAL_PROCESS),
            Role::Aggregator { datacenter } => write!(f, "{AGGREGATOR_PREFIX}{datacenter}"),
            Role::Shard { slot } => write!(f, "{slot}"),
        }
    }
}

/// The process name a certificate's URI subject alternative name `uri` carries
/// (`geocount:<name>`), if it is one.
pub fn process_of_uri(uri: &str) -> Option<&str> {
    uri.strip_prefix(PROCESS_URI_SCHEME)
        .filter(|name| Role::of(name).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_roles_and_back() {
        for (name, role) in [
            ("global", Role::Global),
            (
                "aggregator_USA_0",
                Role::Aggregator {
                    datacenter: "USA_0".into(),
                },
            ),
            (
                "DC_USA_0_VAL_2",
                Role::Shard {
                    slot: SlotId::new("USA_0", 2),
                },
            ),
        ] {
            assert_eq!(Role::of(name), Some(role.clone()), "{name}");
            assert_eq!(role.to_string(), name);
        }
        for bad in [
            "",
            "globals",
            "aggregator_",
            "aggregator_a-b",
            "DC_X",
            "client",
        ] {
            assert_eq!(Role::of(bad), None, "{bad:?}");
        }
        assert_eq!(Role::Global.datacenter(), None);
        assert_eq!(
            process_of_uri("geocount:DC_ASIA_0_VAL_0"),
            Some("DC_ASIA_0_VAL_0")
        );
        assert_eq!(process_of_uri("https://example.com"), None);
        assert_eq!(process_of_uri("geocount:nobody"), None);
    }
}
