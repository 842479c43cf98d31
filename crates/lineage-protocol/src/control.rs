//! Request and reply bodies of the `lineage` control service (N3): what a client and every node
//! agree on.
//!
//! The envelope (`{"v":1,"result":...}` / `{"v":1,"error":{"code","message"}}`) and the error
//! codes are [`crate::envelope`]; this module is the bodies. Routing is not in any body: a node
//! forwarding a request sets the [`crate::envelope::FORWARDED_HEADER`]. Cluster-wide
//! ops (`lineage.<cluster>.ctl.<op>`, any node may serve): [`SpawnRequest`], [`FollowupRequest`],
//! [`InterruptRequest`], [`DrainRequest`], [`ResumeRequest`], [`StatusRequest`]. Per-node ops
//! (`lineage.<cluster>.node.<node>.<op>`, that node must serve): [`StartRequest`] (`start`), and
//! the same followup / interrupt / resume / status bodies plus [`StopRequest`] (`stop`) and
//! [`ReleaseRequest`] (`release`), which the drain executor sends to hosting nodes.
//!
//! | file | what |
//! |---|---|
//! | `control.rs` | op names ([`ops`]), the bodies of every op but `drain` |
//! | `control/drain.rs` | the `drain` bodies: [`DrainRequest`], [`DrainProgress`] messages, [`DrainReport`] |

mod drain;

use lineage_core::authority::InterruptAuthority;
use lineage_core::depth::MaxDepth;
use lineage_core::descriptor::SubagentShape;
use lineage_core::header::AgentPreset;
use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
use lineage_core::messages::StopReason;
use lineage_core::policy::ParentPolicyView;
use serde::{Deserialize, Serialize};

use crate::agent::{AgentSpec, ProfileInfo};

pub use drain::{
    Disposal, DisposalCounts, DisposalKind, DrainPhase, DrainProgress, DrainReport, DrainRequest,
    WaveSummary, DRAIN_PROGRESS_VERSION, DRAIN_REPORT_CAP,
};

/// Op names: the last token of the control subjects.
pub mod ops {
    /// Spawn a top-level session or a child of a live session.
    pub const SPAWN: &str = "spawn";
    /// Next user message to a session (cold-resumes it first when needed).
    pub const FOLLOWUP: &str = "followup";
    /// Cancel a live session's current turn, with authority.
    pub const INTERRUPT: &str = "interrupt";
    /// Drain subtrees leaves first.
    pub const DRAIN: &str = "drain";
    /// Cold-resume a session on the serving node.
    pub const RESUME: &str = "resume";
    /// What the serving node hosts.
    pub const STATUS: &str = "status";
    /// Per node: host a registered child here.
    pub const START: &str = "start";
    /// Per node: stop turns of live sessions (drain step 2).
    pub const STOP: &str = "stop";
    /// Per node: release (settle and drop) live sessions (drain waves).
    pub const RELEASE: &str = "release";
    /// The agent profiles the serving node offers (T4).
    pub const AGENTS: &str = "agents";
    /// What `op` does, in under 60 characters (the `description` metadata of its endpoint,
    /// shown whole by `nats micro info lineage`, which cuts longer values).
    pub fn description(op: &str) -> &'static str {
        match op {
            SPAWN => "spawn a top-level session or a child of one",
            FOLLOWUP => "next user message to a session (resumes a cold one)",
            INTERRUPT => "cancel a live session's turn, with authority",
            DRAIN => "drain subtrees children first and dispose them",
            RESUME => "cold-resume a session on the serving node",
            STATUS => "what the serving node hosts",
            AGENTS => "the agent profiles the serving node offers",
            START => "per node: host a registered session here",
            STOP => "per node: stop live sessions' turns (drain)",
            RELEASE => "per node: settle and drop live sessions (drain)",
            _ => "a lineage control op",
        }
    }

    /// Every cluster-wide op.
    pub const CLUSTER: [&str; 7] = [SPAWN, FOLLOWUP, INTERRUPT, DRAIN, RESUME, STATUS, AGENTS];
    /// Every per-node op.
    pub const NODE: [&str; 10] = [
        SPAWN, FOLLOWUP, INTERRUPT, DRAIN, RESUME, STATUS, AGENTS, START, STOP, RELEASE,
    ];
}

