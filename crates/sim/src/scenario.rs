//! The scenarios: a fault plan drawn from the seed, the run that applies it to a simulated
//! cluster under load, and the invariants every run must keep.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use geocount_model::{Durability, Topology};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use turmoil::{Builder, Sim};

use crate::cluster::{self, DATACENTERS, SHARDS_PER_DATACENTER, ShardDisk};
use crate::disk_faults::{DiskFault, DiskFaultTally};
use crate::ledger::{BOUNDED, COUNTERS, Changed, Ledger, Left, Lost, MayLose, Quiet, SharedLedger};
use crate::workload::{self, Writing};
use crate::{bounded, lifecycle};

mod plan;

/// Writes per datacenter in every run.
const WRITES_PER_DATACENTER: usize = 40;
/// Writes per datacenter in a lifecycle run while its faults go on, and after the last changes.
const LIFECYCLE_WRITES: usize = 30;
const LIFECYCLE_WRITES_AGAIN: usize = 8;
/// The longest pause between two writes of a client.
const MAX_WRITE_GAP: Duration = Duration::from_millis(80);
/// One-way latency of every link outside faults: uniform in 1..=10 ms per message, so
/// messages on different connections overtake each other.
const MIN_LATENCY: Duration = Duration::from_millis(1);
const MAX_LATENCY: Duration = Duration::from_millis(10);
/// How far apart the hosts' clocks may be.
const MAX_CLOCK_SKEW_MS: u64 = 200;
/// Simulated time each step of the simulation moves every host on: 2 ms keeps the links'
/// 1-10 ms latencies distinct and costs half as many steps (which dominate a run's CPU time)
/// as turmoil's default of 1 ms.
const TICK: Duration = Duration::from_millis(2);
/// Simulated time a run may take before turmoil stops it.
const SIMULATION_LIMIT: Duration = Duration::from_secs(60);

/// `shard.idempotency_retention_secs` when a disk is lost: short enough for the refusal of new
/// keys after a restore without them to end within the run, long enough for the writers to
/// retry every acknowledged write within it.
const LOST_KEYS_RETENTION_SECS: u64 = 5;

/// What the writers' clocks and links add to the pulls' intervals in [`loss_window`]: pulls
/// start at their interval's ticks give or take a simulation step, and a write's answer may
/// reach its client after the loss (counted from when it was sent).
const LOSS_WINDOW_MARGIN: Duration = Duration::from_millis(30);

