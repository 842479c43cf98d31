//! The deadline sweeper (Q2): a subtree past its deadline is drained, children first, with stop
//! reason `deadline`.
//!
//! A session's deadline is frozen in its header at birth (`min(parent's, requested)`, see
//! `lineage_core::deadline`), and the registry indexes the undisposed ones by deadline. Every
//! [`DEADLINE_SWEEP_EVERY`] (or lease period, when shorter) the cluster's sweeper (the live
//! node with the smallest id, [`is_sweeper`], as for births and takeovers) reads one page of
//! overdue sessions and drains each subtree that `deadline_drain_roots` (pure, in
//! `lineage-core`) picks, one drain per root, as `lineage drain` would: admission closed
//! first, live descendants stopped, leaves disposed first; every turn cut short and every
//! settlement says `deadline`. The drained root's parent, when it has one (not overdue itself),
//! gets the root's settlement notice with stop reason `deadline`; a one-shot root's caller
//! gets its result with it.
//!
//! A sweeper that dies mid-drain leaves the rest overdue and undisposed: the next sweeper (or
//! the next sweep) drains them again, which is idempotent (a drain of a partly disposed subtree
//! disposes what is left).

use std::sync::Arc;
use std::time::Duration;

use lineage_core::deadline::{deadline_drain_roots, OverdueSession};
use lineage_core::ids::SessionId;
use lineage_core::messages::StopReason;
use lineage_registry::state::OVERDUE_DEADLINES_PAGE;
use lineage_registry::types::SessionRecord;

use crate::error::HostError;
use crate::lease::is_sweeper;
use crate::shared::Shared;

/// How often the sweeper looks for overdue deadlines (at most; a shorter lease is used instead).
pub const DEADLINE_SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What one deadline sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadlineSweepReport {
    /// Roots of the subtrees drained by this sweep.
    pub drained: Vec<SessionId>,
    /// Roots whose drain failed, with the one-line reason (tried again next time).
    pub failed: Vec<(SessionId, String)>,
}

/// The sweeper's view of an overdue record. Pure; `None` for a record without a deadline.
pub fn overdue_session(record: &SessionRecord) -> Option<OverdueSession> {
    Some(OverdueSession {
        session: record.id().clone(),
        parent: record.header.parent_session().cloned(),
        deadline_at_ms: record.header.deadline_at_ms()?,
    })
}

impl Shared {
    /// One deadline sweep (see the module documentation); nothing unless this node is the
    /// sweeper.
    pub(crate) async fn sweep_deadlines(
        self: &Arc<Self>,
    ) -> Result<DeadlineSweepReport, HostError> {
        self.lifetime.check_running()?;
        let now = self.now();
        let nodes = self.registry.nodes().await?;
        if !is_sweeper(&nodes, &self.cfg.node, now) {
            return Ok(DeadlineSweepReport::default());
        }
        let page = u32::try_from(OVERDUE_DEADLINES_PAGE).unwrap_or(u32::MAX);
        let records = self.registry.overdue_deadlines(now, page).await?;
        let overdue: Vec<OverdueSession> = records.iter().filter_map(overdue_session).collect();
        Ok(self
            .drain_subtrees(deadline_drain_roots(&overdue, now), StopReason::Deadline)
            .await)
    }

    /// Drains each of `roots`' subtrees on its own with stop reason `reason` (the deadline and
    /// budget sweeps); a drain that fails is reported and retried by the next sweep.
    pub(crate) async fn drain_subtrees(
        self: &Arc<Self>,
        roots: Vec<SessionId>,
        reason: StopReason,
    ) -> DeadlineSweepReport {
        let mut report = DeadlineSweepReport::default();
        for root in roots {
            match self.drain(vec![root.clone()], None, reason).await {
                Ok(drain) => {
                    tracing::info!(session = %root, reason = reason.as_str(), disposed = drain.totals.released + drain.totals.registry_only, "subtree drained");
                    report.drained.push(root);
                }
                Err(e) => {
                    tracing::warn!(session = %root, reason = reason.as_str(), error = %e, "drain failed; next sweep retries");
                    report.failed.push((root, e.to_string()));
                }
            }
        }
        report
    }
}
