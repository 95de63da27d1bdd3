//! The fault plans: what goes wrong in a run of each scenario, drawn from its seed.

use std::collections::BTreeMap;
use std::time::Duration;

use geocount_model::{Durability, Topology};
use rand::Rng;
use rand::rngs::StdRng;

use super::{Event, Fault, MAX_LATENCY, Scenario, client_host};
use crate::cluster::{self, DATACENTERS, REPLICAS, SHARDS_PER_DATACENTER};
use crate::disk_faults::{DiskFault, DiskFaultTally, Fired};
use crate::ledger::COUNTERS;

impl Scenario {
    /// The faults of a run on `topology`, drawn from `rng`; the last one heals.
    pub(super) fn plan(self, rng: &mut StdRng, topology: &Topology) -> Vec<Event> {
        let ms = |rng: &mut StdRng, low: u64, high: u64| {
            Duration::from_millis(rng.random_range(low..=high))
        };
        let mut events = Vec::new();
        let mut at = ms(rng, 200, 800);
        match self {
            Scenario::Partition => {
                for _ in 0..rng.random_range(1..=2) {
                    let dc = pick(rng, &DATACENTERS);
                    let kind = rng.random_range(0..3);
                    // The whole datacenter cut off (every replica from every replica), or one
                    // replica of its aggregator from one global replica.
                    let pairs: Vec<(String, String)> = if rng.random_bool(0.5) {
                        let globals = cluster::global_hosts();
                        (cluster::aggregator_hosts(dc).into_iter())
                            .flat_map(|a| globals.iter().map(move |g| (a.clone(), g.clone())))
                            .collect()
                    } else {
                        let replica = |rng: &mut StdRng| rng.random_range(0..REPLICAS);
                        let aggregator = cluster::aggregator_host(dc, replica(rng));
                        vec![(aggregator, cluster::global_host(replica(rng)))]
                    };
                    let heal = at + ms(rng, 300, 1_500);
                    for (aggregator, global) in pairs {
                        let cut = match kind {
                            0 => Fault::Partition(aggregator.clone(), global.clone()),
                            1 => Fault::PartitionOneway(aggregator.clone(), global.clone()),
                            _ => Fault::PartitionOneway(global.clone(), aggregator.clone()),
                        };
                        events.push(Event { at, fault: cut });
                        events.push(Event {
                            at: heal,
                            fault: Fault::Repair(aggregator, global),
                        });
                    }
                    at = heal + ms(rng, 100, 600);
                }
                events.sort_by_key(|event| event.at);
            }
            Scenario::Crash => {
                for _ in 0..rng.random_range(1..=2) {
                    let dc = pick(rng, &DATACENTERS);
                    let shard = cluster::shard_host(dc, rng.random_range(0..SHARDS_PER_DATACENTER));
                    events.push(Event {
                        at,
                        fault: Fault::Crash(shard.clone()),
                    });
                    at += ms(rng, 50, 1_500);
                    events.push(Event {
                        at,
                        fault: Fault::Bounce(shard),
                    });
                    at += ms(rng, 100, 800);
                }
            }
            Scenario::Delay => {
                for _ in 0..rng.random_range(2..=4) {
                    let (a, b) = inter_tier_link(rng);
                    let (fault, heal, lasts) = match rng.random_range(0..4) {
                        0 => (
                            Fault::Latency(a.clone(), b.clone(), ms(rng, 100, 800)),
                            Fault::Latency(a, b, MAX_LATENCY),
                            ms(rng, 200, 1_500),
                        ),
                        1 => (
                            Fault::Hold(a.clone(), b.clone()),
                            Fault::Release(a, b),
                            ms(rng, 50, 1_000),
                        ),
                        2 => (
                            Fault::Partition(a.clone(), b.clone()),
                            Fault::Repair(a, b),
                            ms(rng, 20, 400),
                        ),
                        // A shard node's answers to its datacenter's client are lost: writes
                        // are applied but not acknowledged, and come back as keyed retries.
                        _ => {
                            let dc = pick(rng, &DATACENTERS);
                            let slot = rng.random_range(0..SHARDS_PER_DATACENTER);
                            let (shard, client) = (cluster::shard_host(dc, slot), client_host(dc));
                            (
                                Fault::PartitionOneway(shard.clone(), client.clone()),
                                Fault::Repair(shard, client),
                                ms(rng, 20, 400),
                            )
                        }
                    };
                    events.push(Event { at, fault });
                    events.push(Event {
                        at: at + lasts,
                        fault: heal,
                    });
                    at += ms(rng, 100, 600);
                }
                events.sort_by_key(|event| event.at);
            }
            Scenario::AggregatorCrash => {
                let mut aggregators: Vec<String> = DATACENTERS
                    .iter()
                    .flat_map(|dc| cluster::aggregator_hosts(dc))
                    .collect();
                aggregators.extend(cluster::global_hosts());
                // When each crashed aggregator is back: it crashes again only after that.
                let mut back_at: BTreeMap<String, Duration> = BTreeMap::new();
                for _ in 0..rng.random_range(1..=3) {
                    let host = aggregators[rng.random_range(0..aggregators.len())].clone();
                    let after_back = back_at.get(&host).map(|&back| back + ms(rng, 20, 300));
                    let crash = at.max(after_back.unwrap_or_default());
                    let back = crash + ms(rng, 50, 1_500);
                    events.push(Event {
                        at: crash,
                        fault: Fault::Crash(host.clone()),
                    });
                    events.push(Event {
                        at: back,
                        fault: Fault::Bounce(host.clone()),
                    });
                    back_at.insert(host, back);
                    // Often before the last one is back: crashes overlap.
                    at += ms(rng, 0, 700);
                }
                events.sort_by_key(|event| event.at);
            }
            Scenario::LostDisk | Scenario::LostDiskSync => {
                let dc = pick(rng, &DATACENTERS);
                let holding = slots_holding_counters(topology, dc);
                let slot = holding[rng.random_range(0..holding.len())];
                let lost = cluster::shard_host(dc, slot);
                let peer = cluster::shard_host(dc, (slot + 1) % SHARDS_PER_DATACENTER);
                // Crashed with it, and restarted before it: none, every replica of the
                // datacenter aggregator, or those and the peer (then only the global
                // aggregator's replicas, and the peer's disk, hold the slot whole).
                let with = match rng.random_range(0..3) {
                    0 => vec![],
                    1 => cluster::aggregator_hosts(dc),
                    _ => [cluster::aggregator_hosts(dc), vec![peer]].concat(),
                };
                let back = at + ms(rng, 100, 800);
                for host in with {
                    events.push(Event {
                        at,
                        fault: Fault::Crash(host.clone()),
                    });
                    events.push(Event {
                        at: at + ms(rng, 20, 100),
                        fault: Fault::Bounce(host),
                    });
                }
                events.push(Event {
                    at,
                    fault: Fault::Crash(lost.clone()),
                });
                events.push(Event {
                    at,
                    fault: Fault::LoseDisk(lost.clone()),
                });
                events.push(Event {
                    at: back,
                    fault: Fault::Bounce(lost),
                });
                events.sort_by_key(|event| event.at);
            }
            Scenario::Bounded => events = bounded(rng, at),
            Scenario::DiskFaults => {
                // A lost disk loses nothing acknowledged only in `replicated`.
                let corrupt = topology.shard.durability == Durability::Replicated;
                for _ in 0..rng.random_range(2..=3) {
                    let dc = pick(rng, &DATACENTERS);
                    let holding = slots_holding_counters(topology, dc);
                    let shard =
                        cluster::shard_host(dc, holding[rng.random_range(0..holding.len())]);
                    events.extend(disk_fault(rng, at, shard, corrupt));
                    at += ms(rng, 400, 1_000);
                }
                events.sort_by_key(|event| event.at);
            }
            Scenario::Lifecycle => {
                // A link between tiers, or between a datacenter's shard nodes, cut for a while.
                let (a, b) = inter_tier_link(rng);
                let cut = at + ms(rng, 0, 600);
                events.push(Event {
                    at: cut,
                    fault: Fault::Partition(a.clone(), b.clone()),
                });
                events.push(Event {
                    at: cut + ms(rng, 300, 1_200),
                    fault: Fault::Repair(a, b),
                });
                // A shard node crashes, or the one holding the counters loses its disk, and
                // restarts (restoring its slot, changes of counters' lives included).
                let dc = pick(rng, &DATACENTERS);
                let down = at + ms(rng, 0, 1_000);
                let (shard, lose) = if rng.random_bool(0.5) {
                    let slot = rng.random_range(0..SHARDS_PER_DATACENTER);
                    (cluster::shard_host(dc, slot), false)
                } else {
                    let holding = slots_holding_counters(topology, dc);
                    let slot = holding[rng.random_range(0..holding.len())];
                    (cluster::shard_host(dc, slot), true)
                };
                events.push(Event {
                    at: down,
                    fault: Fault::Crash(shard.clone()),
                });
                if lose {
                    events.push(Event {
                        at: down,
                        fault: Fault::LoseDisk(shard.clone()),
                    });
                }
                events.push(Event {
                    at: down + ms(rng, 50, 800),
                    fault: Fault::Bounce(shard),
                });
                // Sometimes an aggregator replica crashes too, losing the descriptions it held.
                if rng.random_bool(0.5) {
                    let mut aggregators = cluster::aggregator_hosts(pick(rng, &DATACENTERS));
                    aggregators.extend(cluster::global_hosts());
                    let host = aggregators[rng.random_range(0..aggregators.len())].clone();
                    let down = at + ms(rng, 0, 1_000);
                    events.push(Event {
                        at: down,
                        fault: Fault::Crash(host.clone()),
                    });
                    events.push(Event {
                        at: down + ms(rng, 50, 800),
                        fault: Fault::Bounce(host),
                    });
                }
                events.sort_by_key(|event| event.at);
            }
        }
        events
    }
}

