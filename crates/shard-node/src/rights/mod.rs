//! Bounded counters' rights between nodes (docs/architecture.md, "Bounded counters"): a
//! write its slot lacks the rights for comes back from the commit loop, and the node asks
//! the counter's other slots for rights, in its datacenter first and then in the others
//! ([`ask`]); other nodes' asks, and the descriptions a bounded counter's creation pushes to
//! every node, are answered by [`serve`].

pub mod ask;
pub mod serve;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};

use geocount_model::{Bounds, CounterId, Placement, Room, SlotId};
use geocount_net::HttpClient;
use geocount_sync::{ClockFence, DescriptionTable};

use crate::engine::slot_table::SharedSlotTable;
use crate::engine::write::{Command, WriteRequest, WriteResults};
use crate::error::ShardError;

/// What asking and answering for rights needs of the node: the handlers' state implements it.
pub trait RightsNode: Send + Sync {
    /// The other slots and how to reach them.
    fn rights(&self) -> &RightsNetwork;
    /// Hands writes to the commit loop once, as they are.
    fn submit_once(
        &self,
        writes: Vec<WriteRequest>,
    ) -> impl Future<Output = Result<WriteResults, ShardError>> + Send;
    /// Hands a command to the commit loop.
    fn send(&self, command: Command) -> impl Future<Output = Result<(), ShardError>> + Send;
    /// The known descriptions.
    fn descriptions(&self) -> &RwLock<DescriptionTable>;
    /// The own slot's committed records.
    fn table(&self) -> &SharedSlotTable;
    /// The node's clock, in unix milliseconds.
    fn now_ms(&self) -> u64;
    /// The clock fence of the descriptions other nodes push (`sync.max_clock_skew_ms`).
    fn description_fence(&self) -> ClockFence;
    /// Counts a pushed description the fence refused.
    fn refused_description(&self);
    /// The refusal of a request the stopping node can no longer take.
    fn stopped(&self) -> ShardError;
}

/// How long a node waits for one datacenter's answers to an ask for rights: past it, that
/// datacenter's slots count as unreachable and the write may be refused at its bound.
pub const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1_000);

/// How long a slot that did not answer an ask is not asked again.
pub const SILENCE: std::time::Duration = std::time::Duration::from_millis(2_000);

/// A slot that may give rights, and its node's address.
type Donor = (SlotId, SocketAddr);

/// One datacenter's shard nodes, as a node asking for rights reaches them.
#[derive(Debug, Clone)]
pub struct Datacenter {
    /// Its name.
    pub name: String,
    /// Its shard nodes' addresses, by slot index.
    pub shards: Vec<SocketAddr>,
}

/// What a node needs to move rights: every datacenter's shard nodes, and one ask at a time
/// per counter.
pub struct RightsNetwork {
    /// This node's slot.
    pub own: SlotId,
    /// Every datacenter of the topology, in its order.
    pub datacenters: Vec<Datacenter>,
    /// The client asks are sent with (the cluster's credentials).
    pub client: HttpClient,
    /// Where counters' slots are in this node's datacenter (the home slot is a counter's
    /// first).
    home: Placement,
    /// One ask at a time per counter: a write waiting on it tries again with what it got.
    asking: Mutex<HashMap<CounterId, Arc<tokio::sync::Mutex<()>>>>,
    /// Slots that did not answer an ask, and until when they are not asked again: a cut-off
    /// datacenter's writes past its rights are refused at once rather than each waiting out
    /// [`ASK_TIMEOUT`].
    silent: Mutex<HashMap<SlotId, tokio::time::Instant>>,
}

impl RightsNetwork {
    /// The network of slot `own` over `datacenters`.
    pub fn new(
        own: SlotId,
        datacenters: Vec<Datacenter>,
        home: Placement,
        client: HttpClient,
    ) -> Self {
        Self {
            own,
            datacenters,
            client,
            home,
            asking: Mutex::new(HashMap::new()),
            silent: Mutex::new(HashMap::new()),
        }
    }

    /// Whether slot `slot` is skipped: it did not answer lately.
    fn is_silent(&self, slot: &SlotId) -> bool {
        let silent = self.silent.lock().expect("silent lock");
        silent
            .get(slot)
            .is_some_and(|until| *until > tokio::time::Instant::now())
    }

    /// Marks slot `slot` as silent for [`SILENCE`], or as answering.
    fn heard(&self, slot: &SlotId, answered: bool) {
        let mut silent = self.silent.lock().expect("silent lock");
        match answered {
            true => silent.remove(slot),
            false => silent.insert(slot.clone(), tokio::time::Instant::now() + SILENCE),
        };
    }

    /// The lock that makes asks for counter `id`'s rights one at a time on this node.
    fn asking(&self, id: &CounterId) -> Arc<tokio::sync::Mutex<()>> {
        let mut asking = self.asking.lock().expect("asking lock");
        if asking.len() > 4_096 {
            // Locks nobody holds or waits on go; a held one is still in use.
            asking.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        asking.entry(id.clone()).or_default().clone()
    }

    /// The share of counter `id`'s room (bounded by `bounds`) this node's slot starts each
    /// generation with: its datacenter's, if it is the counter's home slot there.
    pub fn share_of(&self, id: &CounterId, bounds: &Bounds) -> Room {
        let Some(at) = (self.datacenters.iter()).position(|dc| dc.name == self.own.datacenter)
        else {
            return Room::default();
        };
        let home = self.home.slots_for(id.as_str(), 1).first() == Some(&self.own.index);
        match home {
            true => bounds.share(self.datacenters.len(), at),
            false => Room::default(),
        }
    }

    /// Every other slot, this datacenter's first: `(datacenter, slot, address)`.
    fn others(&self) -> (Vec<Donor>, Vec<Donor>) {
        let (mut own_dc, mut remote) = (Vec::new(), Vec::new());
        for dc in &self.datacenters {
            for (index, address) in dc.shards.iter().enumerate() {
                let slot = SlotId::new(&dc.name, index as u32);
                if slot == self.own {
                    continue;
                }
                match dc.name == self.own.datacenter {
                    true => own_dc.push((slot, *address)),
                    false => remote.push((slot, *address)),
                }
            }
        }
        (own_dc, remote)
    }
}
