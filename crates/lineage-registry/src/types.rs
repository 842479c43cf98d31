//! The registry's data model and its command language (G1).
//!
//! [`SessionRecord`] and [`NodeRecord`] are what the registry stores; [`Command`] is the only way
//! to change them (a Raft log entry carries a [`CommandBatch`] of them); [`CommandResponse`] is
//! what applying a command returns, including [`RegistryRefusal`] when a rule (G2) refuses it.

use std::collections::BTreeSet;
use std::fmt;

use lineage_core::depth::MaxDepth;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
use serde::{Deserialize, Serialize};

/// Which node hosts a session, and the claim epoch (K1). The epoch grows by one with every
/// successful [`Command::ClaimPlacement`]; only the holder of the newest epoch may host it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The hosting node.
    pub node: NodeId,
    /// The claim epoch (registration starts at 1 when a node is given, 0 means never placed).
    pub epoch: u64,
    /// K1, graceful shutdown: the node handed the session off ([`Command::ReleasePlacement`]):
    /// it hosts it no more, nothing was cut short, and any node may resume it at once (the
    /// next claim clears it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

impl Placement {
    /// The node that hosts the session now: the placement's node, unless it released it.
    pub fn host(&self) -> Option<&NodeId> {
        (!self.released).then_some(&self.node)
    }
}

/// The lifecycle state of a session (X2): defined once in `lineage-core`
/// ([`lineage_core::lifecycle`]) and re-exported here so `lineage_registry::types::SessionState`
/// keeps working.
pub use lineage_core::lifecycle::SessionState;

/// Whether a session accepts new children (X1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Admission {
    /// New children may be registered below this session.
    Open,
    /// A drain began (or the session was disposed): no new children below it.
    Closed,
}

/// Everything the registry knows about one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The frozen header (validated, L2).
    pub header: SessionHeader,
    /// The persisted subagent descriptor (P1), as its compact JSON text.
    pub descriptor: Option<crate::StoredDescriptor>,
    /// Which node hosts it, with the claim epoch.
    pub placement: Option<Placement>,
    /// Activation state.
    pub state: SessionState,
    /// Admission flag.
    pub admission: Admission,
    /// Direct children (durable lineage). Like `runs` and `max_depth`, left out of the JSON
    /// when empty (most sessions are leaves: a smaller snapshot) and read as empty when absent.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub children: BTreeSet<SessionId>,
    /// Runs of this session, oldest first (one pointer inline, `ThinVec`: most records hold
    /// none or one, and every record pays its inline size; issue 13).
    #[serde(default, skip_serializing_if = "thin_vec::ThinVec::is_empty")]
    pub runs: thin_vec::ThinVec<RunId>,
    /// The max depth in force for this session's subtree, if one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
    /// When it was registered (caller's clock, ms since the Unix epoch).
    pub created_at_ms: u64,
    /// When it last changed (caller's clock).
    pub updated_at_ms: u64,
    /// When its start was due (caller's clock): set at registration, `at_ms` plus the
    /// command's `start_within_ms`. Past it, a session still `starting` is an overdue birth
    /// that the sweeper disposes. Kept once it started, as a record of the birth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_deadline_ms: Option<u64>,
    /// The usage its agent last reported (`record_usage`), if any. Boxed, like the other
    /// fields most records never set: a record's inline size is paid by every session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<lineage_core::usage::SessionUsage>>,
    /// The fan-out caps in force for its tree (Q1), recorded at birth.
    #[serde(
        default,
        skip_serializing_if = "lineage_core::fanout::FanOut::is_uncapped"
    )]
    pub fan_out: lineage_core::fanout::FanOut,
    /// The budget over its own subtree (Q3), recorded at birth, if it was given one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Box<lineage_core::budget::Budget>>,
    /// Q5: the usage of its purged descendants (carried up when each was purged), so its
    /// subtree's sum, and any budget above it, stays what it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purged_usage: Option<Box<lineage_core::usage::UsageTotal>>,
}

impl SessionRecord {
    /// A record of `header` in `state` and nothing else: no descriptor, placement, children,
    /// runs, limits or usage, open to admission, timestamps 0 (what tests and tools build on,
    /// with struct update syntax for the fields they set).
    pub fn new(header: SessionHeader, state: SessionState) -> Self {
        SessionRecord {
            header,
            descriptor: None,
            placement: None,
            state,
            admission: Admission::Open,
            children: BTreeSet::new(),
            runs: thin_vec::ThinVec::new(),
            max_depth: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            start_deadline_ms: None,
            usage: None,
            fan_out: Default::default(),
            budget: None,
            purged_usage: None,
        }
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        self.header.id()
    }

