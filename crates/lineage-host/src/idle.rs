//! The idle sweep: a top-level session hosted here that stayed idle past its idle TTL is
//! drained, children first, with stop reason `idle` (the rule is `lineage_core::idle`).
//!
//! Every node sweeps its own live roots (it alone knows whether their turns run and when they
//! last ended), every [`crate::deadlines::DEADLINE_SWEEP_EVERY`] or lease period. For each root
//! with a TTL that [`idle_verdict`] finds due, the registry's record of its subtree is read and
//! the root is drained only if no descendant is starting or running ([`tree_busy`]): a child
//! still at work keeps its root, and the child's settlement, accepted into the root's log,
//! starts the idle time again. A busy tree is activity too: the root's idle time starts again
//! from that read, so a root with a long-running child costs one subtree read per TTL, not one
//! per sweep. A drain that fails is retried by the next sweep.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use lineage_core::idle::{idle_verdict, tree_busy, IdleVerdict, RootActivity};
use lineage_core::ids::SessionId;
use lineage_core::messages::StopReason;

use crate::deadlines::DeadlineSweepReport;
use crate::error::HostError;
use crate::shared::Shared;

impl Shared {
    /// The live roots here whose idle TTL has passed at `now` (by what this node knows).
    fn idle_roots_due(&self, now: u64) -> Vec<SessionId> {
        let Ok(agents) = self.live.agents.lock() else {
            return Vec::new();
        };
        agents
            .iter()
            .filter(|(_, h)| h.header.parent_session().is_none())
            .filter(|(_, h)| {
                let activity = RootActivity {
                    in_turn: h.turn.lock().map(|t| t.is_some()).unwrap_or(true),
                    idle_since_ms: h.idle_since_ms.load(Ordering::Relaxed),
                };
                idle_verdict(h.idle_ttl, activity, now) == IdleVerdict::Due
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// One idle sweep (see the module documentation).
    pub(crate) async fn sweep_idle_roots(
        self: &Arc<Self>,
    ) -> Result<DeadlineSweepReport, HostError> {
        self.lifetime.check_running()?;
        let mut quiet = Vec::new();
        for root in self.idle_roots_due(self.now()) {
            let records = self.registry.subtree(root.clone()).await?;
            let descendants = records.iter().filter(|r| r.id() != &root).map(|r| r.state);
            match tree_busy(descendants) {
                false => quiet.push(root),
                true => {
                    if let Some(handle) = self.live.handle(&root) {
                        handle.idle_since_ms.store(self.now(), Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(self.drain_subtrees(quiet, StopReason::Idle).await)
    }
}
