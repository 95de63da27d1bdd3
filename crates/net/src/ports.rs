//! Free loopback ports, for tools and tests that start servers on one machine.
//!
//! The ports are drawn below the kernel's ephemeral range (`ip_local_port_range`): a port there
//! is handed out by the kernel to every `bind(…:0)` and outgoing connection, so one picked from
//! it, free a moment ago, can be taken by such a bind (an emulated WAN link's listener, say)
//! before the server it was picked for starts.

use std::collections::HashSet;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::ops::Range;
use std::sync::Mutex;

use rand::Rng;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The lowest port drawn from.
const LOWEST: u16 = 10_000;

/// Where Linux says its ephemeral range is.
const EPHEMERAL_RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// A loopback address whose port was free a moment ago, lies outside the kernel's ephemeral
/// range where the system says where that is, and was not handed out before by this process
/// (a topology with one port twice is refused).
pub fn free_loopback_address() -> io::Result<SocketAddr> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    if let Some(ports) = below_ephemeral() {
        let mut rng = rand::rng();
        for _ in 0..ports.len() {
            let port = rng.random_range(ports.clone());
            if handed_out.contains(&port) {
                continue;
            }
            if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
                handed_out.insert(port);
                return listener.local_addr();
            }
        }
    }
    loop {
        let address = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        if handed_out.insert(address.port()) {
            return Ok(address);
        }
    }
}

/// The ports from [`LOWEST`] up to the kernel's ephemeral range, when it is known and leaves
/// room for them.
fn below_ephemeral() -> Option<Range<u16>> {
    let text = std::fs::read_to_string(EPHEMERAL_RANGE_FILE).ok()?;
    let low: u16 = text.split_whitespace().next()?.parse().ok()?;
    (low > LOWEST + 1_000).then_some(LOWEST..low)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel says where its ephemeral range is, the ports handed out lie below it,
    /// each once.
    #[test]
    fn ports_are_drawn_below_the_ephemeral_range_each_once() {
        let Some(ports) = below_ephemeral() else {
            return;
        };
        let mut seen = HashSet::new();
        for _ in 0..200 {
            let port = free_loopback_address().unwrap().port();
            assert!(ports.contains(&port), "{port} not in {ports:?}");
            assert!(seen.insert(port), "{port} handed out twice");
        }
    }
}
