//! `GET /status` and `GET /counter/{id}/rights` at the datacenter tier: this aggregator's view
//! of each slot joined with what each shard node says of itself (`/healthz`, `/metrics`, a
//! bounded counter's rights), asked of every shard node at once with a short timeout
//! ([`crate::fanout`]). What the status page of this tier shows; the global tier's gathers
//! these.

use geocount_net::Response;
use geocount_sync::worst_staleness;
use serde::Serialize;
use serde_json::Value;

use super::state::{DatacenterState, slot_staleness};
use crate::answers::Held;
use crate::error::AggregatorError;
use crate::fanout::{self, Reply};
use crate::page::TrendingSettings;
use crate::replica::SourceHealth;

/// The shard metric a slot's write rate is drawn from.
const WRITES_APPLIED: &str = "geocount_shard_writes_applied_total";

/// The answer to `GET /status` at the datacenter tier.
#[derive(Debug, Clone, Serialize)]
pub struct DatacenterView {
    /// `datacenter`.
    pub tier: &'static str,
    /// This datacenter.
    pub datacenter: String,
    /// This aggregator's clock when it answered (unix ms).
    pub at_ms: u64,
    /// This aggregator's health, as its `/healthz` says it.
    pub status: &'static str,
    /// When the datacenter's shard nodes acknowledge a write.
    pub durability: String,
    /// The worst of its slots' staleness (`None`: a slot never heard).
    pub staleness_ms: Option<u64>,
    /// What this aggregator holds.
    #[serde(flatten)]
    pub held: Held,
    /// Slots served by two processes at once (fencing alarms).
    pub conflicts: Vec<String>,
    /// The configured trending prefixes.
    pub trending: TrendingSettings,
    /// Each slot, in slot order.
    pub slots: Vec<SlotView>,
}

/// One slot of the datacenter, as `GET /status` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct SlotView {
    /// Its name, e.g. `DC_USA_0_VAL_0`.
    pub slot: String,
    /// Where its shard node listens.
    pub address: String,
    /// This aggregator's pulls of it: staleness and last error.
    #[serde(flatten)]
    pub pulled: SourceHealth,
    /// The status of the shard node's `/healthz` (`None`: it did not answer).
    pub health_status: Option<u16>,
    /// The shard node's `/healthz` body (status, restore, conflict, storage error, sources).
    pub health: Option<Value>,
    /// Why the shard node did not answer, if it did not.
    pub error: Option<String>,
    /// Writes the shard node applied since it started (its metrics), to draw a rate from.
    pub writes_applied: Option<f64>,
    /// How far behind its peers' copies of this slot are: the worst staleness of this slot
    /// among the sources its peers pull (`None`: no peer reported it).
    pub replication_lag_ms: Option<u64>,
}

/// The health word of this aggregator: as `/healthz` says it.
pub fn health_word(conflicts: bool, over_bound: bool, refused_ahead: bool) -> &'static str {
    // The aggregator serves either way; a conflict is the shard nodes' to resolve, sums past
    // the byte bound are marked incomplete in every answer, and slots whose entries the clock
    // fence refused are stale until they are taken.
    match (conflicts, over_bound, refused_ahead) {
        (true, _, _) => "slot served twice",
        (false, true, _) => "over its byte bound",
        (false, false, true) => "degraded",
        (false, false, false) => "ok",
    }
}

/// `GET /status`: this aggregator's view at `now_ms` and every shard node's, asked with
/// `authorization`.
pub async fn status(state: &DatacenterState, authorization: Option<&str>, now_ms: u64) -> Response {
    let addresses: Vec<String> = state.shards.iter().map(ToString::to_string).collect();
    let fanout = &state.core.fanout;
    let (healths, metrics) = tokio::join!(
        fanout.get_all(addresses.clone(), "/healthz", authorization),
        fanout.get_all(addresses.clone(), "/metrics", authorization),
    );
    let mut view = {
        let replica = state.core.replica.read().expect("replica lock");
        let slots = state.slot_names.len();
        let conflicts: Vec<String> = (replica.conflicts(now_ms).iter())
            .map(|(slot, conflict)| conflict.describe(slot))
            .collect();
        let held = Held::of(&replica);
        let refused_ahead = replica.sources.iter().any(|s| s.refused_ahead() > 0);
        DatacenterView {
            tier: "datacenter",
            datacenter: state.datacenter.clone(),
            at_ms: now_ms,
            status: health_word(
                !conflicts.is_empty(),
                held.over_bound.is_some(),
                refused_ahead,
            ),
            durability: state.durability.to_string(),
            staleness_ms: worst_staleness(slot_staleness(&replica, slots, now_ms)),
            held,
            conflicts,
            trending: TrendingSettings::of(&state.core.settings.trending),
            slots: (state.slot_names.iter().enumerate())
                .map(|(n, slot)| SlotView {
                    slot: slot.clone(),
                    address: addresses[n].clone(),
                    pulled: replica.source_health(n, now_ms),
                    health_status: None,
                    health: None,
                    error: None,
                    writes_applied: None,
                    replication_lag_ms: None,
                })
                .collect(),
        }
    };
    for (slot, (health, metrics)) in (view.slots.iter_mut()).zip(healths.iter().zip(metrics.iter()))
    {
        slot.health_status = health.status();
        slot.health = health.json();
        if let Reply::Failed(why) = health {
            slot.error = Some(why.clone());
        }
        if let Reply::Answered(200, text) = metrics {
            let text = String::from_utf8_lossy(text);
            slot.writes_applied = fanout::metric_sum(&text, WRITES_APPLIED);
        }
    }
    let lags: Vec<Option<u64>> = (view.slots.iter())
        .map(|slot| replication_lag(&slot.slot, &slot.address, &view.slots))
        .collect();
    for (slot, lag) in view.slots.iter_mut().zip(lags) {
        slot.replication_lag_ms = lag;
    }
    state.core.answer(&view)
}

