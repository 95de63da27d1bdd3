//! What serde cannot check of the topology's partitions: how many, and which partitions each
//! aggregator replica holds.

use super::Topology;

/// The most partitions the counter space may be split into.
pub const MAX_PARTITIONS: u32 = 1024;

impl Topology {
    /// `partitions` in bounds; each tier's replica lists well formed ([`check_held`]); and
    /// every global replica's partitions held whole by some replica of every datacenter's
    /// aggregator, which it pulls them from.
    pub(super) fn validate_partitions(&self) -> Result<(), (String, String)> {
        let count = self.partitions;
        if !(1..=MAX_PARTITIONS).contains(&count) {
            return Err((
                "partitions".into(),
                format!("{count} is out of bounds (1 to {MAX_PARTITIONS})"),
            ));
        }
        let replicas = self.global.addresses().len();
        check_held(
            "global.partitions",
            &self.global.partitions,
            replicas,
            count,
        )?;
        for (i, dc) in self.datacenters.iter().enumerate() {
            let key = format!("datacenters[{i}].aggregator_partitions");
            check_held(
                &key,
                &dc.aggregator_partitions,
                dc.aggregators().len(),
                count,
            )?;
        }
        for (g, (_, global)) in self.global.replicas_of(count).iter().enumerate() {
            for (i, dc) in self.datacenters.iter().enumerate() {
                let replicas = dc.aggregator_replicas_of(count);
                if !replicas.iter().any(|(_, held)| held.covers(global)) {
                    return Err((
                        format!("datacenters[{i}].aggregator_partitions"),
                        format!(
                            "no replica of {}'s aggregator holds every partition global replica \
                             {g} holds ({global}), so it cannot pull them whole",
                            dc.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// `held` (the partitions of each of `replicas` replicas, or empty: all) is well formed: one
/// non-empty list per replica, each partition below `count` and listed once, two replicas'
/// lists either the same or with nothing in common, and every partition held.
fn check_held(
    key: &str,
    held: &[Vec<u32>],
    replicas: usize,
    count: u32,
) -> Result<(), (String, String)> {
    if held.is_empty() {
        return Ok(());
    }
    if held.len() != replicas {
        return Err((
            key.to_owned(),
            format!(
                "{} lists, one per replica, are needed: it has {}",
                replicas,
                held.len()
            ),
        ));
    }
    let mut sorted: Vec<Vec<u32>> = Vec::new();
    for (r, list) in held.iter().enumerate() {
        let mut list = list.clone();
        list.sort_unstable();
        let at = format!("{key}[{r}]");
        if list.is_empty() {
            return Err((at, "a replica holds at least one partition".into()));
        }
        if let Some(p) = list.iter().find(|&&p| p >= count) {
            return Err((
                at,
                format!("partition {p} is not below partitions = {count}"),
            ));
        }
        if let Some(pair) = list.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err((at, format!("partition {} is listed twice", pair[0])));
        }
        if let Some(other) = sorted
            .iter()
            .position(|o| *o != list && o.iter().any(|p| list.binary_search(p).is_ok()))
        {
            return Err((
                at,
                format!(
                    "shares some partitions with replica {other} but not all: replicas hold \
                     the same partitions or none in common"
                ),
            ));
        }
        sorted.push(list);
    }
    if let Some(p) = (0..count).find(|p| sorted.iter().all(|l| l.binary_search(p).is_err())) {
        return Err((
            key.to_owned(),
            format!("partition {p} is held by no replica"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Partitions;

    /// Two datacenters, two global replicas and two aggregator replicas in USA_0; `top` goes
    /// before every table, `global` and `usa` into their tables.
    fn topology(top: &str, global: &str, usa: &str) -> Result<Topology, (String, String)> {
        let usa = format!("aggregator_replicas = [\"127.0.0.1:7110\"]\n{usa}");
        let text = format!(
            "{top}\n[global]\nlisten = \"127.0.0.1:7000\"\nreplicas = [\"127.0.0.1:7010\"]\n{global}\n{}{}",
            datacenter("USA_0", 1, &usa),
            datacenter("ASIA_0", 2, ""),
        );
        Topology::from_toml("t.toml", &text).map_err(|e| (e.key, e.message))
    }

    /// Datacenter `name` with one shard, its addresses `127.0.0.1:7<n>00` and `7<n>01`, and the
    /// keys `extra`.
    fn datacenter(name: &str, n: u8, extra: &str) -> String {
        format!(
            "[[datacenters]]\nname = \"{name}\"\naggregator = \"127.0.0.1:7{n}00\"\n\
             shards = [\"127.0.0.1:7{n}01\"]\n{extra}\n"
        )
    }

    #[test]
    fn replicas_listen_in_order_and_hold_every_partition_by_default() {
        let t = topology("partitions = 4", "", "").unwrap();
        let globals = t.global.replicas_of(t.partitions);
        assert_eq!(globals[1].0, "127.0.0.1:7010".parse().unwrap());
        assert_eq!(globals[1].1, Partitions::all(4));
        assert_eq!(t.datacenters[0].aggregators().len(), 2);
        assert_eq!(t.datacenters[1].aggregators().len(), 1);
        let text = "[global]\nlisten = \"127.0.0.1:7000\"\nreplicas = [\"127.0.0.1:7010\"]\n\
                    [[datacenters]]\nname = \"A\"\naggregator = \"127.0.0.1:7100\"\n\
                    aggregator_replicas = [\"127.0.0.1:7010\"]\nshards = [\"127.0.0.1:7101\"]\n";
        let error = Topology::from_toml("t.toml", text).unwrap_err();
        assert_eq!(
            error.key, "datacenters[0].aggregator_replicas[0]",
            "{error}"
        );
        assert!(error.message.contains("global.replicas[0]"), "{error}");
    }

    #[test]
    fn partitions_are_held_by_replicas_in_disjoint_groups() {
        let global = "partitions = [[0], [1]]";
        let t = topology(
            "partitions = 2",
            global,
            "aggregator_partitions = [[1], [0]]",
        )
        .unwrap();
        assert_eq!(t.global.replicas_of(2)[1].1.held, [1]);
        assert_eq!(t.datacenters[0].aggregator_replicas_of(2)[0].1.held, [1]);

        // (top-level keys, [global] keys, USA_0's keys, the key named)
        let bad = "partitions = 0|||partitions
            partitions = 1025|||partitions
            partitions = 2|partitions = [[0]]||global.partitions
            partitions = 2|partitions = [[0], []]||global.partitions[1]
            partitions = 2|partitions = [[0], [2]]||global.partitions[1]
            partitions = 2|partitions = [[0, 0], [1]]||global.partitions[0]
            partitions = 3|partitions = [[0, 1], [1, 2]]||global.partitions[1]
            partitions = 3|partitions = [[0], [1]]||global.partitions
            partitions = 2||aggregator_partitions = [[0], [1]]|datacenters[0].aggregator_partitions";
        for case in bad.lines() {
            let [top, global, usa, key] = *case.trim().split('|').collect::<Vec<_>>() else {
                panic!("{case}");
            };
            let error = topology(top, global, usa).unwrap_err();
            assert_eq!(error.0, key, "{top} {global} {usa}: {}", error.1);
        }
    }
}
