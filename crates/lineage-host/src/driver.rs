//! Agent drivers (H1): how a node hosts an agent.
//!
//! A driver turns one turn's input into [`DriverAction`]s, returned as data; the host executes
//! them (publishes reports, spawns children through the registry, waits, settles). Two drivers:
//! the deterministic `script` driver ([`crate::script`]) and the `acp` driver ([`crate::acp`]),
//! which runs an Agent Client Protocol agent as a subprocess over stdio.

use std::future::Future;
use std::pin::Pin;

use lineage_core::ids::{NodeId, SessionId};
use lineage_core::log::SessionEvent;
use lineage_core::messages::Delivery;
use serde::{Deserialize, Serialize};

use crate::error::HostError;

/// A boxed future, so drivers can be `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a message in a turn's input came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TurnMessage {
    /// A user (or parent followup) message.
    User {
        /// The text.
        content: String,
    },
    /// A child's report (M1), relayed into this agent's inbox.
    SubagentReport {
        /// The reporting child.
        sender_session_id: SessionId,
        /// The text.
        content: String,
    },
    /// A child's settlement notice (M2): one line.
    SubagentSettled {
        /// The settled child.
        sender_session_id: SessionId,
        /// One-line summary.
        summary: String,
    },
}

/// The input of one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnInput {
    /// 0 for the first turn of the session, counting every turn ever taken (resume included).
    pub turn_index: u64,
    /// The messages delivered for this turn, oldest first.
    pub messages: Vec<TurnMessage>,
}

/// A child the agent asks to spawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSpec {
    /// `one-shot` or `continuable`.
    pub shape: lineage_core::descriptor::SubagentShape,
    /// The child's agent (a script, or an ACP command line).
    pub agent: AgentSpec,
    /// The first user message.
    #[serde(default)]
    pub prompt: String,
    /// Preferred node; any node when absent.
    #[serde(default)]
    pub node: Option<NodeId>,
    /// A human label.
    #[serde(default)]
    pub label: Option<String>,
    /// Persona prompt section (C1).
    #[serde(default)]
    pub persona: Option<String>,
    /// Tool filter (C1).
    #[serde(default)]
    pub tool_filter: Option<Vec<String>>,
}

/// What kind of agent a session runs (P1): defined with the wire bodies in `lineage_protocol`.
pub use lineage_protocol::agent::AgentSpec;

/// What a driver asks the host to do, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverAction {
    /// The assistant's reply text for this turn.
    Reply(String),
    /// Report to the direct parent (M1).
    Report {
        /// The text.
        content: String,
        /// quiet or wakeup.
        delivery: Delivery,
    },
    /// Spawn a child.
    Spawn(Box<ChildSpec>),
    /// Do not settle this turn's result until every owned child settled.
    WaitChildren,
    /// Sleep (simulated work), in milliseconds.
    SleepMs(u64),
    /// The turn fails with this reason.
    Fail(String),
}

/// Everything a driver may read when it starts or resumes.
#[derive(Debug, Clone)]
pub struct DriverStart {
    /// The hosted session.
    pub session: SessionId,
    /// Its log so far (empty at birth; the whole log on cold resume).
    pub log: Vec<SessionEvent>,
    /// True when this is a cold resume.
    pub resumed: bool,
}

/// A hosted agent. Object safe: the host keeps `Box<dyn AgentDriver>`.
pub trait AgentDriver: Send {
    /// Starts (or cold-resumes) the agent.
    fn start<'a>(&'a mut self, start: DriverStart) -> BoxFuture<'a, Result<(), HostError>>;
    /// Runs one turn; the host may drop the future to interrupt it (M4), then calls
    /// [`AgentDriver::cancel`].
    fn turn<'a>(
        &'a mut self,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, HostError>>;
    /// A log event `(kind, data)` the host appends right after [`AgentDriver::start`], so that a
    /// later cold resume finds the agent's own state again (ACP: `acp/session`). Default: none.
    fn start_record(&self) -> Option<(String, serde_json::Value)> {
        None
    }
    /// Tells the agent its current turn was cancelled (ACP `session/cancel`).
    fn cancel<'a>(&'a mut self) -> BoxFuture<'a, ()>;
    /// Stops the agent and frees its resources.
    fn shutdown<'a>(&'a mut self) -> BoxFuture<'a, ()>;
}
