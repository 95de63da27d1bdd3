//! `geoctl [--config FILE] get|history|sum|create|incr|delete|reset|expire|lag|load|storm ...`: parses flags and calls the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::RangedU64ValueParser;
use clap::{Parser, Subcommand, ValueEnum};
use geoctl::Command;
use geoctl::cmd::create::CreateOptions;
use geoctl::cmd::get::GetOptions;
use geoctl::cmd::history::HistoryOptions;
use geoctl::cmd::incr::IncrOptions;
use geoctl::cmd::lag::{DEFAULT_CONCURRENCY, DEFAULT_SAMPLES, LagOptions};
use geoctl::cmd::lifecycle::{LifeChange, LifecycleOptions};
use geoctl::cmd::load::{
    DEFAULT_BATCH_SIZE, DEFAULT_CONCURRENCY as DEFAULT_LOAD_CONCURRENCY, DEFAULT_COUNTERS,
    DEFAULT_DURATION_SECS, DEFAULT_ZIPF_EXPONENT, LoadOptions, MAX_BATCH_SIZE,
};
use geoctl::cmd::storm::{StormKind, StormOptions};
use geoctl::cmd::sum::SumOptions;
use geoctl::load::route::WriteRoute;
use geoctl::load::workload::{KeyDistribution, WritePath};

