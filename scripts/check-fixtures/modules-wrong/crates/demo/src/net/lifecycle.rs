//! Lifecycle changes, which name a route.
use crate::{core::tier::Core, net::api::Route};

pub fn change() -> u8 {
    let _route = Route;
    let _core = Core;
    1
}
