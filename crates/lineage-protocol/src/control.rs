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

use lineage_core::authority::InterruptAuthority;
use lineage_core::depth::MaxDepth;
use lineage_core::descriptor::{SubagentDescriptor, SubagentShape};
use lineage_core::header::{AgentPreset, SessionHeader};
use lineage_core::ids::{DrainId, NodeId, RequestId, RunId, SessionId};
use lineage_core::messages::StopReason;
use lineage_core::policy::{DelegatedPolicyOverrides, ParentPolicyView};
use serde::{Deserialize, Serialize};

use crate::agent::{AgentSpec, ProfileInfo};

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
    /// Max depth for this subtree (D4): validated, a non-negative safe integer.
    #[serde(default)]
    pub max_depth: Option<serde_json::Value>,
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
    pub timeout_ms: Option<u64>,
    /// A budget over the new session's subtree (Q3): once the usage its agents report reaches
    /// it, no child is registered under it and it is drained with stop reason `budget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<lineage_core::budget::Budget>,
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

/// Per-node `start`: host a new session whose header the spawning node built. The hosting node
/// writes the creation window, then registers the birth (the registry applies every birth rule
/// again), then launches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The spawn's idempotency key: the birth is registered under it, so a retried spawn is
    /// answered with its first birth (or refused), never registered twice.
    pub request_id: RequestId,
    /// The max depth the spawning node enforces (D4); the registry applies the stricter of it
    /// and the tree's recorded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<MaxDepth>,
    /// The fan-out caps the spawning node enforces (Q1); the registry applies the stricter of
    /// these and the tree's recorded ones.
    #[serde(
        default,
        skip_serializing_if = "lineage_core::fanout::FanOut::is_uncapped"
    )]
    pub fan_out: lineage_core::fanout::FanOut,
    /// A budget over the new session's subtree (Q3); its ancestors' budgets apply too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<lineage_core::budget::Budget>,
    /// The frozen header, to register.
    pub header: SessionHeader,
    /// Children: the descriptor (P1).
    #[serde(default)]
    pub descriptor: Option<SubagentDescriptor>,
    /// The agent.
    pub agent: AgentSpec,
    /// The first user message.
    #[serde(default)]
    pub prompt: String,
    /// Children: the run.
    #[serde(default)]
    pub run: Option<RunId>,
    /// Children: the delegated policy snapshot (C2), taken before the first await.
    #[serde(default)]
    pub policy: DelegatedPolicyOverrides,
    /// Top-level sessions: their own policy view.
    #[serde(default)]
    pub policy_view: Option<ParentPolicyView>,
    /// The node of the live parent (for the `local` flag and the runtime owner).
    #[serde(default)]
    pub parent_node: Option<NodeId>,
}

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

/// `drain` (X1, H2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// The parents whose subtrees to drain (they are disposed too, last).
    pub roots: Vec<SessionId>,
    /// When set, the serving node publishes [`DrainProgress`] messages on
    /// `lineage.<cluster>.drain.<progress>.progress` while it drains (core NATS, best effort:
    /// subscribe before sending the request). It must be a safe subject token (ASCII letters,
    /// digits, `-`, `_`; at most 64), else the request is refused as `bad_request` and changes
    /// nothing. Absent (the default, and never serialized when `None`): no progress messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<DrainId>,
}

/// Wire version of [`DrainProgress`] messages (`"v"`).
pub const DRAIN_PROGRESS_VERSION: u64 = 1;

/// What a [`DrainProgress`] message reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DrainPhase {
    /// The plan is ready: `waves` waves of `sizes[i]` sessions, `total` in all (`wave` and
    /// `done` are 0). Sent once, before anything is stopped or disposed.
    Planned,
    /// Wave `wave` is being disposed: `done` of its `total` sessions so far. Sent when the wave
    /// starts (`done` 0), then at most once per progress interval of the serving node.
    Disposing,
    /// Wave `wave` is complete: every one of its `total` sessions is disposed (`done == total`).
    /// Sent once per wave; the next wave starts after it. A wave that fails has none (the drain's
    /// reply carries the error).
    WaveDone,
}