/// What goes wrong in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// A datacenter is cut off from the global aggregator (every replica of its aggregator from
    /// every global replica), or one replica from one replica, both ways or one way, then
    /// healed; once or twice.
    Partition,
    /// A shard node crashes (unsynced writes to its disk are lost) and restarts, once or
    /// twice, while clients write and retry.
    Crash,
    /// Latency spikes on links between tiers, messages held then released at once (delay and
    /// reordering), short partitions that drop messages between tiers and between shard nodes,
    /// and a shard node's answers to clients dropped (applied writes retried with their key).
    Delay,
    /// Datacenter aggregators and the global aggregator crash (losing everything they held:
    /// they keep nothing on disk) and restart, pulling everything again; one to three times,
    /// overlapping, while clients write.
    AggregatorCrash,
    /// In the middle of the load a shard node of a `replicated` datacenter crashes and restarts
    /// on an empty disk (its data directory gone), and restores its slot from the copies its
    /// peer and the aggregators hold and from its peer's log of its replicated writes, refusing
    /// writes meanwhile. In some seeds every replica of its datacenter aggregator, or those and
    /// its peer, crash with it and restart before it, so that only the global aggregator's
    /// replicas (each holding one partition) and the peer's log hold the slot whole. The writers
    /// keep writing throughout, then retry every acknowledged write with its key: nothing
    /// acknowledged is lost, nothing is counted twice.
    LostDisk,
    /// [`Scenario::LostDisk`] in `sync` durability: the lost disk may lose acknowledged writes
    /// no other process had pulled yet (docs/architecture.md, "Replicas and restore"), and
    /// only those: each counter's part may lack only its last writes acknowledged within
    /// [`loss_window`] before the loss.
    LostDiskSync,
    /// Counters reset, deleted and expiring (`PATCH` with a short `ttlSeconds`, and writes
    /// carrying one) at shard nodes of either datacenter while clients write, a shard node
    /// crashes or loses its disk (`replicated` durability), and tiers are partitioned; then, the
    /// faults healed, each counter's last change (a reset, a delete or an expiry), and writes
    /// again once every slot has learned of it ([`crate::lifecycle`]), while a shard node
    /// holding the counters crashes or loses its disk once more. The rule every tier
    /// reads by: a reset or delete wipes, in each slot, the writes it applied before it learned
    /// of it and none after; an expiry is a delete at its time, by each tier's clock. So at the
    /// end every tier agrees on which counters exist, a counter last deleted or expired and not
    /// written again reads 404 everywhere, and every other's value is exactly the sum of the
    /// writes acknowledged after every slot learned of its last change: none of those lost.
    Lifecycle,
    /// Bounded counters ([`crate::ledger::BOUNDED`]) created before the writers start, and
    /// half the writes going to them from every datacenter, while the datacenters are cut off
    /// from each other (their shard nodes, which ask each other for rights, and in some seeds
    /// their aggregators from the global aggregator), both ways or one way, shard nodes crash
    /// and restart, links between datacenters' shard nodes slow down or hold their messages, and
    /// a shard node's answers to its client are lost: two to four of these. Writes refused 409
    /// past a bound count as refused, not lost. While the run goes on, the values the slots hold
    /// never sum outside the bounds and no tier reads a total outside them
    /// ([`crate::bounded`]); at the end every tier shows exactly the acknowledged totals. Odd
    /// seeds run in `replicated` durability, even ones in the default.
    Bounded,
    /// Disk faults on the shard nodes holding the counters while clients write: two or three
    /// of a failed fsync (the node fences itself, and is restarted), a power cut in the middle
    /// of an fsync (the torn record is cut off at the restart) and, in `replicated` durability
    /// (odd seeds), a bit flipped in what a restarting node reads (it refuses to start, and is
    /// started again on an empty disk, restoring its slot) ([`crate::disk_faults`]). Even
    /// seeds run in `sync` durability, where a failed fsync acknowledges nothing. Nothing
    /// acknowledged is lost, nothing is counted twice.
    DiskFaults,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scenario::Partition => "partition",
            Scenario::Crash => "crash",
            Scenario::Delay => "delay",
            Scenario::AggregatorCrash => "aggregator_crash",
            Scenario::LostDisk => "lost_disk",
            Scenario::LostDiskSync => "lost_disk_sync",
            Scenario::Lifecycle => "lifecycle",
            Scenario::Bounded => "bounded",
            Scenario::DiskFaults => "disk_faults",
        })
    }
}

/// One change to the simulated world, between two hosts or of one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Drop every message between the two hosts.
    Partition(String, String),
    /// Drop every message from the first host to the second.
    PartitionOneway(String, String),
    /// Deliver messages between the two hosts again (both ways).
    Repair(String, String),
    /// Keep every message between the two hosts in flight.
    Hold(String, String),
    /// Deliver the held messages, and new ones, again.
    Release(String, String),
    /// Every message between the two hosts takes exactly this long.
    Latency(String, String, Duration),
    /// Stop the host at once: what it had not synced to its disk is lost.
    Crash(String),
    /// Start the host's software again.
    Bounce(String),
    /// The host's disk is lost: its next start finds its data directory gone.
    LoseDisk(String),
    /// A fault of the host's disk is armed: it fires at the next call it applies to.
    Disk(String, DiskFault),
}

/// A fault at a simulated instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When, since the start of the run.
    pub at: Duration,
    /// What.
    pub fault: Fault,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms {:?}", self.at.as_millis(), self.fault)
    }
}