/// A fault of `shard`'s disk at `at`: a failed fsync, a power cut in the middle of one, or, with
/// `corrupt`, a bit flipped in what it reads when the plan crashes and restarts it.
fn disk_fault(rng: &mut StdRng, at: Duration, shard: String, corrupt: bool) -> Vec<Event> {
    let ms =
        |rng: &mut StdRng, low: u64, high: u64| Duration::from_millis(rng.random_range(low..=high));
    let fault = match rng.random_range(0..if corrupt { 3 } else { 2 }) {
        0 => DiskFault::FailFsync {
            reached: rng.random_bool(0.5),
            restart_after: ms(rng, 100, 600),
        },
        1 => DiskFault::PowerCut {
            kept_permille: rng.random_range(0..1_000),
            down_for: ms(rng, 50, 800),
        },
        // The store is read a page at a time, the log a segment at a time.
        _ => {
            let store = rng.random_bool(0.5);
            DiskFault::CorruptRead {
                store,
                nth: rng.random_range(0..if store { 12 } else { 2 }),
                at_millionths: rng.random_range(0..1_000_000),
                bit: rng.random_range(0..8),
                restart_after: ms(rng, 50, 500),
            }
        }
    };
    let armed = Event {
        at,
        fault: Fault::Disk(shard.clone(), fault),
    };
    match fault {
        DiskFault::CorruptRead { .. } => vec![
            Event {
                at,
                fault: Fault::Crash(shard.clone()),
            },
            armed,
            Event {
                at: at + ms(rng, 50, 500),
                fault: Fault::Bounce(shard),
            },
        ],
        _ => vec![armed],
    }
}

