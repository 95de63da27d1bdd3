//! A user-space WAN emulator. Real regions are 50-200 ms apart; this machine's kernel has no
//! netem, so the delay between geocount's tiers is added by TCP proxies instead: one per
//! inter-region link, listening where a tier will connect and forwarding to the real address.
//!
//! - [`config`]: the TOML file ([`WanConfig`]): the control address and each link's
//!   `listen`, `target`, `delay_ms`, `jitter_ms` and `bandwidth_bytes_per_sec`.
//! - [`shaping`]: what a link does to one direction's bytes: delay and jitter without
//!   reordering ([`shaping::DelayLine`]), the bandwidth cap ([`shaping::Pacer`]).
//! - [`link`]: one link's state (shaping, cut switch, counters) and its proxy loop ([`Link`]).
//! - [`control`]: the HTTP control API: list links, cut, heal, change shaping at run time.
//! - [`error`]: the configuration error, start-up failures, the API's refusals.
//! - [`server`]: [`run`]: every link and the control API until shutdown ([`Emulator`] when the
//!   bound addresses are needed first).
//!
//! The `wan-emulator --config WAN.toml` binary only parses its flag and calls [`run`].

pub mod config;
pub mod control;
pub mod error;
pub mod link;
pub mod server;
pub mod shaping;

pub use config::{LinkConfig, WanConfig};
pub use control::Control;
pub use error::{ConfigError, ControlError, WanError};
pub use link::{Link, LinkStatus};
pub use server::{Emulator, run};
pub use shaping::Shaping;