/// One live progress message of a drain, published on `lineage.<cluster>.drain.<drain>.progress`
/// when the [`DrainRequest`] named `progress`:
///
/// ```json
/// {"v":1,"drain":"…","phase":"planned","wave":0,"waves":3,"done":0,"total":13,"sizes":[9,3,1]}
/// {"v":1,"drain":"…","phase":"disposing","wave":0,"waves":3,"done":4,"total":9}
/// {"v":1,"drain":"…","phase":"wave_done","wave":0,"waves":3,"done":9,"total":9}
/// ```
///
/// Waves are numbered from 0 (the leaves), as in [`DrainReport::waves`]; messages of a drain
/// are published in order, all before its reply, on the serving node's connection. Best effort:
/// a message may be lost, and a drain without subscribers costs nothing but the publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DrainProgress {
    /// Always [`DRAIN_PROGRESS_VERSION`].
    pub v: u64,
    /// The drain, as named in the request.
    pub drain: DrainId,
    /// What this message reports.
    pub phase: DrainPhase,
    /// The wave (0 = leaves); 0 for [`DrainPhase::Planned`].
    pub wave: usize,
    /// How many waves the drain has.
    pub waves: usize,
    /// Sessions of the wave disposed so far (0 for [`DrainPhase::Planned`]).
    pub done: u64,
    /// Sessions of the wave; for [`DrainPhase::Planned`], of the whole drain.
    pub total: u64,
    /// [`DrainPhase::Planned`] only: the sessions of each wave, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<u64>,
}

impl DrainProgress {
    /// The plan-ready message: one entry of `sizes` per wave.
    pub fn planned(drain: DrainId, sizes: Vec<u64>) -> Self {
        DrainProgress {
            v: DRAIN_PROGRESS_VERSION,
            drain,
            phase: DrainPhase::Planned,
            wave: 0,
            waves: sizes.len(),
            done: 0,
            total: sizes.iter().sum(),
            sizes,
        }
    }

    /// Wave `wave` of `waves` is under way: `done` of `total`.
    pub fn disposing(drain: DrainId, wave: usize, waves: usize, done: u64, total: u64) -> Self {
        DrainProgress {
            v: DRAIN_PROGRESS_VERSION,
            drain,
            phase: DrainPhase::Disposing,
            wave,
            waves,
            done,
            total,
            sizes: Vec::new(),
        }
    }

    /// Wave `wave` of `waves` is complete: all `total` disposed.
    pub fn wave_done(drain: DrainId, wave: usize, waves: usize, total: u64) -> Self {
        DrainProgress {
            v: DRAIN_PROGRESS_VERSION,
            drain,
            phase: DrainPhase::WaveDone,
            wave,
            waves,
            done: total,
            total,
            sizes: Vec::new(),
        }
    }
}

/// How one session was disposed by a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DisposalKind {
    /// Live on a node: released there (turn cancelled, settled), then disposed in the registry.
    Released,
    /// Cold, or its node is dead (lease expired): disposed straight from the registry.
    RegistryOnly,
    /// It was already disposed (idempotent outcome).
    AlreadyDisposed,
}

/// One disposal of a drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Disposal {
    /// The session.
    pub session: SessionId,
    /// The node that hosted it, if it was live.
    pub node: Option<NodeId>,
    /// How.
    pub kind: DisposalKind,
}

/// The most disposals a [`DrainReport`] lists one by one (and the most closed ids it lists):
/// past it, the report carries counts only, so the control reply stays far below NATS'
/// max_payload (1 MiB) whatever the size of the drained trees (1,000 disposals are ~120 KB).
pub const DRAIN_REPORT_CAP: usize = 1_000;

/// Disposals of a drain (or of one wave), by kind.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct DisposalCounts {
    /// [`DisposalKind::Released`].
    pub released: u64,
    /// [`DisposalKind::RegistryOnly`].
    pub registry_only: u64,
    /// [`DisposalKind::AlreadyDisposed`].
    pub already_disposed: u64,
}

impl DisposalCounts {
    /// Every disposal counted.
    pub fn total(&self) -> u64 {
        self.released + self.registry_only + self.already_disposed
    }

    /// Counts one disposal.
    pub fn add(&mut self, kind: DisposalKind) {
        match kind {
            DisposalKind::Released => self.released += 1,
            DisposalKind::RegistryOnly => self.registry_only += 1,
            DisposalKind::AlreadyDisposed => self.already_disposed += 1,
        }
    }
}

