//! Partitions held by other replicas of the tier. A read of a counter this replica does not
//! hold is redirected to the first replica that does; a ranking or a sum asks one replica of
//! each other group of partitions for its own part and merges the parts. The merge is exact:
//! partitions are disjoint, so each part ranks or sums counters no other part holds, and the
//! best K of the union are among the best K of each part.

use std::cmp::Ordering;
use std::net::SocketAddr;

use geocount_model::{Partitions, partition_of};
use hyper::{Method, StatusCode};
use serde_json::Value;

use super::Core;
use crate::error::AggregatorError;
use crate::ranking::{PART_KEY, RankingRequest};

impl Core {
    /// Where a read of counter `id` goes when this replica does not hold its partition: the
    /// first replica of the tier that does. `None` when it is held here.
    pub fn holder_elsewhere(&self, id: &str) -> Option<SocketAddr> {
        let partitions = &self.settings.partitions;
        if partitions.holds(id) {
            return None;
        }
        let partition = partition_of(id, partitions.count);
        let mut tier = self.settings.tier.iter();
        let holder = tier.find(|(_, held)| held.held.contains(&partition));
        holder.map(|(address, _)| *address)
    }

    /// Refuses a read of counter `id` (`request`) with a redirect to a replica of the tier
    /// that holds it, when this one does not.
    pub fn held_here<B>(
        &self,
        id: &str,
        request: &hyper::Request<B>,
    ) -> Result<(), AggregatorError> {
        let Some(holder) = self.holder_elsewhere(id) else {
            return Ok(());
        };
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        Err(AggregatorError::Elsewhere {
            id: id.to_owned(),
            location: self.peers.url(holder, path),
        })
    }

    /// The groups of partitions this replica does not hold, each with the replicas holding it
    /// in tier order (replicas hold the same partitions or none in common).
    pub fn other_groups(&self) -> Vec<(Partitions, Vec<SocketAddr>)> {
        let mut groups: Vec<(Partitions, Vec<SocketAddr>)> = Vec::new();
        for (address, held) in &self.settings.tier {
            if *held == self.settings.partitions {
                continue;
            }
            match groups.iter_mut().find(|(partitions, _)| partitions == held) {
                Some((_, replicas)) => replicas.push(*address),
                None => groups.push((held.clone(), vec![*address])),
            }
        }
        groups
    }

    /// `answer`, this replica's ranking of `ranking` with its counters in `list` (`top` or
    /// `trending`), as the reply: as it is when another replica asked for this one's part or
    /// the tier has no other partitions, else merged with every other group's part.
    pub async fn reply_ranking<T: serde::Serialize>(
        &self,
        answer: &T,
        list: &str,
        ranking: &RankingRequest,
    ) -> Result<geocount_net::Response, AggregatorError> {
        if ranking.part_of.is_some() || self.settings.partitions.is_all() {
            return Ok(self.answer(answer));
        }
        let parts: Vec<Value> = (self.parts(ranking).await?.iter())
            .map(|body| serde_json::from_slice(body).unwrap_or(Value::Null))
            .collect();
        let local = serde_json::to_value(answer)?;
        Ok(self.answer(&merge(local, &parts, list)))
    }

    /// The parts of `ranking` (a ranking or a sum) that the other groups hold, as their JSON
    /// bodies: one replica of each asked in turn until one answers. A part refused (a stale
    /// read's 503, a busy 429) is the answer; no replica of a group answering is a 503 naming
    /// it.
    pub async fn parts(
        &self,
        ranking: &RankingRequest,
    ) -> Result<Vec<bytes::Bytes>, AggregatorError> {
        let mut query = ranking.query.clone().unwrap_or_default();
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(&format!("{PART_KEY}={}", ranking.at_ms));
        let path = &ranking.path;
        let headers: Vec<(&str, &str)> = (ranking.authorization.as_deref())
            .map(|a| ("authorization", a))
            .into_iter()
            .collect();
        let mut parts = Vec::new();
        for (partitions, replicas) in self.other_groups() {
            let mut failure = String::new();
            let mut answered = None;
            for address in replicas {
                let url = self.peers.url(address, &format!("{path}?{query}"));
                let sent = self
                    .peers
                    .send(Method::GET, &url, &headers, Default::default());
                match sent.await {
                    Ok(answer) if answer.status == StatusCode::OK => {
                        answered = Some(answer.body);
                        break;
                    }
                    Ok(answer) => {
                        return Err(AggregatorError::PartRefused {
                            status: answer.status,
                            body: answer.body,
                        });
                    }
                    Err(error) => failure = format!("{address}: {error}"),
                }
            }
            match answered {
                Some(part) => parts.push(part),
                None => {
                    return Err(AggregatorError::PartitionsUnreachable {
                        partitions: partitions.to_string(),
                        last: failure,
                    });
                }
            }
        }
        Ok(parts)
    }
}