/// A command line for a geocount cluster: read, create and write counters, measure how long
/// writes take to show at the global aggregator, and drive load at it.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The topology file (TOML) that says where the cluster is; `GEOCOUNT_*` environment
    /// variables override its keys.
    #[arg(long, global = true, default_value = "config/local.toml")]
    config: PathBuf,
    /// The bearer token to send, for a cluster with `[auth]` tokens [default: the
    /// `GEOCTL_TOKEN` environment variable]. (Not `GEOCOUNT_TOKEN`: `GEOCOUNT_*` variables
    /// override the topology's keys.)
    #[arg(long, global = true, value_name = "TOKEN")]
    token: Option<String>,
    /// What to do.
    #[command(subcommand)]
    command: Sub,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Sub {
    /// Read a counter from the global aggregator: its value, whether it is complete, its
    /// staleness and each datacenter's part. Exits 1 when the counter is not found or stale
    /// datacenters refuse the read.
    Get {
        /// The counter's id.
        id: String,
        /// Count a datacenter as stale when its data is older than this (milliseconds)
        /// [default: the global aggregator's `max_staleness_ms`].
        #[arg(long, value_name = "N")]
        max_staleness_ms: Option<u64>,
        /// Answer with stale datacenters' last known values rather than refusing.
        #[arg(long)]
        allow_partial: bool,
        /// Print the global aggregator's JSON answer as it came.
        #[arg(long)]
        json: bool,
    },
    /// Read a counter's history from the global aggregator: one value per step of one of its
    /// history levels, then the total and each datacenter's part. Exits 1 when the counter is
    /// not found, keeps no level of the step, or stale datacenters refuse the read.
    History {
        /// The counter's id.
        id: String,
        /// The step, in seconds: one of the counter's history levels.
        #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..))]
        step: u32,
        /// The first step, unix seconds [default: as far back as the level keeps].
        #[arg(long, value_name = "T1")]
        from: Option<u64>,
        /// The last step, unix seconds [default: now].
        #[arg(long, value_name = "T2")]
        to: Option<u64>,
        /// Count a datacenter as stale when its data is older than this (milliseconds)
        /// [default: the global aggregator's `max_staleness_ms`].
        #[arg(long, value_name = "N")]
        max_staleness_ms: Option<u64>,
        /// Answer with stale datacenters' last known values rather than refusing.
        #[arg(long)]
        allow_partial: bool,
        /// Print the global aggregator's JSON answer as it came.
        #[arg(long)]
        json: bool,
    },
    /// Sum the sum counters whose id starts with PREFIX at the global aggregator (unique
    /// counters are left out): the sum, how many counters it adds, whether it is complete, its
    /// staleness and each datacenter's part. Exits 1 when stale datacenters refuse it.
    Sum {
        /// The id prefix (empty: every counter).
        prefix: String,
        /// Sum the hits of the last S seconds rather than all-time totals.
        #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..))]
        window: Option<u32>,
        /// The window's end, unix seconds [default: now].
        #[arg(long, value_name = "T", requires = "window")]
        at: Option<u64>,
        /// Count a datacenter as stale when its data is older than this (milliseconds)
        /// [default: the global aggregator's `max_staleness_ms`].
        #[arg(long, value_name = "N")]
        max_staleness_ms: Option<u64>,
        /// Answer with stale datacenters' last known values rather than refusing.
        #[arg(long)]
        allow_partial: bool,
        /// Print the global aggregator's JSON answer as it came.
        #[arg(long)]
        json: bool,
    },
    /// Create a counter (POST /counter to a random shard node) and print its description.
    Create {
        /// The new counter's id.
        id: String,
        /// How many of each datacenter's slots take its writes [default: the nodes'
        /// `shard.default_number_of_shards`].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        shards: Option<u32>,
        /// The lowest world total its writes may reach (at most 0): a bounded counter.
        #[arg(long, value_name = "N", allow_hyphen_values = true)]
        min: Option<i64>,
        /// The highest world total its writes may reach (at least 0): a bounded counter.
        #[arg(long, value_name = "N")]
        max: Option<i64>,
    },
    /// Write to a counter once through a random shard node and print the slot that took it,
    /// that slot's value and its version.
    Incr {
        /// The counter's id.
        id: String,
        /// The change: positive increments, negative decrements by its magnitude; not 0.
        #[arg(
            long,
            value_name = "N",
            default_value_t = 1,
            allow_negative_numbers = true
        )]
        delta: i64,
        /// An idempotency key: a retry with the same key and delta is applied at most once.
        #[arg(long, value_name = "IDEMPOTENCY_KEY")]
        key: Option<String>,
    },
    /// Delete a counter everywhere (DELETE /counter/{id} through a random shard node; the admin
    /// right). Each slot drops what it applied before it learns of the delete; a later write
    /// makes the counter again from zero.
    Delete {
        /// The counter's id.
        id: String,
    },
    /// Reset a counter to zero everywhere (POST /counter/{id}/reset; the admin right). Each
    /// slot counts from zero once it learns of the reset.
    Reset {
        /// The counter's id.
        id: String,
    },
    /// Delete a counter this many seconds from now, or never (PATCH /counter/{id}; the admin
    /// right).
    Expire {
        /// The counter's id.
        id: String,
        /// Seconds from now until it is deleted.
        #[arg(value_parser = clap::value_parser!(u32).range(1..),
              required_unless_present = "never", conflicts_with = "never")]
        seconds: Option<u32>,
        /// Clear its expiry instead.
        #[arg(long)]
        never: bool,
    },
    /// Measure visibility lag: write +1 to fresh counters through random shard nodes and time
    /// how long each takes to show at the global aggregator.
    Lag {
        /// How many samples (one fresh counter each) to take.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_SAMPLES,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        samples: usize,
        /// How many samples run at once.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_CONCURRENCY,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
        concurrency: usize,
        /// Sample k writes counter `<P>-<k>` [default: `lag-probe-<random hex>`].
        #[arg(long, value_name = "P")]
        counter_prefix: Option<String>,
        /// Before its write, each sample waits a random time below this many milliseconds, so
        /// writes land at random points of the aggregators' pull cycles [default: the
        /// shard → datacenter plus datacenter → global intervals]. 0: no wait; writes then
        /// fall into step with the global pulls and measure close to that interval.
        #[arg(long, value_name = "MS")]
        start_jitter_ms: Option<u64>,
        /// Also write the figures as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Drive writes (random deltas, some negative) at the cluster through every shard node, and
    /// report throughput, request latency, visibility lag under load, and whether every written
    /// counter's global total equals its acknowledged deltas (exits 1 if not).
    Load {
        /// How long to send writes, in seconds.
        #[arg(long, value_name = "S", default_value_t = DEFAULT_DURATION_SECS,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        duration_secs: u64,
        /// Target writes per second over all requests; 0 sends as fast as possible.
        #[arg(long, value_name = "N", default_value_t = 0)]
        rate: u64,
        /// How many counters the writes are spread over.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_COUNTERS,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
        counters: usize,
        /// How writes are spread over the counters: uniformly, or Zipf (a few hot counters).
        #[arg(long, value_enum, default_value_t = DistributionArg::Uniform)]
        distribution: DistributionArg,
        /// The Zipf exponent (with --distribution zipf): larger is more skewed.
        #[arg(long, value_name = "E", default_value_t = DEFAULT_ZIPF_EXPONENT)]
        zipf_exponent: f64,
        /// `http`: one write per request (PATCH /counter/{id}/write); `batch`: postcard
        /// POST /batch with --batch-size writes per request.
        #[arg(long, value_enum, default_value_t = PathArg::Http)]
        path: PathArg,
        /// Writes per batch (with --path batch). The writes routed to each node wait until
        /// they fill a batch of N; a node's batch is sent short once its oldest write has
        /// waited 100 ms, and at the end of the run.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_BATCH_SIZE,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_BATCH_SIZE as u64))]
        batch_size: usize,
        /// `owner`: each write to the node owning its slot (a request is split by owner, as a
        /// client that knows the topology sends); `any`: each request whole to the next node,
        /// which forwards the writes it does not own (as behind a plain load balancer).
        #[arg(long, value_enum, default_value_t = RouteArg::Owner)]
        route: RouteArg,
        /// Requests in flight at once.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_LOAD_CONCURRENCY,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
        concurrency: usize,
        /// Counters are `<P>-<i>`, lag probes `<P>-probe-<k>`; they must be fresh
        /// [default: `load-<random hex>`].
        #[arg(long, value_name = "P")]
        counter_prefix: Option<String>,
        /// Also write the report as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Also draw writes per second and visibility lag over time to this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        /// Send the writes without idempotency keys (at least once: a write that may have
        /// applied is not retried), to measure what keys cost.
        #[arg(long)]
        without_keys: bool,
    },
    /// Flood a node as a careless or hostile client would: idle connections held open, or
    /// scans at the global aggregator with probe reads meanwhile (exits 1 if a probe read is
    /// answered 503).
    Storm {
        #[command(subcommand)]
        storm: StormSub,
        /// How long the storm lasts, in seconds.
        #[arg(long, value_name = "S", default_value_t = 10, global = true,
              value_parser = clap::value_parser!(u64).range(1..=3_600))]
        duration_secs: u64,
    },
}

