//! [`AgentCmd`]: what the host asks of a live agent (over its channel), and [`HandedOff`], how
//! a hand-off went. Kept apart from the agent task so that the host's table of live agents
//! ([`crate::live`]) can name them without depending on the task.

use lineage_bus::trace::TraceContext;
use lineage_core::ids::SessionId;
use lineage_core::messages::StopReason;
use tokio::sync::oneshot;

use super::mail::{Delivered, Incoming};
use crate::error::HostError;

/// A command to a live agent.
pub(crate) enum AgentCmd {
    /// Accept a message into the log; the reply says it is durable (then the inbox acks it).
    /// `trace` is the context of the operation that delivers it; the turn it wakes joins it.
    Deliver {
        incoming: Incoming,
        reply: oneshot::Sender<Result<Delivered, HostError>>,
        trace: Option<TraceContext>,
    },
    /// Adopt a child spawned on this agent's behalf (not from its own turn).
    Adopt(SessionId),
    /// A one-shot child is spawned on this agent's behalf: read the inbox it reports to (M1).
    OpenInbox,
    /// Drain step 2: take no more turns (a cut-short turn ends with `reason`).
    Stop {
        reason: StopReason,
        reply: oneshot::Sender<()>,
        trace: Option<TraceContext>,
    },
    /// Drain wave: settle with `reason` (`disposed`, or `deadline`) and leave.
    Release {
        reason: StopReason,
        reply: oneshot::Sender<()>,
        trace: Option<TraceContext>,
    },
    /// Re-adoption at start-up (see `readopt`): with no turn to take, the engine decides as if
    /// the last turn had just finished.
    Recover,
    /// Graceful shutdown: take no new turn here ([`crate::handoff`]).
    Quiesce,
    /// Graceful shutdown: leave unsettled when idle and release the placement; the reply says
    /// how it went ([`HandedOff`]).
    HandOff(oneshot::Sender<HandedOff>),
}

/// How an agent's hand-off went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HandedOff {
    /// It left unsettled and its placement is released: any node resumes it at once.
    /// `pending_work`: a waking message waits for a turn.
    Released {
        /// A waking message waits for a turn.
        pending_work: bool,
    },
    /// A turn still runs (or it is a one-shot run): it stays, and stops with the host.
    Busy,
    /// It had left already (it settled, or was released by a drain).
    Gone,
    /// It left unsettled but its placement could not be released (one line why): it stays
    /// placed here, and comes back by re-adoption, takeover or its next followup.
    Kept(String),
}