    /// The delegation depth (0 for a top-level session).
    pub fn depth(&self) -> u64 {
        self.header.delegation_depth().unwrap_or(0)
    }

    /// True for a one-shot child (its descriptor's `mode`): never resumed, takes no followup.
    pub fn is_one_shot(&self) -> bool {
        self.descriptor.as_ref().and_then(|d| d.mode()).as_deref()
            == Some(lineage_core::descriptor::SubagentShape::OneShot.as_str())
    }

    /// Why this session's state refuses it new children (G2, X1): disposed, or `starting`
    /// (not hosted yet, so it cannot delegate, and the sweeper must always be able to dispose
    /// an overdue birth). `RegisterSession` applies this to the parent.
    pub fn child_refusal_by_state(&self) -> Option<RegistryRefusal> {
        match self.state {
            SessionState::Disposed => Some(RegistryRefusal::ParentDisposed {
                parent: self.id().clone(),
            }),
            SessionState::Starting => Some(RegistryRefusal::NotStarted {
                session: self.id().clone(),
                refused: "a child".to_owned(),
            }),
            SessionState::Running | SessionState::Waiting | SessionState::Settled => None,
        }
    }

    /// Why this record alone refuses new children: [`SessionRecord::child_refusal_by_state`],
    /// or its admission is closed (a drain began at it or above it). The registry also refuses
    /// below a closed ancestor (it has the whole tree); a node reading one record can refuse
    /// early with the same refusal the registry would give.
    pub fn child_refusal(&self) -> Option<RegistryRefusal> {
        self.child_refusal_by_state().or(match self.admission {
            Admission::Closed => Some(RegistryRefusal::AdmissionClosed {
                parent: self.id().clone(),
                closed_at: self.id().clone(),
            }),
            Admission::Open => None,
        })
    }
}

/// A node's liveness record: its lease is renewed by [`Command::Heartbeat`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node.
    pub node: NodeId,
    /// The lease runs until this time (caller's clock); past it, the node's sessions may be claimed.
    pub lease_expires_at_ms: u64,
    /// Time of the last heartbeat.
    pub last_heartbeat_ms: u64,
    /// Free-form address or info the node advertises (e.g. its control subject).
    pub info: Option<String>,
}