/// How long a node's host stays down when the operator restarts it.
const RESTART_DOWN: Duration = Duration::from_millis(50);

/// The operator's answer to `fired` on `host` at `now`: the events to apply, each at its
/// instant. Counts it in `tally`.
pub(super) fn reaction(
    host: &str,
    (fired, fault): (Fired, DiskFault),
    now: Duration,
    tally: &mut DiskFaultTally,
) -> Vec<Event> {
    tally.count(fired, fault);
    let event = |at: Duration, fault: Fault| Event { at, fault };
    let host = host.to_owned();
    match (fired, fault) {
        (Fired::FsyncFailed, DiskFault::FailFsync { restart_after, .. }) => {
            let down = now + restart_after;
            vec![
                event(down, Fault::Crash(host.clone())),
                event(down + RESTART_DOWN, Fault::Bounce(host)),
            ]
        }
        (Fired::PowerCut, DiskFault::PowerCut { down_for, .. }) => vec![
            event(now, Fault::Crash(host.clone())),
            event(now + down_for, Fault::Bounce(host)),
        ],
        (Fired::RefusedToStart, DiskFault::CorruptRead { restart_after, .. }) => {
            let back = now + restart_after;
            vec![
                event(back, Fault::LoseDisk(host.clone())),
                event(back, Fault::Bounce(host)),
            ]
        }
        _ => Vec::new(),
    }
}

