//! The deterministic simulation suite: each scenario over many seeds, every run checking the
//! invariants (see `geocount_sim::run`).
//!
//! The runs are ignored in a plain `cargo test`: unoptimized they take minutes, so
//! `scripts/test.sh` runs them in the `sim` profile (opt-level 1, debug assertions on):
//! `cargo test --profile sim -p geocount-sim -- --include-ignored`.
//! `GEOCOUNT_SIM_SEEDS=N` runs seeds `0..N` of each scenario (default 50);
//! `GEOCOUNT_SIM_SEED=S` runs only seed `S`, e.g. to replay a failure:
//! `GEOCOUNT_SIM_SEED=17 cargo test --profile sim -p geocount-sim --test simulation crash -- --include-ignored --nocapture`.

use std::time::Duration;

use geocount_sim::disk_faults::DiskFaultTally;
use geocount_sim::{Report, Scenario, run};

/// Seeds per scenario unless `GEOCOUNT_SIM_SEEDS` says otherwise.
const DEFAULT_SEEDS: u64 = 50;

fn seeds() -> Vec<u64> {
    let number = |name: &str| {
        std::env::var(name).ok().map(|v| {
            v.parse::<u64>()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
    };
    match number("GEOCOUNT_SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..number("GEOCOUNT_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS)).collect(),
    }
}

/// Runs every seed of `scenario`, and fails naming each failing seed and how to replay it.
fn check(scenario: Scenario) {
    let mut failures = Vec::new();
    let mut slowest = std::time::Duration::ZERO;
    let mut retries = 0;
    let mut restoring = 0;
    let (mut keys_unknown, mut keys_unknown_seeds) = (0, 0);
    let (mut unknown, mut retried, mut lost, mut losing_seeds) = (0, 0, 0, 0);
    let mut oldest_lost = std::time::Duration::ZERO;
    let (mut refused, mut snapshots, mut torn, mut bounded_reads) = (0, 0, 0, 0);
    let mut rights_received = 0;
    let mut fenced = 0;
    let mut disk = DiskFaultTally::default();
    let seeds = seeds();
    for &seed in &seeds {
        let outcome = std::panic::catch_unwind(|| run(scenario, seed));
        match outcome {
            Ok(Ok(report)) => {
                slowest = slowest.max(report.convergence);
                retries += report.requests - (report.acknowledged + report.unknown) as u64;
                restoring += report.restoring_refusals;
                keys_unknown += report.keys_unknown_refusals;
                keys_unknown_seeds += usize::from(report.keys_unknown_refusals > 0);
                unknown += report.unknown;
                retried += report.retried;
                lost += report.lost.writes;
                losing_seeds += usize::from(report.lost.writes > 0);
                oldest_lost = oldest_lost.max(report.lost.oldest);
                refused += report.refused;
                snapshots += report.snapshots.0;
                torn += report.snapshots.1;
                bounded_reads += report.bounded_reads;
                rights_received += report.rights_received;
                fenced += report.fenced_refusals;
                disk.add(&report.disk_faults);
                if seeds.len() == 1 {
                    println!("{report:#?}");
                }
            }
            Ok(Err(violation)) => failures.push(violation.to_string()),
            Err(_) => failures.push(format!("{scenario} seed {seed}: panicked (above)")),
        }
    }
    println!(
        "{scenario}: {} seeds, {} failed; {retries} retried requests ({restoring} refused by a restoring node, {keys_unknown} in {keys_unknown_seeds} seeds by a slot restored without its keys); {unknown} writes of unknown outcome; {retried} acknowledged writes retried; {lost} acknowledged writes lost (in {losing_seeds} seeds, the oldest acknowledged {} ms before the loss); slowest convergence {} ms",
        seeds.len(),
        failures.len(),
        oldest_lost.as_millis(),
        slowest.as_millis()
    );
    if snapshots + bounded_reads > 0 {
        println!(
            "{scenario}: {refused} writes refused past a bound; bounds and rights checked on {snapshots} readings of every slot ({torn} more torn or missing a node) and {bounded_reads} reads of totals; {rights_received} rights received from other slots in all"
        );
    }
    if disk.armed > 0 {
        println!(
            "{scenario}: {} disk faults armed ({} withdrawn unfired): {} failed fsyncs ({fenced} writes refused by a fenced node), {} power cuts mid-fsync, {} corrupt reads ({} refused starts, each then started on an empty disk; {} unnoticed)",
            disk.armed,
            disk.withdrawn,
            disk.fsync_failures,
            disk.power_cuts,
            disk.corrupt_reads,
            disk.refused_starts,
            disk.corrupt_reads - disk.refused_starts
        );
    }
    assert!(
        failures.is_empty(),
        "{}\nreplay one with GEOCOUNT_SIM_SEED=<seed> cargo test --profile sim -p geocount-sim --test simulation {scenario} -- --include-ignored --nocapture",
        failures.join("\n")
    );
}

/// One test per scenario (they run in parallel, and each can be run alone by its name), and
/// [`ALL`] of them.
macro_rules! scenarios {
    ($($test:ident: $scenario:ident),* $(,)?) => {
        $(
            #[test]
            #[ignore = "minutes unoptimized: run in the sim profile (scripts/test.sh)"]
            fn $test() {
                check(Scenario::$scenario);
            }
        )*
        const ALL: &[Scenario] = &[$(Scenario::$scenario),*];
    };
}

scenarios! {
    partition: Partition,
    crash: Crash,
    delay: Delay,
    aggregator_crash: AggregatorCrash,
    lost_disk: LostDisk,
    lost_disk_sync: LostDiskSync,
    lifecycle: Lifecycle,
    bounded: Bounded,
    disk_faults: DiskFaults,
}

/// The same seed twice gives the same run: the same faults at the same instants, the same
/// number of requests, the same acknowledgements and the same convergence time. The instant
/// the last client host ends, after every check has read the tiers, is left out: it can differ
/// by a few milliseconds between two runs in one process (docs/testing.md, "Reproducing").
#[test]
#[ignore = "minutes unoptimized: run in the sim profile (scripts/test.sh)"]
fn a_seed_replays_exactly() {
    let mut differ = Vec::new();
    for &scenario in ALL {
        let first = run(scenario, 7).expect("seed 7 passes");
        let second = run(scenario, 7).expect("seed 7 passes");
        let ended = Duration::ZERO;
        let (first, second) = (
            Report {
                elapsed: ended,
                ..first
            },
            Report {
                elapsed: ended,
                ..second
            },
        );
        if first != second {
            differ.push(format!("{scenario}: {first:?}\n  against {second:?}"));
        }
    }
    assert!(
        differ.is_empty(),
        "two runs of seed 7 differ:\n{}",
        differ.join("\n")
    );
}
