//! Free loopback addresses.

use std::net::SocketAddr;

/// A loopback address whose port was free a moment ago and was not handed out before by this
/// process (tests in one binary run in parallel).
pub fn free_addr() -> SocketAddr {
    geocount_net::free_loopback_address().expect("bind an ephemeral port")
}