/// The faults of a bounded run, from `at`: two to four, each a cut between the datacenters, a
/// shard node's crash, a slow or held link between datacenters' shard nodes, a shard node's
/// answers to its client lost, or a fault of a shard node's disk (a failed fsync, or a power cut
/// in the middle of one); they may overlap.
fn bounded(rng: &mut StdRng, mut at: Duration) -> Vec<Event> {
    let ms =
        |rng: &mut StdRng, low: u64, high: u64| Duration::from_millis(rng.random_range(low..=high));
    let shards = |dc: &str| -> Vec<String> {
        (0..SHARDS_PER_DATACENTER)
            .map(|slot| cluster::shard_host(dc, slot))
            .collect()
    };
    let mut events = Vec::new();
    // When each crashed shard node is back: it crashes again only after that.
    let mut back_at: BTreeMap<String, Duration> = BTreeMap::new();
    for _ in 0..rng.random_range(2..=4) {
        let (near, far) = match rng.random_bool(0.5) {
            true => (DATACENTERS[0], DATACENTERS[1]),
            false => (DATACENTERS[1], DATACENTERS[0]),
        };
        match rng.random_range(0..5) {
            // The datacenters cut off from each other: every shard node of one from every one
            // of the other (rights cannot be asked for), and in half the seeds one's aggregator
            // from the global aggregator too; both ways, or one way.
            0 => {
                let mut pairs: Vec<(String, String)> = (shards(near).into_iter())
                    .flat_map(|a| shards(far).into_iter().map(move |b| (a.clone(), b)))
                    .collect();
                if rng.random_bool(0.5) {
                    let globals = cluster::global_hosts();
                    pairs.extend(
                        (cluster::aggregator_hosts(near).into_iter())
                            .flat_map(|a| globals.iter().map(move |g| (a.clone(), g.clone()))),
                    );
                }
                let kind = rng.random_range(0..3);
                let heal = at + ms(rng, 300, 1_500);
                for (a, b) in pairs {
                    let cut = match kind {
                        0 => Fault::Partition(a.clone(), b.clone()),
                        1 => Fault::PartitionOneway(a.clone(), b.clone()),
                        _ => Fault::PartitionOneway(b.clone(), a.clone()),
                    };
                    events.push(Event { at, fault: cut });
                    events.push(Event {
                        at: heal,
                        fault: Fault::Repair(a, b),
                    });
                }
            }
            1 => {
                let shard = cluster::shard_host(near, rng.random_range(0..SHARDS_PER_DATACENTER));
                let after_back = back_at.get(&shard).map(|&back| back + ms(rng, 20, 300));
                let crash = at.max(after_back.unwrap_or_default());
                let back = crash + ms(rng, 50, 1_500);
                events.push(Event {
                    at: crash,
                    fault: Fault::Crash(shard.clone()),
                });
                events.push(Event {
                    at: back,
                    fault: Fault::Bounce(shard.clone()),
                });
                back_at.insert(shard, back);
            }
            2 => {
                let pick = |rng: &mut StdRng, dc| {
                    cluster::shard_host(dc, rng.random_range(0..SHARDS_PER_DATACENTER))
                };
                let (a, b) = (pick(rng, near), pick(rng, far));
                let (fault, heal, lasts) = match rng.random_bool(0.5) {
                    true => (
                        Fault::Latency(a.clone(), b.clone(), ms(rng, 100, 800)),
                        Fault::Latency(a, b, MAX_LATENCY),
                        ms(rng, 200, 1_500),
                    ),
                    false => (
                        Fault::Hold(a.clone(), b.clone()),
                        Fault::Release(a, b),
                        ms(rng, 50, 1_000),
                    ),
                };
                events.push(Event { at, fault });
                events.push(Event {
                    at: at + lasts,
                    fault: heal,
                });
            }
            3 => {
                let shard = cluster::shard_host(near, rng.random_range(0..SHARDS_PER_DATACENTER));
                events.extend(disk_fault(rng, at, shard, false));
            }
            // A shard node's answers to its datacenter's client lost: writes applied (rights
            // spent) but not acknowledged, then retried with their key.
            _ => {
                let slot = rng.random_range(0..SHARDS_PER_DATACENTER);
                let (shard, client) = (cluster::shard_host(near, slot), client_host(near));
                events.push(Event {
                    at,
                    fault: Fault::PartitionOneway(shard.clone(), client.clone()),
                });
                events.push(Event {
                    at: at + ms(rng, 20, 400),
                    fault: Fault::Repair(shard, client),
                });
            }
        }
        at += ms(rng, 100, 600);
    }
    events.sort_by_key(|event| event.at);
    events
}

