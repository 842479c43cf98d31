//! [`Command`], the only way to change the registry, its [`CommandKind`] and the
//! [`CommandBatch`] a Raft log entry carries (G1).

use lineage_core::depth::MaxDepth;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
use serde::{Deserialize, Serialize};

use super::SessionState;

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
        /// A child's descriptor (P1), typed: it becomes JSON text only in the record
        /// ([`crate::StoredDescriptor`]).
        #[serde(default)]
        descriptor: Option<lineage_core::descriptor::SubagentDescriptor>,
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
        /// With `settled`: why its run ended, kept on the record (`lineage tree` shows it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<lineage_core::messages::StopReason>,
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
        /// Why it ends (a drain's reason: `disposed`, `deadline`, `budget`, `idle`; a one-shot
        /// run's own), kept on the record unless its settlement already gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<lineage_core::messages::StopReason>,
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
/// openraft 0.9 wrote (and fsynced) every `client_write` as its own append before it took the
/// next one, so one command per entry cost one fsync per command on the leader; a batch costs
/// one for all of its commands, and keeps an entry's encoding and apply per command cheap. Batching is internal to the members: clients send and
/// receive single commands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandBatch {
    /// The commands, in the order they are applied.
    pub commands: Vec<Command>,
}

impl std::fmt::Display for CommandBatch {
    /// What openraft's logs show of an entry's payload: its size, not its contents.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "batch of {} commands", self.commands.len())
    }
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
