//! Agent drivers (H1): how a node hosts an agent.
//!
//! A driver turns one turn's input into [`DriverAction`]s, returned as data; the host executes
//! them (publishes reports, spawns children through the registry, waits, settles). Two drivers:
//! the deterministic `script` driver ([`crate::script`]) and the `acp` driver ([`crate::acp`]),
//! which runs an Agent Client Protocol agent as a subprocess over stdio. A [`DriverFactory`]
//! makes the driver for a session's [`AgentSpec`]; errors are [`DriverError`]s.

use std::future::Future;
use std::pin::Pin;

use lineage_core::ids::{NodeId, SessionId};
use lineage_core::log::SessionEvent;
use lineage_core::messages::Delivery;
use lineage_protocol::control::{AgentsReply, OneShotResult};
use serde::{Deserialize, Serialize};

use crate::error::DriverError;
use crate::script::{ScriptDriver, SCRIPT_PROVIDER};

/// A boxed future, so drivers can be `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub use lineage_core::journal::TurnMessage;

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
    /// How long the child's subtree may run (Q2), in ms from the spawn; the frozen deadline is
    /// the earlier of that and the parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<lineage_core::deadline::Timeout>,
    /// A budget over the child's subtree (Q3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<lineage_core::budget::Budget>,
    /// `inherit` (a copy of the parent's files; the default when the parent has a workspace)
    /// or `empty` (issue 39).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<lineage_protocol::workspace::SpawnWorkspace>,
    /// The id the child is born with, when the caller needs it before the birth answers (an
    /// MCP task handle names a one-shot child before its result, A3); minted by the host
    /// ([`TurnCtx::mint_session`]). Never read from or written to the wire, and not part of
    /// the call's fingerprint: a script or an agent cannot choose an id.
    #[serde(skip)]
    pub session: Option<SessionId>,
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

/// What a driver asks for *during* a turn ([`TurnCtx::act`]); the outcome comes back inside
/// the same turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnAction {
    /// Record the assistant's reply.
    Reply(String),
    /// Report to the direct parent (M1).
    Report {
        /// The text.
        content: String,
        /// quiet or wakeup.
        delivery: Delivery,
    },
    /// Spawn a child: a one-shot child's outcome carries its result (the call waits for it), a
    /// continuable child's only its id (its reports and settlement reach the inbox).
    Spawn(Box<ChildSpec>),
    /// Send a followup to a continuable child of this agent (M3).
    Followup {
        /// The child.
        child: SessionId,
        /// The text.
        content: String,
    },
    /// Interrupt a descendant's current turn, with this agent's authority as its ancestor
    /// (M4).
    Interrupt {
        /// The descendant.
        child: SessionId,
    },
    /// List this agent's children.
    ListChildren,
    /// Record the usage the agent last reported (once per turn, at its end): replaces the
    /// session's previous usage in the registry.
    Usage(lineage_core::usage::SessionUsage),
    /// Apply a child's changes (its files against the copy of this agent's it started from) to
    /// this agent's own files: all of them, or none and the conflicts (issue 39).
    ApplyChildChanges {
        /// The child.
        child: SessionId,
    },
    /// Read a child's state and result from the registry and its log (A3: an MCP task's
    /// `tasks/get`), [`ActionOutcome::ChildTask`]; refused for a session that is not this
    /// agent's child. Nothing is consumed: its reports and settlement still reach the inbox.
    ChildTask {
        /// The child.
        child: SessionId,
    },
    /// Wait for children's reports and settlements, received in this turn
    /// ([`ActionOutcome::Arrived`]).
    WaitChildren {
        /// The children; every continuable child not yet settled when `None`.
        children: Option<Vec<SessionId>>,
        /// All settled, or any message.
        mode: WaitMode,
        /// How long to wait at most.
        timeout_ms: u64,
    },
}

pub use lineage_core::engine::WaitMode;

/// One child, as [`TurnAction::ListChildren`] sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildInfo {
    /// The child.
    pub session: SessionId,
    /// Its registry state (`running`, `waiting`, `settled`, `disposed`, ...).
    pub state: lineage_core::lifecycle::SessionState,
    /// `one-shot` or `continuable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<lineage_core::descriptor::SubagentShape>,
    /// The node it is placed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeId>,
    /// Its label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The last report it sent to this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_report: Option<String>,
}