/// The faults of a lifecycle run while the clients write again after the counters' last
/// changes, each at a time since every slot learned of them: a shard node holding the counters
/// crashes, or loses its disk, and restarts; it must come back counting in the generation of
/// those changes, with every write acknowledged in it.
pub(super) fn after_last_changes(rng: &mut StdRng, topology: &Topology) -> Vec<Event> {
    let ms =
        |rng: &mut StdRng, low: u64, high: u64| Duration::from_millis(rng.random_range(low..=high));
    let dc = pick(rng, &DATACENTERS);
    let holding = slots_holding_counters(topology, dc);
    let shard = cluster::shard_host(dc, holding[rng.random_range(0..holding.len())]);
    let down = ms(rng, 0, 300);
    let mut events = vec![Event {
        at: down,
        fault: Fault::Crash(shard.clone()),
    }];
    if rng.random_bool(0.5) {
        events.push(Event {
            at: down,
            fault: Fault::LoseDisk(shard.clone()),
        });
    }
    events.push(Event {
        at: down + ms(rng, 50, 500),
        fault: Fault::Bounce(shard),
    });
    events
}

/// The slots of datacenter `dc` that take keyed writes of [`COUNTERS`] (with the default
/// placement, each datacenter's three counters all land on one of its two slots: losing the
/// other would restore nothing).
fn slots_holding_counters(topology: &Topology, dc: &str) -> Vec<usize> {
    let datacenter = topology
        .datacenters
        .iter()
        .find(|d| d.name == dc)
        .expect("a datacenter of the topology");
    let placement = datacenter.placement(topology.shard.virtual_nodes);
    let shards = topology.shard.default_number_of_shards;
    let mut slots: Vec<usize> = COUNTERS
        .iter()
        .flat_map(|counter| placement.slots_for(counter, shards))
        .map(|slot| slot as usize)
        .collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from[rng.random_range(0..from.len())]
}

/// A link between two tiers, or between two shard nodes of a datacenter (writes are forwarded
/// there): the hosts at its ends.
fn inter_tier_link(rng: &mut StdRng) -> (String, String) {
    let dc = pick(rng, &DATACENTERS);
    let shard =
        |rng: &mut StdRng| cluster::shard_host(dc, rng.random_range(0..SHARDS_PER_DATACENTER));
    let replica = |rng: &mut StdRng| rng.random_range(0..REPLICAS);
    match rng.random_range(0..3) {
        0 => (
            cluster::aggregator_host(dc, replica(rng)),
            cluster::global_host(replica(rng)),
        ),
        1 => (shard(rng), cluster::aggregator_host(dc, replica(rng))),
        _ => (cluster::shard_host(dc, 0), cluster::shard_host(dc, 1)),
    }
}
