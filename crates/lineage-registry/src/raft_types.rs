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
    /// [`BatchResponse`], Raft ids `u64`, members [`RaftMember`], snapshots as bytes.
    pub TypeConfig:
        D = CommandBatch,
        R = BatchResponse,
        NodeId = u64,
        Node = RaftMember,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The registry's Raft handle.
pub type RegistryRaft = openraft::Raft<TypeConfig>;
/// A Raft log id.
pub type LogId = openraft::LogId<u64>;
/// Raft metrics of one member.
pub type Metrics = openraft::RaftMetrics<u64, RaftMember>;
