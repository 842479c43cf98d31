//! [`Lifetime`]: how long a host runs. Its background tasks, the shutdown signal it obeys, and
//! graceful shutdown's two steps (winding down, then handing off; [`crate::handoff`]). One part
//! of the host's state ([`crate::shared::Shared`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use lineage_core::ids::NodeId;
use tokio_util::sync::CancellationToken;

use crate::error::HostError;

/// A host's tasks and shutdown state.
pub(crate) struct Lifetime {
    /// This node (named in `shutting down` errors).
    node: NodeId,
    /// The background tasks (agents, sweeps, heartbeat), awaited at shutdown.
    pub(crate) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Everything stops when it is cancelled.
    pub(crate) shutdown: CancellationToken,
    /// Graceful shutdown began ([`crate::handoff`]): no new turn starts here, no session is
    /// resumed here, the sweeps stop.
    pub(crate) winding: CancellationToken,
    /// Graceful shutdown reached its hand-off: nothing new is hosted here any more.
    pub(crate) handing_off: AtomicBool,
}

impl Lifetime {
    /// A running host on `node` that stops with `shutdown`.
    pub(crate) fn new(node: NodeId, shutdown: CancellationToken) -> Self {
        Lifetime {
            node,
            tasks: Mutex::new(Vec::new()),
            shutdown,
            winding: CancellationToken::new(),
            handing_off: AtomicBool::new(false),
        }
    }

    /// Refuses new work once the host stops or hands off.
    pub(crate) fn check_running(&self) -> Result<(), HostError> {
        if self.shutdown.is_cancelled() || self.handing_off.load(Ordering::SeqCst) {
            return Err(HostError::ShuttingDown(self.node.to_string()));
        }
        Ok(())
    }

    /// Whether graceful shutdown began (see [`crate::handoff`]).
    pub(crate) fn winding_down(&self) -> bool {
        self.winding.is_cancelled()
    }

    /// Refuses to take a session here once graceful shutdown began: a resume, re-adoption or
    /// takeover belongs to a node that stays.
    pub(crate) fn check_resumable(&self) -> Result<(), HostError> {
        self.check_running()?;
        if self.winding_down() {
            return Err(HostError::ShuttingDown(self.node.to_string()));
        }
        Ok(())
    }
}