/// The worst staleness of slot `name` (at `address`) among the sources its peers in `slots`
/// report pulling.
fn replication_lag(name: &str, address: &str, slots: &[SlotView]) -> Option<u64> {
    (slots.iter())
        .filter(|peer| peer.slot != name)
        .filter_map(|peer| peer.health.as_ref()?["sources"].as_array())
        .flatten()
        .filter(|source| {
            let source = source["source"].as_str().unwrap_or("");
            source == name || source == address
        })
        .map(|source| source["staleness_ms"].as_u64())
        .reduce(|worst, next| Some(worst?.max(next?)))
        .flatten()
}

/// `GET /counter/{id}/rights`: the rights every shard node's slot holds of bounded counter
/// `id`, asked with `authorization`.
pub async fn rights(
    state: &DatacenterState,
    id: &str,
    authorization: Option<&str>,
) -> Result<Response, AggregatorError> {
    #[derive(Serialize)]
    struct SlotRights {
        slot: String,
        address: String,
        status: Option<u16>,
        rights: Option<Value>,
        error: Option<String>,
    }
    #[derive(Serialize)]
    struct Rights {
        id: String,
        datacenter: String,
        /// The increments the datacenter's slots may apply without asking, together.
        up: Option<i128>,
        /// The decrements, together.
        down: Option<i128>,
        slots: Vec<SlotRights>,
    }
    let addresses: Vec<String> = state.shards.iter().map(ToString::to_string).collect();
    let path = format!("/counter/{}/rights", fanout::path_segment(id));
    let fanout = &state.core.fanout;
    let answers = fanout
        .get_all(addresses.clone(), &path, authorization)
        .await;
    let held_by = || format!("datacenter {}", state.datacenter);
    fanout::any_rights(&answers, id, held_by)?;
    let slots: Vec<SlotRights> = (state.slot_names.iter().zip(addresses))
        .zip(answers.iter())
        .map(|((slot, address), answer)| SlotRights {
            slot: slot.clone(),
            address,
            status: answer.status(),
            rights: answer.ok_json(),
            error: (answer.status() != Some(404))
                .then(|| answer.error())
                .flatten(),
        })
        .collect();
    let total = |key: &str| -> Option<i128> {
        let parts: Vec<i128> = (slots.iter())
            .filter_map(|s| s.rights.as_ref()?[key].as_i64().map(i128::from))
            .collect();
        (!parts.is_empty()).then(|| parts.iter().sum())
    };
    let answer = Rights {
        id: id.to_owned(),
        datacenter: state.datacenter.clone(),
        up: total("up"),
        down: total("down"),
        slots,
    };
    Ok(state.core.answer(&answer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slot(name: &str, sources: Value) -> SlotView {
        SlotView {
            slot: name.to_owned(),
            address: format!("addr-{name}"),
            pulled: SourceHealth {
                staleness_ms: Some(1),
                last_error: None,
                incomplete: false,
                refused_ahead: 0,
            },
            health_status: Some(200),
            health: Some(json!({"status": "ok", "sources": sources})),
            error: None,
            writes_applied: None,
            replication_lag_ms: None,
        }
    }

    #[test]
    fn a_slots_replication_lag_is_the_worst_of_its_peers_copies() {
        let slots = [
            slot(
                "A",
                json!([{"source": "B", "staleness_ms": 30}, {"source": "C", "staleness_ms": 5}]),
            ),
            slot(
                "B",
                json!([{"source": "A", "staleness_ms": 40}, {"source": "aggregator X", "staleness_ms": 900}]),
            ),
            slot(
                "C",
                json!([{"source": "A", "staleness_ms": 70}, {"source": "B", "staleness_ms": null}]),
            ),
        ];
        let lag = |n: usize| replication_lag(&slots[n].slot, &slots[n].address, &slots);
        assert_eq!(lag(0), Some(70), "the worst peer's copy of A");
        assert_eq!(lag(1), None, "C never had B's copy complete");
        assert_eq!(lag(2), Some(5));
        // A slot no peer pulls (a datacenter of one node) has none.
        let alone = [slot("A", json!([]))];
        assert_eq!(replication_lag("A", "addr-A", &alone), None);
    }

    #[test]
    fn the_health_word_names_the_worst_problem() {
        assert_eq!(health_word(false, false, false), "ok");
        assert_eq!(health_word(false, false, true), "degraded");
        assert_eq!(health_word(false, true, true), "over its byte bound");
        assert_eq!(health_word(true, true, true), "slot served twice");
    }
}
