//! What applying a command returns: [`CommandResponse`] (one per command, in a
//! [`BatchResponse`] per log entry) and [`RegistryRefusal`] when a rule (G2) refuses it.

use std::fmt;

use lineage_core::ids::{NodeId, RequestId, SessionId};
use serde::{Deserialize, Serialize};

use super::{Placement, SessionState};

/// The result of applying one log entry: one response per command of its [`CommandBatch`](super::CommandBatch), in
/// order (empty for Raft-internal entries: blank or membership).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// One response per command.
    pub responses: Vec<CommandResponse>,
}

/// What a session's record held at the moment a [`CommandResponse::Placed`] claim won: the
/// parts a cold resume carries on with that no epoch fences (usage is written by its host,
/// children by itself while it ran), so a resume may decide the claim on a record read from
/// any member (stale by a few writes) and still start from the record as it was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedSession {
    /// The usage its agent last reported, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<lineage_core::usage::SessionUsage>,
    /// Whether it has registered children.
    #[serde(default)]
    pub has_children: bool,
}

/// The result of applying one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CommandResponse {
    /// Nothing for the registry to do (kept on the wire; Raft-internal entries answer an empty
    /// [`BatchResponse`]).
    Noop,
    /// The session was registered.
    Registered {
        /// The new session.
        session: SessionId,
        /// Its depth.
        depth: u64,
    },
    /// The start was confirmed: the session is `running` on this placement.
    Started {
        /// The session.
        session: SessionId,
        /// Its placement (unchanged, or epoch 1 on the confirming node when it was unplaced).
        placement: Placement,
    },
    /// The claim won: this is the new placement.
    Placed {
        /// The new placement (epoch bumped).
        placement: Placement,
        /// What the record held when the claim won, for the resume that carries on from it (a
        /// read before the claim may lag these); `None` from a member older than this field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claimed: Option<Box<ClaimedSession>>,
    },
    /// The placement is released (K1, graceful shutdown).
    Released {
        /// The placement, now `released`.
        placement: Placement,
    },
    /// The usage is recorded.
    UsageRecorded {
        /// The session.
        session: SessionId,
    },
    /// The state was recorded.
    StateSet {
        /// The session.
        session: SessionId,
        /// The state now recorded.
        state: SessionState,
    },
    /// Admission is closed on every listed session (roots and all their descendants).
    AdmissionClosed {
        /// Every session now closed, parents before children.
        sessions: Vec<SessionId>,
    },
    /// Q5: the sessions a purge removed (the others named were not due).
    Purged {
        /// The removed sessions, in the order they were purged.
        sessions: Vec<SessionId>,
    },
    /// The session is disposed.
    Disposed {
        /// The session.
        session: SessionId,
        /// True when it was already disposed before this command (idempotent outcome).
        already: bool,
    },
    /// The lease was renewed.
    LeaseRenewed {
        /// The node.
        node: NodeId,
        /// The new lease end.
        lease_expires_at_ms: u64,
    },
    /// The run was recorded (or already was).
    RunAppended {
        /// The session.
        session: SessionId,
        /// Number of runs now recorded.
        runs: usize,
    },
    /// The descriptor was stored.
    DescriptorSet {
        /// The session.
        session: SessionId,
    },
    /// Stored results were forgotten ([`Command::ForgetResults`](super::Command::ForgetResults)).
    ResultsForgotten {
        /// How many.
        count: u64,
        /// True when more were due than one command forgets: send another.
        more: bool,
    },
    /// A rule refused the command; the state is untouched.
    Refused(RegistryRefusal),
}