/// One change to the registry: applied atomically, in log order (a Raft log entry carries one
/// or more, see [`CommandBatch`]).
///
/// Every command carries a client-chosen `request_id` (a retried command with the same id
/// returns the first result) and `at_ms`, the caller's clock: the state machine never reads a
/// clock, so applying the log is deterministic on every voter.
// Commands are moved, not stored in bulk (a batch holds a few): boxing the header would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// Register a new session: a top-level session, or a child of a registered parent (the
    /// commit is the birth). Written by the node that hosts it, after its creation window is
    /// durable (`hosted`), it is recorded `running` at once. Otherwise it is recorded
    /// `starting` until its hosting node confirms the start ([`Command::ConfirmStart`]), due
    /// `start_within_ms` after `at_ms`.
    RegisterSession {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The frozen header (revalidated at apply time).
        header: SessionHeader,
        /// The descriptor, if already known.
        #[serde(default)]
        descriptor: Option<serde_json::Value>,
        /// The max depth the caller enforces; the stricter of this and the tree's recorded max
        /// depth applies.
        #[serde(default)]
        max_depth: Option<MaxDepth>,
        /// The fan-out caps the caller enforces (Q1); the stricter of these and the tree's
        /// recorded ones apply.
        #[serde(
            default,
            skip_serializing_if = "lineage_core::fanout::FanOut::is_uncapped"
        )]
        fan_out: lineage_core::fanout::FanOut,
        /// A budget over the new session's subtree (Q3); its ancestors' budgets apply too.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<lineage_core::budget::Budget>,
        /// The node that will host it (placement epoch 1), if any.
        #[serde(default)]
        node: Option<NodeId>,
        /// The first run, if any.
        #[serde(default)]
        run: Option<RunId>,
        /// How long the hosting node has to confirm the start (ms from `at_ms`); `None`:
        /// [`lineage_core::lifecycle::DEFAULT_START_WITHIN_MS`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_within_ms: Option<u64>,
        /// Written by `node` itself, which already holds the session's creation window in its
        /// log and launches it once this commits: the birth is `running` at once, with no start
        /// deadline. An identity claim: only `node` may write it (Z2).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        hosted: bool,
    },
    /// The hosting node confirms the start of a `starting` session (its creation window is
    /// durable): `starting -> running`, fenced by the placement (node and epoch). A session
    /// registered without a node is placed on `node` at epoch 1 by it (`expected_epoch` 0).
    ConfirmStart {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The session.
        session: SessionId,
        /// The node that hosts it now.
        node: NodeId,
        /// The placement epoch the node was given (1 at registration; 0 when unplaced).
        expected_epoch: u64,
    },
    /// The sweeper disposes an overdue birth: refused unless the session is still `starting`
    /// and its start deadline is at or before `at_ms` (so a birth that started meanwhile is
    /// never disposed by it).
    ExpireStart {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock (the sweep's now).
        at_ms: u64,
        /// The session.
        session: SessionId,
    },
    /// Claim a session's placement by compare-and-swap on the epoch (K1): one winner.
    ClaimPlacement {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The session to host.
        session: SessionId,
        /// The claiming node.
        node: NodeId,
        /// The epoch the claimer last saw (0 when never placed).
        expected_epoch: u64,
        /// The run the claimer starts, recorded in the same write (a cold resume).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run: Option<RunId>,
        /// Also record the session as `running` in the same write (a cold resume).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        activate: bool,
    },
    /// K1, graceful shutdown: the node the session is placed on hands it off, idle, with
    /// nothing cut short; the placement stays (node and epoch) marked `released`, so any node
    /// may resume it at once and re-adoption does not treat it as cut short. Only by that node
    /// at that epoch (a Z2 identity claim like `ClaimPlacement`).
    ReleasePlacement {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The session.
        session: SessionId,
        /// The releasing node (the one it is placed on).
        node: NodeId,
        /// The epoch the releasing node holds.
        expected_epoch: u64,
    },
    /// Record the usage a hosted agent last reported (Q3, F-part of issue 11), replacing the
    /// session's previous one; fenced like `SetState`.
    RecordUsage {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The session.
        session: SessionId,
        /// Its usage now.
        usage: lineage_core::usage::SessionUsage,
        /// Fencing: refused (`epoch_mismatch`) unless the session's placement epoch is this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected_epoch: Option<u64>,
    },
    /// Record an activation state (`running`, `waiting`, `settled`); use `Dispose` to dispose.
    SetState {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The session.
        session: SessionId,
        /// The new state.
        state: SessionState,
        /// Fencing: refused (`epoch_mismatch`) unless the session's placement epoch is this one,
        /// so a host whose session was claimed by another node (K1) cannot change its state.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected_epoch: Option<u64>,
    },
    /// Close admission on whole subtrees (X1): one entry, so no child slips in halfway.
    CloseAdmission {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// Roots of the subtrees to close.
        roots: Vec<SessionId>,
    },
    /// Dispose a session; refused while it has undisposed children (X1, child first).
    Dispose {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The session.
        session: SessionId,
    },
    /// Renew a node's lease.
    Heartbeat {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The node.
        node: NodeId,
        /// Lease length from `at_ms`.
        lease_ms: u64,
        /// Address or info to advertise.
        #[serde(default)]
        info: Option<String>,
    },
    /// Record a new run of a session.
    AppendRun {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The session.
        session: SessionId,
        /// The run.
        run: RunId,
    },
    /// Store (or replace) a session's descriptor (P1).
    SetDescriptor {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The session.
        session: SessionId,
        /// The descriptor as JSON.
        descriptor: serde_json::Value,
    },
    /// Q5: purge these disposed sessions (record gone, id tombstoned), each only if it is due
    /// at `at_ms` under a retention of `disposed_after_ms` (see
    /// `lineage_core::retention::purge_due`); the others are left as they are. At most
    /// `lineage_core::retention::PURGE_BATCH` ids.
    Purge {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// The sessions, in the order to purge them (leaves first).
        sessions: Vec<SessionId>,
        /// The retention of disposed sessions.
        disposed_after_ms: u64,
    },
    /// Q5, G2: forget the stored results of the commands accepted more than `kept_ms` before
    /// `at_ms` (the idempotency window a cluster configures, `retention.request_results_ms`,
    /// shorter than the built-in [`crate::state::REQUEST_RETENTION_MS`]), oldest first, at most
    /// [`crate::state::FORGET_BATCH`]. A retry of a forgotten request is evaluated as a new
    /// command. Refused (changing nothing) when `kept_ms` is under
    /// [`crate::state::MIN_RESULTS_KEPT_MS`]. Its own result is not kept: applied again, it
    /// forgets nothing more.
    ForgetResults {
        /// Idempotency key.
        request_id: RequestId,
        /// Caller's clock.
        at_ms: u64,
        /// How long a result is kept.
        kept_ms: u64,
    },
}