/// The outcome of a [`TurnAction`].
#[derive(Debug, Clone, PartialEq)]
pub enum ActionOutcome {
    /// Done (a reply recorded, a report sent).
    Done,
    /// The child was born.
    Born {
        /// The child.
        child: SessionId,
        /// A one-shot child's result.
        result: Option<OneShotResult>,
    },
    /// The children ([`TurnAction::ListChildren`]), oldest first.
    Children(Vec<ChildInfo>),
    /// What arrived from the children waited for ([`TurnAction::WaitChildren`]), oldest first;
    /// `complete` is false when the wait's deadline passed first.
    Arrived {
        /// The messages (now inputs of this turn).
        messages: Vec<TurnMessage>,
        /// False when the deadline passed first.
        complete: bool,
    },
    /// A child's changes were applied ([`TurnAction::ApplyChildChanges`]).
    Applied {
        /// The paths written or removed, with what happened to each (`added`, `modified`,
        /// `deleted`).
        changed: Vec<(String, String)>,
        /// Paths already as the child left them.
        already: usize,
    },
    /// A child as the registry and its log tell it ([`TurnAction::ChildTask`]).
    ChildTask(ChildTaskView),
    /// Refused, one line (the turn goes on; the driver decides).
    Refused(String),
}

/// A child read from the registry and its log ([`TurnAction::ChildTask`]): what an MCP task
/// over it shows (A3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildTaskView {
    /// The child.
    pub session: SessionId,
    /// Its registry state.
    pub state: lineage_core::lifecycle::SessionState,
    /// Why it ended, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<lineage_core::messages::StopReason>,
    /// `one-shot` or `continuable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<lineage_core::descriptor::SubagentShape>,
    /// Its last assistant reply, from its log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// How its last turn ended (`completed`, `interrupted`, `failed`, ...), from its log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<lineage_core::messages::StopReason>,
    /// When it was born (ms since the epoch).
    pub created_at_ms: u64,
    /// When its record last changed (ms since the epoch).
    pub updated_at_ms: u64,
    /// How long after its birth it stays readable, once that is known: a disposed child's
    /// record and log are purged after the node's retention (Q5); `None` while it lives, or
    /// when records are kept for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readable_for_ms: Option<u64>,
}

/// Where a turn's streamed assistant text goes as it comes (F1): the host publishes it on the
/// session's output subject. Best effort and non-blocking; the reply is recorded as usual.
pub type OutputSink = std::sync::Arc<dyn Fn(String) + Send + Sync>;

/// A turn's way back to its host: actions during the turn, and its output as it streams.
/// Cheap to clone; it stops working when the turn ends.
#[derive(Clone)]
pub struct TurnCtx {
    tx: tokio::sync::mpsc::UnboundedSender<TurnRequest>,
    output: Option<OutputSink>,
    ids: Option<SessionIds>,
}

/// Where a turn's fresh session ids come from: the host's id mint.
pub type SessionIds = std::sync::Arc<dyn Fn() -> SessionId + Send + Sync>;

impl std::fmt::Debug for TurnCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnCtx")
            .field("output", &self.output.is_some())
            .finish_non_exhaustive()
    }
}

/// One [`TurnAction`] on its way to the agent task, with where its outcome goes.
#[derive(Debug)]
pub struct TurnRequest {
    /// The action.
    pub action: TurnAction,
    /// Where the outcome goes.
    pub reply: tokio::sync::oneshot::Sender<ActionOutcome>,
}

impl TurnCtx {
    /// A context whose requests arrive on the returned receiver.
    pub fn channel() -> (Self, tokio::sync::mpsc::UnboundedReceiver<TurnRequest>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (
            TurnCtx {
                tx,
                output: None,
                ids: None,
            },
            rx,
        )
    }

    /// The same context, minting session ids with `ids` ([`TurnCtx::mint_session`]).
    pub fn with_ids(mut self, ids: SessionIds) -> Self {
        self.ids = Some(ids);
        self
    }

    /// A fresh session id from the host's mint, for a child whose id the caller needs before
    /// its birth answers ([`ChildSpec::session`]); `None` when the host gave no mint.
    pub fn mint_session(&self) -> Option<SessionId> {
        self.ids.as_ref().map(|ids| ids())
    }

    /// The same context, streaming the turn's text to `sink`.
    pub fn with_output(mut self, sink: OutputSink) -> Self {
        self.output = Some(sink);
        self
    }

    /// Streams a piece of the assistant's text (a driver that streams calls this as the text
    /// comes; nothing happens without a sink).
    pub fn output(&self, text: &str) {
        if let Some(sink) = &self.output {
            sink(text.to_owned());
        }
    }

    /// Asks the host for `action` and waits for its outcome (the turn ended: refused).
    pub async fn act(&self, action: TurnAction) -> ActionOutcome {
        self.act_later(action).await
    }