/// Why the state machine refused a command (G2). Each variant is one rule; the message says
/// what to do next. Refusals leave the state untouched and are not recorded, so a retry is
/// evaluated again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum RegistryRefusal {
    /// The payload could not be decoded as a command.
    Malformed {
        /// What is wrong with it.
        reason: String,
    },
    /// The session header breaks L2 (origin, depth, seed length, lineage shape).
    InvalidHeader {
        /// The offending field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A session with this id is already registered (ids are never reused; no cycles).
    DuplicateSession {
        /// The id.
        session: SessionId,
    },
    /// Q5: the id was purged (or minted before the purge horizon), so it is never registered.
    IdPurged {
        /// The id.
        session: SessionId,
    },
    /// Q5: a purge named more sessions than one command takes.
    PurgeBatchTooLarge {
        /// How many it named.
        count: usize,
        /// The most one command takes.
        max: usize,
    },
    /// The parent named by the header is not registered.
    ParentMissing {
        /// The missing parent.
        parent: SessionId,
    },
    /// The parent is disposed and cannot take children.
    ParentDisposed {
        /// The disposed parent.
        parent: SessionId,
    },
    /// The header's root is not the parent's root.
    RootMismatch {
        /// The parent's root.
        expected: SessionId,
        /// The header's root.
        found: SessionId,
    },
    /// The header's depth is not the parent's depth plus one (D3).
    DepthMismatch {
        /// Parent depth + 1.
        expected: u64,
        /// The header's depth.
        found: u64,
    },
    /// The child would be deeper than the max depth (D3).
    DepthExceeded {
        /// The depth the child would have had.
        attempted_depth: u64,
        /// The cap in force.
        max_depth: u64,
    },
    /// Parent depth + 1 overflows the safe-integer range (D3).
    DepthOverflow {
        /// The parent's depth.
        parent_depth: u64,
    },
    /// A fan-out cap is reached (Q1): the numbers say which and how far.
    FanOutExceeded {
        /// The session that was to get a child.
        parent: SessionId,
        /// Which cap, the live count and the cap.
        exceeded: lineage_core::fanout::FanOutExceeded,
    },
    /// A budget over the parent's subtree (its own or an ancestor's) is spent (Q3).
    BudgetSpent(lineage_core::budget::BudgetSpent),
    /// The child's header carries no deadline, or a later one than its parent's (Q2).
    DeadlineBeyondParent {
        /// The parent.
        parent: SessionId,
        /// The parent's deadline.
        parent_deadline_ms: u64,
        /// The child header's deadline.
        found: Option<u64>,
    },
    /// Admission is closed at this ancestor: a drain began (X1).
    AdmissionClosed {
        /// The session that was to get a child.
        parent: SessionId,
        /// The nearest closed ancestor (or the parent itself).
        closed_at: SessionId,
    },
    /// No such session.
    UnknownSession {
        /// The id.
        session: SessionId,
    },
    /// The session is disposed; it cannot change any more.
    SessionDisposed {
        /// The id.
        session: SessionId,
    },
    /// The placement epoch moved on: another node claimed it first (K1).
    EpochMismatch {
        /// The session.
        session: SessionId,
        /// The epoch the claimer expected.
        expected: u64,
        /// The epoch recorded now.
        current: u64,
    },
    /// Dispose refused: children are not all disposed yet (X1, leaves first).
    UndisposedChildren {
        /// The session.
        session: SessionId,
        /// How many children are not disposed.
        count: usize,
        /// One of them.
        example: SessionId,
    },
    /// `SetState` cannot set `disposed`.
    UseDispose {
        /// The session.
        session: SessionId,
    },
    /// The request id was already used by a different kind of command.
    RequestIdReused {
        /// The request id.
        request_id: RequestId,
        /// The kind it was first used for.
        first_kind: String,
    },
    /// The session is still `starting` (registered, not hosted by any node yet): it cannot be
    /// claimed, change state or take children until its start is confirmed.
    NotStarted {
        /// The session.
        session: SessionId,
        /// What was refused, e.g. `a placement claim`.
        refused: String,
    },
    /// `confirm_start` or `expire_start` for a session that is not `starting` (any more).
    NotStarting {
        /// The session.
        session: SessionId,
        /// Its state now.
        state: SessionState,
    },
    /// `expire_start` before the start deadline.
    StartNotDue {
        /// The session.
        session: SessionId,
        /// When its start is due.
        start_deadline_ms: u64,
    },
    /// `confirm_start` by a node the session is not placed on.
    WrongNode {
        /// The session.
        session: SessionId,
        /// The node that tried to confirm.
        node: NodeId,
        /// The node it is placed on.
        placed_on: NodeId,
    },
    /// Z2: a node wrote, on its own identity subject (`registry.write.<sender>`), a command
    /// that acts as another node (a heartbeat or a placement claim for `node`).
    SenderMismatch {
        /// The node the subject names (the writer's identity).
        sender: NodeId,
        /// The node the command acts as.
        node: NodeId,
    },
}

