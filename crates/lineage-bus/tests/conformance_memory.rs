//! The bus conformance suite against the in-memory twins (`lineage_bus::memory`).

use std::sync::Arc;
use std::time::Duration;

use lineage_bus::conformance::Backend;
use lineage_bus::memory::MemoryBus;
use lineage_bus::ports::BoxFuture;
use lineage_bus::{ControlTransport, EventLog, Inbox, Lifecycle, TurnOutputs};

/// Every handle is made from one bus, as every connection reaches one server.
struct Memory(MemoryBus);

const ACK_WAIT: Duration = Duration::from_millis(1000);

impl Backend for Memory {
    fn events(&self) -> BoxFuture<'_, Arc<dyn EventLog>> {
        Box::pin(async { Arc::new(self.0.events()) as Arc<dyn EventLog> })
    }
    fn inbox(&self) -> BoxFuture<'_, Arc<dyn Inbox>> {
        Box::pin(async { Arc::new(self.0.inbox()) as Arc<dyn Inbox> })
    }
    fn lifecycle(&self) -> BoxFuture<'_, Arc<dyn Lifecycle>> {
        Box::pin(async { Arc::new(self.0.lifecycle()) as Arc<dyn Lifecycle> })
    }
    fn control(&self) -> BoxFuture<'_, Arc<dyn ControlTransport>> {
        Box::pin(async { Arc::new(self.0.control()) as Arc<dyn ControlTransport> })
    }
    fn output(&self) -> BoxFuture<'_, Arc<dyn TurnOutputs>> {
        Box::pin(async { Arc::new(self.0.output()) as Arc<dyn TurnOutputs> })
    }
    fn workspaces(&self) -> BoxFuture<'_, Arc<dyn lineage_bus::WorkspaceStore>> {
        Box::pin(async { Arc::new(self.0.workspaces()) as Arc<dyn lineage_bus::WorkspaceStore> })
    }
    fn ack_wait(&self) -> Duration {
        ACK_WAIT
    }
}

lineage_bus::conformance_suite!(async { Memory(MemoryBus::with_ack_wait(ACK_WAIT)) });
