//! `shard-node --config FILE --dc DC --slot N [--data-dir DIR]`: runs slot `DC_<DC>_VAL_<N>`.
//! `shard-node check --data-dir DIR`: reads a data directory without changing it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use geocount_http::tls::tier_tls;
use geocount_model::{OffsetClock, Topology};
use geocount_net::tls::secure;
use geocount_net::{ProcessSetup, tcp_connector};
use shard_node::{NodeConfig, RestoreMode, Storage};
use tokio::net::TcpListener;

/// Runs one geocount shard node: the owner of one slot of every counter.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The topology file (TOML); `GEOCOUNT_*` environment variables override its keys.
    #[arg(long, required = true)]
    config: Option<PathBuf>,
    /// The datacenter this node is in, as named in the topology.
    #[arg(long, required = true)]
    dc: Option<String>,
    /// The slot this node owns: its index in the datacenter's `shards` list.
    #[arg(long, required = true)]
    slot: Option<u32>,
    /// Where to keep data [default: `<shard.data_dir>/DC_<dc>_VAL_<slot>`].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// With an empty data directory: `required` restores the slot from the datacenter before
    /// taking writes; `empty` starts it empty (a new slot, decided by its operator).
    #[arg(long, value_enum, default_value_t = Restore::Required)]
    restore: Restore,
    /// Moves this node's clock by this many milliseconds (negative: behind), to test how the
    /// cluster meets a skewed clock.
    #[arg(long, hide = true, default_value_t = 0, allow_hyphen_values = true)]
    clock_offset_ms: i64,
}

/// What to do instead of running the node.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Reads a data directory without changing it, and says whether a start would accept it.
    ///
    /// Prints what its store and log hold, then `verdict: whole` or `verdict: corrupt: <file> at
    /// byte <offset>: <reason>`. Exits 0 when whole, 1 when corrupt, 2 when it cannot check.
    Check {
        /// The node's data directory.
        #[arg(long)]
        data_dir: PathBuf,
    },
}

/// `--restore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Restore {
    Required,
    Empty,
}

/// mimalloc rather than glibc's malloc, which is slower when memory is freed on another thread
/// than the one that allocated it (docs/architecture.md, "Dependencies").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Command::Check { data_dir }) = &args.command {
        return check(data_dir);
    }
    let (Some(config_path), Some(dc), Some(slot)) = (&args.config, &args.dc, args.slot) else {
        unreachable!("clap requires --config, --dc and --slot without a subcommand");
    };
    geocount_net::idle::release_memory_with(geocount_net::idle::release_mimalloc_memory);
    let config = Topology::load(config_path).and_then(|topology| {
        let mut config =
            NodeConfig::from_topology(&topology, config_path, dc, slot, args.data_dir)?;
        config.restore = match args.restore {
            Restore::Required => RestoreMode::Required,
            Restore::Empty => RestoreMode::Empty,
        };
        topology.check_listen(config_path, config.listen)?;
        if let Some(resp) = config.resp {
            topology.check_listen(config_path, resp)?;
        }
        let tls = tier_tls(&topology, config_path, &config.slot.to_string())?;
        Ok((config, tls))
    });
    geocount_net::run_tier(
        "shard-node",
        config,
        |(config, _)| ProcessSetup {
            listen: config.listen,
            huge_pages: config.huge_pages,
        },
        |(config, tls), listener, shutdown| async move {
            let (listener, connector) = secure(listener, tcp_connector(), tls.as_ref());
            // The Redis protocol's listener, with the same TLS as the HTTP one.
            let resp = match config.resp {
                Some(address) => match TcpListener::bind(address).await {
                    Ok(resp) => Some(secure(resp, tcp_connector(), tls.as_ref()).0),
                    Err(error) => {
                        return Err(format!("cannot listen on {address} (RESP): {error}"));
                    }
                },
                None => None,
            };
            shard_node::run_with_resp(
                config,
                (listener, resp),
                Arc::new(OffsetClock {
                    offset_ms: args.clock_offset_ms,
                }),
                connector,
                Storage::os(),
                shutdown,
            )
            .await
            .map_err(|error| error.to_string())
        },
    )
}

/// `shard-node check`: prints the report on stdout.
fn check(data_dir: &Path) -> ExitCode {
    match shard_node::check::check(data_dir) {
        Ok(report) => {
            print!("{report}");
            if report.verdict.is_whole() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("shard-node check: {error}");
            ExitCode::from(geocount_net::binary::CONFIG_ERROR_EXIT)
        }
    }
}