#[derive(Debug, Subcommand)]
enum StormSub {
    /// Hold idle TCP connections to one node, opening a new one whenever it closes one.
    Connections {
        /// The node's address.
        #[arg(long, value_name = "HOST:PORT")]
        target: std::net::SocketAddr,
        /// How many to hold at once.
        #[arg(long, value_name = "N", default_value_t = 2_000,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..=60_000))]
        connections: usize,
        /// The local address they come from (127.0.0.2 makes one host of them).
        #[arg(long, value_name = "IP", default_value = "127.0.0.2")]
        from: std::net::IpAddr,
    },
    /// Loops of a scan at the global aggregator, reading one counter ten times a second.
    Scans {
        /// How many loops run at once.
        #[arg(long, value_name = "N", default_value_t = 4,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
        loops: usize,
        /// The path each loop asks for.
        #[arg(long, value_name = "PATH", default_value = geoctl::cmd::storm::DEFAULT_SCAN_PATH)]
        path: String,
        /// The counter the probe reads.
        #[arg(long, value_name = "ID")]
        probe: String,
    },
}

/// `--distribution`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum DistributionArg {
    /// Every counter equally likely.
    Uniform,
    /// Zipf-distributed: counter 0 hottest.
    Zipf,
}

/// `--path`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum PathArg {
    /// One write per request.
    Http,
    /// Postcard batches.
    Batch,
}