/// `spawn`: a new top-level session (no `parent`), or a child of a live `parent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnRequest {
    /// The parent; absent for a top-level session.
    #[serde(default)]
    pub parent: Option<SessionId>,
    /// Shape of a child (`one-shot` or `continuable`); ignored for a top-level session.
    #[serde(default)]
    pub shape: Option<SubagentShape>,
    /// The agent to run.
    pub agent: AgentSpec,
    /// The first user message. A top-level session without one (empty) starts idle: its first
    /// followup is its first turn.
    #[serde(default)]
    pub prompt: String,
    /// The node to host it; the serving node when absent.
    #[serde(default)]
    pub node: Option<NodeId>,
    /// A label (children).
    #[serde(default)]
    pub label: Option<String>,
    /// Persona (C1, children).
    #[serde(default)]
    pub persona: Option<String>,
    /// Tool filter (C1, children).
    #[serde(default)]
    pub tool_filter: Option<Vec<String>>,
    /// Max depth for this subtree (D4): a non-negative safe integer, validated where the
    /// request is parsed (a bad one refuses the whole request with one line).
    #[serde(default)]
    pub max_depth: Option<MaxDepth>,
    /// Idempotency key: a retried spawn with the same id returns the same session.
    #[serde(default)]
    pub request_id: Option<RequestId>,
    /// Top-level only: the working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Top-level only: the composed preset the session runs with.
    #[serde(default)]
    pub preset: Option<AgentPreset>,
    /// Top-level only: its policy (what its children inherit, C2).
    #[serde(default)]
    pub policy: Option<ParentPolicyView>,
    /// How long the new session's subtree may run (Q2), in ms from the spawn: at that deadline
    /// it is drained with stop reason `deadline`. A child's deadline is the earlier of this and
    /// its parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<lineage_core::deadline::Timeout>,
    /// A budget over the new session's subtree (Q3): once the usage its agents report reaches
    /// it, no child is registered under it and it is drained with stop reason `budget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<lineage_core::budget::Budget>,
    /// Top-level only: how long it may stay idle (no turn of its own, nothing arriving, no
    /// descendant starting or running) before its tree is drained with stop reason `idle`.
    /// Absent: the spawning node's `limits.idle_root_ms`, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ttl_ms: Option<lineage_core::idle::IdleTtl>,
    /// Top-level only: what wakes it into a turn. `every` (default): a followup, a child's
    /// settlement or a `wakeup` report; `prompts`: a followup only, children's messages wait
    /// for the next one (an editor's root, `lineage acp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_on: Option<lineage_core::engine::WakeOn>,
    /// The files the new session starts in (issue 39): a root's upload, or a child's
    /// `inherit` (the default when its parent has a workspace) or `empty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<crate::workspace::SpawnWorkspace>,
    /// A top-level session's editor's MCP servers (HTTP only) for its agent, next to lineage's
    /// tools, when its profile has `pass_mcp_servers = true` (issue 38; `lineage acp` fills
    /// it). Never written down: a cold resume starts the agent without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<crate::editor_mcp::PassedMcpServer>,
}

impl SpawnRequest {
    /// A request to run `agent` on `prompt` and nothing else set (a top-level session on the
    /// serving node, no limits): set the rest with struct update syntax,
    /// `SpawnRequest { parent, shape, ..SpawnRequest::new(agent, prompt) }`.
    pub fn new(agent: AgentSpec, prompt: impl Into<String>) -> Self {
        SpawnRequest {
            parent: None,
            shape: None,
            agent,
            prompt: prompt.into(),
            node: None,
            label: None,
            persona: None,
            tool_filter: None,
            max_depth: None,
            request_id: None,
            cwd: None,
            preset: None,
            policy: None,
            timeout_ms: None,
            budget: None,
            idle_ttl_ms: None,
            wake_on: None,
            workspace: None,
            mcp_servers: Vec::new(),
        }
    }
}

/// The result of a one-shot run (S1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OneShotResult {
    /// The child's last assistant message.
    pub output: Option<String>,
    /// Structured output, when the agent produced one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
    /// Why the run ended; the run settles on success or failure alike.
    pub stop_reason: StopReason,
    /// A reference to the child's changes against the files it started from, when it has a
    /// workspace (issue 39): `apply_child_changes` applies them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Box<lineage_core::workspace::WorkspaceChanges>>,
}

/// `spawn` and `start` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpawnReply {
    /// The new session.
    pub session: SessionId,
    /// Its run (children).
    pub run: Option<RunId>,
    /// The node hosting it.
    pub node: NodeId,
    /// Its delegation depth.
    pub depth: u64,
    /// One-shot children: the result (the run is settled and disposed when this returns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<OneShotResult>,
}