/// One disposal wave of a drain, counted.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaveSummary {
    /// The wave's disposals by kind.
    pub counts: DisposalCounts,
    /// The wave's sessions per hosting node (released there first); cold ones are not here.
    pub by_node: std::collections::BTreeMap<NodeId, u64>,
}

/// What a drain did, wave by wave (leaves first).
///
/// Counts are always complete ([`DrainReport::summary`], [`DrainReport::totals`],
/// [`DrainReport::closed_count`]); the per-session lists ([`DrainReport::closed`],
/// [`DrainReport::waves`]) stop after [`DRAIN_REPORT_CAP`] entries each, and
/// [`DrainReport::truncated`] says so.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DrainReport {
    /// Sessions whose admission was closed (sorted; the first [`DRAIN_REPORT_CAP`]).
    pub closed: Vec<SessionId>,
    /// How many sessions had their admission closed.
    #[serde(default)]
    pub closed_count: u64,
    /// Disposal waves; wave 0 holds the leaves. One list per wave, in disposal order (a wave's
    /// sessions were disposed concurrently: within a wave the order is the order of
    /// acknowledgement); in all, at most the first [`DRAIN_REPORT_CAP`] disposals: the lists of
    /// later waves are cut short or empty when [`DrainReport::truncated`].
    pub waves: Vec<Vec<Disposal>>,
    /// Per wave (as many as `waves`), complete counts.
    #[serde(default)]
    pub summary: Vec<WaveSummary>,
    /// Every disposal of the drain, by kind.
    #[serde(default)]
    pub totals: DisposalCounts,
    /// True when `closed` or `waves` leave sessions out (counts are still complete).
    #[serde(default)]
    pub truncated: bool,
    /// Problems that did not stop the drain (an unreachable node: its sessions were disposed
    /// from the registry), one line each.
    pub warnings: Vec<String>,
}

impl DrainReport {
    /// How many sessions the drain disposed (or found disposed), every wave.
    pub fn disposed(&self) -> u64 {
        self.totals.total()
    }

    /// How many disposals `waves` lists one by one.
    pub fn listed(&self) -> usize {
        self.waves.iter().map(Vec::len).sum()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "01936c1e-7a3b-7cde-8f00-000000000001";

    #[test]
    fn x1_n3_drain_request_progress_is_optional_and_a_subject_token() {
        let old: DrainRequest = serde_json::from_str(&format!(r#"{{"roots":["{ROOT}"]}}"#))
            .expect("a request without progress");
        assert_eq!(old.progress, None);
        // Not serialized when absent: the bytes are what older nodes accept.
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            format!(r#"{{"roots":["{ROOT}"]}}"#)
        );
        let with: DrainRequest =
            serde_json::from_str(&format!(r#"{{"roots":["{ROOT}"],"progress":"d-1"}}"#)).unwrap();
        assert_eq!(with.progress.as_ref().map(DrainId::as_str), Some("d-1"));
        for bad in ["a.b", "*", ">", "", "a b"] {
            let body = serde_json::json!({"roots": [ROOT], "progress": bad}).to_string();
            let err = crate::envelope::decode_request::<DrainRequest>("drain", body.as_bytes())
                .unwrap_err();
            assert_eq!(err.code, crate::envelope::ErrorCode::BadRequest);
            assert!(err.message.contains("drain id"), "{}", err.message);
            assert!(!err.message.contains('\n'), "{}", err.message);
        }
    }

    #[test]
    fn x1_n3_drain_progress_messages_are_pinned() {
        let d = DrainId::parse("d-1").unwrap();
        assert_eq!(
            serde_json::to_string(&DrainProgress::planned(d.clone(), vec![9, 3, 1])).unwrap(),
            r#"{"v":1,"drain":"d-1","phase":"planned","wave":0,"waves":3,"done":0,"total":13,"sizes":[9,3,1]}"#
        );
        assert_eq!(
            serde_json::to_string(&DrainProgress::disposing(d.clone(), 0, 3, 4, 9)).unwrap(),
            r#"{"v":1,"drain":"d-1","phase":"disposing","wave":0,"waves":3,"done":4,"total":9}"#
        );
        let done = DrainProgress::wave_done(d, 2, 3, 1);
        let text = serde_json::to_string(&done).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"drain":"d-1","phase":"wave_done","wave":2,"waves":3,"done":1,"total":1}"#
        );
        assert_eq!(serde_json::from_str::<DrainProgress>(&text).unwrap(), done);
    }
}