    /// Asks for `action` now and returns its outcome to come: the caller goes on meanwhile
    /// (a spawn whose answer it collects later).
    pub fn act_later(
        &self,
        action: TurnAction,
    ) -> impl std::future::Future<Output = ActionOutcome> + Send + 'static {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let sent = self.tx.send(TurnRequest { action, reply }).is_ok();
        async move {
            match sent {
                true => rx
                    .await
                    .unwrap_or_else(|_| ActionOutcome::Refused("the turn has ended".to_owned())),
                false => ActionOutcome::Refused("the turn has ended".to_owned()),
            }
        }
    }
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
    /// What the session runs with (C1, C2, C4): the same at birth and at every resume.
    pub composition: DriverComposition,
}

/// The seed's creation window as a driver receives it (C4): every driver gets it at start and
/// after a cold resume, and translates it to its agent's own mechanisms (the ACP driver: the
/// agent's system prompt or the first prompt, its MCP tool list, its session mode and its
/// permission answers). Built by the host from the session's preset, descriptor and policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverComposition {
    /// True for a delegated child (a session with a parent): it never reaches a human (C2).
    pub delegated: bool,
    /// The prompt sections it runs with, in order: the parent's preset, the delegation
    /// statement, its persona (C1). Empty for a top-level session without a preset.
    pub prompt_sections: Vec<lineage_core::header::PromptSection>,
    /// The lineage tools it may use; `None`: all of them (C1's tool filter).
    pub tool_filter: Option<Vec<String>>,
    /// Its delegated sandbox mode (C2), if the parent had one.
    pub sandbox_mode: Option<lineage_core::policy::SandboxMode>,
    /// Its delegated approval policy (C2): `never` for a child of a parent with an approval
    /// service.
    pub approval: Option<lineage_core::policy::ApprovalPolicy>,
    /// A top-level session whose policy has an approval service (opened through an editor,
    /// `lineage acp`): its agent's permission requests go to that person (C4).
    pub approval_service: bool,
    /// A top-level session's directory under its working directory: its request's `cwd`
    /// (relative, no `..`). `None`: the working directory itself (always for a child, which
    /// works in its own).
    pub cwd: Option<std::path::PathBuf>,
    /// A root's editor's MCP servers (HTTP only, issue 38): the ACP driver adds them to the
    /// agent's `mcpServers` when its profile has `pass_mcp_servers = true` and the agent
    /// takes MCP over HTTP. Empty for a child and after a cold resume.
    pub mcp_servers: Vec<lineage_protocol::editor_mcp::PassedMcpServer>,
}

impl DriverComposition {
    /// The prompt sections as one text (blank lines between them); `None` when there are none.
    pub fn instructions(&self) -> Option<String> {
        let text: Vec<&str> = self
            .prompt_sections
            .iter()
            .map(|s| s.text.trim())
            .filter(|t| !t.is_empty())
            .collect();
        (!text.is_empty()).then(|| text.join("\n\n"))
    }
}

/// A session's own directory of files and what it may hold ([`AgentDriver::own_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnFiles {
    /// The directory.
    pub dir: std::path::PathBuf,
    /// What it may hold (its profile's `workspace_max_bytes` and `workspace_max_files`).
    pub caps: lineage_workspace::Caps,
}

/// A hosted agent. Object safe: the host keeps `Box<dyn AgentDriver>`.
pub trait AgentDriver: Send {
    /// Starts (or cold-resumes) the agent.
    fn start<'a>(&'a mut self, start: DriverStart) -> BoxFuture<'a, Result<(), DriverError>>;
    /// Runs one turn; the host may drop the future to interrupt it (M4), then calls
    /// [`AgentDriver::cancel`].
    fn turn<'a>(
        &'a mut self,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, DriverError>>;
    /// Runs one turn with a [`TurnCtx`] for actions during the turn (outcomes come back at
    /// once); the returned actions run after, in order, as if asked through the context.
    /// Default: [`AgentDriver::turn`].
    fn turn_with<'a>(
        &'a mut self,
        input: TurnInput,
        ctx: TurnCtx,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, DriverError>> {
        let _ = ctx;
        self.turn(input)
    }
    /// A log event `(kind, data)` the host appends right after [`AgentDriver::start`], so that a
    /// later cold resume finds the agent's own state again (ACP: `acp/session`). Default: none.
    fn start_record(&self) -> Option<(String, serde_json::Value)> {
        None
    }
    /// The session's own directory of files, when the agent has one (issue 39): where its
    /// workspace is materialized before [`AgentDriver::start`] and what its checkpoints pack,
    /// with its profile's caps. `None` (the default): no files of its own (the scripted agent,
    /// a profile whose workdir the operator shares between sessions).
    fn own_files(&self) -> Option<OwnFiles> {
        None
    }
    /// What the driver keeps of its agent across a cold resume that the turn just run changed
    /// (an A2A agent's remote task), taken once after each turn: the host writes it with the
    /// turn's end (`driver/state`), and [`DriverStart::log`] holds it at the next start.
    /// Default: none.
    fn take_state(&mut self) -> Option<serde_json::Value> {
        None
    }
    /// The session ends for good (a drain released it, not a hand-off or a host stop): the
    /// agent's other side is told, when it has one (an A2A agent's remote task is cancelled).
    /// Called before [`AgentDriver::shutdown`]. Default: nothing.
    fn dispose<'a>(&'a mut self) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
    /// Tells the agent its current turn was cancelled (ACP `session/cancel`).
    fn cancel<'a>(&'a mut self) -> BoxFuture<'a, ()>;
    /// Stops the agent and frees its resources.
    fn shutdown<'a>(&'a mut self) -> BoxFuture<'a, ()>;
}