/// Per-node `start`: host a new session whose [`Birth`](crate::birth::Birth) the spawning
/// node built. The hosting node writes the creation window and registers the birth at once
/// (the registry applies every birth rule again), then launches it.
pub type StartRequest = crate::birth::Birth;

/// `followup` (M3): the next user message to a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FollowupRequest {
    /// The session (usually a continuable child).
    pub session: SessionId,
    /// The text.
    pub content: String,
    /// Idempotency key (M3): a retried followup with the same id is recognised and not
    /// accepted twice (`lineage send` mints one per invocation; `--request-id` sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<RequestId>,
}

/// How a followup was delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FollowupOutcome {
    /// The session was live; the message is in its log and queued for a turn.
    Delivered,
    /// The session was cold; it was resumed here first, then the message was delivered.
    ResumedAndDelivered,
    /// A followup with this request id was accepted before (a retry): nothing was added.
    AlreadyDelivered,
}

/// `followup` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FollowupReply {
    /// The session.
    pub session: SessionId,
    /// The node hosting it now.
    pub node: NodeId,
    /// What happened.
    pub outcome: FollowupOutcome,
}

/// `interrupt` (M4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterruptRequest {
    /// The session whose turn to cancel.
    pub target: SessionId,
    /// `{"kind":"user","parent_session_id":..}` or `{"kind":"ancestor","session":..}`.
    pub authority: InterruptAuthority,
}

/// What an allowed interrupt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterruptOutcome {
    /// A turn was running and is cancelled.
    Cancelled,
    /// The session is live but idle: nothing to cancel.
    NothingRunning,
    /// The session is not live anywhere (cold or settled): nothing to cancel.
    NotLive,
}

/// `interrupt` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InterruptReply {
    /// The target.
    pub target: SessionId,
    /// The node that hosts it, when live.
    pub node: Option<NodeId>,
    /// What happened.
    pub outcome: InterruptOutcome,
}

/// `resume` (K1): host a cold session on the serving node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// The session.
    pub session: SessionId,
}

/// What a resume did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResumeOutcome {
    /// Claimed and rebuilt here.
    Resumed,
    /// Already live here: nothing to do.
    AlreadyLive,
}

/// `resume` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResumeReply {
    /// The session.
    pub session: SessionId,
    /// The node hosting it now.
    pub node: NodeId,
    /// What happened.
    pub outcome: ResumeOutcome,
    /// The placement epoch now held.
    pub epoch: u64,
}

/// `status`: no fields.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {}

/// One live agent in a status reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LiveAgent {
    /// The session.
    pub session: SessionId,
    /// Its durable parent.
    pub parent: Option<SessionId>,
    /// Its runtime owner: the parent, when live on this node (R1, R2).
    pub owner: Option<SessionId>,
    /// Shape, for children.
    pub shape: Option<SubagentShape>,
    /// Delegation depth.
    pub depth: u64,
    /// Whether a turn runs now (false: idle, waiting for a message). Absent from older nodes:
    /// read as false.
    #[serde(default)]
    pub in_turn: bool,
}

/// `status` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusReply {
    /// The serving node.
    pub node: NodeId,
    /// The cluster.
    pub cluster: String,
    /// What it hosts, sorted by session id.
    pub live: Vec<LiveAgent>,
}

/// `agents` request: no fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentsRequest {}

/// `agents` reply: what the serving node runs (T4). No command lines, no environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentsReply {
    /// The serving node (filled in by the host).
    #[serde(default)]
    pub node: Option<NodeId>,
    /// Whether it accepts raw ACP command lines (development only).
    pub allow_raw_commands: bool,
    /// Its profiles, by name.
    pub profiles: Vec<ProfileInfo>,
}

/// Per-node `stop` and `release`: the sessions to act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    /// The sessions.
    pub sessions: Vec<SessionId>,
    /// The stop reason a cut-short turn and the settlement say: `disposed` when absent (a
    /// drain), `deadline` when the deadline sweeper drains (Q2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<StopReason>,
}

/// Per-node `release` body (same shape as [`StopRequest`]).
pub type ReleaseRequest = StopRequest;

/// Per-node `stop` / `release` reply: which of the sessions were live here.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StopReply {
    /// Sessions that were live here and were acted on.
    pub done: Vec<SessionId>,
    /// Sessions that were not live here.
    pub not_live: Vec<SessionId>,
}
