//! The registry's data model and its command language (G1).
//!
//! [`SessionRecord`] and [`NodeRecord`] are what the registry stores; [`Command`] is the only way
//! to change them (a Raft log entry carries a [`CommandBatch`] of them); [`CommandResponse`] is
//! what applying a command returns, including [`RegistryRefusal`] when a rule (G2) refuses it.
//!
//! | file | what |
//! |---|---|
//! | `types.rs` | the records: [`Placement`], [`Admission`], [`SessionRecord`], [`NodeRecord`], [`ChildSummary`] |
//! | `types/command.rs` | [`Command`], [`CommandKind`], [`CommandBatch`] |
//! | `types/response.rs` | [`CommandResponse`], [`BatchResponse`], [`RegistryRefusal`] |

use std::collections::BTreeSet;

use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, RunId, SessionId};
use serde::{Deserialize, Serialize};

mod command;
mod response;

pub use command::{Command, CommandBatch, CommandKind};
pub use response::{BatchResponse, ClaimedSession, CommandResponse, RegistryRefusal};

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
    /// Why it ended, once `settled` or `disposed`: its settlement's reason, or else the reason
    /// of whatever disposed it (a drain's `disposed`, `deadline`, `budget`, `idle`). Cleared
    /// when a settled session runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<lineage_core::messages::StopReason>,
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
            stop_reason: None,
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
