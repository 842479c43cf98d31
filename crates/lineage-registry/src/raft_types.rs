//! The openraft type configuration of the registry group.

use std::fmt;
use std::io::Cursor;

use lineage_core::ids::NodeId;
use serde::{Deserialize, Serialize};

use crate::types::{BatchResponse, CommandBatch};

/// What a Raft member record carries: the lineage node that hosts the voter (or learner).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftMember {
    /// The lineage node id of the process hosting this Raft member.
    pub node: Option<NodeId>,
}

impl RaftMember {
    /// A member hosted by `node`.
    pub fn new(node: NodeId) -> Self {
        Self { node: Some(node) }
    }
}

impl fmt::Display for RaftMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("-"),
        }
    }
}

openraft::declare_raft_types!(
    /// The registry's openraft types: log payload [`CommandBatch`] (group commit), response
    /// [`BatchResponse`], Raft ids `u64`, members [`RaftMember`]; openraft's defaults otherwise
    /// (terms `u64`, the leader id of the "advanced" mode, which is 0.9's default: stores written
    /// by 0.9 read back unchanged).
    pub TypeConfig:
        D = CommandBatch,
        R = BatchResponse,
        NodeId = u64,
        Node = RaftMember,
        AsyncRuntime = openraft::TokioRuntime,
);

/// What a snapshot carries in memory (the state machine's and the network's snapshot data).
pub type SnapshotData = Cursor<Vec<u8>>;

/// The registry's Raft handle.
pub type RegistryRaft = openraft::Raft<TypeConfig, crate::storage::StateMachineStore>;
/// A Raft log id.
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
/// A Raft vote.
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
/// A log entry.
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
/// The membership as stored in the state machine.
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
/// A snapshot's meta.
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot as the state machine builds and installs it.
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotData>;
/// Raft metrics of one member.
pub type Metrics = openraft::RaftMetrics<TypeConfig>;

/// A copy of `raft`'s current metrics.
pub fn current_metrics(raft: &RegistryRaft) -> Metrics {
    use openraft::async_runtime::watch::WatchReceiver;
    raft.metrics().borrow_watched().clone()
}

/// How long ago (milliseconds) a quorum last acknowledged this leader; `None` on a member that
/// is not a leader or never heard one.
pub fn millis_since_quorum_ack(m: &Metrics) -> Option<u64> {
    use openraft::Instant;
    m.last_quorum_acked
        .as_ref()
        .map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX))
}