/// `local` (this replica's ranking answer as JSON) with `parts` merged in: the lists under
/// `list` (`top` or `trending`, and each datacenter's) merged and cut to `k` if the answer has
/// one; the worst staleness; complete only if every part is.
pub fn merge(mut local: Value, parts: &[Value], list: &str) -> Value {
    let k = local["k"].as_u64().map(|k| k as usize);
    for part in parts {
        merge_part(&mut local, part, list, k);
        local["complete"] = Value::Bool(local["complete"] == true && part["complete"] == true);
        if let Some(datacenters) = local["datacenters"].as_object_mut() {
            for (name, datacenter) in datacenters.iter_mut() {
                let theirs = &part["datacenters"][name];
                merge_part(datacenter, theirs, list, k);
                datacenter["heard"] =
                    Value::Bool(datacenter["heard"] == true && theirs["heard"] == true);
            }
        }
    }
    local
}

/// Merges `part`'s list and staleness into `into`.
fn merge_part(into: &mut Value, part: &Value, list: &str, k: Option<usize>) {
    let mut ranked: Vec<Value> = into[list].as_array().cloned().unwrap_or_default();
    ranked.extend(part[list].as_array().cloned().unwrap_or_default());
    ranked.sort_by(highest_first);
    if let Some(k) = k {
        ranked.truncate(k);
    }
    into[list] = Value::Array(ranked);
    into["staleness_ms"] = match (into["staleness_ms"].as_u64(), part["staleness_ms"].as_u64()) {
        (Some(a), Some(b)) => Value::from(a.max(b)),
        _ => Value::Null,
    };
}

/// The ranking order: highest value first, ties by id ascending.
fn highest_first(a: &Value, b: &Value) -> Ordering {
    let value = |v: &Value| -> i128 {
        let number = &v["value"];
        (number.as_i64().map(i128::from))
            .or_else(|| number.as_u64().map(i128::from))
            .unwrap_or_default()
    };
    let id = |v: &Value| v["id"].as_str().unwrap_or_default().to_owned();
    value(b).cmp(&value(a)).then_with(|| id(a).cmp(&id(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_merge_into_one_exact_ranking() {
        let local = json!({
            "top": [{"id": "b", "value": 9}, {"id": "d", "value": 2}],
            "k": 3, "staleness_ms": 40, "complete": true,
            "datacenters": {"USA_0": {"top": [{"id": "b", "value": 9}], "staleness_ms": 40, "heard": true}},
        });
        let part = json!({
            "top": [{"id": "a", "value": 9}, {"id": "c", "value": 5}, {"id": "e", "value": 1}],
            "k": 3, "staleness_ms": 70, "complete": true,
            "datacenters": {"USA_0": {"top": [{"id": "c", "value": 5}], "staleness_ms": null, "heard": false}},
        });
        let merged = merge(local, &[part], "top");
        let ids: Vec<&str> = (merged["top"].as_array().unwrap().iter())
            .map(|r| r["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["a", "b", "c"], "ties by id, cut to k");
        assert_eq!(merged["staleness_ms"], 70);
        assert_eq!(merged["complete"], true);
        let usa = &merged["datacenters"]["USA_0"];
        assert_eq!(usa["staleness_ms"], Value::Null);
        assert_eq!(usa["heard"], false);
        assert_eq!(usa["top"].as_array().unwrap().len(), 2);
    }
}