/// What a run did and saw: equal for two runs of the same scenario and seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The scenario.
    pub scenario: Scenario,
    /// The seed.
    pub seed: u64,
    /// The faults applied, in order, each at the instant it was applied.
    pub events: Vec<Event>,
    /// Writes acknowledged.
    pub acknowledged: usize,
    /// Writes given up unacknowledged once their key's retention was nearly over.
    pub unknown: usize,
    /// Acknowledged writes sent again with their key (each answered 200, changing nothing).
    pub retried: usize,
    /// Writes to bounded counters refused 409 past a bound.
    pub refused: usize,
    /// Consistent readings of every slot of a bounded counter whose sum was checked against
    /// its bounds during the run, and readings torn by a write (not checked).
    pub snapshots: (u64, u64),
    /// Reads of a bounded counter's total at some tier checked against its bounds.
    pub bounded_reads: u64,
    /// The rights the slots of the bounded counters had received from each other in all, at
    /// the last consistent reading.
    pub rights_received: u64,
    /// Acknowledged writes missing from the totals the tiers agreed on (only a `sync` disk loss
    /// may lose any).
    pub lost: Lost,
    /// Requests the writers sent (retries included).
    pub requests: u64,
    /// Of those, refused because their slot's node was restoring its lost slot.
    pub restoring_refusals: u64,
    /// Of those, refused because their slot was restored without a whole copy of its keys.
    pub keys_unknown_refusals: u64,
    /// Of those, refused by a node fenced after a failed fsync.
    pub fenced_refusals: u64,
    /// The disk faults armed, and what came of them.
    pub disk_faults: DiskFaultTally,
    /// The changes of counters' lives made (`Scenario::Lifecycle`), in order.
    pub changes: Vec<Changed>,
    /// What the last change of each counter's life left of it.
    pub left: BTreeMap<&'static str, Left>,
    /// The counters written again after their last changes, and since when writes counted.
    pub quiet: Option<Quiet>,
    /// The world's total of each counter: the sum of its acknowledged deltas.
    pub totals: BTreeMap<&'static str, i64>,
    /// When the observer started: the later of the last heal and the last acknowledgement.
    pub settled_at: Duration,
    /// How long after that every tier showed the exact totals.
    pub convergence: Duration,
    /// The bound that must hold: see [`cluster::staleness_bound`]; when a disk is lost
    /// also `restore_timeout_ms`, which the restore waits for sources that have not handed
    /// over a complete copy; with bounded counters also `world_refresh_ms` and a round trip,
    /// in which every shard node's world read fetches the other datacenters' parts again.
    pub bound: Duration,
    /// Simulated time the whole run took.
    pub elapsed: Duration,
}

/// A broken invariant, or a run that could not finish.
#[derive(Debug, thiserror::Error)]
#[error("{scenario} seed {seed}: {reason}")]
pub struct Violation {
    /// The scenario.
    pub scenario: Scenario,
    /// The seed that reproduces it.
    pub seed: u64,
    /// What went wrong.
    pub reason: String,
}

/// The host name of datacenter `dc`'s writing client.
fn client_host(dc: &str) -> String {
    format!("client-{dc}")
}

/// The counters whose keyed writes shard node `host` takes, with its datacenter's index.
fn counters_of(topology: &Topology, host: &str) -> (usize, Vec<&'static str>) {
    for (d, dc) in DATACENTERS.iter().enumerate() {
        for slot in 0..SHARDS_PER_DATACENTER {
            if cluster::shard_host(dc, slot) != host {
                continue;
            }
            let datacenter = topology
                .datacenter(dc)
                .expect("a datacenter of the topology");
            let placement = datacenter.placement(topology.shard.virtual_nodes);
            let shards = topology.shard.default_number_of_shards;
            let counters = (COUNTERS.iter().copied())
                .filter(|c| placement.slots_for(c, shards).contains(&(slot as u32)))
                .collect();
            return (d, counters);
        }
    }
    panic!("{host} is no shard node of the cluster")
}

/// How long before a disk loss, in `sync` durability, a write may have been acknowledged and
/// still be lost with it: until the datacenter aggregator pulled it (a pull starts every
/// `shard_to_datacenter_ms`) and the global aggregator pulled that (every
/// `datacenter_to_global_ms`), each pull a round trip at the highest latency, since the
/// datacenter aggregator may be lost with the disk; the peer pulls within the second
/// interval too.
pub fn loss_window(topology: &Topology) -> Duration {
    let sync = &topology.sync;
    Duration::from_millis(sync.shard_to_datacenter_ms + sync.datacenter_to_global_ms)
        + MAX_LATENCY * 4
        + LOSS_WINDOW_MARGIN
}

