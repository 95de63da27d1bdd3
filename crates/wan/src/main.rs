//! `wan-emulator --config WAN.toml`: TCP proxies with delay, jitter, a bandwidth cap and a cut
//! switch between geocount's regions, and their control API.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use geocount_wan::WanConfig;

/// Runs one TCP proxy per link of the configuration, each adding a one-way delay (with jitter)
/// and a bandwidth cap to both directions, and serves the control API that lists, cuts, heals
/// and reshapes them.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The emulator's configuration (TOML): `control = "ADDR"` and `[[links]]` tables.
    #[arg(long)]
    config: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    geocount_net::run_tier(
        "wan-emulator",
        WanConfig::load(&args.config),
        |config| geocount_net::ProcessSetup {
            listen: config.control,
            huge_pages: false,
        },
        geocount_wan::run,
    )
}