impl RegistryRefusal {
    /// A short stable name of the rule, e.g. `parent_missing`.
    pub fn kind(&self) -> &'static str {
        match self {
            RegistryRefusal::Malformed { .. } => "malformed",
            RegistryRefusal::InvalidHeader { .. } => "invalid_header",
            RegistryRefusal::DuplicateSession { .. } => "duplicate_session",
            RegistryRefusal::IdPurged { .. } => "id_purged",
            RegistryRefusal::PurgeBatchTooLarge { .. } => "purge_batch_too_large",
            RegistryRefusal::ParentMissing { .. } => "parent_missing",
            RegistryRefusal::ParentDisposed { .. } => "parent_disposed",
            RegistryRefusal::RootMismatch { .. } => "root_mismatch",
            RegistryRefusal::DepthMismatch { .. } => "depth_mismatch",
            RegistryRefusal::DepthExceeded { .. } => "depth_exceeded",
            RegistryRefusal::DepthOverflow { .. } => "depth_overflow",
            RegistryRefusal::FanOutExceeded { .. } => "fan_out_exceeded",
            RegistryRefusal::DeadlineBeyondParent { .. } => "deadline_beyond_parent",
            RegistryRefusal::BudgetSpent(_) => "budget_spent",
            RegistryRefusal::AdmissionClosed { .. } => "admission_closed",
            RegistryRefusal::UnknownSession { .. } => "unknown_session",
            RegistryRefusal::SessionDisposed { .. } => "session_disposed",
            RegistryRefusal::EpochMismatch { .. } => "epoch_mismatch",
            RegistryRefusal::UndisposedChildren { .. } => "undisposed_children",
            RegistryRefusal::UseDispose { .. } => "use_dispose",
            RegistryRefusal::RequestIdReused { .. } => "request_id_reused",
            RegistryRefusal::NotStarted { .. } => "not_started",
            RegistryRefusal::NotStarting { .. } => "not_starting",
            RegistryRefusal::StartNotDue { .. } => "start_not_due",
            RegistryRefusal::WrongNode { .. } => "wrong_node",
            RegistryRefusal::SenderMismatch { .. } => "sender_mismatch",
        }
    }
}