impl Command {
    /// The idempotency key.
    pub fn request_id(&self) -> &RequestId {
        match self {
            Command::RegisterSession { request_id, .. }
            | Command::ConfirmStart { request_id, .. }
            | Command::ExpireStart { request_id, .. }
            | Command::ClaimPlacement { request_id, .. }
            | Command::ReleasePlacement { request_id, .. }
            | Command::SetState { request_id, .. }
            | Command::RecordUsage { request_id, .. }
            | Command::CloseAdmission { request_id, .. }
            | Command::Dispose { request_id, .. }
            | Command::Heartbeat { request_id, .. }
            | Command::AppendRun { request_id, .. }
            | Command::SetDescriptor { request_id, .. }
            | Command::Purge { request_id, .. }
            | Command::ForgetResults { request_id, .. } => request_id,
        }
    }

    /// The caller's clock.
    pub fn at_ms(&self) -> u64 {
        match self {
            Command::RegisterSession { at_ms, .. }
            | Command::ConfirmStart { at_ms, .. }
            | Command::ExpireStart { at_ms, .. }
            | Command::ClaimPlacement { at_ms, .. }
            | Command::ReleasePlacement { at_ms, .. }
            | Command::SetState { at_ms, .. }
            | Command::RecordUsage { at_ms, .. }
            | Command::CloseAdmission { at_ms, .. }
            | Command::Dispose { at_ms, .. }
            | Command::Heartbeat { at_ms, .. }
            | Command::AppendRun { at_ms, .. }
            | Command::SetDescriptor { at_ms, .. }
            | Command::Purge { at_ms, .. }
            | Command::ForgetResults { at_ms, .. } => *at_ms,
        }
    }

    /// The command's wire name, e.g. `register_session`.
    pub fn kind(&self) -> &'static str {
        self.command_kind().as_str()
    }

    /// The command's kind.
    pub fn command_kind(&self) -> CommandKind {
        match self {
            Command::RegisterSession { .. } => CommandKind::RegisterSession,
            Command::ConfirmStart { .. } => CommandKind::ConfirmStart,
            Command::ExpireStart { .. } => CommandKind::ExpireStart,
            Command::ClaimPlacement { .. } => CommandKind::ClaimPlacement,
            Command::ReleasePlacement { .. } => CommandKind::ReleasePlacement,
            Command::SetState { .. } => CommandKind::SetState,
            Command::RecordUsage { .. } => CommandKind::RecordUsage,
            Command::CloseAdmission { .. } => CommandKind::CloseAdmission,
            Command::Dispose { .. } => CommandKind::Dispose,
            Command::Heartbeat { .. } => CommandKind::Heartbeat,
            Command::AppendRun { .. } => CommandKind::AppendRun,
            Command::SetDescriptor { .. } => CommandKind::SetDescriptor,
            Command::Purge { .. } => CommandKind::Purge,
            Command::ForgetResults { .. } => CommandKind::ForgetResults,
        }
    }

    /// Whether the state keeps this command's result under its request id (idempotency). A
    /// heartbeat's is not kept: applied again it changes nothing (a lease only grows), and
    /// every node writes one every heartbeat period, so kept for the idempotency window they
    /// were most of an idle registry's memory and snapshot (2 per second per node at the
    /// default 500 ms: 864,000 results a day in a cluster of 5 nodes).
    pub fn keeps_result(&self) -> bool {
        match self {
            Command::Heartbeat { .. } | Command::ForgetResults { .. } => false,
            Command::RegisterSession { .. }
            | Command::ConfirmStart { .. }
            | Command::ExpireStart { .. }
            | Command::ClaimPlacement { .. }
            | Command::ReleasePlacement { .. }
            | Command::SetState { .. }
            | Command::RecordUsage { .. }
            | Command::CloseAdmission { .. }
            | Command::Dispose { .. }
            | Command::AppendRun { .. }
            | Command::SetDescriptor { .. }
            | Command::Purge { .. } => true,
        }
    }
}

