//! [`LeaseMarks`]: the node lease as this node last saw it (K1, R1). The rules that read it
//! are pure (`lineage_core::lease`); the host applies them in [`crate::fence`]. And
//! [`is_sweeper`]: which node runs the cluster's sweeps, by the nodes' leases.

use lineage_core::ids::NodeId;
use lineage_registry::types::NodeRecord;

/// The node lease as this node last saw it: one part of the host's state
/// (`Shared::lease`).
#[derive(Debug, Default)]
pub(crate) struct LeaseMarks {
    /// When the lease was last renewed (ms; 0: never), to see a lapse.
    pub(crate) last_renewal_ms: std::sync::atomic::AtomicU64,
    /// Until when this node surely holds its lease (ms; 0: not yet), once the placements were
    /// checked after a lapse: past it, its inbox readers take nothing.
    pub(crate) lease_until_ms: std::sync::atomic::AtomicU64,
}

/// True when `me` is the cluster's sweeper at `now_ms`: the smallest id among the nodes whose
/// lease is current (`me` counted as current). Pure. The takeover sweep and the birth sweep
/// run there.
pub fn is_sweeper(nodes: &[NodeRecord], me: &NodeId, now_ms: u64) -> bool {
    let sweeper = nodes
        .iter()
        .filter(|n| n.lease_expires_at_ms > now_ms || &n.node == me)
        .map(|n| &n.node)
        .chain(std::iter::once(me))
        .min();
    sweeper == Some(me)
}