impl fmt::Display for RegistryRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryRefusal::Malformed { reason } => {
                write!(f, "malformed registry command: {reason}; fix the payload and resend")
            }
            RegistryRefusal::InvalidHeader { field, reason } => write!(
                f,
                "invalid session header field {field}: {reason}; the header is refused, never stored"
            ),
            RegistryRefusal::DuplicateSession { session } => write!(
                f,
                "session {session} is already registered; mint a fresh session id (ids are never reused)"
            ),
            RegistryRefusal::IdPurged { session } => write!(
                f,
                "session id {session} was purged or minted before the purge horizon; mint a fresh session id (ids are never reused)"
            ),
            RegistryRefusal::PurgeBatchTooLarge { count, max } => write!(
                f,
                "a purge names {count} sessions but takes at most {max}; split it"
            ),
            RegistryRefusal::ParentMissing { parent } => write!(
                f,
                "parent session {parent} is not registered; register the parent first"
            ),
            RegistryRefusal::ParentDisposed { parent } => write!(
                f,
                "parent session {parent} is disposed; a disposed session cannot take children"
            ),
            RegistryRefusal::RootMismatch { expected, found } => write!(
                f,
                "header root_session {found} differs from the parent's root {expected}; compute the header with child_session_meta"
            ),
            RegistryRefusal::DepthMismatch { expected, found } => write!(
                f,
                "header delegation_depth {found} is not parent depth + 1 = {expected}; resolve the depth with resolve_child_depth"
            ),
            RegistryRefusal::DepthExceeded {
                attempted_depth,
                max_depth,
            } => write!(
                f,
                "subagent depth {attempted_depth} exceeds max depth {max_depth}; finish without delegating further or raise max_depth"
            ),
            RegistryRefusal::DepthOverflow { parent_depth } => write!(
                f,
                "child depth overflows the safe-integer range (parent depth {parent_depth}); the lineage is corrupt or runaway"
            ),
            RegistryRefusal::FanOutExceeded { exceeded, .. } => write!(f, "{exceeded}"),
            RegistryRefusal::BudgetSpent(spent) => write!(f, "{spent}"),
            RegistryRefusal::DeadlineBeyondParent {
                parent,
                parent_deadline_ms,
                found,
            } => write!(
                f,
                "the child's header deadline ({}) is later than its parent {parent}'s deadline {parent_deadline_ms} ms; compute the header with child_session_meta (a child inherits its parent's deadline and can only shorten it)",
                found.map_or_else(|| "none".to_owned(), |d| format!("{d} ms"))
            ),
            RegistryRefusal::AdmissionClosed { parent, closed_at } => write!(
                f,
                "admission is closed at {closed_at} (a drain began), so {parent} cannot take new children; do not spawn during a drain"
            ),
            RegistryRefusal::UnknownSession { session } => {
                write!(f, "session {session} is not registered; check the id")
            }
            RegistryRefusal::SessionDisposed { session } => write!(
                f,
                "session {session} is disposed and cannot change; start a new session instead"
            ),
            RegistryRefusal::EpochMismatch {
                session,
                expected,
                current,
            } => write!(
                f,
                "placement of {session} is at epoch {current}, not {expected}: another node claimed it; read the placement and retry or give up"
            ),
            RegistryRefusal::UndisposedChildren {
                session,
                count,
                example,
            } => write!(
                f,
                "session {session} has {count} undisposed children (e.g. {example}); dispose children first (leaves first)"
            ),
            RegistryRefusal::UseDispose { session } => write!(
                f,
                "set_state cannot dispose {session}; send a dispose command instead"
            ),
            RegistryRefusal::RequestIdReused {
                request_id,
                first_kind,
            } => write!(
                f,
                "request id {request_id} was already used for {first_kind}; use a fresh request id for a new command"
            ),
            RegistryRefusal::NotStarted { session, refused } => write!(
                f,
                "session {session} is still starting (registered, not yet hosted by any node), so {refused} is refused; retry shortly: it runs once its node confirms the start, or is disposed at its start deadline"
            ),
            RegistryRefusal::NotStarting { session, state } => write!(
                f,
                "session {session} is {}, not starting: its start was already confirmed or it ended; there is no start to confirm or expire",
                state.as_str()
            ),
            RegistryRefusal::StartNotDue {
                session,
                start_deadline_ms,
            } => write!(
                f,
                "the start of session {session} is due at {start_deadline_ms} ms, not overdue yet; expire it only after its deadline"
            ),
            RegistryRefusal::WrongNode {
                session,
                node,
                placed_on,
            } => write!(
                f,
                "session {session} is placed on node {placed_on}, not {node}: only the node it is placed on confirms its start"
            ),
            RegistryRefusal::SenderMismatch { sender, node } => write!(
                f,
                "node {sender} cannot act as node {node}: a node heartbeats and claims placements only as itself"
            ),
        }
    }
}
