//! The node as the layers below the handlers name it: forwarding ([`LocalNode`]) and the
//! rights network ([`RightsNode`]), each through its own trait so that neither depends on
//! the node's composition.

use std::sync::RwLock;

use geocount_model::{CounterDescription, CounterId, CounterType, SlotState};
use geocount_sync::{ClockFence, DescriptionTable};

use crate::engine::slot_table::SharedSlotTable;
use crate::engine::write::{Command, LifecycleChange, WriteRequest, WriteResults};
use crate::error::ShardError;
use crate::metrics::ShardMetrics;
use crate::node::NodeState;
use crate::rights::{RightsNetwork, RightsNode};
use crate::route::forward::LocalNode;
use crate::route::slots::WriteRouter;

impl RightsNode for NodeState {
    fn rights(&self) -> &RightsNetwork {
        &self.rights
    }

    fn submit_once(
        &self,
        writes: Vec<WriteRequest>,
    ) -> impl Future<Output = Result<WriteResults, ShardError>> + Send {
        NodeState::submit_once(self, writes)
    }

    fn send(&self, command: Command) -> impl Future<Output = Result<(), ShardError>> + Send {
        NodeState::send(self, command)
    }

    fn descriptions(&self) -> &RwLock<DescriptionTable> {
        &self.descriptions
    }

    fn table(&self) -> &SharedSlotTable {
        &self.table
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_unix_ms()
    }

    fn description_fence(&self) -> ClockFence {
        ClockFence::new(self.clock.now_unix_ms(), self.sync.max_clock_skew_ms)
    }

    fn refused_description(&self) {
        self.metrics.descriptions_refused.inc();
    }

    fn stopped(&self) -> ShardError {
        NodeState::stopped(self)
    }
}

impl LocalNode for NodeState {
    fn router(&self) -> &WriteRouter {
        &self.router
    }

    fn descriptions(&self) -> &RwLock<DescriptionTable> {
        &self.descriptions
    }

    fn metrics(&self) -> &ShardMetrics {
        &self.metrics
    }

    fn slot_name(&self) -> &str {
        &self.slot_name
    }

    fn submit(
        &self,
        writes: Vec<WriteRequest>,
    ) -> impl Future<Output = Result<WriteResults, ShardError>> + Send {
        NodeState::submit(self, writes)
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_unix_ms()
    }

    fn change_life(
        &self,
        id: CounterId,
        change: LifecycleChange,
    ) -> impl Future<Output = Result<CounterDescription, ShardError>> + Send {
        NodeState::change_life(self, id, change, None)
    }

    fn lives_unheard(
        &self,
        id: &CounterId,
    ) -> impl Future<Output = Result<Option<CounterType>, ShardError>> + Send {
        NodeState::lives_unheard(self, id)
    }

    fn stopped(&self) -> ShardError {
        NodeState::stopped(self)
    }

    fn acknowledged(&self, id: &CounterId, slot: u32, state: SlotState) {
        if let Ok(slot) = u16::try_from(slot) {
            self.world.acknowledged(id, slot, state);
        }
    }
}
