//! Free loopback addresses.

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback address whose port was free a moment ago and was not handed out before by this
/// process (tests in one binary run in parallel).
pub fn free_addr() -> SocketAddr {
    let mut handed_out = HANDED_OUT.lock().expect("ports lock");
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let addr = listener.local_addr().expect("local address");
        if handed_out.insert(addr.port()) {
            return addr;
        }
    }
}