/// Provider name of ACP agents in descriptors (P1).
pub const ACP_PROVIDER: &str = "acp";

/// Makes drivers for agent specs. The node supplies one that knows every driver it can run.
pub trait DriverFactory: Send + Sync + 'static {
    /// Builds a driver for `spec` hosting `session`, or says why this node cannot run it.
    fn make(
        &self,
        spec: &AgentSpec,
        session: &SessionId,
    ) -> Result<Box<dyn AgentDriver>, DriverError>;
    /// What this node offers: its profiles and whether it takes raw command lines. The hosting
    /// node checks a birth's agent against it before anything is written
    /// ([`crate::profiles::check_offer`]), so an unknown profile changes nothing.
    fn offer(&self) -> AgentsReply;
    /// Whether a session running `spec` has another side to tell when it ends while cold (no
    /// live driver): an A2A profile's remote task. A drain then starts a driver for it from
    /// its log only to [`AgentDriver::dispose`] it. Default: no.
    fn ends_remotely(&self, spec: &AgentSpec) -> bool {
        let _ = spec;
        false
    }
    /// Whether any agent this node runs [`DriverFactory::ends_remotely`] (a drain reads a cold
    /// session's log only then). Default: no.
    fn has_remote_agents(&self) -> bool {
        false
    }
    /// The protocols a root's `--git` URL may use here ([`crate::git`]); none by default.
    fn git_protocols(&self) -> Vec<String> {
        Vec::new()
    }
    /// Whether a session of `spec` would hold files of its own here (issue 39), and on what
    /// terms; `None` when its agent has no directory of its own (a scripted agent, a shared
    /// workdir), the default. Asked before a birth with a workspace writes anything.
    fn files_rule(&self, spec: &AgentSpec, session: &SessionId) -> Option<FilesRule> {
        let _ = (spec, session);
        None
    }
}

/// What a session's own files may be (issue 39): [`DriverFactory::files_rule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesRule {
    /// What they may hold (the profile's caps).
    pub caps: lineage_workspace::Caps,
    /// Whether a root may start in a client's upload (the profile's `workspace_uploads`).
    pub uploads: bool,
}

/// The provider name (descriptor `provider`) of an agent spec: `script`, `acp`, or the
/// profile's name.
pub fn provider_of(spec: &AgentSpec) -> String {
    match spec {
        AgentSpec::Script { .. } => SCRIPT_PROVIDER.to_owned(),
        AgentSpec::Acp { .. } => ACP_PROVIDER.to_owned(),
        AgentSpec::Profile { profile } => profile.clone(),
    }
}

/// A factory that runs scripted agents only (ACP specs are refused as unavailable).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScriptDrivers;

impl DriverFactory for ScriptDrivers {
    fn make(
        &self,
        spec: &AgentSpec,
        _session: &SessionId,
    ) -> Result<Box<dyn AgentDriver>, DriverError> {
        crate::profiles::check_offer(&self.offer(), spec)?;
        match spec {
            AgentSpec::Script { script } => Ok(Box::new(ScriptDriver::new(script.clone()))),
            AgentSpec::Profile { .. } => {
                Ok(Box::new(ScriptDriver::new(crate::script::Script::echo())))
            }
            AgentSpec::Acp { .. } => Err(DriverError::Unavailable(ACP_PROVIDER.to_owned())),
        }
    }

    fn offer(&self) -> AgentsReply {
        AgentsReply {
            node: None,
            allow_raw_commands: false,
            profiles: vec![crate::profiles::ProfileInfo {
                name: SCRIPT_PROVIDER.to_owned(),
                driver: crate::profiles::ProfileDriver::Script,
                tools: false,
                description: "scripted agent: the request carries the script".into(),
                a2a: false,
            }],
        }
    }
}