fn apply(sim: &mut Sim<'_>, disks: &BTreeMap<String, ShardDisk>, fault: &Fault) {
    match fault {
        Fault::Partition(a, b) => sim.partition(a.as_str(), b.as_str()),
        Fault::PartitionOneway(a, b) => sim.partition_oneway(a.as_str(), b.as_str()),
        Fault::Repair(a, b) => sim.repair(a.as_str(), b.as_str()),
        Fault::Hold(a, b) => sim.hold(a.as_str(), b.as_str()),
        Fault::Release(a, b) => sim.release(a.as_str(), b.as_str()),
        Fault::Latency(a, b, latency) => sim.set_link_latency(a.as_str(), b.as_str(), *latency),
        Fault::Crash(host) => sim.crash(host.as_str()),
        Fault::Bounce(host) => sim.bounce(host.as_str()),
        Fault::LoseDisk(host) => disks[host].loss.lose(),
        Fault::Disk(host, fault) => disks[host].faults.arm(*fault, sim.elapsed()),
    }
}

/// Runs `scenario` with `seed`: the same seed gives the same run, fault for fault and byte for
/// byte. Checks the invariants: every write is acknowledged (or, after a lost disk, retried
/// until its key's retention was nearly over: its outcome unknown), none with a protocol
/// error, every acknowledged write retried with its key answered 200; and within the staleness
/// bound of the last heal (and the last answer) every tier agrees on each counter's part in
/// each datacenter (the shard nodes' own slots, every replica of the datacenter aggregator
/// holding it, every global replica holding it, fresh), and that part is exactly the sum of
/// the deltas acknowledged there, plus those of any outcome-unknown writes, less, after a
/// `sync` disk loss only, the counter's last writes acknowledged within [`loss_window`] before
/// it: nothing else acknowledged was lost, and nothing (retried or replayed) was counted twice.
/// After a `replicated` disk loss, no write is refused for keys the restore could not find.
/// In [`Scenario::Lifecycle`] only the writes after the counters' last lifecycle changes count,
/// and every tier must show a counter last deleted or expired, and not written again, as gone
/// (404), every other as existing ([`crate::ledger::Ledger::existence`]).
pub fn run(scenario: Scenario, seed: u64) -> Result<Report, Violation> {
    let violation = |reason: String| Violation {
        scenario,
        seed,
        reason,
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sim = Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH)
        .simulation_duration(SIMULATION_LIMIT)
        .min_message_latency(MIN_LATENCY)
        .max_message_latency(MAX_LATENCY)
        .tick_duration(TICK)
        .build();
    let mut topology = cluster::topology(&sim);
    let lifecycle = scenario == Scenario::Lifecycle;
    // A corrupt read is answered as a lost disk.
    let corrupts = scenario == Scenario::DiskFaults && seed % 2 == 1;
    let loses_disk =
        matches!(scenario, Scenario::LostDisk | Scenario::LostDiskSync) || lifecycle || corrupts;
    if loses_disk {
        // A slot restored without a whole copy of its keys refuses new keys for the
        // retention: short here, so the writers get through within the run.
        topology.shard.idempotency_retention_secs = LOST_KEYS_RETENTION_SECS;
    }
    // A lost disk loses nothing acknowledged, neither writes nor changes of counters' lives.
    if matches!(scenario, Scenario::LostDisk | Scenario::Lifecycle) || corrupts {
        topology.shard.durability = Durability::Replicated;
    }
    // Bounded counters' rights in both: odd seeds replicate every gift and receipt to the peer.
    if scenario == Scenario::Bounded && seed % 2 == 1 {
        topology.shard.durability = Durability::Replicated;
    }
    let events = scenario.plan(&mut rng, &topology);
    // Timed from when every slot learned of the counters' last changes.
    let after_last_changes = match lifecycle {
        true => plan::after_last_changes(&mut rng, &topology),
        false => Vec::new(),
    };
    let mut bound =
        cluster::staleness_bound(&topology.sync, MAX_LATENCY) + workload::OBSERVE_EVERY * 2;
    if loses_disk {
        bound += Duration::from_millis(topology.shard.restore_timeout_ms);
    }
    // A shard node's world read of a bounded counter adds the other datacenters' parts as it
    // last fetched them from the global aggregator: at most `world_refresh_ms` ago.
    if scenario == Scenario::Bounded {
        bound += Duration::from_millis(topology.shard.world_refresh_ms) + MAX_LATENCY * 2;
    }
    let disks = cluster::register_hosts(&mut sim, &topology, &mut rng, MAX_CLOCK_SKEW_MS);

    let ledger: SharedLedger = Rc::new(RefCell::new(Ledger::default()));
    let bounds = scenario == Scenario::Bounded;
    ledger.borrow_mut().bounded = bounds;
    let (writes, again) = match lifecycle {
        true => (LIFECYCLE_WRITES, LIFECYCLE_WRITES_AGAIN),
        false => (WRITES_PER_DATACENTER, 0),
    };
    let writing = Writing {
        writes,
        max_gap: MAX_WRITE_GAP,
        retention: Duration::from_secs(topology.shard.idempotency_retention_secs),
        retry_acknowledged: (loses_disk && !lifecycle) || scenario == Scenario::DiskFaults,
        again,
        bounded: bounds,
    };
    for (datacenter, name) in DATACENTERS.iter().enumerate() {
        let client_seed = rng.random();
        let ledger = ledger.clone();
        sim.client(
            client_host(name),
            workload::writer(datacenter, writing, client_seed, ledger),
        );
    }
    if lifecycle {
        let plan = lifecycle::Plan::draw(&mut rng);
        let skew = Duration::from_millis(MAX_CLOCK_SKEW_MS);
        let admin = lifecycle::admin(plan, DATACENTERS.len(), skew, ledger.clone());
        sim.client("admin", admin);
    }
    if bounds {
        sim.client("creator", bounded::create(ledger.clone()));
        for (i, counter) in BOUNDED.iter().enumerate() {
            sim.client(
                format!("watch-{i}"),
                bounded::watch(counter, ledger.clone()),
            );
        }
    }
    sim.client(
        "observer",
        workload::observer(DATACENTERS.len(), bound * 3, ledger.clone()),
    );

    let mut pending = events.iter().peekable();
    let mut later = after_last_changes.iter().peekable();
    let mut applied = Vec::with_capacity(events.len() + after_last_changes.len());
    // The operator's answers to disk faults that fired, by instant.
    let mut reactions: Vec<Event> = Vec::new();
    let mut disk_faults = DiskFaultTally::default();
    let healed = |ledger: &SharedLedger, at, later_too: bool| {
        let mut ledger = ledger.borrow_mut();
        ledger.first_healed_at.get_or_insert(at);
        if later_too {
            ledger.healed_at = Some(at);
        }
    };
    // Whether something happened since the last heal was noted.
    let mut unhealed = true;
    loop {
        loop {
            let now = sim.elapsed();
            let since = ledger.borrow().quiet.as_ref().map(|quiet| quiet.since);
            let reaction = match reactions.first() {
                Some(first) if first.at <= now => Some(reactions.remove(0)),
                _ => None,
            };
            let Some(event) = reaction
                .or_else(|| pending.next_if(|event| event.at <= now).cloned())
                .or_else(|| {
                    let due = |event: &&Event| since.is_some_and(|since| since + event.at <= now);
                    later.next_if(due).cloned()
                })
            else {
                break;
            };
            apply(&mut sim, &disks, &event.fault);
            if let Fault::LoseDisk(host) = &event.fault
                && scenario == Scenario::LostDiskSync
            {
                let (datacenter, counters) = counters_of(&topology, host);
                ledger.borrow_mut().may_lose = Some(MayLose {
                    datacenter,
                    counters,
                    at: sim.elapsed(),
                    window: loss_window(&topology),
                });
            }
            if let Fault::Disk(..) = &event.fault {
                disk_faults.armed += 1;
            }
            applied.push(Event {
                at: sim.elapsed(),
                fault: event.fault,
            });
            unhealed = true;
        }
        let now = sim.elapsed();
        let mut armed = false;
        for disk in disks.values() {
            armed |= disk.faults.outstanding(now, &mut disk_faults);
        }
        if unhealed && !armed && pending.peek().is_none() && reactions.is_empty() {
            healed(&ledger, now, later.peek().is_none());
            unhealed = false;
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(error) => {
                let applied: Vec<String> = applied.iter().map(Event::to_string).collect();
                return Err(violation(format!(
                    "the simulation failed at {} ms: {error}; faults applied: [{}]",
                    now.as_millis(),
                    applied.join(", ")
                )));
            }
        }
        let now = sim.elapsed();
        for (host, disk) in &disks {
            for fired in disk.faults.take_fired() {
                reactions.extend(plan::reaction(host, fired, now, &mut disk_faults));
                unhealed = true;
            }
        }
        reactions.sort_by_key(|event| event.at);
    }

    let ledger = ledger.borrow();
    if let Some(error) = ledger.protocol_errors.first() {
        return Err(violation(format!("a write was refused: {error}")));
    }
    if let Some(error) = &ledger.lifecycle_error {
        return Err(violation(error.clone()));
    }
    // In `replicated`, no copy shows a write before a peer's log holds it with its key: the
    // restore vouches for every key, and refuses none.
    if (scenario == Scenario::LostDisk || corrupts) && ledger.keys_unknown_refusals > 0 {
        return Err(violation(format!(
            "{} writes refused by a slot restored without its keys",
            ledger.keys_unknown_refusals
        )));
    }
    if disk_faults.unnoticed_log_reads > 0 {
        return Err(violation(format!(
            "{} nodes started on a log segment read with a bit flipped",
            disk_faults.unnoticed_log_reads
        )));
    }
    if let Some(broken) = ledger.bound_violations.first() {
        let more = ledger.bound_violations.len() - 1;
        return Err(violation(format!("{broken} (and {more} more)")));
    }
    if bounds && (ledger.snapshots == 0 || ledger.bounded_reads == 0) {
        return Err(violation(format!(
            "the bounds were checked on {} readings of the slots and {} reads of totals",
            ledger.snapshots, ledger.bounded_reads
        )));
    }
    let totals = ledger.expected(None);
    for counter in BOUNDED.iter().filter(|_| bounds) {
        if !counter.contains(totals[counter.id]) {
            return Err(violation(format!(
                "the writes acknowledged to {} sum to {}, outside {}",
                counter.id,
                totals[counter.id],
                counter.range()
            )));
        }
    }
    let written = (writes + again) * DATACENTERS.len();
    let answered = ledger.acks.len() + ledger.unknown.len() + ledger.refused.len();
    if answered != written {
        return Err(violation(format!(
            "{answered} of {written} writes acknowledged or given up"
        )));
    }
    let settled_at = ledger.settled_at.expect("the observer ran");
    let Some(converged_at) = ledger.converged_at else {
        return Err(violation(format!(
            "the tiers never agreed on the allowed totals ({} ms after settling); last seen: {}",
            (bound * 3).as_millis(),
            ledger.last_mismatch.as_deref().unwrap_or("nothing")
        )));
    };
    let convergence = converged_at - settled_at;
    if convergence > bound {
        return Err(violation(format!(
            "converged {} ms after settling, over the bound of {} ms",
            convergence.as_millis(),
            bound.as_millis()
        )));
    }
    let writes = ledger.acks.iter().chain(&ledger.unknown);
    Ok(Report {
        scenario,
        seed,
        events: applied,
        acknowledged: ledger.acks.len(),
        unknown: ledger.unknown.len(),
        retried: ledger.retried,
        refused: ledger.refused.len(),
        snapshots: (ledger.snapshots, ledger.torn_snapshots),
        bounded_reads: ledger.bounded_reads,
        rights_received: ledger.rights_received.values().sum(),
        lost: ledger.lost(),
        requests: writes.map(|w| u64::from(w.attempts)).sum(),
        restoring_refusals: ledger.restoring_refusals,
        keys_unknown_refusals: ledger.keys_unknown_refusals,
        fenced_refusals: ledger.fenced_refusals,
        disk_faults,
        changes: ledger.changes.clone(),
        left: ledger.left.clone(),
        quiet: ledger.quiet.clone(),
        totals,
        settled_at,
        convergence,
        bound,
        elapsed: sim.elapsed(),
    })
}
