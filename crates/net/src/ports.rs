//! Free loopback ports, for tools and tests that start servers on one machine.

use std::collections::HashSet;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback address whose port was free a moment ago and was not handed out before by this
/// process: the system may hand the same ephemeral port to two binds in a row once the first
/// is closed, and a topology with one port twice is refused.
pub fn free_loopback_address() -> io::Result<SocketAddr> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    loop {
        let address = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        if handed_out.insert(address.port()) {
            return Ok(address);
        }
    }
}