/// `--route`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum RouteArg {
    /// To the node owning each write's slot.
    Owner,
    /// To the next node, which forwards.
    Any,
}

impl From<Sub> for Command {
    fn from(sub: Sub) -> Self {
        match sub {
            Sub::Get {
                id,
                max_staleness_ms,
                allow_partial,
                json,
            } => Command::Get(GetOptions {
                id,
                max_staleness_ms,
                allow_partial,
                json,
            }),
            Sub::History {
                id,
                step,
                from,
                to,
                max_staleness_ms,
                allow_partial,
                json,
            } => Command::History(HistoryOptions {
                id,
                step,
                from,
                to,
                max_staleness_ms,
                allow_partial,
                json,
            }),
            Sub::Sum {
                prefix,
                window,
                at,
                max_staleness_ms,
                allow_partial,
                json,
            } => Command::Sum(SumOptions {
                prefix,
                window,
                at,
                max_staleness_ms,
                allow_partial,
                json,
            }),
            Sub::Create {
                id,
                shards,
                min,
                max,
            } => Command::Create(CreateOptions {
                id,
                shards,
                min,
                max,
            }),
            Sub::Incr { id, delta, key } => Command::Incr(IncrOptions { id, delta, key }),
            Sub::Delete { id } => Command::Life(LifecycleOptions {
                id,
                change: LifeChange::Delete,
            }),
            Sub::Reset { id } => Command::Life(LifecycleOptions {
                id,
                change: LifeChange::Reset,
            }),
            Sub::Expire { id, seconds, .. } => Command::Life(LifecycleOptions {
                id,
                change: LifeChange::Expire(seconds),
            }),
            Sub::Lag {
                samples,
                concurrency,
                counter_prefix,
                start_jitter_ms,
                json,
            } => Command::Lag(LagOptions {
                samples,
                concurrency,
                counter_prefix,
                start_jitter_ms,
                json,
            }),
            Sub::Load {
                duration_secs,
                rate,
                counters,
                distribution,
                zipf_exponent,
                path,
                batch_size,
                route,
                concurrency,
                counter_prefix,
                json,
                plot,
                without_keys,
            } => Command::Load(LoadOptions {
                duration_secs,
                rate,
                counters,
                distribution: match distribution {
                    DistributionArg::Uniform => KeyDistribution::Uniform,
                    DistributionArg::Zipf => KeyDistribution::Zipf,
                },
                zipf_exponent,
                path: match path {
                    PathArg::Http => WritePath::Http,
                    PathArg::Batch => WritePath::Batch,
                },
                batch_size,
                route: match route {
                    RouteArg::Owner => WriteRoute::Owner,
                    RouteArg::Any => WriteRoute::Any,
                },
                concurrency,
                counter_prefix,
                json,
                plot,
                progress: std::io::stdout().is_terminal(),
                keyed: !without_keys,
            }),
            Sub::Storm {
                storm,
                duration_secs,
            } => Command::Storm(StormOptions {
                duration_secs,
                kind: match storm {
                    StormSub::Connections {
                        target,
                        connections,
                        from,
                    } => StormKind::Connections {
                        target,
                        connections,
                        from,
                    },
                    StormSub::Scans { loops, path, probe } => {
                        StormKind::Scans { loops, path, probe }
                    }
                },
            }),
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("geoctl: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let token = args.token.or_else(|| std::env::var("GEOCTL_TOKEN").ok());
    let command = Command::from(args.command);
    // Not locked: the load's progress bar draws on standard output from other threads.
    let mut stdout = std::io::stdout();
    match runtime.block_on(geoctl::run(
        &args.config,
        token.as_deref(),
        &command,
        &mut stdout,
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("geoctl: {error}");
            ExitCode::FAILURE
        }
    }
}
