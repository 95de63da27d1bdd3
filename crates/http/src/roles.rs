//! Which tier process calls, and which processes each route between tiers accepts.
//!
//! A process proves its name ([`Role`]) on every call to another tier:
//!
//! - With `[tls]`, by its client certificate: the cluster CA signed it, and its
//!   `geocount:<name>` URI names the process (`geocount_net::identity`). Its requests also
//!   carry its process key, as below, and the name in [`PROCESS_HEADER`] must be the
//!   certificate's.
//! - Without `[tls]`, by its process key: `HMAC-SHA256(cluster_secret, "geocount process key\0"
//!   ‖ name)` in hex, sent in [`PROCESS_KEY_HEADER`] beside its name in [`PROCESS_HEADER`]. The
//!   cluster secret itself never travels, and a key opens only the routes of the process it
//!   names: a key read off the wire or out of a log cannot pose as another process. Every
//!   process holds the cluster secret (it derives its callers' keys to check them), so the
//!   keys do not guard against a process that is itself taken over; certificates do.
//!
//! The receiver compares keys in constant time (`ring::hmac::verify`).

use std::fmt;

use geocount_model::{Role, Secret, SlotId};
use ring::hmac;

/// The header naming the process that sends a request to another tier.
pub const PROCESS_HEADER: &str = "x-geocount-process";

/// The header carrying the sending process's key (see the module's documentation).
pub const PROCESS_KEY_HEADER: &str = "x-geocount-process-key";

/// What the process key of a name is the HMAC of, before the name: keys made for anything
/// else with the same secret never match one.
const KEY_CONTEXT: &[u8] = b"geocount process key\0";

/// One kind of process a route between tiers accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allow {
    /// The global aggregator.
    Global,
    /// Any datacenter's aggregator.
    Aggregators,
    /// The aggregator of this datacenter.
    AggregatorOf(String),
    /// Any shard node of any datacenter.
    Shards,
    /// Any shard node of this datacenter.
    ShardsOf(String),
    /// The shard node of this slot.
    Shard(SlotId),
}

impl Allow {
    /// Whether a process of role `role` is one of these.
    pub fn admits(&self, role: &Role) -> bool {
        match (self, role) {
            (Allow::Global, Role::Global) | (Allow::Aggregators, Role::Aggregator { .. }) => true,
            (Allow::AggregatorOf(dc), Role::Aggregator { datacenter }) => dc == datacenter,
            (Allow::Shards, Role::Shard { .. }) => true,
            (Allow::ShardsOf(dc), Role::Shard { slot }) => *dc == slot.datacenter,
            (Allow::Shard(wanted), Role::Shard { slot }) => wanted == slot,
            _ => false,
        }
    }

    /// What a `/slots/{slot}/copy` route accepts: the shard node of `slot` (restoring it), if
    /// the slot is a slot of `datacenter` (any datacenter with `None`); nobody for a name that
    /// is no slot's.
    pub fn slot_owner(slot: Option<&str>, datacenter: Option<&str>) -> Vec<Allow> {
        slot.and_then(|slot| slot.parse::<SlotId>().ok())
            .filter(|slot| datacenter.is_none_or(|dc| dc == slot.datacenter))
            .map(Allow::Shard)
            .into_iter()
            .collect()
    }
}

impl fmt::Display for Allow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allow::Global => f.write_str("the global aggregator"),
            Allow::Aggregators => f.write_str("the datacenter aggregators"),
            Allow::AggregatorOf(dc) => write!(f, "the aggregator of {dc}"),
            Allow::Shards => f.write_str("the shard nodes"),
            Allow::ShardsOf(dc) => write!(f, "the shard nodes of {dc}"),
            Allow::Shard(slot) => write!(f, "the shard node of {slot}"),
        }
    }
}

/// The process keys of a cluster, from its secret.
#[derive(Clone)]
pub struct ProcessKeys {
    key: hmac::Key,
}

impl fmt::Debug for ProcessKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProcessKeys(…)")
    }
}

impl ProcessKeys {
    /// The keys derived from `cluster_secret`.
    pub fn new(cluster_secret: &Secret) -> Self {
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, cluster_secret.expose().as_bytes()),
        }
    }

    /// The key of process `name`, in lowercase hex (64 characters).
    pub fn key_of(&self, name: &str) -> String {
        let tag = hmac::sign(&self.key, &message(name));
        tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `given` (hex, either case) is the key of process `name`, compared in constant
    /// time.
    pub fn verify(&self, name: &str, given: &[u8]) -> bool {
        decode_hex(given).is_some_and(|tag| hmac::verify(&self.key, &message(name), &tag).is_ok())
    }
}

fn message(name: &str) -> Vec<u8> {
    [KEY_CONTEXT, name.as_bytes()].concat()
}

/// The bytes of a hex string, if it is one.
fn decode_hex(hex: &[u8]) -> Option<Vec<u8>> {
    let pairs = hex.chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return None;
    }
    pairs
        .map(|pair| {
            let digit = |b: u8| (b as char).to_digit(16);
            Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str) -> Role {
        Role::of(name).unwrap()
    }

    #[test]
    fn rules_admit_only_their_roles() {
        let shards_of_a = Allow::ShardsOf("A".into());
        assert!(shards_of_a.admits(&role("DC_A_VAL_1")));
        assert!(!shards_of_a.admits(&role("DC_B_VAL_1")));
        assert!(!shards_of_a.admits(&role("aggregator_A")));
        assert!(Allow::AggregatorOf("A".into()).admits(&role("aggregator_A")));
        assert!(!Allow::AggregatorOf("A".into()).admits(&role("aggregator_B")));
        assert!(Allow::Aggregators.admits(&role("aggregator_B")));
        assert!(!Allow::Aggregators.admits(&role("global")));
        assert!(Allow::Shards.admits(&role("DC_B_VAL_0")));
        assert!(!Allow::Shards.admits(&role("aggregator_B")));
        assert!(Allow::Global.admits(&role("global")));
        assert_eq!(
            Allow::slot_owner(Some("DC_A_VAL_0"), Some("A")),
            vec![Allow::Shard(SlotId::new("A", 0))]
        );
        assert_eq!(Allow::slot_owner(Some("DC_B_VAL_0"), Some("A")), vec![]);
        assert_eq!(Allow::slot_owner(Some("nonsense"), None), vec![]);
        assert_eq!(
            Allow::slot_owner(Some("DC_B_VAL_0"), None),
            vec![Allow::Shard(SlotId::new("B", 0))]
        );
        assert!(!Allow::Shard(SlotId::new("A", 0)).admits(&role("DC_A_VAL_1")));
    }

    #[test]
    fn a_key_opens_only_its_own_name() {
        let keys = ProcessKeys::new(&Secret::new("s".repeat(32)));
        let key = keys.key_of("DC_A_VAL_0");
        assert_eq!(key.len(), 64);
        assert!(keys.verify("DC_A_VAL_0", key.as_bytes()));
        assert!(keys.verify("DC_A_VAL_0", key.to_uppercase().as_bytes()));
        assert!(!keys.verify("DC_A_VAL_1", key.as_bytes()));
        assert!(!keys.verify("DC_A_VAL_0", &key.as_bytes()[1..]));
        assert!(!keys.verify("DC_A_VAL_0", b"zz"));
        let other = ProcessKeys::new(&Secret::new("t".repeat(32)));
        assert_ne!(other.key_of("DC_A_VAL_0"), key);
    }
}