/// The kind of a [`Command`] (its wire tag `cmd`), as the idempotency table keeps it with each
/// stored result: one byte, not a string per result (issue 13, memory per session). It reads
/// and writes as the same snake_case name as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandKind {
    /// `register_session`
    RegisterSession,
    /// `confirm_start`
    ConfirmStart,
    /// `expire_start`
    ExpireStart,
    /// `claim_placement`
    ClaimPlacement,
    /// `release_placement`
    ReleasePlacement,
    /// `set_state`
    SetState,
    /// `record_usage`
    RecordUsage,
    /// `close_admission`
    CloseAdmission,
    /// `dispose`
    Dispose,
    /// `heartbeat`
    Heartbeat,
    /// `append_run`
    AppendRun,
    /// `set_descriptor`
    SetDescriptor,
    /// `purge`
    Purge,
    /// `forget_results`
    ForgetResults,
}

impl CommandKind {
    /// Every kind.
    pub const ALL: [CommandKind; 14] = [
        CommandKind::RegisterSession,
        CommandKind::ConfirmStart,
        CommandKind::ExpireStart,
        CommandKind::ClaimPlacement,
        CommandKind::ReleasePlacement,
        CommandKind::SetState,
        CommandKind::RecordUsage,
        CommandKind::CloseAdmission,
        CommandKind::Dispose,
        CommandKind::Heartbeat,
        CommandKind::AppendRun,
        CommandKind::SetDescriptor,
        CommandKind::Purge,
        CommandKind::ForgetResults,
    ];

    /// The wire name, e.g. `register_session`.
    pub fn as_str(self) -> &'static str {
        match self {
            CommandKind::RegisterSession => "register_session",
            CommandKind::ConfirmStart => "confirm_start",
            CommandKind::ExpireStart => "expire_start",
            CommandKind::ClaimPlacement => "claim_placement",
            CommandKind::ReleasePlacement => "release_placement",
            CommandKind::SetState => "set_state",
            CommandKind::RecordUsage => "record_usage",
            CommandKind::CloseAdmission => "close_admission",
            CommandKind::Dispose => "dispose",
            CommandKind::Heartbeat => "heartbeat",
            CommandKind::AppendRun => "append_run",
            CommandKind::SetDescriptor => "set_descriptor",
            CommandKind::Purge => "purge",
            CommandKind::ForgetResults => "forget_results",
        }
    }
}

/// What one Raft log entry carries: the commands a member received while the previous entries
/// were being made durable, applied in order as if each were its own entry (group commit).
///
/// openraft 0.9 writes (and fsyncs) every `client_write` as its own append before it takes the
/// next one, so one command per entry would cost one fsync per command on the leader; a batch
/// costs one for all of its commands. Batching is internal to the members: clients send and
/// receive single commands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandBatch {
    /// The commands, in the order they are applied.
    pub commands: Vec<Command>,
}

/// The result of applying one log entry: one response per command of its [`CommandBatch`], in
/// order (empty for Raft-internal entries: blank or membership).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// One response per command.
    pub responses: Vec<CommandResponse>,
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
    /// Stored results were forgotten ([`Command::ForgetResults`]).
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

/// A direct child with counts of its subagent descendants (I1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSummary {
    /// The child's record.
    pub record: SessionRecord,
    /// Number of subagent descendants of the child (not counting itself).
    pub count: u64,
    /// How many of those are `running`.
    pub running_count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_kind_reads_and_writes_as_its_wire_name() {
        let mut names = std::collections::BTreeSet::new();
        for kind in CommandKind::ALL {
            let json = serde_json::to_string(&kind).expect("encode");
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(
                serde_json::from_str::<CommandKind>(&json).expect("decode"),
                kind
            );
            assert!(names.insert(kind.as_str()), "{kind:?} twice");
        }
        // A command's tag on the wire is its kind's name.
        let heartbeat = Command::Heartbeat {
            request_id: RequestId::parse("r1").expect("request id"),
            at_ms: 1,
            node: NodeId::parse("node-1").expect("node"),
            lease_ms: 1,
            info: None,
        };
        let wire = serde_json::to_value(&heartbeat).expect("encode");
        assert_eq!(wire["cmd"], heartbeat.kind());
        assert_eq!(heartbeat.command_kind(), CommandKind::Heartbeat);
    }
}
